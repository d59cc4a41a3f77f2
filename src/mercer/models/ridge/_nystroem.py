"""Nyström kernel ridge regression and classification with a FALKON-class solver.

With M centres ``Z`` the model is ``f(x) = k(x, Z) beta``, and ``beta`` minimises
``||y - K_nM beta||^2_W + alpha beta^T K_MM beta`` (``alpha`` exactly as in
:class:`~mercer.KernelRidge`; FALKON's ``lambda`` is ``alpha / n``), i.e. solves

.. math:: (K_{nM}^T W K_{nM} + \\alpha K_{MM})\\, \\beta = K_{nM}^T W y.

With every training point as a centre this is exact kernel ridge regression. The system is
solved by conjugate gradient with FALKON's preconditioner (Rudi, Carratino & Rosasco 2017):
``T = chol(K_MM)``, ``A = chol(T T^T / M + lambda I)``, and CG runs on
``A^{-T} (T^{-T} K_nM^T W K_nM T^{-1} / n + lambda I) A^{-1}``, whose condition number stays
small when ``K_nM^T K_nM ~ (n / M) K_MM^2`` (uniform centres); the preconditioner is
:class:`~mercer.linalg.FalkonPreconditioner`, and the solver sees only its products and the
operator's ``K_nM^T W K_nM v`` (:meth:`~mercer.linalg.KernelOperator.kt_k_v`). The ``n x M`` kernel
matrix is computed tile by tile through :class:`~mercer.linalg.KernelOperator`: when it fits half the
memory budget left by the M x M matrices, the first pass keeps it and every iteration reads it (two
passes over memory, O(n M)); otherwise each iteration recomputes it and memory stays O(n d + M^2)
(time O(n M d) per iteration). Tiles are float32 by default
(twice the speed), and everything else -- the two M x M factors, the CG vectors, the sums of
the tiles' partial products -- is float64.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator, to_numpy
from ..._sparse import plan_features
from ..._validation import Interval, Options, check_at_most, check_params
from ...approx import (LANDMARKS_CONSTRAINTS, check_finite, check_landmarks_param, check_params_fit_dtype,
                       select_landmarks)
from ...linalg import (ConvergenceWarning, FalkonPreconditioner, KernelOperator, conjugate_gradient, engine_for,
                       falkon_solve_bytes, jittered_cholesky, lower_gram, nystroem_plan,
                       warn_ill_conditioned)
from ...sources import RowSource
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin
from ._checkpoint import Checkpoint, fingerprint
from ._exact import RidgeClassifierMixin, _check_alpha, add_intercept, intercept_output

__all__ = ["NystroemKernelRidge", "NystroemKernelRidgeClassifier"]

log = logging.getLogger(__name__)


#: What a user can do about an ill-conditioned solve (see mercer.linalg.warn_ill_conditioned).
_ILL_CONDITIONED_ADVICE = ("Scale the features (e.g. sklearn.preprocessing.StandardScaler; the kernel's gamma is "
                           "then meaningful for every feature), raise alpha, or use fewer centres.")


def _alpha_groups(alphas: np.ndarray) -> dict[float, list[int]]:
    """Targets by distinct alpha (one solve per alpha, all its targets at once)."""
    groups: dict[float, list[int]] = {}
    for j, a in enumerate(alphas):
        groups.setdefault(float(a), []).append(j)
    return groups


class _NystroemRidgeBase(KernelEstimatorMixin, BaseEstimator):
    _streams_fit = True  # fit reads a streamed X (mercer.sources) block by block
    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "n_centers": [Interval(Integral, 1, None, closed="left"), Options("auto")],
        "centers": LANDMARKS_CONSTRAINTS,
        "solver": [Options("auto", "cg", "direct")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "preconditioner": [Options("falkon", "none")],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
        "checkpoint": [str, os.PathLike, None],
    }

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: a model saved before ``fit_intercept`` existed has none."""
        super()._after_load()
        if not hasattr(self, "intercept_"):
            self.intercept_ = 0.0
            self.fit_intercept = False

    @staticmethod
    def direct_max_centers(n_features: int) -> int:
        """Largest M for which ``solver="auto"`` solves directly. Per kernel entry, the direct solve
        costs (2M + 2d) float64 flops (~70 GFLOP/s on this project's machines), CG about 20
        iterations of (1.5 ns + 2d flops at ~80 GFLOP/s) for a float32 tile: they break even at
        M = 1050 + 16.5 d (about 1,500 for d = 28, 14,000 for Fashion-MNIST's d = 784)."""
        return int(1050 + 16.5 * n_features)

    # -- fit: validate, plan, build the operator, solve, record ---------------------------------
    def _fit_targets(self, X, Y: np.ndarray, sw):
        """Fit every column of ``Y`` (n, t); ``fit`` has checked the parameter table."""
        t_start = time.perf_counter()
        centers, M, alphas = self._check_fit(X, Y)
        # sparse rows (in memory or a sparse source): a kernel entry costs their stored entries, not d
        direct = self._choose_solver(M, plan_features(X), Y.shape[1])
        budget = nystroem_plan(self._plan, falkon_solve_bytes(M, Y.shape[1], direct=direct), direct=direct,
                               owner=type(self).__name__, n_centers=M)
        n_w = float(X.shape[0] if sw is None else sw.sum())
        if n_w <= 0:
            raise ValueError(f"{type(self).__name__}: the sample weights sum to zero.")
        # A source stays on disk, read by blocks in the model's dtype (as an in-memory X is converted).
        Xt = X.astype(str(self._dtype)[6:]) if isinstance(X, RowSource) else self._tensor(X)
        gen = make_generator(self.random_state)  # CPU draws: the same centres on every device
        Z, idx = select_landmarks(Xt, M, centers, kernel=self.kernel_, generator=gen, memory_budget=self._budget,
                                  reg=float(alphas.mean()) if alphas.mean() > 0 else None, owner=type(self).__name__,
                                  dtype=self._dtype, device=self._device)
        y_mean = np.asarray((Y.mean(0) if sw is None else (sw @ Y) / n_w) if self.fit_intercept  # a Dask y: computed
                            else np.zeros(Y.shape[1]), dtype=np.float64)
        op = self._operator(Xt, Z, Y.shape[1], direct, budget)
        Yt, w = op.per_sample(Y - y_mean), op.per_sample(sw)
        # K_nM^T W (y - mean y), and with an intercept K_nM^T W 1 / n_w = k_mean, in one pass over the tiles
        # (with the direct solver's K_c^T W K_c too). With an intercept the system is that of the centred
        # columns, K_c = K_nM - 1 k_mean^T: K_c^T W y_c = K_nM^T W y_c. The operator (any engine) then
        # subtracts k_mean from every tile, so each product is one of K_c in the tiles' precision (a
        # positive semi-definite K_c^T W K_c, even in float32). The rank-one correction
        # K^T W K v - n_w k_mean k_mean^T v instead subtracts two float64 numbers each carrying the float32
        # rounding of K_nM v, whose mean dominates it: CG broke down on it (standardised protein,
        # alpha = 1e-6 n: residual 0.78 after 41 iterations).
        stats = op.statistics(Yt if w is None else Yt * w[:, None], weights=w, n_w=n_w, centre=self.fit_intercept,
                              gram=direct)
        rhs, gram, self._k_mean = stats.rhs, stats.gram, stats.col_mean
        if self._k_mean is not None and gram is None:
            op.shift = self._k_mean.to(op.dtype)
        K_mm = self.kernel_(Z.to(torch.float64))
        check_finite(K_mm, type(self).__name__, "the centres' kernel values", X=X, kernel=self.kernel_, dtype=op.dtype)
        check_finite([rhs] + ([] if self._k_mean is None else [self._k_mean]), type(self).__name__,
                     "the kernel values (K_nM^T W y)", X=X, kernel=self.kernel_, dtype=op.dtype, y=Y)
        self.n_iter_ = np.zeros(Y.shape[1], dtype=int)
        self.residual_ = np.zeros(Y.shape[1])
        self.cg_history_ = np.zeros(0)  # relative residual per CG iteration (empty for the direct solve)
        self.jitter_ = 0.0
        self.solver_ = "direct" if direct else "cg"
        if direct:
            self.coef_ = self._solve_direct(op, w, n_w, rhs, K_mm, _alpha_groups(alphas), gram)
        else:
            self.coef_ = self._solve_cg(op, w, n_w, rhs, K_mm, _alpha_groups(alphas))
        self.intercept_ = y_mean - (0.0 if self._k_mean is None else to_numpy(self._k_mean @ self.coef_))
        # predict computes in the model's dtype (the direct solve's float64 tiles aside): coefficients or
        # intercepts it cannot hold (targets beyond float32) are an error now, not non-finite predictions later
        check_finite([self.coef_.to(self._dtype), torch.as_tensor(np.asarray(self.intercept_, dtype=np.float64)).to(
            self._dtype)], type(self).__name__, "the fitted coefficients", X=X, kernel=self.kernel_, dtype=self._dtype,
            y=Y)
        del self._k_mean
        self.centers_ = Z
        self.center_indices_ = None if idx is None else to_numpy(idx)
        self.n_centers_ = M
        self.fit_time_ = time.perf_counter() - t_start
        log.info("%s: n=%d, M=%d, %d CG iterations, fit in %.1f s", type(self).__name__, X.shape[0], M,
                 int(self.n_iter_.max()), self.fit_time_)

    def _validate_targets(self, y, X):
        """``y`` as float64 (n,) or (n, t); a Dask ``y`` stays on the cluster when the products run
        there (the engine of :func:`mercer.linalg.engine_for`), else it is gathered like any array."""
        y_kept = engine_for(X).targets(y, X, type(self).__name__)
        return y_kept if y_kept is not None else self._validate_y(y, X.shape[0])

    def _check_fit(self, X, Y: np.ndarray):
        """The data-dependent checks: the centres (rule or array), M, alpha per target, the kernel."""
        owner = type(self).__name__
        centers = check_landmarks_param(self.centers, X.shape[1], owner, name="centers")
        if not isinstance(centers, str):
            M = centers.shape[0]
        elif isinstance(self.n_centers, str):  # "auto"
            M = min(X.shape[0], max(100, int(math.ceil(5 * math.sqrt(X.shape[0])))))
        else:  # centres are chosen among the training points
            check_at_most(owner, "n_centers", self.n_centers, X.shape[0], "n_samples")
            M = int(self.n_centers)
        alphas = _check_alpha(self.alpha, Y.shape[1], owner)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} needs a kernel on feature vectors; kernel='precomputed' is not supported "
                             "(use KernelRidge).")
        self._setup_compute(X)
        check_params_fit_dtype(self.kernel_, self._dtype, owner)
        return centers, M, alphas

    def _choose_solver(self, M: int, d: int, t: int) -> bool:
        """Whether to solve directly (else by CG): ``solver``, or "auto"'s rule."""
        return self.solver == "direct" or (
            self.solver == "auto" and M <= self.direct_max_centers(d)
            and falkon_solve_bytes(M, t, direct=True) <= self._budget)

    def _operator(self, Xt, Z, t: int, direct: bool, budget):
        """The blocked ``K_nM`` operator of the engine the data chooses (a cluster's runs the products
        on its workers; per-sample arrays then stay placed like X's rows). ``budget``: the fit's
        :class:`~mercer.linalg.NystroemPlan`.

        The direct solve is GEMM-bound: float64 tiles cost little more, and its one pass takes the
        plan's large tiles. CG's tiles are sized for the repeated product (``K v``, then ``K^T w``:
        the second read should come from cache; :func:`mercer.linalg.product_tile_bytes`), and it
        keeps ``K_nM`` when it fits the plan's ``keep_bytes``: an iteration then reads it twice from
        memory instead of evaluating the kernel (n = 100,000, M = 5,000, d = 8, float64: 0.26 s vs
        1.46 s with the intercept's shift; 0.13 s vs 0.27 s in float32 without it)."""
        if direct and Z.dtype != torch.float64:
            Z = Z.to(torch.float64)
            Xt = Xt if isinstance(Xt, RowSource) else Xt.to(torch.float64)  # a source's blocks follow Z's dtype
        return engine_for(Xt).operator(self.kernel_, Xt, Z, memory_budget=budget.tiles,
                                       n_rhs=t + self.fit_intercept, max_tile_bytes=budget.max_tile_bytes,
                                       keep_bytes=budget.keep_bytes)

    def _solve_direct(self, op, w, n_w, rhs, K_mm, groups, H):
        """(K_c^T W K_c + alpha K_MM) beta = K_c^T W y_c by Cholesky (``H``: ``K_c^T W K_c``, from the
        operator's statistics with the right-hand side)."""
        coef = torch.empty_like(rhs)
        for a, cols in groups.items():
            A = H.clone()
            A.add_(K_mm, alpha=a)
            fac = jittered_cholesky(A, owner=type(self).__name__)
            self.jitter_ = max(self.jitter_, fac.jitter)
            warn_ill_conditioned(fac.L, owner=type(self).__name__,
                                 what=f"the direct solve's system K_nM^T W K_nM + alpha K_MM (alpha={a:g})",
                                 advice=_ILL_CONDITIONED_ADVICE)
            coef[:, cols] = fac.solve(rhs[:, cols])
            self.n_iter_[cols] = 1  # one direct solve (scikit-learn's convention: n_iter_ >= 1)
        return coef

    def _solve_cg(self, op, w, n_w, rhs, K_mm, groups):
        """Conjugate gradient on the FALKON-preconditioned system, one run per distinct alpha."""
        coef = torch.empty_like(rhs)
        prec = None
        ckpt = Checkpoint(self.checkpoint, fingerprint(self, op.Z, rhs, n_w, op.shape[0]) if self.checkpoint else "",
                          type(self).__name__)
        for g, (a, cols) in enumerate(groups.items()):
            prec = self._preconditioner(K_mm, a / n_w, prec)
            self.jitter_ = max(self.jitter_, prec.jitter)
            done = ckpt.done(g)
            if done is not None:  # this solve finished before the checkpoint was written
                coef[:, cols] = torch.from_numpy(done["coef"][:, cols]).to(coef)
                self.n_iter_[cols] = done["n_iter_done"][cols]
                self.residual_[cols] = done["residual_done"][cols]
                self.cg_history_ = done["history_done"]
                continue
            matvec = prec.system(lambda v: self._kt_k_v(op, v, w, n_w), n_w)
            t0 = time.perf_counter()
            res = conjugate_gradient(matvec, prec.rhs(rhs[:, cols], n_w), tol=float(self.tol),
                                     max_iter=int(self.max_iter), callback=self._log_iteration(t0),
                                     resume=ckpt.resume(g, rhs.device),
                                     save_state=ckpt.saver(g, coef, self.n_iter_, self.residual_, self.cg_history_))
            coef[:, cols] = prec.apply(res.x)
            self.n_iter_[cols] = res.n_iter
            self.residual_[cols] = to_numpy(res.residual)
            self.cg_history_ = np.concatenate([self.cg_history_, np.asarray(res.history, dtype=np.float64)])
            if not res.converged:
                why = "max_iter" if res.n_iter >= int(self.max_iter) else "no further progress in this precision"
                warnings.warn(
                    f"{type(self).__name__}: conjugate gradient stopped after {res.n_iter} iterations ({why}) with "
                    f"relative residual {float(res.residual.max()):.2e} > tol={self.tol}; the model is usable but "
                    "not fully converged. Raise max_iter (or tol).", ConvergenceWarning, stacklevel=4)
        ckpt.finish()
        return coef

    def _preconditioner(self, K_mm, lam: float, prev):
        """FALKON's preconditioner for ``lam`` (``prev``: the one of another ``lam``, whose ``T`` is reused).
        With an intercept its inner factor is that of the centred system, ``A^T A = T C T^T / M + lam I``
        with ``C = I - 1 1^T / M``: for uniform centres ``K_c^T K_c ~ (n / M) K_MM C K_MM`` (the centres'
        mean standing in for the data's). Against FALKON's own factor on the same centred tiles: 84 -> 59,
        71 -> 55 and 60 -> 48 CG iterations on synthetic sets (n = 3,000-4,000, alpha = 1e-6 n, float32),
        80 -> 93 on another, 48 -> 52 on protein (M = 2,000)."""
        owner = type(self).__name__
        precondition = self.preconditioner == "falkon"
        if not (precondition and self._k_mean is not None and lam > 0):
            if prev is not None and (prev.La is not None or not precondition):
                return prev.with_lam(lam, owner=owner)
            return FalkonPreconditioner.build(K_mm, lam, tile_dtype=self._dtype, owner=owner,
                                              precondition=precondition)
        base = prev if prev is not None else FalkonPreconditioner.build(K_mm, lam, tile_dtype=self._dtype,
                                                                        owner=owner, precondition=False)
        L, M = base.L, base.L.shape[0]
        t = L.sum(0)  # T 1 (T = L^T)
        C = lower_gram(L.clone())  # T T^T in float64: in float32 the rank-one downdate below broke its definiteness
        C.sub_(torch.outer(t, t), alpha=1.0 / M).div_(M).diagonal().add_(lam)
        La = jittered_cholesky(C, owner=owner).L.tril_()
        return FalkonPreconditioner(L, La, lam, base.jitter, base.work_dtype)

    def _kt_k_v(self, op, v, w, n_w):
        """``K_c^T W K_c v`` in float64 (``K_c``: the operator's tiles, centred when there is an intercept)."""
        return op.kt_k_v(v, weights=w, out_dtype=torch.float64)

    @staticmethod
    def _log_iteration(t0):
        def cb(it, x, rel):
            if log.isEnabledFor(logging.INFO):
                log.info("CG iteration %d: relative residual %.2e (%.1f s)", it, float(rel.max()),
                         time.perf_counter() - t0)
        return cb

    def _decision(self, X):
        """``k(X, centers_) @ coef_`` of shape (n, n_targets), blocked over rows."""
        check_is_fitted(self, "coef_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv).to(self.centers_.device)
        coef = self.coef_[:, None] if self.coef_.ndim == 1 else self.coef_
        op = KernelOperator(self.kernel_, Xt, self.centers_, memory_budget=self._budget, n_rhs=coef.shape[1])
        out = op.matvec(coef.to(Xt.dtype))
        check_finite(out, type(self).__name__, "the predictions", X=Xv, kernel=self.kernel_, dtype=Xt.dtype)
        return out

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
        "cg": FALKON-preconditioned conjugate gradient; K_nM is kept in memory when it fits half the
        budget its M x M matrices leave (each iteration then reads it: time O(n M)), else recomputed
        every iteration (memory O(n d + M^2), time O(n M d) per iteration). "direct": ``K_nM^T W K_nM`` formed in float64 in one
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
        "none" keeps only the change of variables by ``chol(K_MM)`` (see
        :class:`mercer.linalg.FalkonPreconditioner`).
    fit_intercept : bool, default=True
        Fit an unpenalised offset ``b``, as scikit-learn's ``Ridge`` does on Nystroem features:
        ``f(x) = k(x, Z) beta + b`` minimising ``||y - K_nM beta - b||^2_W + alpha beta^T K_MM beta``
        (the columns of ``K_nM`` and ``y`` centred by their weighted means). This is the exact
        model for both solvers: with every training point as a centre it is
        :class:`mercer.KernelRidge` with the same ``fit_intercept``, and with the same centres it is
        ``make_pipeline(Nystroem, Ridge(alpha))``. The centring is applied to every kernel tile (so
        the float32 products stay those of one matrix) and FALKON's inner factor is that of the
        centred system; CG then converges as without an intercept, with a few more iterations
        (README, "The intercept"). Without it the model falls to 0 away from the centres: worse
        whenever the target's mean is not 0 (KEGG: test RMSE 0.19 against 0.14).
    dtype : {"float32", "float64"} or None, default="float32"
        Precision of the kernel tiles (None: follow the input). The solve itself is float64.
    checkpoint : str, path or None, default=None
        A file (``.npz``) where the conjugate-gradient state is saved after every iteration
        (atomically; a few ``M x n_targets`` float64 arrays). A fit that finds the checkpoint of the
        same fit (same data, targets, centres and parameters but ``max_iter`` and ``tol``: the
        centres must be reproducible, so set ``random_state``) resumes from it, to the result of an
        uninterrupted fit; a checkpoint of another fit is ignored with a warning. Removed when
        the fit completes. Unused by the direct solver.
    random_state, device, memory_budget : as elsewhere in mercer.
"""


class NystroemKernelRidge(MultiOutputMixin, RegressorMixin, _NystroemRidgeBase):
    __doc__ = ("""Nyström kernel ridge regression solved by FALKON-preconditioned conjugate gradient.

    Memory O(n d + M^2); with ``n_centers = n`` (all points) it equals :class:`mercer.KernelRidge`
    with the same ``fit_intercept``. With the default ``fit_intercept=True`` it is scikit-learn's
    ``make_pipeline(Nystroem(...), Ridge(alpha))`` (same ``alpha``: both losses are unnormalised
    sums).
""" + _PARAMS_DOC + """
    Attributes
    ----------
    coef_ : tensor of shape (M,) or (M, n_targets)
    intercept_ : float or ndarray of shape (n_targets,)
        0.0 when ``fit_intercept=False``.
    centers_ : tensor of shape (M, n_features_in_)
    center_indices_ : ndarray or None
    n_iter_, residual_ : ndarray of shape (n_targets,)
        CG iterations and final relative residual per target (1 and 0 for the direct solver).
    cg_history_ : ndarray
        Relative residual after each CG iteration (the targets' solves one after the other; empty
        for the direct solver): what :func:`mercer.plotting.cg_convergence` draws.
    solver_ : str
        "cg" or "direct".
    jitter_ : float
        Jitter added to ``K_MM`` (0.0 normally).
    fit_time_ : float
    """)

    _saved_private = ("_y_1d",)  # private state that mercer.io saves

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_centers="auto", centers="uniform", solver="auto", max_iter=100, tol=1e-3,
                 preconditioner="falkon", fit_intercept=True, random_state=None, device=None, dtype="float32",
                 memory_budget=None, checkpoint=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
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
        self.checkpoint = checkpoint

    def fit(self, X, y, sample_weight=None):
        check_params(self)
        X = self._validate_X(X, reset=True)
        y = self._validate_targets(y, X)
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        self._fit_targets(X, y.reshape(len(y), -1), sw)
        self._y_1d = y.ndim == 1
        self.intercept_ = intercept_output(self.intercept_, self._y_1d)
        if self._y_1d:
            self.coef_ = self.coef_[:, 0]
        return self

    def predict(self, X):
        out = add_intercept(self._decision(X).to(torch.float64), self.intercept_)
        if self._y_1d:
            out = out[:, 0]
        return as_output(out if not isinstance(X, torch.Tensor) else out.to(self.centers_.dtype), X)


class NystroemKernelRidgeClassifier(RidgeClassifierMixin, ClassifierMixin, _NystroemRidgeBase):
    __doc__ = ("""Classifier by Nyström kernel ridge regression on ±1 codes (one-vs-rest), FALKON solver.

    As :class:`mercer.KernelRidgeClassifier` (``class_weight``, ``fit_intercept``, which defaults to
    True as in scikit-learn's ``RidgeClassifier``), with the Nyström model and solver of
    :class:`NystroemKernelRidge`; all classes are solved at once (one CG with n_classes right-hand sides).
""" + _PARAMS_DOC + """
    class_weight : dict, "balanced" or None

    Attributes
    ----------
    classes_, intercept_, coef_ (M, n_targets), centers_, n_iter_, residual_, fit_time_.
    """)

    _score_dtype = torch.float64  # float32 tiles, float64 scores (as the coefficients)
    _parameter_constraints: dict = {
        **_NystroemRidgeBase._parameter_constraints,
        "fit_intercept": ["boolean"],
        "class_weight": [dict, Options("balanced"), None],
    }

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_centers="auto", centers="uniform", solver="auto", max_iter=100, tol=1e-3,
                 preconditioner="falkon", fit_intercept=True, class_weight=None, random_state=None, device=None,
                 dtype="float32", memory_budget=None, checkpoint=None):
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
        self.checkpoint = checkpoint

