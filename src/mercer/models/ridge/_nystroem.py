"""Nyström kernel ridge regression and classification with a FALKON-class solver.

With M centres ``Z`` the model is ``f(x) = k(x, Z) beta``, and ``beta`` minimises
``||y - K_nM beta||^2_W + alpha beta^T K_MM beta`` (``alpha`` exactly as in
:class:`~mercer.KernelRidge`; FALKON's ``lambda`` is ``alpha / n``), i.e. solves

.. math:: (K_{nM}^T W K_{nM} + \\alpha K_{MM})\\, \\beta = K_{nM}^T W y.

With every training point as a centre this is exact kernel ridge regression. The system is
solved by conjugate gradient with FALKON's preconditioner (Rudi, Carratino & Rosasco 2017):
``T = chol(K_MM)``, ``A = chol(T T^T / M + lambda I)``, and CG runs on
``A^{-T} (T^{-T} K_nM^T W K_nM T^{-1} / n + lambda I) A^{-1}``, whose condition number stays
small when ``K_nM^T K_nM ~ (n / M) K_MM^2`` (uniform centres). Each iteration computes the
``n x M`` kernel matrix tile by tile through :class:`~mercer.linalg.KernelOperator` and never
stores it: memory is O(n d + M^2), time O(n M d) per iteration. Tiles are float32 by default
(twice the speed), and everything else -- the two M x M factors, the CG vectors, the sums of
the tiles' partial products -- is float64.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator, to_numpy
from ..._validation import describe
from ...approx._landmarks import check_landmarks_param, select_landmarks
from ...linalg import (ConvergenceWarning, KernelOperator, MemoryBudgetError, conjugate_gradient, format_bytes,
                      jittered_cholesky)
from ..._backend import num_threads as _num_threads
from ...linalg._eig import DENSE_SERIAL_MAX_N
from .._base import KernelEstimatorMixin
from ._exact import RidgeClassifierMixin, _check_alpha

__all__ = ["NystroemKernelRidge", "NystroemKernelRidgeClassifier"]

log = logging.getLogger(__name__)


def _lower_gram(L: torch.Tensor) -> torch.Tensor:
    """``L^T L`` for a lower-triangular ``L`` (overwritten). On the CPU by LAPACK's ``lauum``
    (M^3 / 3 flops on the triangle, as FALKON does, instead of a full 2 M^3 GEMM: M = 5,000 float32
    0.77 s vs 1.97 s here); elsewhere by a GEMM."""
    if L.device.type != "cpu" or L.dtype not in (torch.float32, torch.float64) or not L.is_contiguous():
        return L.mT @ L
    import scipy.linalg as sla

    lauum = sla.lapack.slauum if L.dtype == torch.float32 else sla.lapack.dlauum
    # L's row-major memory read column-major is U = L^T (upper): lauum(U, lower=0) writes U U^T =
    # L^T L into the upper triangle of that view, i.e. the lower triangle of L's memory, in place.
    _, info = lauum(L.numpy().T, lower=0, overwrite_c=1)
    if info != 0:  # pragma: no cover - lauum only fails on bad arguments
        raise RuntimeError(f"lauum failed (info={info}).")
    low = L.tril_()
    return low + low.tril(-1).mT


def _falkon_preconditioner(K_mm: torch.Tensor, lam: float, eps: float, owner: str):
    """Lower factors ``L`` (``L L^T = K_MM + eps M mean(diag) I``, in place) and ``La``
    (``La La^T ~ L^T L / M + lam I``). The shift ``eps * M`` (eps of the tiles' precision, as in
    FALKON) keeps ``T^{-1}`` from amplifying the rounding of float32 tiles.

    ``L`` defines the system (``L L^T`` is the ``K_MM`` of the regulariser) and stays float64;
    ``La`` is only a change of variables (any invertible factor gives the same solution, a good
    one gives fast convergence), so its M^3 product is formed in the tiles' precision.
    """
    M = K_mm.shape[0]
    K_mm.diagonal().add_(eps * M * float(K_mm.diagonal().mean().clamp_min(1e-300)))
    fac = jittered_cholesky(K_mm, owner=owner)
    L = fac.L.tril_()  # the strict upper triangle still held K_MM's entries
    work = torch.float32 if eps > 1e-10 else torch.float64
    C = _lower_gram(L.to(work, copy=True)).to(torch.float64)  # a copy: lauum works in place
    C.div_(M).diagonal().add_(lam)
    fa = jittered_cholesky(C, owner=owner)
    return L, fa.L.tril_(), fac.jitter


class _NystroemRidgeBase(KernelEstimatorMixin, BaseEstimator):
    _PRECONDITIONERS = ("falkon", "none")
    _SOLVERS = ("auto", "cg", "direct")
    @staticmethod
    def direct_max_centers(n_features: int) -> int:
        """Largest M for which ``solver="auto"`` solves directly. Per kernel entry, the direct solve
        costs (2M + 2d) float64 flops (~70 GFLOP/s on this project's machines), CG about 20
        iterations of (1.5 ns + 2d flops at ~80 GFLOP/s) for a float32 tile: they break even at
        M = 1050 + 16.5 d (about 1,500 for d = 28, 14,000 for Fashion-MNIST's d = 784)."""
        return int(1050 + 16.5 * n_features)

    def _check_params(self, n: int) -> int:
        owner = type(self).__name__
        M = self.n_centers
        if isinstance(self.centers, str):
            if isinstance(M, str) and M == "auto":
                M = min(n, max(100, int(math.ceil(5 * math.sqrt(n)))))
            elif not isinstance(M, numbers.Integral) or isinstance(M, bool) or M < 1:
                raise ValueError(f"The 'n_centers' parameter of {owner} must be an int >= 1 or 'auto'. "
                                 f"Got {describe(M)} instead.")
            elif M > n:
                raise ValueError(f"The 'n_centers' parameter of {owner} ({M}) must be <= n_samples ({n}): centres "
                                 "are chosen among the training points. Lower n_centers, or pass the centres "
                                 "as an array in 'centers'.")
        for name in ("max_iter",):
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
                raise ValueError(f"The {name!r} parameter of {owner} must be an int >= 1. Got {describe(v)} instead.")
        if not isinstance(self.tol, numbers.Real) or isinstance(self.tol, bool) or not self.tol >= 0:
            raise ValueError(f"The 'tol' parameter of {owner} must be a float >= 0. Got {describe(self.tol)} instead.")
        if self.solver not in self._SOLVERS:
            raise ValueError(f"The 'solver' parameter of {owner} must be one of {self._SOLVERS}. "
                             f"Got {self.solver!r} instead.")
        if self.preconditioner not in self._PRECONDITIONERS:
            raise ValueError(f"The 'preconditioner' parameter of {owner} must be one of {self._PRECONDITIONERS}. "
                             f"Got {self.preconditioner!r} instead.")
        return M

    def _fit_targets(self, X, Y: np.ndarray, sw):
        owner = type(self).__name__
        t_start = time.perf_counter()
        n = X.shape[0]
        centers = check_landmarks_param(self.centers, X.shape[1], owner, name="centers")
        M = self._check_params(n) if isinstance(centers, str) else centers.shape[0]
        if not isinstance(centers, str):
            self._check_params(max(n, M))
        alphas = _check_alpha(self.alpha, Y.shape[1], owner)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} needs a kernel on feature vectors; kernel='precomputed' is not supported "
                             "(use KernelRidge).")
        self._setup_compute(X)
        direct = self.solver == "direct" or (
            self.solver == "auto" and M <= self.direct_max_centers(X.shape[1])
            and 3 * M * M * 8 + 2 * M * Y.shape[1] * 8 * 6 <= self._budget)
        need = (3 if direct else 2) * M * M * 8 + 2 * M * Y.shape[1] * 8 * 6
        if need > self._budget:
            raise MemoryBudgetError(
                f"{owner}: n_centers={M} needs about {format_bytes(need)} for its M x M matrices "
                f"(float64), more than the memory budget of {format_bytes(self._budget)}. Use fewer "
                f"centres (about {int(math.sqrt(self._budget / 16))} fit), or raise memory_budget.")
        Xt = self._tensor(X)
        gen = make_generator(self.random_state)  # CPU draws: the same centres on every device
        Z, idx = select_landmarks(Xt, M, centers, kernel=self.kernel_, generator=gen, memory_budget=self._budget,
                                  reg=float(alphas.mean()) if alphas.mean() > 0 else None, owner=owner)
        f64 = torch.float64
        w = None if sw is None else torch.as_tensor(sw, dtype=Xt.dtype, device=self._device)
        n_w = float(n if sw is None else sw.sum())
        if n_w <= 0:
            raise ValueError(f"{owner}: the sample weights sum to zero.")
        Yt = torch.as_tensor(Y, dtype=Xt.dtype, device=self._device)
        # The tile budget: what is left after the M x M factors and the vectors.
        tile_budget = max(self._budget - need, 1 << 24)
        # 32 MiB tiles: the tile is read twice per product (K v, then K^T w) and that second read
        # should come from cache (measured at n = 50k, M = 10k: 1.65e8 entries/s vs 1.2e8 at 128 MiB).
        op = KernelOperator(self.kernel_, Xt, Z, memory_budget=tile_budget, n_rhs=Y.shape[1],
                            max_tile_bytes=32 << 20)
        if direct and Xt.dtype != f64:  # the direct solve is GEMM-bound: float64 tiles cost little more
            op = KernelOperator(self.kernel_, Xt.to(f64), Z.to(f64), memory_budget=tile_budget, n_rhs=Y.shape[1],
                                max_tile_bytes=32 << 20)
            w = None if w is None else w.to(f64)
            Yt = Yt.to(f64)
        rhs = op.rmatvec(Yt if w is None else Yt * w[:, None], out_dtype=f64)  # K_nM^T W y
        K_mm = self.kernel_(Z.to(f64))
        coef = torch.empty(M, Y.shape[1], dtype=f64, device=self._device)
        self.n_iter_ = np.zeros(Y.shape[1], dtype=int)
        self.residual_ = np.zeros(Y.shape[1])
        self.jitter_ = 0.0
        groups = {}
        for j, a in enumerate(alphas):  # one solve per distinct alpha, all its targets at once
            groups.setdefault(float(a), []).append(j)
        self.solver_ = "direct" if direct else "cg"
        if self.solver_ == "direct":
            # (K_nM^T W K_nM + alpha K_MM) beta = K_nM^T W y by Cholesky: one pass over the tiles
            H = op.kt_k(weights=w, out_dtype=f64)
            for a, cols in groups.items():
                A = H.clone()
                A.add_(K_mm, alpha=a)
                fac = jittered_cholesky(A, owner=owner)
                self.jitter_ = max(self.jitter_, fac.jitter)
                coef[:, cols] = fac.solve(rhs[:, cols])
                self.n_iter_[cols] = 1  # one direct solve (scikit-learn's convention: n_iter_ >= 1)
            del H
            groups = {}
        L = None
        for a, cols in groups.items():
            lam = a / n_w
            if L is None or self.preconditioner == "falkon":
                with _num_threads(1 if K_mm.device.type == "cpu" and M <= DENSE_SERIAL_MAX_N else None):
                    L, La, jit = _falkon_preconditioner(K_mm.clone(), lam, torch.finfo(Xt.dtype).eps, owner)
                self.jitter_ = max(self.jitter_, jit)
            noprec = self.preconditioner == "none"

            def solve_T(v, L=L):  # T^{-1} v with T = L^T
                return torch.linalg.solve_triangular(L.mT, v, upper=True)

            def solve_Tt(v, L=L):  # T^{-T} v = L^{-1} v
                return torch.linalg.solve_triangular(L, v, upper=False)

            def solve_A(v, La=La):
                return v if noprec else torch.linalg.solve_triangular(La.mT, v, upper=True)

            def solve_At(v, La=La):
                return v if noprec else torch.linalg.solve_triangular(La, v, upper=False)

            def bhb(u, lam=lam):
                v1 = solve_A(u)
                kk = op.kt_k_v(solve_T(v1), weights=w, out_dtype=f64)
                return solve_At(solve_Tt(kk) / n_w + lam * v1)

            b = solve_At(solve_Tt(rhs[:, cols]) / n_w)
            t0 = time.perf_counter()
            res = conjugate_gradient(bhb, b, tol=float(self.tol), max_iter=int(self.max_iter),
                                     callback=self._log_iteration(t0))
            coef[:, cols] = solve_T(solve_A(res.x))
            self.n_iter_[cols] = res.n_iter
            self.residual_[cols] = to_numpy(res.residual)
            if not res.converged:
                why = "max_iter" if res.n_iter >= int(self.max_iter) else "no further progress in this precision"
                warnings.warn(
                    f"{owner}: conjugate gradient stopped after {res.n_iter} iterations ({why}) with relative "
                    f"residual {float(res.residual.max()):.2e} > tol={self.tol}; the model is usable but not fully "
                    "converged. Raise max_iter (or tol).", ConvergenceWarning, stacklevel=3)
        self.coef_ = coef
        self.centers_ = Z
        self.center_indices_ = None if idx is None else to_numpy(idx)
        self.n_centers_ = M
        self.fit_time_ = time.perf_counter() - t_start
        log.info("%s: n=%d, M=%d, %d CG iterations, fit in %.1f s", owner, n, M, int(self.n_iter_.max()),
                 self.fit_time_)

    @staticmethod
    def _log_iteration(t0):
        def cb(it, x, rel):
            if log.isEnabledFor(logging.INFO):
                log.info("CG iteration %d: relative residual %.2e (%.1f s)", it, float(rel.max()),
                         time.perf_counter() - t0)
        return cb

    def _decision(self, X):
        check_is_fitted(self, "coef_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv).to(self.centers_.device)
        op = KernelOperator(self.kernel_, Xt, self.centers_, memory_budget=self._budget, n_rhs=self.coef_.shape[1])
        return op.matvec(self.coef_.to(Xt.dtype))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


_PARAMS_DOC = """
    Parameters
    ----------
    alpha : float or array of shape (n_targets,), default=1.0
        Regularisation, as in :class:`mercer.KernelRidge` (FALKON's ``lambda * n``).
    kernel : str or Kernel, default="rbf"
    gamma, degree, coef0, kernel_params : for a string ``kernel``.
    n_centers : int or "auto", default="auto"
        Number of centres M; "auto" is ``min(n, max(100, 5 sqrt(n)))``. Must be <= n_samples.
    centers : {"uniform", "kmeans++", "kmeans", "leverage", "greedy"} or array, default="uniform"
        Centre selection rule (see :class:`mercer.approx.Nystroem`), or the centres themselves.
    solver : {"auto", "cg", "direct"}, default="auto"
        "cg": FALKON-preconditioned conjugate gradient, K_nM recomputed every iteration (memory
        O(n d + M^2), time O(n M d) per iteration). "direct": ``K_nM^T W K_nM`` formed in float64 in one
        pass over the tiles and the M x M system solved by Cholesky (time O(n M^2), exact, robust to
        ill-conditioning). "auto": direct up to ``direct_max_centers(d)`` = 1050 + 16.5 d centres (when its three M x M
        float64 matrices fit the budget), else CG.
    max_iter : int, default=100
        Conjugate-gradient iterations at most.
    tol : float, default=1e-3
        Stop when the preconditioned system's relative residual is below ``tol``. Test error
        typically stops changing near 1e-2 (kin40k, synthetic sets: 12-20 iterations), so the
        default leaves a margin; use 1e-8 or less (and ``dtype="float64"``) to reproduce the exact
        minimiser. With float32 tiles the residual levels off near 1e-6.
    preconditioner : {"falkon", "none"}, default="falkon"
    dtype : {"float32", "float64"} or None, default="float32"
        Precision of the kernel tiles (None: follow the input). The solve itself is float64.
    random_state, device, memory_budget : as elsewhere in mercer.
"""


class NystroemKernelRidge(MultiOutputMixin, RegressorMixin, _NystroemRidgeBase):
    __doc__ = ("""Nyström kernel ridge regression solved by FALKON-preconditioned conjugate gradient.

    Memory O(n d + M^2); with ``n_centers = n`` (all points) it equals :class:`mercer.KernelRidge`.
""" + _PARAMS_DOC + """
    Attributes
    ----------
    coef_ : tensor of shape (M,) or (M, n_targets)
    centers_ : tensor of shape (M, n_features_in_)
    center_indices_ : ndarray or None
    n_iter_, residual_ : ndarray of shape (n_targets,)
        CG iterations and final relative residual per target (1 and 0 for the direct solver).
    solver_ : str
        "cg" or "direct".
    jitter_ : float
        Jitter added to ``K_MM`` (0.0 normally).
    fit_time_ : float
    """)

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_centers="auto", centers="uniform", solver="auto", max_iter=100, tol=1e-3,
                 preconditioner="falkon", random_state=None, device=None, dtype="float32", memory_budget=None):
        self.alpha = alpha
        self.solver = solver
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.n_centers = n_centers
        self.centers = centers
        self.max_iter = max_iter
        self.tol = tol
        self.preconditioner = preconditioner
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y, sample_weight=None):
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        self._fit_targets(X, y.reshape(len(y), -1), sw)
        self._y_1d = y.ndim == 1
        if self._y_1d:
            self.coef_ = self.coef_[:, 0]
        return self

    def _decision(self, X):
        check_is_fitted(self, "coef_")
        coef = self.coef_
        self.coef_ = coef[:, None] if coef.ndim == 1 else coef
        try:
            return super()._decision(X)
        finally:
            self.coef_ = coef

    def predict(self, X):
        out = self._decision(X)
        if self._y_1d:
            out = out[:, 0]
        return as_output(out.to(torch.float64) if not isinstance(X, torch.Tensor) else out, X)


class NystroemKernelRidgeClassifier(RidgeClassifierMixin, ClassifierMixin, _NystroemRidgeBase):
    __doc__ = ("""Classifier by Nyström kernel ridge regression on ±1 codes (one-vs-rest), FALKON solver.

    As :class:`mercer.KernelRidgeClassifier` (``class_weight``, ``fit_intercept``), with the
    Nyström model and solver of :class:`NystroemKernelRidge`; all classes are solved at once
    (one CG with n_classes right-hand sides).
""" + _PARAMS_DOC + """
    fit_intercept : bool, default=True
    class_weight : dict, "balanced" or None

    Attributes
    ----------
    classes_, intercept_, coef_ (M, n_targets), centers_, n_iter_, residual_, fit_time_.
    """)

    _score_dtype = torch.float64  # float32 tiles, float64 scores (as the coefficients)

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_centers="auto", centers="uniform", solver="auto", max_iter=100, tol=1e-3,
                 preconditioner="falkon", fit_intercept=True, class_weight=None, random_state=None, device=None,
                 dtype="float32", memory_budget=None):
        self.alpha = alpha
        self.solver = solver
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.n_centers = n_centers
        self.centers = centers
        self.max_iter = max_iter
        self.tol = tol
        self.preconditioner = preconditioner
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

