"""``KernelOperator``: products with a kernel matrix computed tile by tile within a memory budget.

The operator holds one tile of ``K(X, Z)`` at a time (plus the vectors it multiplies), so
``K @ v`` on a million points runs in a fixed, planned amount of memory, on any device -- unless
its caller grants ``keep_bytes`` and the whole matrix fits them: then the first full pass keeps it
for the later products (an iterative solver's).
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch

from .._sparse import plan_features
from ..kernels import Kernel
from ..sources import RowSource
from ._plan import SHIFT_SAMPLE_ROWS, STREAM_READ_BYTES, ExecutionPlan, default_memory_budget
from ._blocking import (BlockPlan, MemoryBudgetError, format_bytes, plan_blocks,
                        product_tile_bytes, row_blocks)
from ._mixed import fill_lower_gram, gram_tile_plan
from ._source_blocks import _check_block, block_tensor, source_rows

__all__ = ["KernelOperator", "Statistics"]

log = logging.getLogger(__name__)


#: Tiles of repeated products on a GPU (``max_tile_bytes="product"``).
_GPU_PRODUCT_TILE_BYTES = 32 << 20



#: Row panels of :func:`_add_lower_gram` (the GEMMs skip the blocks above the diagonal: with p
#: panels they compute (p + 1) / 2p of the full product), and the width below which one GEMM
#: does it all.
GRAM_PANELS = 8
_GRAM_MIN_COLS = 256


def _add_lower_gram(out: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> None:
    """``out += A^T B`` on and below the diagonal panels (the rest of ``out`` is left as it is) for
    a symmetric ``A^T B`` (``A = W B``, ``W`` diagonal): a symmetric rank-k update by row panels,
    ``out[j:e, :e] += A[:, j:e]^T B[:, :e]``, each a large GEMM (BLAS's ``syrk`` is not exposed by
    torch). Measured (one thread, loaded machine) against one GEMM for the full product:
    4,000 x 1,000 float64 72 ms vs 87 ms, 800 x 5,000 float64 0.30 s vs 0.46 s (float32 0.14 s vs
    0.26 s); column panels were slower at m = 1,000."""
    m = B.shape[1]
    b = m if m < _GRAM_MIN_COLS else -(-m // GRAM_PANELS)
    for j in range(0, m, b):
        e = min(j + b, m)
        if out.dtype == B.dtype:
            out[j:e, :e].addmm_(A[:, j:e].mT, B[:, :e])
        else:
            out[j:e, :e].add_(A[:, j:e].mT @ B[:, :e])


@dataclasses.dataclass(frozen=True)
class Statistics:
    """What one pass over a kernel operator's tiles gives a ridge-type solve (float64).

    Attributes
    ----------
    gram : tensor of shape (m, m) or None
        ``K_c^T W K_c`` (``K_c``: the columns centred by their weighted means when the pass centres,
        else ``K``); ``None`` when not asked for.
    rhs : tensor of shape (m, t)
        ``K_c^T U`` (with ``U = W y_c``, ``1^T U = 0``: equal to ``K^T U``).
    col_mean : tensor of shape (m,) or None
        The weighted column means ``K^T W 1 / n_w`` (when the pass centres).
    """

    gram: torch.Tensor | None
    rhs: torch.Tensor
    col_mean: torch.Tensor | None


def _as_matrix(v: torch.Tensor) -> tuple[torch.Tensor, bool]:
    return (v[:, None], True) if v.ndim == 1 else (v, False)


class KernelOperator:
    """The kernel matrix ``K = k(X, Z)`` of shape ``(n, m)`` as a blocked linear operator.

    Parameters
    ----------
    kernel : Kernel
    X : tensor of shape (n, d), or a :class:`mercer.sources.RowSource`
        A source is read one row block at a time (converted to ``dtype`` on ``device``), so only
        one block of ``X`` is in memory: the products stream over data on disk.
    Z : tensor of shape (m, d), optional
        Defaults to ``X`` (a square, symmetric operator); required when ``X`` is a source.
    memory_budget : int, optional
        Bytes one tile may use; default from :func:`default_memory_budget` for X's device.
    n_rhs : int
        Number of right-hand sides the tiles are planned for.
    max_tile_bytes : int, None or "product", optional
        Cap on one tile (default: the planner's ``MAX_TILE_BYTES``; ``None``: only the budget;
        ``"product"``: tiles sized for repeated ``K^T K v`` products, on the CPU
        :func:`~mercer.linalg.product_tile_bytes` at torch's thread count, 32 MiB on a GPU).
    keep_bytes : int, default=0
        Memory the operator may spend on keeping the whole matrix between products: when its
        ``n x m`` entries fit (and tiles span full rows), the first full pass copies its tiles into
        one ``(n, m)`` tensor and later products read them from there instead of recomputing the
        kernel -- an iterative solver's repeated passes then cost two reads of memory each, not a
        kernel evaluation. Results are the same either way (the same tiles, summed in the same
        order). For callers that make many passes (conjugate gradient); 0 keeps nothing.
    """

    def __init__(self, kernel: Kernel, X, Z: torch.Tensor | None = None, *,
                 memory_budget: int | None = None, n_rhs: int = 1, max_tile_bytes: int | str | None = -1,
                 keep_bytes: int = 0):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"KernelOperator expects a mercer kernel; got {kernel!r}.")
        self.kernel = kernel
        self.source = X if isinstance(X, RowSource) else None
        if self.source is not None:
            if Z is None:
                raise ValueError("KernelOperator: a streamed X (a row source) needs the columns' points Z.")
            if kernel.is_precomputed:
                raise ValueError("KernelOperator: a precomputed kernel cannot be streamed from a row source.")
            X = None
        self.X = X
        self.Z = X if Z is None else Z
        self.symmetric = Z is None or Z is X
        self.budget = default_memory_budget(self.device, memory_budget)
        n, d = self.shape[0], self._n_features
        # sparse rows: blocks sized from their non-zeros (kernel.scratch still sees the features)
        d_plan = max(plan_features(self.source if self.source is not None else self.X), plan_features(self.Z))
        if max_tile_bytes == "product":
            d_eff, item = 1 if kernel.is_precomputed else d_plan, (self.Z if X is None else X).element_size()
            max_tile_bytes = _GPU_PRODUCT_TILE_BYTES if self.device.type != "cpu" else product_tile_bytes(
                self.Z.shape[0], d_eff, itemsize=item, threads=torch.get_num_threads(), scratch=kernel.scratch(d),
                n_rhs=n_rhs)
        self.plan: BlockPlan = plan_blocks(
            n, self.Z.shape[0], 1 if kernel.is_precomputed else d_plan, itemsize=(self.Z if X is None else X).element_size(),
            budget=self.budget, scratch=kernel.scratch(d), n_rhs=n_rhs,
            **({} if max_tile_bytes == -1 else {"max_tile_bytes": max_tile_bytes}),
        )
        self.keep_bytes = int(keep_bytes)
        self._kept: torch.Tensor | None = None  # the whole matrix, once a full pass has kept it
        self._shift: torch.Tensor | None = None

    # -- geometry -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        n = self.source.n_samples if self.source is not None else self.X.shape[0]
        return (n, self.Z.shape[0])

    @property
    def _n_features(self) -> int:
        return self.source.n_features if self.source is not None else self.X.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return (self.Z if self.X is None else self.X).dtype

    @property
    def device(self) -> torch.device:
        return (self.Z if self.X is None else self.X).device

    def _row_slices(self):
        return row_blocks(self.shape[0], self.plan.row_block, desc="kernel rows")

    def _row_chunks(self):
        """``(rows, Xb, rb)`` per row block: the block's rows of ``K`` are the tiles of ``Xb[rb]``.
        In memory ``Xb`` is ``X`` itself; from a source, the block just read (one at a time)."""
        if self.source is None:
            for r in self._row_slices():
                yield r, self.X, r
            return
        # The source is read in chunks of several row blocks (up to _READ_BYTES of input): a read has a
        # per-call cost (a Parquet record batch: ~5 ms, whatever its size), and at M = 10,000 a 32 MiB
        # tile holds only ~800 rows (1M rows streamed from Parquet: 202 s with one read per tile, vs
        # 117 s in memory).
        n, br = self.shape[0], self.plan.row_block
        reads = min(STREAM_READ_BYTES, ExecutionPlan(self.budget).share("source reads"))
        per_read = max(1, reads // max(self.source.bytes_per_row, 1) // br) * br
        for R, block in self.source.iter_blocks(row_blocks(n, per_read, desc="kernel rows")):
            _check_block(block, self.source, f"{R.start}:{R.stop}")
            Xb = block_tensor(block, dtype=self.dtype, device=self.device)
            for start in range(0, R.stop - R.start, br):
                stop = min(start + br, R.stop - R.start)
                yield slice(R.start + start, R.start + stop), Xb, slice(start, stop)

    def _col_slices(self):  # columns of one row block: not a loop over samples, not observed
        bc = self.plan.col_block
        return [slice(j, min(j + bc, self.shape[1])) for j in range(0, self.shape[1], bc)]

    @property
    def shift(self) -> torch.Tensor | None:
        """``None``, or a length-m vector subtracted from every row of the matrix: the operator is then
        ``K - 1 shift^T`` (columns centred by their means, for an unpenalised intercept), applied to
        each tile so that every product is one of that matrix in the tiles' precision."""
        return self._shift

    @shift.setter
    def shift(self, value: torch.Tensor | None) -> None:
        if self._kept is not None:
            if self._shift is None and value is not None:  # as a fresh tile: K rounded, then shifted
                for r in self._row_slices():
                    self._kept[r].sub_(value)
            elif self._shift is not None:  # not bit for bit what fresh tiles give: recompute them
                self._kept = None
        self._shift = value

    @property
    def kept(self) -> bool:
        """Whether the matrix is kept in memory (see ``keep_bytes``)."""
        return self._kept is not None

    def _full_rows(self):
        """``(rows, K[rows])`` per row block for full-width tiles: computed (and kept, when
        ``keep_bytes`` allows and this pass runs to its end), or read from the kept matrix. The
        tiles are read-only for the caller."""
        if self._kept is not None:
            for r in self._row_slices():
                yield r, self._kept[r]
            return
        n, m = self.shape
        keep = (self.keep_bytes > 0 and not self.kernel.is_precomputed and self.plan.col_block >= m
                and n * m * self.dtype.itemsize <= self.keep_bytes)
        # One (n, m) tensor filled by copies: measured 1.1 s for 100,000 x 5,000 float64 against 4.7 s
        # for keeping the 122 tiles themselves (each a fresh mapping whose pages fault in one by one).
        kept = torch.empty(n, m, dtype=self.dtype, device=self.device) if keep else None
        full = slice(0, m)
        for r, Xb, rb in self._row_chunks():
            Kr = self.tile(rb, full, Xb)
            if kept is not None:
                kept[r] = Kr
            yield r, Kr
            # One tile alive at a time (the plan's tile is the budget): this reference goes before the
            # next tile is computed, and the consumers drop theirs at the end of each step.
            del Kr
        if kept is not None:
            self._kept = kept
            log.debug("kernel matrix %d x %d kept (%s)", n, m, format_bytes(n * m * self.dtype.itemsize))

    def tile(self, rows: slice, cols: slice, X: torch.Tensor | None = None) -> torch.Tensor:
        """``K(X[rows], Z[cols])`` (minus ``shift[cols]``); ``X`` defaults to the operator's (a
        streamed block otherwise)."""
        out = self.kernel.block(self.X if X is None else X, self.Z, rows, cols)
        if self.shift is None:
            return out
        # in place only on a fresh tile: a precomputed kernel's tiles are views of the user's matrix
        return out - self.shift[cols] if self.kernel.is_precomputed else out.sub_(self.shift[cols])

    def _vec(self, v) -> torch.Tensor:
        return torch.as_tensor(v).to(device=self.device, dtype=self.dtype)

    # -- products -----------------------------------------------------------------------------
    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """``K @ v`` for ``v`` of shape ``(m,)`` or ``(m, t)``."""
        v, squeeze = _as_matrix(self._vec(v))
        self._check_len(v, self.shape[1], "v")
        out = torch.zeros(self.shape[0], v.shape[1], dtype=self.dtype, device=self.device)
        cols = self._col_slices()
        if len(cols) == 1:
            for r, Kr in self._full_rows():
                out[r].addmm_(Kr, v)
                del Kr
            return out[:, 0] if squeeze else out
        for r, Xb, rb in self._row_chunks():
            for c in cols:
                out[r].addmm_(self.tile(rb, c, Xb), v[c])
        return out[:, 0] if squeeze else out

    def rmatvec(self, u: torch.Tensor, *, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``K.T @ u`` for ``u`` of shape ``(n,)`` or ``(n, t)``; partial products summed in
        ``out_dtype`` (default: the operator's dtype)."""
        out_dtype = out_dtype or self.dtype
        u, squeeze = _as_matrix(self._vec(u))
        self._check_len(u, self.shape[0], "u")
        out = torch.zeros(self.shape[1], u.shape[1], dtype=out_dtype, device=self.device)
        cols = self._col_slices()
        if len(cols) == 1:
            for r, Kr in self._full_rows():
                if out_dtype == self.dtype:
                    out.addmm_(Kr.T, u[r])
                else:
                    out.add_(Kr.T @ u[r])
                del Kr
            return out[:, 0] if squeeze else out
        for r, Xb, rb in self._row_chunks():
            for c in cols:
                if out_dtype == self.dtype:
                    out[c].addmm_(self.tile(rb, c, Xb).T, u[r])
                else:
                    out[c].add_(self.tile(rb, c, Xb).T @ u[r])
        return out[:, 0] if squeeze else out

    def kt_k_v(self, v: torch.Tensor, *, weights: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``K.T @ diag(weights) @ (K @ v)`` in one pass over full-width row blocks (two when
        columns are split). ``out_dtype`` (e.g. float64 for a float32 operator) is the dtype the
        per-block partial products are summed in: the tiles stay in the operator's precision,
        the sum over many blocks does not lose digits. ``v`` may be of either dtype."""
        out_dtype = out_dtype or self.dtype
        v, squeeze = _as_matrix(self._vec(v))
        self._check_len(v, self.shape[1], "v")
        if weights is not None:
            weights = self._vec(weights)
            self._check_len(weights, self.shape[0], "weights")
        out = torch.zeros(self.shape[1], v.shape[1], dtype=out_dtype, device=self.device)
        acc = out if out_dtype == self.dtype else None
        cols = self._col_slices()
        if len(cols) == 1:
            for r, Kr in self._full_rows():
                w = Kr @ v
                if weights is not None:
                    w.mul_(weights[r, None])
                if acc is not None:
                    acc.addmm_(Kr.T, w)
                else:
                    out.add_(Kr.T @ w)
                del Kr
            return out[:, 0] if squeeze else out
        for r, Xb, rb in self._row_chunks():
            w = torch.zeros(r.stop - r.start, v.shape[1], dtype=self.dtype, device=self.device)
            for c in cols:
                w.addmm_(self.tile(rb, c, Xb), v[c])
            if weights is not None:
                w.mul_(weights[r, None])
            for c in cols:
                if acc is not None:
                    acc[c].addmm_(self.tile(rb, c, Xb).T, w)
                else:
                    out[c].add_(self.tile(rb, c, Xb).T @ w)
        return out[:, 0] if squeeze else out

    def kt_k(self, *, weights: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``K.T @ diag(weights) @ K`` (m x m) in one pass over full-width row blocks; the per-block
        products are summed in ``out_dtype``. Needs the m x m result in memory (the caller checks)."""
        return self._gram_pass(weights, out_dtype, None)[0]

    def kt_k_rmatvec(self, u: torch.Tensor, *, weights: torch.Tensor | None = None,
                     out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(K.T @ diag(weights) @ K, K.T @ u)`` from one pass over the tiles (each tile computed
        once for both), as :meth:`kt_k` and :meth:`rmatvec` (``u`` of shape ``(n,)`` or ``(n, t)``)."""
        u, squeeze = _as_matrix(self._vec(u))
        self._check_len(u, self.shape[0], "u")
        H, Ku = self._gram_pass(weights, out_dtype, u)
        return H, (Ku[:, 0] if squeeze else Ku)

    def _gram_pass(self, weights, out_dtype, u):
        out_dtype = out_dtype or self.dtype
        if weights is not None:
            weights = self._vec(weights)
            self._check_len(weights, self.shape[0], "weights")
        m = self.shape[1]
        out = torch.zeros(m, m, dtype=out_dtype, device=self.device)
        Ku = None if u is None else torch.zeros(m, u.shape[1], dtype=out_dtype, device=self.device)
        cols = self._col_slices()
        rows = self._full_rows() if len(cols) == 1 else (
            (r, torch.cat([self.tile(rb, c, Xb) for c in cols], dim=1)) for r, Xb, rb in self._row_chunks())
        for r, Kr in rows:
            _add_lower_gram(out, Kr if weights is None else Kr * weights[r, None], Kr)
            if Ku is not None:
                if out_dtype == self.dtype:
                    Ku.addmm_(Kr.T, u[r])
                else:
                    Ku.add_(Kr.T @ u[r])
            del Kr
        out.tril_()
        return out.add_(out.tril(-1).mT), Ku

    def per_sample(self, u):
        """A per-sample array (targets, weights; ``(n,)`` or ``(n, t)``) as the products take it: a
        tensor in the operator's dtype on its device (``None`` stays ``None``)."""
        if u is None:
            return None
        u = torch.as_tensor(u).to(device=self.device, dtype=self.dtype)
        self._check_len(u, self.shape[0], "a per-sample array")
        return u

    def statistics(self, U, *, weights=None, n_w: float | None = None, centre: bool = False,
                   gram: bool = True) -> Statistics:
        """``K_c^T W K_c`` (when ``gram``), ``K_c^T U`` and the column means, from one pass over the tiles.

        ``U`` (n, t) is ``W y_c`` (per-sample, as :meth:`per_sample` gives it), ``weights`` the ``W``
        of the Gram (``None``: all ones) and ``n_w`` their sum. With ``centre`` the columns are those
        of ``K_c = K - 1 k_mean^T``, ``k_mean = K^T W 1 / n_w``, the operator of a ridge with an
        unpenalised intercept.

        The one pass shifts the tiles by ``s``, the column means of at most
        :data:`~mercer.linalg.SHIFT_SAMPLE_ROWS` evenly spaced rows, before their products are summed:
        with ``delta = K_s^T W 1 / n_w`` (small, the sample's error), ``k_mean = s + delta`` and
        ``K_c^T W K_c = K_s^T W K_s - n_w delta delta^T``, a correction far below the matrix itself (no
        cancellation, unlike the same correction from unshifted tiles); ``K_s^T U = K_c^T U`` as
        ``1^T U = 0``. The operator's shift is left at ``s``."""
        n, m = self.shape
        U, squeeze = _as_matrix(self._vec(U))
        t = U.shape[1]
        if centre:
            if n_w is None:
                n_w = float(n if weights is None else self._vec(weights).sum())
            ones = torch.ones(n, 1, dtype=self.dtype, device=self.device) if weights is None else \
                self._vec(weights)[:, None]
            U = torch.cat([U, ones], dim=1)
        if not gram:
            KtU = self.rmatvec(U, out_dtype=torch.float64)
            mean = KtU[:, t] / n_w if centre else None
            return Statistics(None, KtU[:, :t], mean)
        s = None
        if centre:
            sample = max(1, min(SHIFT_SAMPLE_ROWS, ExecutionPlan(self.budget).share("shift sample")
                                // (m * self.dtype.itemsize)))
            rows = torch.arange(0, n, -(-n // sample), device=self.device)  # at most `sample`, evenly spaced
            self.shift = None
            self.shift = self.rows(rows).mean(0)
            s = self.shift.to(torch.float64)
        H, KtU = self.kt_k_rmatvec(U, weights=weights, out_dtype=torch.float64)
        mean = None
        if s is not None:
            delta = KtU[:, t] / n_w
            H.sub_(torch.outer(delta, delta), alpha=n_w)
            mean = s + delta
        return Statistics(H, KtU[:, :t], mean)

    def diag(self) -> torch.Tensor:
        """Diagonal of a square operator, shape ``(n,)``."""
        if not self.symmetric:
            raise ValueError("diag() needs a square operator k(X, X).")
        if self.kernel.is_precomputed:
            return torch.diagonal(self.X).clone()
        if self.source is not None:
            raise ValueError("diag() of a streamed operator is not defined (it is not square).")
        return torch.cat([self.kernel.diag(self.X[r]) for r in self._row_slices()]) if self.shape[0] else \
            torch.zeros(0, dtype=self.dtype, device=self.device)

    def rows(self, index) -> torch.Tensor:
        """Selected rows ``K[index, :]`` as a dense ``(len(index), m)`` tensor (must fit the budget)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.device)
        need = index.numel() * self.shape[1] * self.Z.element_size()
        if need > self.budget:
            raise MemoryBudgetError(
                f"{index.numel()} kernel rows of length {self.shape[1]} need {format_bytes(need)}, more "
                f"than the memory budget of {format_bytes(self.budget)}."
            )
        if self.kernel.is_precomputed:
            return self.X[index].clone()
        if self.source is not None:
            return self.kernel(source_rows(self.source, index, dtype=self.dtype, device=self.device), self.Z)
        return self.kernel(self.X[index], self.Z)

    def dense(self, *, lower_only: bool = False, output_reserved: bool = False) -> torch.Tensor:
        """The whole matrix, built tile by tile into one preallocated ``(n, m)`` tensor.

        ``lower_only`` (square operators) skips the tiles strictly above the diagonal, which
        is all a Cholesky factorisation reads: half the kernel evaluations.
        Raises :class:`MemoryBudgetError` when ``n * m`` entries do not fit the budget, unless
        ``output_reserved``: the caller's budget already left out the output, and the whole budget
        goes to the tiles.
        """
        n, m = self.shape
        if self.source is not None:
            raise ValueError("dense() of a streamed operator: use the blocked products (it would hold n x m entries).")
        need = 0 if output_reserved else n * m * self.X.element_size()
        if need and need >= self.budget:
            raise MemoryBudgetError(
                f"the {n} x {m} kernel matrix needs {format_bytes(need)}, more than the memory "
                f"budget of {format_bytes(self.budget)}."
            )
        t0 = time.perf_counter()
        out = torch.empty(n, m, dtype=self.dtype, device=self.device)
        # Tiles within the remaining budget: rows of the output are already paid for.
        d = 1 if self.kernel.is_precomputed else plan_features(self.X)
        budget = ExecutionPlan(self.budget).holding(need).budget
        item, scratch = self.X.element_size(), self.kernel.scratch(self.X.shape[1])
        if lower_only and self.symmetric:  # cache-sized tiles along the triangle, as the exact ridge's Gram
            fill_lower_gram(self, gram_tile_plan(n, d, itemsize=item, budget=budget, scratch=scratch), out)
        else:
            plan = plan_blocks(n, m, d, itemsize=item, budget=budget, scratch=scratch)
            for r in row_blocks(n, plan.row_block, desc="kernel matrix"):
                for j in range(0, m, plan.col_block):
                    c = slice(j, min(j + plan.col_block, m))
                    out[r, c] = self.tile(r, c)
        if time.perf_counter() - t0 > 1.0:
            log.info("kernel matrix %d x %d computed in %.1f s", n, m, time.perf_counter() - t0)
        return out

    @staticmethod
    def _check_len(v: torch.Tensor, expected: int, name: str) -> None:
        if v.shape[0] != expected:
            raise ValueError(f"{name} has {v.shape[0]} rows; the operator expects {expected}.")

    def __repr__(self) -> str:
        p = self.plan
        return (f"KernelOperator({self.kernel!r}, shape={self.shape}, tiles={p.row_block}x{p.col_block}, "
                f"budget={format_bytes(self.budget)})")


