"""``SymmetricGram``: a kernel matrix ``K = k(X, X)`` held as its lower triangle, built once.

An iterative eigensolver multiplies ``K`` by a block of vectors a dozen times; the matrix is
computed once and kept. Only the lower triangle (diagonal tiles whole) is evaluated and written:
half the kernel evaluations of the full matrix, and half its memory pages touched (the buffer is
``n x n``, but pages of the upper triangle are never written, so the system never maps them).

* Build: square tiles small enough to stay in a core's cache (:data:`CACHE_TILE_BYTES`) are
  evaluated, written in place and summed there, so the row sums (the centring of kernel PCA)
  cost no extra pass over the matrix.
* ``K @ V``: one pass over the stored triangle in panels of :data:`PANEL_ROWS` rows; a panel
  ``P = K[s:e, :s]`` serves both ``Y[s:e] += P V[:s]`` and ``Y[:s] += P^T V[s:e]`` while it is
  still in cache, so the pass reads each stored entry from memory once.

Threads: both loops are cut into chunks of rows that do not depend on the number of threads;
with more than one torch thread, the chunks run on that many single-threaded workers, each
claiming the next chunk when it is done (no barrier inside a pass: a worker held up by another
process on its core delays the pass by one chunk, not by half of it). Each chunk adds into its
own buffer and the buffers are summed in a fixed order, so the result does not depend on the
number of threads.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from .._backend import num_threads
from .._sparse import plan_features
from ..kernels import Kernel
from ._blocking import MemoryBudgetError, format_bytes, plan_blocks, row_blocks
from ._plan import default_memory_budget

__all__ = ["SymmetricGram"]

log = logging.getLogger(__name__)

#: Bytes of one tile of the build: the tile is evaluated, written and summed while it is in a
#: core's L2 cache (n = 5,000, one thread: 512 x 512 tiles 0.10 s, 1024 x 1024 0.18 s, 2048 x
#: 2048 0.34 s; each step over a large tile is a pass over main memory).
CACHE_TILE_BYTES = 2 * 2**20

#: Rows of a panel of ``K @ V``: the panel is read from memory by its first product and from
#: cache by its second (n = 20,000, 16 columns, one thread: 32 rows 0.33 s per product, 128 rows
#: 0.50 s, the full matrix 0.43 s).
PANEL_ROWS = 32

#: Chunks of rows of one product (the unit of work a thread claims; each adds into its own
#: ``(rows so far) x t`` buffer).
_CHUNKS = 16

#: Below this many rows, products and the build run on the calling thread: a chunk would take
#: less than the hand-over to another thread.
_THREADED_MIN_N = 2048

_POOLS: dict[int, tuple[int, ThreadPoolExecutor]] = {}  # threads -> (pid, pool)
_POOLS_LOCK = threading.Lock()


def _one_thread() -> None:
    torch.set_num_threads(1)  # per thread: the worker's own ops (and BLAS calls) run on it alone


def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` single-threaded workers (a new one in a forked child,
    where the parent's worker threads do not exist)."""
    with _POOLS_LOCK:
        pid, pool = _POOLS.get(threads, (None, None))
        if pid != os.getpid():
            pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mercer-gram", initializer=_one_thread)
            _POOLS[threads] = (os.getpid(), pool)
        return pool


class _Chunks:
    """The chunks ``fn(0), ..., fn(jobs - 1)`` of one loop, taken in order with :meth:`get`:
    computed by ``threads`` single-threaded workers (all submitted at once, each worker claiming
    the next), or on the calling thread when ``threads == 1``. As a context manager, leaving
    early (an exception, an interrupt between chunks) drops the chunks not yet started."""

    def __init__(self, fn: Callable[[int], torch.Tensor], jobs: int, threads: int):
        self.fn, self.futures = fn, None
        if threads > 1:
            pool = _pool(threads)
            self.futures = [pool.submit(fn, j) for j in range(jobs)]

    def get(self, j: int) -> torch.Tensor:
        return self.fn(j) if self.futures is None else self.futures[j].result()

    def __enter__(self) -> _Chunks:
        return self

    def __exit__(self, *exc) -> None:
        for f in self.futures or ():
            f.cancel()


class SymmetricGram:
    """The symmetric kernel matrix ``K = k(X, X)`` of shape ``(n, n)``, stored as its lower triangle.

    Parameters
    ----------
    kernel : Kernel
        A kernel computed from inputs (not ``precomputed``).
    X : tensor of shape (n, d)
    memory_budget : int, optional
        Bytes available; the ``n x n`` buffer must fit it (else :class:`MemoryBudgetError`).
    threads : int, optional
        Workers of the build and of every product; default torch's intra-op threads at
        construction (one below :data:`_THREADED_MIN_N` rows and off the CPU). Fixed here, so a
        product called where torch runs on one thread (a solver's bookkeeping) keeps its workers.

    Attributes
    ----------
    matrix : tensor of shape (n, n)
        Entries on and below the diagonal hold ``K``; diagonal tiles of ``tile`` rows hold ``K``
        whole; the rest of the upper triangle is unwritten memory and is never read.
    row_sums : tensor of shape (n,)
        ``K @ 1``, summed from the tiles as they were built.
    tile : int
        Edge of the build's tiles (a multiple of :data:`PANEL_ROWS`, or ``n``).
    """

    def __init__(self, kernel: Kernel, X: torch.Tensor, *, memory_budget: int | None = None,
                 threads: int | None = None):
        if kernel.is_precomputed:
            raise ValueError("SymmetricGram evaluates a kernel on inputs; a precomputed Gram matrix is already built.")
        n, d = X.shape
        itemsize = X.element_size()
        budget = default_memory_budget(X.device, memory_budget)
        need = n * n * itemsize
        if need >= budget:
            raise MemoryBudgetError(f"the {n} x {n} kernel matrix needs {format_bytes(need)}, more than the "
                                    f"memory budget of {format_bytes(budget)}.")
        plan = plan_blocks(n, n, plan_features(X), itemsize=itemsize, budget=max(budget - need, 1),
                           scratch=kernel.scratch(d))
        tile = min(plan.row_block, plan.col_block, math.isqrt(CACHE_TILE_BYTES // itemsize))
        self.tile = n if tile >= n else max(PANEL_ROWS, tile - tile % PANEL_ROWS)
        self.kernel, self.n = kernel, n
        self.dtype, self.device = X.dtype, X.device
        if threads is None:
            threads = 1 if X.device.type != "cpu" or n < _THREADED_MIN_N else torch.get_num_threads()
        self.threads = max(1, int(threads))
        rows = -(-n // _CHUNKS)
        self._chunk = n if rows >= n else -(-rows // PANEL_ROWS) * PANEL_ROWS
        t0 = time.perf_counter()
        self.matrix, self.row_sums = self._build(X)
        if time.perf_counter() - t0 > 1.0:
            log.info("kernel matrix %d x %d (lower triangle) computed in %.1f s", n, n, time.perf_counter() - t0)

    def _build(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, t = self.n, self.tile
        K = torch.empty(n, n, dtype=X.dtype, device=X.device)

        def tile_row(j: int) -> torch.Tensor:
            """Tiles of rows ``r`` left of and on the diagonal, written into ``K``; returns their
            contribution to the row sums of rows ``:r.stop``."""
            r = slice(j * t, min(j * t + t, n))
            sums = torch.zeros(r.stop, dtype=X.dtype, device=X.device)
            for start in range(0, r.start, t):  # tiles strictly below the diagonal
                c = slice(start, start + t)
                T = self.kernel.block(X, X, r, c)
                K[r, c] = T
                sums[r] += T.sum(dim=1)
                sums[c] += T.sum(dim=0)
            T = self.kernel.block(X, X, r, r)
            T = T.tril() + T.tril(-1).mT  # exactly symmetric: the lower triangle mirrored
            K[r, r] = T
            sums[r] += T.sum(dim=1)
            return sums

        row_sums = torch.zeros(n, dtype=X.dtype, device=X.device)
        with _Chunks(tile_row, -(-n // t), self.threads) as parts, num_threads(1):
            for j, r in enumerate(row_blocks(n, t, desc="kernel matrix")):
                row_sums[:r.stop] += parts.get(j)
        return K, row_sums

    def diagonal(self) -> torch.Tensor:
        """``diag(K)``, shape ``(n,)`` (a copy)."""
        return torch.diagonal(self.matrix).clone()

    def matvec(self, V: torch.Tensor) -> torch.Tensor:
        """``K @ V`` for ``V`` of shape ``(n, t)``: one pass over the stored triangle."""
        if V.ndim != 2 or V.shape[0] != self.n:
            raise ValueError(f"SymmetricGram.matvec expects V of shape ({self.n}, t); got {tuple(V.shape)}.")
        K, n, h = self.matrix, self.n, self._chunk

        def chunk(j: int) -> torch.Tensor:
            """Panels of rows ``j h : (j + 1) h``; returns their contribution to ``Y[:stop]``."""
            stop = min(j * h + h, n)
            Y = torch.zeros(stop, V.shape[1], dtype=V.dtype, device=V.device)
            for s in range(j * h, stop, PANEL_ROWS):
                e = min(s + PANEL_ROWS, n)
                # the diagonal block lies inside a whole diagonal tile (panels split tiles evenly)
                Y[s:e].addmm_(K[s:e, :e], V[:e])
                if s:
                    Y[:s].addmm_(K[s:e, :s].mT, V[s:e])
            return Y

        Y = torch.zeros(n, V.shape[1], dtype=V.dtype, device=V.device)
        with _Chunks(chunk, -(-n // h), self.threads) as parts, num_threads(1):  # the sums: small
            for j, r in enumerate(row_blocks(n, h, desc="kernel rows")):
                Y[:r.stop] += parts.get(j)
        return Y

    def full_(self) -> torch.Tensor:
        """Mirror the lower triangle into the upper one, in place; returns the whole symmetric matrix."""
        K, t = self.matrix, self.tile
        for r in row_blocks(self.n, t, desc="kernel matrix"):
            if r.start:
                K[:r.start, r] = K[r, :r.start].mT
        return K
