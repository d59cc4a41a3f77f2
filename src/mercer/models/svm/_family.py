"""The rest of scikit-learn's ``sklearn.svm`` on mercer's SMO: :class:`KernelSVR` (epsilon-insensitive
regression), :class:`NuSVR`, :class:`NuSVC` and :class:`OneClassSVM` (novelty detection).

Each solves LIBSVM's dual of its formulation (see :mod:`mercer.models.svm._dual`) with LIBSVM's
starting point, working-set selection, shrinking and stopping rule, so that support sets and
decision values compare one to one with scikit-learn's classes:

- epsilon-SVR: :math:`\\min \\tfrac12 (\\alpha - \\alpha^*)^T K (\\alpha - \\alpha^*) + \\epsilon
  \\sum_i (\\alpha_i + \\alpha_i^*) - \\sum_i y_i (\\alpha_i - \\alpha_i^*)`, :math:`\\sum_i (\\alpha_i -
  \\alpha_i^*) = 0`, :math:`0 \\le \\alpha_i, \\alpha_i^* \\le C_i`; ``2n`` variables reading ``n``
  kernel rows; :math:`f(x) = \\sum_i (\\alpha_i - \\alpha_i^*) k(x_i, x) - \\rho`.
- nu-SVR: the same without the ``epsilon`` term and with :math:`\\sum_i (\\alpha_i + \\alpha_i^*) =
  C \\nu \\sum_i w_i` (LIBSVM's Solver_NU; the tube width ``epsilon`` comes out of the solution).
- nu-SVC (per pair of classes): :math:`\\min \\tfrac12 \\alpha^T Q \\alpha`, :math:`y^T \\alpha = 0`,
  :math:`e^T \\alpha = \\nu \\sum_i w_i`, :math:`0 \\le \\alpha_i \\le w_i`, the solution scaled by ``1 / r``
  as LIBSVM's.
- one-class: :math:`\\min \\tfrac12 \\alpha^T K \\alpha`, :math:`e^T \\alpha = \\nu \\sum_i w_i`,
  :math:`0 \\le \\alpha_i \\le w_i`; :math:`f(x) = \\sum_i \\alpha_i k(x_i, x) - \\rho`.
"""

from __future__ import annotations

import logging
import time
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, OutlierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..._backend import as_output, to_numpy
from ..._sparse import is_sparse
from ..._validation import Interval, Options, check_params
from ...kernels import Linear
from ...linalg import NumericalWarning
from .._base import COMPUTE_CONSTRAINTS, KernelEstimatorMixin
from ._common import (AT_LEAST_ONE, CLASS_WEIGHT_CONSTRAINT, POSITIVE, POSITIVE_OR_INF, SVC_KERNEL_CONSTRAINTS,
                      _contains_sigmoid, svc_kernel)
from ._dual import solve_on
from ._smo import SMOResult
from ._svc import KernelSVC, _smo_threads, _SVCDecisionMixin

__all__ = ["KernelSVR", "NuSVC", "NuSVR", "OneClassSVM"]

log = logging.getLogger(__name__)

#: nu in (0, 1], as scikit-learn's NuSVC, NuSVR and OneClassSVM.
NU = Interval(Real, 0, 1, closed="right")
#: epsilon >= 0 (SVR's tube half-width).
NON_NEGATIVE = Interval(Real, 0, None, closed="left")
_MAX_ITER = [AT_LEAST_ONE, Interval(Integral, -1, -1)]


def _fill(total: float, caps: np.ndarray) -> np.ndarray:
    """LIBSVM's starting point of the nu duals: ``caps`` filled in order until ``total`` is spent
    (``alpha_i = min(caps_i, what is left)``, as its loop, so the same variables start nonzero)."""
    out = np.zeros(len(caps))
    left = float(total)
    for i, c in enumerate(caps.tolist()):
        if left <= 0:
            break
        out[i] = min(c, left)
        left -= out[i]
    return out


def _warn_not_converged(owner: str, res: SMOResult, tol: float) -> None:
    # scikit-learn's wording first (users search for it), then what it means here
    warnings.warn(f"{owner}: Solver terminated early (max_iter={res.n_iter}).  Consider pre-processing your data "
                  f"with StandardScaler or MinMaxScaler. (SMO stopped before reaching tol={tol}; the solution may "
                  "be inaccurate.)", ConvergenceWarning, stacklevel=4)


# -- one machine: SVR, NuSVR, OneClassSVM -------------------------------------------------------------
class _OneMachine(_SVCDecisionMixin, KernelEstimatorMixin, BaseEstimator):
    """A single kernel machine ``f(x) = sum_i dual_coef_i k(sv_i, x) + intercept_`` from one SMO solve."""

    _saved_private = ("_gamma", "_sparse")  # adds to the mixin's _sv, _W, _b

    _COMMON_CONSTRAINTS: dict = {
        **SVC_KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "tol": [POSITIVE],
        "cache_size": [POSITIVE, None],
        "shrinking": ["boolean"],
        "max_iter": _MAX_ITER,
    }

    def _check_fitted(self) -> None:
        check_is_fitted(self, "support_", msg=(
            f"This %(name)s instance (mercer's drop-in for scikit-learn's {self._drop_in_for}) is not fitted yet. "
            "Call 'fit' with appropriate arguments before using this estimator."))

    def _variables(self, y, w):
        """The dual of this formulation on the samples of weight ``w > 0`` (targets ``y``): signs,
        bounds, linear term, start, ``pairs``, ``nu``."""
        raise NotImplementedError

    def _fit_machine(self, X, y, sample_weight, *, supervised: bool):
        check_params(self)
        owner = type(self).__name__
        if sp.issparse(X) and isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise TypeError(f"{owner}: Sparse precomputed kernels are not supported (as scikit-learn's "
                            f"{self._drop_in_for}); pass the Gram matrix as a dense array (K.toarray()).")
        X = self._validate_X(X, reset=True)
        self._sparse = sp.issparse(X)
        n = X.shape[0]
        if supervised:
            y = self._validate_y(y, n, multi_output=True)
            if y.ndim == 2 and y.shape[1] == 1:
                y = column_or_1d(y, warn=True)  # scikit-learn's DataConversionWarning for a column vector
            elif y.ndim == 2:
                raise ValueError(f"{owner} expects a 1-D target y (one output); got y of shape {y.shape}.")
        sw = KernelSVC._svc_sample_weight(self, sample_weight, n)
        self._setup_compute(X)
        self.kernel_ = svc_kernel(self, X)
        if self.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
            raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
        if _contains_sigmoid(self.kernel_):
            warnings.warn(f"{owner}: the sigmoid kernel is not positive semi-definite in general; the dual may be "
                          "non-convex (SMO still terminates, with LIBSVM's curvature fix).", NumericalWarning,
                          stacklevel=3)
        t0 = time.perf_counter()
        w = np.ones(n) if sw is None else sw
        idx = np.flatnonzero(w > 0)  # samples of weight <= 0 are left out, as LIBSVM
        yy, Cb, p, alpha0, pairs, nu = self._variables(None if y is None else y[idx], w[idx])
        Xt = self._tensor(X)
        self.shape_fit_ = tuple(X.shape)
        with _smo_threads(Xt.device):
            res = solve_on(self, Xt, idx, yy, Cb, p=p, alpha0=alpha0, pairs=pairs, nu=nu)
        m = len(idx)
        coef = res.alpha[:m] - res.alpha[m:] if pairs else res.alpha * yy
        self._store(Xt, idx, coef, res)
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: n=%d in %.2f s, %d support vectors, %d iterations", owner, n, self.fit_time_,
                 len(self.support_), res.n_iter)
        return self

    def _store(self, Xt, idx, coef, res: SMOResult) -> None:
        owner = type(self).__name__
        self.fit_status_ = 0 if res.converged else 1
        if not res.converged:
            _warn_not_converged(owner, res, self.tol)
        if res.nonpsd_steps:
            warnings.warn(f"{owner}: the kernel matrix is not positive semi-definite on the training data "
                          f"({res.nonpsd_steps} SMO steps met negative curvature and used LIBSVM's tau fix).",
                          NumericalWarning, stacklevel=4)
        if not (np.isfinite(coef).all() and np.isfinite(res.rho)):
            raise ValueError(f"{owner}: The dual coefficients or intercepts are not finite. The input data may "
                             "contain large values and need to be preprocessed.")
        nz = coef != 0
        order = idx[nz]
        self.support_ = order.astype(np.int32)
        self.n_support_ = np.array([len(order)], dtype=np.int32)
        self.n_iter_ = int(res.n_iter)
        dual = coef[nz][None, :].astype(np.float64)
        self.intercept_ = np.array([-res.rho])
        self._W = torch.as_tensor(dual.T, dtype=self._dtype, device=self._device)
        # a sparse fit's dual coefficients are a CSR matrix, as scikit-learn's
        self.dual_coef_ = sp.csr_matrix(dual) if self._sparse else dual
        self._b = torch.as_tensor(self.intercept_, dtype=self._dtype, device=self._device)
        if self.kernel_.is_precomputed:
            self._sv = torch.as_tensor(order, device=self._device)
            self.support_vectors_ = torch.zeros(0, 0, dtype=self._dtype, device=self._device)
        else:
            self._sv = Xt[torch.as_tensor(order, device=Xt.device)]
            # sparse data: sparse support vectors, as KernelSVC's (scikit-learn's: a CSR matrix)
            self.support_vectors_ = self._sv.to_scipy() if is_sparse(self._sv) else self._sv

    def _values(self, X):
        """``sum_i dual_coef_i k(sv_i, x) + intercept_`` per row of ``X``, a tensor of shape (n,)."""
        self._check_fitted()
        return self._raw_decision(X)[:, 0]

    @property
    def coef_(self) -> np.ndarray:
        """Primal weights (1, n_features) of a linear-kernel machine, read-only, as scikit-learn's;
        AttributeError for other kernels."""
        self._check_fitted()
        if type(getattr(self, "kernel_", None)) is not Linear:
            raise AttributeError(f"coef_ is only available when using a linear kernel (exact {type(self).__name__} "
                                 f"with kernel='linear'); got kernel={self.kernel!r}.")
        sv = self._sv.to(self._W.dtype)
        coef = to_numpy(sv.t_matmul(self._W).T if is_sparse(sv) else self._W.T @ sv).astype(np.float64)
        if getattr(self, "_sparse", False):
            return sp.csr_matrix(coef)  # a sparse fit's primal weights, as scikit-learn's
        coef.flags.writeable = False
        return coef


class _Regressor(RegressorMixin, _OneMachine):
    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) -- or the (n, n) Gram matrix for ``kernel="precomputed"`` -- and
        targets ``y`` (n,). ``sample_weight`` scales each sample's ``C_i``; samples of zero or negative
        weight are left out, as in scikit-learn (LIBSVM)."""
        return self._fit_machine(X, y, sample_weight, supervised=True)

    def predict(self, X):
        """``f(x) = sum_i dual_coef_i k(x_i, x) + intercept_``."""
        return as_output(self._values(X), X)

    # scikit-learn's SVR and NuSVR have no decision_function: the classifiers' one is hidden
    decision_function = available_if(lambda est: False)(_SVCDecisionMixin.decision_function)


class KernelSVR(_Regressor):
    """Epsilon-support vector regression with any mercer kernel, solved exactly by SMO (as LIBSVM).

    mercer's drop-in for scikit-learn's ``SVR``: the dual

    .. math:: \\min_{\\alpha, \\alpha^*} \\tfrac12 (\\alpha - \\alpha^*)^T K (\\alpha - \\alpha^*)
              + \\epsilon \\sum_i (\\alpha_i + \\alpha_i^*) - \\sum_i y_i (\\alpha_i - \\alpha_i^*)

    subject to :math:`\\sum_i (\\alpha_i - \\alpha_i^*) = 0` and :math:`0 \\le \\alpha_i, \\alpha_i^* \\le
    C w_i`: residuals inside the tube :math:`|y - f(x)| < \\epsilon` cost nothing (their samples are
    not support vectors), those outside cost ``C`` per unit. Solved as LIBSVM's ``2n`` variables, the
    two of a sample reading the same cached kernel row.

    Parameters
    ----------
    kernel, gamma, degree, coef0, kernel_params :
        As :class:`KernelSVC` (``gamma="scale"``, any mercer kernel, callables, ``"precomputed"``).
    C : float > 0 or inf, default=1.0
    epsilon : float >= 0, default=0.1
        Half-width of the tube in which errors are not penalised.
    tol, cache_size, shrinking, max_iter :
        As :class:`KernelSVC` (LIBSVM's ``eps``, row cache in MB or None for the memory plan's
        share, shrinking heuristic, iteration limit: -1 for LIBSVM's ``max(1e7, 100 l)``).
    device, dtype, memory_budget :
        As every mercer estimator.

    Attributes
    ----------
    support_ : ndarray (n_SV,) indices of the support vectors (training rows)
    support_vectors_ : tensor (n_SV, n_features) (empty for a precomputed kernel)
    dual_coef_ : ndarray (1, n_SV) ``alpha_i - alpha_i^*``
    intercept_ : ndarray (1,) ``-rho``
    n_support_ : ndarray (1,) number of support vectors
    coef_ : ndarray (1, n_features) primal weights (linear kernel only)
    fit_status_ : int, 0 when SMO converged; n_iter_ : int; shape_fit_ : tuple
    kernel_, fit_time_
    """

    _drop_in_for = "SVR"

    _parameter_constraints: dict = {
        **_OneMachine._COMMON_CONSTRAINTS,
        "C": [POSITIVE_OR_INF],
        "epsilon": [NON_NEGATIVE],
    }

    def __init__(self, *, kernel="rbf", degree=3, gamma="scale", coef0=0.0, kernel_params=None, tol=1e-3, C=1.0,
                 epsilon=0.1, shrinking=True, cache_size=None, max_iter=-1, device=None, dtype=None,
                 memory_budget=None):
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.tol = tol
        self.C = C
        self.epsilon = epsilon
        self.shrinking = shrinking
        self.cache_size = cache_size
        self.max_iter = max_iter
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _variables(self, y, w):
        m = len(y)
        C = float(self.C) * w
        eps = float(self.epsilon)
        return (np.concatenate([np.ones(m), -np.ones(m)]), np.concatenate([C, C]),
                np.concatenate([eps - y, eps + y]), None, True, False)


class NuSVR(_Regressor):
    """Nu-support vector regression with any mercer kernel, solved exactly by SMO (as LIBSVM).

    mercer's drop-in for scikit-learn's ``NuSVR``: epsilon-SVR's dual without the ``epsilon`` term and
    with :math:`\\sum_i (\\alpha_i + \\alpha_i^*) = C \\nu \\sum_i w_i`: ``nu`` in (0, 1] bounds the
    fraction of training errors from above and the fraction of support vectors from below, and the
    tube's width ``epsilon`` is found by the solver (LIBSVM's Solver_NU, pairs chosen within each sign).

    Parameters
    ----------
    nu : float in (0, 1], default=0.5
    C : float > 0 or inf, default=1.0
    kernel, gamma, degree, coef0, kernel_params, tol, cache_size, shrinking, max_iter, device, dtype,
    memory_budget :
        As :class:`KernelSVR`.

    Attributes
    ----------
    As :class:`KernelSVR`.
    """

    _drop_in_for = "NuSVR"

    _parameter_constraints: dict = {
        **_OneMachine._COMMON_CONSTRAINTS,
        "C": [POSITIVE_OR_INF],
        "nu": [NU],
    }

    def __init__(self, *, nu=0.5, C=1.0, kernel="rbf", degree=3, gamma="scale", coef0=0.0, kernel_params=None,
                 shrinking=True, tol=1e-3, cache_size=None, max_iter=-1, device=None, dtype=None, memory_budget=None):
        self.nu = nu
        self.C = C
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.shrinking = shrinking
        self.tol = tol
        self.cache_size = cache_size
        self.max_iter = max_iter
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _variables(self, y, w):
        m = len(y)
        C = float(self.C) * w
        if not np.isfinite(C).all():
            raise ValueError(f"NuSVR: C * sample_weight must be finite (the nu dual starts from sum(alpha) = "
                             f"C * nu * sum(sample_weight) / 2); got C={self.C!r}.")
        half = _fill(float(np.sum(C * float(self.nu))) / 2, C)
        return (np.concatenate([np.ones(m), -np.ones(m)]), np.concatenate([C, C]), np.concatenate([-y, y]),
                np.concatenate([half, half]), True, True)


class OneClassSVM(OutlierMixin, _OneMachine):
    """Unsupervised outlier detection (Schoelkopf et al.'s one-class SVM) with any mercer kernel,
    solved exactly by SMO (as LIBSVM).

    mercer's drop-in for scikit-learn's ``OneClassSVM``: the dual :math:`\\min \\tfrac12 \\alpha^T K
    \\alpha`, :math:`\\sum_i \\alpha_i = \\nu \\sum_i w_i`, :math:`0 \\le \\alpha_i \\le w_i`; ``nu`` in
    (0, 1] bounds the fraction of training outliers from above and of support vectors from below.
    ``decision_function(x) = sum_i dual_coef_i k(x_i, x) - rho`` (positive: inlier),
    ``score_samples = decision_function + offset_``, ``predict`` gives +1 (inlier) or -1.

    Parameters
    ----------
    nu : float in (0, 1], default=0.5
    kernel, gamma, degree, coef0, kernel_params, tol, cache_size, shrinking, max_iter, device, dtype,
    memory_budget :
        As :class:`KernelSVR`.

    Attributes
    ----------
    support_, support_vectors_, dual_coef_ (1, n_SV), intercept_ (1,) = ``-rho``, n_support_,
    coef_ (linear kernel), fit_status_, n_iter_, shape_fit_, kernel_, fit_time_ :
        As :class:`KernelSVR`.
    offset_ : ndarray (1,)
        ``rho``: ``decision_function = score_samples - offset_``.
    """

    _drop_in_for = "OneClassSVM"

    _parameter_constraints: dict = {**_OneMachine._COMMON_CONSTRAINTS, "nu": [NU]}

    def __init__(self, *, kernel="rbf", degree=3, gamma="scale", coef0=0.0, kernel_params=None, tol=1e-3, nu=0.5,
                 shrinking=True, cache_size=None, max_iter=-1, device=None, dtype=None, memory_budget=None):
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.tol = tol
        self.nu = nu
        self.shrinking = shrinking
        self.cache_size = cache_size
        self.max_iter = max_iter
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _variables(self, y, w):
        m = len(w)
        return np.ones(m), w.copy(), np.zeros(m), _fill(float(np.sum(w * float(self.nu))), w), False, False

    def fit(self, X, y=None, sample_weight=None):
        """Fit on ``X`` (n, d), or the (n, n) Gram matrix for ``kernel="precomputed"``; ``y`` is
        ignored. ``sample_weight`` scales each sample's bound (weights <= 0 leave it out, as LIBSVM)."""
        self._fit_machine(X, None, sample_weight, supervised=False)
        self.offset_ = -self.intercept_  # (1,), as scikit-learn's
        return self

    def decision_function(self, X):
        """Signed distance to the separating hyperplane, ``score_samples(X) - offset_`` (positive: inlier)."""
        return as_output(self._values(X), X)

    def score_samples(self, X):
        """``sum_i dual_coef_i k(x_i, x)`` (the unshifted decision function)."""
        return as_output(self._values(X) + float(self.offset_[0]), X)

    def predict(self, X):
        """+1 for inliers (``decision_function > 0``), -1 for outliers, as LIBSVM."""
        dec = to_numpy(self._values(X))
        out = np.where(dec > 0, 1, -1)
        return torch.as_tensor(out, device=X.device) if isinstance(X, torch.Tensor) else out


# -- NuSVC: KernelSVC's one-vs-one machines and probabilities on the nu dual ------------------------
class NuSVC(KernelSVC):
    """Nu-support vector classifier with any mercer kernel, solved exactly by SMO (as LIBSVM).

    mercer's drop-in for scikit-learn's ``NuSVC``: per pair of classes the dual
    :math:`\\min \\tfrac12 \\alpha^T Q \\alpha`, :math:`y^T \\alpha = 0`, :math:`e^T \\alpha = \\nu \\sum_i
    w_i`, :math:`0 \\le \\alpha_i \\le w_i` (LIBSVM's Solver_NU), scaled by ``1 / r`` as LIBSVM's, so
    ``nu`` in (0, 1] bounds the fraction of margin errors from above and of support vectors from
    below. One-vs-one layout, ``decision_function_shape``, ``break_ties`` and Platt probabilities
    are :class:`KernelSVC`'s. A ``nu`` too large for a pair of classes
    (``nu (n_i + n_j) / 2 > min(n_i, n_j)``, weighted counts) is scikit-learn's "specified nu is
    infeasible" error. As in scikit-learn (LIBSVM), ``class_weight`` sets ``class_weight_`` but does
    not change the nu dual (its bounds are the sample weights).

    Parameters
    ----------
    nu : float in (0, 1], default=0.5
    kernel, gamma, degree, coef0, kernel_params, tol, cache_size, shrinking, class_weight,
    decision_function_shape, break_ties, probability, max_iter, random_state, device, dtype,
    memory_budget :
        As :class:`KernelSVC`.

    Attributes
    ----------
    As :class:`KernelSVC` (one-vs-one).
    """

    _drop_in_for = "NuSVC"
    _STARTS = True  # each machine starts from LIBSVM's feasible point (its rows read through _Rows)
    #: KernelSVC's options that NuSVC does not offer: one-vs-one machines, exact kernels.
    multiclass = "ovo"
    approximation = None

    _parameter_constraints: dict = {
        **SVC_KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "nu": [NU],
        "tol": [POSITIVE],
        "cache_size": [POSITIVE, None],
        "shrinking": ["boolean"],
        "class_weight": CLASS_WEIGHT_CONSTRAINT,
        "decision_function_shape": [Options("ovr", "ovo")],
        "break_ties": ["boolean"],
        "probability": ["boolean"],
        "max_iter": _MAX_ITER,
        "random_state": ["random_state"],
    }

    def __init__(self, *, nu=0.5, kernel="rbf", degree=3, gamma="scale", coef0=0.0, kernel_params=None,
                 shrinking=True, probability=False, tol=1e-3, cache_size=None, class_weight=None,
                 max_iter=-1, decision_function_shape="ovr", break_ties=False, random_state=None, device=None,
                 dtype=None, memory_budget=None):
        self.nu = nu
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.shrinking = shrinking
        self.probability = probability
        self.tol = tol
        self.cache_size = cache_size
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.decision_function_shape = decision_function_shape
        self.break_ties = break_ties
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    #: KernelSVC's box scale: nu-SVC's bounds are the sample weights.
    C = 1.0

    def _box_constraints(self, X, yi, sw) -> np.ndarray:
        """``C_i = sample_weight_i`` (0 where <= 0); ``class_weight_`` is set as scikit-learn's but,
        as in LIBSVM's nu-SVC, does not enter the bounds. Raises scikit-learn's "specified nu is
        infeasible" for a pair of classes whose weighted counts cannot hold ``nu``."""
        w = np.ones(len(yi)) if sw is None else sw
        # LIBSVM checks nu on the weighted counts (weights <= 0 included) before anything else
        counts = np.bincount(yi, weights=w, minlength=len(self.classes_))
        nu = float(self.nu)
        for i in range(len(counts)):
            for j in range(i + 1, len(counts)):
                if nu * (counts[i] + counts[j]) / 2 > min(counts[i], counts[j]):
                    raise ValueError(f"specified nu is infeasible: {type(self).__name__} with nu={nu} needs "
                                     f"nu * (n_i + n_j) / 2 <= min(n_i, n_j) for every pair of classes; classes "
                                     f"{self.classes_[i]!r} and {self.classes_[j]!r} have (weighted) counts "
                                     f"{counts[i]:g} and {counts[j]:g}.")
        super()._box_constraints(X, yi, sw)  # input checks, class_weight_
        return np.where(w > 0, w, 0.0)

    def _solve_dual(self, Xt, idx, ybin, Cb):
        """LIBSVM's solve_nu_svc on one pair: start at ``sum(alpha) = nu sum(w) / 2`` per class,
        Solver_NU, then ``alpha / r`` and ``rho / r``."""
        total = float(np.sum(float(self.nu) * Cb)) / 2
        alpha0 = np.zeros(len(idx))
        for s in (1.0, -1.0):
            cls = np.flatnonzero(ybin == s)
            alpha0[cls] = _fill(total, Cb[cls])
        res = solve_on(self, Xt, idx, ybin, Cb, p=np.zeros(len(idx)), alpha0=alpha0, nu=True)
        if not res.r > 0:  # LIBSVM divides by r = 0 and scikit-learn then reports non-finite coefficients
            raise ValueError(f"{type(self).__name__}: The dual coefficients or intercepts are not finite. (The nu dual "
                             f"ended with r = {res.r:g}, which LIBSVM divides by: the classes of this pair are not "
                             "separated at all in the kernel's feature space, e.g. identical rows of X with different "
                             "labels y.)")
        res.alpha = res.alpha / res.r
        res.rho = res.rho / res.r
        res.objective = res.objective / res.r**2
        return res
