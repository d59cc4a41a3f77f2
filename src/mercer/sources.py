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
  (pyarrow), numeric columns only -- or sparse rows in the layout of :func:`write_sparse_parquet`
  (two list columns ``indices`` and ``values`` per row, ``n_features`` in the file's metadata);
* :class:`SparseSource`: a scipy sparse matrix, or a ``.npz`` file of one
  (``scipy.sparse.save_npz``), its rows read range by range (``indptr`` once, then only the
  entries of the rows asked for);
* :class:`DaskSource`: a Dask array or DataFrame read chunk by chunk in this process (to run the
  products *on* a cluster's workers instead, see :mod:`mercer.distributed`); chunks may be scipy
  sparse matrices.

A *sparse* source (``source.sparse``: the ``.npz`` and sparse Parquet layouts, a Dask array of
sparse chunks) reads its blocks as ``scipy.sparse.csr_matrix`` (never densified), and
``bytes_per_row`` counts the stored entries of an average row, not ``n_features``: the planner
sizes blocks from the non-zeros.

:func:`as_source` turns any of these inputs (or a path) into a source; :func:`is_streamed` tells
whether an ``X`` takes the streaming path (paths, memmaps, sources, Dask collections) rather than
being converted to one tensor. Everything here is plain NumPy (and scipy.sparse): converting a
block to a tensor (or to sparse rows) of the estimator's dtype and device is the caller's job
(:func:`mercer.linalg.tensor_blocks`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = ["ArraySource", "DaskSource", "ParquetSource", "RowSource", "SparseSource", "as_source",
           "is_dask_collection", "is_streamed", "read_parquet", "write_sparse_parquet"]

#: Schema metadata key of the sparse Parquet layout that holds ``n_features`` (as decimal text).
N_FEATURES_KEY = b"mercer.n_features"


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
    sparse : bool
        Whether blocks are ``scipy.sparse.csr_matrix`` (sorted indices, no duplicates) rather
        than dense arrays.
    """

    engine = "local"
    sparse = False

    n_samples: int
    n_features: int
    dtype: np.dtype
    feature_names: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_samples, self.n_features)

    @property
    def nnz(self) -> int | None:
        """Stored entries of a sparse source (``None`` for a dense one)."""
        return None

    @property
    def bytes_per_row(self) -> int:
        """Bytes of an average row as a block holds it: ``n_features`` values, or for a sparse
        source its stored entries (a value and an int64 column index each) and a row pointer."""
        if not self.sparse:
            return self.n_features * self.dtype.itemsize
        per_row = -(-int(self.nnz) // max(self.n_samples, 1))
        return per_row * (self.dtype.itemsize + 8) + 8

    @property
    def plan_features(self) -> int:
        """What the planner counts per row instead of ``n_features`` (as
        :func:`mercer._sparse.plan_features`): ``n_features``, or for a sparse source the stored
        entries of an average row (value and column index, in units of one value), at least 1."""
        if not self.sparse:
            return self.n_features
        per_entry = 1 + 8 / self.dtype.itemsize
        return max(1, int(np.ceil(int(self.nnz) / max(self.n_samples, 1) * per_entry)))

    def _empty(self, n: int = 0):
        return sp.csr_matrix((n, self.n_features), dtype=self.dtype) if self.sparse else \
            np.empty((n, self.n_features), dtype=self.dtype)

    def __len__(self) -> int:
        return self.n_samples

    def _read(self, start: int, stop: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, start: int, stop: int):
        """Rows ``start:stop`` as a C-contiguous array of ``dtype`` (a fresh array: writable), or
        for a sparse source a ``scipy.sparse.csr_matrix`` in canonical form."""
        start, stop = max(0, int(start)), min(int(stop), self.n_samples)
        if stop <= start:
            return self._empty()
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

    def take(self, index):
        """Rows ``index`` (any order, repeats allowed) in that order, read in one ordered pass (as
        :meth:`read`: an array, or a CSR matrix for a sparse source)."""
        index = _check_index(index, self.n_samples)
        if not index.size:
            return self._empty()
        order = np.argsort(index, kind="stable")
        sorted_idx = index[order]
        rows = max(1, (64 << 20) // max(self.bytes_per_row, 1))
        parts, lo = [], 0
        while lo < sorted_idx.size:  # read the spans that hold wanted rows, nothing else
            start = int(sorted_idx[lo])
            stop = min(start + rows, self.n_samples)
            hi = int(np.searchsorted(sorted_idx, stop, side="left"))
            parts.append(self.read(start, stop)[sorted_idx[lo:hi] - start])
            lo = hi
        return _unsort(_vstack(parts), order)

    def astype(self, dtype) -> RowSource:
        """The same source read in ``dtype`` (float32 or float64; a shallow copy, self unchanged)."""
        import copy

        out = copy.copy(self)
        out.dtype = _float_dtype(dtype)
        return out

    def to_numpy(self):
        """The whole matrix in memory (for small data and tests): an array, or a CSR matrix for a
        sparse source."""
        return self.read(0, self.n_samples)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_samples={self.n_samples}, n_features={self.n_features}, dtype={self.dtype})"


def _float_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


def _check_index(index, n: int) -> np.ndarray:
    index = np.asarray(index, dtype=np.int64).ravel()
    if index.size and (index.min() < 0 or index.max() >= n):
        raise IndexError(f"row index out of range for {n} rows.")
    return index


def _vstack(parts):
    if len(parts) == 1:
        return parts[0]
    return sp.vstack(parts, format="csr") if sp.issparse(parts[0]) else np.concatenate(parts)


def _unsort(rows, order: np.ndarray):
    """``rows`` read in sorted order put back in the order asked for (``order``: the argsort)."""
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return rows[inverse]


def _csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_features: int, dtype, where: str):
    """Rows as a canonical ``csr_matrix`` of ``dtype`` (indices checked, sorted, duplicates summed)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indptr = indptr - indptr[0]
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n_features):
        raise ValueError(f"column indices out of range [0, {n_features}) in {where}: found "
                         f"{int(indices.min())}..{int(indices.max())}.")
    # fresh, writable arrays (the caller's matrix or a read-only buffer is never written to)
    out = sp.csr_matrix((np.array(data, dtype=dtype), np.array(indices), indptr), shape=(indptr.size - 1, n_features),
                        copy=False)
    if not out.has_canonical_format:
        out.sum_duplicates()  # sorts the indices too
    return out


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


class _NpyMember:
    """One ``.npy`` member of a ``.npz`` (zip) file, read by element ranges without loading it: a
    stored member is read directly at its offset in the file (``os.pread``: neither mapped nor
    checksummed); a compressed one is decompressed up to the range (forward seeks are sequential
    reads: one pass over the file reads each member once)."""

    def __init__(self, path: str, name: str):
        import struct
        import zipfile

        self.path, self.name = path, name
        with zipfile.ZipFile(path) as zf, zf.open(name) as f:
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = header(f)
            self.offset = f.tell()
            info = zf.getinfo(name)
            self.compressed = info.compress_type != zipfile.ZIP_STORED
            if not self.compressed:  # the member's data begin after its local header (30 bytes, name, extra)
                zf.fp.seek(info.header_offset)
                local = struct.unpack("<4s2B4HL2L2H", zf.fp.read(30))
                self.offset += info.header_offset + 30 + local[10] + local[11]
        if len(shape) != 1 or dtype.hasobject:
            raise ValueError(f"SparseSource: member {name!r} of {path!r} is not a 1-D numeric array (shape {shape}, "
                             f"dtype {dtype}); expected a file written by scipy.sparse.save_npz.")
        self.dtype, self.size = dtype, int(shape[0])

    def open(self):
        """``(container, reader)``: the raw file (twice) for a stored member, else the zip file and the member."""
        import zipfile

        if not self.compressed:
            f = open(self.path, "rb")
            return f, f
        zf = zipfile.ZipFile(self.path)
        return zf, zf.open(self.name)

    def read(self, f, lo: int, hi: int) -> np.ndarray:
        """Elements ``lo:hi`` read from the open member ``f`` (see :meth:`open`)."""
        item = self.dtype.itemsize
        if not self.compressed:
            want, at, got = (hi - lo) * item, self.offset + lo * item, 0
            buf = bytearray(want)
            view = memoryview(buf)
            while got < want:  # one read returns at most ~2 GiB on Linux
                done = os.preadv(f.fileno(), [view[got:]], at + got)
                if not done:
                    buf = buf[:got]
                    break
                got += done
        else:
            f.seek(self.offset + lo * item)
            buf = f.read((hi - lo) * item)
        if len(buf) != (hi - lo) * item:
            raise ValueError(f"SparseSource: {self.path!r} ended inside member {self.name!r}; the file is truncated.")
        return np.frombuffer(buf, dtype=self.dtype)


class SparseSource(RowSource):
    """Sparse rows: a scipy sparse matrix in memory, or a ``.npz`` file written by
    ``scipy.sparse.save_npz`` (CSR), read row range by row range -- never densified.

    A file's row pointers (``indptr``, ``n + 1`` integers) are read once; a block of rows then reads
    only its own entries of ``indices`` and ``data``, so memory is O(block) besides them. Save with
    ``save_npz(path, X, compressed=False)`` for the fastest reads: a compressed file is read by
    decompressing its members (sequentially: a streamed pass reads each once, but rows picked at
    random cost a decompression up to them). Blocks are ``scipy.sparse.csr_matrix`` of ``dtype``
    in canonical form (sorted column indices, no duplicates).

    Parameters
    ----------
    X : str, Path or scipy sparse matrix / array
        A ``.npz`` path (CSR format: ``X.tocsr()`` before saving a CSC or COO matrix), or a matrix
        in memory (any format: converted to CSR once).
    dtype : {"float32", "float64"}, optional
        Dtype of the blocks (default: float32 when the stored values are float32, else float64).
    """

    sparse = True

    def __init__(self, X, *, dtype=None):
        self.path = None
        self._members = None
        if isinstance(X, (str, os.PathLike)):
            self.path = str(X)
            if not os.path.isfile(self.path):
                raise FileNotFoundError(f"SparseSource: no such file {self.path!r}.")
            try:
                with np.load(self.path, allow_pickle=False) as f:
                    names = set(f.files)
                    if not {"format", "shape", "indptr", "indices", "data"} <= names:
                        raise ValueError(f"SparseSource: {self.path!r} holds {sorted(names)}, not a sparse matrix "
                                         "written by scipy.sparse.save_npz (format, shape, indptr, indices, data).")
                    fmt = f["format"].item()
                    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
                    if fmt != "csr":
                        raise ValueError(f"SparseSource: {self.path!r} holds a {fmt.upper()} matrix; rows are read from "
                                         "CSR: save X.tocsr() instead.")
                    shape = tuple(int(s) for s in f["shape"])
                    indptr = np.asarray(f["indptr"], dtype=np.int64)
            except OSError as exc:
                raise ValueError(f"SparseSource: cannot read {self.path!r} as a .npz file ({exc}).") from exc
            self._members = {k: _NpyMember(self.path, k + ".npy") for k in ("indices", "data")}
            value_dtype = self._members["data"].dtype
            if not (np.issubdtype(value_dtype, np.number) or value_dtype == bool) or np.iscomplexobj(
                    np.empty(0, value_dtype)):
                raise ValueError(f"SparseSource: the values of {self.path!r} are {value_dtype}; expected numbers.")
            self.matrix = None
        elif sp.issparse(X):
            matrix = X.tocsr() if X.format != "csr" else X
            shape, indptr, value_dtype = matrix.shape, np.asarray(matrix.indptr, dtype=np.int64), matrix.dtype
            if not (np.issubdtype(value_dtype, np.number) or value_dtype == bool) or np.iscomplexobj(matrix.data):
                raise ValueError(f"SparseSource: expected numeric values; got dtype {value_dtype}.")
            self.matrix = matrix
        else:
            raise TypeError(f"SparseSource expects a .npz path or a scipy sparse matrix; got {type(X).__name__}.")
        if len(shape) != 2:
            raise ValueError(f"SparseSource: expected a 2-D matrix; got shape {shape}.")
        self.n_samples, self.n_features = shape
        if indptr.shape != (self.n_samples + 1,) or (indptr.size > 1 and bool((np.diff(indptr) < 0).any())):
            raise ValueError(f"SparseSource: the row pointers of {self!r} are inconsistent (not {self.n_samples + 1} "
                             "non-decreasing values).")
        self.indptr = indptr
        self.dtype = _float_dtype(value_dtype if dtype is None else dtype)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1] - self.indptr[0])

    def _where(self) -> str:
        return repr(self.path) if self.path is not None else "the sparse matrix"

    def _rows(self, start: int, stop: int, files=None):
        """Rows ``start:stop`` (``files``: the members opened by :meth:`_open`, for a file)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        where = f"rows {start}:{stop} of {self._where()}"
        if self.matrix is not None:
            return _csr(self.indptr[start:stop + 1], self.matrix.indices[lo:hi], self.matrix.data[lo:hi],
                        self.n_features, self.dtype, where)
        ind = self._members["indices"].read(files["indices"][1], lo, hi)
        val = self._members["data"].read(files["data"][1], lo, hi)
        return _csr(self.indptr[start:stop + 1], ind, val, self.n_features, self.dtype, where)

    def _open(self):
        return None if self._members is None else {k: m.open() for k, m in self._members.items()}

    @staticmethod
    def _close(files) -> None:
        for zf, f in (files or {}).values():
            f.close()
            zf.close()

    def _read(self, start, stop):
        files = self._open()
        try:
            return self._rows(start, stop, files)
        finally:
            self._close(files)

    def iter_blocks(self, slices):
        """One sequential pass over the file (its members kept open between blocks)."""
        files = self._open()
        try:
            for r in slices:
                yield r, self._rows(r.start, min(r.stop, self.n_samples), files)
        finally:
            self._close(files)

    def take(self, index):
        """Rows ``index`` (any order, repeats allowed), each read by its own range (one ordered pass)."""
        index = _check_index(index, self.n_samples)
        if not index.size:
            return self._empty()
        order = np.argsort(index, kind="stable")
        rows = index[order]
        files = self._open()
        try:
            if self.matrix is not None:
                ind_all, val_all = self.matrix.indices, self.matrix.data
                pos = np.concatenate([np.arange(self.indptr[i], self.indptr[i + 1]) for i in rows])
                ind, val = ind_all[pos], val_all[pos]
            else:
                ind = np.concatenate([self._members["indices"].read(files["indices"][1], self.indptr[i],
                                                                    self.indptr[i + 1]) for i in rows])
                val = np.concatenate([self._members["data"].read(files["data"][1], self.indptr[i], self.indptr[i + 1])
                                      for i in rows])
        finally:
            self._close(files)
        indptr = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(self.indptr[rows + 1] - self.indptr[rows], out=indptr[1:])
        out = _csr(indptr, ind, val, self.n_features, self.dtype, f"selected rows of {self._where()}")
        return _unsort(out, order)

    def __repr__(self):
        where = f"{self.path!r}, " if self.path is not None else ""
        return (f"SparseSource({where}n_samples={self.n_samples}, n_features={self.n_features}, nnz={self.nnz}, "
                f"dtype={self.dtype})")


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
    n_features : int, optional
        Sparse layout only: the number of columns of the matrix (default: the files' metadata).

    Notes
    -----
    Nulls are not allowed in feature columns (an error names the column and the file), nor
    non-numeric columns (select the numeric ones with ``columns=``).

    **Sparse layout.** When the feature columns are exactly two list columns named ``indices``
    (integers: the columns of the row's non-zeros, in ``[0, n_features)``) and ``values``
    (numbers: the non-zeros, one per index), each row of the files is one sparse row and the
    source is sparse (``sparse=True``: blocks are ``scipy.sparse.csr_matrix``, never densified).
    ``n_features`` is the parameter, else the files' schema metadata ``mercer.n_features``
    (:func:`write_sparse_parquet` writes both columns and the metadata, and a target column
    beside them). Indices need not be sorted within a row (duplicates are summed); an empty list
    is an all-zero row; a null list is an error.
    """

    def __init__(self, path, *, columns: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                 dtype=None, n_features: int | None = None):
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
        if sorted(columns) == ["indices", "values"] and all(_is_list(schema.field(c).type) for c in columns):
            self._init_sparse(schema, n_features, dtype)
            return
        if n_features is not None:
            raise ValueError("ParquetSource: n_features is for the sparse layout (list columns 'indices' and "
                             f"'values'); the feature columns of {self.files[0]!r} are {columns}.")
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
        self._count_rows()

    def _count_rows(self) -> None:
        self._file_rows = np.array([sum(c) for c in self._counts], dtype=np.int64)
        self._file_start = np.concatenate([[0], np.cumsum(self._file_rows)])
        self.n_samples = int(self._file_start[-1])

    def _init_sparse(self, schema, n_features, dtype) -> None:
        """The sparse layout: list columns ``indices`` and ``values``, ``n_features`` given or in the metadata."""
        import pyarrow.parquet as pq
        import pyarrow.types as pat

        ind_t, val_t = schema.field("indices").type.value_type, schema.field("values").type.value_type
        if not pat.is_integer(ind_t) or not (pat.is_integer(val_t) or pat.is_floating(val_t) or pat.is_boolean(val_t)):
            raise ValueError(f"ParquetSource: the sparse layout needs integer 'indices' and numeric 'values' lists; "
                             f"{self.files[0]!r} has list<{ind_t}> and list<{val_t}>.")
        if n_features is None:
            meta = schema.metadata or {}
            if N_FEATURES_KEY not in meta:
                raise ValueError(
                    f"ParquetSource: {self.files[0]!r} holds sparse rows (list columns 'indices' and 'values') but no "
                    f"n_features: pass n_features=... (the number of columns of the matrix), or write it in the "
                    f"schema metadata under {N_FEATURES_KEY.decode()!r} (mercer.sources.write_sparse_parquet does).")
            n_features = meta[N_FEATURES_KEY].decode()
        try:
            n_features = int(n_features)
        except (TypeError, ValueError):
            raise ValueError(f"ParquetSource: n_features must be an integer >= 1; got {n_features!r}.") from None
        if n_features < 1:
            raise ValueError(f"ParquetSource: n_features must be an integer >= 1; got {n_features}.")
        self.sparse = True
        self.columns = ["indices", "values"]
        self.feature_names = None
        self.n_features = n_features
        self.dtype = _float_dtype(np.float32 if dtype is None and pat.is_float32(val_t) else dtype or np.float64)
        self._counts, nnz = [], 0
        for f in self.files:
            meta = pq.ParquetFile(f).metadata
            fschema = meta.schema.to_arrow_schema()
            if not all(c in fschema.names and _is_list(fschema.field(c).type) for c in self.columns):
                raise ValueError(f"ParquetSource: {f!r} lacks the list columns 'indices' and 'values' of the sparse "
                                 "layout.")
            leaf = [j for j in range(meta.num_columns) if meta.schema.column(j).path.split(".")[0] == "values"][0]
            self._counts.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
            # leaf values: one per stored entry, and one per empty or null list (an upper bound of the non-zeros)
            nnz += sum(meta.row_group(i).column(leaf).num_values for i in range(meta.num_row_groups))
        self._nnz = int(nnz)
        self._count_rows()

    @property
    def nnz(self) -> int | None:
        """Stored entries (sparse layout; from the files' metadata: an upper bound, counting empty rows once)."""
        return self._nnz if self.sparse else None

    def _to_block(self, table, where: str):
        return self._to_csr(table, where) if self.sparse else self._to_numpy(table, where)

    def _to_csr(self, table, where: str):
        """The sparse layout's rows as a canonical CSR matrix."""
        parts = {}
        for name in ("indices", "values"):
            col = table.column(name)
            if col.null_count:
                raise ValueError(f"ParquetSource: column {name!r} has {col.null_count} null row(s) in {where}; a row "
                                 "without entries is an empty list.")
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            offsets = np.asarray(arr.offsets, dtype=np.int64)
            flat = arr.flatten()  # the entries of these rows (a slice's own)
            if flat.null_count:
                raise ValueError(f"ParquetSource: column {name!r} has null entries in {where}.")
            parts[name] = (offsets - offsets[0], flat.to_numpy(zero_copy_only=False))
        (p_i, ind), (p_v, val) = parts["indices"], parts["values"]
        if not np.array_equal(p_i, p_v):
            row = int(np.flatnonzero(p_i != p_v)[0]) - 1
            raise ValueError(f"ParquetSource: row {max(row, 0)} of the block read from {where} has "
                             f"{int(p_i[row + 1] - p_i[row])} indices and {int(p_v[row + 1] - p_v[row])} values; "
                             "each index needs its value.")
        return _csr(p_i, ind, val, self.n_features, self.dtype, where)

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
            parts.append(self._to_block(table.slice(lo - g0, hi - lo), repr(self.files[f])))
            start = base + hi
            f += 1
        return _vstack(parts)

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
            block = self._to_block(table.slice(0, need), repr(pending[0][0]))
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
                f"{'sparse, ' if self.sparse else ''}dtype={self.dtype})")


def _is_list(t) -> bool:
    import pyarrow.types as pat

    return pat.is_list(t) or pat.is_large_list(t)


def read_parquet(path, target: str | Sequence[str] | None = None, *, columns=None, dtype=None,
                 n_features: int | None = None):
    """``(X, y)``: the features of Parquet file(s) as a :class:`ParquetSource` (left on disk) and
    the ``target`` column(s) read into memory with their stored dtype (``None`` without a target).
    Files in the sparse layout (:func:`write_sparse_parquet`) give a sparse source.

    >>> X, y = read_parquet("train/*.parquet", target="y")
    """
    targets = [] if target is None else [target] if isinstance(target, str) else list(target)
    X = ParquetSource(path, columns=columns, exclude=targets, dtype=dtype, n_features=n_features)
    if not targets:
        return X, None
    import pyarrow.parquet as pq

    names = pq.read_schema(X.files[0]).names
    for t in targets:
        if t not in names:
            raise ValueError(f"read_parquet: target column {t!r} is not in {X.files[0]!r}; its columns are {names}.")
    ys = [X.read_column(t, dtype=None) for t in targets]  # as stored: numbers, or class labels
    return X, ys[0] if isinstance(target, str) else np.column_stack(ys)


def write_sparse_parquet(path, X, y=None, *, target: str = "y", row_group_size: int = 65_536) -> None:
    """Write the rows of the sparse matrix ``X`` (and the target ``y``, as column ``target``) to
    one Parquet file in the sparse layout that :class:`ParquetSource` reads: list columns
    ``indices`` (int32 below 2**31 features, else int64) and ``values`` (``X``'s float dtype),
    ``n_features`` in the schema metadata. Row groups of ``row_group_size`` rows are converted and
    written one at a time (O(row group) memory besides ``X``).

    >>> write_sparse_parquet("train.parquet", X_csr, y)
    >>> Xs, y = read_parquet("train.parquet", target="y")      # Xs.sparse: blocks are CSR
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not sp.issparse(X):
        raise TypeError(f"write_sparse_parquet: X must be a scipy sparse matrix; got {type(X).__name__}.")
    X = X.tocsr() if X.format != "csr" else X
    n, d = X.shape
    if y is not None:
        y = np.asarray(y)
        if y.shape[:1] != (n,) or y.ndim > 1:
            raise ValueError(f"write_sparse_parquet: y must have shape ({n},); got {y.shape}.")
        if target in ("indices", "values"):
            raise ValueError(f"write_sparse_parquet: the target column cannot be named {target!r}.")
    ind_t = pa.int32() if d < 2**31 else pa.int64()
    val_t = pa.from_numpy_dtype(X.dtype if X.dtype in (np.float32, np.float64) else np.float64)
    fields = [pa.field("indices", pa.list_(ind_t)), pa.field("values", pa.list_(val_t))]
    if y is not None:
        fields.append(pa.field(target, pa.from_numpy_dtype(y.dtype)))
    schema = pa.schema(fields, metadata={N_FEATURES_KEY: str(int(d)).encode()})
    with pq.ParquetWriter(str(path), schema) as writer:
        for s in range(0, max(n, 1), row_group_size):
            e = min(s + row_group_size, n)
            block = X[s:e]
            block.sort_indices()
            if block.nnz >= 2**31:
                raise ValueError(f"write_sparse_parquet: rows {s}:{e} hold {block.nnz} entries, more than a list "
                                 "column's 2**31 per row group; lower row_group_size.")
            offsets = pa.array(np.asarray(block.indptr, dtype=np.int32))
            cols = [pa.ListArray.from_arrays(offsets, pa.array(block.indices.astype(ind_t.to_pandas_dtype()))),
                    pa.ListArray.from_arrays(offsets, pa.array(block.data.astype(val_t.to_pandas_dtype())))]
            if y is not None:
                cols.append(pa.array(y[s:e]))
            writer.write_table(pa.Table.from_arrays(cols, schema=schema), row_group_size=row_group_size)


class DaskSource(RowSource):
    """A Dask array or DataFrame read chunk by chunk in this process (each block is computed with
    Dask's scheduler in force: a cluster's workers compute the partitions, this process does the
    kernel products). Row chunks are aligned to the block size. A Dask array whose chunks are
    scipy sparse matrices (``da.from_array(X_csr, chunks=(rows, -1), asarray=False)``) is a sparse
    source: its blocks are CSR matrices."""

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
        self.sparse = sp.issparse(getattr(X, "_meta", None))
        self._nnz = None

    @property
    def nnz(self) -> int | None:
        """Stored entries of sparse chunks (counted once, in one pass over the chunks)."""
        if not self.sparse:
            return None
        if self._nnz is None:
            counts = self.array.map_blocks(lambda b: np.full((1, 1), b.nnz, dtype=np.int64), dtype=np.int64,
                                           chunks=((1,) * self.array.numblocks[0], (1,) * self.array.numblocks[1]),
                                           meta=np.empty((0, 0), dtype=np.int64))
            self._nnz = int(counts.sum().compute())
        return self._nnz

    def _block(self, part):
        if self.sparse:
            c = sp.csr_matrix(part)
            return _csr(c.indptr, c.indices, c.data, self.n_features, self.dtype, "a Dask chunk")
        return np.array(part, dtype=self.dtype, order="C")

    def _read(self, start, stop):
        return self._block(self.array[start:stop].compute())

    def take(self, index):
        index = _check_index(index, self.n_samples)
        if not index.size:
            return self._empty()
        order = np.argsort(index, kind="stable")
        return _unsort(self._block(self.array[index[order]].compute()), order)


def as_source(X, *, dtype=None) -> RowSource:
    """``X`` as a :class:`RowSource`: a source as is; a ``.npy`` path or an array as an
    :class:`ArraySource`; a ``.npz`` path (``scipy.sparse.save_npz``) or a scipy sparse matrix as a
    :class:`SparseSource`; a ``.parquet``/``.pq`` path, folder or glob as a :class:`ParquetSource`
    (every column a feature, or the sparse layout: use :func:`read_parquet` to set a target aside);
    a Dask collection as a :class:`DaskSource`."""
    if isinstance(X, RowSource):
        return X
    if isinstance(X, (str, os.PathLike)):
        p = str(X)
        if p.endswith(".npy"):
            return ArraySource(p, dtype=dtype)
        if p.endswith(".npz"):
            return SparseSource(p, dtype=dtype)
        return ParquetSource(p, dtype=dtype)
    if is_dask_collection(X):
        return DaskSource(X, dtype=dtype)
    if sp.issparse(X):
        return SparseSource(X, dtype=dtype)
    return ArraySource(X, dtype=dtype)
