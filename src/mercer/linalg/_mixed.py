"""Dense kernel systems ``(K + alpha I) X = B`` solved to float64 accuracy at float32 speed.

The exact ridge solve factors an n x n Gram matrix: n^3 / 3 flops, against ~n^2 d for the Gram
itself. A float32 factorisation runs those flops at twice the float64 rate (AVX-512: 16 lanes
instead of 8), and a float32 factor is a preconditioner good enough for conjugate gradients in
float64 to reach the float64 solution in a few iterations (LAPACK's ``dsposv`` does the same with
plain iterative refinement). The products of those iterations read ``K`` in float64.

Both matrices are n x n tensors of which only the lower triangle is ever written (the Gram is
filled tile by tile below the diagonal, :func:`blocked_cholesky` factors in place, products read
the triangle): the pages of the upper triangles are never touched, so the system never maps them,
and the float64 and float32 triangles together take 6 n^2 bytes of memory -- less than one full
float64 matrix. The float64 triangle is left intact, ready for a float64 factorisation in place
when the float32 path fails.

:func:`mixed_precision_solve` stops when the solution's normwise backward error
``||r||_inf / (||A||_inf ||x||_inf + ||b||_inf)`` is at float64's unit roundoff -- that of a
float64 Cholesky solve -- and reports failure (the caller then factors in float64) when the float32
matrix is not numerically positive definite or the iterations stall: an ``alpha`` too small for
float32 (below ~1e-6 of the kernel's diagonal, typically).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator

import torch

from ._blocking import BlockPlan, plan_blocks, row_blocks
from ._cg import conjugate_gradient
from ._factor import blocked_cholesky

__all__ = ["DIAG_ROWS", "FILL_ROWS", "FILL_TILE_BYTES", "MixedSolveInfo", "fill_lower_gram", "fill_mixed_gram",
           "gram_tile_plan", "lower_gram_tiles", "mixed_precision_solve", "symmetric_matvec"]

log = logging.getLogger(__name__)

#: Rows of the tiles along the diagonal (and of the row blocks of :func:`symmetric_matvec`): the
#: upper triangle of each diagonal square is computed too, ``n / 2`` entries per row.
DIAG_ROWS = 256
#: Most rows of one tile left of the diagonal. The kernel prepares the tile's columns (norms, a
#: copy of their inputs: columns x d) once per tile, so tall tiles prepare each column fewer times:
#: at d = 784 that preparation cost as much as 40 % of the GEMM in tiles of 256 rows.
FILL_ROWS = 1024
#: Cap on one tile of the Gram matrix, its inputs and scratch included: the kernel's passes over
#: the tile (clamp, exp, the copies into the matrices) then run in the larger caches -- the lower
#: triangle for 5,000 points in d = 8 took 0.04 s in such tiles, 0.17 s in 128 MiB ones (one core;
#: ``KernelOperator.dense(lower_only=True)`` fills its triangle with these tiles too).
FILL_TILE_BYTES = 32 << 20
#: Bytes of a row block's column chunk in :func:`symmetric_matvec`: read for its rows' product and
#: again, transposed, for the rows above, preferably from cache; larger chunks mean fewer calls
#: (each a parallel region: 800 calls per product at n = 5,000 in 1 MiB chunks).
_MATVEC_CHUNK_BYTES = 4 << 20
#: Conjugate-gradient iterations allowed. One iteration reads the two matrices about twice (~n^2
#: 12 bytes) where a float64 factorisation does n^3 / 3 flops: at n = 5,000 some 20 iterations
#: cost what the float32 factorisation saved; a sound float32 factor needs 3-6 (alpha = 1 to 1e-4,
#: RBF Gram), 16 at alpha = 1e-5.
_MAX_ITER = 25
#: A second run from the true residual when the first stopped within this factor of the target
#: (the recursively updated residual of CG drifts from the true one in the last digits).
_CLOSE = 64.0


def gram_tile_plan(n: int, d: int, *, itemsize: int, budget: int, scratch: float) -> BlockPlan:
    """Tiles for :func:`lower_gram_tiles`: up to :data:`FILL_ROWS` rows -- a multiple of
    :data:`DIAG_ROWS` when more -- and as many columns as :data:`FILL_TILE_BYTES` and ``budget``
    (the bytes left once the matrices are allocated) allow."""
    plan = plan_blocks(min(n, FILL_ROWS), n, d, itemsize=itemsize, budget=budget, scratch=scratch,
                       max_tile_bytes=FILL_TILE_BYTES)
    if plan.row_block > DIAG_ROWS:
        plan = dataclasses.replace(plan, row_block=plan.row_block // DIAG_ROWS * DIAG_ROWS)
    return plan


def lower_gram_tiles(op, plan: BlockPlan, weights: torch.Tensor | None = None
                     ) -> Iterator[tuple[slice, slice, torch.Tensor]]:
    """``(rows, cols, tile)`` covering the lower triangle of the square operator ``op``'s matrix
    ``W K W`` (``W = diag(weights)``, or the identity), row block by row block: first the tiles
    left of the block's diagonal square, whole-block tall; then the square by blocks of at most
    :data:`DIAG_ROWS` rows, each with its columns up to its last row (its own diagonal square
    whole). A tile may be a view of the caller's data (a precomputed kernel): copy it, do not
    write into it."""
    n = op.shape[0]
    rows, cols = plan.row_block, plan.col_block
    p = min(rows, DIAG_ROWS)

    def tile(r: slice, c: slice) -> torch.Tensor:
        t = op.tile(r, c)
        return t if weights is None else t.mul(weights[r, None]).mul_(weights[None, c])

    for r in row_blocks(n, rows, desc="kernel matrix"):
        for j in range(0, r.start, cols):
            c = slice(j, min(j + cols, r.start))
            yield r, c, tile(r, c)
        for s in range(r.start, r.stop, p):
            sr = slice(s, min(s + p, r.stop))
            for j in range(r.start, sr.stop, cols):
                c = slice(j, min(j + cols, sr.stop))
                yield sr, c, tile(sr, c)


def fill_lower_gram(op, plan: BlockPlan, out: torch.Tensor, weights: torch.Tensor | None = None) -> None:
    """Write the lower triangle of ``W K W`` into ``out`` (n x n) tile by tile; of the upper
    triangle only the diagonal squares' parts are written."""
    for r, c, t in lower_gram_tiles(op, plan, weights):
        out[r, c] = t


def fill_mixed_gram(op, plan: BlockPlan, K: torch.Tensor, F: torch.Tensor,
                    weights: torch.Tensor | None = None) -> torch.Tensor:
    """Write the lower triangle of ``W K W`` into ``K`` (float64) and ``F`` (float32), both n x n,
    in one pass over the tiles (each is copied to both while in cache). Returns its absolute row
    sums (their maximum is its infinity norm; a NaN in any entry shows in them)."""
    n = op.shape[0]
    sums = torch.zeros(n, dtype=K.dtype, device=K.device)
    ones = torch.ones(n, dtype=K.dtype, device=K.device)
    negative = False
    for r, c, t in lower_gram_tiles(op, plan, weights):
        K[r, c] = t
        F[r, c] = t
        # row sums, absolute values only once a negative entry shows (kernels like the RBF have none)
        negative = negative or bool(t.amin() < 0)
        _add_row_sums(sums, t.abs() if negative else t, r, c, ones)
    if negative:  # the sums before the first negative entry were signed: recompute them all
        sums.zero_()
        for r in row_blocks(n, min(plan.row_block, DIAG_ROWS), desc="matrix norm"):
            _add_row_sums(sums, K[r, :r.stop].abs(), r, slice(0, r.stop), ones)
    return sums


def _add_row_sums(sums: torch.Tensor, t: torch.Tensor, r: slice, c: slice, ones: torch.Tensor) -> None:
    """Add tile ``t`` (rows ``r``, columns ``c``, its part right of the rows' diagonal square
    unused) of a symmetric matrix's lower triangle to the matrix's row sums: its rows, and the
    transposes of its columns left of the rows' diagonal square (whose rows count whole)."""
    sums[r].addmv_(t, ones[:t.shape[1]])
    below = min(c.stop, r.start) - c.start
    if below > 0:
        sums[c.start:c.start + below].addmv_(t[:, :below].mT, ones[:t.shape[0]])


def symmetric_matvec(K: torch.Tensor, V: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
    """``(K + shift I) V`` for the symmetric ``K`` (n x n) given by its lower triangle (the only
    part read) and ``V`` of shape ``(n, t)``. Row blocks of :data:`DIAG_ROWS` rows, in column
    chunks read once for their rows' product and again, transposed, for the rows above, from cache."""
    n = K.shape[0]
    out = V * shift if shift else torch.zeros_like(V)
    chunk = max(DIAG_ROWS, _MATVEC_CHUNK_BYTES // (DIAG_ROWS * K.element_size()))
    for r in row_blocks(n, DIAG_ROWS, desc="matrix product"):
        Vr = V[r]
        for j in range(0, r.start, chunk):
            c = slice(j, min(j + chunk, r.start))
            P = K[r, c]
            out[r].addmm_(P, V[c])
            out[c].addmm_(P.mT, Vr)
        D = K[r, r].tril()
        out[r].addmm_(D, Vr).addmm_(D.mT, Vr).sub_(D.diagonal()[:, None] * Vr)
    return out


@dataclasses.dataclass
class MixedSolveInfo:
    """What :func:`mixed_precision_solve` did.

    Attributes
    ----------
    converged : bool
        Every column reached float64's backward error; False: factor in float64 instead.
    reason : str
        Why not, when not converged ("" otherwise).
    n_iter : int
        Conjugate-gradient iterations, all rounds together.
    backward_error : float
        Largest normwise backward error over the columns at the end (``nan`` if never measured).
    """

    converged: bool
    reason: str = ""
    n_iter: int = 0
    backward_error: float = math.nan


def _backward_errors(R: torch.Tensor, X: torch.Tensor, B: torch.Tensor, norm_a: float) -> torch.Tensor:
    """``||r||_inf / (||A||_inf ||x||_inf + ||b||_inf)`` per column (0 where all three are 0)."""
    den = X.abs().amax(0) * norm_a + B.abs().amax(0)
    num = R.abs().amax(0)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), num)


def mixed_precision_solve(K: torch.Tensor, shift: float, F: torch.Tensor, B: torch.Tensor, *, norm_a: float
                          ) -> tuple[torch.Tensor | None, MixedSolveInfo]:
    """``X = (K + shift I)^{-1} B`` in float64 with a float32 factorisation.

    Parameters
    ----------
    K : tensor of shape (n, n), float64
        The symmetric matrix (without the shift), by its lower triangle; not modified.
    shift : float
        Added to the diagonal (``alpha``).
    F : tensor of shape (n, n), float32
        ``K + shift I`` in its lower triangle (the rest is never read); overwritten by its
        Cholesky factor.
    B : tensor of shape (n, t), float64
    norm_a : float
        ``||K + shift I||_inf`` (largest absolute row sum), or an upper bound of it.

    Returns
    -------
    X : tensor of shape (n, t), or None when not converged
    info : MixedSolveInfo
    """
    info = blocked_cholesky(F)
    if info:
        return None, MixedSolveInfo(False, f"the float32 matrix is not numerically positive definite (column {info})")
    eps = torch.finfo(B.dtype).eps

    def precondition(R: torch.Tensor) -> torch.Tensor:
        scale = R.abs().amax(0).clamp_min(torch.finfo(torch.float32).tiny)  # float32 range for any residual
        Z = (R / scale).to(torch.float32)
        Z = torch.linalg.solve_triangular(F, Z, upper=False)
        Z = torch.linalg.solve_triangular(F.mT, Z, upper=True)
        return Z.to(B.dtype).mul_(scale)

    def matvec(V: torch.Tensor) -> torch.Tensor:
        return symmetric_matvec(K, V, shift)

    X, n_iter = precondition(B), 0
    bnorm = torch.linalg.vector_norm(B, dim=0)
    nonzero = bnorm > 0
    for first, max_iter in ((True, _MAX_ITER), (False, _MAX_ITER // 2)):
        if not first or not bool(nonzero.any()):  # (the float32 solution alone is never float64-accurate)
            errs = _backward_errors(B - matvec(X), X, B, norm_a)
            err = float(errs.max()) if errs.numel() else 0.0
            if not math.isfinite(err):
                return None, MixedSolveInfo(False, "the iterates are not finite", n_iter, err)
            if err <= eps:
                return X, MixedSolveInfo(True, "", n_iter, err)
            if err > _CLOSE * eps:
                break
        elif not bool(torch.isfinite(X).all()):
            return None, MixedSolveInfo(False, "the iterates are not finite", n_iter)
        # the 2-norm residual at which a column's backward error is about eps / 4
        xnorm = torch.linalg.vector_norm(X, dim=0)
        target = 0.25 * eps * (norm_a * xnorm[nonzero] + bnorm[nonzero]) / bnorm[nonzero]
        res = conjugate_gradient(matvec, B, preconditioner=precondition, x0=X, tol=float(target.min()),
                                 max_iter=max_iter)
        X, n_iter = res.x, n_iter + res.n_iter
    else:
        errs = _backward_errors(B - matvec(X), X, B, norm_a)
        err = float(errs.max()) if errs.numel() else 0.0
        if err <= eps:
            return X, MixedSolveInfo(True, "", n_iter, err)
    return None, MixedSolveInfo(False, f"backward error {err:.2e} after {n_iter} iterations", n_iter, err)
