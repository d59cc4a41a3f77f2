"""Estimators with the scikit-learn API, one subpackage per family.

Each name is imported from its family on first use (PEP 562), so ``from mercer import KernelRidge``
imports the ridge family only, not the GP, clustering or SVM code (and their imports).

The names come from the registry, :data:`ESTIMATORS` (``mercer.models._registry``: plain data, one
entry per public estimator with its family, kind and the configurations scikit-learn's estimator
checks run on); ``mercer.__all__``, the command's ``--model`` names and :mod:`mercer.io`'s loadable
classes derive from it too.
"""

from typing import TYPE_CHECKING

from ._registry import ESTIMATORS, FUNCTIONS

#: family subpackage -> the public names it defines (from the registry, mercer.models._registry)
_FAMILIES: dict[str, tuple[str, ...]] = {}
for _entry in ESTIMATORS:
    if _entry.family is not None:
        _FAMILIES[_entry.family] = (*_FAMILIES.get(_entry.family, ()), _entry.name)
for _name, _family in FUNCTIONS.items():
    _FAMILIES[_family] = (*_FAMILIES.get(_family, ()), _name)
del _entry, _name, _family
_ORIGIN = {name: family for family, names in _FAMILIES.items() for name in names}

# The names as type checkers see them (at run time __getattr__ imports them): static imports cannot be
# derived, so tests/test_registry.py checks that they name the registry's entries, no more, no fewer.
if TYPE_CHECKING:
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


__all__ = sorted(_ORIGIN)  # the estimators of the registry and the families' other public functions
