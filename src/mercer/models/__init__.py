"""Estimators with the scikit-learn API."""

from .pca import KernelPCA
from .ridge import KernelRidge, KernelRidgeClassifier

__all__ = ["KernelPCA", "KernelRidge", "KernelRidgeClassifier"]
