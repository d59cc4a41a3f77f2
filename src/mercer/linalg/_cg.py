"""Preconditioned conjugate gradient for symmetric positive definite operators, many right-hand
sides at once (one independent CG per column, vectorised: each column has its own step sizes
and stops when its own residual is small)."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Callable

import torch

__all__ = ["CGResult", "conjugate_gradient"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class CGResult:
    """What the solver did.

    Attributes
    ----------
    x : tensor
        Solution, same shape as ``b``.
    n_iter : int
        Operator applications after the initial residual (iterations).
    residual : tensor of shape (t,)
        Final relative residual ``||b - A x|| / ||b||`` per column (recursively updated).
    converged : bool
        Every column reached ``tol``.
    history : list of float
        Largest relative residual over the columns after each iteration.
    """

    x: torch.Tensor
    n_iter: int
    residual: torch.Tensor
    converged: bool
    history: list


def _cols(v: torch.Tensor) -> tuple[torch.Tensor, bool]:
    return (v[:, None], True) if v.ndim == 1 else (v, False)


def conjugate_gradient(matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, *,
                       preconditioner: Callable[[torch.Tensor], torch.Tensor] | None = None,
                       x0: torch.Tensor | None = None, tol: float = 1e-6, max_iter: int | None = None,
                       callback: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None) -> CGResult:
    """Solve ``A x = b`` for a symmetric positive definite ``A`` given as ``matvec``.

    Parameters
    ----------
    matvec : callable
        ``V -> A @ V`` for ``V`` of shape ``(n, t)``.
    b : tensor of shape (n,) or (n, t)
    preconditioner : callable, optional
        ``R -> P @ R`` with ``P ~ A^{-1}`` symmetric positive definite. With ``P = A^{-1}``
        exactly, CG converges in one iteration.
    x0 : tensor, optional
        Starting point (default zero).
    tol : float
        Stop a column when ``||r|| <= tol * ||b||``.
    max_iter : int, optional
        Default ``max(10, n)`` (exact arithmetic converges in at most n iterations).
    callback : callable, optional
        ``callback(iteration, x, relative_residuals)`` after each iteration.
    """
    if not tol >= 0:
        raise ValueError(f"conjugate_gradient: tol must be >= 0; got {tol!r}.")
    B, squeeze = _cols(b)
    n, t = B.shape
    max_iter = max(10, n) if max_iter is None else int(max_iter)
    if max_iter < 0:
        raise ValueError(f"conjugate_gradient: max_iter must be >= 0; got {max_iter!r}.")
    P = preconditioner if preconditioner is not None else (lambda r: r)
    bnorm = torch.linalg.vector_norm(B, dim=0)
    safe = torch.where(bnorm > 0, bnorm, torch.ones_like(bnorm))
    if x0 is None:
        X = torch.zeros_like(B)
        R = B.clone()
    else:
        X, _ = _cols(x0.to(dtype=B.dtype, device=B.device))
        X = X.clone()
        R = B - matvec(X)
    rel = torch.linalg.vector_norm(R, dim=0) / safe
    rel = torch.where(bnorm > 0, rel, torch.zeros_like(rel))
    history: list[float] = []
    active = rel > tol
    Z = P(R)
    D = Z.clone()
    rz = (R * Z).sum(dim=0)
    it = 0
    t0 = time.perf_counter()
    while bool(active.any()) and it < max_iter:
        AD = matvec(D)
        dad = (D * AD).sum(dim=0)
        ok = active & (dad > 0)
        if not bool(ok.any()):  # breakdown: A not positive definite along D (or D = 0)
            break
        step = torch.where(ok, rz / torch.where(ok, dad, torch.ones_like(dad)), torch.zeros_like(rz))
        X.add_(D * step)
        R.sub_(AD * step)
        it += 1
        rel = torch.linalg.vector_norm(R, dim=0) / safe
        rel = torch.where(bnorm > 0, rel, torch.zeros_like(rel))
        history.append(float(rel.max()))
        active = ok & (rel > tol)
        if callback is not None:
            callback(it, X, rel)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("CG iteration %d: max relative residual %.3e (%.1f s)", it, history[-1], time.perf_counter() - t0)
        if not bool(active.any()):
            break
        Z = P(R)
        rz_new = (R * Z).sum(dim=0)
        beta = torch.where(active, rz_new / torch.where(rz != 0, rz, torch.ones_like(rz)), torch.zeros_like(rz))
        D.mul_(beta).add_(Z)
        rz = torch.where(active, rz_new, rz)
    converged = bool((rel <= tol).all()) and math.isfinite(float(rel.max()) if rel.numel() else 0.0)
    return CGResult(X[:, 0] if squeeze else X, it, rel, converged, history)
