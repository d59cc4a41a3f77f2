"""Nyström kernel ridge whose kernel hyperparameters, ``alpha`` and (optionally) centres are learned
from closed-form validation objectives computed by blocked passes over the rows.

The Nyström ridge of :class:`~mercer.models.ridge.NystroemKernelRidge` with centres ``Z`` solves
``(A_c + alpha K_MM) beta = b_c`` where, with an intercept, the columns and targets are centred by
their weighted means: ``A_c = K^T W K - n_w k k^T``, ``b_c = K^T W y - n_w k ybar^T``, ``k = K^T W 1 / n_w``
(``K = k(X, Z)``, ``n x M``). Both objectives below are functions of the blocked statistics of
:func:`mercer.linalg.kernel_statistics` and of ``K_MM`` only, so their value and gradient (with
respect to every log-hyperparameter, ``log alpha`` and the centres' coordinates) cost two passes
over the rows and O(block + M^2) memory, in memory or streamed from a source:

* ``"gcv"``, generalised cross-validation (Golub, Heath & Wahba 1979) on all rows:
  ``GCV = (RSS / n_w) / (1 - df / n_w)^2`` with ``RSS = y_c^T W y_c - 2 beta^T b_c + beta^T A_c beta``
  and the degrees of freedom of the smoother, ``df = tr((A_c + alpha K_MM)^{-1} A_c) (+ 1 for the
  intercept)``; averaged over the targets.
* ``"holdout"``: the weighted mean squared error on a random ``validation_fraction`` of the rows
  of the model fitted on the others (with ``alpha`` scaled to the training rows' weight), from the
  statistics of both parts in the same passes: for ``f = K beta + c0``,
  ``sum_val w (y - f)^2 = y^T W y - 2 beta^T K^T W y - 2 c0 1^T W y + beta^T K^T W K beta
  + 2 c0 beta^T K^T W 1 + c0^2 n_w``.
"""

from __future__ import annotations

import logging
import math
import time
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import check_random_state, make_generator, to_numpy
from ..._sparse import as_sparse_rows, is_sparse, is_sparse_input
from ..._validation import Interval, Options, check_at_most, check_params
from ...approx import LANDMARKS_CONSTRAINTS, check_landmarks_param, select_landmarks
from ...kernels import LearnableKernel
from ...linalg import centres_gram, kernel_statistics, plan_rows, sample_row_bytes
from ...sources import RowSource
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin
from .._hyperopt import (OPTIMIZER_CONSTRAINTS, check_bounds, check_target_scale, chol_with_jitter, minimise_into,
                         optimize)
from ._exact import _classification_targets
from ._nystroem import NystroemKernelRidge, NystroemKernelRidgeClassifier

__all__ = ["NystroemKernelRidgeCV", "NystroemKernelRidgeClassifierCV", "nystroem_gcv", "nystroem_holdout_error"]

log = logging.getLogger(__name__)


def _centred(stats, g: int, fit_intercept: bool):
    """``(A_c, b_c, yy_c, k_mean, y_mean)`` of weight column ``g`` (means None without intercept)."""
    A, b, s, n_w, yy, ysum = stats.gram[g], stats.rhs[g], stats.colsum[g], stats.n_w[g], stats.yy[g], stats.ysum[g]
    if not fit_intercept:
        return A, b, yy, None, None
    k_mean, y_mean = s / n_w, ysum / n_w
    return A - n_w * torch.outer(k_mean, k_mean), b - torch.outer(s, y_mean), yy - n_w * y_mean**2, k_mean, y_mean


def _solve(A_c, b_c, K_mm, alpha):
    """Cholesky factor of ``A_c + alpha K_MM`` and ``beta``."""
    H = A_c + alpha * K_mm.to(A_c.dtype)
    L = chol_with_jitter(0.5 * (H + H.mT))
    return L, torch.cholesky_solve(b_c, L)


#: the GCV refuses a point whose residual sum of squares is below this many times its rounding error
_RSS_ROUNDING = 8.0


class _GCV(torch.autograd.Function):
    """``GCV(A_c, b_c, yy_c, K_MM, alpha)`` with its gradient written out. With ``H = A_c + alpha K_MM``
    (its Cholesky factor), ``beta = H^-1 b_c``, ``r = A_c beta - b_c``, ``u = H^-1 r``, ``S = H^-1 A_c H^-1``:
    ``d rss / d b = 2 (u - beta)``, ``d rss / d A_c = beta beta^T`` and ``d rss / d H = -(u beta^T + beta u^T)``;
    ``d df / d A_c = H^-1`` and ``d df / d H = -S`` (summed over the targets): fewer M x M x M products
    than autograd through the factorisation and the solves."""

    @staticmethod
    def forward(ctx, A, b, yy, K, alpha, n_w, extra, scale_A=0.0, scale_y=0.0):
        L, beta = _solve(A, b, K, alpha)
        Ab = A @ beta
        rss = yy - 2.0 * (beta * b).sum(0) + (beta * Ab).sum(0)
        # rss cancels about eps (|beta|^2 tr(A) + y^T W y) (A, b and yy are sums rounded to eps, then
        # centred; scale_A, scale_y: the uncentred traces): where H is ill-conditioned (tiny alpha),
        # |beta| is huge and rss, even its sign, is rounding; such a value (a negative GCV on a path of
        # NystroemKernelRidgeCV) would be taken for the best point
        # (a target fitted exactly, beta ~ 0 and rss ~ 0 -- one class's codes --, is no such point: the
        # refusal needs the beta term to dominate the rounding)
        eps = torch.finfo(A.dtype).eps
        noise = eps * (beta * beta).sum(0) * scale_A
        if bool(((rss <= _RSS_ROUNDING * noise) & (noise > eps * scale_y)).any()):
            raise FloatingPointError("GCV: the residual sum of squares is below its rounding error (A_c + alpha "
                                     "K_MM is too ill-conditioned for the statistics' precision)")
        # df = tr(H^-1 A_c) from the triangular solves: as sum(H^-1 o A_c) it cancels digits where H is
        # ill-conditioned (tiny alpha), and L-BFGS stalls on the noise
        T = torch.cholesky_solve(A, L)
        s = 1.0 - (T.diagonal().sum() + extra) / n_w
        value = (rss / n_w).mean() / s**2
        ctx.save_for_backward(A, b, K, alpha, L, T, beta, Ab, n_w, s, value)
        return value

    @staticmethod
    def backward(ctx, g):
        A, b, K, alpha, L, T, beta, Ab, n_w, s, value = ctx.saved_tensors
        c_rss = g / (s**2 * n_w * b.shape[1])  # d value / d rss_t
        c_df = 2.0 * g * value / (s * n_w)  # d value / d df
        u = torch.cholesky_solve(Ab - b, L)
        sym = u @ beta.mT
        Hinv = torch.cholesky_inverse(L)
        S = T @ Hinv  # H^-1 A_c H^-1
        G_H = -c_rss * (sym + sym.mT) - c_df * 0.5 * (S + S.mT)
        need = ctx.needs_input_grad
        G_A = c_rss * (beta @ beta.mT) + c_df * Hinv + G_H if need[0] else None
        G_b = 2.0 * c_rss * (u - beta) if need[1] else None
        G_yy = c_rss.expand(b.shape[1]).clone() if need[2] else None
        G_K = alpha * G_H if need[3] else None
        G_alpha = (G_H * K).sum().reshape(alpha.shape) if need[4] else None
        return G_A, G_b, G_yy, G_K, G_alpha, None, None, None, None


def nystroem_gcv(stats, K_mm: torch.Tensor, alpha, *, fit_intercept: bool = True) -> torch.Tensor:
    """Generalised cross-validation of Nyström ridge from the statistics of one weight column
    (see the module docstring); differentiable in the statistics, ``K_mm`` and ``alpha``. Raises
    ``FloatingPointError`` where the residual sum of squares is below its rounding error (``A_c + alpha
    K_MM`` too ill-conditioned): the optimiser counts such a point as failed."""
    A_c, b_c, yy_c, _, _ = _centred(stats, 0, fit_intercept)
    alpha = torch.as_tensor(alpha, dtype=A_c.dtype, device=A_c.device)
    scale_A, scale_y = float(stats.gram[0].detach().diagonal().sum()), float(stats.yy[0].detach().abs().max())
    return _GCV.apply(A_c, b_c, yy_c, K_mm.to(A_c.dtype), alpha, stats.n_w[0], 1.0 if fit_intercept else 0.0,
                      scale_A, scale_y)


def nystroem_holdout_error(stats, K_mm: torch.Tensor, alpha, *, fit_intercept: bool = True) -> torch.Tensor:
    """Weighted mean squared validation error (averaged over the targets) of the Nyström ridge fitted
    on weight column 0 with ``alpha``, on weight column 1 (see the module docstring)."""
    A_c, b_c, _, k_mean, y_mean = _centred(stats, 0, fit_intercept)
    _, beta = _solve(A_c, b_c, K_mm, alpha)
    A, b, s, n_v, yy, ysum = stats.gram[1], stats.rhs[1], stats.colsum[1], stats.n_w[1], stats.yy[1], stats.ysum[1]
    err = yy - 2.0 * (beta * b).sum(0) + (beta * (A @ beta)).sum(0)
    if fit_intercept:
        c0 = y_mean - k_mean @ beta
        err = err - 2.0 * c0 * ysum + 2.0 * c0 * (s @ beta) + c0**2 * n_v
    return (err / n_v).mean()


_OBJECTIVES = {"gcv": nystroem_gcv, "holdout": nystroem_holdout_error}

#: coarse_rows="auto": the first coarse stage's rows (a tenth of them, at least 2,000 and 10 per
#: centre), their growth per stage, and the fewest iterations of a later stage.
_AUTO_FIRST_ROWS = 2000
_AUTO_ROWS_PER_CENTER = 10
_AUTO_FIRST_FRACTION = 10
_AUTO_GROWTH = 4
_MIN_STAGE_ITER = 4
#: with coarse stages, L-BFGS makes at most this many evaluations per iteration of a stage (its line
#: searches included): keggundirected spent 61 evaluations on 6 iterations of a 32,000-row stage
_EVALS_PER_ITER = 2
#: each later stage runs this many times fewer iterations than the one before: most iterations where
#: they are cheap (docs/user_guide/nystroem.md: the schedule against the former 50 / a third / at least 5)
_ITER_SHRINK = 5


class _NystroemCVBase(KernelEstimatorMixin, BaseEstimator):
    """The learning of :class:`NystroemKernelRidgeCV` and :class:`NystroemKernelRidgeClassifierCV`."""

    _streams_fit = True  # fit reads a streamed X (mercer.sources) block by block
    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        **OPTIMIZER_CONSTRAINTS,
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "n_centers": [Interval(Integral, 1, None, closed="left"), Options("auto")],
        "centers": LANDMARKS_CONSTRAINTS,
        "objective": [Options("gcv", "holdout")],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "learn_alpha": ["boolean"],
        "learn_centers": ["boolean"],
        "coarse_rows": [Options("auto"), Interval(Integral, 2, None, closed="left"), "array-like", None],
        "hyperparameter_bounds": ["array-like"],
        "alpha_bounds": ["array-like"],
        "fit_intercept": ["boolean"],
        "solver": [Options("auto", "cg", "direct")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }
    _FINAL_PARAMS = ("fit_intercept", "solver", "tol", "random_state", "device", "dtype", "memory_budget")

    def _check_rows(self, X) -> int:
        n = X.shape[0]
        if n < 2:
            raise ValueError(f"{type(self).__name__} learns from validation errors, which need at least 2 samples; "
                             f"got n_samples={n}.")
        return n

    def _final_centers(self):
        """``centers_`` as the final estimator takes them: a CSR matrix for sparse rows, else numpy."""
        return self.centers_.to_scipy() if is_sparse(self.centers_) else to_numpy(self.centers_)

    def _final_params(self) -> dict:
        return {name: getattr(self, name) for name in self._FINAL_PARAMS}

    def _learn(self, X, Y: np.ndarray, sw):
        """Learn ``kernel_``, ``alpha_`` and ``centers_`` from the targets ``Y`` (n, t)."""
        owner = type(self).__name__
        bounds_k = check_bounds(owner, "hyperparameter_bounds", self.hyperparameter_bounds)
        bounds_a = check_bounds(owner, "alpha_bounds", self.alpha_bounds)
        n, d = X.shape
        self._setup_compute(X)
        kernel = self._resolve_kernel()
        if kernel.is_precomputed:
            raise ValueError(f"{owner} learns kernel hyperparameters: kernel='precomputed' is not supported.")
        f64 = dict(dtype=torch.float64, device=self._device)
        if isinstance(X, RowSource):  # read block by block; a sparse source's blocks are sparse rows
            Xt = X.astype("float64")
            sparse = bool(X.sparse)
        elif is_sparse_input(X):  # kept sparse: the statistics are computed on sparse blocks
            Xt, sparse = as_sparse_rows(X, **f64), True
        else:
            Xt, sparse = (X.detach().to(**f64) if torch.is_tensor(X) else torch.tensor(np.asarray(X), **f64)), False
        lk = LearnableKernel(kernel, d, bounds_k)
        if sparse:
            self._check_sparse_learning(lk, d)
        rng = check_random_state(self.random_state)
        Z, M = self._initial_centers(Xt, kernel, n, d)
        if sparse and not is_sparse(Z):  # centres given as a dense array: sparse rows as the data
            Z = as_sparse_rows(Z, **f64)
        Y = torch.as_tensor(Y, **f64)
        W = self._weights(n, sw, rng, f64)
        learn_z = bool(self.learn_centers) and lk.differentiable_inputs and self.optimizer is not None
        p = len(lk.names)
        names, theta, bounds = list(lk.names), lk.theta0, lk.log_bounds
        a0 = float(np.clip(self.alpha, *bounds_a))
        if self.learn_alpha:
            names.append("alpha")
            theta = np.append(theta, math.log(a0))
            bounds = np.vstack([bounds, [[math.log(bounds_a[0]), math.log(bounds_a[1])]]])
        q = len(names)
        if learn_z:
            theta = np.concatenate([theta, to_numpy(Z).ravel().astype(np.float64)])
            bounds = np.vstack([bounds, np.full((M * d, 2), [-np.inf, np.inf])])
        objective, path, total = _OBJECTIVES[self.objective], [], W.sum()

        def loss_on(Xs, Ys, Ws, plan):
            # alpha is that of all rows: the rows the model is fitted on (the training part for the
            # hold-out error; a subsample's in a coarse stage) carry their share of it
            scale = float(Ws[:, 0].sum() / total)

            def loss(t):
                path.append(math.nan)  # an evaluation that fails (a Cholesky factorisation) stays NaN
                alpha = torch.exp(t[p]) if self.learn_alpha else torch.as_tensor(a0, dtype=t.dtype, device=t.device)
                Zt = t[q:].reshape(M, d) if learn_z else Z
                stats = kernel_statistics(lk.at, t[:p], Zt, Xs, Ys, Ws, memory_budget=plan, desc=owner)
                K_mm = centres_gram(lk.at, t[:p], Zt)
                value = objective(stats, K_mm, alpha * scale, fit_intercept=bool(self.fit_intercept))
                path[-1] = float(value.detach())
                return value

            return loss

        self.hyperparameter_names_ = names
        perturb = np.arange(theta.size) < q
        learning = self.optimizer is not None and theta.size > 0
        stages = self._coarse_stages(Xt, n, M, Y.shape[1] + W.shape[1]) if learning else []
        iters = self._stage_iterations(len(stages))
        self.stages_ = []
        t0 = time.perf_counter()
        for rows, it in zip(stages, iters):
            Xs, Ys, Ws, plan = self._subsample(Xt, Y, W, rows, rng)
            if not bool((Ws.sum(0) > 0).all()):  # weights zero on the drawn rows of a column: skip the stage
                continue
            first = not self.stages_
            start = len(path)
            best, runs = optimize(loss_on(Xs, Ys, Ws, plan), theta, bounds, method=self.optimizer, max_iter=it,
                                  n_restarts=self.n_restarts_optimizer if first else 0, rng=rng, dtype=torch.float64,
                                  device=self._device, perturb=perturb, max_evals=_EVALS_PER_ITER * it,
                                  desc=f"{owner}: {self.objective} on {rows} of {n} rows")
            theta = best.theta
            self.stages_.append({"n_rows": rows, "max_iter": it, "n_evals": int(sum(r.n_evals for r in runs)),
                                 "n_iter": int(best.n_iter), "objective": float(best.loss), "first_eval": start})
            del Xs, Ys, Ws
        coarse = bool(self.stages_)
        theta = minimise_into(self, loss_on(Xt, Y, W, self._plan), theta, bounds, names[:q],
                              what=f"{self.objective} error", dtype=torch.float64, device=self._device, perturb=perturb,
                              desc=f"{owner}: {self.objective}", max_iter=iters[-1] if coarse else None,
                              n_restarts=0 if coarse else None,
                              max_evals=_EVALS_PER_ITER * iters[-1] if coarse else None)
        if learning:
            self.stages_.append({"n_rows": n, "max_iter": iters[-1] if coarse else int(self.max_iter),
                                 "n_evals": int(self.n_evals_), "n_iter": int(self.n_iter_),
                                 "objective": float(self.cv_error_), "first_eval": len(path) - int(self.n_evals_)})
            self.n_evals_ = int(sum(st["n_evals"] for st in self.stages_))
        self.learning_time_ = time.perf_counter() - t0
        self.objective_path_ = np.asarray(path, dtype=np.float64)
        self.theta_ = np.asarray(theta[:q], dtype=np.float64)
        self.kernel_ = lk.build(self.theta_[:p])
        self.alpha_ = float(np.exp(self.theta_[p])) if self.learn_alpha else a0
        if learn_z:
            Z = torch.tensor(theta[q:].reshape(M, d), **f64)
        self.centers_ = Z
        log.info("%s: %s learned in %.1f s (%d evaluations): alpha=%.3g, kernel %r", owner, self.objective,
                 self.learning_time_, self.n_evals_, self.alpha_, self.kernel_)

    def _coarse_stages(self, Xt, n: int, M: int, extra: int) -> list[int]:
        """The rows of the coarse stages (increasing, each below ``n``), from ``coarse_rows``."""
        owner = type(self).__name__
        spec = self.coarse_rows
        if spec is None:
            return []
        if isinstance(spec, str):  # "auto": n / 10 rows (at least 10 M and 2,000), times 4 per stage, up to
            # 2 n / 3 and within the in-memory share of the budget (a subsample is held in memory)
            cap = plan_rows(n, sample_row_bytes(Xt, extra, 0), budget=self._plan.share("in-memory input"),
                            max_bytes=None, what=f"{owner}: a coarse stage's rows")
            rows, out = max(_AUTO_FIRST_ROWS, _AUTO_ROWS_PER_CENTER * M, n // _AUTO_FIRST_FRACTION), []
            while 3 * rows <= 2 * n and rows <= cap:
                out.append(rows)
                rows *= _AUTO_GROWTH
            return out
        values = np.atleast_1d(np.asarray(spec))
        ok = (values.ndim == 1 and values.size > 0 and values.dtype.kind in "iu"
              and bool((values >= 2).all()) and bool((np.diff(values) > 0).all()))
        if not ok:
            raise ValueError(f"The 'coarse_rows' parameter of {owner} must be 'auto', None, an int >= 2 or an "
                             f"increasing sequence of ints >= 2 (rows of the coarse stages). Got {spec!r} instead.")
        if int(values[-1]) >= n:
            raise ValueError(f"The 'coarse_rows' parameter of {owner} must be below n_samples={n} (the last stage "
                             f"uses all rows); got {spec!r}.")
        return [int(v) for v in values]

    def _stage_iterations(self, n_coarse: int) -> list[int]:
        """Iterations of each stage: ``max_iter`` on the first, a fifth of the one before on each later
        one (at least :data:`_MIN_STAGE_ITER`, at most ``max_iter``); the last is on all rows."""
        its = [int(self.max_iter)]
        for _ in range(n_coarse):
            its.append(min(int(self.max_iter), max(_MIN_STAGE_ITER, -(-its[-1] // _ITER_SHRINK))))
        return its

    def _subsample(self, Xt, Y, W, rows: int, rng):
        """``rows`` random rows (in their order) of the inputs, targets and weights, held in memory;
        and the plan of what is left for the stage's passes."""
        owner = type(self).__name__
        n = Y.shape[0]
        plan = self._plan.holding(rows * sample_row_bytes(Xt, Y.shape[1], W.shape[1]),
                                  what=f"{owner}: the {rows} rows of a coarse stage (coarse_rows)",
                                  remedy="Give fewer coarse_rows, coarse_rows=None, or raise memory_budget.")
        idx = np.sort(rng.choice(n, rows, replace=False))
        it = torch.as_tensor(idx, device=Y.device)
        if isinstance(Xt, RowSource):
            Xs = Xt.take(idx)
            Xs = as_sparse_rows(Xs, dtype=torch.float64, device=self._device) if Xt.sparse else \
                torch.as_tensor(Xs, dtype=torch.float64, device=self._device)
        else:
            Xs = Xt[it]
        return Xs, Y[it], W[it], plan

    def _check_sparse_learning(self, lk, d: int) -> None:
        """What cannot be learned on sparse rows: the centres' coordinates (``M x d`` dense
        parameters and gradients in the space of the sparse features) and per-feature (ARD) scales
        (``d`` hyperparameters; their closed-form gradient is a dense ``M x d`` product per block)."""
        owner = type(self).__name__
        if self.learn_centers:
            raise ValueError(
                f"{owner} cannot learn the centres' coordinates on sparse X (learn_centers=True): they would be "
                f"n_centers x {d} dense parameters (and gradients) in the space of the sparse features, and the "
                "centres could no longer be sparse rows. Use learn_centers=False: the centres are then rows of X "
                "(chosen by 'centers': 'uniform', 'kmeans++', 'leverage' or 'greedy'), kept sparse, and gamma and "
                "alpha are still learned. (To learn centres, reduce the features to a dense matrix first, e.g. "
                "sklearn.decomposition.TruncatedSVD.)")
        ard = [h.name for h in lk.hyperparameters if h.vector]
        if ard:
            raise ValueError(
                f"{owner} cannot learn per-feature (ARD) kernel hyperparameters on sparse X: {', '.join(ard)} of "
                f"the kernel has one value per feature (n_features={d}). On sparse rows only one scale per "
                "hyperparameter is learned: give a scalar (e.g. kernel=RBF(gamma=0.1) or gamma=0.1; gamma=None "
                "starts at 1 / n_features). (For ARD on few features, pass dense X, e.g. X.toarray().)")

    def _initial_centers(self, Xt, kernel, n: int, d: int):
        """The starting centres (float64) and their number, by the rule of :class:`NystroemKernelRidge`."""
        owner = type(self).__name__
        centers = check_landmarks_param(self.centers, d, owner, name="centers")
        if not isinstance(centers, str):
            M = centers.shape[0]
        elif isinstance(self.n_centers, str):  # "auto"
            M = min(n, max(100, int(math.ceil(5 * math.sqrt(n)))))
        else:
            check_at_most(owner, "n_centers", self.n_centers, n, "n_samples")
            M = int(self.n_centers)
        Z, _ = select_landmarks(Xt, M, centers, kernel=kernel, generator=make_generator(self.random_state),
                                memory_budget=self._budget, owner=owner, dtype=torch.float64, device=self._device)
        return Z.to(torch.float64).clone(), M

    def _weights(self, n: int, sw, rng, f64) -> torch.Tensor:
        """``(n, 1)`` sample weights, or ``(n, 2)``: training and validation rows of the hold-out error."""
        w = torch.ones(n, **f64) if sw is None else torch.as_tensor(sw, **f64)
        if self.objective != "holdout":
            return w[:, None]
        n_val = int(round(self.validation_fraction * n))
        if n_val < 1 or n_val > n - 1:
            raise ValueError(f"{type(self).__name__}: validation_fraction={self.validation_fraction} leaves no "
                             f"{'validation' if n_val < 1 else 'training'} rows among n_samples={n}.")
        val = torch.zeros(n, **f64)
        val[torch.as_tensor(rng.choice(n, n_val, replace=False), device=val.device)] = 1.0
        W = torch.stack([w * (1.0 - val), w * val], dim=1)
        if not bool((W.sum(0) > 0).all()):
            raise ValueError(f"{type(self).__name__}: the sample weights of the training or the validation rows "
                             "sum to zero.")
        return W

    # -- the fitted model ---------------------------------------------------------------------------
    @property
    def coef_(self):
        check_is_fitted(self, "estimator_")
        return self.estimator_.coef_

    @property
    def intercept_(self):
        check_is_fitted(self, "estimator_")
        return self.estimator_.intercept_

    def predict(self, X):
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(self._validate_X(X, reset=False))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class NystroemKernelRidgeCV(MultiOutputMixin, RegressorMixin, _NystroemCVBase):
    """Nyström kernel ridge with its kernel hyperparameters, ``alpha`` and optionally its centres
    learned by L-BFGS on a closed-form validation objective, at any number of rows.

    Each evaluation of the objective and its gradient is two blocked passes over the data
    (:func:`mercer.linalg.kernel_statistics`): memory O(block + M^2), never ``n x M``; ``X`` may be a
    row source streamed from disk (:mod:`mercer.sources`). By default most evaluations are made on
    random subsamples of the rows, coarse to fine, and the last ones on all rows (``coarse_rows``).
    Learning computes in float64. The model with the learned values is then fitted as an ordinary
    :class:`NystroemKernelRidge` (``estimator_``).

    Sparse ``X`` (scipy or torch sparse, a sparse source such as :class:`mercer.sources.SparseSource`)
    stays sparse: the centres are sparse rows of ``X``, the statistics are computed on sparse blocks
    (for ``RBF`` and ``c * RBF`` the gradient in ``gamma`` from the rows' squared norms and one sparse
    product per block), and the result equals the fit on ``X.toarray()``. Two things are not
    learned on sparse rows and are refused at fit: the centres' coordinates (``learn_centers=True``:
    ``n_centers x n_features`` dense parameters in the space of the sparse features; use
    ``learn_centers=False``, centres chosen among the rows by ``centers``) and per-feature (ARD)
    scales, whatever the number of features (give a scalar ``gamma``; for ARD on few features pass
    dense ``X``).

    Parameters
    ----------
    alpha : float, default=1.0
        Regularisation as in :class:`NystroemKernelRidge` (an unnormalised sum of squares); the
        starting value when ``learn_alpha``.
    kernel : str or mercer Kernel, default="rbf"
        Any mercer kernel, composites included; its positive hyperparameters (per feature for an
        ARD kernel: ``RBF(gamma=[...])``) are learned from the values given.
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name (starting values).
    n_centers : int or "auto", default="auto"
        As in :class:`NystroemKernelRidge`: ``min(n, max(100, 5 sqrt(n)))`` for "auto".
    centers : {"uniform", "kmeans++", "kmeans", "leverage", "greedy"} or array, default="uniform"
        The starting centres (see :class:`NystroemKernelRidge`).
    objective : {"gcv", "holdout"}, default="gcv"
        Generalised cross-validation on all rows, or the mean squared error on a random
        ``validation_fraction`` of them of the model fitted on the others.
    validation_fraction : float in (0, 1), default=0.2
        For ``objective="holdout"``.
    learn_alpha : bool, default=True
    learn_centers : bool, default=False
        Learn the centres' coordinates too (kernels differentiable in their inputs; M x d more
        unknowns, unbounded, not perturbed by restarts). Refused on sparse ``X``.
    coarse_rows : "auto", int, sequence of int or None, default="auto"
        Coarse-to-fine learning: the optimiser first runs on random subsamples of this many rows
        (increasing, each below ``n_samples``; one stage per value), every stage starting from the
        kernel hyperparameters, ``alpha`` and centres the one before learned, and ends on all rows.
        ``alpha`` is that of all rows throughout: a stage on ``r`` of ``n`` rows uses ``alpha r / n``
        (the share of the rows' weight), so the values carry over unchanged. The first stage runs
        ``max_iter`` iterations (and the restarts), each later stage a fifth of the one before (at
        least 4), the last one on all rows included: an evaluation on a subsample costs its share of
        the two passes, and most iterations are spent there. With stages, L-BFGS makes at most two
        evaluations per iteration of a stage (line searches included; the best point evaluated is
        kept). ``"auto"``: a first stage of a tenth of
        the rows (at least 2,000 and 10 per centre), four times more per stage, while a stage has at
        most two thirds of the rows (none for ``n_samples < 3,000`` at M <= 200) and fits in the
        in-memory share of ``memory_budget`` (a stage's rows are held in memory, also when ``X`` is
        streamed from a source). None: all iterations on all rows. See :attr:`stages_`.
    optimizer : {"lbfgs", "adam"} or None, default="lbfgs"
        None evaluates the objective at the given values only.
    n_restarts_optimizer : int, default=0
        Extra starts, perturbed by up to a factor 10 in every hyperparameter (on the first stage).
    max_iter : int, default=100
        Optimiser iterations per start (on the first stage; see ``coarse_rows``).
    hyperparameter_bounds : (float, float), default=(1e-5, 1e5)
        In length-scale units (see :class:`mercer.kernels.LearnableKernel`).
    alpha_bounds : (float, float), default=(1e-8, 1e8)
    fit_intercept, solver, tol, dtype :
        Of the final :class:`NystroemKernelRidge` (``tol``: its conjugate gradient's).
    random_state, device, memory_budget :
        As everywhere in mercer (``random_state`` draws the centres, the validation rows and the restarts).

    Attributes
    ----------
    kernel_ : Kernel
        The learned kernel.
    alpha_ : float
    centers_ : tensor of shape (M, n_features_in_)
        The centres (learned with ``learn_centers``); sparse rows when ``X`` was sparse.
    cv_error_ : float
        The objective at the learned values (on all rows).
    objective_path_ : ndarray
        The objective at every evaluation, the starts and the stages one after the other (NaN where
        it could not be evaluated; a coarse stage's values are those of its subsample).
    stages_ : list of dict
        One per stage of the learning (see ``coarse_rows``; empty without optimiser): ``n_rows``,
        ``max_iter``, ``n_evals``, ``n_iter``, ``objective`` (the best on its rows) and ``first_eval``
        (its first entry in ``objective_path_``).
    estimator_ : NystroemKernelRidge
        Fitted on all rows with ``kernel_``, ``alpha_`` and ``centers_``.
    coef_, intercept_ :
        Those of ``estimator_``.
    theta_ : ndarray, hyperparameter_names_ : list of str
        The learned log-hyperparameters (kernel, then ``alpha``; the centres are not included).
    optimizer_results_ : list of dict
        The runs of the last stage (on all rows).
    n_evals_ : int
        Evaluations of the objective, all stages together.
    n_iter_ : int
        Iterations of the last stage.
    learning_time_ : float
    """

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_centers="auto", centers="uniform", objective="gcv", validation_fraction=0.2, learn_alpha=True,
                 learn_centers=False, coarse_rows="auto", optimizer="lbfgs", n_restarts_optimizer=0, max_iter=100,
                 hyperparameter_bounds=(1e-5, 1e5), alpha_bounds=(1e-8, 1e8), fit_intercept=True, solver="auto",
                 tol=1e-3, random_state=None, device=None, dtype="float32", memory_budget=None):
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.n_centers = n_centers
        self.centers = centers
        self.objective = objective
        self.validation_fraction = validation_fraction
        self.learn_alpha = learn_alpha
        self.learn_centers = learn_centers
        self.coarse_rows = coarse_rows
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.hyperparameter_bounds = hyperparameter_bounds
        self.alpha_bounds = alpha_bounds
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.tol = tol
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y, sample_weight=None):
        """Learn the hyperparameters (and centres) on ``(X, y)``, then fit ``estimator_`` with them."""
        check_params(self)
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, self._check_rows(X))
        check_target_scale(type(self).__name__, y)
        self._learn(X, y.reshape(len(y), -1), self._sample_weight(sample_weight, X, len(y)))
        self.estimator_ = NystroemKernelRidge(alpha=self.alpha_, kernel=self.kernel_, centers=self._final_centers(),
                                              **self._final_params()).fit(X, y, sample_weight=sample_weight)
        return self


class NystroemKernelRidgeClassifierCV(ClassifierMixin, _NystroemCVBase):
    """Classifier by Nyström kernel ridge on ±1 codes (one-vs-rest) whose kernel hyperparameters,
    ``alpha`` and optionally centres are learned as in :class:`NystroemKernelRidgeCV` (the
    objective averaged over the codes), then fitted as a :class:`NystroemKernelRidgeClassifier`.

    Parameters
    ----------
    As :class:`NystroemKernelRidgeCV`, plus

    class_weight : dict, "balanced" or None, default=None
        Multiplies the sample weights, in learning and in the final fit.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    kernel_, alpha_, centers_, cv_error_, objective_path_, stages_, estimator_, coef_, intercept_, theta_,
    hyperparameter_names_, optimizer_results_, n_evals_, n_iter_, learning_time_ :
        As in :class:`NystroemKernelRidgeCV` (``estimator_`` a :class:`NystroemKernelRidgeClassifier`).
    """

    _parameter_constraints: dict = {
        **_NystroemCVBase._parameter_constraints,
        "class_weight": [dict, Options("balanced"), None],
    }

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_centers="auto", centers="uniform", objective="gcv", validation_fraction=0.2, learn_alpha=True,
                 learn_centers=False, coarse_rows="auto", optimizer="lbfgs", n_restarts_optimizer=0, max_iter=100,
                 hyperparameter_bounds=(1e-5, 1e5), alpha_bounds=(1e-8, 1e8), fit_intercept=True, class_weight=None,
                 solver="auto", tol=1e-3, random_state=None, device=None, dtype="float32", memory_budget=None):
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.n_centers = n_centers
        self.centers = centers
        self.objective = objective
        self.validation_fraction = validation_fraction
        self.learn_alpha = learn_alpha
        self.learn_centers = learn_centers
        self.coarse_rows = coarse_rows
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.hyperparameter_bounds = hyperparameter_bounds
        self.alpha_bounds = alpha_bounds
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.solver = solver
        self.tol = tol
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y, sample_weight=None):
        """Learn the hyperparameters (and centres) on the ±1 codes of ``y``, then fit ``estimator_``."""
        check_params(self)
        X = self._validate_X(X, reset=True)
        self._check_rows(X)
        Y, sw = _classification_targets(self, X, y, sample_weight)
        del self._binarizer  # the final classifier keeps its own
        self._learn(X, Y, sw)
        self.estimator_ = NystroemKernelRidgeClassifier(
            alpha=self.alpha_, kernel=self.kernel_, centers=self._final_centers(), class_weight=self.class_weight,
            **self._final_params()).fit(X, y, sample_weight=sample_weight)
        return self

    def decision_function(self, X):
        check_is_fitted(self, "estimator_")
        return self.estimator_.decision_function(self._validate_X(X, reset=False))
