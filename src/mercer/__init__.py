"""mercer: kernel methods that scale, with the scikit-learn API, on CPU and GPU.

>>> import mercer
>>> from mercer.kernels import RBF, Linear
>>> model = mercer.KernelRidge(alpha=1.0, kernel=0.5 * RBF(gamma=0.1) + Linear()).fit(X, y)
"""

__version__ = "0.1.0"  # before the imports (PEP 8), so that it is there while they run

from . import approx, kernels, linalg, models
from ._config import Config, config_context, get_config, set_config
from .approx import (IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap, RandomFourierFeatures,
                     RandomMaclaurin, TensorSketch)
from .models import *  # noqa: F403  (every estimator, also as mercer.<Name>)
from .models import __all__ as _MODELS

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
    "set_config",
]
