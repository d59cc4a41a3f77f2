"""mercer: kernel methods that scale, with the scikit-learn API, on CPU and GPU.

>>> import mercer
>>> from mercer.kernels import RBF, Linear
>>> model = mercer.KernelRidge(alpha=1.0, kernel=0.5 * RBF(gamma=0.1) + Linear()).fit(X, y)

The public names are imported on first use (PEP 562): ``import mercer`` itself imports neither
torch nor scikit-learn, so the ``mercer`` command (a subpackage) answers ``--help`` at once;
``mercer.KernelRidge`` or ``from mercer import KernelRidge`` imports what that name needs.
"""

from typing import TYPE_CHECKING

from . import models as _models  # its package module only: the registry, no estimator (PEP 562)
from ._threads import apply_openmp_wait_policy

__version__ = "0.1.0"

apply_openmp_wait_policy()  # before torch loads its OpenMP runtime (mercer._threads, rule 1)

#: submodules in ``__all__``, imported on first use (``import mercer.kernels`` works as for any package)
_SUBMODULES = ("approx", "kernels", "linalg", "models")
#: submodules imported on first use (``mercer.io.save``) and not in ``__all__`` (``from mercer import *``
#: must not shadow the standard library's ``io``); ``mercer.distributed`` needs dask: import it by name
_LAZY_SUBMODULES = ("datasets", "io", "kmeans", "plotting", "sources")
#: every estimator of ``mercer.models.__all__``, also as ``mercer.<Name>``; the feature maps of
#: ``mercer.approx`` as ``mercer.<Name>`` too: both from the registry (``mercer.models._registry``,
#: plain data: importing it imports neither torch nor scikit-learn)
_MODELS = tuple(_models.__all__)
_APPROX = tuple(sorted(e.name for e in _models.ESTIMATORS if e.module == f"{__name__}.approx"))
#: public name -> the submodule that defines it
_ORIGIN = {
    **dict.fromkeys(_MODELS, "models"),
    **dict.fromkeys(_APPROX, "approx"),
    **dict.fromkeys(("Config", "config_context", "get_config", "set_config"), "_config"),
    "progress": "_progress",
}

if TYPE_CHECKING:  # the names as type checkers and editors see them; at run time __getattr__ imports them
    from . import approx, kernels, linalg, models  # noqa: F401  (not io: it imports the package, then plotting)
    from ._config import Config, config_context, get_config, set_config  # noqa: F401
    from ._progress import progress  # noqa: F401
    from .approx import (IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap,  # noqa: F401
                         RandomFourierFeatures, RandomMaclaurin, TensorSketch)
    from .models import *  # noqa: F401, F403


def __getattr__(name: str):
    import importlib

    if name in _SUBMODULES or name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")  # also binds it on the package
    if name in _ORIGIN:
        value = getattr(importlib.import_module(f"{__name__}.{_ORIGIN[name]}"), name)
        globals()[name] = value  # the next look-up is a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_SUBMODULES) | set(_ORIGIN))


__all__ = [*_MODELS, *_APPROX, "Config", "models", "__version__", "approx", "config_context", "get_config", "kernels",
           "linalg", "progress", "set_config"]
