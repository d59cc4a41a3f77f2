"""Estimators with the scikit-learn API."""

from .gp import GaussianProcessRegressor, SparseGPRegressor
from .kernel_learning import KernelRidgeCV
from .logistic import KernelLogisticRegression
from .mkl import MKLClassifier, MKLRegressor
from .nystroem import NystroemKernelRidge, NystroemKernelRidgeClassifier
from .pca import KernelPCA
from .perceptron import KernelPerceptron
from .random_features import RandomFeatureRidge
from .ridge import KernelRidge, KernelRidgeClassifier

__all__ = [
    "GaussianProcessRegressor",
    "KernelRidgeCV",
    "MKLClassifier",
    "MKLRegressor",
    "SparseGPRegressor",
    "KernelLogisticRegression",
    "KernelPCA",
    "KernelPerceptron",
    "KernelRidge",
    "KernelRidgeClassifier",
    "NystroemKernelRidge",
    "NystroemKernelRidgeClassifier",
    "RandomFeatureRidge",
]
