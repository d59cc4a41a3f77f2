"""What the exact and the sparse Gaussian process regressors share: the parameter table, the
target normalisation, the layout of the learned hyperparameters, the optimiser run and the
shaping of predictions (see :mod:`mercer.models.gp._exact` for the model)."""

from __future__ import annotations

import logging
import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin

from ..._backend import as_output, check_random_state, to_numpy
from ..._validation import Interval, Options, check_param, check_params
from ...kernels import Kernel, LearnableKernel, Scaled, Sum
from ...linalg import NumericalWarning, plan_rows
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin
from .._hyperopt import OPTIMIZER_CONSTRAINTS, check_bounds, check_target_scale, optimize, report

log = logging.getLogger(__name__)

_LOG2PI = math.log(2.0 * math.pi)

#: Parameters shared by both GPs. ``noise`` must be > 0 when it is learned (as its logarithm);
#: the bounds pairs (low, high) are checked by :func:`mercer.models._hyperopt.check_bounds`.
GP_CONSTRAINTS: dict = {
    **KERNEL_CONSTRAINTS,
    **COMPUTE_CONSTRAINTS,
    **OPTIMIZER_CONSTRAINTS,
    "noise": [Interval(numbers.Real, 0, math.inf, closed="left"), Options("auto")],
    "normalize_y": ["boolean"],
    "learn_noise": ["boolean"],
    "hyperparameter_bounds": ["array-like"],
    "noise_bounds": ["array-like"],
    "random_state": ["random_state"],
}


def _clip_negative(var: torch.Tensor, owner: str) -> torch.Tensor:
    if bool((var < 0).any()):
        warnings.warn(f"{owner}: predicted variances smaller than 0 (round-off); setting them to 0.",
                      NumericalWarning, stacklevel=4)  # the caller of predict
        var = var.clamp_min(0.0)
    return var


class _GPBase(MultiOutputMixin, RegressorMixin, KernelEstimatorMixin, BaseEstimator):
    """Validation, target normalisation, hyperparameter set-up and output shaping of both GPs."""

    #: What the optimiser maximises, in its messages.
    _objective_name = "log marginal likelihood"
    _saved_private = ("_bounds", "_y_ndim", "_y_train_mean", "_y_train_std")  # private state that mercer.io saves

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: the memory budget, and the learnable view of the kernel,
        rebuilt from ``kernel_`` (the same structure and hyperparameter layout as the one optimised,
        whose values only set the starting point). Names saved by mercer 0.1 (``"kernel.gamma"``)
        are read in today's form (``"kernel__gamma"``)."""
        super()._after_load()
        self._learn_noise = "noise" in self.hyperparameter_names_
        self._noise0 = self.noise_
        if self._restore_sklearn_mode():
            return
        self._sk, self._kernel = None, self.kernel_
        lk = LearnableKernel(self.kernel_, self.n_features_in_, self._bounds)
        self.hyperparameter_names_ = [str(n).replace(".", "__") for n in self.hyperparameter_names_]
        if list(lk.names) != list(self.hyperparameter_names_[: len(lk.names)]):
            raise ValueError(f"{type(self).__name__}: the saved hyperparameter names {self.hyperparameter_names_} do "
                             f"not match the kernel's {lk.names}.")
        self._lk, self._n_kernel = lk, len(lk.names)

    # -- fit helpers ---------------------------------------------------------------------------
    def _sklearn_mode(self) -> bool:
        """Whether the GP follows scikit-learn's semantics (see :mod:`._sklearn_mode`)."""
        return False

    def _restore_sklearn_mode(self) -> bool:
        """After loading a GP fitted in scikit-learn's mode: its mapping and mercer kernel."""
        return False

    def _check_params(self):
        owner = type(self).__name__
        check_params(self)
        if (self.learn_noise and not isinstance(self.noise, str) and self.noise == 0
                and getattr(self, "alpha", None) is None and not self._sklearn_mode()):
            raise ValueError(f"The 'noise' parameter of {owner} must be a float in the range (0, inf) when "
                             f"learn_noise=True (it is learned as its logarithm). Got {self.noise!r} instead.")
        self._bounds = check_bounds(owner, "hyperparameter_bounds", self.hyperparameter_bounds)
        self._noise_bounds = check_bounds(owner, "noise_bounds", self.noise_bounds)

    def _prepare(self, X, y):
        self._check_params()
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        check_target_scale(type(self).__name__, y)
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
        self._setup_noise(Y)
        return X, Y, kernel

    def _setup_noise(self, Y: np.ndarray) -> None:
        """``_learn_noise`` and ``_noise0``: the starting (or fixed) noise variance, a float or a
        per-sample array. ``noise="auto"`` starts a learned noise at a tenth of the (normalised)
        targets' variance and fixes an unlearned one at 1e-2: starting near zero noise, the
        optimiser can stop at the interpolating optimum (standardised load_diabetes: LML -469.7,
        test R^2 0.00, against -353.1 and 0.346 from 0.1). ``alpha`` (scikit-learn's name) fixes
        it; so does scikit-learn's mode, where it defaults to 1e-10 as there."""
        n = Y.shape[0]
        alpha = getattr(self, "alpha", None)
        if alpha is None and not self._sklearn_mode():
            noise = self.noise
            if isinstance(noise, str):  # "auto"
                var = float(np.mean(Y.var(axis=0))) if n > 1 else 0.0
                noise = 0.1 * var if self.learn_noise and var > 0 else 1e-2
                lo, hi = self._noise_bounds
                noise = min(max(noise, lo), hi)
            self._learn_noise, self._noise0 = bool(self.learn_noise), float(noise)
            return
        alpha = 1e-10 if alpha is None else alpha
        a = np.asarray(alpha, dtype=np.float64)
        if a.ndim > 1 or (a.ndim == 1 and a.shape[0] != n) or not np.all(np.isfinite(a) & (a >= 0)):
            got = a.shape[0] if a.ndim == 1 else a.shape
            raise ValueError(f"The 'alpha' parameter of {type(self).__name__}: alpha must be a scalar or an array with "
                             f"same number of entries as y, non-negative. ({got} != {n})")
        self._learn_noise, self._noise0 = False, (float(a) if a.ndim == 0 else a)

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
        if self._learn_noise:
            lo, hi = self._noise_bounds
            names.append("noise")
            bounds = np.vstack([bounds, [[math.log(lo), math.log(hi)]]])
            theta = np.append(theta, math.log(min(max(self._noise0, lo), hi)))
        return names, theta, bounds

    def _split(self, theta: torch.Tensor, n_kernel: int):
        """The kernel's log-hyperparameters (mercer's layout) and the noise variance (0-d, or
        1-d per sample) from the optimised vector ``theta``."""
        noise = torch.exp(theta[n_kernel]) if self._learn_noise else torch.as_tensor(
            self._noise0, dtype=theta.dtype, device=theta.device)
        return self._kernel_theta(theta[:n_kernel]), noise

    def _kernel_theta(self, theta_k: torch.Tensor) -> torch.Tensor:
        """mercer's log-hyperparameters from the optimised ones (the same, but in scikit-learn's mode)."""
        return theta_k

    def _run_optimizer(self, loss_fn, theta0, bounds, names, perturb=None):
        owner = type(self).__name__
        rng = check_random_state(self.random_state)
        t0 = time.perf_counter()
        sk = self._sklearn_mode()  # restarts drawn uniformly within the bounds, as scikit-learn
        if sk and self.n_restarts_optimizer > 0 and not np.all(np.isfinite(bounds)):
            raise ValueError("Multiple optimizer restarts (n_restarts_optimizer>0) requires that all bounds are finite.")
        best, runs = optimize(loss_fn, theta0, bounds, method=self.optimizer, max_iter=self.max_iter,
                              n_restarts=self.n_restarts_optimizer, rng=rng, dtype=self._dtype,
                              device=self._device, perturb=perturb, desc=f"{owner}: {self._objective_name}",
                              **({"spread": None} if sk else {}))
        self.optimizer_results_ = [r.as_dict() for r in runs]
        self.optimizer_converged_ = bool(best.converged)
        self.n_iter_ = max(1, int(best.n_iter))
        log.info("%s: hyperparameters learned in %.2f s (%d starts)", owner, time.perf_counter() - t0, len(runs))
        # scikit-learn's mode warns with scikit-learn's kernel (_check_bounds_params), after the fit
        report(best, runs, names, bounds[: len(names)], owner=owner, what=self._objective_name, bound_warnings=not sk)
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

    def _fitted_hyperparameters(self, lk, kernel, theta) -> None:
        """``theta_``, ``kernel_`` and ``noise_`` from the learned ``theta`` (or the given values)."""
        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.kernel_ = lk.build(theta[: self._n_kernel]) if self.optimizer is not None else kernel
        self.noise_ = float(np.exp(theta[-1])) if self._learn_noise and self.optimizer is not None else self._noise0

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

    def _finish_mean_std(self, means: list, variances: list, n_targets: int, X, return_std: bool):
        """Concatenate the blocks of a prediction; the standard deviation from the (clipped) variances."""
        mean = torch.cat(means) if means else torch.zeros(0, n_targets, dtype=self._dtype, device=self._device)
        if not return_std:
            return self._finish(mean, X)
        var = torch.cat(variances) if variances else torch.zeros(0, dtype=self._dtype, device=self._device)
        var = self._finish(_clip_negative(var, type(self).__name__), X, var=True)
        return self._finish(mean, X), (np.sqrt(var) if isinstance(var, np.ndarray) else torch.sqrt(var))

    def _rows_per_block(self, n: int, n_cols: int, factor: float, what: str, *, capped: bool = False) -> int:
        """Rows of a block over ``n`` points that holds ``factor`` kernel rows of ``n_cols`` entries per point
        (``capped``: at most the planner's largest tile, so that a pass over any n holds the same memory)."""
        return plan_rows(n, factor * n_cols * torch.finfo(self._dtype).bits / 8, budget=self._budget,
                         **({} if capped else {"max_bytes": None}), what=f"{type(self).__name__}: {what}")

    def sample_y(self, X, n_samples: int = 1, random_state=0):
        """Draw samples from the posterior predictive of ``f`` at ``X``, as scikit-learn does
        (``numpy`` ``RandomState.multivariate_normal`` on the predictive mean and covariance):
        shape (n, n_samples) for one target, (n, n_targets, n_samples) for several."""
        check_param(f"{type(self).__name__}.sample_y", "n_samples", n_samples,
                    [Interval(numbers.Integral, 1, None, closed="left")])
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
        tags.input_tags.sparse = self._sparse_refusal is None  # SparseGPRegressor refuses sparse X by name
        return tags
