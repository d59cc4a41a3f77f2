"""Estimators with the scikit-learn API."""

from .gp import GaussianProcessRegressor, SparseGPRegressor
from .kernel_learning import KernelRidgeCV
from .mkl import MKLClassifier, MKLRegressor
from .nystroem import NystroemKernelRidge, NystroemKernelRidgeClassifier
from .pca import KernelPCA
from .random_features import RandomFeatureRidge
from .ridge import KernelRidge, KernelRidgeClassifier

__all__ = [
    "GaussianProcessRegressor",
    "KernelRidgeCV",
    "MKLClassifier",
    "MKLRegressor",
    "SparseGPRegressor",
    "KernelPCA",
    "KernelRidge",
    "KernelRidgeClassifier",
    "NystroemKernelRidge",
    "NystroemKernelRidgeClassifier",
    "RandomFeatureRidge",
]
