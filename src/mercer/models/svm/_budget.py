"""Budget-trained support vector classifier, :class:`BudgetSVC`.

Approximate training with a budget of ``K`` support vectors: the vectors :math:`z_1..z_K` and
the weights are learnt jointly by gradient descent (L-BFGS or Adam, autograd) on
:math:`\\tfrac12 \\sum_c w_c^T K_{ZZ} w_c + C \\sum_i \\max(0, 1 - y_{ic} f_c(x_i))^2`,
starting from k-means centres; one-vs-rest for more than two classes.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator, to_numpy
from ..._validation import Options, check_params
from ...kmeans import kmeans
from ...linalg import KernelOperator, plan_rows, row_blocks
from ...linalg import interruptible as _interruptible
from .._base import COMPUTE_CONSTRAINTS, KernelEstimatorMixin, labels_from_scores
from ._common import (AT_LEAST_ONE, CLASS_WEIGHT_CONSTRAINT, POSITIVE, SVC_KERNEL_CONSTRAINTS, _class_weights,
                      _few_threads, _labels, svc_kernel)

__all__ = ["BudgetSVC"]


class BudgetSVC(KernelEstimatorMixin, ClassifierMixin, BaseEstimator):
    """Kernel SVM with a budget of ``n_vectors`` learnt support vectors (approximate training).

    The decision function of class ``c`` is :math:`f_c(x) = \\sum_{k=1}^K W_{kc}\\, k(x, z_k) + b_c`;
    :math:`Z, W, b` minimise the regularised squared-hinge loss

    .. math:: \\tfrac12 \\sum_c W_c^T K_{ZZ} W_c + C \\sum_i s_i \\sum_c \\max(0, 1 - Y_{ic} f_c(x_i))^2

    with :math:`Y_{ic} = \\pm 1` (one-vs-rest; a single machine for two classes) and ``s_i`` the
    sample/class weights — the SVM primal restricted to the span of ``k(., z_k)``. ``Z`` starts at
    k-means centres of each class (number per class proportional to its size) and is learnt with
    the weights by autograd (``optimizer="lbfgs"``, full batch, or ``"adam"`` with learning rate
    ``lr``); ``learn_vectors=False`` keeps the centres fixed. The data term is accumulated block
    by block within the memory budget.

    Parameters
    ----------
    n_vectors : int, default=100
    C : float > 0, default=1.0
    kernel, gamma, degree, coef0, kernel_params : as :class:`KernelSVC` (gamma="scale" default)
    optimizer : {"lbfgs", "adam"}, default="lbfgs"
    max_iter : int, default=100
        L-BFGS iterations, or Adam epochs (full-batch steps).
    lr : float, default=0.05
        Adam learning rate (L-BFGS uses a strong-Wolfe line search with lr=1).
    learn_vectors : bool, default=True
    class_weight, random_state, device, dtype, memory_budget

    Attributes
    ----------
    support_vectors_ : tensor (K, n_features)
    dual_coef_ : ndarray (n_machines, K)
    intercept_ : ndarray (n_machines,)
    classes_, kernel_, n_iter_, loss_ (final objective), fit_time_
    """

    _parameter_constraints: dict = {
        **SVC_KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_vectors": [AT_LEAST_ONE],
        "C": [POSITIVE],
        "optimizer": [Options("lbfgs", "adam")],
        "max_iter": [AT_LEAST_ONE],
        "lr": [POSITIVE],
        "learn_vectors": ["boolean"],
        "class_weight": CLASS_WEIGHT_CONSTRAINT,
        "random_state": ["random_state"],
    }

    _saved_private = ("_sv", "_W", "_b")  # private state that mercer.io saves

    _sparse_refusal = ("it moves its budget of support vectors in input space (merging them into dense "
                       "points). Use KernelSVC (sparse support vectors) or NystroemKernelRidgeClassifier, or pass "
                       "X.toarray() if n_samples x n_features values fit in memory.")

    def __init__(self, n_vectors=100, *, C=1.0, kernel="rbf", gamma="scale", degree=3, coef0=0.0, kernel_params=None,
                 optimizer="lbfgs", max_iter=100, lr=0.05, learn_vectors=True, class_weight=None, random_state=None,
                 device=None, dtype=None, memory_budget=None):
        self.n_vectors = n_vectors
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.lr = lr
        self.learn_vectors = learn_vectors
        self.class_weight = class_weight
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y, sample_weight=None):
        """Learn ``n_vectors`` support vectors and their weights on ``X`` (n, d) and labels ``y``."""
        check_params(self)
        owner = type(self).__name__
        X = self._validate_X(X, reset=True)
        self.classes_, yi = _labels(owner, y, X.shape[0])
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        self._setup_compute(X)
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError(f"{owner} learns its support vectors in input space; kernel='precomputed' is not supported.")
        self.kernel_ = svc_kernel(self, X)
        cw = _class_weights(owner, self.class_weight, self.classes_, yi)
        s = cw[yi] * (1.0 if sw is None else sw)
        t0 = time.perf_counter()
        Xt = self._tensor(X)
        k = len(self.classes_)
        Y = np.where(yi[:, None] == np.arange(k)[None, :], 1.0, -1.0)
        if k == 2:
            Y = Y[:, 1:]
        Yt = torch.as_tensor(Y, dtype=self._dtype, device=self._device)
        st = torch.as_tensor(s, dtype=self._dtype, device=self._device)
        Z = self._init_centres(Xt, yi).clone().requires_grad_(bool(self.learn_vectors))
        loss, Wt, b = self._learn(Xt, Yt, st, Z)
        self.loss_ = float(loss)
        self._sv = Z.detach()
        self.support_vectors_ = self._sv
        self._W = Wt.detach()
        self._b = b.detach()
        self.dual_coef_ = to_numpy(self._W.T).copy()
        self.intercept_ = to_numpy(self._b).copy()
        self.fit_time_ = time.perf_counter() - t0
        return self

    def _learn(self, Xt, Y, s, Z):
        """Minimise the objective over the weights, intercepts and (``learn_vectors``) ``Z``;
        returns the final objective, the weights ``W`` (K, n_machines) and the intercepts."""
        # Whitened weights: W = L^{-T} V with K_ZZ = L L^T, so that the regulariser is |V|^2 / 2 and
        # the problem is as well conditioned as the primal SVM in an orthonormal basis of span k(., z).
        V = torch.zeros(Z.shape[0], Y.shape[1], dtype=self._dtype, device=self._device, requires_grad=True)
        b = torch.zeros(Y.shape[1], dtype=self._dtype, device=self._device, requires_grad=True)
        params = [V, b] + ([Z] if self.learn_vectors else [])
        n = Xt.shape[0]
        # A block of rows holds its kernel block against Z, the scores and their autograd copies.
        rows = plan_rows(n, 6 * Z.shape[0] * Xt.element_size() + 1, budget=self._budget, max_bytes=None,
                         what=f"{type(self).__name__}'s loss on a block of samples")
        C = float(self.C)
        eye = torch.eye(Z.shape[0], dtype=self._dtype, device=self._device)

        def weights():
            KZZ = self.kernel_(Z, Z)
            jitter = 1e-8 * float(KZZ.diagonal().abs().mean().detach()) + 1e-12
            A = KZZ + jitter * eye
            L = _interruptible(lambda: torch.linalg.cholesky(A), A, "Cholesky factorisation")  # Ctrl-C is heard
            return torch.linalg.solve_triangular(L.T, V, upper=True)

        def closure():
            for p in params:
                p.grad = None
            reg = 0.5 * (V * V).sum()
            reg.backward()
            total = float(reg.detach())
            for r in row_blocks(n, rows, desc="BudgetSVC loss"):
                F = self.kernel_(Xt[r], Z) @ weights() + b
                h = torch.clamp(1 - Y[r] * F, min=0)
                loss = C * (s[r, None] * h * h).sum()
                loss.backward()
                total += float(loss.detach())
            return torch.tensor(total, dtype=self._dtype)

        try:
            with _few_threads(Xt.device, n * Z.shape[0] * max(1, Xt.shape[1] // 16)):
                loss, W = self._optimise(params, closure, weights)
        except torch.linalg.LinAlgError as exc:  # K_ZZ not positive definite even with its jitter
            raise ValueError(f"{type(self).__name__}: the kernel matrix of the learnt vectors is not positive "
                             f"definite (kernel={self.kernel_!r}, C={self.C!r}): use a positive-definite kernel "
                             "(not 'sigmoid'), a smaller gamma or C, or learn_vectors=False.") from exc
        except RuntimeError as exc:
            if "grad" in str(exc):
                raise ValueError(f"{type(self).__name__}: the kernel {self.kernel_!r} is not differentiable with "
                                 "respect to its inputs by autograd; use learn_vectors=False.") from exc
            raise
        return loss, W, b

    def _optimise(self, params, closure, weights):
        if self.optimizer == "lbfgs":
            opt = torch.optim.LBFGS(params, lr=1.0, max_iter=int(self.max_iter), line_search_fn="strong_wolfe",
                                    tolerance_grad=1e-10, tolerance_change=1e-14, history_size=20)
            opt.step(closure)
            self.n_iter_ = int(opt.state[opt._params[0]].get("n_iter", self.max_iter))
        else:
            opt = torch.optim.Adam(params, lr=float(self.lr))
            for _ in range(int(self.max_iter)):
                opt.step(closure)
            self.n_iter_ = int(self.max_iter)
        loss = closure()
        with torch.no_grad():
            return loss, weights()

    def _init_centres(self, Xt, yi):
        k = len(self.classes_)
        K = int(self.n_vectors)
        counts = np.bincount(yi, minlength=k)
        share = np.maximum(1, np.round(K * counts / counts.sum()).astype(int))
        share = np.minimum(share, counts)
        Xn = to_numpy(Xt).astype(np.float64)
        seed = self.random_state if isinstance(self.random_state, (int, np.integer)) else 0
        rng = np.random.RandomState(seed)
        out = []
        for c in range(k):
            pts = Xn[yi == c]
            if len(pts) > 20_000:
                pts = pts[rng.choice(len(pts), 20_000, replace=False)]
            m = int(min(share[c], len(np.unique(pts, axis=0))))
            out.append(pts[:m] if m >= len(pts) else to_numpy(kmeans(
                torch.from_numpy(pts), m, init="k-means++", n_init=1, generator=make_generator(seed),
                memory_budget=self._budget, owner=type(self).__name__).centers))
        return torch.as_tensor(np.concatenate(out), dtype=self._dtype, device=self._device)

    def decision_function(self, X):
        """Shape (n,) for two classes (positive favours ``classes_[1]``), else (n, n_classes)."""
        check_is_fitted(self, "classes_")
        Xt = self._tensor(self._validate_X(X, reset=False))
        op = KernelOperator(self.kernel_, Xt, self._sv, memory_budget=self._budget, n_rhs=self._W.shape[1])
        with _few_threads(Xt.device, Xt.shape[0] * self._sv.shape[0] * max(1, Xt.shape[1] // 16)):
            out = op.matvec(self._W) + self._b
        return as_output(out[:, 0] if out.shape[1] == 1 else out, X)

    def predict(self, X):
        """Class labels: the sign of the decision value (two classes), else its largest column."""
        scores = self.decision_function(X)  # checks that the model is fitted first
        return labels_from_scores(self.classes_, scores, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False  # it refuses sparse X by name (_sparse_refusal)
        return tags
