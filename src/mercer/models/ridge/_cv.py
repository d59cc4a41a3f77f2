"""Kernel ridge regression whose kernel hyperparameters and ``alpha`` are learned by gradient
descent on the closed-form leave-one-out (or generalised cross-validation) error.

For kernel ridge with :math:`A = K + \\alpha I`, :math:`c = A^{-1} y` (the dual coefficients),
the leave-one-out residuals need no refit (the hat matrix is :math:`H = K A^{-1} = I - \\alpha A^{-1}`):

.. math::  y_i - \\hat y_{-i}(x_i) = \\frac{c_i}{(A^{-1})_{ii}},
           \\qquad \\mathrm{LOO} = \\frac1n \\sum_i \\Big(\\frac{c_i}{(A^{-1})_{ii}}\\Big)^2,

and GCV replaces each :math:`(A^{-1})_{ii}` by the mean :math:`\\mathrm{tr}(A^{-1}) / n`. Both are
computed from one Cholesky factor of ``A``, differentiated by torch autograd in the
log-hyperparameters (every positive kernel hyperparameter, per-feature scales included, see
:class:`mercer.kernels.LearnableKernel`, and ``log alpha``), and minimised by L-BFGS-B (or projected Adam) from one or several starts.
The learned model is an ordinary :class:`mercer.models.ridge.KernelRidge`.
"""

from __future__ import annotations

import logging
import math
import time
from numbers import Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..._validation import Interval, Options, check_params
from ...kernels import DistanceCache, LearnableKernel
from ...linalg import MemoryBudgetError, format_bytes
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin
from .._hyperopt import OPTIMIZER_CONSTRAINTS, check_bounds, check_target_scale, chol_with_jitter, minimise_into
from ._exact import KernelRidge

__all__ = ["KernelRidgeCV", "loo_residuals"]

log = logging.getLogger(__name__)


def _cv_terms(lk, theta_k, alpha, X, Y, cache=None):
    """Dual coefficients ``c = (K + alpha I)^{-1} Y`` and ``diag((K + alpha I)^{-1})``; ``cache``:
    the distances of ``X`` (a learning loop's)."""
    n = X.shape[0]
    eye = torch.eye(n, dtype=X.dtype, device=X.device)
    A = lk.gram(theta_k, X, cache=cache) + alpha * eye
    L = chol_with_jitter(A)
    C = torch.cholesky_solve(Y, L)
    Linv = torch.linalg.solve_triangular(L, eye, upper=False)
    return C, (Linv * Linv).sum(0)


def _cv_error(C, dinv, alpha, objective: str) -> torch.Tensor:
    if objective == "loo":
        return ((C / dinv[:, None]) ** 2).mean()
    return ((C / dinv.mean()) ** 2).mean()


def loo_residuals(kernel, X, y, alpha: float) -> np.ndarray:
    """Closed-form leave-one-out residuals ``y_i - f_{-i}(x_i)`` of kernel ridge with ``alpha``
    (``kernel`` a mercer Kernel, ``X`` (n, d), ``y`` (n,) or (n, t)); float64, dense."""
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
    Y = torch.as_tensor(np.asarray(y, dtype=np.float64).reshape(len(Xt), -1))
    lk = LearnableKernel(kernel, Xt.shape[1])
    C, dinv = _cv_terms(lk, torch.as_tensor(lk.theta0), torch.tensor(float(alpha), dtype=torch.float64), Xt, Y)
    out = (C / dinv[:, None]).numpy()
    return out[:, 0] if np.ndim(y) == 1 else out


class KernelRidgeCV(MultiOutputMixin, RegressorMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel ridge regression with kernel hyperparameters (and ``alpha``) learned by gradient
    descent on the closed-form leave-one-out or GCV error.

    Parameters
    ----------
    alpha : float, default=1.0
        Regularisation as in :class:`~mercer.models.ridge.KernelRidge`; the starting value when
        ``learn_alpha``.
    kernel : str or mercer Kernel, default="rbf"
        Any mercer kernel, composites included; its positive hyperparameters are learned.
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name (starting values).
    learn_alpha : bool, default=True
    objective : {"loo", "gcv"}, default="loo"
        Mean squared leave-one-out residual, or generalised cross-validation.
    optimizer : {"lbfgs", "adam"} or None, default="lbfgs"
        None evaluates the objective at the given hyperparameters only.
    n_restarts_optimizer : int, default=0
        Extra starts, perturbed by up to a factor 10 in every hyperparameter.
    max_iter : int, default=100
    hyperparameter_bounds : (float, float), default=(1e-5, 1e5)
        In length-scale units (see :class:`mercer.kernels.LearnableKernel`); the bounds a kernel converted
        from scikit-learn carries take precedence.
    alpha_bounds : (float, float), default=(1e-8, 1e5)
    random_state, device, dtype, memory_budget :
        As in every mercer estimator. Learning holds about four n x n matrices.

    Attributes
    ----------
    kernel_ : Kernel
        The learned kernel.
    alpha_ : float
    cv_error_ : float
        The objective (LOO mean squared error or GCV) at the learned hyperparameters.
    estimator_ : KernelRidge
        Fitted on the whole training set with ``kernel_`` and ``alpha_``.
    dual_coef_, X_fit_ :
        Those of ``estimator_``.
    n_evals_ : int
        Objective evaluations (each costs about one kernel ridge fit), all starts together.
    n_iter_ : int
        Optimiser iterations of the best start (1 when nothing was optimised).
    optimizer_results_ : list of dict
    theta_ : ndarray, hyperparameter_names_ : list of str
        Log-hyperparameters (kernel, then ``alpha``).
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        **OPTIMIZER_CONSTRAINTS,
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "learn_alpha": ["boolean"],
        "objective": [Options("loo", "gcv")],
        "hyperparameter_bounds": ["array-like"],  # a pair (low, high): checked by check_bounds in fit
        "alpha_bounds": ["array-like"],
        "random_state": ["random_state"],
    }

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 learn_alpha=True, objective="loo", optimizer="lbfgs", n_restarts_optimizer=0, max_iter=100,
                 hyperparameter_bounds=(1e-5, 1e5), alpha_bounds=(1e-8, 1e5), random_state=None,
                 device=None, dtype=None, memory_budget=None):
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.learn_alpha = learn_alpha
        self.objective = objective
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.hyperparameter_bounds = hyperparameter_bounds
        self.alpha_bounds = alpha_bounds
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        """Learn the hyperparameters on ``(X, y)``, then fit ``estimator_`` with them."""
        check_params(self)
        owner = type(self).__name__
        bounds_k = check_bounds(owner, "hyperparameter_bounds", self.hyperparameter_bounds)
        bounds_a = check_bounds(owner, "alpha_bounds", self.alpha_bounds)
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        check_target_scale(owner, y)
        self._setup_compute(X)
        kernel = self._resolve_kernel()
        if kernel.is_precomputed:
            raise ValueError(f"{owner} learns kernel hyperparameters: kernel='precomputed' is not supported.")
        n = X.shape[0]
        need = 4 * n * n * torch.finfo(self._dtype).bits // 8
        if need > self._budget:
            raise MemoryBudgetError(
                f"{owner}: the closed-form leave-one-out error holds 4 matrices of {n} x {n} "
                f"({format_bytes(need)}), more than the memory budget of {format_bytes(self._budget)}; "
                "subsample for the hyperparameter search, or raise memory_budget.")
        Xt = self._tensor(X)
        Y = torch.as_tensor(y.reshape(n, -1), dtype=self._dtype, device=self._device)
        lk = LearnableKernel(kernel, X.shape[1], bounds_k)
        names, theta, bounds = list(lk.names), lk.theta0, lk.log_bounds
        a0 = float(np.clip(self.alpha, *bounds_a))
        if self.learn_alpha:
            names.append("alpha")
            theta = np.append(theta, math.log(a0))
            bounds = np.vstack([bounds, [[math.log(bounds_a[0]), math.log(bounds_a[1])]]])
        p = len(lk.names)
        cache = DistanceCache(Xt)  # the inputs are the same at every step

        def loss(t):
            alpha = torch.exp(t[p]) if self.learn_alpha else torch.as_tensor(a0, dtype=t.dtype, device=t.device)
            C, dinv = _cv_terms(lk, t[:p], alpha, Xt, Y, cache)
            return _cv_error(C, dinv, alpha, self.objective)

        self.hyperparameter_names_ = names
        t0 = time.perf_counter()
        theta = minimise_into(self, loss, theta, bounds, names, what=f"{self.objective.upper()} error",
                              dtype=self._dtype, device=self._device)
        self.learning_time_ = time.perf_counter() - t0
        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.kernel_ = lk.build(self.theta_[:p])
        self.alpha_ = float(np.exp(self.theta_[p])) if self.learn_alpha else a0
        self.estimator_ = KernelRidge(alpha=self.alpha_, kernel=self.kernel_, solver="dual", device=self._device,
                                      dtype=self._dtype, memory_budget=self.memory_budget).fit(X, y)
        return self

    @property
    def dual_coef_(self):
        check_is_fitted(self, "estimator_")
        return self.estimator_.dual_coef_

    @property
    def X_fit_(self):
        check_is_fitted(self, "estimator_")
        return self.estimator_.X_fit_

    def predict(self, X):
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(self._validate_X(X, reset=False))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
