"""One execution plan per call: the memory budget resolved once, and every budget derived from it.

A public method of an estimator (``fit``, ``predict``, ``transform``, ...) resolves the memory
budget once, when it starts -- its ``memory_budget`` parameter, else
``mercer.config_context(memory_budget=...)``, else a fraction of the memory free then on the
device -- into an :class:`ExecutionPlan`, an immutable value that the call passes down (the
estimators' ``_plan``; :func:`planned_call` makes it the plan of the call, so helpers that take a
``memory_budget=None`` find it too: one fit plans against one budget, not against the free memory
of each moment).

Every number that sizes a block lives in linalg: the planner (:mod:`._blocking`) and the named
budgets below. An estimator asks for a budget by what it is for (:meth:`ExecutionPlan.share`,
:meth:`ExecutionPlan.holding`, :func:`nystroem_plan`, ...), and does no byte arithmetic itself
(``tools/code_metrics.py`` reports any that comes back).

That a call holds to its plan is measured, not assumed: ``benchmarks/probes/probe_memory_budget.py``
runs every estimator's fit and predict in a fresh process per budget (64 MiB to 2 GiB) on data
whose n x n kernel does not fit, against ``peak RSS <= baseline + inputs + 1.2 x budget`` or a
:class:`MemoryBudgetError` naming its remedy (``tests/test_memory_budget.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import dataclasses
import os
import sys
from collections.abc import Iterator

from .._config import get_config
from .._validation import COMPUTE_CONSTRAINTS, check_param
from ._blocking import MemoryBudgetError, available_memory, format_bytes

__all__ = ["CROSS_SCRATCH_MIN_BYTES", "DIRECT_TILE_BYTES", "DISTANCE_TILE_BYTES", "FACTOR_COLUMN_MIN_BYTES",
           "KMEANS_BLOCK_BYTES", "KMEANS_MAX_CHUNK_BYTES", "KMEANS_TILE_BYTES", "MIN_WORK_BYTES", "SKETCH_SLAB_BYTES",
           "STATISTIC_BLOCK_BYTES", "STREAMED_METHOD_BYTES", "SVM_BATCH_BYTES", "TASK_MIN_BYTES", "MiB", "SHARES", "SHIFT_SAMPLE_ROWS", "STREAM_READ_BYTES",
           "ExecutionPlan", "NystroemPlan", "active_plan", "current_plan", "default_memory_budget", "nystroem_plan", "planned_call",
           "release_freed_memory", "resident_bytes"]

#: A mebibyte: the unit of sizes given in megabytes (LIBSVM's ``cache_size``).
MiB = 2**20

#: Smallest budget ever planned against, whatever the free memory (a machine under pressure still
#: runs small problems; the planner's own errors say when even that does not fit).
MIN_WORK_BYTES = 16 * 2**20

#: Cap on the tiles of a one-pass, GEMM-bound product (the direct Nyström solve's ``K^T W K``, the
#: Dask tasks' tiles): as measured in ``benchmarks/suites/shapes.py`` and by the probe
#: ``benchmarks/probes/probe_product_tile_bytes.py`` (its 32 MiB side).
DIRECT_TILE_BYTES = 32 * 2**20

#: Rows (evenly spaced) whose kernel columns' means shift the tiles of a one-pass centred Gram
#: (:meth:`~mercer.linalg.KernelOperator.statistics`); fewer where ``SHARES["shift sample"]`` of the
#: tiles' budget holds fewer.
SHIFT_SAMPLE_ROWS = 1024

#: Input bytes read from a source at once (several row blocks of tiles): a read has a per-call cost
#: (a Parquet record batch: ~5 ms, whatever its size); 1M rows streamed from Parquet at M = 10,000
#: took 202 s with one read per 32 MiB tile, 117 s in memory.
STREAM_READ_BYTES = 32 * 2**20

#: Cap on a streamed ``predict`` / ``transform``'s input blocks (:func:`~mercer.linalg.map_rows`; four times
#: the rows' bytes, within the ``"streamed method"`` share). Each block pays a read and a call of the
#: method, whose own tiles grow with the block: ``benchmarks/probes/probe_streamed_method_bytes.py``
#: (2M x 8 rows, NystroemKernelRidge M = 200, two runs on a loaded 2-core machine) had 4 MiB within
#: 1.00-1.13 of the best cap for .npy and Parquet, 32 MiB (STREAM_READ_BYTES, used before) 1.25-1.52
#: slower for .npy and 1.74-2.78 for Parquet, 1 MiB 1.95 for Parquet.
STREAMED_METHOD_BYTES = 4 * 2**20

# -- block sizes of the packages above linalg (each where its measurement says) -------------------
#: Largest block of squared distances computed at once by k-means (GEMM outputs this size stay in
#: cache-friendly territory; larger ones only cost memory).
KMEANS_TILE_BYTES = 4 * 2**20
#: Bytes of a block of points transposed for k-means' compiled distance loop (L1 cache-sized; 256
#: rows at most, where the running minima are 2 KiB).
KMEANS_BLOCK_BYTES = 32 * 2**10
#: At most this many bytes of k-means' per-chunk (k, d) float64 buffers of changes to the sums.
KMEANS_MAX_CHUNK_BYTES = 16 * 2**20
#: Largest tile of kernel distances a neighbours' query computes at once.
DISTANCE_TILE_BYTES = 64 * 2**20
#: Largest batch of kernel rows the SVM solver computes at once.
SVM_BATCH_BYTES = 64 * 2**20
#: Slabs of the +-1 hashing matrix of a count sketch built at once (``TensorSketch`` on GPUs).
SKETCH_SLAB_BYTES = 32 * 2**20
#: Fewest bytes an incomplete Cholesky's kernel columns are computed in, whatever its factor holds.
FACTOR_COLUMN_MIN_BYTES = 2**20
#: Fewest bytes of scratch a kernel block beside its kept output is computed in.
CROSS_SCRATCH_MIN_BYTES = 4 * 2**20
#: Largest block of rows a streaming statistic (a source's variance) reads at once.
STATISTIC_BLOCK_BYTES = 64 * 2**20
#: Fewest bytes a Dask task's tiles may use, whatever its worker's memory limit.
TASK_MIN_BYTES = 2**20

#: The named shares of a budget: what fraction of it a purpose may take.
SHARES = {
    # Nyström CG: the n x M kernel matrix is kept between iterations when it fits this share of
    # what the M x M matrices leave (an iteration then reads it instead of recomputing it).
    "kept matrix": 0.5,
    # a row block of random features: its input rows, features and weighted copy.
    "feature rows": 0.25,
    # a block of rows read from a source by a streaming pass (statistics, k-means, sketches).
    "streamed rows": 0.25,
    # the input rows a blocked product reads from a source at once.
    "source reads": 0.25,
    # the rows of the centring sample of a one-pass centred Gram.
    "shift sample": 0.25,
    # the SVM's kernel-row cache when ``cache_size`` is not given.
    "row cache": 0.5,
    # the float32 copy of the data an SVM computes its dense RBF rows from (more: float64 products
    # on the data itself).
    "float32 features": 0.1,
    # the input block of a streamed predict / transform (the method plans its own kernel rows).
    "streamed method": 0.125,
    # the neighbour lists of a radius search (one block of queries' for a prediction; all of them
    # for radius_neighbors, which refuses more), the rest going to the distance tiles.
    "neighbour lists": 0.5,
    # the largest in-memory array not streamed: bigger inputs are read block by block.
    "in-memory input": 0.25,
    # what a fit may leave resident beyond its start (its model, freed blocks in glibc's heap): more
    # and the freed memory is returned to the system when the fit ends (release_freed_memory).
    "freed and kept": 0.05,
    # what one Dask task may use of its worker's memory limit (per worker thread).
    "task": 0.25,
}


@dataclasses.dataclass(frozen=True)
class ExecutionPlan:
    """The memory of one call: its budget in bytes, and the device it was resolved for.

    Attributes
    ----------
    budget : int
        Bytes the call may use besides its inputs and outputs.
    device : str
        The device whose free memory the budget was read from (``"cpu"``, ``"cuda:0"``).
    origin : str
        ``"memory_budget"`` (the estimator's parameter), ``"config_context"``, ``"free memory"``, or
        ``"held"`` / ``"share"`` for a plan derived from another.
    """

    budget: int
    device: str = "cpu"
    origin: str = "memory_budget"

    @classmethod
    def resolve(cls, memory_budget=None, device=None, *, owner: str = "default_memory_budget") -> ExecutionPlan:
        """The budget in force, validated once: ``memory_budget``, else the configuration's, else
        ``memory_fraction`` of the memory free now on ``device`` (at least :data:`MIN_WORK_BYTES`)."""
        dev = _device_name(device)
        if memory_budget is not None:
            if isinstance(memory_budget, ExecutionPlan):
                return memory_budget
            check_param(owner, "memory_budget", memory_budget, COMPUTE_CONSTRAINTS["memory_budget"])
            return cls(int(memory_budget), dev, "memory_budget")
        cfg = get_config()
        if cfg.memory_budget is not None:
            return cls(int(cfg.memory_budget), dev, "config_context")
        try:
            free = available_memory(dev)
        except (RuntimeError, ValueError, TypeError, AssertionError):  # a device the call will reject itself
            dev, free = "cpu", available_memory("cpu")
        return cls(max(int(free * cfg.memory_fraction), MIN_WORK_BYTES), dev, "free memory")

    def share(self, purpose: str) -> int:
        """Bytes of the named share of the budget (:data:`SHARES`), at least 1."""
        try:
            fraction = SHARES[purpose]
        except KeyError:
            raise KeyError(f"no share named {purpose!r}; the shares are {sorted(SHARES)}.") from None
        return max(int(self.budget * fraction), 1)

    def holding(self, nbytes: float, *, what: str = "", remedy: str = "", floor: int = 1) -> ExecutionPlan:
        """The plan of what is left while ``nbytes`` are held for the rest of the call (at least
        ``floor`` bytes). With ``what``, ``nbytes`` over the budget is a :class:`MemoryBudgetError`
        that names ``what`` and ``remedy``."""
        nbytes = int(max(nbytes, 0))
        if what and nbytes > self.budget:
            raise MemoryBudgetError(f"{what} needs about {format_bytes(nbytes)}, more than the memory budget of "
                                    f"{format_bytes(self.budget)}" + (f". {remedy}" if remedy else "."))
        return dataclasses.replace(self, budget=max(self.budget - nbytes, int(floor), 1), origin="held")

    def part(self, purpose: str) -> ExecutionPlan:
        """The plan of one named share (:meth:`share`)."""
        return dataclasses.replace(self, budget=self.share(purpose), origin="share")

    def __int__(self) -> int:
        return self.budget

    def __index__(self) -> int:
        return self.budget


def _device_name(device) -> str:
    if device is None:
        return "cpu"
    name = str(device)
    return "cuda:0" if name == "cuda" else name


# -- the plan of the call in progress -------------------------------------------------------------
#: ``((owner, plan), ...)``: the calls in progress in this context, innermost last.
_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("mercer_execution_plans", default=())


@contextlib.contextmanager
def planned_call(owner, memory_budget=None, device=None, *, release: bool = False) -> Iterator[ExecutionPlan]:
    """Run a call of ``owner`` (an estimator) under one plan: the plan ``owner`` already has in this
    context (a ``fit_transform`` calling ``fit``, a streamed ``predict`` calling itself per block),
    else one resolved now from ``memory_budget`` and ``device``. With ``release`` (a fit), the outermost
    call returns the heap memory it freed to the system when it ends (:func:`release_freed_memory`)."""
    active = _ACTIVE.get()
    for o, plan in reversed(active):
        if o is owner:
            yield plan
            return
    plan = current_plan(memory_budget, device, owner=type(owner).__name__)
    token = _ACTIVE.set(active + ((owner, plan),))
    since = resident_bytes() if release and not active and _MALLOC_TRIM is not None else None
    try:
        yield plan
    finally:
        _ACTIVE.reset(token)
        if since is not None:  # an outermost fit: what it freed is not kept under the next call's plan
            release_freed_memory(since, plan.share("freed and kept"))


def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` (another C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()
#: ``(pid, fd)`` of this process's open ``/proc/self/statm`` (reopened in a forked child).
_STATM: list = [None, None]


def resident_bytes() -> int:
    """This process's resident set size now (Linux; 0 elsewhere): one read of ``/proc/self/statm``."""
    pid = os.getpid()
    try:
        if _STATM[0] != pid:
            _STATM[:] = [pid, os.open("/proc/self/statm", os.O_RDONLY)]
        return int(os.pread(_STATM[1], 64, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def release_freed_memory(since: int, keep: int = 0) -> bool:
    """Return the heap memory freed so far to the system (glibc's ``malloc_trim(0)``; nothing
    elsewhere) when the resident set grew by more than ``keep`` bytes since ``since``; whether it did.

    glibc keeps freed blocks below its dynamic mmap threshold (up to 32 MiB) resident in the heap, so
    the kernel blocks a fit freed stayed in the RSS under the next call's planned tiles: a
    KernelPerceptron predict at 64 MiB peaked 92 MiB over its baseline after its fit, 67 MiB with the
    fit's freed memory returned (docs/decisions/0004-freed-memory-between-calls.md). Each outermost
    fit (:func:`planned_call` with ``release``) ends with it, keeping the ``"freed and kept"`` share:
    not a predict, nor a fit that grew the process less (a trim after every small call would cost
    its pages' faults again on the next one)."""
    if _MALLOC_TRIM is None or resident_bytes() - since <= keep:
        return False
    _MALLOC_TRIM(0)
    return True


def active_plan(owner=None, device=None) -> ExecutionPlan | None:
    """The plan of ``owner``'s call in progress in this context (``owner=None``: of the innermost
    call, when it was resolved for ``device``), or ``None``."""
    active = _ACTIVE.get()
    if owner is not None:
        for o, plan in reversed(active):
            if o is owner:
                return plan
        return None
    if active:
        plan = active[-1][1]
        if device is None or _device_name(device) == plan.device:
            return plan
    return None


def current_plan(memory_budget=None, device=None, *, owner: str = "default_memory_budget") -> ExecutionPlan:
    """The plan in force for ``device``: ``memory_budget`` (an int or a plan), else the plan of the
    call in progress (:func:`planned_call`: an estimator used inside another's fit plans within the
    outer call's budget), else one resolved now (the configuration's budget, else free memory)."""
    if memory_budget is None:
        plan = active_plan(device=device)
        if plan is not None:
            return plan
    return ExecutionPlan.resolve(memory_budget, device, owner=owner)


def default_memory_budget(device=None, memory_budget=None) -> int:
    """The budget in force for ``device`` in bytes (:func:`current_plan`)."""
    return current_plan(memory_budget, device).budget


# -- named plans ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NystroemPlan:
    """How a Nyström ridge fit spends its budget.

    Attributes
    ----------
    solve_bytes : int
        The M x M float64 matrices and vectors of the solve.
    tiles : ExecutionPlan
        What the kernel tiles of ``K_nM`` may use (at least :data:`MIN_WORK_BYTES`).
    keep_bytes : int
        What the operator may spend keeping ``K_nM`` between CG iterations (0 for the direct solve).
    max_tile_bytes : int or "product"
        The direct solve's one GEMM-bound pass takes :data:`DIRECT_TILE_BYTES` tiles; CG's repeated
        ``K^T K v`` products take tiles sized for the cache (``"product"``).
    """

    solve_bytes: int
    tiles: ExecutionPlan
    keep_bytes: int
    max_tile_bytes: int | str


def nystroem_plan(plan: ExecutionPlan, solve_bytes: int, *, direct: bool, owner: str = "", n_centers: int = 0
                  ) -> NystroemPlan:
    """The budget of a Nyström solve: ``solve_bytes`` held throughout (a :class:`MemoryBudgetError`
    naming a number of centres that fits when it does not), the tiles and the kept matrix from the
    rest."""
    if solve_bytes > plan.budget:
        fit = int((plan.budget / 16) ** 0.5)
        raise MemoryBudgetError(
            f"{owner}: n_centers={n_centers} needs about {format_bytes(solve_bytes)} for its M x M matrices "
            f"(float64), more than the memory budget of {format_bytes(plan.budget)}. Use fewer "
            f"centres (about {fit} fit), or raise memory_budget.")
    left = plan.holding(solve_bytes)
    tiles = plan.holding(solve_bytes, floor=MIN_WORK_BYTES)
    keep = 0 if direct else left.share("kept matrix") if plan.budget > solve_bytes else 0
    return NystroemPlan(int(solve_bytes), tiles, keep, DIRECT_TILE_BYTES if direct else "product")
