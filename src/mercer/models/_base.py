"""Shared plumbing of mercer estimators: kernel resolution, device/dtype, input conversion."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.validation import _check_sample_weight

from .._backend import resolve_device, resolve_dtype, to_tensor
from .._validation import check_array_like, describe, is_torch
from ..kernels import resolve_kernel
from ..linalg import default_memory_budget

__all__ = ["KernelEstimatorMixin"]


class KernelEstimatorMixin:
    """Mixin for estimators with scikit-learn-style ``kernel, gamma, degree, coef0, kernel_params``
    parameters and mercer's ``device, dtype, memory_budget``."""

    def _resolve_kernel(self):
        return resolve_kernel(self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                              kernel_params=self.kernel_params, owner=type(self).__name__)

    def _setup_compute(self, X) -> None:
        """Fix device, dtype and memory budget for this fit (called once per ``fit``)."""
        device = self.device
        if device is None and is_torch(X):
            device = X.device
        self._device = resolve_device(device)
        self._dtype = resolve_dtype(self.dtype, X)
        if self.memory_budget is not None and (
            not isinstance(self.memory_budget, (int, np.integer)) or isinstance(self.memory_budget, bool)
            or self.memory_budget <= 0
        ):
            raise ValueError(
                f"The 'memory_budget' parameter of {type(self).__name__} must be a positive int "
                f"(bytes) or None. Got {describe(self.memory_budget)} instead."
            )
        self._budget = default_memory_budget(self._device, self.memory_budget)

    def _tensor(self, X) -> torch.Tensor:
        return to_tensor(X, dtype=self._dtype, device=self._device)

    def _validate_X(self, X, *, reset: bool):
        return check_array_like(self, X, reset=reset, accept_sparse=True)

    def _validate_y(self, y, n_samples: int, *, multi_output: bool = True):
        """Numeric targets as a float64 numpy array of shape (n,) or (n, t)."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        if is_torch(y):
            y = y.detach().cpu().numpy()
        from sklearn.utils.validation import check_array

        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y", ensure_min_samples=1)
        if y.ndim > 2 or (y.ndim == 2 and not multi_output):
            raise ValueError(f"y must be 1-D{' or 2-D' if multi_output else ''}; got shape {y.shape}.")
        if y.shape[0] != n_samples:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n_samples}, {y.shape[0]}]"
            )
        return y

    def _sample_weight(self, sample_weight, X_like, n: int):
        if sample_weight is None:
            return None
        if is_torch(sample_weight):
            sample_weight = sample_weight.detach().cpu().numpy()
        sw = _check_sample_weight(sample_weight, np.empty((n, 0)), dtype=np.float64)
        if (sw < 0).any():
            raise ValueError("sample_weight must be non-negative; got negative weights.")
        return sw
