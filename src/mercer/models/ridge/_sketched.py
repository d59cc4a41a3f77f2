"""Sketched kernel ridge regression (Yang, Pilanci & Wainwright, "Randomized sketches for kernels:
fast and optimal non-parametric regression", Annals of Statistics 2017 / arXiv 2015).

Exact kernel ridge regression minimises, over dual coefficients :math:`a \\in \\mathbb{R}^n`,

.. math:: \\|y - K a\\|^2 + \\alpha\\, a^T K a

(``alpha`` as in scikit-learn's ``KernelRidge``). The sketched estimator restricts :math:`a` to
the row space of a random sketch matrix :math:`S \\in \\mathbb{R}^{m \\times n}`, :math:`a = S^T
\\theta`, which gives the :math:`m \\times m` system

.. math:: (S K K S^T + \\alpha\\, S K S^T)\\, \\theta = S K y.

Yang et al. write the loss as :math:`\\frac{1}{2n}\\|y - K a\\|^2 + \\frac{\\lambda}{2} a^T K a`:
``alpha = n * lambda``. With ``m = n`` and an invertible ``S`` (the Gaussian sketch almost
surely) the solution is exact kernel ridge regression.

Computation: :math:`B = K S^T` (``n x m``) by blocks of the kernel matrix (memory
:math:`O(n m)`, never :math:`O(n^2)`): a blocked product with the dense Gaussian sketch
(:math:`O(n^2 m)`), the FWHT of each block of kernel rows for the Hadamard sketch
(:math:`O(n^2 + n N \\log N)`), the ``m`` sampled kernel columns for subsampling
(:math:`O(n m)` kernel entries); then :math:`S K K S^T = B^T B`, :math:`S K y = B^T y`
and :math:`C = S K S^T = S B`. The system is solved stably as a ridge regression on the
features :math:`F = B\\, U \\Lambda^{-1/2}` (:math:`C = U \\Lambda U^T`, eigenvalues below
``m * eps * lambda_max`` dropped: those directions of :math:`\\theta` give
:math:`K S^T \\theta \\approx 0`): :math:`(F^T F + \\alpha I)\\phi = F^T y`,
:math:`\\theta = U \\Lambda^{-1/2} \\phi`. The model keeps the training points and
:math:`w = S^T \\theta`, and predicts :math:`f(x) = k(x, X)\\, w`.

Sketches:

* ``"gaussian"``: i.i.d. :math:`N(0, 1/m)` entries.
* ``"hadamard"``: the randomized Hadamard sketch :math:`S = \\sqrt{N/m}\\, P H D` with ``n`` zero-
  padded to :math:`N = 2^{\\lceil \\log_2 n \\rceil}`, ``D`` random signs, ``H`` the orthonormal
  Walsh-Hadamard matrix and ``P`` ``m`` rows of the identity drawn without replacement; applied
  by a fast Walsh-Hadamard transform (:math:`O(N \\log N)` per column, blockwise over columns).
* ``"subsample"``: :math:`S = \\sqrt{n/m}\\, P` (``m`` training points drawn uniformly without
  replacement): Nyström kernel ridge regression with uniform landmarks.
"""

from __future__ import annotations

import logging
import math
import time
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator, to_numpy
from ..._backend import num_threads as _num_threads
from ..._validation import Interval, Options, check_at_most, check_params
from ...approx import check_finite
from ...linalg import (DENSE_SERIAL_MAX_N, ExecutionPlan, KernelOperator, MemoryBudgetError, format_bytes, jittered_cholesky,
                       plan_rows, row_blocks)
from ...linalg import eigh as _eigh  # in a worker thread for large matrices: Ctrl-C is heard
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin

__all__ = ["SketchedKernelRidge", "fwht"]

log = logging.getLogger(__name__)

_SKETCHES = ("gaussian", "hadamard", "subsample")


#: The transform runs as a product of Kronecker factors ``H_a`` of at most this size, each applied
#: as one batched GEMM (``H_N = H_a (x) H_b (x) ...`` for Sylvester-ordered Hadamard matrices).
#: The radix-2 butterfly (``a = 2``) is memory-bound: one pass over the data per bit, 13 passes for
#: N = 8192. Blocks of 128 take two passes and run at GEMM speed; the extra arithmetic
#: (``N (a_1 + a_2)`` instead of ``N log2 N`` per column) is cheaper than the memory traffic it saves.
FWHT_RADIX = 128


def _radix_factors(N: int) -> list[int]:
    """Sizes of the Kronecker factors of ``H_N``: ``FWHT_RADIX`` each, the last one smaller."""
    out, h = [], 1
    while h < N:
        out.append(min(FWHT_RADIX, N // h))
        h *= out[-1]
    return out


def _hadamard(a: int, dtype, device) -> torch.Tensor:
    """The ``a x a`` Sylvester Hadamard matrix (entries +-1), ``a`` a power of two."""
    H = torch.ones(1, 1, dtype=dtype, device=device)
    while H.shape[0] < a:
        H = torch.cat([torch.cat([H, H], dim=1), torch.cat([H, -H], dim=1)], dim=0)
    return H


def fwht(X: torch.Tensor, *, max_bytes: int | None = None) -> torch.Tensor:
    """Orthonormal fast Walsh-Hadamard transform of the columns of ``X``: ``H @ X``.

    ``X`` has shape ``(N, c)`` with ``N`` a power of two; ``H`` is the Sylvester-ordered Hadamard
    matrix scaled by ``1 / sqrt(N)`` (symmetric and orthogonal, so the transform is its own
    inverse). ``H_N`` factors into Kronecker products of ``H_a`` (``a <= FWHT_RADIX``), each applied
    along its stride as one batched matrix product: ``O(N (a_1 + a_2 + ...))`` operations per column,
    ``ceil(log2 N / 7)`` passes over the data. Columns are processed in blocks whose working memory
    stays under ``max_bytes`` (about three copies of a block). Returns a new tensor.
    """
    if X.ndim == 1:
        return fwht(X[:, None], max_bytes=max_bytes)[:, 0]
    N, c = X.shape
    if N < 1 or N & (N - 1):
        raise ValueError(f"fwht: the number of rows must be a power of two; got {N}.")
    width = c if max_bytes is None else plan_rows(c, 3 * N * X.element_size(), budget=max_bytes, max_bytes=None,
                                                  what="a block of columns of the FWHT")
    factors, h = [], 1
    for a in _radix_factors(N):
        factors.append((a, h, _hadamard(a, X.dtype, X.device)))
        h *= a
    out = torch.empty_like(X)
    scale = 1.0 / math.sqrt(N)
    for cols in row_blocks(c, width, desc="fwht columns"):
        Y = X[:, cols].contiguous()
        w = Y.shape[1]
        for a, h, Ha in factors:  # rows i = (b * a + k) * h + l: H_a acts on k
            Y = torch.matmul(Ha, Y.view(N // (a * h), a, h * w)).view(N, w)
        out[:, cols] = Y * scale if N > 1 else Y
    return out


class _Sketch:
    """A drawn sketch ``S`` (m x n) and the products the solver needs: ``K S^T``, ``S B``, ``S^T theta``.

    Only the Gaussian sketch is stored as a dense matrix; the subsampling sketch is a list of rows
    and the Hadamard sketch a list of rows and signs, applied by :func:`fwht`.
    """

    def __init__(self, kind: str, n: int, m: int, gen: torch.Generator, dtype, device, max_bytes: int):
        self.kind, self.n, self.m, self.max_bytes = kind, n, m, max_bytes
        self.dtype, self.device = dtype, device
        if kind == "gaussian":
            self.St = (torch.randn(n, m, generator=gen, dtype=torch.float64) / math.sqrt(m)).to(device, dtype)
        elif kind == "subsample":
            self.rows = torch.randperm(n, generator=gen)[:m].sort().values.to(device)
            self.scale = math.sqrt(n / m)
        else:  # hadamard
            self.N = 1 << max(0, (n - 1).bit_length())
            self.signs = (torch.randint(0, 2, (self.N,), generator=gen) * 2 - 1).to(device, dtype)
            self.rows = torch.randperm(self.N, generator=gen)[:m].sort().values.to(device)
            self.scale = math.sqrt(self.N / m)

    @staticmethod
    def stored_bytes(kind: str, n: int, m: int, itemsize: int) -> int:
        """Bytes the sketch itself holds (the dense Gaussian ``S^T``; a few index vectors otherwise)."""
        return n * m * itemsize if kind == "gaussian" else 2 * (n + m) * 8

    def _width(self, t: int) -> int:
        """Columns of a padded ``(N, t)`` block processed at once within ``max_bytes`` (the block, the
        FWHT's copies and the result: four ``N``-vectors per column)."""
        return plan_rows(t, 4 * self.N * (torch.finfo(self.dtype).bits // 8), budget=self.max_bytes, max_bytes=None,
                         what="a block of columns of the Hadamard sketch")

    def kernel_product(self, kernel, X: torch.Tensor, budget: int) -> torch.Tensor:
        """``B = K S^T`` of shape ``(n, m)``, ``K = k(X, X)``, never holding more than a block of ``K``.

        Gaussian: blocked ``K @ S^T`` (``O(n^2 m)``). Subsampling: ``k(X, X[rows])`` scaled (``O(n m)``
        kernel entries). Hadamard: each block of rows of ``K``, signed and zero-padded, goes through
        the FWHT and keeps the sampled columns (``O(n^2)`` kernel entries and ``O(n N r)`` for the
        transforms, ``r`` the sum of the radix factors, about ``2 sqrt(N)``), or, when ``m < r``
        (fewer operations), the blocked product with ``S^T`` materialised by the FWHT.
        """
        if self.kind == "gaussian":
            return KernelOperator(kernel, X, memory_budget=budget, n_rhs=self.m).matvec(self.St)
        if self.kind == "subsample":
            op = KernelOperator(kernel, X, X[self.rows], memory_budget=budget)
            return op.dense(output_reserved=True).mul_(self.scale)  # the caller's budget counted the output
        n, N, item = self.n, self.N, X.element_size()
        transform_cost = N * sum(_radix_factors(N))          # per kernel row, vs n * m for a dense S^T
        if n * self.m < transform_cost and 2 * n * self.m * item < budget:
            # Few components: the blocked product with the materialised S^T does less arithmetic.
            St = self.apply_transpose(torch.eye(self.m, dtype=X.dtype, device=X.device))
            return KernelOperator(kernel, X, memory_budget=ExecutionPlan(budget).holding(n * self.m * item),
                                  n_rhs=self.m).matvec(St)
        # A block of kernel rows: the rows, the kernel's scratch, their padded transform and the inputs.
        per_row = item * (4 * N + n * (1.0 + kernel.scratch(X.shape[1])) + X.shape[1])
        br = plan_rows(n, per_row, budget=budget, max_bytes=None, what="a block of kernel rows of the Hadamard sketch")
        B = torch.empty(n, self.m, dtype=X.dtype, device=X.device)
        for r in row_blocks(n, br, desc="Hadamard sketch of K"):
            P = torch.zeros(N, r.stop - r.start, dtype=X.dtype, device=X.device)
            P[:n] = kernel.block(X, X, slice(0, n), r)          # columns r of K (= rows r, K symmetric)
            P.mul_(self.signs[:, None])
            B[r] = fwht(P)[self.rows].T.mul_(self.scale)
        return B

    def apply(self, B: torch.Tensor) -> torch.Tensor:
        """``S @ B`` for ``B`` of shape ``(n, t)``."""
        if self.kind == "gaussian":
            return self.St.T @ B
        if self.kind == "subsample":
            return B[self.rows] * self.scale
        out = torch.empty(self.m, B.shape[1], dtype=B.dtype, device=B.device)
        for cols in row_blocks(B.shape[1], self._width(B.shape[1]), desc="Hadamard sketch columns"):
            P = torch.zeros(self.N, cols.stop - cols.start, dtype=B.dtype, device=B.device)
            P[:self.n] = B[:, cols] * self.signs[:self.n, None]
            out[:, cols] = fwht(P)[self.rows] * self.scale
        return out

    def apply_transpose(self, T: torch.Tensor) -> torch.Tensor:
        """``S^T @ T`` for ``T`` of shape ``(m, t)``."""
        if self.kind == "gaussian":
            return self.St @ T
        out = torch.zeros(self.n, T.shape[1], dtype=T.dtype, device=T.device)
        if self.kind == "subsample":
            out[self.rows] = T * self.scale
            return out
        # S^T = scale * D H P^T, H symmetric
        for cols in row_blocks(T.shape[1], self._width(T.shape[1]), desc="Hadamard sketch columns"):
            P = torch.zeros(self.N, cols.stop - cols.start, dtype=T.dtype, device=T.device)
            P[self.rows] = T[:, cols]
            out[:, cols] = fwht(P)[:self.n].mul_(self.signs[:self.n, None]).mul_(self.scale)
        return out


class SketchedKernelRidge(MultiOutputMixin, RegressorMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel ridge regression with the dual coefficients restricted to a random sketch's row space.

    Solves :math:`(S K K S^T + \\alpha S K S^T)\\theta = S K y` for a random
    :math:`S \\in \\mathbb{R}^{m \\times n}` (Yang, Pilanci & Wainwright 2015) and predicts
    :math:`f(x) = k(x, X) S^T \\theta`. ``alpha`` is scikit-learn's (loss
    :math:`\\|y - K a\\|^2 + \\alpha a^T K a`); Yang et al.'s :math:`\\lambda` is ``alpha / n``.
    With ``n_components = n_samples`` and ``sketch="gaussian"`` it is exact kernel ridge
    regression. Time: computing :math:`K S^T` (:math:`O(n^2 m)` for the Gaussian sketch,
    :math:`O(n^2 + n N \\log N)` for the Hadamard one, :math:`O(n m)` kernel entries for
    subsampling) plus :math:`O(n m^2)`; memory :math:`O(n m)`. See the module docstring.

    Parameters
    ----------
    alpha : float > 0, default=1.0
    kernel : str or mercer Kernel, default="rbf"
    gamma, degree, coef0, kernel_params :
        As in :class:`mercer.models.KernelRidge`.
    n_components : int, default=100
        Sketch dimension ``m``, ``1 <= m <= n_samples`` (a larger value is an error, not clipped).
    sketch : {"gaussian", "hadamard", "subsample"}, default="gaussian"
    fit_intercept : bool, default=True
        Fit an unpenalised offset ``b``: :math:`\\|y - K S^T \\theta - b\\|^2 + \\alpha \\theta^T S K S^T \\theta`
        (the columns of :math:`K S^T` and ``y`` centred). With ``m = n`` and the Gaussian sketch this is
        :class:`mercer.models.KernelRidge` with the same ``fit_intercept``.
    random_state : int, RandomState or None
    device, dtype, memory_budget :
        As in :class:`mercer.models.KernelRidge`. The budget must hold two ``n x m`` matrices
        (``K S^T`` and its whitened copy), the Gaussian sketch ``S^T`` (another ``n x m``) and
        three ``m x m`` matrices; kernel blocks use what is left.

    Attributes
    ----------
    dual_coef_ : tensor of shape (n_samples,) or (n_samples, n_targets)
        :math:`w = S^T \\theta`, the (sketched) dual coefficients on the training points.
    sketch_coef_ : tensor of shape (n_components,) or (n_components, n_targets), :math:`\\theta`.
    intercept_ : float or ndarray of shape (n_targets,)
        0.0 when ``fit_intercept=False``.
    X_fit_ : tensor of shape (n_samples, n_features)
    kernel_ : Kernel
    sketch_seed_ : int
        Seed of the CPU generator the sketch was drawn from (:meth:`sketch_matrix` redraws it).
    rank_ : int
        Directions of :math:`S K S^T` kept (``n_components`` unless it is numerically singular).
    fit_time_ : float
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "sketch": [Options(*_SKETCHES)],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_components=100, sketch="gaussian", fit_intercept=True, random_state=None, device=None,
                 dtype=None, memory_budget=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.n_components = n_components
        self.sketch = sketch
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y):
        """Fit on ``X`` (n, d) and ``y`` (n,) or (n, t)."""
        check_params(self)
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        # the sketch has at most as many rows as there are training samples
        check_at_most(type(self).__name__, "n_components", self.n_components, X.shape[0], "n_samples")
        m = int(self.n_components)
        self._setup_compute(X)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{type(self).__name__} does not take kernel='precomputed': it keeps the "
                             "training points to predict. Pass the kernel itself.")
        Xt = self._tensor(X)
        Y = torch.tensor(y.reshape(len(y), -1), dtype=self._dtype, device=self._device)
        n, item = Xt.shape[0], Xt.element_size()
        t0 = time.perf_counter()
        need = _Sketch.stored_bytes(self.sketch, n, m, item) + 2 * n * m * item + 3 * m * m * item
        if need >= self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the sketched solve holds two {n} x {m} matrices (K S^T and its "
                f"whitened copy){', the sketch itself' if self.sketch == 'gaussian' else ''} and {m} x {m} matrices "
                f"({format_bytes(need)}), more than the memory budget of {format_bytes(self._budget)}. "
                "Use a smaller n_components or raise memory_budget."
            )
        self.sketch_seed_ = int(make_generator(self.random_state).initial_seed())
        left = self._plan.holding(need).budget
        S = self._draw_sketch(n, m, max_bytes=left)
        B = S.kernel_product(self.kernel_, Xt, left)         # K S^T, (n, m)
        check_finite(B, type(self).__name__, "the sketched kernel values (K S^T)", X=Xt, kernel=self.kernel_)
        C = S.apply(B)                                      # S K S^T, (m, m)
        C = (C + C.T) / 2
        b_mean = y_mean = None
        if self.fit_intercept:  # the unpenalised offset: centred columns of K S^T and targets
            b_mean, y_mean = B.mean(0), Y.mean(0)
            B.sub_(b_mean)
            Y = Y - y_mean
        theta = self._solve(B, C, Y)
        del B
        icpt = np.zeros(Y.shape[1]) if b_mean is None else to_numpy((y_mean - b_mean @ theta).double())
        self.intercept_ = float(icpt[0]) if y.ndim == 1 else icpt
        self.sketch_coef_ = theta[:, 0] if y.ndim == 1 else theta
        W = S.apply_transpose(theta)
        self.dual_coef_ = W[:, 0] if y.ndim == 1 else W
        self.X_fit_ = Xt
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: %s sketch m=%d on n=%d in %.2f s", type(self).__name__, self.sketch, m, n, self.fit_time_)
        return self

    def _draw_sketch(self, n: int, m: int, max_bytes: int) -> _Sketch:
        gen = torch.Generator().manual_seed(self.sketch_seed_)  # CPU draws: the same sketch on every device
        return _Sketch(self.sketch, n, m, gen, self._dtype, self._device, max_bytes=max_bytes)

    def sketch_matrix(self) -> torch.Tensor:
        """The sketch ``S`` of the fit as a dense ``(n_components, n_samples)`` tensor (O(n m) memory)."""
        check_is_fitted(self, "sketch_seed_")
        n = self.X_fit_.shape[0]
        m = self.sketch_coef_.shape[0]
        S = self._draw_sketch(n, m, max_bytes=self._budget)
        return S.apply_transpose(torch.eye(m, dtype=self._dtype, device=self._device)).T

    def _solve(self, B: torch.Tensor, C: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """theta solving (B^T B + alpha C) theta = B^T Y, as a ridge on F = B U Lambda^{-1/2}
        (C = U Lambda U^T, numerically null directions dropped)."""
        # Small dense eigh/Cholesky on one thread (see mercer.linalg._eig.DENSE_SERIAL_MAX_N).
        serial = C.device.type == "cpu" and C.shape[0] <= DENSE_SERIAL_MAX_N
        with _num_threads(1 if serial else None):
            lam, U = _eigh(C)
        top = float(lam.max()) if lam.numel() else 0.0
        if not math.isfinite(top):
            raise ValueError(f"{type(self).__name__}: the sketched kernel matrix S K S^T is not finite.")
        keep = lam > max(top, 0.0) * C.shape[0] * torch.finfo(C.dtype).eps
        if not bool(keep.any()):
            raise ValueError(f"{type(self).__name__}: the sketched kernel matrix S K S^T is zero; the kernel "
                             "vanishes on the training data.")
        R = U[:, keep] / torch.sqrt(lam[keep])[None, :]     # (m, r)
        self.rank_ = int(keep.sum())
        # F = B R is formed: its Gram F^T F is positive semi-definite in floating point, whereas
        # R^T (B^T B) R (one product fewer) is not when S K S^T has a wide range of eigenvalues.
        F = B @ R                                           # (n, r)
        A = F.T @ F
        A.diagonal().add_(float(self.alpha))
        with _num_threads(1 if serial else None):
            factor = jittered_cholesky(A, owner=type(self).__name__)
            phi = factor.solve(F.T @ Y)
        return R @ phi

    # -- predict ------------------------------------------------------------------------------
    def predict(self, X):
        """``k(X, X_fit_) @ dual_coef_``, blocked over rows."""
        check_is_fitted(self, "dual_coef_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        W = self.dual_coef_[:, None] if self.dual_coef_.ndim == 1 else self.dual_coef_
        op = KernelOperator(self.kernel_, Xt, self.X_fit_, memory_budget=self._budget, n_rhs=W.shape[1])
        out = op.matvec(W)
        check_finite(out, type(self).__name__, "the predictions", X=Xt, kernel=self.kernel_)
        b = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        if np.any(b):
            out = out + torch.as_tensor(b, dtype=out.dtype, device=out.device)
        return as_output(out[:, 0] if self.dual_coef_.ndim == 1 else out, X)

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: a model saved before ``fit_intercept`` existed has none."""
        super()._after_load()
        if not hasattr(self, "intercept_"):
            self.intercept_ = 0.0
            self.fit_intercept = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
