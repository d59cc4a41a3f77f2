"""Cholesky factorisation with automatic jitter, in place where the device allows it."""

from __future__ import annotations

import dataclasses
import logging
import warnings

import numpy as np
import torch

__all__ = ["CholeskyFactor", "jittered_cholesky", "NumericalWarning"]

log = logging.getLogger(__name__)


class NumericalWarning(UserWarning):
    """A matrix was numerically singular or indefinite and was regularised (jitter added)."""


@dataclasses.dataclass
class CholeskyFactor:
    """Lower-triangular ``L`` with ``L L^T = A + jitter I``.

    ``L`` occupies the memory of the factored matrix (the factorisation runs in place).
    """

    L: torch.Tensor
    jitter: float

    def solve(self, B: torch.Tensor) -> torch.Tensor:
        """``(A + jitter I)^{-1} B`` for ``B`` of shape ``(n,)`` or ``(n, t)``: two triangular
        solves on ``L`` as stored (``cholesky_solve`` would first copy ``L``: one more n x n buffer)."""
        squeeze = B.ndim == 1
        B2 = B[:, None] if squeeze else B
        Y = torch.linalg.solve_triangular(self.L, B2, upper=False)
        X = torch.linalg.solve_triangular(self.L.mT, Y, upper=True)
        return X[:, 0] if squeeze else X


def _try_factor(A: torch.Tensor) -> bool:
    """Factor ``A`` in place (lower triangle read, lower factor written). True on success.

    torch's own LAPACK (MKL on CPU, cuSOLVER on CUDA) -- the same thread pool as the kernel
    computation: SciPy's OpenBLAS threads fight torch's OpenMP threads for the cores (measured
    3-8x slower here) and hold the GIL. The factorisation runs on the transposed view
    ``A.mT``, which is column-major, so LAPACK works in place (``out=A`` on the row-major
    matrix would make a full copy): the upper factor of ``A.mT`` is ``L`` in ``A``'s lower triangle.
    """
    info = torch.empty((), dtype=torch.int32, device=A.device)
    U = A.mT
    torch.linalg.cholesky_ex(U, upper=True, out=(U, info))
    return int(info) == 0


def jittered_cholesky(A: torch.Tensor, *, rebuild=None, max_tries: int = 6, owner: str = "mercer") -> CholeskyFactor:
    """Cholesky factor of the symmetric matrix ``A`` (only its lower triangle is read), in place.

    When ``A`` is numerically not positive definite, ``jitter * I`` is added, starting at
    ``1e-10 * mean(diag(A))`` (``1e-6`` in float32) and growing tenfold per try, and a
    :class:`NumericalWarning` says how much was added. ``A`` is overwritten by the factor, so a
    retry needs a fresh copy: ``rebuild()`` must return one (without it, a copy of ``A`` is kept
    up front, which doubles memory).
    """
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"The 'A' parameter of jittered_cholesky must be a square matrix. Got a tensor of shape "
                         f"{tuple(A.shape)} instead.")
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
