"""Sparse Gaussian process regression with inducing points (SGPR, Titsias 2009).

M inducing points Z replace the exact GP's n x n solve (:mod:`mercer.models.gp._exact`): the
collapsed evidence lower bound
:math:`\\log N(y | 0, Q + \\sigma^2 I) - \\tfrac{1}{2\\sigma^2} \\mathrm{tr}(K - Q)`, with
:math:`Q = K_{XZ} K_{ZZ}^{-1} K_{ZX}`, is maximised over the hyperparameters and (optionally) Z.
With Z = X it equals the exact log marginal likelihood, and the predictions equal the exact GP's.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ..._backend import check_random_state, to_numpy
from ..._validation import Interval, Options
from ...kernels import LearnableKernel
from ...kmeans import kmeans
from ...linalg import jittered_cholesky, kernel_statistics, row_blocks
from .._hyperopt import chol_with_jitter
from ._common import _LOG2PI, GP_CONSTRAINTS, _GPBase

__all__ = ["SparseGPRegressor", "sgpr_bound_from_statistics"]


def _sgpr_bound(lk: LearnableKernel, theta_k, noise, Z, X, Y, jitter, caches=(None, None)) -> torch.Tensor:
    """``caches``: the :class:`DistanceCache` of ``(Z, Z)`` and of ``(Z, X)`` (a learning loop's
    with fixed inducing points), or None."""
    n, t = Y.shape
    m = Z.shape[0]
    eye = torch.eye(m, dtype=X.dtype, device=X.device)
    k = lk.at(theta_k)
    Kuu = k(Z, cache=caches[0])
    Kuu = Kuu + (jitter * Kuu.diagonal().detach().mean()) * eye
    Kuf = k(Z, X, cache=caches[1])
    L = chol_with_jitter(Kuu)
    A = torch.linalg.solve_triangular(L, Kuf, upper=False) / torch.sqrt(noise)
    AAT = A @ A.T
    LB = chol_with_jitter(eye + AAT)
    c = torch.linalg.solve_triangular(LB, A @ Y, upper=False) / torch.sqrt(noise)
    kdiag = k.diag(X).sum()
    return (-0.5 * n * t * _LOG2PI - t * torch.log(LB.diagonal()).sum() - 0.5 * n * t * torch.log(noise)
            - 0.5 * (Y * Y).sum() / noise + 0.5 * (c * c).sum() - 0.5 * t * (kdiag / noise - AAT.diagonal().sum()))


def sgpr_bound_from_statistics(stats, Kuu: torch.Tensor, noise, jitter: float) -> torch.Tensor:
    """Titsias' collapsed bound from the blocked statistics (:func:`mercer.linalg.kernel_statistics`,
    one weight column of ones) and ``Kuu = k(Z, Z)``: with ``L = chol(K_ZZ + jitter)``,
    ``P = L^{-1} A L^{-T} / s2`` (``A = K_ZX K_XZ``), ``L_B = chol(I + P)``,
    ``c = L_B^{-1} L^{-1} K_ZX y / s2``,

    .. math:: -\\tfrac{nt}{2}\\log 2\\pi - t \\sum \\log \\mathrm{diag}\\, L_B - \\tfrac{nt}{2}\\log s2
              - \\tfrac{y^T y}{2 s2} + \\tfrac12 \\|c\\|^2 - \\tfrac t2 \\big(\\tfrac{\\sum_i k(x_i, x_i)}{s2}
              - \\mathrm{tr}\\, P\\big),

    equal to :func:`_sgpr_bound` (which forms ``K_ZX``) without any ``n x M`` matrix."""
    A, b, kd, n, yy = stats.gram[0], stats.rhs[0], stats.kdiag[0], stats.n_w[0], stats.yy[0].sum()
    t, m = b.shape[1], b.shape[0]
    eye = torch.eye(m, dtype=A.dtype, device=A.device)
    Kuu = Kuu.to(A.dtype)
    Kuu = Kuu + (jitter * Kuu.diagonal().detach().mean()) * eye
    L = chol_with_jitter(Kuu)
    LiA = torch.linalg.solve_triangular(L, A, upper=False)
    P = torch.linalg.solve_triangular(L, LiA.mT, upper=False) / noise
    P = 0.5 * (P + P.mT)
    LB = chol_with_jitter(eye + P)
    c = torch.linalg.solve_triangular(LB, torch.linalg.solve_triangular(L, b, upper=False), upper=False) / noise
    return (-0.5 * n * t * _LOG2PI - t * torch.log(LB.diagonal()).sum() - 0.5 * n * t * torch.log(noise)
            - 0.5 * yy / noise + 0.5 * (c * c).sum() - 0.5 * t * (kd / noise - P.diagonal().sum()))


class SparseGPRegressor(_GPBase):
    """Sparse GP regression with inducing points: SGPR, Titsias' collapsed variational bound.

    Costs O(n M^2) per evaluation instead of O(n^3). Learning evaluates the bound and its gradient
    in two blocked passes over the rows (:func:`mercer.linalg.kernel_statistics`), and the final
    statistics are accumulated over blocks too: memory O(block + M^2) at any n, no n x M matrix.

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


    _parameter_constraints: dict = {
        **GP_CONSTRAINTS,
        "n_inducing": [Interval(numbers.Integral, 1, None, closed="left")],
        "inducing_init": [Options("kmeans", "random")],
        "learn_inducing": ["boolean"],
        "jitter": [Interval(numbers.Real, 0, math.inf, closed="left")],
    }
    _objective_name = "evidence lower bound"

    _saved_private = ("_L", "_LB", "_c")  # private state that mercer.io saves
    _sparse_refusal = ("it learns the coordinates of its inducing points (dense M x n_features parameters, "
                       "10^6 of them per point for text) and back-propagates through the data's kernel tiles. Use "
                       "NystroemKernelRidge (sparse centres) or GaussianProcessRegressor, which take sparse X, or "
                       "pass X.toarray() if n_samples x n_features values fit in memory.")

    def __init__(self, n_inducing=100, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 noise="auto", normalize_y=False, inducing_init="kmeans", learn_inducing=True, optimizer="lbfgs",
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
        Xn = to_numpy(Xt).astype(np.float64)
        if n > 20000:
            Xn = Xn[rng.choice(n, 20000, replace=False)]
        km = kmeans(torch.from_numpy(Xn), m, init="k-means++", n_init=1, max_iter=100,
                    generator=torch.Generator().manual_seed(int(rng.randint(2**31 - 1))),
                    memory_budget=self._budget, owner=type(self).__name__)
        return km.centers.to(dtype=Xt.dtype, device=Xt.device)

    def fit(self, X, y):
        """Learn hyperparameters (and inducing points) by maximising the collapsed bound."""
        X, Y, kernel = self._prepare(X, y)
        jitter = float(self.jitter)
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
            theta, Z = self._optimise(lk, theta, bounds, names, Z, Xt, Yt, jitter, learn_z)
        self._fitted_hyperparameters(lk, kernel, theta)
        self.inducing_points_ = Z
        self._posterior(Xt, Yt, jitter)
        return self

    def _optimise(self, lk, theta, bounds, names, Z, Xt, Yt, jitter, learn_z):
        """Maximise the collapsed bound over ``theta`` (and the inducing points ``Z`` when
        ``learn_z``: unbounded extra coordinates that restarts do not perturb); returns both.

        Each evaluation is two blocked passes over the rows (:func:`mercer.linalg.kernel_statistics`:
        the statistics, then their gradient), in O(block + M^2) memory: no ``n x M`` matrix is held."""
        (n, d), m = Xt.shape, self.n_inducing_
        p = theta.size
        full = np.concatenate([theta, to_numpy(Z).ravel().astype(np.float64)]) if learn_z else theta
        fb = np.vstack([bounds, np.full((full.size - p, 2), [-np.inf, np.inf])]) if learn_z else bounds
        perturb = np.arange(full.size) < p
        plan = self._plan

        def loss(t):
            tk, noise = self._split(t[:p], self._n_kernel)
            Zt = t[p:].reshape(m, d) if learn_z else Z
            stats = kernel_statistics(lk.at, tk, Zt, Xt, Yt, memory_budget=plan, desc=type(self).__name__)
            return -sgpr_bound_from_statistics(stats, lk.at(tk)(Zt), noise, jitter)

        full = self._run_optimizer(loss, full, fb, names, perturb=perturb)
        if learn_z:
            Z = torch.tensor(full[p:].reshape(m, d), dtype=self._dtype, device=self._device)  # own (aligned) memory
        return full[:p], Z

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
        # a block holds its kernel columns against Z and two working copies
        rows = self._rows_per_block(n, m, 3.0, "a block of the posterior", capped=True)
        for rs in row_blocks(n, rows, desc="SGPR posterior"):
            A = torch.linalg.solve_triangular(L, self.kernel_(Z, Xt[rs]), upper=False)
            AAT.addmm_(A, A.T)
            Ay.addmm_(A, Yt[rs])
            kdiag += float(self.kernel_.diag(Xt[rs]).sum())
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
        means, variances = [], []
        rows = self._rows_per_block(Xs.shape[0], m, 3.0, "a block of predictions", capped=True)
        for rs in row_blocks(Xs.shape[0], rows, desc="SGPR prediction"):
            tmp1 = torch.linalg.solve_triangular(self._L, self.kernel_(Z, Xs[rs]), upper=False)
            tmp2 = torch.linalg.solve_triangular(self._LB, tmp1, upper=False)
            means.append(tmp2.T @ self._c)
            if return_std:
                variances.append(self.kernel_.diag(Xs[rs]) - (tmp1 * tmp1).sum(0) + (tmp2 * tmp2).sum(0))
        return self._finish_mean_std(means, variances, self._c.shape[1], X, return_std)
