"""The exact kernel support vector classifier, :class:`KernelSVC`.

Soft-margin C-SVM in the dual, :math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha - e^T\\alpha`,
:math:`0 \\le \\alpha_i \\le C_i`, :math:`y^T\\alpha = 0`, :math:`Q_{ij} = y_i y_j k(x_i, x_j)`,
solved by SMO with second-order working-set selection, an LRU kernel-row cache and shrinking
(see :mod:`mercer.models.svm._smo`). The decision function is
:math:`f(x) = \\sum_i \\alpha_i y_i k(x_i, x) - \\rho`. Multiclass: one-vs-one (LIBSVM's layout
of ``dual_coef_``/``intercept_``, so results compare one to one with scikit-learn's ``SVC``) or
one-vs-rest. With ``approximation="nystroem"`` or ``"rff"`` it becomes a linear SVM
(liblinear, through scikit-learn's ``LinearSVC``) on explicit approximate features.
Probabilities: Platt scaling (:mod:`mercer.models.svm._platt`).
"""

from __future__ import annotations

import logging
import time
import warnings
from numbers import Integral

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils import deprecated
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import _ovr_decision_function
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, column_or_1d

from ..._backend import as_output, to_numpy
from ..._sparse import is_sparse
from ..._validation import Interval, Options, check_params
from ...approx import Nystroem, RandomFourierFeatures
from ...kernels import Kernel, Linear
from ...linalg import KernelOperator, NumericalWarning, plan_rows
from .._base import COMPUTE_CONSTRAINTS, KernelEstimatorMixin
from ._common import (AT_LEAST_ONE, CLASS_WEIGHT_CONSTRAINT, POSITIVE, POSITIVE_OR_INF, SVC_KERNEL_CONSTRAINTS,
                      _class_weights, _contains_sigmoid, _few_threads, _labels, _predict_labels, svc_kernel)
from ._platt import _sigmoid_train, class_probabilities
from ._dual import _INLOOP_MAX_FEATURES, _Rows, fit_products, shared_rows, solve_on  # noqa: F401  (tests read them here)
from ._smo import SMOResult

__all__ = ["KernelSVC"]

log = logging.getLogger(__name__)

#: The approximate feature maps and the compute parameters each accepts.
#: scikit-learn 1.9 deprecates SVC's ``probability`` and ``probA_``/``probB_``; mercer follows (same wording).
_PROB_DEPRECATION = ("Attribute `{}` was deprecated in version 1.9 of scikit-learn, as SVC's `probability=True` "
                     "option (mercer's KernelSVC follows): use CalibratedClassifierCV(KernelSVC(), ensemble=False).")
_APPROXIMATIONS = {"nystroem": (Nystroem, ("device", "dtype", "memory_budget")),
                   "rff": (RandomFourierFeatures, ("device", "dtype"))}


# -- kernel rows for the solver ------------------------------------------------------------------
def _smo_threads(device: torch.device):
    """The torch threads of a fit's SMO phase (prediction keeps torch's setting): one, as LIBSVM.

    The loop itself is sequential (numba, one thread). At up to ``_INLOOP_MAX_FEATURES`` features it
    computes the kernel rows too, so a second thread has no work. Above, rows come in blocks of
    at most 64 from torch, and a second thread would split each 64 x n x d product; measured on
    this project's 2-core VM with other processes on the cores (load 9-10), synthetic n = 5,000,
    best of 3, wall (CPU) seconds, float64: d = 784, 1 thread 5.0 (1.2), 2 threads 11.3 (4.1);
    d = 128, 0.82 (0.41) vs 6.3 (2.0) -- each block waits for the second thread's time slice, while
    single-threaded LIBSVM is not slowed. (On an idle machine the second thread could save at
    most the kernel-block part of a d = 784 fit; not measured here.)
    """
    return _few_threads(device, 0)


# -- shared decision machinery ---------------------------------------------------------------------
class _SVCDecisionMixin:
    """Decision values from ``_sv`` (support vectors, or column indices for precomputed kernels),
    ``_W`` raw coefficients, (n_vectors, n_machines) or, one-vs-one with more than two classes, the compact
    (n_vectors, n_classes - 1) of ``_compact_ovo``, and ``_b`` (n_machines,) raw intercepts.

    Raw orientation is LIBSVM's: for one-vs-one machine (i, j), a positive value votes for class i;
    for one-vs-rest machine c, a positive value means class c.
    """

    _saved_private = ("_sv", "_W", "_b", "_mode", "_pairs")  # private state that mercer.io saves
    #: The scikit-learn class this one replaces, named in the messages users search for.
    _drop_in_for = "SVC"

    def _check_fitted(self) -> None:
        check_is_fitted(self, "classes_", msg=(
            f"This %(name)s instance (mercer's drop-in for scikit-learn's {self._drop_in_for}) is not fitted yet. "
            "Call 'fit' with appropriate arguments before using this estimator."))

    def _raw_decision(self, X):
        owner = type(self).__name__
        if sp.issparse(X) and not getattr(self, "_sparse", True):
            raise ValueError(f"cannot use sparse input in {owner!r} trained on dense data (as scikit-learn's "
                             f"{self._drop_in_for}); fit it on sparse data, or pass X.toarray().")
        n_sv = int(self._W.shape[0])
        if int(np.sum(self.n_support_)) != n_sv:  # scikit-learn's guard (CVE-2020-28975), message first
            raise ValueError(f"The internal representation of {self._drop_in_for} was altered: this {owner}'s "
                             f"n_support_ {np.asarray(self.n_support_).tolist()} does not sum to its {n_sv} "
                             "support vectors.")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        with _few_threads(Xt.device, Xt.shape[0] * max(1, self._W.shape[0]) * max(1, Xt.shape[1] // 16)):
            return self._raw_decision_t(Xt)

    def _compact_ovo(self) -> bool:
        """Whether ``_W`` holds one-vs-one coefficients in LIBSVM's compact layout, (n_SV, n_classes - 1):
        the support vectors grouped by class, a vector of class c holding its coefficient against class o
        in column ``o - (o > c)`` (``dual_coef_`` transposed). A dense (n_SV, n_machines) ``_W`` is
        n_classes / 2 times larger (83 MiB for 42 classes and 11,154 vectors; 4 MiB compact); models saved
        with it still load. Two classes: both layouts are the same column."""
        k = len(getattr(self, "classes_", ()))  # regressors and OneClassSVM: no classes, one machine
        return getattr(self, "_mode", None) == "ovo" and k > 2 and self._W.shape[1] == k - 1

    def _machine_W(self) -> torch.Tensor:
        """``_W`` as (n_vectors, n_machines) raw coefficients, expanded from the compact layout."""
        if not self._compact_ovo():
            return self._W
        return torch.as_tensor(self._machine_coefs(to_numpy(self._W).T), dtype=self._W.dtype, device=self._W.device)

    def _compact_decision(self, Xt, W):
        """Raw one-vs-one decisions from compact coefficients: per class c, the products of its support
        vectors' kernel columns with their k - 1 coefficients, added to the k - 1 machines that involve c."""
        k = len(self.classes_)
        out = torch.zeros(Xt.shape[0], len(self._pairs), dtype=Xt.dtype, device=Xt.device)
        machine = {pair: p for p, pair in enumerate(self._pairs)}
        bounds = np.concatenate([[0], np.cumsum(self.n_support_)]).astype(np.int64)
        for c in range(k):
            a, b = int(bounds[c]), int(bounds[c + 1])
            if a == b:
                continue
            if self.kernel_.is_precomputed:
                P = Xt[:, self._sv[a:b]] @ W[a:b]
            else:
                op = KernelOperator(self.kernel_, Xt, self._sv[a:b].to(Xt.dtype), memory_budget=self._budget, n_rhs=k - 1)
                P = op.matvec(W[a:b])
            others = [o for o in range(k) if o != c]
            cols = torch.as_tensor([o - (o > c) for o in others], device=Xt.device)
            machines = torch.as_tensor([machine[(min(c, o), max(c, o))] for o in others], device=Xt.device)
            out[:, machines] += P[:, cols]
        return out

    def _raw_decision_t(self, Xt):
        W = self._W.to(dtype=Xt.dtype)
        if W.shape[0] and self._compact_ovo():
            out = self._compact_decision(Xt, W)
        elif self.kernel_.is_precomputed:
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
        self._check_fitted()
        if getattr(self, "approximation_", None) is not None:
            out = self.linear_svc_.decision_function(self._features(X))
            return torch.as_tensor(out, device=X.device) if isinstance(X, torch.Tensor) else out
        return as_output(self._public_decision(self._raw_decision(X)), X)

    def predict(self, X):
        """Class labels (one-vs-one: majority vote of the pairwise machines, ties to the lowest class,
        or to the largest ``decision_function`` with ``break_ties=True``, as scikit-learn)."""
        self._check_fitted()
        if getattr(self, "approximation_", None) is not None:
            return _predict_labels(self.classes_, np.searchsorted(self.classes_, self.linear_svc_.predict(self._features(X))), X)
        ties = getattr(self, "break_ties", False)
        if ties and self.decision_function_shape == "ovo":
            raise ValueError(f"{type(self).__name__}: break_ties must be False when decision_function_shape is 'ovo'.")
        raw = self._raw_decision(X)
        if ties and len(self.classes_) > 2 and self._mode == "ovo":
            return _predict_labels(self.classes_, to_numpy(self._public_decision(raw)).argmax(axis=1), X)
        return _predict_labels(self.classes_, self._predict_index(raw), X)

    @property
    def coef_(self) -> np.ndarray:
        """Primal weights of a linear-kernel machine, read-only, as scikit-learn's SVC: shape
        (1, n_features) for two classes, (n_classes (n_classes - 1) / 2, n_features) one-vs-one
        (rows in ``intercept_``'s order), (n_classes, n_features) one-vs-rest; ``decision_function``
        is ``X @ coef_.T + intercept_``. AttributeError for other kernels."""
        check_is_fitted(self, "classes_")
        kern = getattr(self, "kernel_", None)
        if type(kern) is not Linear or getattr(self, "approximation_", None) is not None:
            raise AttributeError(f"coef_ is only available when using a linear kernel (exact {type(self).__name__} "
                                 f"with kernel='linear'); got kernel={self.kernel!r}.")
        sv, W = self._sv.to(self._W.dtype), self._machine_W()
        coef = to_numpy(sv.t_matmul(W).T if is_sparse(sv) else W.T @ sv).astype(np.float64)
        if len(self.classes_) == 2 and self._mode == "ovo":
            coef = -coef
        coef.flags.writeable = False
        return coef

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # as scikit-learn's SVC: a precomputed Gram must be dense
        tags.input_tags.sparse = not (isinstance(self.kernel, str) and self.kernel == "precomputed")
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags


def _probability_rng(random_state) -> np.random.RandomState:
    """The generator of the probability cross-validation folds (LIBSVM draws them with rand())."""
    if isinstance(random_state, np.random.RandomState):
        return random_state
    return np.random.RandomState(random_state if isinstance(random_state, (int, np.integer)) else None)


def _available_if_proba(est):
    return bool(getattr(est, "probability", False))


# -- KernelSVC -------------------------------------------------------------------------------------
class KernelSVC(_SVCDecisionMixin, KernelEstimatorMixin, ClassifierMixin, BaseEstimator):
    """C-support vector classifier with any mercer kernel, solved exactly by SMO (as LIBSVM).

    Parameters
    ----------
    C : float > 0 or inf, default=1.0
        Box constraint; per sample ``C_i = C * class_weight[y_i] * sample_weight_i``. ``C=np.inf``
        is the hard margin (no upper bound on the multipliers, as scikit-learn's SVC): it needs
        data separable in the kernel's feature space (any RBF Gram of distinct points is),
        otherwise SMO stops at ``max_iter`` with a ConvergenceWarning.
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
        budget, at most the whole matrix. On a miss, the RBF kernel at up to 64 features (on the
        CPU) computes the missing row inside the solver's loop; other kernels compute the missing
        row and up to 63 of the current top violators in one kernel block.
    shrinking : bool, default=True
    class_weight : dict, "balanced" or None
    decision_function_shape : {"ovr", "ovo"}, default="ovr"
        Shape of ``decision_function`` for one-vs-one multiclass, as scikit-learn.
    break_ties : bool, default=False
        One-vs-one multiclass with ``decision_function_shape="ovr"``: predict the class of largest
        ``decision_function`` instead of the majority vote (whose ties go to the lowest class), as
        scikit-learn; an error with ``decision_function_shape="ovo"``.
    multiclass : {"ovo", "ovr"}, default="ovo"
        One-vs-one machines (LIBSVM) or one machine per class against the rest.
    probability : bool, default=False
        Fit Platt sigmoids on 5-fold cross-validated decision values (as LIBSVM) for
        ``predict_proba``; one-vs-one probabilities are coupled (Wu, Lin & Weng 2004), one-vs-rest
        ones normalised to sum to one. Deprecated as scikit-learn 1.9 deprecates SVC's (a FutureWarning
        when True): ``CalibratedClassifierCV(KernelSVC(), ensemble=False)`` is the replacement.
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
    probA_, probB_ : ndarray (n_machines,) Platt parameters (``probability=True``); reading them
        gives scikit-learn 1.9's FutureWarning
    _gamma, _dual_coef_, _n_support : scikit-learn SVC's private attributes, as its tests use them:
        the numeric gamma; LIBSVM-oriented dual coefficients (assigning them changes the model);
        ``n_support_`` itself (altering it makes prediction raise)
    n_iter_ : ndarray (n_machines,) SMO iterations
    fit_status_ : int, 0 when every machine converged
    coef_ : ndarray (n_machines, n_features), read-only; linear kernel only (a property, as scikit-learn)
    kernel_, fit_time_
    approximation_, linear_svc_ : the feature map and linear SVM (``approximation`` only)
    """

    _saved_private = ("_gamma", "_sparse", "_probA", "_probB")  # adds to the mixin's
    #: Files written before probA_/probB_ became deprecated properties (mercer.io).
    _renamed_state = {"probA_": "_probA", "probB_": "_probB"}
    #: ``dual_coef_`` in LIBSVM's layout, so scikit-learn's private ``_dual_coef_`` is available.
    _libsvm_dual_layout = True

    #: Whether the machines' duals start from a feasible point other than 0 (nu-SVC: NuSVC), whose
    #: rows the start reads through the blocked products (see _dual.fit_products).
    _STARTS = False

    _parameter_constraints: dict = {
        **SVC_KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "C": [POSITIVE_OR_INF],
        "tol": [POSITIVE],
        "cache_size": [POSITIVE, None],
        "shrinking": ["boolean"],
        "class_weight": CLASS_WEIGHT_CONSTRAINT,
        "decision_function_shape": [Options("ovr", "ovo")],
        "break_ties": ["boolean"],
        "multiclass": [Options("ovo", "ovr")],
        "probability": ["boolean"],
        "max_iter": [AT_LEAST_ONE, Interval(Integral, -1, -1)],
        "approximation": [Options(*_APPROXIMATIONS), None],
        "n_components": [AT_LEAST_ONE],
        "random_state": ["random_state"],
    }

    def __init__(self, C=1.0, *, kernel="rbf", gamma="scale", degree=3, coef0=0.0, kernel_params=None,
                 tol=1e-3, cache_size=None, shrinking=True, class_weight=None, decision_function_shape="ovr",
                 break_ties=False, multiclass="ovo", probability=False, max_iter=-1, approximation=None, n_components=500,
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
        self.break_ties = break_ties
        self.multiclass = multiclass
        self.probability = probability
        self.max_iter = max_iter
        self.approximation = approximation
        self.n_components = n_components
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit ---------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) — or the (n, n) Gram matrix for ``kernel="precomputed"`` — and labels ``y``.

        ``sample_weight`` scales each sample's ``C_i``; as in scikit-learn (LIBSVM), samples of zero
        or negative weight are left out, and an error is raised when no sample, or only one class,
        keeps a positive weight.
        """
        check_params(self)
        owner = type(self).__name__
        if sp.issparse(X) and isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise TypeError(f"{owner}: Sparse precomputed kernels are not supported (as scikit-learn's "
                            f"{self._drop_in_for}); pass the Gram matrix as a dense array (K.toarray()).")
        if self.probability:
            warnings.warn(f"{owner}: the `probability` parameter was deprecated in scikit-learn 1.9 (SVC's, removed "
                          f"in its 1.11; mercer follows): use CalibratedClassifierCV({owner}(), ensemble=False) instead "
                          f"of {owner}(probability=True).", FutureWarning, stacklevel=2)
        X = self._validate_X(X, reset=True)
        self._sparse = sp.issparse(X)  # as scikit-learn's SVC: sparse X at predict needs a sparse fit
        self.classes_, yi = _labels(owner, y, X.shape[0])
        sw = self._svc_sample_weight(sample_weight, X.shape[0])
        self._setup_compute(X)
        self.kernel_ = svc_kernel(self, X)
        Cb = self._box_constraints(X, yi, sw)
        t0 = time.perf_counter()
        if self.approximation is not None:
            self._fit_approx(X, y, sw)
            self.fit_time_ = time.perf_counter() - t0
            return self
        self._fit_exact(X, yi, Cb)
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: %d machine(s) on n=%d in %.2f s, %d support vectors", type(self).__name__, len(self._b),
                 X.shape[0], self.fit_time_, len(self.support_))
        return self

    def _svc_sample_weight(self, sample_weight, n: int):
        """scikit-learn's SVC weights: any finite reals (those <= 0 drop their sample), not all <= 0."""
        if sample_weight is None:
            return None
        if isinstance(sample_weight, torch.Tensor):
            sample_weight = to_numpy(sample_weight)
        sw = _check_sample_weight(sample_weight, np.empty((n, 0)), dtype=np.float64, allow_all_zero_weights=True)
        if not (sw > 0).any():
            raise ValueError(f"{type(self).__name__}: Invalid input - all samples have zero or negative weights.")
        return sw

    def _box_constraints(self, X, yi, sw) -> np.ndarray:
        """``C_i = C * class_weight[y_i] * sample_weight_i``, 0 where the weight is <= 0 (also for
        ``C=inf``: no ``inf * 0``); sets ``class_weight_``."""
        owner = type(self).__name__
        if self.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
            raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
        if sw is not None and len(np.unique(yi[sw > 0])) < 2:
            raise ValueError(f"{owner}: Invalid input - all samples with positive weights belong to the same class "
                             "(samples of zero or negative sample_weight are left out); need at least 2 classes.")
        self.class_weight_ = _class_weights(owner, self.class_weight, self.classes_, yi)
        weight = self.class_weight_[yi] * (1.0 if sw is None else sw)
        empty = [c for c in range(len(self.classes_)) if not (weight[yi == c] > 0).any()]
        if empty:
            warnings.warn(f"{owner}: class(es) {self.classes_[empty].tolist()} have no sample with a positive weight "
                          "(sample_weight * class_weight); they are never predicted.", UserWarning, stacklevel=3)
        return np.where(weight > 0, float(self.C) * np.maximum(weight, 0.0), 0.0)

    def _fit_exact(self, X, yi, Cb) -> None:
        self.approximation_ = None
        if _contains_sigmoid(self.kernel_):
            warnings.warn(f"{type(self).__name__}: the sigmoid kernel is not positive semi-definite in general; the "
                          "dual may be non-convex (SMO still terminates, with LIBSVM's curvature fix).",
                          NumericalWarning, stacklevel=3)
        # sparse X lends its arrays (no second copy of the data): the fit never writes them, and the model
        # keeps copies of the support vectors' rows (Xt[order]), never a view of Xt
        Xt = self._tensor(X, share_sparse=True)
        self.shape_fit_ = tuple(X.shape)
        with _smo_threads(Xt.device):
            self._fit_machines(Xt, yi, Cb)

    def _solve(self, Xt, idx, ybin, Cb):
        """One binary machine on samples ``idx`` (labels ``ybin`` = +-1); returns the SMOResult."""
        keep = Cb > 0
        idx, ybin, Cb = idx[keep], ybin[keep], Cb[keep]
        n = len(idx)
        if (ybin > 0).all() or (ybin < 0).all():  # one side has no weight: a constant +-1 machine
            return SMOResult(np.zeros(n), -1.0 if n and ybin[0] > 0 else 1.0, 0.0, 0, True, 0, 0, index=idx)
        return self._solve_dual(Xt, idx, ybin, Cb)

    def _solve_dual(self, Xt, idx, ybin, Cb):
        """The C-SVC dual of a two-sided machine (NuSVC solves its nu dual here instead)."""
        return solve_on(self, Xt, idx, ybin, Cb)

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
        """Solve every binary machine (and its Platt sigmoid); store the model."""
        owner = type(self).__name__
        machines = self._machines(yi)
        k = len(self.classes_)
        compact = self._mode == "ovo" and k > 2  # see _compact_ovo
        # The model's coefficients, written as each machine is solved (no per-machine copies kept):
        # one row per sample, in LIBSVM's order of support vectors (grouped by class), one column per
        # other class in the compact one-vs-one layout (a sample's k - 1 machines write distinct
        # columns), else one per machine. The support vectors' rows are kept at the end, in place.
        order = np.concatenate([np.flatnonzero(yi == c) for c in range(k)])
        row = np.empty(len(yi), dtype=np.int64)
        row[order] = np.arange(len(order))
        W = np.zeros((len(yi), k - 1 if compact else len(machines)))
        is_sv = np.zeros(len(yi), dtype=bool)
        rhos, iters, probs, nonpsd, finite = [], [], [], 0, True
        self.fit_status_ = 0
        gen = _probability_rng(self.random_state)
        # a sample's kernel rows, computed once for all its machines (None: each machine computes its own)
        try:
            # before the store: it gathers them too
            self._f32_products = fit_products(self, Xt, starts=self._STARTS)
            self._shared_rows = shared_rows(self, Xt, yi, len(machines))
            for p, (pos, neg) in enumerate(machines):
                # LIBSVM orders a pair's samples by class: all of class i, then all of class j.
                idx = (np.concatenate([np.flatnonzero(yi == c) for c in pos + neg]) if self._mode == "ovo"
                       else np.arange(len(yi)))
                idx = idx[Cb[idx] > 0]  # samples of weight <= 0 are left out, of the SMO and the Platt folds (LIBSVM)
                ybin = np.where(np.isin(yi[idx], pos), 1.0, -1.0)
                res = self._solve(Xt, idx, ybin, Cb[idx])
                keep = np.flatnonzero(res.alpha)
                at = np.asarray(res.index)[keep]
                a = res.alpha[keep] * np.where(np.isin(yi[at], pos), 1.0, -1.0)
                finite = finite and bool(np.isfinite(a).all())
                is_sv[at] = True
                W[row[at], np.where(yi[at] == pos[0], neg[0] - 1, pos[0]) if compact else p] = a
                rhos.append(res.rho)
                iters.append(res.n_iter)
                nonpsd += res.nonpsd_steps
                if not res.converged:
                    self.fit_status_ = 1
                    # scikit-learn's wording first (users search for it), then what it means here
                    warnings.warn(f"{owner}: Solver terminated early (max_iter={res.n_iter}).  Consider pre-processing "
                                  "your data with StandardScaler or MinMaxScaler. (SMO stopped before reaching "
                                  f"tol={self.tol}; the solution may be inaccurate.)", ConvergenceWarning, stacklevel=4)
                if self.probability:
                    probs.append(self._platt(Xt, idx, ybin, Cb[idx], gen))
        finally:
            for scratch in ("_f32_products", "_shared_rows"):  # the fit's, not the model's
                self.__dict__.pop(scratch, None)
        if nonpsd:
            warnings.warn(f"{owner}: the kernel matrix is not positive semi-definite on the training "
                          f"data ({nonpsd} SMO steps met negative curvature and used LIBSVM's tau fix).",
                          NumericalWarning, stacklevel=4)
        self.n_iter_ = np.asarray(iters, dtype=np.int32)
        intercept = -np.asarray(rhos, dtype=np.float64)
        if not (finite and np.isfinite(intercept).all()):
            raise ValueError(f"{owner}: The dual coefficients or intercepts are not finite. The input data may "
                             "contain large values and need to be preprocessed.")
        self._store_machines(Xt, yi, W, is_sv, order, intercept)
        self._probA = np.array([p[0] for p in probs]) if self.probability else np.empty(0)
        self._probB = np.array([p[1] for p in probs]) if self.probability else np.empty(0)

    def _store_machines(self, Xt, yi, W, is_sv, order, intercept):
        """The model from ``W`` (coefficients ``alpha_i y_i`` of every sample, its rows in ``order``: the
        samples grouped by class), ``is_sv`` (samples with a non-zero coefficient) and the raw intercepts."""
        k = len(self.classes_)
        keep = np.flatnonzero(is_sv[order])  # rows of W to keep, increasing: keep[r] >= r
        step = plan_rows(len(keep), W.shape[1] * W.itemsize, budget=self._budget,
                         what="moving the support vectors' coefficients")
        for a in range(0, len(keep), step):  # moved forward in place; a block's sources lie at or after it
            src = keep[a:a + step]
            W[a:a + len(src)] = W[src]
        W.resize((len(keep), W.shape[1]), refcheck=False)  # the buffer shrinks to the support vectors' rows
        order = order[keep]
        self.support_ = order.astype(np.int32)
        self.n_support_ = np.bincount(yi[order], minlength=k).astype(np.int32)
        self._b = torch.as_tensor(intercept, dtype=self._dtype, device=self._device)
        self._W = torch.as_tensor(W, dtype=self._dtype, device=self._device)
        if self.kernel_.is_precomputed:
            self._sv = torch.as_tensor(order, device=self._device)
            self.support_vectors_ = torch.zeros(0, 0, dtype=self._dtype, device=self._device)
        else:
            self._sv = Xt[torch.as_tensor(order, device=Xt.device)]
            # sparse data: sparse support vectors (scikit-learn's SVC: a CSR matrix) holding _sv's values
            self.support_vectors_ = self._sv.to_scipy(share_data=True) if is_sparse(self._sv) else self._sv
        self.intercept_ = -intercept if k == 2 and self._mode == "ovo" else intercept.copy()
        # One array of coefficients where the layouts agree (a compact one-vs-one W, float64 on the CPU):
        # dual_coef_ is W's transpose, not a copy of it (as scikit-learn's SVC, whose multi-class
        # dual_coef_ is the array it predicts with), so that the model holds its coefficients once.
        self.dual_coef_ = self._public_dual(self._dual_layout(W, copy=False))

    # -- scikit-learn's layout of the dual coefficients ------------------------------------------
    def _sv_classes(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.classes_)), self.n_support_)

    def _dual_layout(self, W: np.ndarray, *, copy: bool = True) -> np.ndarray:
        """Raw coefficients ``W`` (n_SV, n_machines) in LIBSVM's layout: one-vs-one (n_classes - 1,
        n_SV), row j - 1 holding class i's coefficients in machine (i, j) and row i class j's;
        one-vs-rest (n_classes, n_SV). A compact ``W`` (see ``_compact_ovo``) is that layout transposed
        (``copy=False``: the transpose itself, a view of ``W``, where ``W`` is float64 and the model
        holds it as it is, ``_W`` sharing its memory)."""
        if self._mode != "ovo" or (len(self.classes_) > 2 and W.shape[1] == len(self.classes_) - 1):
            shared = (not copy and W.dtype == np.float64 and isinstance(getattr(self, "_W", None), torch.Tensor)
                      and self._W.device.type == "cpu" and self._W.data_ptr() == W.ctypes.data)
            return W.T if shared else W.T.copy()
        cls = self._sv_classes()
        dual = np.zeros((len(self.classes_) - 1, len(cls)))
        for p, (i, j) in enumerate(self._pairs):
            dual[j - 1, cls == i] = W[cls == i, p]
            dual[i, cls == j] = W[cls == j, p]
        return dual

    def _machine_coefs(self, dual: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`_dual_layout`: (n_SV, n_machines) raw coefficients."""
        if self._mode != "ovo":
            return dual.T.copy()
        cls = self._sv_classes()
        W = np.zeros((len(cls), len(self._pairs)))
        for p, (i, j) in enumerate(self._pairs):
            W[cls == i, p] = dual[j - 1, cls == i]
            W[cls == j, p] = dual[i, cls == j]
        return W

    def _public_dual(self, dual: np.ndarray) -> np.ndarray:
        """``dual_coef_`` from LIBSVM's layout: the sign flipped for two classes (one-vs-one), as SVC."""
        return -dual if len(self.classes_) == 2 and self._mode == "ovo" else dual

    @property
    def _dual_coef_(self) -> np.ndarray:
        """scikit-learn SVC's private dual coefficients: ``dual_coef_`` in LIBSVM's orientation (its
        sign flipped for two classes). Assigning an array of the same shape changes the model, as in
        scikit-learn: ``predict``, ``decision_function``, ``dual_coef_`` and ``coef_`` follow it
        (assign a whole array: writing into the returned copy changes nothing)."""
        self._check_fitted()
        if not self._libsvm_dual_layout:
            raise AttributeError(f"{type(self).__name__} has no _dual_coef_ (its dual_coef_ is not in LIBSVM's layout).")
        if getattr(self, "approximation_", None) is not None:
            raise AttributeError(f"_dual_coef_ is only available for the exact {type(self).__name__} "
                                 f"(approximation=None); got approximation={self.approximation!r}.")
        return self._dual_layout(to_numpy(self._W).astype(np.float64))

    @_dual_coef_.setter
    def _dual_coef_(self, value) -> None:
        current = self._dual_coef_
        dual = np.asarray(value, dtype=np.float64)
        if dual.shape != current.shape or not np.isfinite(dual).all():
            raise ValueError(f"{type(self).__name__}: _dual_coef_ must be a finite array of shape {current.shape} "
                             f"(LIBSVM's layout); got shape {dual.shape}.")
        W = dual.T.copy() if self._compact_ovo() else self._machine_coefs(dual)
        self._W = torch.as_tensor(W, dtype=self._dtype, device=self._device)
        self.dual_coef_ = self._public_dual(dual.copy())

    @property
    def _n_support(self) -> np.ndarray:
        """scikit-learn SVC's private support-vector counts: the ``n_support_`` array itself (a change
        made in place makes prediction raise, as scikit-learn)."""
        return self.n_support_

    def _get_probA(self) -> np.ndarray:
        return self._probA

    def _get_probB(self) -> np.ndarray:
        return self._probB

    probA_ = property(deprecated(_PROB_DEPRECATION.format("probA_"))(_get_probA),
                      doc="Platt sigmoid slopes, one per machine (``probability=True``; empty otherwise). Deprecated.")
    probB_ = property(deprecated(_PROB_DEPRECATION.format("probB_"))(_get_probB),
                      doc="Platt sigmoid offsets, one per machine (``probability=True``; empty otherwise). Deprecated.")

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
        owner = type(self).__name__
        if self.probability:
            raise ValueError(f"The 'probability' parameter of {owner} must be False with "
                             f"approximation={self.approximation!r}. Got True instead.")
        from sklearn.svm import LinearSVC  # on use: sklearn.svm adds ~30 ms to `import mercer`

        cls, compute = _APPROXIMATIONS[self.approximation]
        self.approximation_ = cls(kernel=self.kernel_, n_components=self.n_components, random_state=self.random_state,
                                  **{k: getattr(self, k) for k in compute})
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
    # predict_proba only exists when probability=True (scikit-learn's convention, checked by the estimator checks)
    @available_if(_available_if_proba)
    def predict_proba(self, X):
        """Class probabilities (n, n_classes) from Platt-scaled decision values (``probability=True``)."""
        self._check_fitted()
        if not self.probability or getattr(self, "approximation_", None) is not None:
            raise AttributeError("predict_proba is only available when probability=True (exact SVC).")
        if np.size(getattr(self, "_probA", ())) == 0:
            raise NotFittedError(f"predict_proba is not available when fitted with probability=False: this "
                                 f"{type(self).__name__} was fitted with probability=False; fit it again with "
                                 "probability=True.")
        raw = to_numpy(self._raw_decision(X))
        k = len(self.classes_)
        out = class_probabilities(raw, self._probA, self._probB, self._pairs, k, one_vs_rest=self._mode == "ovr" and k > 2)
        return torch.as_tensor(out, device=X.device) if isinstance(X, torch.Tensor) else out

    @available_if(_available_if_proba)
    def predict_log_proba(self, X):
        p = self.predict_proba(X)
        return torch.log(p) if isinstance(p, torch.Tensor) else np.log(p)
