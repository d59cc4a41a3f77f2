"""Distances reused across evaluations of one kernel on the same inputs (hyperparameter learning).

Learning a kernel evaluates it on the same inputs at every step of the optimiser, with new
hyperparameters each time. The pairwise distances do not depend on them, so inside
:func:`reuse_distances` the stationary kernels (RBF, Laplacian and Matern with a scalar scale,
RationalQuadratic, ExpSineSquared) take them from a cache keyed on the input tensors and apply
their formula to the cached matrix, out of place (the cached matrix is never written). Outside the
context nothing is cached and the kernels keep their in-place, one-pass evaluation.

The cached distances are computed from exact differences (``torch.cdist`` without the GEMM
expansion), so a learned optimum does not depend on the cancellation of ``|x|^2 + |y|^2 - 2 x.y``
for inputs far from the origin. Inputs that require grad (learnable inducing points) are never
cached: their distances change at every step.

Measured (n = 1,500, d = 8, one evaluation of ``1.0 * k`` and its gradient in theta, median of 5,
on a busy 2-core machine, alternating runs): RBF 0.63 s recomputing through the GEMM expansion and
autograd, 0.26-0.33 s with the cache, 0.26-0.42 s for the previous separate formulas with their
own cache; Matern (nu = 2.5) 1.36 s, 0.62-0.78 s and 0.77-1.18 s.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

import torch

__all__ = ["reuse_distances", "cached_distances"]

_STORE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("mercer_distance_cache", default=None)


@contextlib.contextmanager
def reuse_distances():
    """Within the block, kernels reuse pairwise distances of inputs they have seen (see the module
    docstring). The cache is dropped at exit. Nested blocks share the outer cache."""
    if _STORE.get() is not None:
        yield
        return
    token = _STORE.set({})
    try:
        yield
    finally:
        _STORE.reset(token)


def _fingerprint(X: torch.Tensor) -> tuple:
    return X._version, X.data_ptr(), tuple(X.shape), X.stride(), X.dtype, X.device


def cached_distances(kind: str, X1: torch.Tensor, X2: torch.Tensor,
                     compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor | None:
    """The matrix ``compute(X1, X2)`` from the active cache (computed and stored on a miss), or
    None when no cache is active or an input requires grad. The result must not be modified."""
    store = _STORE.get()
    if store is None or X1.requires_grad or X2.requires_grad:
        return None
    key = (kind, id(X1), id(X2))
    hit = store.get(key)
    if hit is not None and hit[0] is X1 and hit[1] is X2 and hit[2] == (_fingerprint(X1), _fingerprint(X2)):
        return hit[3]
    with torch.no_grad():
        D = compute(X1, X2)
    store[key] = (X1, X2, (_fingerprint(X1), _fingerprint(X2)), D)  # holds X1, X2: their ids stay theirs
    return D


def exact_distances(X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
    """Euclidean distances from exact differences."""
    return torch.cdist(X1, X2, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")


def exact_sq_distances(X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
    return exact_distances(X1, X2).square_()


def l1_distances(X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
    return torch.cdist(X1, X2, p=1.0)
