"""Kernel perceptron: the dual (mistake-driven) perceptron with any mercer kernel.

The primal perceptron adds ``y_i x_i`` to ``w`` whenever it gets sample ``i`` wrong
(``y_i <w, x_i> <= 0``). Run on features :math:`\\phi(x)`, its weight vector is always
:math:`w = \\sum_i \\alpha_i y_i \\phi(x_i)` with :math:`\\alpha_i` the number of mistakes made on
sample ``i``, so only the counts need to be stored and

.. math:: f(x) = \\sum_{i \\in S} \\alpha_i y_i\\, k(x_i, x) + b

(seed 000's kernel trick). With ``fit_intercept`` the bias is updated like the weights
(``b += y_i``): the kernel plus the constant 1. With the linear kernel this is exactly
scikit-learn's ``Perceptron`` (``eta0=1``, no penalty) run in the same sample order.

Training streams over blocks of ``B`` samples: one kernel block against the current support
set ``S`` gives the scores of the whole block, and each mistake inside the block adds one row of
the block's own ``B x B`` kernel block to the scores of the samples after it. The result is the
exact sequential perceptron, in ``O(n (|S| + B))`` kernel evaluations per epoch; ``B`` shrinks
with the number of mistakes and with the memory budget, and no ``n x n`` matrix is formed, except
for small problems (``n <= 2048``) whose Gram matrix fits a quarter of the budget: it is then
computed once. The mistake-by-mistake loop runs in numpy on the block (microseconds per update);
the kernel blocks are computed with torch on the fit's device.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections import OrderedDict
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, check_random_state, to_numpy
from ..._validation import Interval, Options, check_params
from ...linalg import KernelOperator, MemoryBudgetError, plan_rows, row_blocks
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin, labels_from_scores
from ._common import _classifier_setup, _serial_if_small

__all__ = ["KernelPerceptron"]

log = logging.getLogger(__name__)

#: Samples scored against the support set in one kernel block.
_MAX_BLOCK = 1024
_MIN_BLOCK = 128
#: Up to this many samples the Gram matrix is computed once, when it fits the memory budget.
_SMALL_N = 2048
_AT_LEAST_ONE = Interval(Integral, 1, None, closed="left")


class _Weights:
    """The perceptron during training: coefficients ``A`` (n, n_columns) and bias ``b``, the sums
    ``U``, ``ub`` of the updates times their step index (``averaged``: Daumé's trick), the support
    set in insertion order (for ``budget_policy="oldest"``), the step count ``t`` and the current
    epoch's weighted mistakes and mistake count."""

    def __init__(self, n: int, n_cols: int, dtype, *, averaged: bool, multinomial: bool) -> None:
        self.A = np.zeros((n, n_cols), dtype=dtype)
        self.b = np.zeros(n_cols, dtype=dtype)
        self.U = np.zeros_like(self.A) if averaged else None
        self.ub = np.zeros_like(self.b) if averaged else None
        self.support: OrderedDict[int, None] = OrderedDict()
        self.multinomial = multinomial
        self.self_k = None  # k(x_i, x_i), for budget_policy="smallest"
        self.t = 0
        self.mistakes, self.count = 0.0, 0

    def remove(self, v: int, F_rest: np.ndarray, k_rest: np.ndarray, fit_intercept: bool) -> None:
        """Drop support vector ``v`` (its kernel column ``k_rest`` on the samples still to score)."""
        cv = self.A[v].copy()
        F_rest -= k_rest[:, None] * cv
        if fit_intercept:
            F_rest -= cv
            self.b -= cv
            if self.ub is not None:
                self.ub -= self.U[v]
        self.A[v] = 0
        if self.U is not None:
            self.U[v] = 0
        del self.support[v]

    def add(self, i: int, d: np.ndarray, F_rest: np.ndarray, k_rest: np.ndarray, step_index: int,
            fit_intercept: bool) -> None:
        """The update ``d`` of a mistake on sample ``i``, training step number ``step_index + 1``."""
        self.A[i] += d
        if self.U is not None:
            self.U[i] += d * step_index
        F_rest += k_rest[:, None] * d
        if fit_intercept:
            self.b += d
            F_rest += d
            if self.ub is not None:
                self.ub += d * step_index


class KernelPerceptron(ClassifierMixin, KernelEstimatorMixin, BaseEstimator):
    """Dual (kernel) perceptron: multiclass, averaged, optionally on a budget of support vectors.

    Decision function :math:`f_c(x) = \\sum_{i \\in S} A_{ic}\\, k(x_i, x) + b_c`, where the
    coefficients count (signed, weighted) mistakes.

    Parameters
    ----------
    kernel : str or mercer Kernel, default="rbf"
        ``"rbf"``, ``"poly"``, ``"linear"``, ``"laplacian"``, ``"precomputed"``, ... or any kernel
        object, composites and set kernels included.
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name (ignored by kernels that do not take them).
    max_iter : int, default=20
        Most passes (epochs) over the training data.
    tol : float or None, default=1e-3
        Stop when the fraction of samples misclassified during an epoch has not fallen below
        ``best - tol`` for ``n_iter_no_change`` consecutive epochs. ``None``: stop only when an
        epoch makes no mistake (the data are separated) or after ``max_iter`` epochs.
    n_iter_no_change : int, default=5
    shuffle : bool, default=True
        Visit the samples in a new random order every epoch (``random_state``); else in order.
    random_state : int, RandomState or None
        Seeds the shuffling and ``budget_policy="random"``.
    fit_intercept : bool, default=True
        Learn a bias updated like the weights (``b += y_i`` per mistake).
    multi_class : {"ovr", "multinomial"}, default="ovr"
        More than two classes: ``"ovr"`` runs one binary perceptron per class on the same sample
        order (scikit-learn's ``Perceptron``); ``"multinomial"`` is the multiclass perceptron
        (Crammer & Singer's uniform update, Kesler's construction): when the true class ``y``
        does not strictly win, ``A[i, y] += 1`` and ``A[i, r] -= 1`` for the best wrong class ``r``.
    averaged : bool, default=False
        Predict with the average of the weight vectors after every training step (the
        averaged perceptron; Freund & Schapire's voted perceptron made cheap), which generalises
        better on data that are not separable. Computed exactly with Daumé's trick: no extra pass.
    budget : int or None, default=None
        Most support vectors kept. When a mistake on a new sample would exceed it, one support
        vector is removed first (its coefficients and its share of the bias are dropped; with
        ``averaged`` its share of the average too), following ``budget_policy``.
    budget_policy : {"oldest", "smallest", "random"}, default="oldest"
        Which support vector goes: the one added first (Forgetron-style FIFO), the one of
        smallest coefficient norm times ``sqrt(k(x, x))`` (smallest weight in feature space), or a
        uniformly random one (Cavallanti et al.'s randomised budget perceptron).
    class_weight : dict, "balanced" or None
        Scales the update of a mistake on a sample of class ``c`` by its weight; as in
        scikit-learn's ``Perceptron``, in one-vs-rest column ``c`` the class weight applies to the
        positive samples and the rest keep weight 1.
    device, dtype, memory_budget :
        As in every mercer estimator (see :class:`mercer.models.KernelRidge`).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors in the training data, increasing.
    support_vectors_ : tensor of shape (n_SV, n_features)
        (Empty with a precomputed kernel: the model keeps ``support_`` instead.)
    dual_coef_ : tensor of shape (n_columns, n_SV)
        ``A.T`` (one row for two classes: ``alpha_i y_i`` with ``y = +1`` for ``classes_[1]``;
        else one row per class). Integers counting mistakes unless weights, averaging or the
        multinomial update make them fractional.
    intercept_ : ndarray of shape (n_columns,)
    n_iter_ : int
        Epochs run.
    mistakes_per_epoch_ : ndarray of shape (n_iter_,)
        Weighted count of training mistakes in each epoch (0 in the last one: separated).
    t_ : int
        Training steps (samples visited) in total.
    kernel_ : Kernel
    fit_time_ : float
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "max_iter": [_AT_LEAST_ONE],
        "tol": [Interval(Real, 0, math.inf, closed="left"), None],
        "n_iter_no_change": [_AT_LEAST_ONE],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "fit_intercept": ["boolean"],
        "multi_class": [Options("ovr", "multinomial")],
        "averaged": ["boolean"],
        "budget": [_AT_LEAST_ONE, None],
        "budget_policy": [Options("oldest", "smallest", "random")],
        "class_weight": [dict, Options("balanced"), None],
    }

    _saved_private = ("_mode",)  # private state that mercer.io saves

    def __init__(self, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None, max_iter=20,
                 tol=1e-3, n_iter_no_change=5, shuffle=True, random_state=None, fit_intercept=True,
                 multi_class="ovr", averaged=False, budget=None, budget_policy="oldest", class_weight=None,
                 device=None, dtype=None, memory_budget=None):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.shuffle = shuffle
        self.random_state = random_state
        self.fit_intercept = fit_intercept
        self.multi_class = multi_class
        self.averaged = averaged
        self.budget = budget
        self.budget_policy = budget_policy
        self.class_weight = class_weight
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) — or the (n, n) Gram matrix for ``kernel="precomputed"`` — and labels ``y``."""
        check_params(self)
        owner = type(self).__name__
        X, Xt, y, codes, sw, cw = _classifier_setup(self, X, y, sample_weight)
        n, n_classes = X.shape[0], len(self.classes_)
        self._mode = "binary" if n_classes == 2 else self.multi_class
        # Targets and per-sample step sizes (class and sample weights), as scikit-learn's Perceptron.
        if self._mode == "binary":
            Y = np.where(codes == 1, 1.0, -1.0)[:, None]
            steps = (sw * cw[codes])[:, None]
        elif self._mode == "ovr":
            Y = np.where(codes[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)
            steps = sw[:, None] * np.where(Y > 0, cw[None, :], 1.0)
        else:
            Y = codes.astype(np.float64)[:, None]
            steps = (sw * cw[codes])[:, None]
        t0 = time.perf_counter()
        with _serial_if_small(self._device, n):
            A, b = self._train(Xt, Y, steps, n_cols=1 if self._mode == "binary" else n_classes)
        support = torch.nonzero((A != 0).any(dim=1)).flatten()
        self.support_ = to_numpy(support).astype(np.int64)
        self.dual_coef_ = A[support].T.contiguous()
        self.support_vectors_ = Xt[support] if not self.kernel_.is_precomputed else \
            torch.zeros(0, Xt.shape[1], dtype=self._dtype, device=self._device)
        self.intercept_ = to_numpy(b).astype(np.float64)
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: %d epochs, %d support vectors, %.2f s", owner, self.n_iter_, len(self.support_), self.fit_time_)
        return self

    def _gram(self, Xt, rows, cols) -> torch.Tensor:
        """Kernel block between training samples ``rows`` and ``cols`` (index tensors)."""
        if self.kernel_.is_precomputed:
            return Xt[rows][:, cols]
        if len(cols) * len(rows) * Xt.element_size() * 3 > self._budget:
            op = KernelOperator(self.kernel_, Xt[rows], Xt[cols], memory_budget=self._budget)
            return op.dense()
        return self.kernel_(Xt[rows], Xt[cols])

    def _block_rows(self, n: int, n_cols: int, itemsize: int) -> int:
        """Samples per block: the largest ``B <= 1024`` whose rows fit the memory budget, each row
        holding its ``B`` entries of the block's own kernel block and ``width`` more (scores, and on
        a budget the kernel row against the support set), three times over (torch, numpy, a temporary)."""
        width = (self.budget or 0) + n_cols + 4

        def fits(rows: int) -> bool:
            try:
                return plan_rows(n, 3 * itemsize * (rows + width), budget=self._budget, max_bytes=None) >= rows
            except MemoryBudgetError:  # not even one such row
                return False

        lo, hi = 1, max(1, min(n, _MAX_BLOCK))
        while lo < hi:  # fits() holds up to some B and fails beyond it: bisect for that B
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return lo

    @staticmethod
    def _mistakes(F, Y, steps, multinomial: bool):
        """Mask of the rows of ``F`` that are mistakes, and the update of every row (numpy)."""
        if multinomial:
            rows = np.arange(F.shape[0])
            true = Y[:, 0].astype(np.int64)
            t_score = F[rows, true]
            other = F.copy()
            other[rows, true] = -np.inf
            o_idx = other.argmax(axis=1)
            err = (other[rows, o_idx] >= t_score) & (steps[:, 0] > 0)
            delta = np.zeros_like(F)
            delta[rows, true] = steps[:, 0]
            delta[rows, o_idx] -= steps[:, 0]
            return err, delta
        wrong = (Y * F <= 0) & (steps > 0)
        return wrong.any(axis=1), Y * steps * wrong

    def _train(self, Xt, Y, steps, n_cols):
        """The sequential perceptron. Kernel blocks are computed with torch on the fit device; the
        mistake-by-mistake loop runs in numpy on small blocks (a few microseconds per update,
        where each tiny torch call, or GPU launch, would cost far more)."""
        n = Xt.shape[0]
        npdt = np.float32 if self._dtype == torch.float32 else np.float64
        Y, steps = Y.astype(npdt), steps.astype(npdt)
        rng = check_random_state(self.random_state)
        w = _Weights(n, n_cols, npdt, averaged=self.averaged, multinomial=self._mode == "multinomial")
        if self.budget is not None and self.budget_policy == "smallest":
            w.self_k = to_numpy(Xt.diagonal() if self.kernel_.is_precomputed else self.kernel_.diag(Xt))
        block = cap = self._block_rows(n, n_cols, Xt.element_size())
        # Small problems: the whole Gram matrix once (when a quarter of the budget holds it), and
        # no kernel computation at all inside the epochs.
        G = None
        if n <= _SMALL_N and 4 * n * n * Xt.element_size() <= self._budget:
            G = to_numpy(KernelOperator(self.kernel_, Xt, memory_budget=self._budget).dense())
        total_w = float(steps.max(axis=1).sum()) or 1.0
        best, stale, history = np.inf, 0, []
        stopped = False
        for _ in range(self.max_iter):
            order = rng.permutation(n) if self.shuffle else np.arange(n)
            # Each block pays for its own B x B kernel block; with few mistakes left, small blocks
            # waste less of it (the scores against the support set cost the same either way).
            if history:
                block = max(1, min(cap, max(_MIN_BLOCK, 2 * w.count)))
            w.mistakes, w.count = 0.0, 0
            for r in row_blocks(n, block, desc="KernelPerceptron epoch"):
                self._train_block(w, Xt, G, order[r], r.start, Y, steps, rng)
            w.t += n
            history.append(w.mistakes)
            if w.mistakes == 0:
                stopped = True
                break
            if self.tol is not None:
                rate = w.mistakes / total_w
                stale = stale + 1 if rate > best - self.tol else 0
                best = min(best, rate)
                if stale >= self.n_iter_no_change:
                    stopped = True
                    break
        return self._finish(w, history, stopped)

    def _train_block(self, w: _Weights, Xt, G, idx, start: int, Y, steps, rng) -> None:
        """One block of samples ``idx`` (positions ``start, ...`` of the epoch), mistake by mistake."""
        idx_t = torch.as_tensor(idx, device=self._device)
        sv = np.fromiter(w.support, dtype=np.int64, count=len(w.support))
        F, Kbs = self._block_scores(w, Xt, G, idx, idx_t, sv)
        col_of = {int(v): c for c, v in enumerate(sv)} if Kbs is not None else {}
        Kbb = G[np.ix_(idx, idx)] if G is not None else to_numpy(self._gram(Xt, idx_t, idx_t))
        pos_in_block = {int(v): p for p, v in enumerate(idx)} if self.budget is not None else None
        Yb, Sb = Y[idx], steps[idx]
        pos = 0
        while pos < len(idx):
            err, delta = self._mistakes(F[pos:], Yb[pos:], Sb[pos:], w.multinomial)
            hits = np.flatnonzero(err)
            if hits.size == 0:
                break
            j = pos + int(hits[0])
            i = int(idx[j])
            w.mistakes += float(Sb[j].max())
            w.count += 1
            if i not in w.support:
                if self.budget is not None and len(w.support) >= self.budget:
                    v = self._victim(w.support, w.A, w.self_k, rng)
                    kv = Kbs[j + 1:, col_of[v]] if v in col_of else Kbb[j + 1:, pos_in_block[v]]
                    w.remove(v, F[j + 1:], kv, self.fit_intercept)
                w.support[i] = None
            w.add(i, delta[j - pos], F[j + 1:], Kbb[j + 1:, j], w.t + start + j, self.fit_intercept)
            pos = j + 1

    def _block_scores(self, w: _Weights, Xt, G, idx, idx_t, sv):
        """Scores of the block under the model as it stands and, on a budget, the kernel rows
        against the support set that removals will need."""
        F = np.tile(w.b, (len(idx), 1))
        Kbs = None
        if len(sv):
            if self.budget is not None:
                Kbs = G[np.ix_(idx, sv)] if G is not None else \
                    to_numpy(self._gram(Xt, idx_t, torch.as_tensor(sv, device=self._device)))
                F += Kbs @ w.A[sv]
            else:
                F += G[np.ix_(idx, sv)] @ w.A[sv] if G is not None else \
                    to_numpy(self._scores(Xt, idx_t, torch.as_tensor(w.A[sv], device=self._device), sv))
        return F, Kbs

    def _finish(self, w: _Weights, history: list, stopped: bool):
        """Record the epochs, warn when no stopping criterion was met; the final (or averaged) weights."""
        self.n_iter_ = len(history)
        self.mistakes_per_epoch_ = np.asarray(history)
        self.t_ = w.t
        if not stopped:
            warnings.warn(
                f"{type(self).__name__}: still {history[-1]:g} weighted mistakes in the last of "
                f"max_iter={self.max_iter} epochs (no stopping criterion met); increase max_iter, or "
                "the data may not be separable with this kernel (try averaged=True).",
                ConvergenceWarning, stacklevel=4,
            )
        A, b = w.A, w.b
        if w.U is not None:  # average of the weights after each of the t steps
            A = A - w.U / w.t
            b = b - w.ub / w.t
        return torch.as_tensor(A, device=self._device), torch.as_tensor(b, device=self._device)

    def _scores(self, Xt, idx_t, coef, sv) -> torch.Tensor:
        """``K(X[idx], X[sv]) @ coef``, blocked by the memory budget."""
        sv_t = torch.as_tensor(sv, device=self._device)
        if self.kernel_.is_precomputed:
            return Xt[idx_t][:, sv_t] @ coef
        op = KernelOperator(self.kernel_, Xt[idx_t], Xt[sv_t], memory_budget=self._budget, n_rhs=coef.shape[1])
        return op.matvec(coef)

    def _victim(self, in_support, A, self_k, rng) -> int:
        """The support vector removed to respect the budget."""
        if self.budget_policy == "oldest":
            return next(iter(in_support))
        keys = list(in_support)
        if self.budget_policy == "random":
            return keys[int(rng.randint(len(keys)))]
        size = np.linalg.norm(A[keys], axis=1) * np.sqrt(np.maximum(self_k[keys], 0))
        return keys[int(np.argmin(size))]

    # -- predict ------------------------------------------------------------------------------
    def decision_function(self, X):
        """Scores ``K(X, SV) @ A + b``: shape (n,) for two classes (positive favours ``classes_[1]``), else (n, n_classes)."""
        check_is_fitted(self, "support_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        coef = self.dual_coef_.T
        out = torch.as_tensor(self.intercept_, dtype=self._dtype, device=self._device).expand(Xt.shape[0], -1).clone()
        if len(self.support_):
            with _serial_if_small(self._device, max(Xt.shape[0], len(self.support_))):
                if self.kernel_.is_precomputed:
                    out.addmm_(Xt[:, torch.as_tensor(self.support_, device=self._device)], coef)
                else:
                    op = KernelOperator(self.kernel_, Xt, self.support_vectors_, memory_budget=self._budget,
                                        n_rhs=coef.shape[1])
                    out.add_(op.matvec(coef))
        if out.shape[1] == 1:
            out = out[:, 0]
        return as_output(out, X)

    def predict(self, X):
        scores = self.decision_function(X)  # checks that the model is fitted first
        return labels_from_scores(self.classes_, scores, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags
