"""The one declaration of a kernel's hyperparameters (:class:`Param`), and their validation.

A kernel class lists its hyperparameters once, as a tuple ``PARAMS`` of :class:`Param`; everything
else is derived from it (see :class:`mercer.kernels.Kernel`): the ``__init__`` (generated, or a
hand-written one whose signature is checked against the declaration when the class is created),
``get_params`` / ``set_params`` / ``clone``, ``hyperparameters`` (repr, equality, saving), the
learnable view (:class:`mercer.kernels.LearnableKernel`: which values are learned, and their
default bounds from :attr:`Param.learn`), and the conversion from scikit-learn's GP kernels
(:attr:`Param.sklearn`).

Values are checked by :func:`mercer._validation.check_param`, so messages read as everywhere in
mercer: "The 'gamma' parameter of RBF must be a float in the range (0, inf). Got -1 instead."
A one-element tensor (a learnable hyperparameter) is accepted where its value would be. Checks run
in ``__init__`` only, never per evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
from collections.abc import Callable
from numbers import Real

import numpy as np
import torch

from .._validation import Interval, check_param, describe

__all__ = ["Param", "REQUIRED", "UNITS", "positive", "non_negative", "optional_positive", "real", "scale",
           "optional_scale", "one_of", "constrained", "from_length", "box"]

#: Finite reals > 0, >= 0, and all finite reals (infinities refused: the bounds are +-inf, open).
POSITIVE = Interval(Real, 0, math.inf, closed="neither")
NON_NEGATIVE = Interval(Real, 0, math.inf, closed="left")
FINITE = Interval(Real, -math.inf, math.inf, closed="neither")

#: The default of a parameter that has none (it must be given).
REQUIRED = inspect.Parameter.empty

#: Units of a learnable hyperparameter, relative to a length scale ``l``: its value is ``l``
#: ("length"), ``1 / l`` ("inverse", the Laplacian's gamma) or ``1 / (2 l^2)`` ("inverse_square",
#: the RBF's gamma). A box ``[lo, hi]`` of length scales is a box of the hyperparameter through it.
UNITS = ("length", "inverse", "inverse_square")


@dataclasses.dataclass(frozen=True)
class Param:
    """One hyperparameter of a kernel class, declared once in the class's ``PARAMS``.

    Parameters
    ----------
    name : str
        The ``__init__`` argument, the attribute the validated value is stored under, and its
        name in ``get_params``.
    default : object, default REQUIRED
        The ``__init__`` default (``REQUIRED``: none, the argument must be given).
    check : callable or None
        ``check(owner, name, value) -> stored value``: validates (raising with mercer's message)
        and normalises a value; ``None`` stores it as given. See :func:`positive`, :func:`scale`,
        :func:`one_of`.
    learn : {"length", "inverse", "inverse_square"} or None
        Positive and learned (as its logarithm) by the estimators that learn their kernel, with
        default bounds in this unit of a length-scale box (see :data:`UNITS`); the value must
        then be accepted as a tensor (0-d, or 1-d with ``per_feature``) and be differentiable in
        it. ``None`` (the default): not learned. A learned value of ``None`` starts from
        ``1 / n_features`` (scikit-learn's ``gamma=None``).
    per_feature : bool, default False
        May be a vector, one value per feature (ARD); its check must accept one.
    sklearn : str or None
        The hyperparameter of the scikit-learn GP kernel of the same formula that this one is
        converted from (:func:`mercer.kernels.from_sklearn`), through ``learn``'s unit (values
        and bounds), e.g. RBF's ``gamma`` from scikit-learn's ``length_scale``.
    alias : bool, default False
        Another way to give a value stored under another name (RBF's ``sigma``): ``get_params``
        returns its default and it is not a stored hyperparameter. The class writes its own
        ``__init__``.
    keyword_only : bool, default False
        A keyword-only argument of ``__init__``.
    """

    name: str
    default: object = REQUIRED
    check: Callable | None = None
    learn: str | None = None
    per_feature: bool = False
    sklearn: str | None = None
    alias: bool = False
    keyword_only: bool = False

    def __post_init__(self):
        if not self.name.isidentifier() or self.name.startswith("_"):
            raise ValueError(f"Param name must be a public identifier; got {self.name!r}.")
        if self.learn is not None and self.learn not in UNITS:
            raise ValueError(f"Param {self.name!r}: learn must be one of {UNITS} or None; got {self.learn!r}.")
        if self.sklearn is not None and self.alias:
            raise ValueError(f"Param {self.name!r}: an alias has no scikit-learn counterpart.")

    def validate(self, owner: str, value):
        """The value to store for ``value`` (checked by ``check``, which raises for a bad one)."""
        return value if self.check is None else self.check(owner, self.name, value)


# -- units ----------------------------------------------------------------------------------------
def from_length(unit: str, length: float) -> float:
    """The value, in ``unit``, of a length scale (a float)."""
    if unit == "inverse_square":  # gamma = 1 / (2 l^2)
        return 1.0 / (2.0 * length**2)
    if unit == "inverse":  # gamma = 1 / l
        return 1.0 / length
    return length


def box(unit: str, lo, hi):
    """The box ``(low, high)``, in ``unit``, of a box ``[lo, hi]`` of length scales (floats or
    arrays; a bound of 0 maps to inf)."""
    with np.errstate(divide="ignore"):
        if unit == "inverse_square":  # gamma = 1 / (2 l^2)
            return 1.0 / (2.0 * hi * hi), 1.0 / (2.0 * lo * lo)
        if unit == "inverse":  # gamma = 1 / l
            return 1.0 / hi, 1.0 / lo
    return lo, hi


# -- checks: check(owner, name, value) -> stored value ----------------------------------------------
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


#: A finite real >= 0; a finite real > 0 or None.
non_negative = functools.partial(positive, allow_zero=True)
optional_positive = functools.partial(positive, allow_none=True)


def real(owner: str, name: str, value):
    """Return ``value`` if it is a finite real, else raise."""
    return _checked(owner, name, value, FINITE, False)


def constrained(*constraints, convert: Callable | None = None) -> Callable:
    """A check by :func:`mercer._validation.check_param` against ``constraints`` (the value stored
    as is, or ``convert(value)``)."""
    def check(owner: str, name: str, value):
        check_param(owner, name, value, list(constraints))
        return value if convert is None else convert(value)
    return check


def one_of(*values) -> Callable:
    """A check accepting only ``values`` (stored as a float)."""
    def check(owner: str, name: str, value):
        if value not in values:
            raise ValueError(f"The {name!r} parameter of {owner} must be one of {values}. Got {value!r} instead.")
        return float(value)
    return check


def resolved_gamma(gamma, n_features: int):
    """``gamma=None`` means ``1 / n_features``, as in scikit-learn's pairwise kernels."""
    return 1.0 / n_features if gamma is None else gamma


# -- per-feature scales (ARD) ---------------------------------------------------------------------
class _Scales(tuple):
    """Per-feature values of a kernel scale (ARD): an immutable tuple of positive floats, so a
    kernel holding one stays hashable, compares by value, and is saved by :mod:`mercer.io` as a
    list. It has no single value: ``float()`` of it raises (code that needs one scale, such as
    hyperparameter learning, refuses it with this message)."""

    __slots__ = ()

    def short(self) -> str:
        """Compact text for a kernel's repr: ``[0.5, 1, 2]``, or the ends of a long vector."""
        vals = [f"{v:g}" for v in self]
        if len(vals) > 8:
            return f"[{', '.join(vals[:3])}, ..., {', '.join(vals[-2:])}] ({len(vals)} values)"
        return f"[{', '.join(vals)}]"

    def __float__(self):
        raise TypeError(f"the per-feature (ARD) kernel scale {self.short()} has no single value; code that needs "
                        "one scale does not support per-feature scales. Rescale the features instead (RBF: "
                        "X * sqrt(gamma), Laplacian: X * gamma, Matern: X / length_scale) and use a scalar kernel.")


def _is_vector(value) -> bool:
    """Whether a scale was given per feature: a list, tuple, array of ndim >= 1 or tensor of
    more than one element (a one-element tensor stays a scalar, learnable, hyperparameter)."""
    if isinstance(value, (list, tuple)):
        return True
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, torch.Tensor) and value.ndim >= 1 and value.numel() != 1


def _real_vector(value) -> np.ndarray | None:
    """``value`` (list, tuple, array or tensor) as float64 if it holds real numbers only (no
    booleans), else None."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        real_ = np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)
    else:
        real_ = all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in value)
    return np.asarray(value, dtype=np.float64) if real_ else None


def scale(owner: str, name: str, value, *, allow_none: bool = False):
    """A scale: a positive float as :func:`positive` checks it, or a vector of them (``_Scales``; a
    floating 1-D tensor that requires grad is kept as it is: a learnable per-feature scale)."""
    if not _is_vector(value):
        return positive(owner, name, value, allow_none=allow_none)
    what = (f"The {name!r} parameter of {owner} must be a float in the range (0, inf) or a 1-D array of them "
            "(one per feature)")
    arr = _real_vector(value)
    if arr is None or arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"{what}. Got {describe(value)} instead.")
    if isinstance(value, torch.Tensor) and value.requires_grad:
        return value
    return _Scales(float(v) for v in arr)


optional_scale = functools.partial(scale, allow_none=True)


def _is_ard(value) -> bool:
    """Whether a stored scale is per feature: a ``_Scales`` or a learnable 1-D tensor."""
    return type(value) is _Scales or (isinstance(value, torch.Tensor) and value.ndim == 1 and value.numel() != 1)
