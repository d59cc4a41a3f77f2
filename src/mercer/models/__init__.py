"""Estimators with the scikit-learn API, one subpackage per family."""

from .cluster import KernelAgglomerative, KernelKMeans, KMeans, plot_dendrogram
from .decomposition import ApproximateKernelPCA, KernelPCA
from .gp import GaussianProcessRegressor, SparseGPRegressor
from .linear import KernelLogisticRegression, KernelPerceptron
from .mkl import MKLClassifier, MKLRegressor
from .neighbors import (KernelKNeighborsClassifier, KernelKNeighborsRegressor, KernelRadiusNeighborsClassifier,
                        KernelRadiusNeighborsRegressor)
from .ridge import (KernelRidge, KernelRidgeClassifier, KernelRidgeCV, NystroemKernelRidge,
                    NystroemKernelRidgeClassifier, RandomFeatureRidge, SketchedKernelRidge)
from .svm import BudgetSVC, KernelSVC, ReducedSetSVC

__all__ = [
    "ApproximateKernelPCA",
    "BudgetSVC",
    "GaussianProcessRegressor",
    "KMeans",
    "KernelAgglomerative",
    "KernelKMeans",
    "KernelKNeighborsClassifier",
    "KernelKNeighborsRegressor",
    "KernelLogisticRegression",
    "KernelPCA",
    "KernelPerceptron",
    "KernelRadiusNeighborsClassifier",
    "KernelRadiusNeighborsRegressor",
    "KernelRidge",
    "KernelRidgeCV",
    "KernelRidgeClassifier",
    "KernelSVC",
    "MKLClassifier",
    "MKLRegressor",
    "NystroemKernelRidge",
    "NystroemKernelRidgeClassifier",
    "RandomFeatureRidge",
    "ReducedSetSVC",
    "SketchedKernelRidge",
    "SparseGPRegressor",
    "plot_dendrogram",
]
