"""Parameter tables and small checks shared by the clustering estimators."""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
import torch

from ..._backend import to_numpy
from ..._validation import Interval, Options, describe, is_torch

__all__ = ["KMEANS_CONSTRAINTS", "check_init", "resolve_n_init", "sample_weights"]

_INIT_RULES = Options("k-means++", "random")


class _InitArray:
    """Constraint (for :func:`mercer._validation.check_param`): initial centres given as an array,
    i.e. anything with a length or a shape but a string; its shape is checked by :func:`check_init`."""

    def accepts(self, v) -> bool:
        # not a dict (a mapping of names), nor a numpy scalar (its shape is ())
        return not isinstance(v, (str, bytes, dict)) and (hasattr(v, "__len__") or len(getattr(v, "shape", ())) > 0)

    def __str__(self) -> str:
        return "an array-like of shape (n_clusters, n_features)"


#: Parameters of the Lloyd-type estimators (KMeans, KernelKMeans).
KMEANS_CONSTRAINTS: dict = {
    "n_clusters": [Interval(Integral, 1, None, closed="left")],
    "init": [_INIT_RULES, _InitArray()],
    "n_init": [Options("auto"), Interval(Integral, 1, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, math.inf, closed="left")],
    "random_state": ["random_state"],
}


def check_init(owner: str, init, k: int, d: int):
    """``init`` (already checked against the table) as the rule name or a float64 array of shape
    ``(k, d)``, the shape the data ask for (a callable, which only KMeans admits, is returned as is)."""
    if isinstance(init, str) or callable(init):
        return init
    arr = to_numpy(init) if is_torch(init) else np.asarray(init, dtype=np.float64)
    if arr.shape != (k, d):
        # then scikit-learn's sentence (users and its tests search for it)
        what = f"clusters {k}" if arr.ndim < 1 or arr.shape[0] != k else f"features of the data {d}"
        raise ValueError(f"The 'init' parameter of {owner} must be an array of shape (n_clusters, n_features) = "
                         f"({k}, {d}). Got {describe(arr)} instead. The shape of the initial centers {arr.shape} "
                         f"does not match the number of {what}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The 'init' parameter of {owner} must be finite. Got an array containing NaN or "
                         "infinity instead.")
    return arr


def resolve_n_init(owner: str, n_init, init) -> int:
    """Restarts: "auto" is 10 for ``init="random"`` (or a callable), else 1; an explicit array of
    centres gets one run (with a ``RuntimeWarning`` when more were asked for)."""
    if isinstance(n_init, str):
        return 10 if (isinstance(init, str) and init == "random") or callable(init) else 1
    if not isinstance(init, str) and not callable(init) and n_init != 1:
        warnings.warn(f"Explicit initial center position passed: performing only one init in {owner} "
                      f"instead of n_init={n_init}.", RuntimeWarning, stacklevel=3)
        return 1
    return int(n_init)


def sample_weights(est, sample_weight, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """``sample_weight`` (n,) as a tensor (None when not given); at least one must be positive."""
    sw = est._sample_weight(sample_weight, None, n)
    if sw is None:
        return None
    if not np.any(sw > 0):
        raise ValueError(f"{type(est).__name__}: sample_weight sums to zero; at least one sample needs a positive weight.")
    return torch.tensor(np.array(sw), dtype=dtype, device=device)
