"""Cholesky factorisation with automatic jitter, in place where the device allows it."""

from __future__ import annotations

import dataclasses
import logging
import warnings

import numpy as np
import scipy.linalg as sla
import torch

__all__ = ["CholeskyFactor", "jittered_cholesky", "NumericalWarning"]

log = logging.getLogger(__name__)


class NumericalWarning(UserWarning):
    """A matrix was numerically singular or indefinite and was regularised (jitter added)."""


@dataclasses.dataclass
class CholeskyFactor:
    """Lower-triangular ``L`` with ``L L^T = A + jitter I``.

    Only the lower triangle of ``L`` is meaningful (the upper one may hold leftovers of ``A``
    when the factorisation ran in place).
    """

    L: torch.Tensor
    jitter: float

    def solve(self, B: torch.Tensor) -> torch.Tensor:
        """``(A + jitter I)^{-1} B`` for ``B`` of shape ``(n,)`` or ``(n, t)``."""
        squeeze = B.ndim == 1
        B2 = B[:, None] if squeeze else B
        if self.L.device.type == "cpu":
            # L is stored C-ordered; its transpose is the F-ordered upper factor LAPACK wants.
            X = sla.cho_solve((self.L.numpy().T, False), B2.numpy(), check_finite=False)
            X = torch.from_numpy(np.ascontiguousarray(X))
        else:
            X = torch.cholesky_solve(B2, torch.tril(self.L), upper=False)
        return X[:, 0] if squeeze else X


def _try_factor(A: torch.Tensor) -> bool:
    """Factor ``A`` in place (lower triangle read, lower factor written). True on success."""
    if A.device.type == "cpu":
        try:
            # A.numpy().T is F-contiguous and shares memory: potrf on its upper triangle writes
            # U = L^T there, i.e. L into A's lower triangle, with no copy of the n x n matrix.
            sla.cho_factor(A.numpy().T, lower=False, overwrite_a=True, check_finite=False)
            return True
        except np.linalg.LinAlgError:
            return False
    L, info = torch.linalg.cholesky_ex(A, upper=False)
    if int(info) != 0:
        return False
    A.copy_(L)
    return True


def jittered_cholesky(A: torch.Tensor, *, rebuild=None, max_tries: int = 6, owner: str = "mercer") -> CholeskyFactor:
    """Cholesky factor of the symmetric matrix ``A`` (only its lower triangle is read), in place.

    When ``A`` is numerically not positive definite, ``jitter * I`` is added, starting at
    ``1e-10 * mean(diag(A))`` (``1e-6`` in float32) and growing tenfold per try, and a
    :class:`NumericalWarning` says how much was added. ``A`` is overwritten by the factor, so a
    retry needs a fresh copy: ``rebuild()`` must return one (without it, a copy of ``A`` is kept
    up front, which doubles memory).
    """
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"jittered_cholesky expects a square matrix; got shape {tuple(A.shape)}.")
    n = A.shape[0]
    diag = torch.diagonal(A).clone()
    if not bool(torch.isfinite(diag).all()):
        raise ValueError(f"{owner}: the matrix to factor contains NaN or infinity.")
    backup = None if rebuild is not None else A.clone()
    scale = float(diag.abs().mean()) if n else 1.0
    scale = scale if scale > 0 else 1.0
    start = 1e-6 if A.dtype == torch.float32 else 1e-10
    jitter = 0.0
    for attempt in range(max_tries + 1):
        if attempt:
            A = rebuild() if rebuild is not None else backup.clone()
            jitter = start * scale * 10 ** (attempt - 1)
            A.diagonal().add_(jitter)
        if _try_factor(A):
            if jitter:
                warnings.warn(
                    f"{owner}: the matrix was not numerically positive definite; added jitter "
                    f"{jitter:.3g} to its diagonal (relative {jitter / scale:.1e}).",
                    NumericalWarning, stacklevel=3,
                )
            return CholeskyFactor(A, jitter)
    raise np.linalg.LinAlgError(
        f"{owner}: Cholesky failed even with jitter {jitter:.3g} (relative {jitter / scale:.1e}); "
        "the matrix is far from positive semi-definite. Check the kernel with "
        "mercer.kernels.check_mercer or increase the regularisation."
    )
