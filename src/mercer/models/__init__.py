"""Estimators with the scikit-learn API."""

from .approx_pca import ApproximateKernelPCA
from .cluster import KernelAgglomerative, KernelKMeans, KMeans, plot_dendrogram
from .gp import GaussianProcessRegressor, SparseGPRegressor
from .kernel_learning import KernelRidgeCV
from .logistic import KernelLogisticRegression
from .mkl import MKLClassifier, MKLRegressor
from .neighbors import (KernelKNeighborsClassifier, KernelKNeighborsRegressor, KernelRadiusNeighborsClassifier,
                        KernelRadiusNeighborsRegressor)
from .nystroem import NystroemKernelRidge, NystroemKernelRidgeClassifier
from .pca import KernelPCA
from .perceptron import KernelPerceptron
from .random_features import RandomFeatureRidge
from .sketched import SketchedKernelRidge
from .svm import BudgetSVC, KernelSVC, ReducedSetSVC
from .ridge import KernelRidge, KernelRidgeClassifier

__all__ = [
    "BudgetSVC",
    "KernelSVC",
    "ReducedSetSVC",
    "ApproximateKernelPCA",
    "SketchedKernelRidge",
    "KMeans",
    "KernelAgglomerative",
    "KernelKMeans",
    "KernelKNeighborsClassifier",
    "KernelKNeighborsRegressor",
    "KernelRadiusNeighborsClassifier",
    "KernelRadiusNeighborsRegressor",
    "plot_dendrogram",
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
