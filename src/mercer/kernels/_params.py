"""Validation of kernel hyperparameters (one error style for every kernel), run by the kernels'
``__init__`` only, never per evaluation.

Values are checked by :func:`mercer._validation.check_param`, so messages read as everywhere in
mercer: "The 'gamma' parameter of RBF must be a float in the range (0, inf). Got -1 instead."
A one-element tensor (a learnable hyperparameter) is accepted where its value would be.
"""

from __future__ import annotations

import math
from numbers import Real

import torch

from .._validation import Interval, check_param

#: Finite reals > 0, >= 0, and all finite reals (infinities refused: the bounds are +-inf, open).
POSITIVE = Interval(Real, 0, math.inf, closed="neither")
NON_NEGATIVE = Interval(Real, 0, math.inf, closed="left")
FINITE = Interval(Real, -math.inf, math.inf, closed="neither")


def _checked(owner: str, name: str, value, interval: Interval, allow_none: bool):
    """``value`` as a float (a one-element tensor as is) if ``interval`` accepts it, else raise."""
    if allow_none and value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and interval.accepts(float(value.detach())):
        return value
    check_param(owner, name, value, [interval, None] if allow_none else [interval])
    return float(value)


def positive(owner: str, name: str, value, *, allow_none: bool = False, allow_zero: bool = False):
    """Return ``value`` if it is a finite real > 0 (>= 0 with ``allow_zero``), else raise."""
    return _checked(owner, name, value, NON_NEGATIVE if allow_zero else POSITIVE, allow_none)


def real(owner: str, name: str, value):
    """Return ``value`` if it is a finite real, else raise."""
    return _checked(owner, name, value, FINITE, False)


def resolved_gamma(gamma, n_features: int):
    """``gamma=None`` means ``1 / n_features``, as in scikit-learn's pairwise kernels."""
    return 1.0 / n_features if gamma is None else gamma
