"""Explicit finite feature maps of dot-product kernels (the seeds' N-vs-D choice).

For :math:`k(x, y) = (\\gamma \\langle x, y \\rangle + c)^p`, expanding the power with the
multinomial theorem gives one coordinate per monomial of degree <= p in (x_1, ..., x_d):

.. math:: \\phi_\\kappa(x) = \\sqrt{\\tbinom{p}{\\kappa_0, \\kappa_1, \\dots, \\kappa_d}
          c^{\\kappa_0} \\gamma^{p - \\kappa_0}} \\prod_i x_i^{\\kappa_i},
          \\qquad \\kappa_0 + \\dots + \\kappa_d = p,

so that :math:`\\langle \\phi(x), \\phi(y) \\rangle = k(x, y)` exactly; there are
:math:`\\binom{d + p}{p}` coordinates when ``c > 0`` (those with ``kappa_0 > 0`` vanish when
``c = 0``, leaving :math:`\\binom{d + p - 1}{p}`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import as_output, resolve_device, resolve_dtype, to_tensor
from .._sparse import is_sparse, is_sparse_input
from .._validation import check_array_like, check_params
from ..kernels import Constant, Kernel, Linear, Polynomial, Scaled, Sum
from ..linalg import MemoryBudgetError, StreamedMethodsMixin, default_memory_budget, format_bytes
from ._constraints import COMPUTE_CONSTRAINTS, POLYNOMIAL_CONSTRAINTS
from ._finite import check_finite
from ._stream import fit_source

__all__ = ["PolynomialFeatureMap", "explicit_feature_map", "polynomial_feature_dim"]


def polynomial_feature_dim(n_features: int, degree: int, coef0: float) -> int:
    """Number of coordinates of the explicit map: C(d + p, p), or C(d + p - 1, p) when c = 0."""
    return math.comb(n_features + degree, degree) if coef0 > 0 else math.comb(n_features + degree - 1, degree)


def _monomials(n_features: int, degree: int, coef0: float):
    """Index table (D, p) into the augmented input [x_1..x_d, 1] and the sqrt coefficients (D,)."""
    first = 0 if coef0 > 0 else None
    combos = [c for c in itertools.combinations_with_replacement(range(n_features + 1), degree)
              if first is not None or n_features not in c]
    index = np.asarray(combos, dtype=np.int64).reshape(len(combos), degree)
    coef = np.empty(len(combos))
    for row, combo in enumerate(combos):
        counts = np.bincount(np.asarray(combo), minlength=n_features + 1)
        multinomial = math.factorial(degree)
        for c in counts:
            multinomial //= math.factorial(int(c))
        coef[row] = math.sqrt(multinomial)
    return index, coef


def _count(k: int) -> str:
    """An integer count, however large (``2**4000`` is no float)."""
    return f"{k:,}" if k < 10**15 else f"about 10^{len(str(k)) - 1}"


def _count_bytes(k: int) -> str:
    return format_bytes(k) if k < 2**60 else f"{_count(k)} bytes"


class _PolyMap:
    """Callable feature map of one polynomial kernel on ``n_features`` inputs."""

    def __init__(self, n_features: int, degree: int, gamma: float, coef0: float, *, owner: str = "PolynomialFeatureMap"):
        self.n_features, self.degree, self.gamma, self.coef0 = n_features, degree, gamma, coef0
        # its tables, before they are built: (D, p) indices, D coefficients, and the (D, d + 1) powers
        dim = polynomial_feature_dim(n_features, degree, coef0)
        need = dim * (degree + n_features + 2) * np.dtype(np.int64).itemsize
        budget = default_memory_budget()
        if need > budget:
            raise MemoryBudgetError(
                f"{owner}: degree={degree} on {n_features} features makes {_count(dim)} monomial features, whose "
                f"tables need {_count_bytes(need)}, more than the memory budget of {format_bytes(budget)}. Use a smaller "
                "degree, or TensorSketch / RandomMaclaurin (n_components random features of the same kernel).")
        self.index, self.coef = _monomials(n_features, degree, coef0)
        self.dim = len(self.coef)

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        if is_sparse(X):  # a block of rows (callers block them): its features are dense, C(d + p, p) of them
            X = X.to_dense()
        ones = torch.full((X.shape[0], 1), math.sqrt(self.coef0), dtype=X.dtype, device=X.device)
        Xa = torch.cat([X * math.sqrt(self.gamma), ones], dim=1)
        index = torch.as_tensor(self.index, device=X.device)
        out = Xa[:, index[:, 0]].clone()
        for j in range(1, self.degree):
            out.mul_(Xa[:, index[:, j]])
        return out.mul_(torch.as_tensor(self.coef, dtype=X.dtype, device=X.device))


class _ConcatMap:
    def __init__(self, maps, scales):
        self.maps, self.scales = maps, scales
        self.dim = sum(m.dim for m in maps)

    def __call__(self, X):
        return torch.cat([m(X) * math.sqrt(s) for m, s in zip(self.maps, self.scales)], dim=1)


class _ConstantMap:
    def __init__(self, value: float):
        self.value, self.dim = value, 1

    def __call__(self, X):
        return torch.full((X.shape[0], 1), math.sqrt(self.value), dtype=X.dtype, device=X.device)


def explicit_feature_map(kernel: Kernel, n_features: int):
    """A callable ``phi`` with ``phi(X) @ phi(Z).T == kernel(X, Z)`` and its dimension ``phi.dim``,
    for kernels with a finite explicit map (Linear, Polynomial, Quadratic, Constant, positive
    scalings and sums of these); ``None`` for every other kernel."""
    if isinstance(kernel, Linear):
        return _PolyMap(n_features, 1, 1.0, 0.0)
    if isinstance(kernel, Polynomial):
        if not isinstance(kernel.degree, int):  # a non-integer power: no finite monomial expansion
            return None
        gamma = 1.0 / n_features if kernel.gamma is None else float(kernel.gamma)
        return _PolyMap(n_features, kernel.degree, gamma, float(kernel.coef0))
    if isinstance(kernel, Constant):
        return _ConstantMap(kernel.value)
    if isinstance(kernel, Scaled) and not isinstance(kernel.scale, torch.Tensor):
        inner = explicit_feature_map(kernel.kernel, n_features)
        return None if inner is None else _ConcatMap([inner], [kernel.scale])
    if isinstance(kernel, Sum):
        maps = [explicit_feature_map(k, n_features) for k in kernel.kernels]
        return None if any(m is None for m in maps) else _ConcatMap(maps, [1.0] * len(maps))
    return None


class PolynomialFeatureMap(TransformerMixin, StreamedMethodsMixin, BaseEstimator):
    """Explicit feature map of the polynomial kernel :math:`(\\gamma \\langle x, y\\rangle + c)^p`.

    ``transform(X) @ transform(Z).T`` equals ``Polynomial(degree, gamma, coef0)(X, Z)`` exactly.
    Linear models trained on these features are the parametric twin of kernel models with the
    polynomial kernel.

    Parameters
    ----------
    degree : int, default=2
    coef0 : float, default=1.0
        ``c >= 0``; with ``c = 0`` only the monomials of degree exactly ``p`` remain.
    gamma : float, default=1.0
    device, dtype : optional
        Where and in which precision to compute (numpy in -> numpy out; torch in -> torch out).

    Attributes
    ----------
    n_output_features_ : int
        ``C(d + p, p)`` (``C(d + p - 1, p)`` when ``coef0 = 0``).
    powers_ : ndarray of shape (n_output_features_, n_features_in_)
        Exponent of each input in each output coordinate.
    """

    _parameter_constraints: dict = {
        **POLYNOMIAL_CONSTRAINTS,
        "device": COMPUTE_CONSTRAINTS["device"],
        "dtype": COMPUTE_CONSTRAINTS["dtype"],
    }

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: the feature map, a pure function of the parameters."""
        self._map = _PolyMap(self.n_features_in_, int(self.degree), float(self.gamma), float(self.coef0))

    def __init__(self, degree=2, coef0=1.0, gamma=1.0, *, device=None, dtype=None):
        self.degree = degree
        self.coef0 = coef0
        self.gamma = gamma
        self.device = device
        self.dtype = dtype

    def fit(self, X, y=None):
        """Build the map for ``X.shape[1]`` features (streamed ``X``, see :mod:`mercer.sources`, is not read)."""
        check_params(self)
        source = fit_source(self, X)
        if is_sparse_input(X) or (source is not None and source.sparse):  # scipy / torch sparse, or a sparse source
            raise TypeError(
                f"{type(self).__name__} cannot fit sparse X: its C(d + degree, degree) features are dense "
                f"(about d^{int(self.degree)} / {int(self.degree)}! of them for d input features). Use TensorSketch or "
                "RandomMaclaurin (sketches of the same polynomial kernel that take sparse X), or "
                "kernel='poly' in the kernel estimators, or pass X.toarray() when d is small.")
        X = source if source is not None else check_array_like(self, X, reset=True)
        d = X.shape[1]
        self._map = _PolyMap(d, int(self.degree), float(self.gamma), float(self.coef0))
        powers = np.zeros((self._map.dim, d + 1), dtype=np.int64)
        for row, combo in enumerate(self._map.index):
            np.add.at(powers[row], combo, 1)
        self.powers_ = powers[:, :d]
        self.n_output_features_ = self._map.dim
        return self

    def transform(self, X):
        check_is_fitted(self)
        Xv = check_array_like(self, X, reset=False)
        dev = resolve_device(self.device if not isinstance(Xv, torch.Tensor) else (self.device or Xv.device))
        Xt = to_tensor(Xv, dtype=resolve_dtype(self.dtype, Xv), device=dev)
        out = self._map(Xt)
        check_finite(out, type(self).__name__, "the features", X=Xt,
                     kernel=Polynomial(degree=int(self.degree), gamma=float(self.gamma), coef0=float(self.coef0)))
        return as_output(out, X)

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self)
        names = input_features if input_features is not None else getattr(
            self, "feature_names_in_", [f"x{i}" for i in range(self.n_features_in_)])
        out = []
        for row in self.powers_:
            terms = [f"{n}^{p}" if p > 1 else str(n) for n, p in zip(names, row) if p]
            out.append(" ".join(terms) if terms else "1")
        return np.asarray(out, dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
