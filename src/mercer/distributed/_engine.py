"""The Dask engine: which client runs the products, and the per-sample targets left on the cluster."""

from __future__ import annotations

import numpy as np

from .._config import get_config
from ..linalg import TASK_MIN_BYTES, ExecutionPlan, default_memory_budget, register_engine
from ..sources import DaskSource, is_dask_collection
from ._operator import DaskKernelOperator

__all__ = ["current_client", "dask_engine"]


def current_client():
    """The ``distributed.Client`` in force: ``mercer.config_context(dask_client=...)``, else Dask's
    default client (``distributed.default_client()``), else ``None``."""
    client = get_config().dask_client
    if client is not None:
        return client
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - dask without distributed
        return None
    try:
        return default_client()
    except ValueError:  # no client
        return None


def _dask_array(X):
    if isinstance(X, DaskSource):
        return X.array
    if hasattr(X, "to_dask_array"):
        return X.to_dask_array(lengths=True)
    return X


def _worker_budget(client, requested: int) -> int:
    """Bytes a task may use for its tiles: the request, within a quarter of the smallest worker's
    memory limit per thread (a worker without a limit: the request)."""
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info().get("workers", {}).values()]
    threads = [max(1, int(w.get("nthreads") or 1)) for w in client.scheduler_info().get("workers", {}).values()]
    per_task = [ExecutionPlan(lim // t).share("task") for lim, t in zip(limits, threads) if lim]
    return max(TASK_MIN_BYTES, min([int(requested)] + per_task))


class DaskEngine:
    """Runs the blocked products of a fit on the Dask cluster of the client in force."""

    name = "dask"

    def applies(self, X) -> bool:
        return (isinstance(X, DaskSource) or is_dask_collection(X)) and current_client() is not None

    def operator(self, kernel, X, Z, *, memory_budget=None, n_rhs: int = 1, max_tile_bytes=None, keep_bytes: int = 0):
        client = current_client()
        if client is None:
            raise RuntimeError("the Dask engine needs a distributed.Client (none is in force).")
        return DaskKernelOperator(kernel, _dask_array(X), Z, client=client,
                                  memory_budget=_worker_budget(client, default_memory_budget(None, memory_budget)),
                                  n_rhs=n_rhs)

    def targets(self, y, X, owner: str):
        """A Dask ``y`` validated where it lies: numeric, 1-D or 2-D, one row per sample of ``X``,
        finite (one pass over ``y``), as float64."""
        import dask.array as da

        if not is_dask_collection(y):  # an in-memory y: validated by the estimator as any other
            return None
        if hasattr(y, "to_dask_array"):  # Series / DataFrame
            y = y.to_dask_array(lengths=True)
        if not isinstance(y, da.Array):
            raise TypeError(f"{owner}: expected y as a Dask array or Series; got {type(y).__name__}.")
        if y.ndim not in (1, 2):
            raise ValueError(f"y must be 1-D or 2-D; got shape {y.shape}.")
        if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
            raise ValueError(f"{owner}: y must be numeric; got dtype {y.dtype}.")
        if any(np.isnan(c) for c in y.chunks[0]):
            y = y.compute_chunk_sizes()
        if y.shape[0] != X.shape[0]:
            raise ValueError("Found input variables with inconsistent numbers of samples: "
                             f"[{X.shape[0]}, {y.shape[0]}]")
        y = y.astype(np.float64)
        if not bool(da.isfinite(y).all().compute()):
            raise ValueError(f"{owner}: y contains NaN or infinity.")
        return y


dask_engine = DaskEngine()
register_engine("dask", dask_engine)
