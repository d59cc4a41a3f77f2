"""Input checks and error-message helpers shared by every estimator.

numpy, pandas and scipy.sparse inputs go through scikit-learn's ``validate_data`` so that errors
read exactly like scikit-learn's; torch tensors are checked here without leaving their device.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted, validate_data  # noqa: F401  (re-export)

__all__ = [
    "check_array_like",
    "describe",
    "is_torch",
]


def is_torch(X) -> bool:
    return isinstance(X, torch.Tensor)


def describe(value) -> str:
    """Short description of a received value for error messages."""
    if isinstance(value, torch.Tensor):
        return f"torch.Tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    if isinstance(value, np.ndarray):
        return f"ndarray(shape={value.shape}, dtype={value.dtype})"
    return repr(value)


def _check_torch_X(X: torch.Tensor, *, name: str, owner: str, ensure_min_samples: int) -> torch.Tensor:
    if X.ndim != 2:
        raise ValueError(
            f"{owner} expected a 2-D {name} (n_samples, n_features); got ndim = {X.ndim} "
            f"({describe(X)}). Reshape 1-D data with X.reshape(-1, 1)."
        )
    if not (X.is_floating_point() or X.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)):
        raise ValueError(f"{owner} expected a real-valued {name}; got {describe(X)}.")
    if X.shape[0] < ensure_min_samples:
        raise ValueError(
            f"Found array with {X.shape[0]} sample(s) (shape={tuple(X.shape)}) while a minimum of "
            f"{ensure_min_samples} is required by {owner}."
        )
    if X.shape[1] < 1:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={tuple(X.shape)}) while a minimum of 1 is "
            f"required by {owner}."
        )
    if X.is_floating_point() and not bool(torch.isfinite(X).all()):
        raise ValueError(f"Input {name} contains NaN or infinity ({owner}).")
    return X


def check_array_like(
    estimator,
    X,
    *,
    reset: bool,
    accept_sparse: bool = False,
    ensure_min_samples: int = 1,
    name: str = "X",
):
    """Validate a feature matrix for ``estimator``; returns a numpy/scipy array or a torch tensor.

    Records ``n_features_in_`` (and ``feature_names_in_`` for pandas) when ``reset`` is true and
    checks it otherwise, with scikit-learn's own messages.
    """
    owner = type(estimator).__name__
    if is_torch(X):
        X = _check_torch_X(X, name=name, owner=owner, ensure_min_samples=ensure_min_samples)
        if reset:
            estimator.n_features_in_ = int(X.shape[1])
            if hasattr(estimator, "feature_names_in_"):
                del estimator.feature_names_in_
        elif X.shape[1] != estimator.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {owner} is expecting "
                f"{estimator.n_features_in_} features as input."
            )
        return X
    return validate_data(
        estimator,
        X,
        reset=reset,
        accept_sparse=("csr",) if accept_sparse else False,
        dtype=[np.float64, np.float32],
        ensure_min_samples=ensure_min_samples,
    )
