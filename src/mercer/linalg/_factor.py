"""Cholesky factorisation with automatic jitter, in place where the device allows it."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch

from .._progress import task
from ._blocking import _OBSERVER, LAPACK_WORKER_MIN_N, row_blocks

__all__ = ["CholeskyFactor", "blocked_cholesky", "interruptible", "jittered_cholesky", "NumericalWarning", "condition_estimate",
           "warn_ill_conditioned", "ILL_CONDITIONED_ERROR"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Columns per step of :func:`blocked_cholesky`: its GEMMs are (n - k) x k x CHOLESKY_BLOCK; 256
#: to 768 ran within 3 % of each other at n = 5,000-10,000 (float32, one thread).
CHOLESKY_BLOCK = 384
#: Rows from which ``jittered_cholesky(..., blocked=True)`` factors by :func:`blocked_cholesky`
#: (one core, here: n = 2,000 float64 0.045 s vs potrf's 0.050 s, n = 1,000 0.008 vs 0.006 s).
BLOCKED_MIN_N = 2000

#: Seconds between two checks for Ctrl-C (and observer calls) while a worker thread runs LAPACK.
_POLL_S = 0.1


class NumericalWarning(UserWarning):
    """A matrix was numerically singular or indefinite and was regularised (jitter added), or a solve
    was so ill-conditioned that its coefficients are ill-determined (:func:`warn_ill_conditioned`)."""


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
        L = self.L

        def solves() -> torch.Tensor:
            Y = torch.linalg.solve_triangular(L, B2, upper=False)
            return torch.linalg.solve_triangular(L.mT, Y, upper=True)

        X = _interruptible(solves, L, "triangular solve")
        return X[:, 0] if squeeze else X


def _interruptible(call: Callable[[], T], A: torch.Tensor, desc: str, *, min_n: int | None = None) -> T:
    """``call()`` -- one long LAPACK call on ``A`` -- with the calling thread kept responsive.

    On the CPU, from ``min_n`` rows up (:data:`~mercer.linalg._blocking.LAPACK_WORKER_MIN_N` for a
    Cholesky factorisation or triangular solve; an eigendecomposition, ~10x as long at the same
    size, passes :data:`~mercer.linalg._blocking.EIGH_WORKER_MIN_N`), ``call`` runs in
    a worker thread (torch releases the GIL inside the library call, so MKL runs exactly as when
    called directly: same threads, same result bit for bit) while this thread waits in polls of
    :data:`_POLL_S` seconds. Between polls a Ctrl-C (``KeyboardInterrupt``) or an exception raised
    by an :func:`~mercer.linalg.observe_blocks` observer (called as ``observer(desc, 0, n)`` at
    every poll, and ``(desc, n, n)`` at the end) leaves at once, and a :func:`mercer.progress`
    bar shows the elapsed time. LAPACK cannot be stopped halfway: an abandoned worker finishes
    its call in the background, keeping its cores and ``A``'s memory until then (about as long
    as the call had left; a CLI process exits without waiting for it), and ``A`` is left
    partly overwritten. Exceptions raised inside ``call`` propagate here. On CUDA and for small
    matrices ``call`` runs directly (no thread): CUDA kernels are asynchronous anyway. ``call``
    must release the GIL inside its library call (torch's do; SciPy's LAPACK wrappers do not: see
    :func:`mercer.linalg._eig._syevr_top`).
    """
    n = A.shape[0]
    if A.device.type != "cpu" or n < (LAPACK_WORKER_MIN_N if min_n is None else min_n):
        return call()
    observer = _OBSERVER.get()
    outcome: dict = {}
    grad, inference, threads = torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.get_num_threads()

    def work() -> None:
        # OpenMP's team size and torch's autograd modes are per thread: the caller's hold in the
        # worker too (a new thread would otherwise run MKL with OpenMP's default team: at one
        # thread set by the user, two threads on a loaded machine made a 2 ms solve take 1 s)
        try:
            torch.set_num_threads(threads)
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the calling thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name=f"mercer {desc}", daemon=True)
    with task(f"{desc} of {n} rows", unit="", level=logging.DEBUG) as bar:  # a timer in mercer.progress()
        worker.start()
        while True:
            worker.join(_POLL_S)  # a signal handler's exception (Ctrl-C) is raised here
            if not worker.is_alive():
                break
            if observer is not None:
                observer(desc, 0, n)
            bar.update(0)
    if "error" in outcome:
        raise outcome["error"]
    if observer is not None:
        observer(desc, n, n)
    return outcome["value"]



#: The public name of :func:`_interruptible`: a single LAPACK call (factorisation, solve, eigh) run in
#: a worker thread while the calling thread polls for Ctrl-C (for the packages above linalg).
interruptible = _interruptible

def _try_factor(A: torch.Tensor, blocked: bool = False) -> bool:
    """Factor ``A`` in place (lower triangle read, lower factor written). True on success.

    ``blocked`` (CPU, from :data:`BLOCKED_MIN_N` rows): by :func:`blocked_cholesky`, which leaves
    the strict upper triangle (outside the diagonal blocks) as it was instead of zeroing it.

    torch's own LAPACK (MKL on CPU, cuSOLVER on CUDA) -- the same thread pool as the kernel
    computation: SciPy's OpenBLAS threads fight torch's OpenMP threads for the cores (measured
    3-8x slower here) and hold the GIL. The factorisation runs on the transposed view
    ``A.mT``, which is column-major, so LAPACK works in place (``out=A`` on the row-major
    matrix would make a full copy): the upper factor of ``A.mT`` is ``L`` in ``A``'s lower triangle.
    Large CPU matrices are factored in a worker thread so that Ctrl-C is not held for the whole
    call (:func:`_interruptible`).
    """
    if blocked and A.device.type == "cpu" and A.shape[0] >= BLOCKED_MIN_N:
        return blocked_cholesky(A) == 0
    info = torch.empty((), dtype=torch.int32, device=A.device)
    U = A.mT

    def potrf() -> None:
        torch.linalg.cholesky_ex(U, upper=True, out=(U, info))

    _interruptible(potrf, A, "Cholesky factorisation")
    return int(info) == 0


def blocked_cholesky(A: torch.Tensor, *, block: int = CHOLESKY_BLOCK) -> int:
    """Factor the symmetric positive definite ``A`` in place, left-looking by column blocks:
    ``A``'s lower triangle (the only part read) becomes ``L`` with ``L L^T = A``.

    Step ``k`` updates the column block ``A[k:, k:e] -= L[k:, :k] L[k:e, :k]^T`` (one GEMM of
    ``(n - k) x k x block``: all the flops but a ``block / n`` fraction), factors the diagonal block
    and solves the panel below it. The GEMMs run at the BLAS's GEMM speed, where LAPACK's ``potrf``
    (MKL) spends more time in its smaller kernels: n = 10,000 in float32 on one core took 2.7 s
    here, against 3.5 s for ``potrf``. The loop runs over :func:`~mercer.linalg.row_blocks`, so an
    observer (Ctrl-C, progress) is heard after every block. The upper triangle of the diagonal
    blocks is overwritten (with zeros or garbage); the rest of the upper triangle is left alone.

    Parameters
    ----------
    A : tensor of shape (n, n)
        Row-major (C-contiguous rows), float32 or float64; overwritten.
    block : int
        Columns per step.

    Returns
    -------
    info : int
        0 on success; else ``j + 1`` where column ``j`` showed ``A`` not numerically positive
        definite (LAPACK's convention); ``A`` is then partly overwritten.
    """
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.stride(1) != 1:
        raise ValueError(f"The 'A' parameter of blocked_cholesky must be a square matrix with contiguous rows. "
                         f"Got a tensor of shape {tuple(A.shape)} and strides {A.stride()} instead.")
    n = A.shape[0]
    for r in row_blocks(n, block, desc="Cholesky factorisation"):
        k, e = r.start, r.stop
        if k:
            A[k:, k:e].addmm_(A[k:, :k], A[k:e, :k].mT, alpha=-1.0)
        Lkk, info = torch.linalg.cholesky_ex(A[k:e, k:e])
        if int(info):
            return k + int(info)
        A[k:e, k:e] = Lkk
        if e < n:  # L[e:, k:e] = A[e:, k:e] Lkk^{-T}, solved from the left on the column-major view of the panel
            # (torch's right-side solve copied the panel first: 3x slower)
            A[e:, k:e] = torch.linalg.solve_triangular(Lkk, A[e:, k:e].mT, upper=False).mT
    return 0


def jittered_cholesky(A: torch.Tensor, *, rebuild=None, max_tries: int = 6, owner: str = "mercer",
                      blocked: bool = False) -> CholeskyFactor:
    """Cholesky factor of the symmetric matrix ``A`` (only its lower triangle is read), in place.

    When ``A`` is numerically not positive definite, ``jitter * I`` is added, starting at
    ``1e-10 * mean(diag(A))`` (``1e-6`` in float32) and growing tenfold per try, and a
    :class:`NumericalWarning` says how much was added. ``A`` is overwritten by the factor, so a
    retry needs a fresh copy: ``rebuild()`` must return one (without it, a copy of ``A`` is kept
    up front, which doubles memory). ``blocked=True`` factors a CPU matrix (with contiguous rows) of
    :data:`BLOCKED_MIN_N` rows or more by :func:`blocked_cholesky` -- faster than LAPACK's ``potrf``
    there -- and leaves the factor's strict upper triangle unzeroed (read only the lower one).
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
        if _try_factor(A, blocked):
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


#: Relative error of a solve's coefficients from which :func:`warn_ill_conditioned` warns. A backward
#: stable Cholesky solve (and the summation that built the matrix: another engine, another order)
#: perturbs ``A`` by a few ``eps ||A||``, so the coefficients carry a relative error of about
#: ``cond(A) * eps`` (eps of the factor's dtype). Past 1e-3 they have fewer than three reliable digits:
#: two engines (or two machines) give visibly different coefficients, and often predictions differing
#: in the fourth digit, with identical test error. In float64 that is cond > 4.5e12; ordinary problems
#: stay far below (the test suite's direct Nystroem solves: 1e5-1e10). In float32, cond > 8.4e3.
ILL_CONDITIONED_ERROR = 1e-3
#: Inverse power iterations of :func:`condition_estimate` (two triangular solves each).
_COND_ITER = 3
#: Rows per block of :func:`condition_estimate`'s pass over the factor.
_COND_BLOCK = 1024


def _largest_eigenvalue_bound(L: torch.Tensor) -> float:
    """A lower bound of ``lambda_max(L L^T)`` in one pass over ``L``'s lower triangle (by row blocks, no
    n x n copy): the larger of ``A``'s largest diagonal entry (``L``'s largest row norm, squared) and
    the Rayleigh quotient ``1^T A 1 / n = ||L^T 1||^2 / n`` (close to ``lambda_max`` for a kernel
    matrix, whose leading eigenvector is near the all-ones one)."""
    n = L.shape[0]
    u = torch.zeros(n, dtype=L.dtype, device=L.device)  # L^T 1
    ones = torch.ones(_COND_BLOCK, dtype=L.dtype, device=L.device)
    norms = torch.empty(n, dtype=L.dtype, device=L.device)  # squared row norms: diag(A)
    for k in range(0, n, _COND_BLOCK):
        e = min(n, k + _COND_BLOCK)
        D = torch.tril(L[k:e, k:e])
        rows = L[k:e, :k]
        torch.linalg.vector_norm(D, dim=1, out=norms[k:e]).square_()
        if k:
            norms[k:e] += torch.linalg.vector_norm(rows, dim=1).square_()
            u[:k].addmv_(rows.mT, ones[:e - k])
        u[k:e].addmv_(D.mT, ones[:e - k])
    return max(float(norms.max()), float(u.square().sum()) / n)


def condition_estimate(L: torch.Tensor) -> float:
    """A cheap estimate of the 2-norm condition number of ``A = L L^T`` from its Cholesky factor ``L``
    (only the lower triangle is read): O(n^2) work -- one pass over the factor and
    2 :data:`_COND_ITER` triangular solves of one vector -- against the factorisation's n^3 / 3.

    The larger of ``(max L_ii / min L_ii)^2`` (the diagonal holds ``L``'s eigenvalues, so
    ``cond(L) >=`` their ratio, and ``cond(A) = cond(L)^2``) and ``lambda_max`` bounded below
    (:func:`_largest_eigenvalue_bound`) times ``||A^{-1}||_2`` bounded below by :data:`_COND_ITER`
    inverse power iterations from a fixed pseudo-random vector. Each is a lower bound of
    ``cond(A)``: on a kernel matrix the estimate came within a factor 1.4 of it, on random
    orthogonal eigenvectors with log-spaced spectra (where the all-ones Rayleigh quotient sees the mean
    eigenvalue) within 5-18 (tests/test_conditioning.py), so the warning's threshold is crossed a
    little late rather than early. Infinite when ``L`` has a zero (or non-finite) diagonal entry.
    """
    n = L.shape[0]
    if n == 0:
        return 1.0
    d = L.diagonal().abs()
    lo, hi = float(d.min()), float(d.max())
    if not (lo > 0 and math.isfinite(hi)):
        return math.inf
    est = (hi / lo) ** 2
    with torch.no_grad():
        big = _largest_eigenvalue_bound(L)
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.rand(n, 1, generator=g, dtype=torch.float64).sub_(0.5).to(L)
        x /= torch.linalg.vector_norm(x)
        factor = CholeskyFactor(L, 0.0)
        small = 0.0
        for _ in range(_COND_ITER):
            y = factor.solve(x)
            small = float(torch.linalg.vector_norm(y))
            if not math.isfinite(small):
                return math.inf
            if not small > 0:
                break
            x = y / small
    est = max(est, big * small)
    return est if math.isfinite(est) else math.inf


def _user_stacklevel() -> int:
    """The ``stacklevel`` of :func:`warnings.warn` called from this module's caller that points at the
    first frame outside the mercer package (the user's ``fit``; wrappers and call depths vary)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(2), 2  # the caller of warn_ill_conditioned
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def warn_ill_conditioned(L: torch.Tensor, *, owner: str, what: str, advice: str) -> float:
    """Warn (:class:`NumericalWarning`, attributed to the first caller outside mercer) when
    ``condition_estimate(L) * eps`` of ``L``'s dtype exceeds :data:`ILL_CONDITIONED_ERROR`: the
    solution of ``L L^T x = b`` is then ill-determined. ``what`` names the system, ``advice`` says
    what to do. The warning carries the estimate as its ``condition`` attribute. Returns the estimate."""
    cond = condition_estimate(L)
    eps = torch.finfo(L.dtype).eps
    if cond * eps > ILL_CONDITIONED_ERROR:
        w = NumericalWarning(
            f"{owner}: {what} is ill-conditioned (condition number >= {cond:.1e} estimated, in "
            f"{str(L.dtype)[6:]}): the coefficients are ill-determined, relative error up to about "
            f"{min(cond * eps, 1.0):.0e} (another engine or machine may give visibly different ones). {advice}")
        w.condition = cond
        warnings.warn(w, stacklevel=_user_stacklevel())
    return cond
