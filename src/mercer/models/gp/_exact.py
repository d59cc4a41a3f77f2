"""Exact Gaussian process regression (Cholesky).

Model: :math:`f \\sim GP(0, k_\\theta)`, :math:`y = f(x) + \\varepsilon`,
:math:`\\varepsilon \\sim N(0, \\sigma^2)`. With :math:`K = k_\\theta(X, X) + \\sigma^2 I = L L^T`:

* posterior mean :math:`m(x_*) = k_*^T \\alpha`, :math:`\\alpha = K^{-1} y`;
* posterior variance :math:`k(x_*, x_*) - \\|L^{-1} k_*\\|^2` (latent ``f``, without the noise,
  as scikit-learn's ``GaussianProcessRegressor`` with ``alpha=noise``);
* log marginal likelihood
  :math:`-\\tfrac12 y^T \\alpha - \\sum_i \\log L_{ii} - \\tfrac n2 \\log 2\\pi` (summed over targets).

The hyperparameters (every positive kernel hyperparameter, the noise variance, an output scale)
are learned by maximising the log marginal likelihood with torch autograd on their logarithms
(L-BFGS-B with scikit-learn's bounds, or projected Adam), from several starts; see
:mod:`mercer.models._hyperopt`. The kernel is evaluated by its own class, with tensor
hyperparameters (:class:`mercer.kernels.LearnableKernel`), so the GP learns the formula every
estimator uses, per-feature (ARD) scales included.

:class:`~mercer.models.gp.SparseGPRegressor` (:mod:`mercer.models.gp._sparse`) replaces the
n x n solve by inducing points.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output
from ..._validation import Interval, Options
from ...kernels import DistanceCache, LearnableKernel, is_sklearn_kernel, resolve_kernel
from ...linalg import (KernelOperator, MemoryBudgetError, format_bytes, jittered_cholesky, row_blocks,
                       warn_ill_conditioned)
from ...linalg import interruptible as _interruptible
from .._hyperopt import chol_with_jitter
from ._common import _LOG2PI, GP_CONSTRAINTS, _GPBase
from ._sklearn_mode import SklearnTheta, default_kernel

__all__ = ["GaussianProcessRegressor"]


class _GaussianLML(torch.autograd.Function):
    """``log N(Y | 0, K)`` summed over the columns of ``Y``, with the closed-form gradient
    ``dL/dK = (alpha alpha^T - t K^{-1}) / 2`` (alpha = K^{-1} Y, K^{-1} from the Cholesky factor).
    Autograd through ``cholesky`` + ``cholesky_solve`` costs several n^3 triangular solves; this
    costs one ``cholesky_inverse`` (n = 1000: a fit 3.0 s -> 1.8 s here, scikit-learn 2.0 s). ``Y`` is data (no
    gradient). A jitter added by the factorisation is treated as a constant."""

    @staticmethod
    def forward(ctx, K, Y):
        n, t = Y.shape
        L = chol_with_jitter(K)
        alpha = _interruptible(lambda: torch.cholesky_solve(Y, L), L, "triangular solve")
        ctx.save_for_backward(L, alpha)
        ctx.t = t
        return -0.5 * (Y * alpha).sum() - t * torch.log(L.diagonal()).sum() - 0.5 * n * t * _LOG2PI

    @staticmethod
    def backward(ctx, grad):
        L, alpha = ctx.saved_tensors
        G = _interruptible(lambda: torch.cholesky_inverse(L), L, "Cholesky inverse").mul_(-float(ctx.t))  # Ctrl-C heard
        G.addmm_(alpha, alpha.T).mul_(0.5 * grad)
        return G, None


def _exact_lml(lk: LearnableKernel, theta_k, noise, X, Y, cache: DistanceCache | None = None) -> torch.Tensor:
    """``noise``: the variance added to the diagonal, 0-d or one per sample; ``cache``: the
    distances of ``X`` (a learning loop's)."""
    n = Y.shape[0]
    K = lk.gram(theta_k, X, cache=cache)
    K = K + (torch.diag(noise) if noise.ndim else noise * torch.eye(n, dtype=K.dtype, device=K.device))
    return _GaussianLML.apply(K, Y)


class GaussianProcessRegressor(_GPBase):
    """Exact Gaussian process regression with hyperparameters learned by autograd.

    Parameters
    ----------
    kernel : str, mercer Kernel, scikit-learn GP kernel or None, default="rbf"
        Covariance function; any mercer kernel, composites included (``c * RBF() + Linear()``).
        scikit-learn's kernel objects are converted exactly (:func:`mercer.kernels.from_sklearn`):
        ``ConstantKernel(c) * RBF(l)`` is ``c * RBF(sigma=l)``, ``Matern(l, nu)`` is
        ``Matern(nu, length_scale=l)``; a ``WhiteKernel(s)`` in it becomes ``White(s)`` (or use
        ``noise=s``), with their bounds (a ``"fixed"`` hyperparameter is not learned). Per-feature
        (ARD) scales, ``RBF(sigma=[l1, ..., ld])`` or scikit-learn's ``RBF([l1, ..., ld])``, are
        learned one per feature. Learned hyperparameters: :class:`mercer.kernels.LearnableKernel`.

        **scikit-learn's mode.** Given a scikit-learn kernel, or ``None`` (scikit-learn's default
        ``ConstantKernel(1, "fixed") * RBF(1, "fixed")``), the GP follows scikit-learn's
        ``GaussianProcessRegressor``, so that a scikit-learn script switches by changing one import:
        the noise is ``alpha`` (default 1e-10, not learned: a ``WhiteKernel`` learns one), no output
        scale is added, ``kernel_`` is a scikit-learn kernel with the learned hyperparameters, and
        ``theta_``, ``hyperparameter_names_`` and ``log_marginal_likelihood(theta)`` use that
        kernel's ``theta`` (its order, units and bounds). The computation is mercer's.
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name.
    noise : float or "auto", default="auto"
        Noise variance :math:`\\sigma^2` added to the diagonal (scikit-learn's ``alpha``, or a
        ``WhiteKernel``); the starting value when ``learn_noise``. "auto": a tenth of the (normalised)
        targets' variance when learned, 1e-2 when not (a start near zero noise can end at an
        interpolating optimum).
    alpha : float, array-like of shape (n_samples,) or None, default=None
        scikit-learn's parameter: a fixed value added to the diagonal (per sample for an array);
        given, it replaces ``noise`` and ``learn_noise``. None: ``noise`` (1e-10 in scikit-learn's
        mode).
    normalize_y : bool, default=False
        Centre and scale the targets (zero-variance targets keep the scale 1).
    optimizer : {"lbfgs", "fmin_l_bfgs_b", "adam"}, callable or None, default="lbfgs"
        How the log marginal likelihood is maximised; None keeps the given hyperparameters.
        ``"fmin_l_bfgs_b"`` is scikit-learn's name for L-BFGS-B. A callable follows scikit-learn's
        protocol: ``optimizer(obj_func, initial_theta, bounds)`` returns ``(theta_opt, func_min)``,
        where ``obj_func(theta, eval_gradient=True)`` returns minus the LML and its gradient.
    n_restarts_optimizer : int, default=0
        Extra starts, perturbed from the initial hyperparameters by up to a factor 10 each.
    learn_noise : bool, default=True
        Learn the noise variance (when optimising).
    max_iter : int, default=200
        Iterations per start (L-BFGS-B iterations, or Adam steps).
    hyperparameter_bounds : (float, float), default=(1e-5, 1e5)
        Bounds in length-scale units for the kernel hyperparameters (as scikit-learn's defaults).
    noise_bounds : (float, float), default=(1e-6, 1e5)
    random_state : int, RandomState or None, default=None
        Seeds the restarts.
    n_targets : int or None, default=None
        Number of targets of the prior (``predict`` and ``sample_y`` before ``fit``); once fitted,
        ``y`` must have that many.
    copy_X_train : bool, default=True
        Accepted for scikit-learn compatibility: the training inputs are always kept as mercer's
        own tensor (a copy).
    device, dtype, memory_budget :
        As in every mercer estimator. The exact fit holds a few n x n matrices: it raises
        :class:`mercer.linalg.MemoryBudgetError` beyond the budget (use :class:`SparseGPRegressor`).

    Attributes
    ----------
    kernel_ : Kernel
        The kernel with the learned hyperparameters (with the added output scale, if any).
    noise_ : float
    alpha_ : tensor of shape (n,) or (n, t)
    L_ : tensor (n, n), lower Cholesky factor of ``K + noise_ I`` (+ ``jitter_``)
    X_train_ : tensor
    log_marginal_likelihood_value_ : float
    theta_ : ndarray
        Log-hyperparameters, named by ``hyperparameter_names_`` (``log_marginal_likelihood(theta)``).
    optimizer_results_ : list of dict
        Each start: initial and final loss (-LML), iterations, convergence, message.
    optimizer_converged_ : bool or None
        Whether the best start converged (None when nothing was optimised).
    n_iter_ : int
        Iterations of the best start (1 when nothing was optimised: one evaluation).
    jitter_ : float
    """


    _parameter_constraints: dict = {
        **GP_CONSTRAINTS,
        "kernel": [*GP_CONSTRAINTS["kernel"], None],
        "optimizer": [Options("lbfgs", "fmin_l_bfgs_b", "adam"), "callable", None],
        "alpha": [Interval(numbers.Real, 0, None, closed="left"), "array-like", None],
        "n_targets": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "copy_X_train": ["boolean"],
    }

    def __init__(self, kernel="rbf", *, gamma=None, degree=3, coef0=1, kernel_params=None, noise="auto", alpha=None,
                 normalize_y=False, optimizer="lbfgs", n_restarts_optimizer=0, learn_noise=True, max_iter=200,
                 hyperparameter_bounds=(1e-5, 1e5), noise_bounds=(1e-6, 1e5), random_state=None, n_targets=None,
                 copy_X_train=True, device=None, dtype=None, memory_budget=None):
        self.kernel = kernel
        self.alpha = alpha
        self.n_targets = n_targets
        self.copy_X_train = copy_X_train
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.noise = noise
        self.normalize_y = normalize_y
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.learn_noise = learn_noise
        self.max_iter = max_iter
        self.hyperparameter_bounds = hyperparameter_bounds
        self.noise_bounds = noise_bounds
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _check_budget(self, n: int, copies: int, what: str):
        need = copies * n * n * torch.finfo(self._dtype).bits // 8
        if need > self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: {what} holds {copies} matrices of {n} x {n} "
                f"({format_bytes(need)}), more than the memory budget of {format_bytes(self._budget)}. "
                "Use SparseGPRegressor (inducing points) or raise memory_budget."
            )

    def _sklearn_mode(self) -> bool:
        return self.kernel is None or is_sklearn_kernel(self.kernel)

    def _resolve_kernel(self):
        if self.kernel is None:  # C() * RBF(), learned (the prior of an unfitted GP fixes both at 1)
            return resolve_kernel(default_kernel(fixed=False), owner=type(self).__name__)
        return super()._resolve_kernel()

    def _layout(self, kernel, Y, n_features: int):
        """The learnable kernel and the optimised vector's names, start and bounds: mercer's
        layout (kernel, then noise), or scikit-learn's kernel ``theta`` in its mode."""
        if self._sklearn_mode():
            self._sk = SklearnTheta(default_kernel(fixed=False) if self.kernel is None else self.kernel, n_features,
                                    type(self).__name__)
            self._n_kernel = len(self._sk.theta0)
            return self._sk.learnable, list(self._sk.names), self._sk.theta0.copy(), self._sk.bounds
        self._sk = None
        lk = self._learnable(kernel, Y, n_features)
        self._n_kernel = len(lk.names)
        return (lk, *self._theta_layout(lk))

    def _restore_sklearn_mode(self) -> bool:
        if not is_sklearn_kernel(self.kernel_):
            return False
        self._sk = SklearnTheta(self.kernel_, self.n_features_in_, type(self).__name__)
        if list(self._sk.names) != list(self.hyperparameter_names_):
            raise ValueError(f"{type(self).__name__}: the saved hyperparameter names {self.hyperparameter_names_} do "
                             f"not match the kernel's {self._sk.names}.")
        self._n_kernel, self._lk = len(self._sk.names), self._sk.learnable
        self._kernel = self._sk.build(self.theta_)
        return True

    def _kernel_theta(self, theta_k):
        return theta_k if self._sk is None else self._sk.mercer_theta(theta_k)

    def _fitted_hyperparameters(self, lk, kernel, theta) -> None:
        if self._sk is None:
            super()._fitted_hyperparameters(lk, kernel, theta)
            self._kernel = self.kernel_
            return
        from sklearn.base import clone

        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.kernel_ = clone(self._sk.kernel)
        if self.theta_.size:
            self.kernel_.theta = self.theta_
            if self.optimizer is not None:
                self.kernel_._check_bounds_params()  # scikit-learn's warnings, its wording
        # The mapping anchored at the fitted kernel_, as mercer.io's load rebuilds it: c + J theta_
        # anchored at the starting theta rounds differently (gamma off by ulps), and a loaded model
        # would not predict bit for bit.
        self._sk = SklearnTheta(self.kernel_, self.n_features_in_, type(self).__name__)
        self._kernel = self._sk.build(self.theta_)
        self.noise_ = self._noise0

    def _check_n_targets(self, n_targets: int) -> None:
        if self.n_targets is not None and n_targets != self.n_targets:
            raise ValueError("The number of targets seen in `y` is different from the parameter `n_targets`. "
                             f"Got {n_targets} != {self.n_targets}.")

    def fit(self, X, y):
        """Learn the hyperparameters (unless ``optimizer=None``) and factor ``K + noise I``."""
        X, Y, kernel = self._prepare(X, y)
        self._check_n_targets(Y.shape[1])
        Xt = self._tensor(X)
        Yt = torch.tensor(np.asarray(Y), dtype=self._dtype, device=self._device)
        lk, names, theta, bounds = self._layout(kernel, Y, X.shape[1])
        self.hyperparameter_names_ = names
        self._lk = lk
        self.optimizer_results_, self.optimizer_converged_, self.n_iter_ = [], None, 1
        if self.optimizer is not None and theta.size and not self._zero_variance(Y):
            self._check_budget(Xt.shape[0], 5, "learning the hyperparameters")

            cache = DistanceCache(Xt)  # the inputs are the same at every step

            def loss(t):
                tk, noise = self._split(t, self._n_kernel)
                return -_exact_lml(lk, tk, noise, Xt, Yt, cache)

            theta = self._run_optimizer(loss, theta, bounds, names)
        self._fitted_hyperparameters(lk, kernel, theta)
        self._factor(Xt, Yt)
        return self

    def _factor(self, Xt, Yt):
        n = Xt.shape[0]
        self._check_budget(n, 1, "the exact posterior")
        op = KernelOperator(self._kernel, Xt, memory_budget=self._budget)
        noise = torch.as_tensor(self.noise_, dtype=Xt.dtype, device=Xt.device)

        def gram():
            K = op.dense(lower_only=True)
            K.diagonal().add_(noise)
            return K

        if self._sk is None:
            factor = jittered_cholesky(gram(), rebuild=gram, owner=type(self).__name__)
        else:  # scikit-learn's mode: no jitter, scikit-learn's error
            try:
                factor = jittered_cholesky(gram(), max_tries=0, owner=type(self).__name__)
            except np.linalg.LinAlgError as exc:
                raise np.linalg.LinAlgError(
                    f"The kernel, {self.kernel_}, is not returning a positive definite matrix. Try gradually "
                    "increasing the 'alpha' parameter of your GaussianProcessRegressor estimator.") from exc
        self.L_, self.jitter_ = factor.L.tril_(), factor.jitter
        if self._sk is None:  # (scikit-learn's mode, alpha=1e-10 by default, stays silent as scikit-learn is)
            warn_ill_conditioned(self.L_, owner=type(self).__name__,
                                 what=f"K + noise I (noise={float(np.max(self.noise_)):.3g})",
                                 advice="Scale the features (e.g. sklearn.preprocessing.StandardScaler), or raise "
                                        "the noise level (or its lower bound).")
        alpha = factor.solve(Yt)
        self.X_train_ = Xt
        self.y_train_ = Yt
        logdet = torch.log(self.L_.diagonal()).sum()
        t = Yt.shape[1]
        self.log_marginal_likelihood_value_ = np.float64(-0.5 * (Yt * alpha).sum() - t * logdet - 0.5 * n * t * _LOG2PI)
        self.alpha_ = alpha[:, 0] if self._y_ndim == 1 else alpha

    def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True):
        """Log marginal likelihood at the log-hyperparameters ``theta`` (ordered as
        ``hyperparameter_names_``); ``None`` returns the fitted value. With ``eval_gradient``,
        also its gradient in ``theta`` (by autograd). ``clone_kernel=False`` sets ``kernel_.theta``
        to ``theta`` (scikit-learn's mode, as scikit-learn does; ignored otherwise)."""
        check_is_fitted(self, "alpha_")
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=np.float64).ravel()
        if theta.shape != self.theta_.shape:
            raise ValueError(f"theta must have {self.theta_.size} values ({self.hyperparameter_names_}); got {theta.size}.")
        self._check_budget(self.X_train_.shape[0], 5, "the log marginal likelihood")
        if not clone_kernel and self._sk is not None and theta.size:
            self.kernel_.theta = theta
        t = torch.tensor(theta, dtype=self._dtype, device=self._device, requires_grad=eval_gradient)
        tk, noise = self._split(t, self._n_kernel)
        value = _exact_lml(self._lk, tk, noise, self.X_train_, self.y_train_)
        if not eval_gradient:
            return np.float64(value.detach().cpu())
        (g,) = torch.autograd.grad(value, t)
        return np.float64(value.detach().cpu()), g.detach().cpu().numpy().astype(np.float64)

    def predict(self, X, return_std=False, return_cov=False):
        """Posterior mean at ``X``; with ``return_std`` its standard deviation, with
        ``return_cov`` its covariance (latent ``f``, noise excluded)."""
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        if not hasattr(self, "alpha_"):  # unfitted: the prior, as scikit-learn
            return self._predict_prior(X, return_std, return_cov)
        Xv = self._validate_X(X, reset=False)
        Xs = self._tensor(Xv)
        m, n = Xs.shape[0], self.X_train_.shape[0]
        alpha = self.alpha_[:, None] if self.alpha_.ndim == 1 else self.alpha_
        if return_cov:
            return self._predict_cov(Xs, alpha, X)
        # a block holds its kernel rows against the training points (and two copies for the std)
        rows = self._rows_per_block(m, n, 3.0 if return_std else 1.0, "a block of predictions")
        means, variances = [], []
        for rs in row_blocks(m, rows, desc="GP prediction"):
            Ks = self._kernel(Xs[rs], self.X_train_)
            means.append(Ks @ alpha)
            if return_std:
                V = torch.linalg.solve_triangular(self.L_, Ks.T, upper=False)
                variances.append(self._kernel.diag(Xs[rs]) - (V * V).sum(0))
        return self._finish_mean_std(means, variances, alpha.shape[1], X, return_std)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False  # predict before fit gives the prior, as scikit-learn's
        return tags

    def _predict_prior(self, X, return_std, return_cov):
        """Mean 0 and the prior's covariance (or standard deviation) at ``X``, for ``n_targets``
        targets (shapes as after a fit)."""
        from sklearn.utils.validation import check_array

        Xv = X if isinstance(X, torch.Tensor) else check_array(X, accept_sparse=True, dtype=None)
        self._setup_compute(Xv)
        owner = type(self).__name__
        kernel = resolve_kernel(default_kernel(fixed=True), owner=owner) if self.kernel is None else self._resolve_kernel()
        Xs = self._tensor(Xv)
        t = 1 if self.n_targets is None else int(self.n_targets)
        shape = (Xs.shape[0],) if t == 1 else (Xs.shape[0], t)
        mean = as_output(torch.zeros(shape, dtype=Xs.dtype, device=Xs.device), X)
        if return_cov:
            cov = kernel(Xs)
            return mean, as_output(cov if t == 1 else cov[..., None].expand(-1, -1, t).contiguous(), X)
        if return_std:
            std = kernel.diag(Xs).clamp_min(0.0).sqrt()
            return mean, as_output(std if t == 1 else std[:, None].expand(-1, t).contiguous(), X)
        return mean

    def _predict_cov(self, Xs, alpha, X):
        """Mean and the full ``m x m`` predictive covariance (not blocked: it must fit the budget)."""
        m, n = Xs.shape[0], self.X_train_.shape[0]
        need = (2 * m * n + m * m) * torch.finfo(self._dtype).bits // 8
        if need > self._budget:
            raise MemoryBudgetError(f"{type(self).__name__}: the {m} x {m} predictive covariance needs "
                                    f"{format_bytes(need)}, more than the budget {format_bytes(self._budget)}.")
        Ks = self._kernel(Xs, self.X_train_)
        mean = Ks @ alpha
        V = torch.linalg.solve_triangular(self.L_, Ks.T, upper=False)
        cov = self._kernel(Xs) - V.T @ V
        return self._finish(mean, X), self._finish(cov, X, cov=True)
