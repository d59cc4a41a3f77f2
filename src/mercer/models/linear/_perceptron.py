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
import numbers
import time
import warnings
from collections import OrderedDict

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..._backend import as_output, serial_if_small, to_numpy
from ..._validation import describe
from ...linalg import KernelOperator
from .._base import KernelEstimatorMixin, labels_from_scores
from .._base import class_weights as _class_weights

__all__ = ["KernelPerceptron"]

log = logging.getLogger(__name__)

_POLICIES = ("oldest", "smallest", "random")
_MULTI = ("ovr", "multinomial")
#: Samples scored against the support set in one kernel block.
_MAX_BLOCK = 1024
_MIN_BLOCK = 128
#: Up to this many samples the Gram matrix is computed once, when it fits the memory budget.
_SMALL_N = 2048


def _serial_if_small(device: torch.device, n: int, limit: int = 1000):
    """Problems of up to ``limit`` samples run on one thread (torch and BLAS): see
    :func:`mercer._backend.num_threads` for the measurements behind it."""
    return serial_if_small(device, n, limit, blas=True)


def _classifier_setup(est, X, y, sample_weight):
    """Shared start of the dual classifiers' ``fit``: validated ``X`` and its tensor, labels and
    their codes (sets ``classes_``), sample weights (ones when None) and per-class weights; the
    parameters are checked and the kernel resolved (``kernel_``)."""
    owner = type(est).__name__
    X = est._validate_X(X, reset=True)
    y, est.classes_, codes = _check_labels(owner, X, y)
    est._check_params()
    sw = est._sample_weight(sample_weight, X, X.shape[0])
    cw = _class_weights(owner, est.class_weight, est.classes_, y, sw)
    sw = np.ones(X.shape[0]) if sw is None else sw
    est._setup_compute(X)
    est.kernel_ = est._resolve_kernel()
    if est.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
        raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
    return X, est._tensor(X), y, codes, sw, cw


def _check_labels(owner: str, X, y):
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None.")
    y = to_numpy(y) if isinstance(y, torch.Tensor) else np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"{owner}: y must be 1-D with {X.shape[0]} labels (one per sample); got shape {y.shape}.")
    check_classification_targets(y)
    classes, codes = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{owner} needs samples of at least 2 classes in the data, but the data contains only "
            f"one class: {classes[0].item()!r}."
        )
    return y, classes, codes


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

    # -- parameters ---------------------------------------------------------------------------
    def _check_params(self) -> None:
        owner = type(self).__name__

        def positive_int(name, value, allow_none=False):
            if value is None and allow_none:
                return
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"The '{name}' parameter of {owner} must be an int >= 1{' or None' if allow_none else ''}. "
                    f"Got {describe(value)} instead."
                )

        positive_int("max_iter", self.max_iter)
        positive_int("n_iter_no_change", self.n_iter_no_change)
        positive_int("budget", self.budget, allow_none=True)
        if self.tol is not None and (not isinstance(self.tol, numbers.Real) or isinstance(self.tol, bool)
                                     or not np.isfinite(self.tol) or self.tol < 0):
            raise ValueError(f"The 'tol' parameter of {owner} must be a float >= 0 or None. Got {describe(self.tol)} instead.")
        if self.budget_policy not in _POLICIES:
            raise ValueError(f"The 'budget_policy' parameter of {owner} must be a str among {list(_POLICIES)}. Got {self.budget_policy!r} instead.")
        if self.multi_class not in _MULTI:
            raise ValueError(f"The 'multi_class' parameter of {owner} must be a str among {list(_MULTI)}. Got {self.multi_class!r} instead.")
        for name in ("shuffle", "fit_intercept", "averaged"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"The '{name}' parameter of {owner} must be a bool. Got {describe(getattr(self, name))} instead.")

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) — or the (n, n) Gram matrix for ``kernel="precomputed"`` — and labels ``y``."""
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

    def _block_size(self, n: int, n_cols: int, itemsize: int) -> int:
        """Samples per block: its own kernel block (and, on a budget, the block against the
        support set) must fit the memory budget."""
        width = (self.budget or 0) + n_cols + 4
        b = int((-width + np.sqrt(width * width + 4 * self._budget / (3 * itemsize))) / 2)
        return max(1, min(n, _MAX_BLOCK, b))

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
        dev = self._device
        npdt = np.float32 if self._dtype == torch.float32 else np.float64
        Y, steps = Y.astype(npdt), steps.astype(npdt)
        rng = check_random_state(self.random_state)
        multinomial = self._mode == "multinomial"
        A = np.zeros((n, n_cols), dtype=npdt)
        b = np.zeros(n_cols, dtype=npdt)
        U = np.zeros_like(A) if self.averaged else None  # sum of updates times their step index
        ub = np.zeros_like(b) if self.averaged else None
        in_support: OrderedDict[int, None] = OrderedDict()  # insertion order for "oldest"
        self_k = None
        if self.budget is not None and self.budget_policy == "smallest":
            self_k = to_numpy(Xt.diagonal() if self.kernel_.is_precomputed else self.kernel_.diag(Xt))
        block = cap = self._block_size(n, n_cols, Xt.element_size())
        # Small problems: the whole Gram matrix once (when a quarter of the budget holds it), and
        # no kernel computation at all inside the epochs.
        G = None
        if n <= _SMALL_N and 4 * n * n * Xt.element_size() <= self._budget:
            G = to_numpy(KernelOperator(self.kernel_, Xt, memory_budget=self._budget).dense())
        total_w = float(steps.max(axis=1).sum()) or 1.0
        t = 0
        best, stale, history = np.inf, 0, []
        stopped = False
        for _ in range(self.max_iter):
            order = rng.permutation(n) if self.shuffle else np.arange(n)
            # Each block pays for its own B x B kernel block; with few mistakes left, small blocks
            # waste less of it (the scores against the support set cost the same either way).
            if history:
                block = max(1, min(cap, max(_MIN_BLOCK, 2 * count)))
            mistakes, count = 0.0, 0
            for start in range(0, n, block):
                idx = order[start:start + block]
                idx_t = torch.as_tensor(idx, device=dev)
                sv = np.fromiter(in_support, dtype=np.int64, count=len(in_support))
                # Scores of the block under the model as it stands, and the kernel rows that the
                # mistakes inside the block (and, on a budget, the removals) will need.
                F = np.tile(b, (len(idx), 1))
                Kbs = None
                if len(sv):
                    if self.budget is not None:
                        Kbs = G[np.ix_(idx, sv)] if G is not None else \
                            to_numpy(self._gram(Xt, idx_t, torch.as_tensor(sv, device=dev)))
                        F += Kbs @ A[sv]
                    else:
                        F += G[np.ix_(idx, sv)] @ A[sv] if G is not None else \
                            to_numpy(self._scores(Xt, idx_t, torch.as_tensor(A[sv], device=dev), sv))
                col_of = {int(v): c for c, v in enumerate(sv)} if Kbs is not None else {}
                Kbb = G[np.ix_(idx, idx)] if G is not None else to_numpy(self._gram(Xt, idx_t, idx_t))
                pos_in_block = {int(v): p for p, v in enumerate(idx)} if self.budget is not None else None
                Yb, Sb = Y[idx], steps[idx]
                pos = 0
                while pos < len(idx):
                    err, delta = self._mistakes(F[pos:], Yb[pos:], Sb[pos:], multinomial)
                    hits = np.flatnonzero(err)
                    if hits.size == 0:
                        break
                    j = pos + int(hits[0])
                    i = int(idx[j])
                    d = delta[j - pos]
                    mistakes += float(Sb[j].max())
                    count += 1
                    if i not in in_support:
                        if self.budget is not None and len(in_support) >= self.budget:
                            v = self._victim(in_support, A, self_k, rng)
                            cv = A[v].copy()
                            kv = Kbs[j + 1:, col_of[v]] if v in col_of else Kbb[j + 1:, pos_in_block[v]]
                            F[j + 1:] -= kv[:, None] * cv
                            if self.fit_intercept:
                                F[j + 1:] -= cv
                                b -= cv
                                if ub is not None:
                                    ub -= U[v]
                            A[v] = 0
                            if U is not None:
                                U[v] = 0
                            del in_support[v]
                        in_support[i] = None
                    A[i] += d
                    step_index = t + start + j  # this is training step number step_index + 1
                    if U is not None:
                        U[i] += d * step_index
                    F[j + 1:] += Kbb[j + 1:, j, None] * d
                    if self.fit_intercept:
                        b += d
                        F[j + 1:] += d
                        if ub is not None:
                            ub += d * step_index
                    pos = j + 1
            t += n
            history.append(mistakes)
            if mistakes == 0:
                stopped = True
                break
            if self.tol is not None:
                rate = mistakes / total_w
                stale = stale + 1 if rate > best - self.tol else 0
                best = min(best, rate)
                if stale >= self.n_iter_no_change:
                    stopped = True
                    break
        self.n_iter_ = len(history)
        self.mistakes_per_epoch_ = np.asarray(history)
        self.t_ = t
        if not stopped:
            warnings.warn(
                f"{type(self).__name__}: still {history[-1]:g} weighted mistakes in the last of "
                f"max_iter={self.max_iter} epochs (no stopping criterion met); increase max_iter, or "
                "the data may not be separable with this kernel (try averaged=True).",
                ConvergenceWarning, stacklevel=3,
            )
        if U is not None:  # average of the weights after each of the t steps
            A = A - U / t
            b = b - ub / t
        return torch.as_tensor(A, device=dev), torch.as_tensor(b, device=dev)

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
