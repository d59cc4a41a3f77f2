"""Exact kernel ridge regression and classification.

Solves :math:`(K + \\alpha I)\\, a = y` with ``alpha`` exactly as in scikit-learn's
``KernelRidge`` (the seeds' :math:`(G + \\lambda n I)` is ``alpha = n * lambda``), by an in-place
Cholesky factorisation of the Gram matrix (with automatic jitter when it is numerically
singular), or, when the kernel has a finite explicit feature map of dimension ``D < n`` (linear,
polynomial and their sums), by the equivalent primal solve
:math:`w = (\\Phi^T W \\Phi + \\alpha I)^{-1} \\Phi^T W y`: the seeds' N-vs-D choice.
"""

from __future__ import annotations

import logging
import math
import time
from numbers import Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output
from ..._sparse import is_sparse, plan_features
from ..._validation import Interval, Options, check_params, describe
from ...approx import check_finite, explicit_feature_map
from ...linalg import (KernelOperator, MemoryBudgetError, fill_lower_gram, fill_mixed_gram, format_bytes, gram_tile_plan,
                       jittered_cholesky, mixed_precision_solve, plan_rows, row_blocks, warn_ill_conditioned)
from .._base import (COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin, check_class_labels,
                     labels_from_scores)

__all__ = ["KernelRidge", "KernelRidgeClassifier"]

log = logging.getLogger(__name__)

_APPROX_HINT = (
    "Use an approximate method instead — mercer.models.NystroemKernelRidge (FALKON-class solver, "
    "memory O(n d + M^2)) or mercer.models.RandomFeatureRidge — or raise "
    "memory_budget (per estimator, or globally with mercer.config_context(memory_budget=...))."
)


#: Rows from which a float64 dual solve factors in float32 and refines in float64 (the float32
#: factorisation saves ~40 % of the float64 one; the refinement's few passes over the matrix cost
#: relatively more on small problems).
_MIXED_MIN_N = 2000
#: Smallest ``alpha``, relative to the Gram's largest diagonal entry, for which the float32 factor is
#: tried: at 1e-5 (n = 5,000, RBF) it took 16 refinement iterations, at 1e-6 it was not positive definite.
_MIXED_MIN_ALPHA = 1e-5
#: What a user can do about an ill-conditioned solve (mercer.linalg.warn_ill_conditioned). The mixed
#: path is not checked: its gate bounds cond(K + alpha I) <= 1 + n / _MIXED_MIN_ALPHA (K's largest
#: eigenvalue is at most n times its largest diagonal entry), below the float64 threshold (4.5e12)
#: for any n it can hold; its refinement reaches a float64 backward error.
_ILL_CONDITIONED_ADVICE = "Scale the features (e.g. sklearn.preprocessing.StandardScaler) or raise alpha."

#: mercer's compute parameters, ``dtype`` also as a torch or numpy dtype, as ``resolve_dtype`` takes it
#: (KernelRidgeCV and MKL pass their resolved torch dtype to the KernelRidge they fit).


def _check_alpha(alpha, n_targets: int, owner: str) -> np.ndarray:
    """``alpha`` as one float per target (the table admits a float or an array; this checks the array)."""
    arr = np.atleast_1d(np.asarray(alpha, dtype=np.float64)) if not isinstance(alpha, str) else None
    if arr is None or arr.ndim != 1 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(
            f"The 'alpha' parameter of {owner} must be a float in the range [0, inf) or an array "
            f"of such floats, one per target. Got {describe(alpha)} instead."
        )
    if arr.size == 1:
        return np.full(n_targets, arr[0])
    if arr.size != n_targets:
        raise ValueError(
            f"The 'alpha' parameter of {owner} must be a float or an array of {n_targets} floats, one per "
            f"target. Got {arr.size} values instead."
        )
    return arr


class NormalEquations:
    """Weighted normal equations ``F^T W F`` and ``F^T W Y`` summed over row blocks of features ``F``
    (n, D) and targets ``Y`` (n, t); with ``centre=True`` they are those of the centred data
    ``F - mean(F)``, ``Y - mean(Y)`` (weighted means), whose solution with an unpenalised intercept
    ``mean(Y) - mean(F) w`` is scikit-learn's ``Ridge(fit_intercept=True)``.

    The sums are taken about a shift (the first block's weighted mean) and corrected at the end,
    ``A = S - n_w (m - s)(m - s)^T``: exact, and free of the cancellation of ``F^T W F - n_w m m^T``
    when the features have a large mean.
    """

    def __init__(self, D: int, t: int, *, dtype, device, centre: bool):
        self.centre = centre
        self.A = torch.zeros(D, D, dtype=dtype, device=device)
        self.B = torch.zeros(D, t, dtype=dtype, device=device)
        self.f_sum = torch.zeros(D, dtype=dtype, device=device)
        self.y_sum = torch.zeros(t, dtype=dtype, device=device)
        self.n_w = 0.0
        self.f_shift = self.y_shift = None

    def add(self, F: torch.Tensor, Y: torch.Tensor, w: torch.Tensor | None = None) -> None:
        """Add a block of rows ``F`` (r, D), ``Y`` (r, t) with sample weights ``w`` (r,) or None."""
        F, Y = F.to(self.A.dtype), Y.to(self.A.dtype)
        w = None if w is None else w.to(self.A.dtype)
        if self.centre:
            if self.f_shift is None:
                tot = float(F.shape[0] if w is None else w.sum())
                mean = (lambda Z: Z.mean(0)) if w is None or tot <= 0 else (lambda Z: (w @ Z) / tot)
                self.f_shift, self.y_shift = mean(F), mean(Y)
            F, Y = F - self.f_shift, Y - self.y_shift
        Fw = F if w is None else F * w[:, None]
        self.A.addmm_(Fw.T, F)
        self.B.addmm_(Fw.T, Y)
        if self.centre:
            self.f_sum += Fw.sum(0)
            self.y_sum += Y.sum(0) if w is None else w @ Y
            self.n_w += float(F.shape[0] if w is None else w.sum())

    def system(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A, B)``: ``F^T W F`` and ``F^T W Y``, centred when asked."""
        if not self.centre or self.n_w <= 0:
            return self.A, self.B
        df, dy = self.f_sum / self.n_w, self.y_sum / self.n_w
        return self.A - self.n_w * torch.outer(df, df), self.B - self.n_w * torch.outer(df, dy)

    def intercept(self, coef: torch.Tensor) -> np.ndarray:
        """The unpenalised intercept ``mean(Y) - mean(F) coef`` (t,) (zeros without centring)."""
        if not self.centre or self.n_w <= 0:
            return np.zeros(self.B.shape[1])
        f_mean = self.f_shift + self.f_sum / self.n_w
        y_mean = self.y_shift + self.y_sum / self.n_w
        return (y_mean - f_mean.to(coef.dtype) @ coef).double().cpu().numpy()


def intercept_output(intercept: np.ndarray, y_1d: bool):
    """``intercept_`` as scikit-learn's ``Ridge`` has it: a float for 1-d targets, else (t,)."""
    return float(intercept[0]) if y_1d else np.asarray(intercept, dtype=np.float64)


def add_intercept(out: torch.Tensor, intercept) -> torch.Tensor:
    """Predictions (n, t) plus ``intercept_`` (a float or (t,); 0.0 when there is none)."""
    b = np.atleast_1d(np.asarray(intercept, dtype=np.float64))
    if not np.any(b):
        return out
    return out + torch.as_tensor(b, dtype=out.dtype, device=out.device)


class _KernelRidgeBase(KernelEstimatorMixin, BaseEstimator):
    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "solver": [Options("auto", "dual", "primal")],
        "fit_intercept": ["boolean"],
    }

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: the memory budget, and the primal solver's explicit feature
        map (a pure function of ``kernel_``). A model saved before ``fit_intercept`` existed has no
        intercept (``intercept_ = 0.0``)."""
        super()._after_load()
        if not hasattr(self, "intercept_"):
            self.intercept_ = 0.0
            self.fit_intercept = False
        if getattr(self, "solver_", None) == "primal":
            phi = explicit_feature_map(self.kernel_, self.n_features_in_)
            if phi is None or phi.dim != self.coef_.shape[0]:
                raise ValueError(f"{type(self).__name__}: the saved primal coefficients do not match the kernel's "
                                 "feature map.")
            self._phi = phi

    # -- fit ----------------------------------------------------------------------------------
    def _fit_targets(self, X, Y: np.ndarray, sample_weight):
        """Fit every column of ``Y`` (n, t); sets the fitted state shared by both estimators
        (``fit`` has checked the parameter table)."""
        owner = type(self).__name__
        alphas = _check_alpha(self.alpha, Y.shape[1], owner)
        self._setup_compute(X)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
            raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
        Xt = self._tensor(X)
        Yt = torch.tensor(np.asarray(Y), dtype=self._dtype, device=self._device)
        sw = None if sample_weight is None else torch.as_tensor(np.sqrt(sample_weight), dtype=self._dtype, device=self._device)
        # sparse rows with at least as many features as samples: the dual (an explicit map has >= d features)
        wide = is_sparse(Xt) and self.solver != "primal" and Xt.shape[1] >= Xt.shape[0]
        phi = None if self.kernel_.is_precomputed or wide else explicit_feature_map(self.kernel_, Xt.shape[1])
        use_primal = self.solver == "primal" or (self.solver == "auto" and phi is not None and phi.dim < Xt.shape[0])
        if self.solver == "primal" and phi is None:
            raise ValueError(f"{owner}: solver='primal' needs a kernel with a finite explicit feature map (linear, polynomial); got {self.kernel_!r}.")
        t0 = time.perf_counter()
        self.n_refine_iter_ = 0
        if use_primal:
            self.coef_, intercept = self._solve_primal(phi, Xt, Yt, alphas, sw)
            self._phi = phi
            self.solver_ = "primal"
            for attr in ("dual_coef_", "X_fit_"):
                self.__dict__.pop(attr, None)
        else:
            self.dual_coef_, intercept = self._solve_dual(Xt, Yt, alphas, sw)
            self.X_fit_ = Xt
            self.solver_ = "dual"
            self.__dict__.pop("coef_", None)
        self.intercept_ = intercept
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: %s solve on n=%d in %.2f s", owner, self.solver_, Xt.shape[0], self.fit_time_)

    def _solve_dual(self, Xt, Yt, alphas, sw):
        """Dual coefficients, and the intercept when asked: with ``A = K + alpha W^{-1}``, ``u = A^{-1} y``
        and ``v = A^{-1} 1``, the unpenalised intercept is ``b = 1^T u / 1^T v`` and ``a = u - b v``
        (the stationarity conditions ``(K + alpha W^{-1}) a = y - b 1``, ``1^T a = 0``)."""
        n, item = Xt.shape[0], Xt.element_size()
        budget = self._budget
        need = n * n * item
        if need > budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the exact solve holds the {n} x {n} Gram matrix "
                f"({format_bytes(need)}), more than the memory budget of {format_bytes(budget)}. "
                + _APPROX_HINT
            )
        op = KernelOperator(self.kernel_, Xt, memory_budget=budget)
        d = 1 if self.kernel_.is_precomputed else Xt.shape[1]
        plan = gram_tile_plan(n, d if self.kernel_.is_precomputed else plan_features(Xt), itemsize=item,
                              budget=self._plan.holding(need).budget, scratch=self.kernel_.scratch(d))
        s = torch.ones(n, dtype=Yt.dtype, device=Yt.device) if sw is None else sw
        y_mean = torch.zeros(Yt.shape[1], dtype=Yt.dtype, device=Yt.device)
        if self.fit_intercept:  # centred first: a large offset would cancel in u - b v
            y_mean = (s * s) @ Yt / (s * s).sum().clamp_min(torch.finfo(Yt.dtype).tiny)
            Yt = Yt - y_mean
        if sw is not None:
            Yt = Yt * sw[:, None]
        # one system per distinct alpha; with an intercept, u and v in the scaled variables
        # (A^{-1} = S (S K S + alpha I)^{-1} S) come from one solve with the extra column s
        groups = [(float(a), torch.as_tensor(np.flatnonzero(alphas == a), device=Yt.device)) for a in np.unique(alphas)]
        rhs = [torch.cat([Yt[:, cols], s[:, None]], dim=1) if self.fit_intercept else Yt[:, cols] for _, cols in groups]
        # The Gram matrix: an n x n buffer of which only the lower triangle is written (the pages of the
        # upper one are never mapped); factored in place, or kept intact for the mixed-precision solve.
        def gram():
            K = torch.empty(n, n, dtype=op.dtype, device=op.device)
            fill_lower_gram(op, plan, K, sw)
            return K

        sols = None
        if Xt.dtype == torch.float64 and Xt.device.type == "cpu" and n >= _MIXED_MIN_N:
            K = torch.empty(n, n, dtype=op.dtype, device=op.device)
            sols = self._solve_mixed(op, plan, K, groups, rhs, sw)
        else:
            K = gram()
        if sols is None:
            held = [K]  # handed over: the float64 solve frees it before it builds the next one
            del K
            sols = self._solve_float64(held, gram, op, groups, rhs)
        else:
            del K
        coef = torch.empty_like(Yt)
        intercept = y_mean.double().cpu().numpy()
        for (_, cols), sol in zip(groups, sols):
            if self.fit_intercept:
                u, v = sol[:, :-1], sol[:, -1:]
                b = (s @ u) / (s @ v)
                coef[:, cols] = u - v * b[None, :]
                intercept[cols.cpu().numpy()] += b.double().cpu().numpy()
            else:
                coef[:, cols] = sol
        check_finite(coef, type(self).__name__, "the kernel values", X=Xt, kernel=self.kernel_)
        if sw is not None:
            coef.mul_(sw[:, None])
        return coef, intercept

    def _solve_mixed(self, op, plan, K, groups, rhs, sw):
        """Solutions for each ``(alpha, columns)`` group by a float32 factorisation refined in float64
        (float64 input on the CPU from ``_MIXED_MIN_N`` rows), or None when that did not reach float64
        accuracy or an ``alpha`` is below ``_MIXED_MIN_ALPHA`` times the largest diagonal entry of the
        (weighted) Gram matrix. Fills ``K`` (n x n, float64) with the Gram's lower triangle and leaves
        it so. The float32 copy's triangle adds half of ``K``'s memory (only the triangles are mapped:
        together 6 n^2 bytes, within the n^2 float64 entries the budget was checked for)."""
        n = op.shape[0]
        F = torch.empty(n, n, dtype=torch.float32, device=op.device)
        sums = fill_mixed_gram(op, plan, K, F, sw)
        check_finite(sums, type(self).__name__, "the kernel values", X=op.X, kernel=self.kernel_)
        norm = float(sums.max())
        if min(a for a, _ in groups) < _MIXED_MIN_ALPHA * float(K.diagonal().abs().max()):
            return None
        sols, n_iter = [], 0
        for i, ((a, _), B) in enumerate(zip(groups, rhs)):
            if i:  # a fresh float32 copy of the triangle for the next alpha
                for r in row_blocks(n, plan.row_block, desc="matrix copy"):
                    F[r, :r.stop] = K[r, :r.stop]
            F.diagonal().add_(a)
            X, info = mixed_precision_solve(K, a, F, B, norm_a=norm + a)
            n_iter += info.n_iter
            log.debug("%s: float32 factorisation, %d refinement iterations, backward error %.2e",
                      type(self).__name__, info.n_iter, info.backward_error)
            if X is None:
                log.info("%s: float32 factorisation with float64 refinement did not reach float64 accuracy (%s); "
                         "factoring in float64", type(self).__name__, info.reason)
                return None
            sols.append(X)
        self.jitter_, self.n_refine_iter_ = 0.0, n_iter
        return sols

    def _solve_float64(self, held, gram, op, groups, rhs):
        """Solutions for each ``(alpha, columns)`` group by an in-place Cholesky factorisation of the
        Gram matrix in its own dtype (jittered when numerically singular): the one in the list ``held``
        (its lower triangle; taken out of the list) for the first group, ``gram()`` for the others."""
        sols = []
        for a, B in zip((a for a, _ in groups), rhs):
            K = held.pop() if held else gram()
            # the diagonal only: a PSD kernel's entries are bounded by it (|k(x, y)|^2 <= k(x, x) k(y, y)),
            # and a NaN elsewhere reaches the coefficients, checked below. (The whole n x n check cost
            # 17 ms per fit at n = 3,000, 30 % of a warm fit; the upper triangle is not even filled.)
            check_finite(K.diagonal(), type(self).__name__, "the kernel values", X=op.X, kernel=self.kernel_)
            K.diagonal().add_(a)

            def rebuild(a=a):
                K2 = gram()
                K2.diagonal().add_(a)
                return K2

            factor = jittered_cholesky(K, rebuild=rebuild, owner=type(self).__name__, blocked=True)
            self.jitter_ = factor.jitter
            warn_ill_conditioned(factor.L, owner=type(self).__name__, advice=_ILL_CONDITIONED_ADVICE,
                                 what=f"the Gram matrix plus alpha (alpha={a:g})")
            sols.append(factor.solve(B))
            del K, factor
        return sols

    def _solve_primal(self, phi, Xt, Yt, alphas, sw):
        n, D = Xt.shape[0], phi.dim
        item = Xt.element_size()
        if D * D * item > self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the primal solve holds a {D} x {D} matrix, more than the "
                f"memory budget of {format_bytes(self._budget)}; use solver='dual' or raise memory_budget."
            )
        # Each block holds its features, their weighted copy and a product's worth: 3 D per row.
        rows = plan_rows(n, 3 * D * item, budget=self._budget, fixed_bytes=D * D * item, max_bytes=None,
                         what=f"{type(self).__name__}'s primal solve")
        eq = NormalEquations(D, Yt.shape[1], dtype=Xt.dtype, device=Xt.device, centre=bool(self.fit_intercept))
        w = None if sw is None else sw * sw
        for r in row_blocks(n, rows, desc="primal normal equations"):
            eq.add(phi(Xt[r]), Yt[r], None if w is None else w[r])
        A, B = eq.system()
        check_finite([A, B], type(self).__name__, "the normal equations' entries", X=Xt, kernel=self.kernel_, y=Yt)
        coef = torch.empty_like(B)
        for a in np.unique(alphas):
            cols = torch.as_tensor(np.flatnonzero(alphas == a), device=B.device)
            M = A.clone()
            M.diagonal().add_(float(a))
            factor = jittered_cholesky(M, owner=type(self).__name__)
            self.jitter_ = factor.jitter
            warn_ill_conditioned(factor.L, owner=type(self).__name__, advice=_ILL_CONDITIONED_ADVICE,
                                 what=f"the primal normal equations plus alpha (alpha={a:g})")
            coef[:, cols] = factor.solve(B[:, cols])
        return coef, eq.intercept(coef)

    # -- predict ------------------------------------------------------------------------------
    def _decision(self, X, dual_coef=None):
        check_is_fitted(self, "solver_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        if self.solver_ == "primal":
            n, D = Xt.shape[0], self._phi.dim
            if not n:
                return torch.zeros(0, self.coef_.shape[1], dtype=Xt.dtype, device=Xt.device)
            rows = plan_rows(n, 2 * D * Xt.element_size(), budget=self._budget, max_bytes=None,
                             what=f"{type(self).__name__}'s prediction")  # features and their product
            out = torch.cat([self._phi(Xt[r]) @ self.coef_ for r in row_blocks(n, rows, desc="predict")])
            check_finite(out, type(self).__name__, "the predictions", X=Xt, kernel=self.kernel_)
            return out
        coef = self.dual_coef_ if dual_coef is None else dual_coef
        op = KernelOperator(self.kernel_, Xt, self.X_fit_, memory_budget=self._budget, n_rhs=coef.shape[1])
        out = op.matvec(coef)
        check_finite(out, type(self).__name__, "the predictions", X=Xt, kernel=self.kernel_)
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags


class KernelRidge(MultiOutputMixin, RegressorMixin, _KernelRidgeBase):
    """Kernel ridge regression, exact, with scikit-learn's ``KernelRidge`` parameters.

    Minimises :math:`\\|y - K a - b\\|^2_W + \\alpha\\, a^T K a`, i.e. solves
    :math:`(K + \\alpha W^{-1}) a = y - b`. ``alpha = n * lambda`` in the seeds' (and FALKON's) notation.
    The offset ``b`` is 0 unless ``fit_intercept=True``, where it is unpenalised, as in scikit-learn's
    ``Ridge`` (with the linear kernel the model is then ``Ridge(fit_intercept=True)``); it is then
    ``b = 1^T A^{-1} y / 1^T A^{-1} 1`` with ``A = K + alpha W^{-1}``, and ``1^T a = 0``.

    Parameters
    ----------
    alpha : float or array of shape (n_targets,), default=1.0
        Regularisation, as in scikit-learn (one value per target allowed).
    kernel : str or mercer Kernel, default="linear"
        ``"linear"``, ``"rbf"``, ``"poly"``, ``"laplacian"``, ``"matern"``, ``"precomputed"``, ...
        or any kernel object, composites included.
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name (ignored by kernels that do not take them).
    fit_intercept : bool, default=False
        Fit an unpenalised offset ``intercept_``. False by default, as scikit-learn's
        ``KernelRidge`` (which has none); True helps with a target whose mean is far from 0.
    solver : {"auto", "dual", "primal"}, default="auto"
        "auto" solves in the primal when the kernel has an explicit feature map of dimension
        ``D < n_samples`` (linear, polynomial), in the dual otherwise.
    device : str, optional
        ``"cpu"``, ``"cuda"``...; default: the input tensor's device, else the global config, else CPU.
    dtype : {"float32", "float64"}, optional
        Default follows the input (float64 for float64 input).
    memory_budget : int, optional
        Bytes the fit may use for kernel matrices; default from the global config / free memory.

    Attributes
    ----------
    dual_coef_ : tensor of shape (n_samples,) or (n_samples, n_targets) (dual solver)
    X_fit_ : tensor (dual solver)
    coef_ : tensor of shape (D, n_targets) (primal solver), weights on the explicit features
    intercept_ : float or ndarray of shape (n_targets,)
        0.0 unless ``fit_intercept=True``.
    solver_ : str
    kernel_ : Kernel
    jitter_ : float
        Diagonal jitter that had to be added (0.0 normally).
    n_refine_iter_ : int
        Float64 refinement iterations of the dual solve (0 when the Gram matrix was factored in
        float64). From 2,000 samples a float64 fit factors a float32 copy of the Gram matrix -- twice
        the flop rate -- and refines the solution by conjugate gradients in float64 until its
        backward error is that of a float64 Cholesky solve (typically 2-6 iterations); when
        ``alpha`` is too small for float32, it factors in float64 as below 2,000.
    fit_time_ : float
    """

    _saved_private = ("_y_1d",)  # private state that mercer.io saves

    def __init__(self, alpha=1.0, *, kernel="linear", gamma=None, degree=3, coef0=1, kernel_params=None,
                 fit_intercept=False, solver="auto", device=None, dtype=None, memory_budget=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.solver = solver
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) — or the (n, n) Gram for ``kernel="precomputed"`` — and ``y`` (n,) or (n, t)."""
        check_params(self)
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        Y = y.reshape(len(y), -1)
        self._fit_targets(X, Y, sw)
        self._y_1d = y.ndim == 1
        self.intercept_ = intercept_output(self.intercept_, self._y_1d)
        if self._y_1d and self.solver_ == "dual":
            self.dual_coef_ = self.dual_coef_[:, 0]
        return self

    def predict(self, X):
        """Predictions ``K(X, X_fit) @ dual_coef_ + intercept_`` (or ``phi(X) @ coef_ + intercept_``),
        blocked over rows."""
        coef = getattr(self, "dual_coef_", None)
        out = add_intercept(self._decision(X, coef[:, None] if coef is not None and coef.ndim == 1 else None),
                            self.intercept_)
        if self._y_1d:
            out = out[:, 0]
        return as_output(out, X)


class RidgeClassifierMixin:
    """``fit``, ``decision_function`` and ``predict`` of the ridge classifiers: ±1 one-vs-rest codes
    regressed by the host's ``_fit_targets`` (with its unpenalised intercept when ``fit_intercept``);
    scores from its ``_decision`` plus ``intercept_``, in ``_score_dtype`` (None: the model's dtype)."""

    _score_dtype: torch.dtype | None = None
    _saved_private = ("_binarizer",)  # private state that mercer.io saves

    def fit(self, X, y, sample_weight=None):
        check_params(self)
        X = self._validate_X(X, reset=True)
        Y, sw = _classification_targets(self, X, y, sample_weight)
        self._fit_targets(X, Y, sw)
        return self

    def decision_function(self, X):
        """Scores of shape (n,) for two classes (positive favours ``classes_[1]``), else (n, n_classes)."""
        out = self._decision(X)
        if self._score_dtype is not None:
            out = out.to(self._score_dtype)
        out = out + torch.as_tensor(self.intercept_, dtype=out.dtype, device=out.device)
        if out.shape[1] == 1:
            out = out[:, 0]
        return as_output(out, X)

    def predict(self, X):
        return _predict_labels(self, self.decision_function(X), X)


class KernelRidgeClassifier(RidgeClassifierMixin, ClassifierMixin, _KernelRidgeBase):
    """Classifier by kernel ridge regression on ±1 codes, one-vs-rest (like ``RidgeClassifier``).

    Takes :class:`KernelRidge`'s parameters plus ``class_weight`` (None, "balanced" or a dict),
    which multiplies the sample weights, and ``fit_intercept``: when true (default), each code gets
    an unpenalised offset ``intercept_``, fitted jointly with the kernel model as in
    ``RidgeClassifier`` (a kernel machine has no intercept of its own; without it, imbalanced
    classes are pulled towards zero scores). With the linear kernel this is ``RidgeClassifier``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    intercept_ : ndarray of shape (n_targets,)
    dual_coef_ / coef_, X_fit_, solver_, kernel_ : as in :class:`KernelRidge`.
    """

    _parameter_constraints: dict = {
        **_KernelRidgeBase._parameter_constraints,
        "fit_intercept": ["boolean"],
        "class_weight": [dict, Options("balanced"), None],
    }

    def __init__(self, alpha=1.0, *, kernel="linear", gamma=None, degree=3, coef0=1, kernel_params=None,
                 fit_intercept=True, class_weight=None, solver="auto", device=None, dtype=None, memory_budget=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.class_weight = class_weight
        self.solver = solver
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget



def _classification_targets(est, X, y, sample_weight):
    """±1 one-vs-rest codes of ``y`` and the sample weights (with ``class_weight``). Sets
    ``classes_`` and ``_binarizer`` on ``est``."""
    from sklearn.preprocessing import LabelBinarizer  # on use: sklearn.preprocessing costs ~25 ms of import

    owner = type(est).__name__
    y = check_class_labels(owner, y, X.shape[0])[0]
    est._binarizer = LabelBinarizer(pos_label=1, neg_label=-1)
    Y = est._binarizer.fit_transform(y).astype(np.float64)
    est.classes_ = est._binarizer.classes_
    if len(est.classes_) < 2:
        raise ValueError(
            f"{owner} needs samples of at least 2 classes in the data, but the "
            f"data contains only one class: {est.classes_[0]!r}."
        )
    sw = est._sample_weight(sample_weight, X, X.shape[0])
    if est.class_weight is not None:
        cw = compute_sample_weight(est.class_weight, y)
        sw = cw if sw is None else sw * cw
    return Y, sw


def _predict_labels(est, scores, X):
    return labels_from_scores(est.classes_, scores, X)
