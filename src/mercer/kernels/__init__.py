"""Kernel functions: pure maths on torch tensors (any device, float32 or float64).

>>> from mercer.kernels import RBF, Linear
>>> k = 0.5 * RBF(gamma=0.1) + Linear()
>>> K = k(X)            # (n, n)
>>> K_xz = k(X, Z)      # (n, m)
>>> d = k.diag(X)       # (n,)

A kernel class declares each hyperparameter once (:class:`Param`, in its ``PARAMS``); see
:class:`Kernel` for what is derived from the declaration.
"""

from ._base import Constant, Kernel, Product, Scaled, Sum
from ._columns import Columns
from ._distances import DistanceCache
from ._checks import MercerReport, check_mercer
from ._dot_product import Linear, Polynomial, Quadratic, Sigmoid
from ._extra import Cosine, ExpSineSquared, RationalQuadratic, White
from ._function import FunctionKernel
from ._histogram import AdditiveChi2, Chi2
from ._hyperparameters import Hyperparameter, LearnableKernel
from ._params import Param
from ._precomputed import Precomputed
from ._registry import KERNEL_CONSTRAINTS, KERNELS, parse_kernel_spec, resolve_kernel
from ._sets import HistogramIntersection, Intersection, encode_sets
from ._sklearn import from_sklearn, is_sklearn_kernel
from ._stationary import RBF, Gaussian, Laplacian, Matern, squared_distances

__all__ = [
    "KERNELS",
    "KERNEL_CONSTRAINTS",
    "RBF",
    "AdditiveChi2",
    "Chi2",
    "Columns",
    "Constant",
    "Cosine",
    "DistanceCache",
    "ExpSineSquared",
    "FunctionKernel",
    "Gaussian",
    "HistogramIntersection",
    "Hyperparameter",
    "Intersection",
    "Kernel",
    "Laplacian",
    "LearnableKernel",
    "Linear",
    "Matern",
    "MercerReport",
    "Param",
    "Polynomial",
    "Precomputed",
    "Product",
    "Quadratic",
    "RationalQuadratic",
    "Scaled",
    "Sigmoid",
    "Sum",
    "White",
    "check_mercer",
    "encode_sets",
    "from_sklearn",
    "is_sklearn_kernel",
    "parse_kernel_spec",
    "resolve_kernel",
    "squared_distances",
]
