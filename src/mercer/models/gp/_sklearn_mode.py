"""scikit-learn's semantics for a GP given scikit-learn's kernel objects (or ``kernel=None``).

A scikit-learn script that switches to mercer by changing one import passes scikit-learn's
kernels and reads scikit-learn's attributes: ``kernel_`` is a scikit-learn kernel with the
learned hyperparameters, ``log_marginal_likelihood(theta)`` takes that kernel's ``theta`` (the
logarithms of its non-fixed hyperparameters, in its order and units, within its ``bounds``), the
noise is ``alpha`` (default 1e-10, fixed; a ``WhiteKernel`` learns one) and no output scale is
added. mercer's own semantics (``noise`` learned, an output scale added) apply to mercer kernels.

The computation stays mercer's: the kernel is converted once (:func:`mercer.kernels.from_sklearn`)
and learned through :class:`mercer.kernels.LearnableKernel`. Every conversion is a power law in
each hyperparameter (``gamma = 1 / (2 l^2)``, ``value = sigma_0^2``, identities), so mercer's
log-hyperparameters are an affine function of scikit-learn's, ``theta_m = c + J theta_s``
(:class:`SklearnTheta`); ``J`` is read off the conversion by unit steps in each coordinate (exact
for an affine map; an exponentiated kernel's copies share a column). The optimiser works in
scikit-learn's ``theta`` with scikit-learn's bounds, so both libraries optimise the same function
over the same box.
"""

from __future__ import annotations

import numpy as np
import torch

from ...kernels import LearnableKernel, from_sklearn

__all__ = ["SklearnTheta", "default_kernel"]


def default_kernel(fixed: bool):
    """scikit-learn's default GP kernel: ``ConstantKernel(1.0) * RBF(1.0)`` for a fit, both
    ``"fixed"`` for the prior of an unfitted GP (as scikit-learn does)."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    if fixed:
        return ConstantKernel(1.0, constant_value_bounds="fixed") * RBF(1.0, length_scale_bounds="fixed")
    return ConstantKernel(1.0) * RBF(1.0)


def _log_values(lk: LearnableKernel) -> np.ndarray:
    """mercer's log-hyperparameters before any clipping into bounds."""
    if not lk.hyperparameters:
        return np.zeros(0)
    return np.log(np.concatenate([h.value for h in lk.hyperparameters]))


class SklearnTheta:
    """scikit-learn's ``theta`` of ``kernel`` mapped onto mercer's learnable kernel.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
    n_features : int
    owner : str
        The estimator, named in errors.

    Attributes
    ----------
    learnable : LearnableKernel
        mercer's view of the converted kernel.
    theta0, bounds, names :
        scikit-learn's ``kernel.theta``, ``kernel.bounds`` and one name per entry of theta.
    """

    def __init__(self, kernel, n_features: int, owner: str):
        self.kernel = kernel
        self.learnable = LearnableKernel(from_sklearn(kernel), n_features)
        self.theta0 = np.asarray(kernel.theta, dtype=np.float64)
        self.bounds = np.asarray(kernel.bounds, dtype=np.float64).reshape(-1, 2)
        self.names = [name for h in kernel.hyperparameters if not h.fixed
                      for name in ([h.name] if h.n_elements == 1 else [f"{h.name}[{i}]" for i in range(h.n_elements)])]
        m0 = _log_values(self.learnable)
        J = np.zeros((m0.size, self.theta0.size))
        for i in range(self.theta0.size):
            step = kernel.clone_with_theta(self.theta0 + np.eye(self.theta0.size)[i])
            lk = LearnableKernel(from_sklearn(step), n_features)
            if lk.names != self.learnable.names:  # pragma: no cover - a conversion that changes shape
                raise ValueError(f"{owner}: the scikit-learn kernel {kernel} cannot be learned through mercer's "
                                 "kernels (its structure changes with its hyperparameters).")
            J[:, i] = _log_values(lk) - m0
        self.J, self.c = J, m0 - J @ self.theta0

    def mercer_theta(self, theta: torch.Tensor) -> torch.Tensor:
        """mercer's log-hyperparameters at scikit-learn's ``theta`` (differentiable)."""
        J = torch.as_tensor(self.J, dtype=theta.dtype, device=theta.device)
        return torch.as_tensor(self.c, dtype=theta.dtype, device=theta.device) + J @ theta

    def build(self, theta: np.ndarray):
        """mercer's kernel at scikit-learn's ``theta`` (plain floats)."""
        return self.learnable.build(self.c + self.J @ np.asarray(theta, dtype=np.float64))
