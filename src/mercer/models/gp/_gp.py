"""Gaussian process regression: exact (Cholesky) and sparse (SGPR, Titsias' collapsed bound).

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
:mod:`mercer.models._hyperopt` and :mod:`mercer.kernels._learnable`.

``SparseGPRegressor`` replaces the n x n solve by M inducing points Z (Titsias 2009): the
collapsed evidence lower bound
:math:`\\log N(y | 0, Q + \\sigma^2 I) - \\tfrac{1}{2\\sigma^2} \\mathrm{tr}(K - Q)`, with
:math:`Q = K_{XZ} K_{ZZ}^{-1} K_{ZX}`, is maximised over the hyperparameters and (optionally) Z.
With Z = X it equals the exact log marginal likelihood, and the predictions equal the exact GP's.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, to_numpy
from ..._validation import describe
from ...kernels import Kernel, Scaled, Sum
from ...kernels._learnable import LearnableKernel
from ...linalg import KernelOperator, MemoryBudgetError, NumericalWarning, format_bytes, jittered_cholesky
from .._base import KernelEstimatorMixin
from .._hyperopt import check_optimizer_params, optimize, report

__all__ = ["GaussianProcessRegressor", "SparseGPRegressor"]

log = logging.getLogger(__name__)

_LOG2PI = math.log(2.0 * math.pi)


# -- differentiable pieces ------------------------------------------------------------------------
def _chol(K: torch.Tensor) -> torch.Tensor:
    """Differentiable Cholesky with a growing jitter when K is numerically indefinite."""
    L, info = torch.linalg.cholesky_ex(K)
    if int(info) == 0:
        return L
    scale = float(K.diagonal().detach().abs().mean()) or 1.0
    start = 1e-6 if K.dtype == torch.float32 else 1e-10
    eye = torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
    for i in range(7):
        L, info = torch.linalg.cholesky_ex(K + (start * scale * 10**i) * eye)
        if int(info) == 0:
            return L
    raise torch.linalg.LinAlgError("Cholesky failed even with jitter")


class _GaussianLML(torch.autograd.Function):
    """``log N(Y | 0, K)`` summed over the columns of ``Y``, with the closed-form gradient
    ``dL/dK = (alpha alpha^T - t K^{-1}) / 2`` (alpha = K^{-1} Y, K^{-1} from the Cholesky factor).
    Autograd through ``cholesky`` + ``cholesky_solve`` costs several n^3 triangular solves; this
    costs one ``cholesky_inverse`` (n = 1000: a fit 3.0 s -> 1.8 s here, scikit-learn 2.0 s). ``Y`` is data (no
    gradient). A jitter added by the factorisation is treated as a constant."""

    @staticmethod
    def forward(ctx, K, Y):
        n, t = Y.shape
        L = _chol(K)
        alpha = torch.cholesky_solve(Y, L)
        ctx.save_for_backward(L, alpha)
        ctx.t = t
        return -0.5 * (Y * alpha).sum() - t * torch.log(L.diagonal()).sum() - 0.5 * n * t * _LOG2PI

    @staticmethod
    def backward(ctx, grad):
        L, alpha = ctx.saved_tensors
        G = torch.cholesky_inverse(L).mul_(-float(ctx.t))
        G.addmm_(alpha, alpha.T).mul_(0.5 * grad)
        return G, None


def _exact_lml(lk: LearnableKernel, theta_k, noise, X, Y, cache) -> torch.Tensor:
    n = Y.shape[0]
    K = lk.gram(theta_k, X, X, cache)
    K = K + noise * torch.eye(n, dtype=K.dtype, device=K.device)
    return _GaussianLML.apply(K, Y)


def _sgpr_bound(lk: LearnableKernel, theta_k, noise, Z, X, Y, jitter, cache_uf, cache_uu) -> torch.Tensor:
    n, t = Y.shape
    m = Z.shape[0]
    eye = torch.eye(m, dtype=X.dtype, device=X.device)
    Kuu = lk.gram(theta_k, Z, Z, cache_uu)
    Kuu = Kuu + (jitter * Kuu.diagonal().detach().mean()) * eye
    Kuf = lk.gram(theta_k, Z, X, cache_uf)
    L = _chol(Kuu)
    A = torch.linalg.solve_triangular(L, Kuf, upper=False) / torch.sqrt(noise)
    AAT = A @ A.T
    LB = _chol(eye + AAT)
    c = torch.linalg.solve_triangular(LB, A @ Y, upper=False) / torch.sqrt(noise)
    kdiag = lk.diag(theta_k, X).sum()
    return (-0.5 * n * t * _LOG2PI - t * torch.log(LB.diagonal()).sum() - 0.5 * n * t * torch.log(noise)
            - 0.5 * (Y * Y).sum() / noise + 0.5 * (c * c).sum() - 0.5 * t * (kdiag / noise - AAT.diagonal().sum()))


def _positive_float(owner, name, value, *, allow_zero=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
        value >= 0 if allow_zero else value > 0)
    if not ok:
        rng = "[0, inf)" if allow_zero else "(0, inf)"
        raise ValueError(f"The {name!r} parameter of {owner} must be a float in the range {rng}. Got {describe(value)} instead.")
    return float(value)


def _check_bounds(owner, name, b):
    ok = (isinstance(b, (tuple, list)) and len(b) == 2 and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in b)
          and 0 < b[0] < b[1] < math.inf)
    if not ok:
        raise ValueError(f"The {name!r} parameter of {owner} must be a pair (low, high) with 0 < low < high < inf. Got {b!r} instead.")
    return float(b[0]), float(b[1])


class _GPBase(MultiOutputMixin, RegressorMixin, KernelEstimatorMixin, BaseEstimator):
    """Validation, target normalisation, hyperparameter set-up and output shaping of both GPs."""

    # -- fit helpers ---------------------------------------------------------------------------
    def _check_common(self):
        owner = type(self).__name__
        check_optimizer_params(self)
        _positive_float(owner, "noise", self.noise, allow_zero=not self.learn_noise)
        self._bounds = _check_bounds(owner, "hyperparameter_bounds", self.hyperparameter_bounds)
        self._noise_bounds = _check_bounds(owner, "noise_bounds", self.noise_bounds)
        for name in ("normalize_y", "learn_noise"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"The {name!r} parameter of {owner} must be a bool. Got {getattr(self, name)!r} instead.")

    def _prepare(self, X, y):
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        self._check_common()
        self._setup_compute(X)
        kernel = self._resolve_kernel()
        if kernel.is_precomputed:
            raise ValueError(f"{type(self).__name__} needs a kernel on features; kernel='precomputed' is not supported.")
        self._y_ndim = y.ndim
        Y = y.reshape(len(y), -1)
        if self.normalize_y:
            self._y_train_mean = Y.mean(axis=0)
            std = Y.std(axis=0)
            self._y_train_std = np.where(std < 10 * np.finfo(np.float64).eps, 1.0, std)
            Y = (Y - self._y_train_mean) / self._y_train_std
        else:
            self._y_train_mean = np.zeros(Y.shape[1])
            self._y_train_std = np.ones(Y.shape[1])
        return X, Y, kernel

    def _learnable(self, kernel: Kernel, Y: np.ndarray, n_features: int) -> LearnableKernel:
        """The kernel whose hyperparameters are learned; an output scale is added when optimising
        a kernel that has none at its top (not ``Scaled``, nor a sum with a scaled term)."""
        has_scale = isinstance(kernel, Scaled) or (
            isinstance(kernel, Sum) and any(isinstance(k, Scaled) for k in kernel.kernels))
        if self.optimizer is not None and not has_scale:
            var = float(np.mean(Y.var(axis=0))) if Y.shape[0] > 1 else 1.0
            lo, hi = self._bounds
            kernel = Scaled(float(np.clip(var if var > 0 else 1.0, lo, hi)), kernel)
        return LearnableKernel(kernel, n_features, self._bounds)

    def _theta_layout(self, lk):
        names = list(lk.names)
        bounds = lk.log_bounds
        theta = lk.theta0
        if self.learn_noise:
            lo, hi = self._noise_bounds
            names.append("noise")
            bounds = np.vstack([bounds, [[math.log(lo), math.log(hi)]]])
            theta = np.append(theta, math.log(min(max(self.noise, lo), hi)))
        return names, theta, bounds

    def _split(self, theta: torch.Tensor, n_kernel: int):
        noise = torch.exp(theta[n_kernel]) if self.learn_noise else torch.as_tensor(
            float(self.noise), dtype=theta.dtype, device=theta.device)
        return theta[:n_kernel], noise

    def _run_optimizer(self, loss_fn, theta0, bounds, names, perturb=None):
        owner = type(self).__name__
        rng = check_random_state(self.random_state)
        t0 = time.perf_counter()
        best, runs = optimize(loss_fn, theta0, bounds, method=self.optimizer, max_iter=self.max_iter,
                              n_restarts=self.n_restarts_optimizer, rng=rng, dtype=self._dtype,
                              device=self._device, perturb=perturb)
        self.optimizer_results_ = [r.as_dict() for r in runs]
        self.optimizer_converged_ = bool(best.converged)
        self.n_iter_ = max(1, int(best.n_iter))
        log.info("%s: hyperparameters learned in %.2f s (%d starts)", owner, time.perf_counter() - t0, len(runs))
        report(best, runs, names, bounds[: len(names)], owner=owner,
               what="log marginal likelihood" if isinstance(self, GaussianProcessRegressor) else "evidence lower bound")
        return best.theta

    def _zero_variance(self, Y) -> bool:
        if Y.shape[0] > 1 and np.all(np.ptp(Y, axis=0) == 0):
            if self.optimizer is not None:
                warnings.warn(
                    f"{type(self).__name__}: every target has zero variance; the hyperparameters are "
                    "not optimised (the likelihood has no maximum: it grows as the noise and the "
                    "output scale shrink) and stay at their initial values.", UserWarning, stacklevel=3)
            return True
        return False

    # -- predict helpers -----------------------------------------------------------------------
    def _finish(self, out: torch.Tensor, like, *, var: bool = False, cov: bool = False):
        """Undo the target normalisation and shape as scikit-learn: (n,) for one target."""
        std = torch.as_tensor(self._y_train_std, dtype=out.dtype, device=out.device)
        if cov:
            out = out[..., None] * std**2  # (m, m, t)
        elif var:
            out = out * std**2 if out.ndim == 2 else out[:, None] * std**2
        else:
            out = out * std + torch.as_tensor(self._y_train_mean, dtype=out.dtype, device=out.device)
        if out.shape[-1] == 1:
            out = out[..., 0]
        return as_output(out, like)

    def _rows_per_block(self, n_cols: int, factor: float) -> int:
        return max(1, int(self._budget // max(1.0, factor * n_cols * torch.finfo(self._dtype).bits / 8)))

    def sample_y(self, X, n_samples: int = 1, random_state=0):
        """Draw samples from the posterior predictive of ``f`` at ``X``, as scikit-learn does
        (``numpy`` ``RandomState.multivariate_normal`` on the predictive mean and covariance):
        shape (n, n_samples) for one target, (n, n_targets, n_samples) for several."""
        if not isinstance(n_samples, (int, np.integer)) or isinstance(n_samples, bool) or n_samples < 1:
            raise ValueError(f"The 'n_samples' parameter of sample_y must be an int >= 1. Got {n_samples!r} instead.")
        rng = check_random_state(random_state)
        mean, cov = self.predict(X, return_cov=True)
        mean = mean if isinstance(mean, np.ndarray) else to_numpy(mean)
        cov = cov if isinstance(cov, np.ndarray) else to_numpy(cov)
        if mean.ndim == 1:
            out = rng.multivariate_normal(mean, cov, n_samples).T
        else:
            out = np.stack([rng.multivariate_normal(mean[:, j], cov[..., j], n_samples).T
                            for j in range(mean.shape[1])], axis=1)
        return torch.as_tensor(out, device=X.device) if isinstance(X, torch.Tensor) else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class GaussianProcessRegressor(_GPBase):
    """Exact Gaussian process regression with hyperparameters learned by autograd.

    Parameters
    ----------
    kernel : str or mercer Kernel, default="rbf"
        Covariance function; any mercer kernel, composites included (``c * RBF() + Linear()``).
        scikit-learn's ``ConstantKernel(c) * RBF(l)`` is ``c * RBF(sigma=l)``; its
        ``WhiteKernel(s)`` is ``noise=s``; ``Matern(l, nu)`` is ``Matern(nu, length_scale=l)``.
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name.
    noise : float, default=1e-2
        Noise variance :math:`\\sigma^2` added to the diagonal (scikit-learn's ``alpha``, or a
        ``WhiteKernel``); the starting value when ``learn_noise``.
    normalize_y : bool, default=False
        Centre and scale the targets (zero-variance targets keep the scale 1).
    optimizer : {"lbfgs", "adam"} or None, default="lbfgs"
        How the log marginal likelihood is maximised; None keeps the given hyperparameters.
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

    def __init__(self, kernel="rbf", *, gamma=None, degree=3, coef0=1, kernel_params=None, noise=1e-2,
                 normalize_y=False, optimizer="lbfgs", n_restarts_optimizer=0, learn_noise=True, max_iter=200,
                 hyperparameter_bounds=(1e-5, 1e5), noise_bounds=(1e-6, 1e5), random_state=None,
                 device=None, dtype=None, memory_budget=None):
        self.kernel = kernel
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

    def fit(self, X, y):
        """Learn the hyperparameters (unless ``optimizer=None``) and factor ``K + noise I``."""
        X, Y, kernel = self._prepare(X, y)
        Xt = self._tensor(X)
        Yt = torch.tensor(np.asarray(Y), dtype=self._dtype, device=self._device)
        lk = self._learnable(kernel, Y, X.shape[1])
        names, theta, bounds = self._theta_layout(lk)
        self.hyperparameter_names_ = names
        self._lk, self._n_kernel = lk, len(lk.names)
        self.optimizer_results_, self.optimizer_converged_, self.n_iter_ = [], None, 1
        if self.optimizer is not None and theta.size and not self._zero_variance(Y):
            self._check_budget(Xt.shape[0], 5, "learning the hyperparameters")
            cache: dict = {}

            def loss(t):
                tk, noise = self._split(t, self._n_kernel)
                return -_exact_lml(lk, tk, noise, Xt, Yt, cache)

            theta = self._run_optimizer(loss, theta, bounds, names)
            del cache
        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.kernel_ = lk.build(theta[: self._n_kernel]) if self.optimizer is not None else kernel
        self.noise_ = float(np.exp(theta[-1])) if self.learn_noise and self.optimizer is not None else float(self.noise)
        self._factor(Xt, Yt)
        return self

    def _factor(self, Xt, Yt):
        n = Xt.shape[0]
        self._check_budget(n, 1, "the exact posterior")
        op = KernelOperator(self.kernel_, Xt, memory_budget=self._budget)

        def gram():
            K = op.dense(lower_only=True)
            K.diagonal().add_(self.noise_)
            return K

        factor = jittered_cholesky(gram(), rebuild=gram, owner=type(self).__name__)
        self.L_, self.jitter_ = factor.L.tril_(), factor.jitter
        alpha = factor.solve(Yt)
        self.X_train_ = Xt
        self.y_train_ = Yt
        logdet = torch.log(self.L_.diagonal()).sum()
        t = Yt.shape[1]
        self.log_marginal_likelihood_value_ = float(-0.5 * (Yt * alpha).sum() - t * logdet - 0.5 * n * t * _LOG2PI)
        self.alpha_ = alpha[:, 0] if self._y_ndim == 1 else alpha

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Log marginal likelihood at the log-hyperparameters ``theta`` (ordered as
        ``hyperparameter_names_``); ``None`` returns the fitted value. With ``eval_gradient``,
        also its gradient in ``theta`` (by autograd)."""
        check_is_fitted(self, "alpha_")
        if theta is None:
            if eval_gradient:
                raise ValueError("eval_gradient=True needs theta.")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=np.float64).ravel()
        if theta.shape != self.theta_.shape:
            raise ValueError(f"theta must have {self.theta_.size} values ({self.hyperparameter_names_}); got {theta.size}.")
        self._check_budget(self.X_train_.shape[0], 5, "the log marginal likelihood")
        t = torch.tensor(theta, dtype=self._dtype, device=self._device, requires_grad=eval_gradient)
        tk, noise = self._split(t, self._n_kernel)
        value = _exact_lml(self._lk, tk, noise, self.X_train_, self.y_train_, None)
        if not eval_gradient:
            return float(value.detach())
        (g,) = torch.autograd.grad(value, t)
        return float(value.detach()), g.detach().cpu().numpy().astype(np.float64)

    def predict(self, X, return_std=False, return_cov=False):
        """Posterior mean at ``X``; with ``return_std`` its standard deviation, with
        ``return_cov`` its covariance (latent ``f``, noise excluded)."""
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        check_is_fitted(self, "alpha_")
        Xv = self._validate_X(X, reset=False)
        Xs = self._tensor(Xv)
        m, n = Xs.shape[0], self.X_train_.shape[0]
        alpha = self.alpha_[:, None] if self.alpha_.ndim == 1 else self.alpha_
        if return_cov:
            need = (2 * m * n + m * m) * torch.finfo(self._dtype).bits // 8
            if need > self._budget:
                raise MemoryBudgetError(f"{type(self).__name__}: the {m} x {m} predictive covariance needs "
                                        f"{format_bytes(need)}, more than the budget {format_bytes(self._budget)}.")
            Ks = self.kernel_(Xs, self.X_train_)
            mean = Ks @ alpha
            V = torch.linalg.solve_triangular(self.L_, Ks.T, upper=False)
            cov = self.kernel_(Xs) - V.T @ V
            return self._finish(mean, X), self._finish(cov, X, cov=True)
        rows = self._rows_per_block(n, 3.0 if return_std else 1.0)
        means, variances = [], []
        for i in range(0, m, rows):
            Ks = self.kernel_(Xs[i:i + rows], self.X_train_)
            means.append(Ks @ alpha)
            if return_std:
                V = torch.linalg.solve_triangular(self.L_, Ks.T, upper=False)
                variances.append(self.kernel_.diag(Xs[i:i + rows]) - (V * V).sum(0))
        mean = torch.cat(means) if means else torch.zeros(0, alpha.shape[1], dtype=self._dtype, device=self._device)
        if not return_std:
            return self._finish(mean, X)
        var = torch.cat(variances) if variances else torch.zeros(0, dtype=self._dtype, device=self._device)
        var = _clip_negative(var, type(self).__name__)
        std = self._finish(var, X, var=True)
        return self._finish(mean, X), (np.sqrt(std) if isinstance(std, np.ndarray) else torch.sqrt(std))


def _clip_negative(var: torch.Tensor, owner: str) -> torch.Tensor:
    if bool((var < 0).any()):
        warnings.warn(f"{owner}: predicted variances smaller than 0 (round-off); setting them to 0.",
                      NumericalWarning, stacklevel=3)
        var = var.clamp_min(0.0)
    return var


class SparseGPRegressor(_GPBase):
    """Sparse GP regression with inducing points: SGPR, Titsias' collapsed variational bound.

    Costs O(n M^2) per evaluation instead of O(n^3); the final statistics are accumulated over
    blocks of rows, so only n x M (not n x n) kernel blocks are formed.

    Parameters
    ----------
    n_inducing : int, default=100
        Number M of inducing points. When ``n_samples <= n_inducing``, every training point is
        an inducing point (the exact GP, up to ``jitter``).
    inducing_init : {"kmeans", "random"}, default="kmeans"
        Initial inducing points: k-means centres (of at most 20,000 sampled rows) or a random
        subset of the training points.
    learn_inducing : bool, default=True
        Optimise the inducing locations with the hyperparameters (kernels differentiable in
        their inputs only; the others keep Z fixed).
    jitter : float, default=1e-6
        Added to the diagonal of ``K_ZZ``, relative to its mean diagonal.
    kernel, gamma, degree, coef0, kernel_params, noise, normalize_y, optimizer,
    n_restarts_optimizer, learn_noise, max_iter, hyperparameter_bounds, noise_bounds,
    random_state, device, dtype, memory_budget :
        As in :class:`GaussianProcessRegressor`.

    Attributes
    ----------
    inducing_points_ : tensor of shape (M, d)
    kernel_, noise_, theta_, hyperparameter_names_, optimizer_results_ :
        As in :class:`GaussianProcessRegressor` (``theta_`` holds the kernel and noise only).
    log_marginal_likelihood_value_ : float
        The collapsed evidence lower bound at the fitted hyperparameters.
    """

    def __init__(self, n_inducing=100, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 noise=1e-2, normalize_y=False, inducing_init="kmeans", learn_inducing=True, optimizer="lbfgs",
                 n_restarts_optimizer=0, learn_noise=True, max_iter=200, jitter=1e-6,
                 hyperparameter_bounds=(1e-5, 1e5), noise_bounds=(1e-6, 1e5), random_state=None,
                 device=None, dtype=None, memory_budget=None):
        self.n_inducing = n_inducing
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.noise = noise
        self.normalize_y = normalize_y
        self.inducing_init = inducing_init
        self.learn_inducing = learn_inducing
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.learn_noise = learn_noise
        self.max_iter = max_iter
        self.jitter = jitter
        self.hyperparameter_bounds = hyperparameter_bounds
        self.noise_bounds = noise_bounds
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _init_inducing(self, X: np.ndarray, Xt: torch.Tensor) -> torch.Tensor:
        n, m = Xt.shape[0], self.n_inducing_
        if m == n:
            return Xt.clone()
        rng = check_random_state(self.random_state)
        if self.inducing_init == "random":
            return Xt[torch.as_tensor(np.sort(rng.choice(n, m, replace=False)), device=Xt.device)].clone()
        from sklearn.cluster import KMeans

        Xn = to_numpy(Xt).astype(np.float64)
        if n > 20000:
            Xn = Xn[rng.choice(n, 20000, replace=False)]
        km = KMeans(n_clusters=m, n_init=1, max_iter=100, random_state=rng.randint(2**31 - 1)).fit(Xn)
        return torch.as_tensor(km.cluster_centers_, dtype=Xt.dtype, device=Xt.device)

    def fit(self, X, y):
        """Learn hyperparameters (and inducing points) by maximising the collapsed bound."""
        owner = type(self).__name__
        if not isinstance(self.n_inducing, (int, np.integer)) or isinstance(self.n_inducing, bool) or self.n_inducing < 1:
            raise ValueError(f"The 'n_inducing' parameter of {owner} must be an int >= 1. Got {self.n_inducing!r} instead.")
        if self.inducing_init not in ("kmeans", "random"):
            raise ValueError(f"The 'inducing_init' parameter of {owner} must be one of ['kmeans', 'random']. Got {self.inducing_init!r} instead.")
        if not isinstance(self.learn_inducing, (bool, np.bool_)):
            raise ValueError(f"The 'learn_inducing' parameter of {owner} must be a bool. Got {self.learn_inducing!r} instead.")
        jitter = _positive_float(owner, "jitter", self.jitter, allow_zero=True)
        X, Y, kernel = self._prepare(X, y)
        Xt = self._tensor(X)
        Yt = torch.tensor(np.asarray(Y), dtype=self._dtype, device=self._device)
        n, d = Xt.shape
        self.n_inducing_ = int(min(self.n_inducing, n))
        Z = self._init_inducing(X, Xt)
        lk = self._learnable(kernel, Y, d)
        names, theta, bounds = self._theta_layout(lk)
        self.hyperparameter_names_ = names
        self._lk, self._n_kernel = lk, len(lk.names)
        self.optimizer_results_, self.optimizer_converged_, self.n_iter_ = [], None, 1
        learn_z = bool(self.learn_inducing) and lk.differentiable_inputs and self.n_inducing_ < n
        if self.optimizer is not None and (theta.size or learn_z) and not self._zero_variance(Y):
            m = self.n_inducing_
            need = (4 * n * m + 4 * m * m) * torch.finfo(self._dtype).bits // 8
            if need > self._budget:
                raise MemoryBudgetError(
                    f"{owner}: learning the hyperparameters holds about 4 matrices of {n} x {m} "
                    f"({format_bytes(need)}), more than the memory budget of {format_bytes(self._budget)}; "
                    "lower n_inducing, subsample, or raise memory_budget.")
            p = theta.size
            full = np.concatenate([theta, to_numpy(Z).ravel().astype(np.float64)]) if learn_z else theta
            fb = np.vstack([bounds, np.full((full.size - p, 2), [-np.inf, np.inf])]) if learn_z else bounds
            perturb = np.arange(full.size) < p
            cache_uf = None if learn_z else {}
            cache_uu = None if learn_z else {}

            def loss(t):
                tk, noise = self._split(t[:p], self._n_kernel)
                Zt = t[p:].reshape(m, d) if learn_z else Z
                return -_sgpr_bound(lk, tk, noise, Zt, Xt, Yt, jitter, cache_uf, cache_uu)

            full = self._run_optimizer(loss, full, fb, names, perturb=perturb)
            theta = full[:p]
            if learn_z:
                Z = torch.tensor(full[p:].reshape(m, d), dtype=self._dtype, device=self._device)  # own (aligned) memory
        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.kernel_ = lk.build(theta[: self._n_kernel]) if self.optimizer is not None else kernel
        self.noise_ = float(np.exp(theta[-1])) if self.learn_noise and self.optimizer is not None else float(self.noise)
        self.inducing_points_ = Z
        self._posterior(Xt, Yt, jitter)
        return self

    def _posterior(self, Xt, Yt, jitter):
        """Blocked accumulation of ``A A^T`` and ``A y`` over rows; factors for prediction."""
        owner = type(self).__name__
        Z, m = self.inducing_points_, self.inducing_points_.shape[0]
        n, t = Yt.shape
        Kuu = self.kernel_(Z)
        Kuu.diagonal().add_(jitter * float(Kuu.diagonal().mean()))
        fu = jittered_cholesky(Kuu, owner=owner)
        L = fu.L.tril()
        noise = self.noise_
        AAT = torch.zeros(m, m, dtype=Xt.dtype, device=Xt.device)
        Ay = torch.zeros(m, t, dtype=Xt.dtype, device=Xt.device)
        kdiag = 0.0
        rows = self._rows_per_block(m, 3.0)
        for i in range(0, n, rows):
            A = torch.linalg.solve_triangular(L, self.kernel_(Z, Xt[i:i + rows]), upper=False)
            AAT.addmm_(A, A.T)
            Ay.addmm_(A, Yt[i:i + rows])
            kdiag += float(self.kernel_.diag(Xt[i:i + rows]).sum())
        AAT.div_(noise)
        Ay.div_(math.sqrt(noise))
        B = AAT.clone()
        B.diagonal().add_(1.0)
        LB = jittered_cholesky(B, owner=owner).L.tril()
        c = torch.linalg.solve_triangular(LB, Ay, upper=False) / math.sqrt(noise)
        self._L, self._LB, self._c = L, LB, c
        self.jitter_ = fu.jitter
        self.log_marginal_likelihood_value_ = float(
            -0.5 * n * t * _LOG2PI - t * torch.log(LB.diagonal()).sum() - 0.5 * n * t * math.log(noise)
            - 0.5 * (Yt * Yt).sum() / noise + 0.5 * (c * c).sum() - 0.5 * t * (kdiag / noise - AAT.diagonal().sum()))

    def predict(self, X, return_std=False):
        """Predictive mean of ``f`` at ``X`` (and its standard deviation with ``return_std``)."""
        check_is_fitted(self, "inducing_points_")
        Xv = self._validate_X(X, reset=False)
        Xs = self._tensor(Xv)
        Z, m = self.inducing_points_, self.inducing_points_.shape[0]
        rows = self._rows_per_block(m, 3.0)
        means, variances = [], []
        for i in range(0, Xs.shape[0], rows):
            tmp1 = torch.linalg.solve_triangular(self._L, self.kernel_(Z, Xs[i:i + rows]), upper=False)
            tmp2 = torch.linalg.solve_triangular(self._LB, tmp1, upper=False)
            means.append(tmp2.T @ self._c)
            if return_std:
                variances.append(self.kernel_.diag(Xs[i:i + rows]) - (tmp1 * tmp1).sum(0) + (tmp2 * tmp2).sum(0))
        t = self._c.shape[1]
        mean = torch.cat(means) if means else torch.zeros(0, t, dtype=self._dtype, device=self._device)
        if not return_std:
            return self._finish(mean, X)
        var = torch.cat(variances) if variances else torch.zeros(0, dtype=self._dtype, device=self._device)
        var = self._finish(_clip_negative(var, type(self).__name__), X, var=True)
        return self._finish(mean, X), (np.sqrt(var) if isinstance(var, np.ndarray) else torch.sqrt(var))
