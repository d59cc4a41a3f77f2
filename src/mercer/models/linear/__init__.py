"""Linear models in feature space: the kernel perceptron and kernel logistic regression."""

from ._logistic import KernelLogisticRegression
from ._perceptron import KernelPerceptron

__all__ = ["KernelLogisticRegression", "KernelPerceptron"]
