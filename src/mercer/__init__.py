"""mercer: kernel methods that scale, with the scikit-learn API, on CPU and GPU.

>>> import mercer
>>> from mercer.kernels import RBF, Linear
>>> model = mercer.KernelRidge(alpha=1.0, kernel=0.5 * RBF(gamma=0.1) + Linear()).fit(X, y)
"""

__version__ = "0.1.0"  # before the imports (PEP 8), so that it is there while they run

from . import approx, kernels, linalg, models
from ._config import Config, config_context, get_config, set_config
from ._progress import progress
from .approx import (IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap, RandomFourierFeatures,
                     RandomMaclaurin, TensorSketch)
from .models import *  # noqa: F403  (every estimator, also as mercer.<Name>)
from .models import __all__ as _MODELS

#: submodules imported on first use (``mercer.io.save``): they cost nothing until then. Not in
#: ``__all__``: ``from mercer import *`` must not shadow the standard library's ``io``.
_LAZY_SUBMODULES = ("io", "plotting")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")  # also binds it on the package
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


__all__ = _MODELS + [
    "Config",
    "IncompleteCholesky",
    "LandmarkFeatures",
    "Nystroem",
    "PolynomialFeatureMap",
    "RandomFourierFeatures",
    "RandomMaclaurin",
    "TensorSketch",
    "models",
    "__version__",
    "approx",
    "config_context",
    "get_config",
    "kernels",
    "linalg",
    "progress",
    "set_config",
]
