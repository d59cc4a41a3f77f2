"""Estimators with the scikit-learn API."""

from .nystroem import NystroemKernelRidge, NystroemKernelRidgeClassifier
from .pca import KernelPCA
from .random_features import RandomFeatureRidge
from .ridge import KernelRidge, KernelRidgeClassifier

__all__ = [
    "KernelPCA",
    "KernelRidge",
    "KernelRidgeClassifier",
    "NystroemKernelRidge",
    "NystroemKernelRidgeClassifier",
    "RandomFeatureRidge",
]
