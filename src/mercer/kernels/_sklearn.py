"""scikit-learn's Gaussian-process kernels (``sklearn.gaussian_process.kernels``) as mercer kernels.

:func:`from_sklearn` converts a scikit-learn kernel object, composites included, into the mercer
kernel with the same covariance function; :func:`mercer.kernels.resolve_kernel` calls it, so every
estimator's ``kernel=`` accepts scikit-learn's kernels.

scikit-learn's hyperparameter bounds are kept on the converted kernel as a ``bounds`` attribute
(its format: :func:`from_sklearn`), and the estimators that learn their kernel use them (a
``"fixed"`` one is not learned; see :class:`mercer.kernels.LearnableKernel`). It is not a parameter (not in ``get_params``):
pickling and ``copy.deepcopy`` keep it; ``clone``, ``set_params`` and ``mercer.io`` rebuild the
kernel from its parameters, without it. An estimator keeps the scikit-learn kernel it was given
and converts it in each ``fit``, so its clones and searches see scikit-learn's parameters.

A leaf is converted from its declaration (:class:`mercer.kernels.Param`): each parameter declared
with ``sklearn=<name>`` takes the value of scikit-learn's hyperparameter of that name, through the
parameter's unit (``learn``: RBF's ``gamma = 1 / (2 l^2)`` from ``length_scale = l``) for its
value and its bounds; a vector (an anisotropic kernel) only where the parameter is ``per_feature``.

scikit-learn is not imported here: a value can only be one of its kernels once
``sklearn.gaussian_process.kernels`` has been imported, so :func:`is_sklearn_kernel` looks the
module up in ``sys.modules`` (importing it would add ~15-20 ms to ``import mercer``).
"""

from __future__ import annotations

import sys

import numpy as np

from ._base import Constant, Kernel, Product, Scaled, Sum
from ._params import box, from_length
from ._dot_product import Linear, Polynomial, Sigmoid
from ._extra import Cosine, ExpSineSquared, RationalQuadratic, White
from ._histogram import AdditiveChi2, Chi2
from ._stationary import RBF, Laplacian, Matern

__all__ = ["from_sklearn", "is_sklearn_kernel", "SKLEARN_KERNEL"]

_MODULE = "sklearn.gaussian_process.kernels"

#: ``PairwiseKernel`` metrics (scikit-learn's ``PAIRWISE_KERNEL_FUNCTIONS``) -> mercer class, and
#: the keywords scikit-learn passes to each (its ``KERNEL_PARAMS``: the others are dropped).
_METRICS: dict[str, tuple[type[Kernel], tuple[str, ...]]] = {
    "additive_chi2": (AdditiveChi2, ()),
    "chi2": (Chi2, ("gamma",)),
    "cosine": (Cosine, ()),
    "laplacian": (Laplacian, ("gamma",)),
    "linear": (Linear, ()),
    "poly": (Polynomial, ("degree", "coef0", "gamma")),
    "polynomial": (Polynomial, ("degree", "coef0", "gamma")),
    "rbf": (RBF, ("gamma",)),
    "sigmoid": (Sigmoid, ("coef0", "gamma")),
}
_MATERN_NUS = (0.5, 1.5, 2.5, float("inf"))
_SUPPORTED = (
    "ConstantKernel, RBF, Matern (nu in {0.5, 1.5, 2.5, inf}), RationalQuadratic, ExpSineSquared, "
    f"DotProduct, WhiteKernel, PairwiseKernel (metric among {sorted(_METRICS)}), and Sum, Product and "
    "Exponentiation (integer exponent >= 0) of these"
)


def is_sklearn_kernel(value) -> bool:
    """Whether ``value`` is a ``sklearn.gaussian_process.kernels.Kernel`` (without importing it)."""
    module = sys.modules.get(_MODULE)
    return module is not None and isinstance(value, module.Kernel)


class _SklearnKernel:
    """Parameter constraint (``mercer._validation``): a scikit-learn GP kernel."""

    def accepts(self, value) -> bool:
        return is_sklearn_kernel(value)

    def __str__(self) -> str:
        return "a scikit-learn GP kernel"


#: The constraint of ``KERNEL_CONSTRAINTS["kernel"]`` that accepts scikit-learn's kernels.
SKLEARN_KERNEL = _SklearnKernel()


def from_sklearn(kernel) -> Kernel:
    r"""The mercer kernel equal to a scikit-learn Gaussian-process kernel.

    Each scikit-learn kernel becomes (``l`` a length scale, ``c`` a constant):

    * ``ConstantKernel(c)`` -> ``Constant(c)``;
    * ``RBF(l)``, :math:`e^{-\|x-y\|^2 / (2 l^2)}` -> ``RBF(sigma=l)``, i.e.
      ``gamma = 1 / (2 l^2)``; anisotropic ``RBF([l_1, ..., l_d])`` ->
      ``RBF(sigma=[l_1, ..., l_d])`` (one ``gamma`` per feature, ARD);
    * ``Matern(l, nu)`` with ``nu`` in {0.5, 1.5, 2.5} -> ``Matern(nu, length_scale=l)`` (``l``
      a vector too); ``Matern(l, nu=inf)`` -> ``RBF(sigma=l)``;
    * ``RationalQuadratic(l, alpha)``, ``ExpSineSquared(l, p)`` -> the mercer kernels of those
      names and parameters;
    * ``DotProduct(s)``, :math:`s^2 + \langle x, y \rangle` -> ``Linear() + Constant(s^2)``;
    * ``WhiteKernel(s)`` -> ``White(s)``;
    * ``PairwiseKernel(gamma, metric, pairwise_kernels_kwargs)`` -> the mercer kernel of that
      name (``"rbf"``, ``"poly"``, ...) with the keywords scikit-learn passes it;
    * ``k1 + k2``, ``k1 * k2`` -> ``Sum``, ``Product`` of the converted parts, and
      ``ConstantKernel(c) * k`` (``c > 0``) -> ``Scaled(c, k)``;
    * ``k ** n`` (an integer ``n >= 0``) -> the product of ``n`` copies of ``k``.

    The converted kernel evaluates to the same numbers as scikit-learn's (up to round-off:
    mercer's RBF and RationalQuadratic use the GEMM expansion of squared distances). One
    difference: ``WhiteKernel`` is ``noise_level * I`` on ``k(X)`` in both, but scikit-learn
    gives 0 for ``k(X, X)`` with ``X`` passed twice, mercer ``noise_level * I`` (the same memory
    is the same input, see :class:`White`).

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        A kernel built from the kernels above. Anything else (``CompoundKernel``, a ``Matern``
        of another ``nu``, a non-integer exponent, a ``PairwiseKernel`` with a callable metric,
        a user subclass) raises ``ValueError`` naming it and listing what is supported.

    Returns
    -------
    kernel : Kernel
        Every node of it that the conversion created has a ``bounds`` attribute: a dict from
        parameter names as in its ``get_params(deep=True)`` (``"gamma"``, ``"k1__scale"``,
        ``"kernel__length_scale"``) to scikit-learn's bounds ``(low, high)`` expressed in
        mercer's parameter (an RBF length-scale box ``(a, b)`` is the ``gamma`` box
        ``(1 / (2 b^2), 1 / (2 a^2))``; a ``DotProduct``'s ``sigma_0`` box is the ``Constant``'s
        ``(a^2, b^2)``), with tuples of per-feature values for ``low`` and ``high`` when the
        parameter is a vector (anisotropic kernels), or ``"fixed"``; the copies of an
        exponentiated kernel each get its bounds. Not a parameter: ``clone`` and ``set_params``
        drop it, pickling keeps it.

    Examples
    --------
    >>> from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    >>> k = from_sklearn(ConstantKernel(2.0) * RBF(0.5) + WhiteKernel(0.1))
    >>> k
    (2 * RBF(gamma=2) + White(noise_level=0.1))
    >>> sorted(k.bounds)
    ['k1__kernel__gamma', 'k1__scale', 'k2__noise_level']
    >>> k.bounds["k1__scale"]
    (1e-05, 100000.0)
    """
    return _convert(kernel, "from_sklearn")


def _convert(kernel, owner: str) -> Kernel:
    """:func:`from_sklearn`, with ``owner`` (the estimator) named in its errors."""
    if not is_sklearn_kernel(kernel):
        raise ValueError(f"The 'kernel' parameter of {owner} must be a scikit-learn GP kernel "
                         f"(sklearn.gaussian_process.kernels.Kernel). Got {kernel!r} instead.")
    name = type(kernel).__name__
    convert = _CONVERTERS.get(name)
    if convert is None or type(kernel) is not getattr(sys.modules[_MODULE], name):
        _refuse(owner, kernel, "it has no mercer equivalent")
    return convert(kernel, owner)


def _refuse(owner: str, kernel, why: str):
    try:
        text = repr(kernel)
    except (TypeError, ValueError):  # scikit-learn's repr formats some parameters as scalars
        text = f"{type(kernel).__name__}({kernel.get_params(deep=False)})"
    raise ValueError(f"The 'kernel' parameter of {owner} must be a scikit-learn kernel built from {_SUPPORTED}. "
                     f"Got {text} instead: {why}.")


# -- bounds ------------------------------------------------------------------------------------
def _bounds(kernel, name: str, transform=None):
    """scikit-learn's bounds of hyperparameter ``name``: ``(low, high)`` (tuples per dimension for
    a vector), mapped by ``transform(low, high)`` into mercer's parameter, or ``"fixed"``."""
    hp = getattr(kernel, f"hyperparameter_{name}")
    if hp.fixed:
        return "fixed"
    b = np.asarray(hp.bounds, dtype=np.float64).reshape(-1, 2)
    low, high = (b[:, 0], b[:, 1]) if transform is None else transform(b[:, 0], b[:, 1])
    if low.size == 1:
        return float(low[0]), float(high[0])
    return tuple(map(float, low)), tuple(map(float, high))


def _with_bounds(kernel: Kernel, own: dict) -> Kernel:
    """Set ``kernel.bounds``: ``own`` and the parts' bounds under their parameter names."""
    out = dict(own)
    for name, part in kernel.get_params(deep=False).items():
        if isinstance(part, Kernel):
            out.update((f"{name}__{k}", v) for k, v in getattr(part, "bounds", {}).items())
    kernel.bounds = out
    return kernel


# -- leaves ------------------------------------------------------------------------------------
def _leaf(cls: type[Kernel]):
    """The converter of the scikit-learn kernel of ``cls``'s formula, from ``cls.PARAMS``."""
    declared = [p for p in cls.PARAMS if p.sklearn is not None]

    def convert(k, owner):
        params, own = {}, {}
        for p in declared:
            unit = p.learn or "length"
            values = np.asarray(getattr(k, p.sklearn), dtype=np.float64).reshape(-1)
            if values.size > 1 and not p.per_feature:  # scikit-learn refuses it too
                names = _per_feature_kernels()
                _refuse(owner, k, f"an anisotropic (vector) {p.sklearn} is supported for "
                        f"{' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)} only")
            converted = [from_length(unit, float(v)) for v in values]
            params[p.name] = converted if values.size > 1 else converted[0]
            if p.learn is not None:
                own[p.name] = _bounds(k, p.sklearn, lambda lo, hi, unit=unit: box(unit, lo, hi))
        return _with_bounds(cls(**params), own)

    return convert


def _per_feature_kernels() -> list[str]:
    return [name for name, cls in _LEAVES.items() if any(p.per_feature and p.sklearn for p in cls.PARAMS)]


def _matern(k, owner):
    nu = float(k.nu)
    if nu not in _MATERN_NUS:
        _refuse(owner, k, f"mercer's Matern supports nu in {{0.5, 1.5, 2.5}} (and nu=inf, the RBF kernel), "
                f"not nu={k.nu!r}")
    if nu == float("inf"):
        return _CONVERTERS["RBF"](k, owner)
    return _leaf(Matern)(k, owner)


def _dot_product(k, owner):
    constant = _with_bounds(Constant(float(k.sigma_0) ** 2),
                            {"value": _bounds(k, "sigma_0", lambda lo, hi: (lo**2, hi**2))})
    return _with_bounds(Sum([_with_bounds(Linear(), {}), constant]), {})


def _pairwise(k, owner):
    metric = k.metric
    if not isinstance(metric, str) or metric not in _METRICS:
        _refuse(owner, k, f"PairwiseKernel's metric must be among {sorted(_METRICS)}, not {metric!r} "
                "(a callable metric is called per pair of rows by scikit-learn, per block by mercer)")
    cls, keywords = _METRICS[metric]
    given = {"gamma": k.gamma, **(k.pairwise_kernels_kwargs or {})}
    params = {key: value for key, value in given.items() if key in keywords}  # as scikit-learn's filter_params
    own = {"gamma": _bounds(k, "gamma")} if "gamma" in keywords else {}
    return _with_bounds(cls(**params), own)


# -- composites --------------------------------------------------------------------------------
def _sum(k, owner):
    return _with_bounds(Sum([_convert(k.k1, owner), _convert(k.k2, owner)]), {})


def _product(k, owner):
    a, b = _convert(k.k1, owner), _convert(k.k2, owner)
    for c, other in ((a, b), (b, a)):
        # c * k as Scaled(c, k), unless k is itself a constant or scaled (Scaled would merge the
        # two factors, and their bounds with them)
        if type(c) is Constant and c.value > 0 and not isinstance(other, (Constant, Scaled)):
            return _with_bounds(Scaled(c.value, other), {"scale": c.bounds["value"]})
    return _with_bounds(Product([a, b]), {})


def _exponentiation(k, owner):
    e = k.exponent
    if not (float(e).is_integer() and e >= 0):
        _refuse(owner, k, f"mercer has products of kernels, not real powers: the exponent must be an integer "
                f">= 0, not {e!r}")
    n = int(e)
    if n == 0:
        return _with_bounds(Constant(1.0), {"value": "fixed"})
    if n == 1:
        return _convert(k.kernel, owner)
    return _with_bounds(Product([_convert(k.kernel, owner) for _ in range(n)]), {})


#: scikit-learn's leaf kernels and the mercer class of the same formula (converted by ``_leaf``).
_LEAVES: dict[str, type[Kernel]] = {
    "ConstantKernel": Constant,
    "RBF": RBF,
    "Matern": Matern,
    "RationalQuadratic": RationalQuadratic,
    "ExpSineSquared": ExpSineSquared,
    "WhiteKernel": White,
}

_CONVERTERS = {
    **{name: _leaf(cls) for name, cls in _LEAVES.items()},
    "Matern": _matern,  # nu = inf is the RBF kernel
    "DotProduct": _dot_product,
    "PairwiseKernel": _pairwise,
    "Sum": _sum,
    "Product": _product,
    "Exponentiation": _exponentiation,
}
