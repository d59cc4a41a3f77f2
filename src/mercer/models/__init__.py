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

# The names as type checkers see them (at run time __getattr__ imports them): every family's public
# names (tests/test_registry.py checks that each family's __all__ is the registry's names for it).
if TYPE_CHECKING:
    from .cluster import *  # noqa: F401, F403
    from .decomposition import *  # noqa: F401, F403
    from .gp import *  # noqa: F401, F403
    from .linear import *  # noqa: F401, F403
    from .mkl import *  # noqa: F401, F403
    from .neighbors import *  # noqa: F401, F403
    from .ridge import *  # noqa: F401, F403
    from .svm import *  # noqa: F401, F403


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
