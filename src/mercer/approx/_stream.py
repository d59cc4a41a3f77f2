"""Streamed data given to a feature map's ``fit`` (:mod:`mercer.sources`).

The feature maps are not :class:`~mercer.models.KernelEstimatorMixin` estimators; this is their
counterpart of its ``_validate_source``: a streamed ``X`` (a ``.npy`` / Parquet path, a large
memmap, a Dask collection, a source) becomes a :class:`~mercer.sources.RowSource` and records
``n_features_in_`` (and the column names), without reading the data.
"""

from __future__ import annotations

import numpy as np

from ..linalg import STATISTIC_BLOCK_BYTES, current_plan, default_memory_budget, plan_rows, tensor_blocks
from ..sources import RowSource, as_source, is_streamed

__all__ = ["fit_source", "record_source", "source_variance"]


def fit_source(estimator, X) -> RowSource | None:
    """``X`` as a source when it is streamed (``None`` for in-memory data), after the checks of an
    in-memory ``fit`` that need no data: at least one sample; ``n_features_in_`` and
    ``feature_names_in_`` set (the latter removed for unnamed data)."""
    budget = default_memory_budget(None, getattr(estimator, "memory_budget", None))
    if not is_streamed(X, budget):
        return None
    return record_source(estimator, X)


def record_source(estimator, X) -> RowSource:
    """``X`` as a source, with the data-free checks of an in-memory ``fit``: at least one sample;
    ``n_features_in_`` and ``feature_names_in_`` set (the latter removed for unnamed data)."""
    source = as_source(X)
    if source.n_samples < 1:
        raise ValueError(f"Found array with 0 sample(s) (shape={source.shape}) while a minimum of 1 is "
                         f"required by {type(estimator).__name__}.")
    estimator.n_features_in_ = source.n_features
    if source.feature_names is not None:
        estimator.feature_names_in_ = np.asarray(source.feature_names, dtype=object)
    elif hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_
    return source


def source_variance(source: RowSource, *, memory_budget: int | None = None) -> float:
    """``X.var()`` over every entry of the source (as ``numpy.var``: the mean first, then the mean
    squared deviation), in float64, in two passes over row blocks."""
    import torch

    # a sparse source's blocks (sparse rows) hold their stored entries; the zeros add mean^2 each
    per_row = 3 * (source.bytes_per_row if source.sparse else 8 * max(source.n_features, 1))
    rows = plan_rows(source.n_samples, per_row, budget=current_plan(memory_budget).share("streamed rows"),
                     max_bytes=STATISTIC_BLOCK_BYTES, what="a block of streamed rows")
    size = source.n_samples * source.n_features
    total = 0.0
    for _, Xb in tensor_blocks(source, rows, dtype=torch.float64, device="cpu", desc="X.var(): mean"):
        total += float((Xb.compact().data if source.sparse else Xb).sum())
    mean = total / size
    sq = 0.0
    for _, Xb in tensor_blocks(source, rows, dtype=torch.float64, device="cpu", desc="X.var(): deviations"):
        if source.sparse:
            stored = Xb.compact().data
            sq += float(((stored - mean) ** 2).sum()) + (Xb.shape[0] * Xb.shape[1] - stored.numel()) * mean ** 2
        else:
            sq += float(((Xb - mean) ** 2).sum())
    return sq / size
