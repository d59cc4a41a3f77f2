"""Kernel support vector classifiers: exact (SMO, as LIBSVM), reduced-set, budget-trained,
and kernel-approximation SVMs.

:class:`KernelSVC`
    Soft-margin C-SVM in the dual, :math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha - e^T\\alpha`,
    :math:`0 \\le \\alpha_i \\le C_i`, :math:`y^T\\alpha = 0`, :math:`Q_{ij} = y_i y_j k(x_i, x_j)`,
    solved by SMO with second-order working-set selection, an LRU kernel-row cache and shrinking
    (see :mod:`mercer.models._smo`). The decision function is
    :math:`f(x) = \\sum_i \\alpha_i y_i k(x_i, x) - \\rho`. Multiclass: one-vs-one (LIBSVM's layout
    of ``dual_coef_``/``intercept_``, so results compare one to one with scikit-learn's ``SVC``) or
    one-vs-rest. With ``approximation="nystroem"`` or ``"rff"`` it becomes a linear SVM
    (liblinear, through scikit-learn's ``LinearSVC``) on explicit approximate features.
:class:`ReducedSetSVC`
    Post-processing (Burges & Schölkopf 1996): the support vectors are clustered (k-means in input
    space, or kernel k-means in feature space), the centres become the new support vectors, and
    the coefficients are refitted by least squares on the decision values (or by projection in
    the RKHS). ``KernelSVC.reduce(n_vectors)`` builds one from a fitted SVC.
:class:`BudgetSVC`
    Approximate training with a budget of ``K`` support vectors: the vectors
    :math:`z_1..z_K` and the weights are learnt jointly by gradient descent (L-BFGS or Adam,
    autograd) on :math:`\\tfrac12 \\sum_c w_c^T K_{ZZ} w_c + C \\sum_i \\max(0, 1 - y_{ic} f_c(x_i))^2`,
    starting from k-means centres; one-vs-rest for more than two classes.
"""

from __future__ import annotations

import logging
import numbers
import time
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..._backend import as_output, row_sq_norms, serial_if_small, to_numpy
from ...kernels import RBF, Kernel, Sigmoid
from ...kernels._base import Product, Scaled, Sum
from ...linalg import KernelOperator, MemoryBudgetError, format_bytes
from ...linalg import NumericalWarning
from .._base import KernelEstimatorMixin, class_weights, labels_like
from ._smo import solve_smo

__all__ = ["KernelSVC", "ReducedSetSVC", "BudgetSVC"]

log = logging.getLogger(__name__)

#: Most kernel rows computed per cache miss (the missing row and the top violators).
_MAX_BATCH = 64


def _few_threads(device: torch.device, work: float, limit: float = 2**22):
    """Below ~4M kernel entries an OpenMP team costs more than it saves (one-sample prediction:
    0.5 ms on one thread, 20+ ms on two busy cores): run on one torch thread."""
    return serial_if_small(device, work, limit)


# -- parameter checks ---------------------------------------------------------------------------
def _check_positive(owner: str, name: str, value, *, integer: bool = False, allow_zero: bool = False):
    kinds = (numbers.Integral,) if integer else (numbers.Real,)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and np.isfinite(value) and (
        value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "an int" if integer else "a float"
        rng = "[0, inf)" if allow_zero else ("[1, inf)" if integer else "(0, inf)")
        raise ValueError(f"The {name!r} parameter of {owner} must be {what} in the range {rng}. Got {value!r} instead.")
    return value


def _check_choice(owner: str, name: str, value, choices):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"The {name!r} parameter of {owner} must be a str among {list(choices)}. Got {value!r} instead.")
    return value


def _data_variance(X) -> float:
    if sp.issparse(X):
        return float(X.multiply(X).mean() - X.mean() ** 2)
    if isinstance(X, torch.Tensor):
        return float(X.double().var(unbiased=False))
    return float(np.asarray(X, dtype=np.float64).var())


def _numeric_gamma(gamma, kernel, X, owner: str):
    """scikit-learn SVC's ``gamma``: "scale" = 1 / (d Var X), "auto" = 1 / d, or a float > 0."""
    if isinstance(kernel, Kernel) or (isinstance(kernel, str) and kernel == "precomputed"):
        return None if isinstance(gamma, str) else gamma
    if isinstance(gamma, str):
        if gamma == "scale":
            var = _data_variance(X)
            return 1.0 / (X.shape[1] * var) if var != 0 else 1.0
        if gamma == "auto":
            return 1.0 / X.shape[1]
        raise ValueError(f"The 'gamma' parameter of {owner} must be 'scale', 'auto' or a float in the range (0, inf). Got {gamma!r} instead.")
    if gamma is not None:
        _check_positive(owner, "gamma", gamma)
    return gamma


def _contains_sigmoid(k: Kernel) -> bool:
    if isinstance(k, Sigmoid):
        return True
    if isinstance(k, (Sum, Product)):
        return any(_contains_sigmoid(c) for c in k.kernels)
    if isinstance(k, Scaled):
        return _contains_sigmoid(k.kernel)
    return False


def _labels(owner: str, y, n: int):
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None.")
    y = to_numpy(y) if isinstance(y, torch.Tensor) else np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"{owner}: y must be 1-D with {n} labels (one per sample); got shape {y.shape}.")
    check_classification_targets(y)
    classes, yi = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{owner} needs samples of at least 2 classes in the data, but the data contains only "
            f"one class: {classes[0].item() if isinstance(classes[0], np.generic) else classes[0]!r}."
        )
    return classes, yi.astype(np.int64)


def _class_weights(owner: str, class_weight, classes, yi) -> np.ndarray:
    """Class weights as scikit-learn's SVC: "balanced" from the counts (sample weights ignored)."""
    return class_weights(owner, class_weight, classes, classes[yi])


def _predict_labels(classes, idx, X):
    return labels_like(classes[idx], X)


# -- Platt scaling (as LIBSVM: Lin, Lin & Weng 2007; pairwise coupling: Wu, Lin & Weng 2004) --------
def _sigmoid_train(dec: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    prior1 = float((y > 0).sum())
    prior0 = float(len(y) - prior1)
    hi, lo = (prior1 + 1) / (prior1 + 2), 1 / (prior0 + 2)
    t = np.where(y > 0, hi, lo)
    A, B = 0.0, float(np.log((prior0 + 1) / (prior1 + 1)))

    def f(A, B):
        z = dec * A + B
        return float(np.sum(np.where(z >= 0, t * z + np.log1p(np.exp(-np.abs(z))), (t - 1) * z + np.log1p(np.exp(-np.abs(z))))))

    fval = f(A, B)
    for _ in range(100):
        z = dec * A + B
        p = np.where(z >= 0, np.exp(-np.abs(z)) / (1 + np.exp(-np.abs(z))), 1 / (1 + np.exp(-np.abs(z))))
        q = 1 - p
        d2 = p * q
        h11 = 1e-12 + np.sum(dec * dec * d2)
        h22 = 1e-12 + np.sum(d2)
        h21 = np.sum(dec * d2)
        d1 = t - p
        g1, g2 = np.sum(dec * d1), np.sum(d1)
        if abs(g1) < 1e-5 and abs(g2) < 1e-5:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= 1e-10:
            nA, nB = A + step * dA, B + step * dB
            nf = f(nA, nB)
            if nf < fval + 1e-4 * step * gd:
                A, B, fval = nA, nB, nf
                break
            step /= 2
        if step < 1e-10:
            break
    return float(A), float(B)


def _sigmoid_predict(dec, A, B):
    z = dec * A + B
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, e / (1 + e), 1 / (1 + e))


def _couple(r: np.ndarray) -> np.ndarray:
    """Pairwise coupling, vectorised over samples: ``r`` (n, k, k) with r[:, i, j] = P(i | i or j)."""
    n, k, _ = r.shape
    Q = -r.transpose(0, 2, 1) * r
    idx = np.arange(k)
    Q[:, idx, idx] = (r.transpose(0, 2, 1) ** 2).sum(axis=2) - r[:, idx, idx] ** 2
    p = np.full((n, k), 1.0 / k)
    todo = np.arange(n)  # each sample iterates until it converges (results independent of the batch)
    for _ in range(max(100, k)):
        Qs, ps = Q[todo], p[todo]
        Qp = np.einsum("nij,nj->ni", Qs, ps)
        pQp = (ps * Qp).sum(axis=1)
        run = np.abs(Qp - pQp[:, None]).max(axis=1) >= 0.005 / k
        todo, Qs, ps, Qp, pQp = todo[run], Qs[run], ps[run], Qp[run], pQp[run]
        if not len(todo):
            break
        for t in range(k):
            diff = (-Qp[:, t] + pQp) / Qs[:, t, t]
            ps[:, t] += diff
            pQp = (pQp + diff * (diff * Qs[:, t, t] + 2 * Qp[:, t])) / (1 + diff) ** 2
            Qp = (Qp + diff[:, None] * Qs[:, t, :]) / (1 + diff)[:, None]
            ps = ps / (1 + diff)[:, None]
        p[todo] = ps
    return p


# -- kernel rows for the solver ------------------------------------------------------------------
class _Rows:
    """Kernel rows, diagonal and blocked products on one (sub)problem's samples."""

    def __init__(self, kernel: Kernel, Xs: torch.Tensor, budget: int, cols=None):
        self.kernel, self.X, self.budget = kernel, Xs, budget
        self.pre = kernel.is_precomputed
        if self.pre:  # Xs: rows of the Gram matrix restricted to this problem's columns
            self.X = Xs[:, cols] if cols is not None else Xs
        self.rbf = type(kernel) is RBF
        if self.rbf:
            self.g = float(kernel.gamma if kernel.gamma is not None else 1.0 / Xs.shape[1])
            self.nrm = row_sq_norms(Xs).mul_(-self.g)

    def diag(self) -> np.ndarray:
        if self.pre:
            return to_numpy(torch.diagonal(self.X)).astype(np.float64)
        return to_numpy(KernelOperator(self.kernel, self.X, memory_budget=self.budget).diag()).astype(np.float64)

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        it = torch.as_tensor(idx, device=self.X.device)
        if self.pre:
            return to_numpy(self.X[it])
        if self.rbf:
            D = torch.addmm(self.nrm[None, :], self.X[it], self.X.T, alpha=2.0 * self.g)
            return to_numpy(D.add_(self.nrm[it][:, None]).clamp_max_(0.0).exp_())
        return to_numpy(self.kernel(self.X[it], self.X))

    def matvec(self, r, c, v) -> np.ndarray:
        vt = torch.as_tensor(v, dtype=self.X.dtype, device=self.X.device)
        rt = torch.as_tensor(r, device=self.X.device)
        ct = torch.as_tensor(c, device=self.X.device)
        if self.pre:
            return to_numpy(self.X[rt][:, ct] @ vt).astype(np.float64)
        return to_numpy(KernelOperator(self.kernel, self.X[rt], self.X[ct], memory_budget=self.budget).matvec(vt)).astype(np.float64)


# -- shared decision machinery ---------------------------------------------------------------------
class _SVCDecisionMixin:
    """Decision values from ``_sv`` (support vectors, or column indices for precomputed kernels),
    ``_W`` (n_vectors, n_machines) raw coefficients and ``_b`` (n_machines,) raw intercepts.

    Raw orientation is LIBSVM's: for one-vs-one machine (i, j), a positive value votes for class i;
    for one-vs-rest machine c, a positive value means class c.
    """

    def _raw_decision(self, X):
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        with _few_threads(Xt.device, Xt.shape[0] * max(1, self._W.shape[0]) * max(1, Xt.shape[1] // 16)):
            return self._raw_decision_t(Xt)

    def _raw_decision_t(self, Xt):
        W = self._W.to(dtype=Xt.dtype)
        if self.kernel_.is_precomputed:
            if Xt.shape[1] != self.shape_fit_[0]:
                raise ValueError(f"precomputed kernel: X must have {self.shape_fit_[0]} columns (training samples); got {Xt.shape[1]}.")
            out = Xt[:, self._sv] @ W
        elif W.shape[0] == 0:
            out = torch.zeros(Xt.shape[0], W.shape[1], dtype=Xt.dtype, device=Xt.device)
        else:
            op = KernelOperator(self.kernel_, Xt, self._sv.to(Xt.dtype), memory_budget=self._budget, n_rhs=W.shape[1])
            out = op.matvec(W)
        return out + self._b.to(dtype=out.dtype)

    def _public_decision(self, raw: torch.Tensor) -> torch.Tensor:
        k = len(self.classes_)
        if self._mode == "ovr" and k > 2:
            return raw
        if k == 2:
            return -raw[:, 0] if self._mode == "ovo" else raw[:, 0]
        if self.decision_function_shape == "ovo":
            return raw
        from sklearn.utils.multiclass import _ovr_decision_function

        r = to_numpy(raw)
        return torch.as_tensor(_ovr_decision_function(r < 0, -r, k), dtype=raw.dtype, device=raw.device)

    def _predict_index(self, raw: torch.Tensor) -> np.ndarray:
        r = to_numpy(raw)
        k = len(self.classes_)
        if k == 2:
            return (r[:, 0] <= 0).astype(np.int64) if self._mode == "ovo" else (r[:, 0] > 0).astype(np.int64)
        if self._mode == "ovr":
            return r.argmax(axis=1)
        pairs = np.asarray(self._pairs, dtype=np.int64).reshape(-1, 2)
        win = np.where(r > 0, pairs[:, 0], pairs[:, 1])  # (n, n_pairs) winner of each machine
        votes = np.zeros((r.shape[0], k), dtype=np.int64)
        np.add.at(votes, (np.arange(r.shape[0])[:, None], win), 1)
        return votes.argmax(axis=1)  # ties: lowest class index, as LIBSVM

    def decision_function(self, X):
        """Decision values: shape (n,) for two classes (positive favours ``classes_[1]``), else
        (n, n_classes) (``decision_function_shape="ovr"``) or (n, n_classes (n_classes - 1) / 2)."""
        check_is_fitted(self, "classes_")
        if getattr(self, "approximation_", None) is not None:
            out = self.linear_svc_.decision_function(self._features(X))
            return torch.as_tensor(out, device=X.device) if isinstance(X, torch.Tensor) else out
        return as_output(self._public_decision(self._raw_decision(X)), X)

    def predict(self, X):
        """Class labels (one-vs-one: majority vote of the pairwise machines, ties to the lowest class)."""
        check_is_fitted(self, "classes_")
        if getattr(self, "approximation_", None) is not None:
            return _predict_labels(self.classes_, np.searchsorted(self.classes_, self.linear_svc_.predict(self._features(X))), X)
        return _predict_labels(self.classes_, self._predict_index(self._raw_decision(X)), X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags


# -- KernelSVC -------------------------------------------------------------------------------------
class KernelSVC(_SVCDecisionMixin, KernelEstimatorMixin, ClassifierMixin, BaseEstimator):
    """C-support vector classifier with any mercer kernel, solved exactly by SMO (as LIBSVM).

    Parameters
    ----------
    C : float > 0, default=1.0
        Box constraint; per sample ``C_i = C * class_weight[y_i] * sample_weight_i``.
    kernel : str or mercer Kernel, default="rbf"
        ``"rbf"``, ``"linear"``, ``"poly"``, ``"sigmoid"``, ``"laplacian"``, ``"precomputed"``, ...
        or any kernel object (composites, set kernels such as ``Intersection``).
    gamma : {"scale", "auto"} or float, default="scale"
        For kernels given by name, as scikit-learn's SVC: "scale" = ``1 / (n_features * X.var())``,
        "auto" = ``1 / n_features``. Ignored for kernel objects.
    degree, coef0, kernel_params :
        Passed to a kernel given by name (``degree=3``, ``coef0=0.0`` as in SVC).
    tol : float, default=1e-3
        Stopping tolerance on the maximal KKT violation (LIBSVM's ``eps``).
    cache_size : float or None, default=None
        Kernel-row cache in MB; rows are stored in float32, as LIBSVM's. ``None``: half the memory
        budget, at most the whole matrix. On a miss, the missing row and up to 63 of the current
        top violators are computed in one kernel block.
    shrinking : bool, default=True
    class_weight : dict, "balanced" or None
    decision_function_shape : {"ovr", "ovo"}, default="ovr"
        Shape of ``decision_function`` for one-vs-one multiclass, as scikit-learn.
    multiclass : {"ovo", "ovr"}, default="ovo"
        One-vs-one machines (LIBSVM) or one machine per class against the rest.
    probability : bool, default=False
        Fit Platt sigmoids on 5-fold cross-validated decision values (as LIBSVM) for
        ``predict_proba``; one-vs-one probabilities are coupled (Wu, Lin & Weng 2004), one-vs-rest
        ones normalised to sum to one.
    max_iter : int, default=-1
        SMO iterations per machine; -1: LIBSVM's limit ``max(1e7, 100 n)``.
    approximation : {None, "nystroem", "rff"}, default=None
        Train a linear SVM (``sklearn.svm.LinearSVC``, hinge loss) on ``mercer.approx.Nystroem`` or
        ``RandomFourierFeatures`` features instead of the exact kernel machine.
    n_components : int, default=500
        Number of approximate features (``approximation`` only).
    random_state : int, RandomState or None
        Seeds the probability cross-validation folds and the approximate features.
    device, dtype, memory_budget :
        As every mercer estimator. The kernel rows are computed on ``device``; the SMO loop runs
        on the CPU (compiled with numba), on one thread like LIBSVM (small kernel blocks gain
        nothing from an OpenMP team, and it stalls badly on shared cores).

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    support_ : ndarray (n_SV,) indices of the support vectors, grouped by class
    support_vectors_ : tensor (n_SV, n_features) (empty for a precomputed kernel)
    n_support_ : ndarray (n_classes,) support vectors per class
    dual_coef_ : ndarray (n_classes - 1, n_SV) as scikit-learn (one-vs-one), or (n_classes, n_SV)
        (one-vs-rest): ``alpha_i y_i`` per machine
    intercept_ : ndarray (n_machines,)
    probA_, probB_ : ndarray (n_machines,) Platt parameters (``probability=True``)
    n_iter_ : ndarray (n_machines,) SMO iterations
    fit_status_ : int, 0 when every machine converged
    kernel_, fit_time_
    approximation_, linear_svc_ : the feature map and linear SVM (``approximation`` only)
    """

    def __init__(self, C=1.0, *, kernel="rbf", gamma="scale", degree=3, coef0=0.0, kernel_params=None,
                 tol=1e-3, cache_size=None, shrinking=True, class_weight=None, decision_function_shape="ovr",
                 multiclass="ovo", probability=False, max_iter=-1, approximation=None, n_components=500,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.tol = tol
        self.cache_size = cache_size
        self.shrinking = shrinking
        self.class_weight = class_weight
        self.decision_function_shape = decision_function_shape
        self.multiclass = multiclass
        self.probability = probability
        self.max_iter = max_iter
        self.approximation = approximation
        self.n_components = n_components
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- checks ------------------------------------------------------------------------------
    def _check_params(self):
        owner = type(self).__name__
        _check_positive(owner, "C", self.C)
        _check_positive(owner, "tol", self.tol)
        if self.cache_size is not None:
            _check_positive(owner, "cache_size", self.cache_size)
        _check_choice(owner, "decision_function_shape", self.decision_function_shape, ("ovr", "ovo"))
        _check_choice(owner, "multiclass", self.multiclass, ("ovo", "ovr"))
        if self.approximation is not None:
            _check_choice(owner, "approximation", self.approximation, ("nystroem", "rff"))
            _check_positive(owner, "n_components", self.n_components, integer=True)
        if not isinstance(self.max_iter, numbers.Integral) or isinstance(self.max_iter, bool) or \
                (self.max_iter < 1 and self.max_iter != -1):
            raise ValueError(f"The 'max_iter' parameter of {owner} must be an int in the range [1, inf) or -1. Got {self.max_iter!r} instead.")

    def _kernel_for(self, X):
        gamma = _numeric_gamma(self.gamma, self.kernel, X, type(self).__name__)
        from ...kernels import resolve_kernel

        return resolve_kernel(self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0,
                              kernel_params=self.kernel_params, owner=type(self).__name__)

    # -- fit ---------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) — or the (n, n) Gram matrix for ``kernel="precomputed"`` — and labels ``y``."""
        owner = type(self).__name__
        X = self._validate_X(X, reset=True)
        self._check_params()
        self.classes_, yi = _labels(owner, y, X.shape[0])
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        self._setup_compute(X)
        self.kernel_ = self._kernel_for(X)
        if self.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
            raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
        if sw is not None and len(np.unique(yi[sw > 0])) < 2:
            raise ValueError(f"{owner}: all samples with positive sample_weight belong to one class; "
                             "need at least 2 classes with positive weight.")
        cw = _class_weights(owner, self.class_weight, self.classes_, yi)
        self.class_weight_ = cw
        Cb = float(self.C) * cw[yi] * (1.0 if sw is None else sw)
        t0 = time.perf_counter()
        if self.approximation is not None:
            self._fit_approx(X, y, sw)
            self.fit_time_ = time.perf_counter() - t0
            return self
        self.approximation_ = None
        if _contains_sigmoid(self.kernel_):
            warnings.warn(f"{owner}: the sigmoid kernel is not positive semi-definite in general; the "
                          "dual may be non-convex (SMO still terminates, with LIBSVM's curvature fix).",
                          NumericalWarning, stacklevel=2)
        Xt = self._tensor(X)
        self.shape_fit_ = tuple(X.shape)
        # The SMO phase runs on one CPU thread, as LIBSVM: its kernel blocks are small (a few
        # hundred rows), an OpenMP team costs more than it saves on them, and it stalls badly when
        # the cores are shared. Prediction uses torch's thread setting.
        with _few_threads(Xt.device, 0):
            self._fit_machines(Xt, yi, Cb)
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: %d machine(s) on n=%d in %.2f s, %d support vectors", owner, len(self._b),
                 X.shape[0], self.fit_time_, len(self.support_))
        return self

    def _solve(self, Xt, idx, ybin, Cb):
        """One binary machine on samples ``idx`` (labels ``ybin`` = +-1); returns the SMOResult."""
        keep = Cb > 0
        idx, ybin, Cb = idx[keep], ybin[keep], Cb[keep]
        n = len(idx)
        it = torch.as_tensor(idx, device=Xt.device)
        rows = _Rows(self.kernel_, Xt[it], self._budget, cols=it if self.kernel_.is_precomputed else None)
        item = 4  # the cache holds float32 rows, as LIBSVM's
        cache_bytes = self._budget // 2 if self.cache_size is None else int(self.cache_size * 2**20)
        cache_rows = max(2, min(n, cache_bytes // max(1, n * item)))
        batch = int(np.clip((64 * 2**20) // max(1, n * item), 8, _MAX_BATCH))
        res = solve_smo(rows, rows.diag(), ybin, Cb, matvec=rows.matvec, cache_rows=cache_rows,
                        cache_dtype=np.float32, tol=float(self.tol),
                        shrinking=bool(self.shrinking), max_iter=int(self.max_iter), batch=batch)
        res.index = idx
        return res

    def _machines(self, yi):
        """(positive classes, negative classes) of each binary machine."""
        k = len(self.classes_)
        if k == 2 or self.multiclass == "ovo":
            self._mode = "ovo"
            self._pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
            return [([i], [j]) for i, j in self._pairs]
        self._mode = "ovr"
        self._pairs = []
        return [([c], [o for o in range(k) if o != c]) for c in range(k)]

    def _fit_machines(self, Xt, yi, Cb):
        k = len(self.classes_)
        machines = self._machines(yi)
        alphas, rhos, iters, status, probs = [], [], [], 0, []
        nonpsd = 0
        gen = np.random.RandomState(self.random_state if isinstance(self.random_state, (int, np.integer)) else None) \
            if not isinstance(self.random_state, np.random.RandomState) else self.random_state
        for pos, neg in machines:
            # LIBSVM orders a pair's samples by class: all of class i, then all of class j.
            idx = np.concatenate([np.flatnonzero(yi == c) for c in pos + neg]) if self._mode == "ovo" else np.arange(len(yi))
            ybin = np.where(np.isin(yi[idx], pos), 1.0, -1.0)
            res = self._solve(Xt, idx, ybin, Cb[idx])
            a = np.zeros(len(yi))
            a[res.index] = res.alpha
            alphas.append(a * np.where(np.isin(yi, pos), 1.0, -1.0))
            rhos.append(res.rho)
            iters.append(res.n_iter)
            nonpsd += res.nonpsd_steps
            if not res.converged:
                status = 1
                warnings.warn(f"{type(self).__name__}: SMO stopped at max_iter={res.n_iter} before reaching tol={self.tol}; "
                              "the solution may be inaccurate.", ConvergenceWarning, stacklevel=3)
            if self.probability:
                probs.append(self._platt(Xt, idx, ybin, Cb[idx], gen))
        if nonpsd:
            warnings.warn(f"{type(self).__name__}: the kernel matrix is not positive semi-definite on the training "
                          f"data ({nonpsd} SMO steps met non-positive curvature and used LIBSVM's tau fix).",
                          NumericalWarning, stacklevel=3)
        coef = np.stack(alphas, axis=1)  # (n, n_machines), alpha_i y_i
        is_sv = np.abs(coef).sum(axis=1) > 0
        order = np.concatenate([np.flatnonzero(is_sv & (yi == c)) for c in range(k)])
        self.support_ = order.astype(np.int32)
        self.n_support_ = np.array([int((is_sv & (yi == c)).sum()) for c in range(k)], dtype=np.int32)
        self.n_iter_ = np.asarray(iters, dtype=np.int32)
        self.fit_status_ = status
        self._b = torch.as_tensor(-np.asarray(rhos), dtype=self._dtype, device=self._device)
        W = coef[order]
        self._W = torch.as_tensor(W, dtype=self._dtype, device=self._device)
        if self.kernel_.is_precomputed:
            self._sv = torch.as_tensor(order, device=self._device)
            self.support_vectors_ = torch.zeros(0, 0, dtype=self._dtype, device=self._device)
        else:
            self._sv = Xt[torch.as_tensor(order, device=Xt.device)]
            self.support_vectors_ = self._sv
        if self._mode == "ovo":
            dual = np.zeros((k - 1, len(order)))
            cls = yi[order]
            for p, (i, j) in enumerate(self._pairs):
                dual[j - 1, cls == i] = W[cls == i, p]
                dual[i, cls == j] = W[cls == j, p]
            self.intercept_ = -np.asarray(rhos)
            if k == 2:
                dual, self.intercept_ = -dual, -self.intercept_
        else:
            dual = W.T.copy()
            self.intercept_ = -np.asarray(rhos)
        self.dual_coef_ = dual
        if self.probability:
            self.probA_ = np.array([p[0] for p in probs])
            self.probB_ = np.array([p[1] for p in probs])
        else:
            self.probA_ = self.probB_ = np.empty(0)

    def _platt(self, Xt, idx, ybin, Cb, gen):
        """LIBSVM's svm_binary_svc_probability: 5-fold CV decision values, then a sigmoid fit."""
        n = len(idx)
        perm = gen.permutation(n)
        dec = np.zeros(n)
        for f in range(5):
            test = perm[f * n // 5:(f + 1) * n // 5]
            train = np.concatenate([perm[:f * n // 5], perm[(f + 1) * n // 5:]])
            yt = ybin[train]
            if (yt > 0).all() or (yt < 0).all() or len(train) == 0:
                dec[test] = 0.0 if len(train) == 0 else (1.0 if (yt > 0).all() else -1.0)
                continue
            res = self._solve(Xt, idx[train], yt, Cb[train])
            sv = res.index[res.alpha > 0]
            coef = res.alpha[res.alpha > 0] * np.where(np.isin(res.index[res.alpha > 0], idx[train][yt > 0]), 1.0, -1.0)
            Xs = Xt[torch.as_tensor(idx[test], device=Xt.device)]
            if self.kernel_.is_precomputed:
                K = Xs[:, torch.as_tensor(sv, device=Xt.device)]
            else:
                K = self.kernel_(Xs, Xt[torch.as_tensor(sv, device=Xt.device)])
            dec[test] = to_numpy(K @ torch.as_tensor(coef, dtype=K.dtype, device=K.device)) - res.rho
        return _sigmoid_train(dec, ybin)

    # -- approximation -----------------------------------------------------------------------
    def _fit_approx(self, X, y, sw):
        from sklearn.svm import LinearSVC

        try:
            from ...approx import Nystroem, RandomFourierFeatures
        except ImportError as exc:  # pragma: no cover - depends on the approx module's progress
            raise ImportError(f"{type(self).__name__}(approximation=...) needs mercer.approx.Nystroem and "
                              f"RandomFourierFeatures: {exc}") from exc
        if self.probability:
            raise ValueError(f"{type(self).__name__}: probability=True is not available with approximation={self.approximation!r}.")
        cls = Nystroem if self.approximation == "nystroem" else RandomFourierFeatures
        import inspect

        accepted = inspect.signature(cls.__init__).parameters
        extra = {k: getattr(self, k) for k in ("device", "dtype", "memory_budget") if k in accepted}
        self.approximation_ = cls(kernel=self.kernel_, n_components=self.n_components, random_state=self.random_state,
                                  **extra)
        F = to_numpy(torch.as_tensor(self.approximation_.fit_transform(X)))
        cw = None if self.class_weight is None else self.class_weight
        self.linear_svc_ = LinearSVC(C=self.C, loss="hinge", dual=True, tol=self.tol, class_weight=cw,
                                     max_iter=10_000 if self.max_iter == -1 else self.max_iter,
                                     random_state=self.random_state)
        yl = to_numpy(y) if isinstance(y, torch.Tensor) else np.asarray(y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.linear_svc_.fit(F, column_or_1d(yl), sample_weight=sw)
        self.n_iter_ = np.atleast_1d(self.linear_svc_.n_iter_)

    def _features(self, X):
        self._validate_X(X, reset=False)
        return to_numpy(torch.as_tensor(self.approximation_.transform(X)))

    # -- probabilities -----------------------------------------------------------------------
    def predict_proba(self, X):
        """Class probabilities (n, n_classes) from Platt-scaled decision values (``probability=True``)."""
        check_is_fitted(self, "classes_")
        if not self.probability or getattr(self, "approximation_", None) is not None:
            raise AttributeError("predict_proba is only available when probability=True (exact SVC).")
        raw = to_numpy(self._raw_decision(X))
        k = len(self.classes_)
        p = np.clip(_sigmoid_predict(raw, self.probA_[None, :], self.probB_[None, :]), 1e-7, 1 - 1e-7)
        if self._mode == "ovr" and k > 2:
            out = p / p.sum(axis=1, keepdims=True)
        else:
            r = np.zeros((raw.shape[0], k, k))
            for m, (i, j) in enumerate(self._pairs):
                r[:, i, j] = p[:, m]
                r[:, j, i] = 1 - p[:, m]
            out = np.stack([r[:, 0, 1], r[:, 1, 0]], axis=1) if k == 2 else _couple(r)
        return torch.as_tensor(out, device=X.device) if isinstance(X, torch.Tensor) else out

    def predict_log_proba(self, X):
        p = self.predict_proba(X)
        return torch.log(p) if isinstance(p, torch.Tensor) else np.log(p)

    # -- reduced set -------------------------------------------------------------------------
    def reduce(self, n_vectors, *, method="kmeans", refit="decision", random_state=None):
        """A :class:`ReducedSetSVC` with ``n_vectors`` vectors (an int, or a fraction in (0, 1) of
        the support vectors) approximating this fitted classifier. See :class:`ReducedSetSVC`."""
        check_is_fitted(self, "classes_")
        params = {k: v for k, v in self.get_params(deep=False).items() if k in ReducedSetSVC._get_param_names()}
        red = ReducedSetSVC(n_vectors=n_vectors, method=method, refit=refit, **{**params, "random_state": random_state})
        red._reduce_from(self)
        return red


def _available_if_proba(est):
    return bool(getattr(est, "probability", False))


# predict_proba only exists when probability=True (scikit-learn's convention, checked by the estimator checks)
from sklearn.utils._available_if import available_if  # noqa: E402

KernelSVC.predict_proba = available_if(_available_if_proba)(KernelSVC.predict_proba)
KernelSVC.predict_log_proba = available_if(_available_if_proba)(KernelSVC.predict_log_proba)


# -- reduced-set SVC -----------------------------------------------------------------------------
def _n_target(n_vectors, n_sv: int, owner: str) -> int:
    if isinstance(n_vectors, numbers.Integral) and not isinstance(n_vectors, bool) and n_vectors >= 1:
        return int(min(n_vectors, n_sv))
    if isinstance(n_vectors, numbers.Real) and not isinstance(n_vectors, bool) and 0 < n_vectors < 1:
        return max(1, int(round(n_vectors * n_sv)))
    raise ValueError(f"The 'n_vectors' parameter of {owner} must be an int in the range [1, inf) or a float in "
                     f"the range (0, 1) (a fraction of the support vectors). Got {n_vectors!r} instead.")


class ReducedSetSVC(KernelSVC):
    """A kernel SVM with few vectors, obtained by post-processing an exact :class:`KernelSVC`.

    ``fit`` trains a :class:`KernelSVC` with the given parameters, then
    (Burges & Schölkopf 1996) clusters its support vectors class by class into ``n_vectors``
    groups (the number per class proportional to its support vectors) and uses the centres
    :math:`z_1..z_K` as the new support vectors:

    * ``method="kmeans"``: k-means in input space; the centres are the cluster means;
    * ``method="kernel_kmeans"``: kernel k-means in feature space (initialised by input-space
      k-means); each centre is the cluster member nearest to its feature-space mean (a pre-image).

    The coefficients :math:`\\Gamma` (K, n_machines) and intercepts are then refitted:

    * ``refit="decision"``: least squares on the decision values at the original support vectors,
      :math:`\\min \\|K(S, Z)\\Gamma - F(S)\\|^2` with :math:`F(S) = K(S, S) W` (intercepts kept);
    * ``refit="feature"``: projection of each machine's normal vector onto span(k(., z)) in the
      RKHS, :math:`K_{ZZ}\\Gamma = K_{ZS} W` (intercepts kept).

    Parameters: ``n_vectors`` (int, or fraction in (0, 1) of the support vectors; each class with
    support vectors keeps at least one vector), ``method``,
    ``refit``, and every :class:`KernelSVC` parameter (``approximation`` excepted).

    Attributes
    ----------
    support_vectors_ : tensor (K, n_features)
    dual_coef_ : ndarray (n_machines, K) raw coefficients (LIBSVM orientation, see ``intercept_``)
    intercept_ : ndarray (n_machines,)
    n_support_original_ : int, support vectors of the exact machine
    classes_, kernel_
    """

    def __init__(self, n_vectors=0.1, *, method="kmeans", refit="decision", C=1.0, kernel="rbf", gamma="scale",
                 degree=3, coef0=0.0, kernel_params=None, tol=1e-3, cache_size=None, shrinking=True,
                 class_weight=None, decision_function_shape="ovr", multiclass="ovo", max_iter=-1,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.n_vectors = n_vectors
        self.method = method
        self.refit = refit
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.tol = tol
        self.cache_size = cache_size
        self.shrinking = shrinking
        self.class_weight = class_weight
        self.decision_function_shape = decision_function_shape
        self.multiclass = multiclass
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    probability = False
    approximation = None
    n_components = 500

    def fit(self, X, y, sample_weight=None):
        """Fit an exact :class:`KernelSVC` on ``(X, y)``, then reduce it to ``n_vectors`` vectors."""
        owner = type(self).__name__
        _check_choice(owner, "method", self.method, ("kmeans", "kernel_kmeans"))
        _check_choice(owner, "refit", self.refit, ("decision", "feature"))
        params = {k: getattr(self, k) for k in KernelSVC._get_param_names() if k in self._get_param_names()}
        svc = KernelSVC(**params).fit(X, y, sample_weight=sample_weight)
        self._reduce_from(svc)
        return self

    def _reduce_from(self, svc: KernelSVC):
        owner = type(self).__name__
        _check_choice(owner, "method", self.method, ("kmeans", "kernel_kmeans"))
        _check_choice(owner, "refit", self.refit, ("decision", "feature"))
        if svc.kernel_.is_precomputed:
            raise ValueError(f"{owner}: a precomputed kernel has no input space to place new support vectors in.")
        if getattr(svc, "approximation_", None) is not None:
            raise ValueError(f"{owner}: reduce() needs an exact KernelSVC (approximation=None).")
        t0 = time.perf_counter()
        for attr in ("classes_", "kernel_", "_mode", "_pairs", "_device", "_dtype", "_budget", "n_features_in_",
                     "shape_fit_", "class_weight_", "n_iter_", "fit_status_"):
            if hasattr(svc, attr):
                setattr(self, attr, getattr(svc, attr))
        if hasattr(svc, "feature_names_in_"):
            self.feature_names_in_ = svc.feature_names_in_
        S, W, b = svc._sv, svc._W, svc._b
        n_sv = S.shape[0]
        self.n_support_original_ = n_sv
        K = _n_target(self.n_vectors, n_sv, owner)
        cls = np.repeat(np.arange(len(svc.classes_)), svc.n_support_)
        Z = self._centres(S, cls, K)
        K = Z.shape[0]  # at least one vector per class with support vectors
        F = S.new_zeros(0)
        if self.refit == "decision":
            KSZ = self.kernel_(S, Z)
            F = self.kernel_(S, S) @ W if n_sv * n_sv * S.element_size() <= self._budget else \
                KernelOperator(self.kernel_, S, memory_budget=self._budget, n_rhs=W.shape[1]).matvec(W)
            # Least squares by QR on the system stacked with a tiny ridge: stable even when K(S, Z)
            # is numerically rank deficient. The intercepts are kept (refitting them too would be
            # underdetermined when K approaches the number of support vectors).
            lam = 1e-10 * float(KSZ.pow(2).sum()) / max(1, KSZ.shape[1])
            A = torch.cat([KSZ, torch.eye(K, dtype=S.dtype, device=S.device) * lam ** 0.5])
            self._W = torch.linalg.lstsq(A, torch.cat([F, F.new_zeros(K, F.shape[1])])).solution
            self._b = b.clone()
        else:
            KZZ = self.kernel_(Z, Z)
            lam = 1e-10 * float(KZZ.diagonal().mean())
            A = torch.cat([KZZ, torch.eye(K, dtype=S.dtype, device=S.device) * lam ** 0.5])
            rhs = self.kernel_(Z, S) @ W
            self._W = torch.linalg.lstsq(A, torch.cat([rhs, rhs.new_zeros(K, rhs.shape[1])])).solution
            self._b = b.clone()
        self._sv = Z
        self.support_vectors_ = Z
        self.n_support_ = np.array([int((self._centre_class == c).sum()) for c in range(len(self.classes_))], dtype=np.int32)
        self.dual_coef_ = to_numpy(self._W.T).copy()
        self.intercept_ = to_numpy(self._b).copy()
        self.reduce_time_ = time.perf_counter() - t0
        self.approximation_ = None
        return self

    def _centres(self, S: torch.Tensor, cls: np.ndarray, K: int) -> torch.Tensor:
        from sklearn.cluster import KMeans

        counts = np.bincount(cls, minlength=len(self.classes_))
        present = np.flatnonzero(counts)
        share = np.maximum(1, np.floor(K * counts[present] / counts.sum()).astype(int))
        while share.sum() > K and share.max() > 1:
            share[share.argmax()] -= 1
        rem = K - share.sum()
        for c in np.argsort(-counts[present])[:max(0, rem)]:
            share[c] += 1
        share = np.minimum(share, counts[present])
        Sn = to_numpy(S).astype(np.float64)
        seed = self.random_state if isinstance(self.random_state, (int, np.integer)) else 0
        centres, owner = [], []
        for c, m in zip(present, share):
            pts = Sn[cls == c]
            if m >= len(pts):
                cen = pts
            else:
                km = KMeans(n_clusters=int(m), n_init=3, random_state=seed).fit(pts)
                cen = km.cluster_centers_
                if self.method == "kernel_kmeans":
                    cen = self._kernel_kmeans(pts, km.labels_, int(m))
            centres.append(cen)
            owner.append(np.full(len(cen), c))
        self._centre_class = np.concatenate(owner)
        return torch.as_tensor(np.concatenate(centres), dtype=S.dtype, device=S.device)

    def _kernel_kmeans(self, pts: np.ndarray, labels: np.ndarray, m: int, n_iter: int = 20) -> np.ndarray:
        n = len(pts)
        if n * n * 8 > self._budget:
            raise MemoryBudgetError(f"{type(self).__name__}: kernel k-means on {n} support vectors of one class needs "
                                    f"the {n} x {n} Gram matrix ({format_bytes(n * n * 8)}), more than the memory budget of "
                                    f"{format_bytes(self._budget)}; use method='kmeans'.")
        P = torch.as_tensor(pts, dtype=torch.float64)
        Kp = to_numpy(self.kernel_(P, P))
        d = np.diag(Kp)
        for _ in range(n_iter):
            H = np.zeros((n, m))
            H[np.arange(n), labels] = 1
            size = np.maximum(H.sum(axis=0), 1)
            KH = Kp @ H / size
            within = np.einsum("ic,ic->c", H, KH) / size
            dist = d[:, None] - 2 * KH + within[None, :]
            dist[:, H.sum(axis=0) == 0] = np.inf
            new = dist.argmin(axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
        medoids = [np.flatnonzero(labels == c)[dist[labels == c, c].argmin()] for c in range(m) if (labels == c).any()]
        return pts[medoids]


# -- budget-trained SVC --------------------------------------------------------------------------
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
        owner = type(self).__name__
        X = self._validate_X(X, reset=True)
        _check_positive(owner, "n_vectors", self.n_vectors, integer=True)
        _check_positive(owner, "C", self.C)
        _check_positive(owner, "max_iter", self.max_iter, integer=True)
        _check_positive(owner, "lr", self.lr)
        _check_choice(owner, "optimizer", self.optimizer, ("lbfgs", "adam"))
        self.classes_, yi = _labels(owner, y, X.shape[0])
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        self._setup_compute(X)
        kernel = self.kernel
        if isinstance(kernel, str) and kernel == "precomputed":
            raise ValueError(f"{owner} learns its support vectors in input space; kernel='precomputed' is not supported.")
        self.kernel_ = KernelSVC._kernel_for(self, X)
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
        Z0 = self._init_centres(Xt, yi)
        Z = Z0.clone().requires_grad_(bool(self.learn_vectors))
        # Whitened weights: W = L^{-T} V with K_ZZ = L L^T, so that the regulariser is |V|^2 / 2 and
        # the problem is as well conditioned as the primal SVM in an orthonormal basis of span k(., z).
        V = torch.zeros(Z.shape[0], Y.shape[1], dtype=self._dtype, device=self._device, requires_grad=True)
        b = torch.zeros(Y.shape[1], dtype=self._dtype, device=self._device, requires_grad=True)
        params = [V, b] + ([Z] if self.learn_vectors else [])
        n = Xt.shape[0]
        rows = max(1, min(n, int(self._budget // (6 * Z.shape[0] * Xt.element_size() + 1))))
        C = float(self.C)
        eye = torch.eye(Z.shape[0], dtype=self._dtype, device=self._device)

        def weights():
            KZZ = self.kernel_(Z, Z)
            jitter = 1e-8 * float(KZZ.diagonal().abs().mean().detach()) + 1e-12
            L = torch.linalg.cholesky(KZZ + jitter * eye)
            return torch.linalg.solve_triangular(L.T, V, upper=True)

        def closure():
            for p in params:
                p.grad = None
            reg = 0.5 * (V * V).sum()
            reg.backward()
            total = float(reg.detach())
            for i in range(0, n, rows):
                F = self.kernel_(Xt[i:i + rows], Z) @ weights() + b
                h = torch.clamp(1 - Yt[i:i + rows] * F, min=0)
                loss = C * (st[i:i + rows, None] * h * h).sum()
                loss.backward()
                total += float(loss.detach())
            return torch.tensor(total, dtype=self._dtype)

        try:
            with _few_threads(Xt.device, n * Z.shape[0] * max(1, Xt.shape[1] // 16)):
                loss, Wt = self._optimise(params, closure, weights)
        except RuntimeError as exc:
            if "grad" in str(exc):
                raise ValueError(f"{owner}: the kernel {self.kernel_!r} is not differentiable with respect to its inputs "
                                 "by autograd; use learn_vectors=False.") from exc
            raise
        self.loss_ = float(loss)
        self._sv = Z.detach()
        self.support_vectors_ = self._sv
        self._W = Wt.detach()
        self._b = b.detach()
        self.dual_coef_ = to_numpy(self._W.T).copy()
        self.intercept_ = to_numpy(self._b).copy()
        self.fit_time_ = time.perf_counter() - t0
        return self

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
        from sklearn.cluster import KMeans

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
            out.append(pts[:m] if m >= len(pts) else KMeans(n_clusters=m, n_init=1, random_state=seed).fit(pts).cluster_centers_)
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
        d = self.decision_function(X)
        d = to_numpy(d) if isinstance(d, torch.Tensor) else d
        idx = (d > 0).astype(np.int64) if d.ndim == 1 else d.argmax(axis=1)
        return _predict_labels(self.classes_, idx, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
