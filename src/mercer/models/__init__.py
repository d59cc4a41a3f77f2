"""Estimators with the scikit-learn API, one subpackage per family.

Each name is imported from its family on first use (PEP 562), so ``from mercer import KernelRidge``
imports the ridge family only, not the GP, clustering or SVM code (and their imports).
"""

from typing import TYPE_CHECKING

#: family subpackage -> the public names it defines
_FAMILIES = {
    "cluster": ("KernelAgglomerative", "KernelKMeans", "KMeans", "plot_dendrogram"),
    "decomposition": ("ApproximateKernelPCA", "KernelPCA"),
    "gp": ("GaussianProcessRegressor", "SparseGPRegressor"),
    "linear": ("KernelLogisticRegression", "KernelPerceptron"),
    "mkl": ("MKLClassifier", "MKLRegressor"),
    "neighbors": ("KernelKNeighborsClassifier", "KernelKNeighborsRegressor", "KernelRadiusNeighborsClassifier",
                  "KernelRadiusNeighborsRegressor"),
    "ridge": ("KernelRidge", "KernelRidgeClassifier", "KernelRidgeCV", "NystroemKernelRidge",
              "NystroemKernelRidgeClassifier", "RandomFeatureRidge", "SketchedKernelRidge"),
    "svm": ("BudgetSVC", "KernelSVC", "ReducedSetSVC"),
}
_ORIGIN = {name: family for family, names in _FAMILIES.items() for name in names}

if TYPE_CHECKING:  # the names as type checkers see them; at run time __getattr__ imports them
    from .cluster import KernelAgglomerative, KernelKMeans, KMeans, plot_dendrogram  # noqa: F401
    from .decomposition import ApproximateKernelPCA, KernelPCA  # noqa: F401
    from .gp import GaussianProcessRegressor, SparseGPRegressor  # noqa: F401
    from .linear import KernelLogisticRegression, KernelPerceptron  # noqa: F401
    from .mkl import MKLClassifier, MKLRegressor  # noqa: F401
    from .neighbors import (KernelKNeighborsClassifier, KernelKNeighborsRegressor,  # noqa: F401
                            KernelRadiusNeighborsClassifier, KernelRadiusNeighborsRegressor)
    from .ridge import (KernelRidge, KernelRidgeClassifier, KernelRidgeCV, NystroemKernelRidge,  # noqa: F401
                        NystroemKernelRidgeClassifier, RandomFeatureRidge, SketchedKernelRidge)
    from .svm import BudgetSVC, KernelSVC, ReducedSetSVC  # noqa: F401


def __getattr__(name: str):
    import importlib

    if name in _FAMILIES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _ORIGIN:
        value = getattr(importlib.import_module(f"{__name__}.{_ORIGIN[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_FAMILIES) | set(_ORIGIN))


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
