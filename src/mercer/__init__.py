"""mercer: kernel methods that scale, with the scikit-learn API, on CPU and GPU.

>>> import mercer
>>> from mercer.kernels import RBF, Linear
>>> model = mercer.KernelRidge(alpha=1.0, kernel=0.5 * RBF(gamma=0.1) + Linear()).fit(X, y)
"""

from . import approx, kernels, linalg
from ._config import Config, config_context, get_config, set_config
from .approx import IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap, RandomFourierFeatures
from .models import (KernelPCA, KernelRidge, KernelRidgeClassifier, NystroemKernelRidge, NystroemKernelRidgeClassifier,
                     RandomFeatureRidge)

__version__ = "0.1.0"

__all__ = [
    "Config",
    "IncompleteCholesky",
    "KernelPCA",
    "KernelRidge",
    "KernelRidgeClassifier",
    "LandmarkFeatures",
    "Nystroem",
    "NystroemKernelRidge",
    "NystroemKernelRidgeClassifier",
    "PolynomialFeatureMap",
    "RandomFeatureRidge",
    "RandomFourierFeatures",
    "__version__",
    "approx",
    "config_context",
    "get_config",
    "kernels",
    "linalg",
    "set_config",
]
