"""Validation of kernel hyperparameters (one error style for every kernel)."""

from __future__ import annotations

import numbers

import torch


def positive(owner: str, name: str, value, *, allow_none: bool = False, allow_zero: bool = False):
    """Return ``value`` if it is a finite real > 0 (>= 0 with ``allow_zero``), else raise."""
    if value is None and allow_none:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        ok = bool(torch.isfinite(value.detach())) and bool(value.detach() >= 0 if allow_zero else value.detach() > 0)
        if ok:
            return value
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = float(value)
        if v == v and v not in (float("inf"), float("-inf")) and (v >= 0 if allow_zero else v > 0):
            return v
    rng = "[0, inf)" if allow_zero else "(0, inf)"
    extra = " or None" if allow_none else ""
    raise ValueError(f"The {name!r} parameter of {owner} must be a float in the range {rng}{extra}. Got {value!r} instead.")


def real(owner: str, name: str, value):
    if isinstance(value, torch.Tensor) and value.numel() == 1 and bool(torch.isfinite(value.detach())):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and abs(float(value)) < float("inf"):
        return float(value)
    raise ValueError(f"The {name!r} parameter of {owner} must be a finite float. Got {value!r} instead.")


def resolved_gamma(gamma, n_features: int):
    """``gamma=None`` means ``1 / n_features``, as in scikit-learn's pairwise kernels."""
    return 1.0 / n_features if gamma is None else gamma
