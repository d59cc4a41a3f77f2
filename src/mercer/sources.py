"""Data that is not one in-memory array: read block by block from disk (or from a Dask collection).

A *row source* is the training (or prediction) matrix ``X`` of shape ``(n, d)`` that mercer reads
one block of rows at a time, so that a fit holds one block (and its kernel tile) in memory however
large ``n`` is. The estimators that stream over samples take one wherever they take ``X``::

    >>> from mercer.sources import read_parquet
    >>> X, y = read_parquet("data/*.parquet", target="y")        # y is read; X stays on disk
    >>> model = mercer.NystroemKernelRidge(n_centers=10_000).fit(X, y)
    >>> y_hat = model.predict(read_parquet("test.parquet", target="y")[0])

Sources:

* :class:`ArraySource`: a NumPy array, ``np.memmap`` or a ``.npy`` file (opened memory-mapped);
* :class:`ParquetSource`: a Parquet file, a folder of them or a glob, read by record batches
  (pyarrow), numeric columns only;
* :class:`DaskSource`: a Dask array or DataFrame read chunk by chunk in this process (to run the
  products *on* a cluster's workers instead, see :mod:`mercer.distributed`).

:func:`as_source` turns any of these inputs (or a path) into a source; :func:`is_streamed` tells
whether an ``X`` takes the streaming path (paths, memmaps, sources, Dask collections) rather than
being converted to one tensor. Everything here is plain NumPy: converting a block to a tensor of
the estimator's dtype and device is the caller's job (``torch.from_numpy`` on the block).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

__all__ = ["ArraySource", "DaskSource", "ParquetSource", "RowSource", "as_source", "is_dask_collection",
           "is_streamed", "read_parquet"]


def is_dask_collection(X) -> bool:
    """A Dask array or DataFrame (without importing Dask when it is not loaded)."""
    mod = type(X).__module__ or ""
    if not mod.startswith("dask"):
        return False
    try:
        from dask import is_dask_collection as _is
    except ImportError:  # pragma: no cover
        return False
    return bool(_is(X))


def is_streamed(X, budget: int | None = None) -> bool:
    """Whether ``X`` is read block by block: a source, a path, a Dask collection, and an
    ``np.memmap`` larger than a quarter of ``budget`` bytes (a smaller one is read like any array:
    scikit-learn and joblib hand memmaps around, and reading those whole costs nothing)."""
    if isinstance(X, np.memmap):
        return budget is not None and X.nbytes > budget // 4
    return isinstance(X, (RowSource, str, os.PathLike)) or is_dask_collection(X)


class RowSource:
    """A matrix ``X`` of shape ``(n_samples, n_features)`` read block by block.

    Subclasses implement :meth:`_read` (consecutive rows) and may override :meth:`take` (selected
    rows) and :meth:`iter_blocks` when their storage has a natural unit (record batches, chunks).

    Attributes
    ----------
    n_samples, n_features : int
    dtype : numpy dtype of the blocks (float32 or float64)
    feature_names : ndarray of str or None
        Column names (Parquet, DataFrames), checked against ``feature_names_in_`` at predict.
    engine : str
        The execution engine that runs blocked products over this source
        (:func:`mercer.linalg.engine_for`): ``"local"`` (read in this process) unless a subclass
        names another.
    """

    engine = "local"

    n_samples: int
    n_features: int
    dtype: np.dtype
    feature_names: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_samples, self.n_features)

    @property
    def bytes_per_row(self) -> int:
        return self.n_features * self.dtype.itemsize

    def __len__(self) -> int:
        return self.n_samples

    def _read(self, start: int, stop: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a C-contiguous array of ``dtype`` (a fresh array: writable)."""
        start, stop = max(0, int(start)), min(int(stop), self.n_samples)
        if stop <= start:
            return np.empty((0, self.n_features), dtype=self.dtype)
        out = self._read(start, stop)
        if out.shape != (stop - start, self.n_features):
            raise ValueError(f"{self!r}: rows {start}:{stop} read as shape {out.shape}, expected "
                             f"{(stop - start, self.n_features)}; the data changed while it was read.")
        return out

    def iter_blocks(self, slices: Iterable[slice]) -> Iterator[tuple[slice, np.ndarray]]:
        """``(slice, block)`` for each of ``slices`` (consecutive, in order, covering the rows: the
        loop of :func:`mercer.linalg.row_blocks`, where progress bars and Ctrl-C apply)."""
        for r in slices:
            yield r, self.read(r.start, r.stop)

    def take(self, index) -> np.ndarray:
        """Rows ``index`` (any order, repeats allowed) in that order, read in one ordered pass."""
        index = np.asarray(index, dtype=np.int64).ravel()
        if index.size and (index.min() < 0 or index.max() >= self.n_samples):
            raise IndexError(f"row index out of range for {self.n_samples} rows.")
        out = np.empty((index.size, self.n_features), dtype=self.dtype)
        if not index.size:
            return out
        order = np.argsort(index, kind="stable")
        sorted_idx = index[order]
        rows = max(1, (64 << 20) // max(self.bytes_per_row, 1))
        lo = 0
        while lo < sorted_idx.size:  # read the spans that hold wanted rows, nothing else
            start = int(sorted_idx[lo])
            stop = min(start + rows, self.n_samples)
            hi = int(np.searchsorted(sorted_idx, stop, side="left"))
            block = self.read(start, stop)
            out[order[lo:hi]] = block[sorted_idx[lo:hi] - start]
            lo = hi
        return out

    def astype(self, dtype) -> RowSource:
        """The same source read in ``dtype`` (float32 or float64; a shallow copy, self unchanged)."""
        import copy

        out = copy.copy(self)
        out.dtype = _float_dtype(dtype)
        return out

    def to_numpy(self) -> np.ndarray:
        """The whole matrix in memory (for small data and tests)."""
        return self.read(0, self.n_samples)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_samples={self.n_samples}, n_features={self.n_features}, dtype={self.dtype})"


def _float_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


class ArraySource(RowSource):
    """An in-memory or memory-mapped array (``np.memmap``, or a ``.npy`` path opened with
    ``mmap_mode="r"``): blocks are copies of slices, so only the block is resident at a time
    (the operating system's page cache keeps what it can)."""

    def __init__(self, array, *, dtype=None):
        if isinstance(array, (str, os.PathLike)):
            path = Path(array)
            if path.suffix != ".npy":
                raise ValueError(f"ArraySource: expected a .npy file; got {str(path)!r}.")
            array = np.load(path, mmap_mode="r")
        array = np.asarray(array) if not isinstance(array, np.ndarray) else array
        if array.ndim != 2:
            raise ValueError(f"Expected a 2-D array of shape (n_samples, n_features); got shape {array.shape}.")
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool) or np.iscomplexobj(array):
            raise ValueError(f"Expected a numeric array; got dtype {array.dtype}.")
        self.array = array
        self.n_samples, self.n_features = (int(s) for s in array.shape)
        self.dtype = _float_dtype(array.dtype if dtype is None else dtype)

    def _read(self, start, stop):
        return np.array(self.array[start:stop], dtype=self.dtype, order="C", copy=True)

    def take(self, index):
        index = np.asarray(index, dtype=np.int64).ravel()
        if index.size and (index.min() < 0 or index.max() >= self.n_samples):
            raise IndexError(f"row index out of range for {self.n_samples} rows.")
        return np.array(self.array[index], dtype=self.dtype, order="C")


def _parquet_files(path) -> list[str]:
    if isinstance(path, (list, tuple)):
        files = [str(p) for p in path]
    else:
        path = str(path)
        if os.path.isdir(path):
            files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)
                           + glob.glob(os.path.join(path, "**", "*.pq"), recursive=True))
        elif any(ch in path for ch in "*?["):
            files = sorted(glob.glob(path, recursive=True))
        else:
            files = [path]
    if not files:
        raise FileNotFoundError(f"no Parquet files match {path!r}.")
    for f in files:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"Parquet file not found: {f!r}.")
    return files


class ParquetSource(RowSource):
    """Numeric columns of one or more Parquet files, read by record batches (pyarrow).

    Parameters
    ----------
    path : str, Path or list of them
        A file, a folder (every ``*.parquet`` / ``*.pq`` below it, in sorted order) or a glob
        (``"data/part-*.parquet"``). The files are read in sorted order; all must have the columns.
    columns : list of str, optional
        The feature columns, in this order. Default: every column not in ``exclude``.
    exclude : list of str, optional
        Columns that are not features (the target).
    dtype : {"float32", "float64"}, optional
        Dtype of the blocks (default: float32 when every feature column is float32, else float64).

    Nulls are not allowed in feature columns (an error names the column and the file), nor
    non-numeric columns (select the numeric ones with ``columns=``).
    """

    def __init__(self, path, *, columns: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                 dtype=None):
        try:
            import pyarrow.parquet as pq
            import pyarrow.types as pat
        except ImportError as exc:  # pragma: no cover - pyarrow is in the io/test extras
            raise ImportError("reading Parquet needs pyarrow: pip install 'mercer[io]'.") from exc
        self.path = path
        self.files = _parquet_files(path)
        schema = pq.read_schema(self.files[0])
        names = list(schema.names)
        exclude = [] if exclude is None else [exclude] if isinstance(exclude, str) else list(exclude)
        for name in exclude:
            if name not in names:
                raise ValueError(f"ParquetSource: column {name!r} (in exclude) is not in {self.files[0]!r}; "
                                 f"its columns are {names}.")
        if columns is None:
            columns = [c for c in names if c not in exclude]
        else:
            columns = [columns] if isinstance(columns, str) else list(columns)
            missing = [c for c in columns if c not in names]
            if missing:
                raise ValueError(f"ParquetSource: columns {missing} are not in {self.files[0]!r}; its columns are {names}.")
        if not columns:
            raise ValueError(f"ParquetSource: no feature columns left in {self.files[0]!r} (columns {names}, "
                             f"exclude={exclude}).")
        bad = [c for c in columns if not (pat.is_integer(schema.field(c).type) or pat.is_floating(schema.field(c).type)
                                          or pat.is_boolean(schema.field(c).type))]
        if bad:
            raise ValueError(
                f"ParquetSource: columns {bad} are not numeric ({[str(schema.field(c).type) for c in bad]}); streamed "
                "data must be numeric. Select the numeric columns with columns=[...] (or encode the others when "
                "writing the files).")
        self.columns = columns
        self.feature_names = np.asarray(columns, dtype=object)
        if dtype is None:
            dtype = np.float32 if all(pat.is_float32(schema.field(c).type) for c in columns) else np.float64
        self.dtype = _float_dtype(dtype)
        self.n_features = len(columns)
        self._counts = []  # rows per file, and per row group within it
        for f in self.files:
            meta = pq.ParquetFile(f).metadata
            fschema = meta.schema.to_arrow_schema()
            missing = [c for c in columns if c not in fschema.names]
            if missing:
                raise ValueError(f"ParquetSource: {f!r} lacks the columns {missing}.")
            self._counts.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        self._file_rows = np.array([sum(c) for c in self._counts], dtype=np.int64)
        self._file_start = np.concatenate([[0], np.cumsum(self._file_rows)])
        self.n_samples = int(self._file_start[-1])

    def _to_numpy(self, table, where: str) -> np.ndarray:
        out = np.empty((table.num_rows, self.n_features), dtype=self.dtype)
        for j, name in enumerate(self.columns):
            col = table.column(name)
            if col.null_count:
                raise ValueError(f"ParquetSource: column {name!r} has {col.null_count} null value(s) in {where}; "
                                 "streamed features must be complete (fill or drop them when writing the files).")
            out[:, j] = col.to_numpy()
        return out

    def _read(self, start, stop):
        import pyarrow.parquet as pq

        parts = []
        f = int(np.searchsorted(self._file_start, start, side="right") - 1)
        while start < stop:
            base = int(self._file_start[f])
            lo, hi = start - base, min(stop, int(self._file_start[f + 1])) - base
            groups, g0, acc = [], None, 0
            for g, cnt in enumerate(self._counts[f]):  # the row groups that overlap lo:hi
                if acc + cnt > lo and acc < hi:
                    groups.append(g)
                    g0 = acc if g0 is None else g0
                acc += cnt
            table = pq.ParquetFile(self.files[f]).read_row_groups(groups, columns=self.columns)
            parts.append(self._to_numpy(table.slice(lo - g0, hi - lo), repr(self.files[f])))
            start = base + hi
            f += 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def iter_blocks(self, slices):
        """One sequential read of the files by record batches, regrouped into ``slices``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        slices = iter(slices)
        first = next(slices, None)
        if first is None:
            return
        rows = max(1, first.stop - first.start)

        def batches():
            for f in self.files:
                for batch in pq.ParquetFile(f).iter_batches(batch_size=rows, columns=self.columns):
                    yield f, batch
        it = batches()
        pending: list = []  # batches do not cross files: gather them into whole blocks
        have = 0
        r = first
        while r is not None:
            need = r.stop - r.start
            while have < need:
                f, batch = next(it)
                pending.append((f, batch))
                have += batch.num_rows
            table = pa.Table.from_batches([b for _, b in pending])
            block = self._to_numpy(table.slice(0, need), repr(pending[0][0]))
            rest = table.slice(need)
            pending = [(pending[-1][0], b) for b in rest.to_batches()] if rest.num_rows else []
            have -= need
            yield r, block
            r = next(slices, None)

    def read_column(self, name: str, dtype=np.float64) -> np.ndarray:
        """One whole column (a target) as an in-memory array of ``n_samples`` values."""
        import pyarrow.parquet as pq

        parts = []
        for f in self.files:
            table = pq.read_table(f, columns=[name])
            col = table.column(name)
            if col.null_count:
                raise ValueError(f"column {name!r} has {col.null_count} null value(s) in {f!r}.")
            parts.append(col.to_numpy())
        out = np.concatenate(parts) if parts else np.empty(0)
        return out.astype(dtype, copy=False) if dtype is not None else out

    def __repr__(self):
        where = self.path if isinstance(self.path, (str, os.PathLike)) else f"{len(self.files)} files"
        return (f"ParquetSource({str(where)!r}, n_samples={self.n_samples}, n_features={self.n_features}, "
                f"dtype={self.dtype})")


def read_parquet(path, target: str | Sequence[str] | None = None, *, columns=None, dtype=None):
    """``(X, y)``: the features of Parquet file(s) as a :class:`ParquetSource` (left on disk) and
    the ``target`` column(s) read into memory with their stored dtype (``None`` without a target).

    >>> X, y = read_parquet("train/*.parquet", target="y")
    """
    targets = [] if target is None else [target] if isinstance(target, str) else list(target)
    X = ParquetSource(path, columns=columns, exclude=targets, dtype=dtype)
    if not targets:
        return X, None
    import pyarrow.parquet as pq

    names = pq.read_schema(X.files[0]).names
    for t in targets:
        if t not in names:
            raise ValueError(f"read_parquet: target column {t!r} is not in {X.files[0]!r}; its columns are {names}.")
    ys = [X.read_column(t, dtype=None) for t in targets]  # as stored: numbers, or class labels
    return X, ys[0] if isinstance(target, str) else np.column_stack(ys)


class DaskSource(RowSource):
    """A Dask array or DataFrame read chunk by chunk in this process (each block is computed with
    Dask's scheduler in force: a cluster's workers compute the partitions, this process does the
    kernel products). Row chunks are aligned to the block size."""

    engine = "dask"  # with a distributed Client in force, the products run on its workers

    def __init__(self, X, *, dtype=None):
        import dask.array as da

        if hasattr(X, "to_dask_array"):  # a DataFrame: numeric columns only, known partition sizes
            cols = list(X.columns)
            nonnum = [c for c, t in zip(cols, X.dtypes) if not (np.issubdtype(np.dtype(t), np.number)
                                                                  or np.dtype(t) == bool)]
            if nonnum:
                raise ValueError(f"DaskSource: columns {nonnum} are not numeric; streamed data must be numeric.")
            self.feature_names = np.asarray([str(c) for c in cols], dtype=object)
            X = X.to_dask_array(lengths=True)
        if not isinstance(X, da.Array):
            raise TypeError(f"DaskSource expects a dask array or DataFrame; got {type(X).__name__}.")
        if X.ndim != 2:
            raise ValueError(f"Expected a 2-D dask array; got {X.ndim} dimensions.")
        if any(np.isnan(c) for c in X.chunks[0]):
            X = X.compute_chunk_sizes()
        self.array = X
        self.n_samples, self.n_features = (int(s) for s in X.shape)
        self.dtype = _float_dtype(X.dtype if dtype is None else dtype)

    def _read(self, start, stop):
        return np.array(self.array[start:stop].compute(), dtype=self.dtype, order="C")

    def take(self, index):
        index = np.asarray(index, dtype=np.int64).ravel()
        order = np.argsort(index, kind="stable")
        rows = np.asarray(self.array[np.sort(index)].compute(), dtype=self.dtype)
        out = np.empty_like(rows)
        out[order] = rows
        return out


def as_source(X, *, dtype=None) -> RowSource:
    """``X`` as a :class:`RowSource`: a source as is; a ``.npy`` path or an array as an
    :class:`ArraySource`; a ``.parquet``/``.pq`` path, folder or glob as a :class:`ParquetSource`
    (every column a feature: use :func:`read_parquet` to set a target aside); a Dask collection
    as a :class:`DaskSource`."""
    if isinstance(X, RowSource):
        return X
    if isinstance(X, (str, os.PathLike)):
        p = str(X)
        if p.endswith(".npy"):
            return ArraySource(p, dtype=dtype)
        return ParquetSource(p, dtype=dtype)
    if is_dask_collection(X):
        return DaskSource(X, dtype=dtype)
    return ArraySource(X, dtype=dtype)
