"""The memory planner: one pure function from problem sizes and a budget to block sizes.

Nothing here touches a tensor, so it is tested without data or a GPU.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import math
import os
from collections.abc import Callable, Iterator

from .._progress import task

__all__ = ["BlockPlan", "MemoryBudgetError", "PRODUCT_TILE_BYTES_PER_THREAD", "available_memory",
           "current_observer", "format_bytes", "observe_blocks", "plan_blocks", "plan_rows", "product_tile_bytes", "row_blocks"]

#: Rows below which a tile is too thin for GEMMs to run well; columns are split before rows go under.
MIN_ROWS = 64
#: Largest tile computed at once. Tiles much smaller than this pay per-operation overheads (on a
#: machine whose cores are shared, every OpenMP barrier stalls); much larger ones only cost memory.
#: Probe: ``benchmarks/probes/probe_max_tile_bytes.py`` (the product at 32 / 128 / 256 MiB, uncapped).
MAX_TILE_BYTES = 128 * 2**20
#: Kernel-tile bytes per thread of a product that reads each tile twice (``K v``, then ``K^T w``:
#: conjugate gradient's ``K^T K v``), so that the second read finds the tile in cache
#: (:func:`product_tile_bytes`). Against 32 MiB tiles (RBF with the intercept's shift, median of 3;
#: probe: ``benchmarks/probes/probe_product_tile_bytes.py``): two threads 0.59-0.99x the time at
#: d <= 28, one thread 0.80-0.96x; d = 784 0.99-1.05x. Among 4 / 8 / 16 / 32 MiB on one thread,
#: 8 MiB was fastest in an earlier sweep (n = 100,000, d = 8, M = 5,000, float32: 0.63 / 0.56 /
#: 0.61 / 0.91 s).
PRODUCT_TILE_BYTES_PER_THREAD = 8 * 2**20
#: Rows from which a CPU Cholesky factorisation or triangular solve (one LAPACK call that cannot be
#: stopped halfway) runs in a worker thread while the calling thread polls for Ctrl-C (the call
#: itself is unchanged: same speed, same result; see ``mercer.linalg._factor._interruptible``).
#: Below it the call takes well under a second and a thread would buy nothing.
LAPACK_WORKER_MIN_N = 2048
#: Rows from which a dense CPU eigendecomposition (``eigh``: ~10x a Cholesky factorisation's
#: time at the same size; n = 1,024 took 0.3-2 s here) runs in that worker thread.
EIGH_WORKER_MIN_N = 512


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``: sizes in error messages and logs."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"  # pragma: no cover


class MemoryBudgetError(MemoryError, ValueError):
    """A computation cannot fit the memory budget. The message says what would."""


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """Tiling of an ``(n, m)`` kernel matrix.

    Attributes
    ----------
    row_block, col_block : int
        Tile shape. ``col_block == m`` means full-width row blocks (the fast case).
    tile_bytes : int
        Peak bytes of one tile, kernel scratch and per-tile vectors included.
    """

    n: int
    m: int
    row_block: int
    col_block: int
    tile_bytes: int
    budget: int

    @property
    def n_row_blocks(self) -> int:
        return math.ceil(self.n / self.row_block) if self.n else 0

    @property
    def n_col_blocks(self) -> int:
        return math.ceil(self.m / self.col_block) if self.m else 0

    @property
    def full_width(self) -> bool:
        return self.col_block >= self.m


def _tile_bytes(br: int, bc: int, d: int, itemsize: int, scratch: float, n_rhs: int) -> int:
    kernel = br * bc * (1.0 + scratch)         # the tile and the kernel's working copies
    inputs = (br + bc) * (d + 1)               # row norms and the gathered inputs of the tile
    vectors = (br + bc) * n_rhs * 2            # slices of v and the partial products
    return int(math.ceil((kernel + inputs + vectors) * itemsize))


def plan_blocks(n: int, m: int, d: int, *, itemsize: int, budget: int, scratch: float = 1.0,
                n_rhs: int = 1, min_rows: int = MIN_ROWS, max_tile_bytes: int | None = MAX_TILE_BYTES) -> BlockPlan:
    """Choose the tile ``(row_block, col_block)`` of an ``(n, m)`` kernel matrix.

    The tile is the largest that fits both the budget and ``max_tile_bytes``; full-width row
    blocks are preferred, and columns are split (into square-ish tiles) only when fewer than
    ``min_rows`` full-width rows would fit. Raises :class:`MemoryBudgetError` when not even a 1 x 1 tile fits the budget.

    Parameters
    ----------
    n, m : int
        Rows and columns of the kernel matrix.
    d : int
        Input features.
    itemsize : int
        Bytes per element (4 for float32, 8 for float64).
    budget : int
        Bytes the tile may use.
    scratch : float
        Extra working memory of the kernel, in multiples of the tile (``Kernel.scratch``).
    n_rhs : int
        Columns of the vectors multiplied by the tile.
    max_tile_bytes : int or None
        Cap on the tile (``MAX_TILE_BYTES`` by default; ``None``: only the budget limits it).
    """
    for name, val in (("n", n), ("m", m), ("d", d), ("itemsize", itemsize), ("budget", budget), ("n_rhs", n_rhs)):
        if int(val) != val or val < (0 if name in ("n", "m") else 1):
            raise ValueError(f"plan_blocks: {name} must be a {'non-negative' if name in ('n', 'm') else 'positive'} int; got {val!r}.")
    if n == 0 or m == 0:
        return BlockPlan(n, m, max(n, 1), max(m, 1), 0, budget)
    smallest = _tile_bytes(1, 1, d, itemsize, scratch, n_rhs)
    if smallest > budget:
        raise MemoryBudgetError(
            f"memory budget of {format_bytes(budget)} cannot hold even one kernel entry with d={d} "
            f"features (needs about {format_bytes(smallest)}); raise memory_budget."
        )
    limit = budget if max_tile_bytes is None else min(budget, max(int(max_tile_bytes), smallest))
    per_vec = d + 1 + 2 * n_rhs

    def rows_fitting(bc: int) -> int:  # tile_bytes(br, bc) <= limit, solved for br
        return int((limit / itemsize - bc * per_vec) // (bc * (1.0 + scratch) + per_vec))

    def cols_fitting(br: int) -> int:  # tile_bytes(br, bc) <= limit, solved for bc
        return int((limit / itemsize - br * per_vec) // (br * (1.0 + scratch) + per_vec))

    br = rows_fitting(m)
    if br >= min(min_rows, n):
        br = min(br, n)
        return BlockPlan(n, m, br, m, _tile_bytes(br, m, d, itemsize, scratch, n_rhs), budget)
    # Split the columns: square-ish tiles (a 64 x 88,000 tile ran its GEMM at 36 GFLOP/s here, a
    # 4096 x 4096 one at 82), shrinking the rows only when not even one column fits.
    br = min(n, max(min_rows, math.isqrt(int(limit / (itemsize * (1.0 + scratch))))))
    while cols_fitting(br) < 1 and br > 1:
        br = max(1, br // 2)
    bc = max(1, min(cols_fitting(br), m))
    return BlockPlan(n, m, br, bc, _tile_bytes(br, bc, d, itemsize, scratch, n_rhs), budget)


def product_tile_bytes(m: int, d: int, *, itemsize: int, threads: int, scratch: float = 1.0, n_rhs: int = 1) -> int:
    """Cap on the tiles of a repeated ``K^T K v`` product on the CPU: full-width row blocks whose
    kernel part holds :data:`PRODUCT_TILE_BYTES_PER_THREAD` per thread (at least ``MIN_ROWS``
    rows), plus what :func:`plan_blocks` counts besides (the inputs, the vectors). Counting the
    inputs in the cap instead would split the columns where ``m * d`` is large (d = 784, M = 5,000
    float32: 15.7 MB of centres alone), and a split tile is computed twice per product (1.88-1.93 s
    against 0.97 s with full-width tiles, two threads, n = 30,000)."""
    rows = max(MIN_ROWS, PRODUCT_TILE_BYTES_PER_THREAD * max(1, int(threads)) // max(1, m * itemsize))
    return _tile_bytes(rows, max(m, 1), d, itemsize, scratch, n_rhs)


def plan_rows(n: int, bytes_per_row: float, *, budget: int, fixed_bytes: float = 0, min_rows: int = 1,
              max_bytes: int | None = MAX_TILE_BYTES, what: str = "a block of rows") -> int:
    """Rows per chunk of a loop over ``n`` samples: the largest ``r <= n`` with
    ``fixed_bytes + r * bytes_per_row <= budget`` and ``r * bytes_per_row <= max_bytes``.

    ``bytes_per_row`` is everything one row of the chunk holds at once (its kernel row, its
    distances, its features and temporaries); ``fixed_bytes`` what the loop holds whatever the
    chunk (centres, an ``m x m`` accumulator). At least ``min_rows`` rows (when ``n`` has them)
    must fit, else :class:`MemoryBudgetError` says how much memory ``what`` needs.

    >>> plan_rows(10_000, 8 * 1000, budget=2**20)
    131
    """
    if int(n) != n or n < 0:
        raise ValueError(f"plan_rows: n must be a non-negative int; got {n!r}.")
    if not bytes_per_row >= 0 or not fixed_bytes >= 0:
        raise ValueError(f"plan_rows: bytes_per_row and fixed_bytes must be >= 0; got {bytes_per_row!r}, {fixed_bytes!r}.")
    if int(budget) != budget or budget < 1:
        raise ValueError(f"plan_rows: budget must be a positive int; got {budget!r}.")
    n, min_rows = int(n), max(1, int(min_rows))
    if n == 0:
        return 1
    need = fixed_bytes + min(min_rows, n) * bytes_per_row
    if need > budget:
        raise MemoryBudgetError(
            f"{what} needs about {format_bytes(need)} ({min(min_rows, n)} row(s) of {format_bytes(bytes_per_row)}"
            + (f" + {format_bytes(fixed_bytes)} held throughout" if fixed_bytes else "")
            + f"), more than the memory budget of {format_bytes(budget)}; raise memory_budget."
        )
    if bytes_per_row <= 0:
        return n
    limit = budget - fixed_bytes
    if max_bytes is not None:
        limit = min(limit, max(max_bytes, min_rows * bytes_per_row))
    return max(min(n, int(limit // bytes_per_row)), min(min_rows, n))


#: Called as ``observer(desc, done, total)`` after each block of a planned loop (progress bars,
#: interrupt checks); set with :func:`observe_blocks`.
_OBSERVER: contextvars.ContextVar[Callable[[str | None, int, int], None] | None] = contextvars.ContextVar(
    "mercer_block_observer", default=None)


def current_observer() -> Callable[[str | None, int, int], None] | None:
    """The observer of :func:`observe_blocks` in force here (``None`` outside one): for loops that
    report between blocks themselves (a compiled loop's pauses)."""
    return _OBSERVER.get()


@contextlib.contextmanager
def observe_blocks(observer: Callable[[str | None, int, int], None] | None) -> Iterator[None]:
    """Call ``observer(desc, rows_done, n)`` after every block of every planned loop in this
    context (:func:`row_blocks` and the :class:`~mercer.linalg.KernelOperator` products), and
    every 0.1 s with ``rows_done=0`` while a long CPU Cholesky factorisation or triangular solve
    runs (``n`` at its end). An exception it raises (``KeyboardInterrupt``, a cancellation) stops
    the loop between blocks, or leaves the factorisation at once."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def row_blocks(n: int, rows: int, *, desc: str | None = None) -> Iterator[slice]:
    """The loop over samples: slices of at most ``rows`` rows covering ``range(n)``, in order.

    Every loop over sample blocks goes through here (sizes from :func:`plan_rows` or
    :func:`plan_blocks`), so progress, interrupts and distributed execution have one place to
    plug in (:func:`observe_blocks`); inside :func:`mercer.progress` a loop that lasts more than
    half a second shows a bar.
    """
    rows = max(1, int(rows))
    observer = _OBSERVER.get()
    bar = task(desc or "blocks", total=int(n), unit="rows", level=logging.DEBUG)  # inert unless mercer.progress()
    try:
        for start in range(0, int(n), rows):
            stop = min(start + rows, int(n))
            yield slice(start, stop)
            if observer is not None:
                observer(desc, stop, int(n))
            bar.update(stop)
    finally:
        bar.close()


def available_memory(device=None) -> int:
    """Bytes currently available on ``device`` (free RAM for the CPU, free memory for CUDA)."""
    import torch

    dev = torch.device(device or "cpu")
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].strip().split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
        return int(pages * os.sysconf("SC_PAGE_SIZE")) if pages else 4 * 2**30
