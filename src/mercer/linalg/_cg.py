"""Preconditioned conjugate gradient for symmetric positive definite operators, many right-hand
sides at once (one independent CG per column, vectorised: each column has its own step sizes
and stops when its own residual is small)."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from numbers import Integral, Real
from typing import Callable

import torch

from .._progress import task
from .._validation import Interval, check_param

__all__ = ["CGResult", "CGState", "conjugate_gradient"]

log = logging.getLogger(__name__)

_OWNER = "conjugate_gradient"


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


@dataclasses.dataclass
class CGState:
    """The solver's state after an iteration: enough to resume it to the same iterates.

    Attributes
    ----------
    x, r, d : tensors of shape (n, t)
        Iterate, residual ``b - A x`` (recursively updated) and next search direction.
    rz : tensor of shape (t,)
        ``<r, P r>`` per column.
    active : bool tensor of shape (t,)
        Columns still iterating.
    n_iter : int
        Iterations done.
    history : list of float
        As :attr:`CGResult.history`, up to ``n_iter``.
    """

    x: torch.Tensor
    r: torch.Tensor
    d: torch.Tensor
    rz: torch.Tensor
    active: torch.Tensor
    n_iter: int
    history: list


def _cols(v: torch.Tensor) -> tuple[torch.Tensor, bool]:
    return (v[:, None], True) if v.ndim == 1 else (v, False)


def conjugate_gradient(matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, *,
                       preconditioner: Callable[[torch.Tensor], torch.Tensor] | None = None,
                       x0: torch.Tensor | None = None, tol: float = 1e-6, max_iter: int | None = None,
                       callback: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None,
                       resume: CGState | None = None,
                       save_state: Callable[[CGState], None] | None = None) -> CGResult:
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
    resume : CGState, optional
        Continue from a state ``save_state`` received (for the same ``matvec``, ``b`` and
        preconditioner): the iterates are those of the uninterrupted run. ``x0`` is then ignored.
    save_state : callable, optional
        ``save_state(state)`` after each iteration that is followed by another (a checkpoint);
        the state's tensors are the solver's own, valid during the call only (copy or write them).
    """
    check_param(_OWNER, "tol", tol, [Interval(Real, 0, None, closed="left")])
    check_param(_OWNER, "max_iter", max_iter, [Interval(Integral, 0, None, closed="left"), None])
    B, squeeze = _cols(b)
    max_iter = max(10, B.shape[0]) if max_iter is None else int(max_iter)
    P = preconditioner if preconditioner is not None else (lambda r: r)
    bnorm = torch.linalg.vector_norm(B, dim=0)
    if resume is not None:
        X, R = _cols(resume.x)[0].to(B).clone(), _cols(resume.r)[0].to(B).clone()
        if X.shape != B.shape or R.shape != B.shape:
            raise ValueError(f"{_OWNER}: the resumed state has shape {tuple(X.shape)}; b has {tuple(B.shape)}.")
    else:
        X, R = _start(matvec, B, x0)
    with task("conjugate gradient", total=max_iter, unit="it") as bar:
        it, rel, history = _iterate(matvec, P, X, R, bnorm, tol, max_iter, _with_bar(bar, callback, tol, max_iter),
                                    resume=resume, save_state=save_state)
    converged = bool((rel <= tol).all()) and math.isfinite(float(rel.max()) if rel.numel() else 0.0)
    return CGResult(X[:, 0] if squeeze else X, it, rel, converged, history)


def _with_bar(bar, callback, tol: float, max_iter: int):
    """``callback`` that also moves the progress bar: the residual, and as total the iteration at
    which the residual's geometric decrease so far would reach ``tol`` (so the ETA means something)."""
    def step(it: int, X: torch.Tensor, rel: torch.Tensor) -> None:
        if callback is not None:
            callback(it, X, rel)
        if bar:
            r = float(rel.max())
            guess = math.ceil(it * math.log(tol) / math.log(r) - 1e-9) if tol > 0 and 0 < r < 1 else max_iter
            bar.update(it, total=min(max_iter, max(it, guess)), residual=r)
        else:
            bar.update(it)

    return step


def _start(matvec, B: torch.Tensor, x0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The starting point ``X`` (a fresh tensor, updated in place) and its residual ``B - A X``."""
    if x0 is None:
        return torch.zeros_like(B), B.clone()
    X, _ = _cols(x0.to(dtype=B.dtype, device=B.device))
    X = X.clone()
    return X, B - matvec(X)


def _relative(R: torch.Tensor, bnorm: torch.Tensor) -> torch.Tensor:
    """``||r|| / ||b||`` per column (0 for a zero right-hand side)."""
    rel = torch.linalg.vector_norm(R, dim=0) / torch.where(bnorm > 0, bnorm, torch.ones_like(bnorm))
    return torch.where(bnorm > 0, rel, torch.zeros_like(rel))


def _iterate(matvec, P, X: torch.Tensor, R: torch.Tensor, bnorm: torch.Tensor, tol: float, max_iter: int,
             callback, *, resume: CGState | None = None, save_state=None) -> tuple[int, torch.Tensor, list]:
    """The CG iterations, updating ``X`` and ``R`` in place; each column stops at its own ``tol``.
    Returns the iteration count, the final relative residuals and their history (max over columns)."""
    rel = _relative(R, bnorm)
    if resume is None:
        history: list[float] = []
        active = rel > tol
        Z = P(R)
        D = Z.clone()
        rz = (R * Z).sum(dim=0)
        it = 0
    else:
        history = [float(h) for h in resume.history]
        active = resume.active.to(device=R.device, dtype=torch.bool).reshape(-1).clone()
        D = _cols(resume.d)[0].to(R).clone()
        rz = resume.rz.to(R).reshape(-1).clone()
        it = int(resume.n_iter)
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
        rel = _relative(R, bnorm)
        history.append(float(rel.max()))
        active = ok & (rel > tol)
        if callback is not None:
            callback(it, X, rel)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("CG iteration %d: max relative residual %.3e (%.1f s)", it, history[-1], time.perf_counter() - t0)
        if not bool(active.any()):
            break
        rz = _next_direction(D, P(R), R, rz, active)
        if save_state is not None:
            save_state(CGState(X, R, D, rz, active, it, history))
    return it, rel, history


def _next_direction(D: torch.Tensor, Z: torch.Tensor, R: torch.Tensor, rz: torch.Tensor,
                    active: torch.Tensor) -> torch.Tensor:
    """``D <- Z + beta D`` (in place) with ``Z = P R``, ``beta = <r, z>_new / <r, z>_old`` on the
    active columns; returns the new ``<r, z>``."""
    rz_new = (R * Z).sum(dim=0)
    beta = torch.where(active, rz_new / torch.where(rz != 0, rz, torch.ones_like(rz)), torch.zeros_like(rz))
    D.mul_(beta).add_(Z)
    return torch.where(active, rz_new, rz)
