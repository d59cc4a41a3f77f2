"""Random feature maps of the polynomial kernel: TensorSketch and random Maclaurin features.

Both approximate :math:`k(x, y) = (\\gamma \\langle x, y \\rangle + c)^p` by
:math:`\\langle z(x), z(y) \\rangle` with ``z(x)`` of dimension ``n_components`` (``m``), and both
are *unbiased*: :math:`E[\\langle z(x), z(y) \\rangle] = k(x, y)` over the random draw.

* :class:`TensorSketch` (Pham & Pagh, KDD 2013). With the augmented input
  :math:`a(x) = [\\sqrt{\\gamma} x, \\sqrt{c}]`, :math:`k(x, y) = \\langle a(x), a(y) \\rangle^p`.
  Draw ``p`` independent count sketches :math:`C_j(v) = \\sum_i s_j(i) v_i e_{h_j(i)}`
  (hash :math:`h_j: [d+1] \\to [m]`, sign :math:`s_j: [d+1] \\to \\{\\pm 1\\}`); the sketch of
  :math:`a(x)^{\\otimes p}` is the circular convolution of the ``p`` count sketches,
  :math:`z(x) = \\mathrm{IFFT}(\\prod_j \\mathrm{FFT}(C_j(a(x))))`, computed in
  :math:`O(p (d + m \\log m))` per point. Same construction as scikit-learn's
  ``PolynomialCountSketch``.
* :class:`RandomMaclaurin` (Kar & Karnick, AISTATS 2012). Write the kernel as its Maclaurin
  series in :math:`t = \\langle x, y \\rangle`:
  :math:`k = \\sum_{n=0}^{p} a_n t^n`, :math:`a_n = \\binom{p}{n} c^{p-n} \\gamma^n`. Each feature
  draws a degree ``N`` with :math:`P(N = n) \\propto q^{-(n+1)}` (the paper's measure with base
  ``q = p_base``, truncated to the degrees ``n <= p`` with :math:`a_n > 0`) and ``N`` Rademacher
  vectors :math:`w_1, \\dots, w_N \\in \\{\\pm 1\\}^d`, and is
  :math:`z(x) = \\sqrt{a_N / (m P(N))} \\prod_{j=1}^{N} \\langle w_j, x \\rangle`; since
  :math:`E[\\langle w, x\\rangle \\langle w, y\\rangle] = \\langle x, y\\rangle` for Rademacher
  ``w``, :math:`E[z(x) z(y)] = \\sum_n a_n \\langle x, y \\rangle^n / m`.

The variance of both falls like ``1 / m``: the mean error :math:`|k_m - k|` like
:math:`1/\\sqrt{m}`.
"""

from __future__ import annotations

import functools
import math
from numbers import Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import as_output, make_generator, num_threads, resolve_device, resolve_dtype, to_tensor
from .._sparse import is_sparse
from .._validation import Interval, check_array_like, check_params
from ..kernels import Linear, Polynomial
from ..linalg import (SKETCH_SLAB_BYTES, MemoryBudgetError, StreamedMethodsMixin, default_memory_budget, format_bytes,
                      plan_rows, row_blocks)
from ._constraints import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, N_COMPONENTS, POLYNOMIAL_CONSTRAINTS
from ._finite import check_finite
from ._stream import fit_source

#: Below this many output entries (rows x n_components) a transform runs on one thread: on a CPU
#: shared with other processes a small multi-threaded op waits scheduler slices for its second
#: thread (8 x 16 rfft, 2 cores, load 7: 10 ms on two threads, 5 us on one); the FFTs of large
#: blocks gained under 5% from the second thread (20,000 x 1,024: 0.41 s vs 0.43 s).
SERIAL_MAX = 1 << 16

__all__ = ["RandomMaclaurin", "TensorSketch"]


def _polynomial_params(est, n_features: int) -> tuple[int, float, float]:
    """``(degree, gamma, coef0)`` from ``est.kernel`` when given, else from the estimator's own."""
    owner = type(est).__name__
    kernel = est.kernel
    if kernel is None:
        kernel = Polynomial(degree=int(est.degree), gamma=est.gamma, coef0=est.coef0)
    if isinstance(kernel, Polynomial):  # Quadratic included
        if not isinstance(kernel.degree, int):
            raise ValueError(f"{owner} sketches polynomial kernels of an integer degree; got {kernel!r}.")
        gamma = 1.0 / n_features if kernel.gamma is None else float(kernel.gamma)
        return kernel.degree, gamma, float(kernel.coef0)
    if isinstance(kernel, Linear):
        return 1, 1.0, 0.0
    raise ValueError(
        f"The 'kernel' parameter of {owner} must be None or a mercer Polynomial, Quadratic or Linear "
        f"kernel (a dot-product kernel (gamma <x, y> + coef0)^degree). Got {kernel!r} instead."
    )


class _PolySketchBase(ClassNamePrefixFeaturesOutMixin, TransformerMixin, StreamedMethodsMixin, BaseEstimator):
    """Shared plumbing: parameters, device/dtype, row-blocked transform."""

    _parameter_constraints: dict = {
        **POLYNOMIAL_CONSTRAINTS,
        "gamma": [*POLYNOMIAL_CONSTRAINTS["gamma"], None],  # None: 1 / n_features
        "n_components": N_COMPONENTS,
        "kernel": [None, KERNEL_CONSTRAINTS["kernel"][1]],  # which kernels: checked by _polynomial_params
        "random_state": ["random_state"],
        "device": COMPUTE_CONSTRAINTS["device"],
        "dtype": COMPUTE_CONSTRAINTS["dtype"],
    }
    _saved_private = ("_device", "_dtype", "_n_features_out")  # private state that mercer.io saves

    def _setup(self, X):
        self._device = resolve_device(self.device if self.device is not None or not isinstance(X, torch.Tensor) else X.device)
        self._dtype = resolve_dtype(self.dtype, X)

    def fit(self, X, y=None):
        """Draw the random maps for inputs of ``X.shape[1]`` features (the values of ``X`` are not used:
        streamed ``X``, see :mod:`mercer.sources`, is not read)."""
        check_params(self)
        m = int(self.n_components)
        source = fit_source(self, X)
        X = source if source is not None else check_array_like(self, X, reset=True, accept_sparse=True)
        degree, gamma, coef0 = _polynomial_params(self, X.shape[1])
        self._setup(X)
        self.degree_, self.gamma_, self.coef0_ = degree, gamma, coef0
        gen = make_generator(self.random_state)  # CPU draws: the same features on every device
        self._draw(X.shape[1], m, gen)
        self._n_features_out = m
        return self

    def transform(self, X):
        """Features ``z(X)`` of shape ``(n_samples, n_components)``, computed in row blocks."""
        check_is_fitted(self, "_n_features_out")
        Xv = check_array_like(self, X, reset=False, accept_sparse=True)
        Xt = to_tensor(Xv, dtype=self._dtype, device=self._device)
        n = Xt.shape[0]
        rows = plan_rows(n, self._bytes_per_row(Xt.element_size()), budget=default_memory_budget(self._device),
                         max_bytes=None, what="a block of sketched rows")
        out = torch.empty(n, self._n_features_out, dtype=self._dtype, device=self._device)
        small = self._device.type == "cpu" and n * self._n_features_out <= SERIAL_MAX
        with num_threads(1 if small else None):
            for rs in row_blocks(n, rows, desc=type(self).__name__):
                out[rs] = self._features(Xt[rs])
        check_finite(out, type(self).__name__, "the features", X=Xt,
                     kernel=Polynomial(degree=self.degree_, gamma=self.gamma_, coef0=self.coef0_))
        return as_output(out, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class TensorSketch(_PolySketchBase):
    """TensorSketch features of the polynomial kernel :math:`(\\gamma \\langle x, y\\rangle + c)^p`.

    ``transform(X) @ transform(Z).T`` is an unbiased estimate of the kernel matrix (Pham & Pagh
    2013): ``p`` independent count sketches of :math:`[\\sqrt{\\gamma} x, \\sqrt{c}]` combined by
    FFT (``torch.fft.rfft`` / ``irfft``). See the module docstring for the construction.

    Parameters
    ----------
    degree : int, default=2
    gamma : float or None, default=1.0
        ``None`` means ``1 / n_features``.
    coef0 : float, default=1.0
        ``c >= 0``.
    n_components : int, default=100
        Dimension ``m`` of the sketch.
    kernel : mercer Polynomial, Quadratic or Linear kernel, optional
        When given, its ``degree``, ``gamma`` and ``coef0`` are used and the three parameters above
        are ignored, though still checked (``Linear`` is degree 1, gamma 1, coef0 0).
    random_state : int, RandomState or None
    device, dtype : optional
        Where and in which precision to compute (numpy in -> numpy out; torch in -> torch out).

    Attributes
    ----------
    degree_, gamma_, coef0_ : the kernel parameters in force.
    index_hash_ : tensor of shape (degree, n_features + 1), hash of each input coordinate.
    bit_hash_ : tensor of shape (degree, n_features + 1), sign (+-1) of each input coordinate.
    """

    def __init__(self, degree=2, gamma=1.0, coef0=1.0, n_components=100, *, kernel=None,
                 random_state=None, device=None, dtype=None):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.n_components = n_components
        self.kernel = kernel
        self.random_state = random_state
        self.device = device
        self.dtype = dtype

    def _draw(self, d: int, m: int, gen: torch.Generator) -> None:
        p = self.degree_
        self.index_hash_ = torch.randint(0, m, (p, d + 1), generator=gen).to(self._device)
        self.bit_hash_ = (torch.randint(0, 2, (p, d + 1), generator=gen) * 2 - 1).to(self._device, self._dtype)

    def _bytes_per_row(self, item: int) -> int:
        m = self._n_features_out
        # augmented row, count sketch, two complex spectra (2 reals each), the output row
        return item * ((self.n_features_in_ + 1) + m + 4 * (m // 2 + 1) + m)

    def _count_sketch(self, A: torch.Tensor, j: int) -> torch.Tensor:
        if A.device.type != "cpu":
            return self._count_sketch_gemm(A, j)
        C = torch.zeros(A.shape[0], self._n_features_out, dtype=A.dtype, device=A.device)
        return C.index_add_(1, self.index_hash_[j], A * self.bit_hash_[j])

    def _count_sketch_gemm(self, A: torch.Tensor, j: int, slab_bytes: int = SKETCH_SLAB_BYTES) -> torch.Tensor:
        """The count sketch as ``A @ H`` with the +-1 hashing matrix ``H`` (built in slabs of input
        features of at most ``slab_bytes``). On GPUs ``index_add_`` adds by atomics, whose order
        (so the rounding) changes from run to run; the product is deterministic."""
        m, D = self._n_features_out, A.shape[1]
        idx, sgn = self.index_hash_[j], self.bit_hash_[j].to(A.dtype)
        # a slab holds m entries per input feature (raises when one feature's row exceeds slab_bytes)
        step = plan_rows(D, m * A.element_size(), budget=slab_bytes, max_bytes=None, what="a slab of the hashing matrix")
        C = None
        for f in row_blocks(D, step, desc="count sketch slabs"):
            H = torch.zeros(f.stop - f.start, m, dtype=A.dtype, device=A.device)
            H[torch.arange(f.stop - f.start, device=A.device), idx[f]] = sgn[f]
            part = A[:, f] @ H
            C = part if C is None else C.add_(part)
        return C

    def _count_sketch_sparse(self, X, j: int) -> torch.Tensor:
        """The count sketch of the augmented rows ``[sqrt(gamma) x, sqrt(c)]`` of sparse rows: each
        stored entry added to its hashed column (no dense ``n x d`` block)."""
        m, d = self._n_features_out, X.shape[1]
        idx, sgn = self.index_hash_[j], self.bit_hash_[j].to(X.dtype)
        c = X.compact()
        C = torch.zeros(X.shape[0], m, dtype=X.dtype, device=X.device)
        C.view(-1).index_add_(0, c._row_ids() * m + idx[c.indices], c.data * sgn[c.indices] * math.sqrt(self.gamma_))
        C[:, idx[d]] += sgn[d] * math.sqrt(self.coef0_)
        return C

    def _features(self, X: torch.Tensor) -> torch.Tensor:
        m = self._n_features_out
        if is_sparse(X):
            sketch = functools.partial(self._count_sketch_sparse, X)
        else:
            ones = torch.full((X.shape[0], 1), math.sqrt(self.coef0_), dtype=X.dtype, device=X.device)
            sketch = functools.partial(self._count_sketch, torch.cat([X * math.sqrt(self.gamma_), ones], dim=1))
        spectrum = torch.fft.rfft(sketch(0), n=m, dim=1)
        for j in range(1, self.degree_):
            spectrum.mul_(torch.fft.rfft(sketch(j), n=m, dim=1))
        return torch.fft.irfft(spectrum, n=m, dim=1)


class RandomMaclaurin(_PolySketchBase):
    """Random Maclaurin features of the polynomial kernel (Kar & Karnick 2012).

    ``transform(X) @ transform(Z).T`` is an unbiased estimate of
    :math:`(\\gamma \\langle x, y\\rangle + c)^p`: each feature is a product of ``N`` Rademacher
    projections, ``N`` drawn with :math:`P(N = n) \\propto p_{base}^{-(n+1)}` over the degrees
    ``n <= degree`` whose Maclaurin coefficient :math:`a_n = \\binom{p}{n} c^{p-n}\\gamma^n` is
    positive (so ``coef0 = 0`` spends every feature on degree ``p``), weighted by
    :math:`\\sqrt{a_N / (m P(N))}`. See the module docstring.

    Parameters
    ----------
    degree, gamma, coef0, n_components, kernel, random_state, device, dtype :
        As in :class:`TensorSketch`.
    p_base : float > 1, default=2.0
        The base ``p`` of Kar & Karnick's degree measure :math:`P(N = n) \\propto 1/p^{n+1}`: larger
        values put more features on low degrees.

    Attributes
    ----------
    degree_, gamma_, coef0_ : the kernel parameters in force.
    feature_degrees_ : ndarray of shape (n_components,), the degree ``N`` of each feature
        (features are grouped by degree, ascending).
    degree_probabilities_ : ndarray of shape (degree_ + 1,), :math:`P(N = n)`.
    """

    _parameter_constraints: dict = {
        **_PolySketchBase._parameter_constraints,
        "p_base": [Interval(Real, 1, math.inf, closed="neither")],
    }

    _saved_private = ("_counts", "_weights", "_rademacher")  # private state that mercer.io saves

    def __init__(self, degree=2, gamma=1.0, coef0=1.0, n_components=100, *, kernel=None, p_base=2.0,
                 random_state=None, device=None, dtype=None):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.n_components = n_components
        self.kernel = kernel
        self.p_base = p_base
        self.random_state = random_state
        self.device = device
        self.dtype = dtype

    def _draw(self, d: int, m: int, gen: torch.Generator) -> None:
        q = self.p_base
        p, g, c = self.degree_, self.gamma_, self.coef0_
        self._check_size(d, m)
        # P(N = n) ~ q^-(n+1) is 0 in float64 beyond `top`: only those degrees' coefficients are needed
        top = p if c == 0 else min(p, int(1100 * math.log(2) / math.log(q)) + 1)
        try:
            coef = np.zeros(p + 1)
            coef[:top + 1] = [0.0 if c == 0 and n < p else math.comb(p, n) * c ** (p - n) * g ** n
                              for n in range(top + 1)]
        except OverflowError:
            coef = np.array([np.inf])
        if not np.all(np.isfinite(coef)):
            raise ValueError(f"{type(self).__name__}: the kernel's Maclaurin coefficients C(p, n) coef0^(p-n) gamma^n "
                             f"overflow float64 with gamma={g:.3g}, coef0={c:.3g}, degree={p}; use a smaller gamma "
                             "or coef0 (or rescale X).")
        if not (coef > 0).any():
            raise ValueError(f"{type(self).__name__}: every Maclaurin coefficient C(p, n) coef0^(p-n) gamma^n underflows "
                             f"to 0 in float64 with gamma={g:.3g}, coef0={c:.3g}, degree={p}; use a larger gamma or "
                             "coef0, or a smaller degree.")
        with np.errstate(under="ignore"):
            prob = np.where(coef > 0, float(q) ** -(np.arange(p + 1) + 1.0), 0.0)
        if not prob.sum() > 0:  # coef0 = 0 and a degree whose q^-(p+1) underflows: all features on it
            prob = (coef > 0).astype(np.float64)
        prob /= prob.sum()
        degrees = torch.multinomial(torch.as_tensor(prob), m, replacement=True, generator=gen)
        degrees = np.sort(degrees.numpy())
        self.degree_probabilities_ = prob
        self.feature_degrees_ = degrees
        self._counts = np.bincount(degrees, minlength=p + 1)
        self._weights = torch.as_tensor(
            np.sqrt(np.where(prob[degrees] > 0, coef[degrees] / (m * np.where(prob[degrees] > 0, prob[degrees], 1.0)), 0.0)),
            dtype=self._dtype).to(self._device)
        # One (n, d, m_n) Rademacher stack per degree n: feature = prod_j <w_j, x>.
        self._rademacher = {
            n: (torch.randint(0, 2, (n, d, int(cnt)), generator=gen) * 2 - 1).to(self._device, self._dtype)
            for n, cnt in enumerate(self._counts) if cnt and n > 0
        }

    def _check_size(self, d: int, m: int) -> None:
        """Refuse, before drawing, maps whose tables do not fit the memory budget: per degree a coefficient
        and a probability, per feature a weight, a degree and (at least one, with coef0 = 0 ``degree``)
        d-vector of Rademacher signs."""
        item = torch.empty(0, dtype=self._dtype).element_size()
        per_feature = 2 * np.dtype(np.int64).itemsize + item * d * (self.degree_ if self.coef0_ == 0 else 1)
        need = 2 * (self.degree_ + 1) * np.dtype(np.float64).itemsize + m * per_feature
        budget = default_memory_budget(self._device)
        if need > budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: degree={self.degree_}, n_components={m} on {d} features need at least "
                f"{format_bytes(need)} for the map's tables and projections, more than the memory budget of "
                f"{format_bytes(budget)}. Use a smaller degree or n_components"
                + (" (or coef0 > 0: with coef0 = 0 every feature multiplies `degree` projections)" if self.coef0_ == 0
                   else "") + ", or raise the memory budget (mercer.config_context(memory_budget=...)).")

    def _bytes_per_row(self, item: int) -> int:
        return item * (self.n_features_in_ + 3 * self._n_features_out)

    def _features(self, X: torch.Tensor) -> torch.Tensor:
        blocks = []
        for n, cnt in enumerate(self._counts):
            if not cnt:
                continue
            if n == 0:
                blocks.append(torch.ones(X.shape[0], int(cnt), dtype=X.dtype, device=X.device))
                continue
            W = self._rademacher[n]
            Z = X @ W[0]
            for j in range(1, n):
                Z.mul_(X @ W[j])
            blocks.append(Z)
        return torch.cat(blocks, dim=1).mul_(self._weights)
