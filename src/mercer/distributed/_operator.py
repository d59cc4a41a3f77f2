"""``DaskKernelOperator``: the products of a Nyström solver run as tasks on a Dask cluster.

The operator is ``K = k(X, Z)`` of shape ``(n, M)`` with ``X`` a Dask array split into row
partitions held by the workers, and offers what the solver uses of
:class:`~mercer.linalg.KernelOperator`: ``kt_k_v`` (each CG iteration), ``rmatvec`` (the
right-hand side ``K^T W y`` and the column means), ``kt_k`` (the direct solver). Shape of the work:

* the partitions are persisted once, computed from their graph (so a lost worker's partitions are
  recomputed from their lineage, not lost with it); each product's tasks are spread over the
  workers in proportion to their threads (``_where``: every product waits for its busiest worker);
* the kernel and the centres are sent to the cluster once (every worker fetches one copy);
* each product scatters its vector ``v`` to one worker, from which every worker that runs a task
  fetches one copy (a large argument in the task itself would travel through the scheduler; a
  broadcast scatter hangs when a worker dies during it, see ``_share``), runs one task per partition -- a local
  :class:`~mercer.linalg.KernelOperator` on the partition, its tiles capped within the task's
  budget -- and sums the partial products on the workers by a tree (``_FAN_IN`` at a time), so the
  client receives one ``M x t`` array;
* NumPy crosses the engine boundary; torch runs inside the tasks.

Sums are float64 and their order is fixed (partition order, then the tree), so two runs give the
same bits.
"""

from __future__ import annotations

import functools
import logging
import time

import numpy as np
import scipy.sparse as sp
import torch

from .._sparse import is_sparse
from ..linalg import DIRECT_TILE_BYTES, KernelOperator, block_tensor, format_bytes

__all__ = ["DaskKernelOperator"]

log = logging.getLogger(__name__)

#: Partial products summed per task of the tree.
_FAN_IN = 4
# One kernel tile inside a task is at most DIRECT_TILE_BYTES (the direct solve's ``K^T K``; glibc's
# settings, ``_keep_tiles_in_heap``); the products' tiles are sized as the in-process Nyström
# operator's (``max_tile_bytes="product"``: 8 MiB of kernel values per worker thread, read twice).
#: A product interrupted by a lost worker (a broken connection while scattering) is run again this
#: many times, each after waiting (at most ``_WAIT_WORKERS_S``) for a worker to be there.
_RETRIES = 3
_WAIT_WORKERS_S = 60
#: Seconds a scatter may take before it counts as a failed transfer (and the product is re-run).
_SCATTER_TIMEOUT_S = 60


#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@functools.cache
def _keep_tiles_in_heap() -> None:
    """Once per worker process: glibc serves blocks up to twice a tile from its heap and keeps up
    to eight tiles' worth of freed memory there (Linux; elsewhere nothing is done).

    Why: Dask's nannies start their workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also
    freezes glibc's mmap threshold at 128 KiB, so every 32 MiB tile was mapped afresh and its pages
    faulted in one by one. ``K^T K v`` at n = 1,000,000, M = 10,000 (float32, 2 threads, one process;
    probe: ``benchmarks/probes/probe_keep_tiles_in_heap.py``): 20.9 s with that variable, 6.9 s
    with it and these settings, 6.8 s with glibc's defaults; on a LocalCluster's workers the tasks
    had run 2.4x slower per core than the same products in-process.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(2 * DIRECT_TILE_BYTES))
        libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(8 * DIRECT_TILE_BYTES))
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


def _worker_threads() -> int:
    try:
        from distributed import get_worker

        return int(get_worker().state.nthreads)
    except (ImportError, ValueError, AttributeError):  # pragma: no cover - run outside a worker
        return torch.get_num_threads()


def _local_operator(block: np.ndarray, kernel, Z: np.ndarray, budget: int, n_rhs: int,
                    shift: np.ndarray | None = None, max_tile_bytes="product") -> KernelOperator:
    """A partition's operator (torch inside the task, one torch thread per worker thread), its tiles
    less ``shift`` (the centred columns of an intercept) when given; tiles sized for the products
    (``"product"``), or ``DIRECT_TILE_BYTES`` for the direct solve's one GEMM-bound pass."""
    _keep_tiles_in_heap()
    threads = _worker_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if not np.isfinite(block.data if sp.issparse(block) else block).all():
        raise ValueError("X contains NaN or infinity (in a Dask partition); mercer needs finite inputs.")
    dtype = torch.float64 if Z.dtype == np.float64 else torch.float32
    op = KernelOperator(kernel, block_tensor(block, dtype=dtype, device="cpu"), block_tensor(Z, dtype=dtype, device="cpu"),
                        memory_budget=budget, n_rhs=n_rhs, max_tile_bytes=max_tile_bytes)
    op.shift = None if shift is None else torch.from_numpy(shift)
    return op


def _tensor(a, dtype) -> torch.Tensor | None:
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a, dtype=dtype))


def _part_kt_k_v(block, kernel, Z, v, weights, budget, shift):
    op = _local_operator(block, kernel, Z, budget, v.shape[1], shift)
    return op.kt_k_v(torch.from_numpy(v), weights=_tensor(weights, Z.dtype), out_dtype=torch.float64).numpy()


def _part_rmatvec(block, kernel, Z, u, budget, shift):
    op = _local_operator(block, kernel, Z, budget, u.shape[1] if u.ndim == 2 else 1, shift)
    return op.rmatvec(_tensor(u, Z.dtype), out_dtype=torch.float64).numpy()


def _part_kt_k(block, kernel, Z, weights, budget, shift):
    op = _local_operator(block, kernel, Z, budget, Z.shape[0], shift, max_tile_bytes=DIRECT_TILE_BYTES)
    return op.kt_k(weights=_tensor(weights, Z.dtype), out_dtype=torch.float64).numpy()


def _sum(*parts):
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


class DaskKernelOperator:
    """``K = k(X, Z)`` with ``X`` a Dask array of row partitions, products run on the cluster.

    Parameters
    ----------
    kernel : Kernel
    X : dask array of shape (n, d)
        Read in ``dtype``; rechunked to whole rows. Its chunks may be scipy sparse matrices
        (``da.from_array(X_csr, chunks=(rows, -1), asarray=False)``): each task then computes its
        tiles from sparse rows (:class:`~mercer._sparse.SparseRows`), never densified.
    Z : tensor or SparseRows of shape (M, d)
        The centres (their dtype is the operator's; results come back on their device).
    client : distributed.Client
    memory_budget : int
        Bytes one task may hold for its tiles (besides its partition).
    n_rhs : int
        Right-hand sides the tiles are planned for.

    Attributes
    ----------
    n_partitions : int
    comm_bytes : int
        Bytes the last product moved between processes: its vector scattered to every worker,
        and the partial products (an upper bound: partials summed on the worker that holds them
        do not travel) and the result sent to the client.
    """

    def __init__(self, kernel, X, Z: torch.Tensor, *, client, memory_budget: int, n_rhs: int = 1):
        self.kernel = kernel
        self.client = client
        self.Z = Z
        self.device = Z.device
        self.np_dtype = np.dtype(str(Z.dtype)[6:])
        self.budget = int(memory_budget)
        X = X.rechunk({1: -1})
        if X.dtype != self.np_dtype:
            X = X.astype(self.np_dtype)
        self.X = X
        self.row_chunks = tuple(int(c) for c in X.chunks[0])
        self.n_partitions = len(self.row_chunks)
        t0 = time.perf_counter()
        # Computed from the graph, not scattered: a worker lost mid-fit has its partitions recomputed.
        self._parts = client.compute(list(X.to_delayed().ravel()), optimize_graph=False)
        self._plan: tuple[frozenset, list] = (frozenset(), [])  # (workers, each partition's task's worker)
        # sparse centres travel as a scipy CSR matrix (sparse partitions: scipy sparse chunks)
        self._kernel_f, self._Z_f = self._share([kernel, Z.to_scipy() if is_sparse(Z) else Z.detach().cpu().numpy()])
        self._row_cache: dict = {}  # dask name -> futures of its partitions (targets, weights)
        self._shift = self._shift_f = None
        self.comm_bytes = 0
        log.debug("DaskKernelOperator: %d partitions on %d workers (%.2f s to submit)", self.n_partitions,
                  len(client.scheduler_info().get("workers", {})), time.perf_counter() - t0)

    def _where(self) -> list[dict]:
        """Each partition's task's placement: ``workers=[address]`` (loosely: a lost worker's tasks
        run elsewhere), spreading the rows over the workers in proportion to their threads.

        Every product waits for its busiest worker, and Dask runs a task where its partition lives,
        wherever that chunk happened to be computed (or moved): 8 equal chunks on 2 workers sat 3 / 5
        in one run (a product then takes 5/4 of the balanced time). Partitions are assigned largest first to the least loaded worker (rows per
        thread); a task whose partition sits elsewhere fetches it (one partition, milliseconds on a
        network, against seconds of compute). Moving the data instead, by a task restricted to the
        target, did not hold: work stealing moved such a short task back to the data. The plan is
        made again when the workers change."""
        workers = self.client.scheduler_info().get("workers", {})
        key = frozenset(workers)
        if key != self._plan[0]:
            threads = {a: max(1, int(w.get("nthreads", 1) or 1)) for a, w in workers.items()}
            load = dict.fromkeys(sorted(threads), 0)
            target: list = [None] * self.n_partitions
            if len(threads) > 1:
                for i in sorted(range(self.n_partitions), key=lambda i: -self.row_chunks[i]):
                    a = min(load, key=lambda a: ((load[a] + self.row_chunks[i]) / threads[a], a))
                    target[i], load[a] = a, load[a] + self.row_chunks[i]
            self._plan = (key, [{} if a is None else {"workers": [a], "allow_other_workers": True} for a in target])
        return self._plan[1]

    def _share(self, data):
        """Futures of ``data`` placed on one worker; each worker that runs a task fetches it from its
        holder once (so each worker still receives one copy per product).

        Not ``scatter(broadcast=True)``: when a worker dies during a broadcast, the scheduler's
        replication keeps retrying the dead address (30 s connect timeouts, without end), and the
        fit hangs; a plain scatter fails over like any other transfer."""
        return self.client.scatter(data, hash=False, timeout=_SCATTER_TIMEOUT_S)

    # -- the centred columns (an intercept), as :attr:`mercer.linalg.KernelOperator.shift` ----------
    @property
    def shift(self) -> torch.Tensor | None:
        """``None`` or a length-M vector subtracted from every row (broadcast to the workers once)."""
        return self._shift

    @shift.setter
    def shift(self, value) -> None:
        self._shift = value
        self._shift_f = None if value is None else self._share(
            np.ascontiguousarray(torch.as_tensor(value).detach().cpu().numpy(), dtype=self.np_dtype))

    # -- geometry ---------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (sum(self.row_chunks), self.Z.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self.Z.dtype

    def _n_workers(self) -> int:
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    # -- per-sample arrays placed like X's rows --------------------------------------------------
    def per_sample(self, u):
        """``u`` (n,) or (n, t) -- numpy, torch or Dask -- as a Dask array chunked like ``X``'s rows,
        in the operator's dtype (``None`` stays ``None``)."""
        import dask.array as da

        if u is None:
            return None
        if isinstance(u, torch.Tensor):
            u = u.detach().cpu().numpy()
        if not isinstance(u, da.Array):
            u = np.asarray(u)
            if u.shape[0] != self.shape[0]:
                raise ValueError(f"a per-sample array has {u.shape[0]} rows; X has {self.shape[0]}.")
            return da.from_array(u.astype(self.np_dtype, copy=False), chunks=(self.row_chunks,) + u.shape[1:])
        if any(np.isnan(c) for c in u.chunks[0]):
            u = u.compute_chunk_sizes()
        if u.shape[0] != self.shape[0]:
            raise ValueError(f"a per-sample array has {u.shape[0]} rows; X has {self.shape[0]}.")
        u = u.rechunk((self.row_chunks,) + tuple((s,) for s in u.shape[1:]))
        return u.astype(self.np_dtype) if u.dtype != self.np_dtype else u

    def _row_futures(self, u) -> list:
        """Futures of ``u``'s partitions (aligned with ``X``'s), computed once per array."""
        u = self.per_sample(u)
        key = u.name
        if key not in self._row_cache:
            self._row_cache[key] = self.client.compute(list(u.to_delayed().ravel()), optimize_graph=False)
        return self._row_cache[key]

    # -- products ---------------------------------------------------------------------------------
    def _reduce(self, partials: list, nbytes: int) -> np.ndarray:
        """Tree-sum of the partial products on the workers; the client fetches the one result."""
        moved = 0
        while len(partials) > 1:
            nxt = []
            for i in range(0, len(partials), _FAN_IN):
                group = partials[i:i + _FAN_IN]
                nxt.append(group[0] if len(group) == 1 else self.client.submit(_sum, *group, pure=False))
                moved += (len(group) - 1) * nbytes if len(group) > 1 else 0
            partials = nxt
        out = partials[0].result()
        self.comm_bytes += moved + nbytes
        return out

    def _back(self, a: np.ndarray, squeeze: bool, out_dtype) -> torch.Tensor:
        out = torch.from_numpy(a).to(device=self.device, dtype=out_dtype or self.dtype)
        return out[:, 0] if squeeze else out

    def _run(self, what: str, product):
        """``product()`` (scatter, tasks, reduction), run again when the cluster loses a worker while
        scattering or fetching (the partitions are recomputed by Dask; the product is idempotent)."""
        from distributed.client import FutureCancelledError

        for attempt in range(_RETRIES + 1):
            try:
                return product()
            except (OSError, FutureCancelledError) as exc:  # CommClosedError is an OSError
                if attempt == _RETRIES:
                    raise
                log.warning("DaskKernelOperator.%s: %s: %s; running it again", what, type(exc).__name__, exc)
                self.client.wait_for_workers(1, timeout=_WAIT_WORKERS_S)
        raise AssertionError("unreachable")  # pragma: no cover

    def kt_k_v(self, v, *, weights=None, out_dtype=None) -> torch.Tensor:
        """``K^T diag(weights) K v`` summed in float64 over the partitions (``v``: (M,) or (M, t)
        on the client; ``weights``: per-sample, as for :meth:`rows`)."""
        v = torch.as_tensor(v)
        squeeze = v.ndim == 1
        v_np = np.ascontiguousarray((v[:, None] if squeeze else v).detach().cpu().numpy(), dtype=self.np_dtype)
        if v_np.shape[0] != self.shape[1]:
            raise ValueError(f"v has {v_np.shape[0]} rows; the operator expects {self.shape[1]}.")
        ws = [None] * self.n_partitions if weights is None else self._row_futures(weights)

        def product():
            self.comm_bytes = v_np.nbytes * self._n_workers()
            v_f = self._share(v_np)
            parts = [self.client.submit(_part_kt_k_v, x, self._kernel_f, self._Z_f, v_f, w, self.budget,
                                        self._shift_f, pure=False, **where)
                     for x, w, where in zip(self._parts, ws, self._where())]
            return self._reduce(parts, self.shape[1] * v_np.shape[1] * 8)
        return self._back(self._run("kt_k_v", product), squeeze, out_dtype)

    def rmatvec(self, u, *, out_dtype=None) -> torch.Tensor:
        """``K^T u`` for a per-sample ``u`` (n,) or (n, t): Dask (aligned by :meth:`rows`), numpy or torch."""
        squeeze = len(u.shape) == 1
        us = self._row_futures(u)
        t = 1 if squeeze else int(u.shape[1])

        def product():
            self.comm_bytes = 0
            parts = [self.client.submit(_part_rmatvec, x, self._kernel_f, self._Z_f, ui, self.budget, self._shift_f,
                                        pure=False, **where)
                     for x, ui, where in zip(self._parts, us, self._where())]
            return self._reduce(parts, self.shape[1] * t * 8)
        return self._back(self._run("rmatvec", product).reshape(self.shape[1], t), squeeze, out_dtype)

    def kt_k(self, *, weights=None, out_dtype=None) -> torch.Tensor:
        """``K^T diag(weights) K`` (M x M, float64 sums): one pass, summed on the workers."""
        ws = [None] * self.n_partitions if weights is None else self._row_futures(weights)

        def product():
            self.comm_bytes = 0
            parts = [self.client.submit(_part_kt_k, x, self._kernel_f, self._Z_f, w, self.budget, self._shift_f,
                                        pure=False, **where)
                     for x, w, where in zip(self._parts, ws, self._where())]
            return self._reduce(parts, self.shape[1] ** 2 * 8)
        return self._back(self._run("kt_k", product), False, out_dtype)

    def statistics(self, U, *, weights=None, n_w: float | None = None, centre: bool = False, gram: bool = True):
        """As :meth:`mercer.linalg.KernelOperator.statistics`, in two passes over the partitions when
        centring a Gram: ``K^T [U, W 1]`` (the right-hand side and the column means), then the Gram of
        the tiles shifted by the means (the shift is left at the means)."""
        import dask.array as da

        from ..linalg import Statistics

        squeeze = len(U.shape) == 1
        U = self.per_sample(U[:, None] if squeeze else U)
        t = int(U.shape[1])
        if centre:
            w = da.ones((self.shape[0], 1), chunks=(self.row_chunks, 1), dtype=self.np_dtype) if weights is None \
                else self.per_sample(weights)[:, None]
            if n_w is None:
                n_w = float(self.shape[0] if weights is None else w.sum().compute())
            U = da.concatenate([U, w], axis=1)
        KtU = self.rmatvec(U, out_dtype=torch.float64)
        mean = KtU[:, t] / n_w if centre else None
        H = None
        if gram:
            self.shift = None if mean is None else mean.to(self.dtype)
            H = self.kt_k(weights=weights, out_dtype=torch.float64)
        return Statistics(H, KtU[:, :t], mean)

    def close(self) -> None:
        """Release the persisted partitions and broadcast data on the cluster."""
        self._parts = []
        self._row_cache.clear()
        self._kernel_f = self._Z_f = self._shift_f = None

    def __repr__(self) -> str:
        return (f"DaskKernelOperator({self.kernel!r}, shape={self.shape}, partitions={self.n_partitions}, "
                f"task budget={format_bytes(self.budget)})")
