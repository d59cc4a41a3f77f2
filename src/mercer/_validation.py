"""Input checks and error-message helpers shared by every estimator.

numpy, pandas and scipy.sparse inputs go through scikit-learn's ``validate_data`` so that errors
read exactly like scikit-learn's; torch tensors are checked here without leaving their device.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted, validate_data  # noqa: F401  (re-export)

__all__ = [
    "COMPUTE_CONSTRAINTS",
    "InstanceOf",
    "Interval",
    "Options",
    "check_array_like",
    "check_param",
    "check_at_most",
    "check_params",
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
    if getattr(X, "_mercer_sparse_rows", False) or (is_torch(X) and X.layout != torch.strided):
        return _check_sparse_rows(estimator, X, reset=reset, accept_sparse=accept_sparse, name=name, owner=owner,
                                  ensure_min_samples=ensure_min_samples)
    if is_torch(X):
        # data, not a parameter: off any autograd graph (``detach`` leaves the user's tensor as is)
        X = _check_torch_X(X.detach(), name=name, owner=owner, ensure_min_samples=ensure_min_samples)
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
    try:
        return validate_data(
            estimator,
            X,
            reset=reset,
            accept_sparse=("csr",) if accept_sparse else False,
            dtype=[np.float64, np.float32],
            ensure_min_samples=ensure_min_samples,
        )
    except (ValueError, TypeError) as exc:
        # numpy's own words ("could not convert string to float: 'a'") say neither what nor whose
        if type(exc) in (ValueError, TypeError) and not _NAMES_AN_INPUT.search(str(exc)):
            raise type(exc)(f"{owner} expected a real-valued {name}: {exc}") from exc
        raise


def _check_sparse_rows(estimator, X, *, reset, accept_sparse, name, owner, ensure_min_samples):
    """Sparse rows already in mercer's form (``mercer._sparse.SparseRows``, passed between mercer's
    own estimators) or a torch sparse tensor: the checks of a torch input, on the stored values."""
    if not accept_sparse:
        raise TypeError(f"Sparse data was passed for {name} to {owner}, but dense data is required. Use "
                        "X.toarray() (or X.to_dense()) to convert to a dense array.")
    if X.ndim != 2:
        raise ValueError(f"{owner} expected a 2-D {name} (n_samples, n_features); got ndim = {X.ndim}.")
    values = X.data if getattr(X, "_mercer_sparse_rows", False) else (
        X.values() if X.layout == torch.sparse_coo and X.is_coalesced() else X.coalesce().values()
        if X.layout == torch.sparse_coo else X.values())
    if X.shape[0] < ensure_min_samples:
        raise ValueError(f"Found array with {X.shape[0]} sample(s) (shape={tuple(X.shape)}) while a minimum of "
                         f"{ensure_min_samples} is required by {owner}.")
    if X.shape[1] < 1:
        raise ValueError(f"Found array with 0 feature(s) (shape={tuple(X.shape)}) while a minimum of 1 is "
                         f"required by {owner}.")
    if not values.is_floating_point() or not bool(torch.isfinite(values).all()):
        raise ValueError(f"Input {name} contains NaN or infinity, or is not real-valued ({owner}).")
    if reset:
        estimator.n_features_in_ = int(X.shape[1])
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
    elif X.shape[1] != estimator.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, but {owner} is expecting "
                         f"{estimator.n_features_in_} features as input.")
    return X


#: what scikit-learn's messages about an input say (they are kept as they are)
_NAMES_AN_INPUT = re.compile(r"\bX\b|\by\b|sample\(s\)|feature\(s\)|features")


# -- parameter tables ---------------------------------------------------------------------------
# Each estimator declares the allowed values of its parameters in one ``_parameter_constraints``
# table (scikit-learn's idea); :func:`check_params` checks them all with one message style:
#   "The 'alpha' parameter of KernelRidge must be a float in the range [0, inf). Got -1 instead."
# A constraint is None (the value None), a string among "boolean", "random_state", "array-like",
# "callable", "device", "dtype", a class (an instance of it), or an Interval / Options / InstanceOf.


class Interval:
    """Numbers of ``type`` (``numbers.Integral`` or ``numbers.Real``) between ``left`` and
    ``right`` (``None``: unbounded); ``closed`` in ``"both"``, ``"left"``, ``"right"``, ``"neither"``.
    Booleans, NaN and (for reals with a finite bound on that side) infinities are refused."""

    def __init__(self, type, left, right, *, closed: str = "both"):
        if type not in (numbers.Integral, numbers.Real) or closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"Interval: bad type {type!r} or closed {closed!r}.")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def accepts(self, v) -> bool:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, self.type):
            return False
        if isinstance(v, numbers.Real) and math.isnan(v):
            return False
        lo_ok = self.left is None or (v >= self.left if self.closed in ("both", "left") else v > self.left)
        hi_ok = self.right is None or (v <= self.right if self.closed in ("both", "right") else v < self.right)
        return lo_ok and hi_ok

    def __str__(self) -> str:
        kind = "an int" if self.type is numbers.Integral else "a float"
        lo = "-inf" if self.left is None else self.left
        hi = "inf" if self.right is None else self.right
        lb = "[" if self.closed in ("both", "left") and self.left is not None else "("
        rb = "]" if self.closed in ("both", "right") and self.right is not None else ")"
        return f"{kind} in the range {lb}{lo}, {hi}{rb}"


class Options:
    """One of a fixed set of values (strings by default: ``Options("auto", "dense")``)."""

    def __init__(self, *values, type=str):
        self.values, self.type = values, type

    def accepts(self, v) -> bool:
        return isinstance(v, self.type) and not isinstance(v, (bool, np.bool_)) and v in self.values

    def __str__(self) -> str:
        kind = "a str" if self.type is str else f"a {self.type.__name__}"
        return f"{kind} among {{{', '.join(repr(x) for x in self.values)}}}"


class InstanceOf:
    """Instances of ``cls``, called ``description`` in messages: for a class of a higher layer,
    which this module does not import (``InstanceOf(Kernel, "a mercer kernel")``)."""

    def __init__(self, cls: type, description: str):
        self.cls, self.description = cls, description

    def accepts(self, v) -> bool:
        return isinstance(v, self.cls)

    def __str__(self) -> str:
        return self.description


_NAMED: dict[str, tuple[Callable[[object], bool], str]] = {
    "boolean": (lambda v: isinstance(v, (bool, np.bool_)), "an instance of 'bool'"),
    "random_state": (lambda v: v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                             and 0 <= v < 2**32) or isinstance(v, (np.random.RandomState,
                                                                                    np.random.Generator, torch.Generator)),
                     "an int in the range [0, 4294967295], a RandomState, a Generator or None"),
    # a numpy scalar has a shape, (): not an array-like
    "array-like": (lambda v: not isinstance(v, (str, bytes, dict)) and (hasattr(v, "__len__") or
                                                                         len(getattr(v, "shape", ())) > 0),
                   "an array-like"),
    "callable": (callable, "a callable"),
    "device": (lambda v: isinstance(v, (str, torch.device)), "a torch device or its name ('cpu', 'cuda', 'cuda:1')"),
    "dtype": (lambda v: isinstance(v, str) and v in ("float32", "float64") or v in (torch.float32, torch.float64,
                                                                                   np.float32, np.float64),
              "'float32' or 'float64'"),
}


def _accepts(constraint, v) -> bool:
    if constraint is None:
        return v is None
    if isinstance(constraint, str):
        return _NAMED[constraint][0](v)
    if isinstance(constraint, type):
        return isinstance(v, constraint)
    return constraint.accepts(v)


def _describe_constraint(constraint) -> str:
    if constraint is None:
        return "None"
    if isinstance(constraint, str):
        return _NAMED[constraint][1]
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__!r}"
    return str(constraint)


def _join(parts: list[str]) -> str:
    parts = [p for p in parts if p != "None"] + (["None"] if "None" in parts else [])
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"


def check_param(owner: str, name: str, value, constraints: Iterable) -> None:
    """Raise ``ValueError`` unless ``value`` satisfies one of ``constraints``:
    "The 'name' parameter of owner must be <what>. Got <value> instead." """
    constraints = list(constraints)
    if any(_accepts(c, value) for c in constraints):
        return
    raise ValueError(f"The {name!r} parameter of {owner} must be "
                     f"{_join([_describe_constraint(c) for c in constraints])}. Got {describe(value)} instead.")


def check_params(estimator, constraints: dict | None = None) -> None:
    """Check every parameter of ``estimator`` against its ``_parameter_constraints`` table (or
    ``constraints``); parameters absent from the table are not checked here."""
    table = type(estimator)._parameter_constraints if constraints is None else constraints
    owner = type(estimator).__name__
    for name, allowed in table.items():
        check_param(owner, name, getattr(estimator, name), allowed)


def check_at_most(owner: str, name: str, value, bound: int, bound_name: str = "n_samples") -> None:
    """The one wording of a data-dependent upper bound:
    "The 'n_clusters' parameter of KMeans must be at most n_samples = 5. Got 7 instead." """
    if value > bound:
        raise ValueError(f"The {name!r} parameter of {owner} must be at most {bound_name} = {bound}. "
                         f"Got {describe(value)} instead.")


#: Where and in which precision an estimator computes, and its memory budget in bytes: merged
#: into every estimator's and transformer's ``_parameter_constraints``.
COMPUTE_CONSTRAINTS: dict = {
    "device": ["device", None],
    "dtype": ["dtype", None],
    "memory_budget": [Interval(numbers.Integral, 1, None, closed="left"), None],
}
