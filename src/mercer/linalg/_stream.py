"""Row-wise methods (``predict``, ``transform``, ...) on data that is not one in-memory array.

Every mercer estimator's ``predict``, ``predict_proba``, ``predict_log_proba``,
``decision_function``, ``transform`` and ``score_samples`` maps rows to rows, so a streamed ``X``
(a :mod:`mercer.sources` source, a ``.npy`` / Parquet path, an ``np.memmap``) is handled the same
way for all of them: the method runs on one block of rows at a time (blocks sized from the memory
budget, through :func:`row_blocks`: progress and Ctrl-C apply) and the outputs are concatenated.
A Dask array or DataFrame is mapped over its row chunks instead and a Dask array is returned (each
chunk computed where Dask runs it: on a cluster, the fitted model travels to the workers).

:class:`StreamedMethodsMixin` applies this to the methods a class defines, when the class is
created; a class that handles sources itself names the method in ``_stream_native``.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import scipy.sparse as sp

from ..sources import RowSource, as_source, is_dask_collection, is_streamed
from ._blocking import MAX_TILE_BYTES, plan_rows, row_blocks
from ._plan import STREAMED_METHOD_BYTES, active_plan, current_plan, default_memory_budget, planned_call

__all__ = ["PLANNED_METHODS", "STREAMED_METHODS", "StreamedMethodsMixin", "map_rows"]

#: The row-wise methods that accept streamed input on every estimator.
STREAMED_METHODS = ("predict", "predict_proba", "predict_log_proba", "decision_function", "transform",
                    "score_samples")

#: Methods that run under one execution plan per call (:func:`mercer.linalg.planned_call`), with
#: the row-wise ones: the budget is resolved once when the call starts.
PLANNED_METHODS = ("fit", "partial_fit", "fit_transform", "fit_predict", "score", "inverse_transform",
                   "kneighbors", "radius_neighbors")


def _frame(block: np.ndarray, names):
    """The block as a DataFrame with the fitted feature names (so name checks pass), else as is."""
    if names is None:
        return block
    import pandas as pd

    return pd.DataFrame(block, columns=list(names), copy=False)


def map_rows(fn, X, *, estimator=None, desc: str | None = None):
    """``fn`` applied to blocks of rows of the streamed ``X``, outputs stacked along the rows.

    ``X``: a source or anything :func:`mercer.sources.as_source` takes (numpy out), or a Dask
    collection (a Dask array out, one chunk per row chunk of ``X``). ``estimator``: passes blocks
    as DataFrames with its ``feature_names_in_`` when ``X`` carries column names.
    """
    names = None
    if estimator is not None and hasattr(estimator, "feature_names_in_"):
        names = estimator.feature_names_in_
    if is_dask_collection(X):
        return _map_dask(fn, X, names)
    source = as_source(X)
    if names is not None and source.feature_names is None:
        names = None  # numeric blocks of an unnamed source: the method's own check warns, as for arrays
    plan = (active_plan(estimator) if estimator is not None else None) or current_plan(
        getattr(estimator, "memory_budget", None))
    rows = plan_rows(source.n_samples, max(source.bytes_per_row, 8) * 4, budget=plan.share("streamed method"),
                     max_bytes=min(STREAMED_METHOD_BYTES, MAX_TILE_BYTES), what="a block of streamed rows")
    outs = [fn(_frame(block, names)) for _, block in source.iter_blocks(row_blocks(source.n_samples, rows,
                                                                                     desc=desc))]
    if not outs:
        return fn(_frame(source.read(0, 0), names))
    return _stack(outs)


def _stack(outs):
    first = outs[0]
    if hasattr(first, "iloc"):  # pandas output (set_output(transform="pandas"))
        import pandas as pd

        return pd.concat(outs, axis=0, ignore_index=True)
    try:
        import torch

        if isinstance(first, torch.Tensor):
            return torch.cat(outs)
    except ImportError:  # pragma: no cover
        pass
    return np.concatenate([np.asarray(o) for o in outs], axis=0)


def _map_dask(fn, X, names):
    import dask.array as da

    frame_names = None
    if hasattr(X, "to_dask_array"):  # a DataFrame: its columns are the feature names
        frame_names = [str(c) for c in X.columns]
        X = X.to_dask_array(lengths=True)
    if not isinstance(X, da.Array) or X.ndim != 2:
        raise ValueError(f"Expected a 2-D dask array or a DataFrame; got {type(X).__name__} with shape {X.shape}.")
    if any(np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    X = X.rechunk({1: -1})
    use = names if (names is not None and frame_names is not None) else None
    sparse = sp.issparse(getattr(X, "_meta", None))  # scipy sparse chunks: passed to fn as CSR matrices

    def block_fn(block):
        block = sp.csr_matrix(block) if sparse else np.asarray(block)
        return np.asarray(fn(_frame(block, use)))

    probe = block_fn(X[:1].compute())  # output width and dtype

    if probe.ndim == 1:
        return X.map_blocks(block_fn, drop_axis=1, dtype=probe.dtype, meta=np.empty((0,), dtype=probe.dtype))
    return X.map_blocks(block_fn, chunks=(X.chunks[0], probe.shape[1:]), dtype=probe.dtype,
                        meta=np.empty((0,) * probe.ndim, dtype=probe.dtype))


def _call_device(self, X, fit: bool):
    """The device whose memory a call plans against: the fitted model's, else for a fit the
    ``device`` parameter or a tensor input's device."""
    device = getattr(self, "_device", None)
    if fit or device is None:
        device = getattr(self, "device", None)
        if device is None and getattr(X, "device", None) is not None and hasattr(X, "element_size"):
            device = X.device
    return device


def _all_or_nothing(method, self, args, kwargs):
    """A fit that raises -- a Ctrl-C (``KeyboardInterrupt``) or a cancelling
    :func:`~mercer.linalg.observe_blocks` observer included -- leaves the estimator's attributes as
    they were before the call (an unfitted estimator stays unfitted: no half-fitted ``name_``
    attributes; a fitted one keeps its previous model). The attributes are restored as objects:
    a fit replaces them, it does not write into the previous model's arrays."""
    saved = dict(self.__dict__)
    try:
        return method(self, *args, **kwargs)
    except BaseException:
        self.__dict__.clear()
        self.__dict__.update(saved)
        raise


def _planned(method, *, streamed: bool):
    """``method`` run under one execution plan per call; a row-wise method (``streamed``) also maps
    a streamed ``X`` block by block within that plan."""
    fit = method.__name__.startswith("fit") or method.__name__ == "partial_fit"

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        X = args[0] if args else kwargs.get("X")
        with planned_call(self, getattr(self, "memory_budget", None), _call_device(self, X, fit), release=fit) as plan:
            if fit:
                return _all_or_nothing(method, self, args, kwargs)
            if not streamed or not args or not is_streamed(X, plan.budget):
                return method(self, *args, **kwargs)
            if hasattr(self, "_check_fitted"):  # an unfitted model says so before any file is opened
                self._check_fitted()
            return map_rows(lambda block: method(self, block, *args[1:], **kwargs), X, estimator=self,
                            desc=f"{type(self).__name__}.{method.__name__}")
    wrapper._mercer_planned = True
    return wrapper


class StreamedMethodsMixin:
    """Gives the methods a class defines one execution plan per call (:data:`PLANNED_METHODS` and the
    row-wise :data:`STREAMED_METHODS`), and the row-wise ones streamed input."""

    #: Methods the class handles sources in itself (planned, not wrapped for streaming).
    _stream_native: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in STREAMED_METHODS + PLANNED_METHODS:  # defined here or inherited (from mixins too)
            attr = inspect.getattr_static(cls, name, None)
            if attr is None:
                continue
            streamed = name in STREAMED_METHODS and name not in cls._stream_native
            if inspect.isfunction(attr):
                if not getattr(attr, "_mercer_planned", False):
                    setattr(cls, name, _planned(attr, streamed=streamed))
            elif inspect.isfunction(getattr(attr, "fn", None)) and not getattr(attr.fn, "_mercer_planned", False):
                attr.fn = _planned(attr.fn, streamed=streamed)  # scikit-learn's available_if: wrap what it guards


def source_to_memory(X, owner: str, *, memory_budget=None):
    """A streamed ``X`` read whole, for a ``fit`` that needs its data in memory (an array, or a CSR
    matrix from a sparse source); a clear error when it would not fit the memory budget (naming
    the estimators that stream)."""
    from ._blocking import MemoryBudgetError, format_bytes

    source = X if isinstance(X, RowSource) else as_source(X)
    need = source.n_samples * source.bytes_per_row  # a sparse source's: its stored entries
    budget = default_memory_budget(None, memory_budget)
    if need > budget:
        raise MemoryBudgetError(
            f"{owner}.fit needs its {source.n_samples} x {source.n_features} training data in memory "
            f"({format_bytes(need)}), more than the memory budget of {format_bytes(budget)}. The estimators "
            "that stream their training data from disk: NystroemKernelRidge(Classifier), RandomFeatureRidge, "
            "ApproximateKernelPCA, KMeans, KernelKMeans(approximate), the feature maps.")
    return source.to_numpy()
