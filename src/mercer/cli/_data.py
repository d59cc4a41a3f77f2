"""Reading tables for the CLI: CSV, NumPy ``.npy`` and Parquet, and picking the target column.

A folder of Parquet files or a glob (``'data/*.parquet'``) is one table. For a model that fits
from streamed data (:mod:`mercer.sources`), :func:`streamed_table` leaves the features on disk when
the data are many Parquet files or a file larger than a quarter of the memory budget
(:func:`is_large_input`); only the target is read.

Sparse rows (:func:`is_sparse_input`) are read by :func:`sparse_table` through
:mod:`mercer.sources`: a ``.npz`` file of a scipy sparse matrix (``scipy.sparse.save_npz``, CSR; it
holds no target: ``--target`` names a ``.npy`` file of one value per row) or Parquet in the sparse
layout (:func:`mercer.sources.write_sparse_parquet`: list columns ``indices`` and ``values``, the
target a column beside them). They stay on disk under the same rule as dense data, sized from their
stored entries; otherwise the source reads them into one CSR matrix, never dense.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..sources import ArraySource
from ..sources import _parquet_files as _source_files

__all__ = ["CLIError", "Table", "is_large_input", "is_sparse_input", "read_table", "sparse_table", "streamed_table"]


class CLIError(Exception):
    """A user error: reported as one line on stderr, exit status 2."""


class Table:
    """Feature columns and an optional target, as read from a file.

    ``X`` is a pandas DataFrame (CSV, Parquet: column names are kept so a model can check them) or
    a 2-D float ndarray (``.npy``); ``columns`` lists the column labels of the whole file.
    """

    def __init__(self, X, y, columns: list, target_name, path: Path, streamed: bool = False):
        self.X, self.y, self.columns, self.target_name, self.path = X, y, columns, target_name, path
        self.streamed = streamed  # X is a mercer.sources.RowSource (read block by block)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.X.shape)


def _pandas():
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas is installed with mercer[io]
        raise CLIError("reading CSV and Parquet needs pandas: pip install 'mercer[io]'.") from exc
    return pd


def _load_frame(path: Path, header: bool):
    suffixes = [s.lower() for s in path.suffixes]
    kind = suffixes[-2] if suffixes and suffixes[-1] in (".gz", ".bz2", ".xz", ".zip") and len(suffixes) > 1 else (
        suffixes[-1] if suffixes else "")
    if kind in (".csv", ".txt", ".tsv"):
        pd = _pandas()
        sep = "\t" if kind == ".tsv" else ","
        try:
            return pd.read_csv(path, sep=sep, header=0 if header else None)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise CLIError(f"{path}: cannot parse as CSV ({' '.join(str(exc).split())}).") from exc
    if kind in (".parquet", ".pq"):
        pd = _pandas()
        try:
            return pd.read_parquet(path)
        except ImportError as exc:
            raise CLIError("reading Parquet needs pyarrow: pip install 'mercer[io]'.") from exc
        except Exception as exc:  # pyarrow raises its own error types for corrupt files
            raise CLIError(f"{path}: cannot read as Parquet ({' '.join(str(exc).split())}).") from exc
    if kind == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise CLIError(f"{path}: not a plain numeric .npy array ({exc}).") from exc
        if arr.ndim != 2:
            raise CLIError(f"{path}: expected a 2-D array (rows x columns); got shape {arr.shape}.")
        return arr
    raise CLIError(f"{path}: unknown data format {''.join(path.suffixes) or '(no extension)'!r}; "
                   "use .csv, .tsv, .npy or .parquet, or for sparse rows .npz.")


def _show(columns: list, limit: int = 12) -> str:
    shown = ", ".join(map(repr, columns[:limit]))
    return shown + (f", ... ({len(columns)} in all)" if len(columns) > limit else "")


def _target_position(target: str, columns: list) -> int:
    if target in [str(c) for c in columns]:
        return [str(c) for c in columns].index(target)
    try:
        pos = int(target)
    except ValueError:
        raise CLIError(f"unknown column {target!r}; columns are {_show(columns)} (or give a 0-based index).") from None
    if not -len(columns) <= pos < len(columns):
        raise CLIError(f"column index {pos} is out of range for {len(columns)} columns.")
    return pos % len(columns)


def _is_many(text: str) -> bool:
    """A folder or a glob: a table in several (Parquet) files."""
    return os.path.isdir(text) or any(ch in text for ch in "*?[")


def _parquet_files(text: str) -> list[str]:
    """The Parquet files of a folder or glob, in sorted order."""
    if os.path.isdir(text):  # a folder of Parquet files only (Spark's _SUCCESS and hidden files aside)
        others = [f for root, _, names in os.walk(text) for f in names
                  if not f.startswith((".", "_")) and not f.lower().endswith((".parquet", ".pq"))]
        if others or not any(f.lower().endswith((".parquet", ".pq")) for _, _, names in os.walk(text) for f in names):
            raise CLIError(f"--data {text} is a directory; give a data file (.csv, .tsv, .npy or .parquet) or a "
                           "folder of Parquet files only.")
    try:
        found = _source_files(text)
    except FileNotFoundError as exc:
        raise CLIError(f"--data {text}: {exc}") from None
    bad = [f for f in found if not f.lower().endswith((".parquet", ".pq"))]
    if bad:
        raise CLIError(f"--data {text}: a folder or glob must hold Parquet files only; got {bad[0]!r}.")
    return found


def _load_many(text: str):
    """A folder or glob of Parquet files as one DataFrame (in memory), files in sorted order."""
    pd = _pandas()
    frames = []
    for f in _parquet_files(text):
        try:
            frames.append(pd.read_parquet(f))
        except Exception as exc:  # pyarrow raises its own error types for corrupt files
            raise CLIError(f"{f}: cannot read as Parquet ({' '.join(str(exc).split())}).") from exc
    return pd.concat(frames, ignore_index=True)


def is_large_input(text: str, budget: int) -> bool:
    """Whether ``--data`` should stay on disk for a model that streams: several Parquet files (a
    folder or a glob), or one ``.npy`` / Parquet file whose values exceed a quarter of ``budget``
    (sparse rows: their stored entries, as a block holds them)."""
    if _is_many(text):
        return True
    path = Path(text)
    kind = path.suffix.lower()
    if not path.is_file() or kind not in (".npy", ".npz", ".parquet", ".pq"):
        return False
    try:
        if is_sparse_input(text):
            from ..sources import SparseSource, read_parquet

            source = SparseSource(path) if kind == ".npz" else read_parquet(path, columns=_SPARSE_COLUMNS)[0]
            size = source.bytes_per_row * source.n_samples
        elif kind == ".npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            size = arr.size * 8
        else:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            size = meta.num_rows * meta.num_columns * 8
    except Exception:  # unreadable: the in-memory reader says why
        return False
    return size > budget // 4


class _NpyFeatures(ArraySource):
    """The feature columns ``keep`` of a memory-mapped ``.npy`` table (the target column left out)."""

    def __init__(self, array, keep):
        super().__init__(array)
        self.keep = np.asarray(keep, dtype=np.int64)
        self.n_features = len(self.keep)

    def _read(self, start, stop):
        return np.array(self.array[start:stop][:, self.keep], dtype=self.dtype, order="C")

    def take(self, index):
        rows = np.asarray(self.array[np.asarray(index, dtype=np.int64).ravel()])
        return np.array(rows[:, self.keep], dtype=self.dtype, order="C")


def streamed_table(text: str, target: str | None = None, *, drop=()) -> Table:
    """The table of ``--data`` with its features left on disk (a :class:`~mercer.sources.RowSource`)
    and the target read: Parquet (a file, a folder or a glob; numeric feature columns only) or a
    ``.npy`` array (memory-mapped)."""
    from ..sources import ParquetSource

    path = Path(text)
    if not _is_many(text) and not path.is_file():
        raise CLIError(f"data file not found: {path}")
    if path.suffix.lower() == ".npy" and not _is_many(text):
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if arr.ndim != 2 or arr.dtype.kind not in "biuf":
            raise CLIError(f"{path}: expected a 2-D numeric array; got shape {arr.shape}, dtype {arr.dtype}.")
        columns = list(range(arr.shape[1]))
        pos = None if target is None else _target_position(target, columns)
        y = None if pos is None else np.array(arr[:, pos])
        keep = [j for j in range(arr.shape[1]) if j != pos]
        if not keep:
            raise CLIError(f"{path}: no feature columns left once the target is set aside.")
        return Table(_NpyFeatures(arr, keep), y, columns, pos, path, streamed=True)
    files = _parquet_files(text) if _is_many(text) else [text]
    import pyarrow.parquet as pq

    columns = list(pq.read_schema(files[0]).names)
    name = None if target is None else columns[_target_position(target, columns)]
    unknown = [c for c in drop if c not in columns]
    if unknown:
        raise CLIError(f"--drop: unknown column(s) {_show(unknown)}; columns are {_show(columns)}.")
    features = [c for c in columns if c != name and c not in drop]
    schema = pq.read_schema(files[0])
    import pyarrow.types as pat

    text_cols = [c for c in features if not any(f(schema.field(c).type) for f in
                                                 (pat.is_integer, pat.is_floating, pat.is_boolean))]
    if text_cols:
        raise CLIError(f"{text}: feature columns must be numeric when the data are streamed from disk; "
                       f"{_show(text_cols)} are not (leave them out with --drop, or encode them in the files).")
    try:
        X = ParquetSource(files, columns=features)
        y = None if name is None else X.read_column(name, dtype=None)
    except ValueError as exc:
        raise CLIError(f"--data {text} (streamed from disk): {exc}") from None
    return Table(X, y, columns, name, path, streamed=True)


#: the feature columns of the sparse Parquet layout (:func:`mercer.sources.write_sparse_parquet`)
_SPARSE_COLUMNS = ["indices", "values"]


def is_sparse_input(text: str) -> bool:
    """Whether ``--data`` holds sparse rows: a ``.npz`` file, or Parquet (a file, a folder or a glob)
    whose first file has the list columns ``indices`` and ``values`` of the sparse layout."""
    if not _is_many(text):
        kind = Path(text).suffix.lower()
        if kind == ".npz":
            return True
        if kind not in (".parquet", ".pq") or not Path(text).is_file():
            return False
    try:
        import pyarrow.parquet as pq
        import pyarrow.types as pat

        schema = pq.read_schema(_parquet_files(text)[0] if _is_many(text) else text)
    except (ImportError, CLIError, OSError, ValueError, IndexError):
        return False  # not readable as Parquet here: the dense reader says why
    return all(c in schema.names and (pat.is_list(schema.field(c).type) or pat.is_large_list(schema.field(c).type))
               for c in _SPARSE_COLUMNS)


def _target_file(target: str | None, n: int, data: Path):
    """``--target`` of a ``.npz`` (which holds the features only): a ``.npy`` file of ``n`` values."""
    if target is None:
        return None, None
    path = Path(target)
    if path.suffix.lower() != ".npy":
        raise CLIError(f"--data {data} is a sparse matrix (.npz) and holds no target column; give --target as a "
                       f".npy file of its {n} targets, one per row (got {target!r}).")
    if not path.is_file():
        raise CLIError(f"--target: target file not found: {path}")
    try:
        y = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise CLIError(f"--target {path}: not a plain .npy array of numbers or labels ({exc}).") from None
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (n,):
        raise CLIError(f"--target {path}: expected {n} values (one per row of {data.name}); got shape {y.shape}.")
    return y, path.name


def sparse_table(text: str, target: str | None = None, *, drop=(), stream: bool = True, strict: bool = True) -> Table:
    """The sparse rows of ``--data`` (see :func:`is_sparse_input`) and the target. ``stream``: the
    features as a :class:`~mercer.sources.RowSource` left on disk (``Table.streamed``); otherwise one
    CSR matrix, read by the source block by block (never dense). ``strict``: Parquet columns other
    than the layout's, the target and ``drop`` are an error (a forgotten ``--target``); else unread."""
    from ..sources import SparseSource, read_parquet

    path = Path(text)
    if not _is_many(text) and not path.is_file():
        raise CLIError(f"data file not found: {path}")
    try:
        if path.suffix.lower() == ".npz" and not _is_many(text):
            if drop:
                raise CLIError(f"--drop: {path.name} is a sparse matrix (.npz) without named columns.")
            X = SparseSource(path)
            y, name = _target_file(target, X.n_samples, path)
            columns = list(range(X.n_features))
        else:
            files = _parquet_files(text) if _is_many(text) else [text]
            import pyarrow.parquet as pq

            names = list(pq.read_schema(files[0]).names)
            name = None if target is None else names[_target_position(target, names)]
            if name in _SPARSE_COLUMNS:
                raise CLIError(f"--target {target!r}: {name!r} is a column of the sparse layout, not a target.")
            unknown = [c for c in drop if c not in names or c in _SPARSE_COLUMNS]
            if unknown:
                raise CLIError(f"--drop: unknown or sparse-layout column(s) {_show(unknown)}; columns are "
                               f"{_show(names)}.")
            others = [c for c in names if c not in _SPARSE_COLUMNS and c != name and c not in drop]
            if others and strict:
                raise CLIError(f"--data {text}: sparse rows (columns 'indices' and 'values') with other columns "
                               f"{_show(others)}; name the target with --target and leave the rest out with --drop.")
            X, y = read_parquet(files, target=name, columns=_SPARSE_COLUMNS)
            columns = names
    except ValueError as exc:
        raise CLIError(f"--data {text}: {exc}") from None
    if X.n_samples == 0 or X.n_features == 0:
        raise CLIError(f"{path}: no data ({X.n_samples} rows x {X.n_features} feature columns).")
    if not stream:
        try:
            X = X.to_numpy()
        except ValueError as exc:
            raise CLIError(f"--data {text}: {exc}") from None
    return Table(X, y, columns, name, path, streamed=stream)


def read_table(path, target: str | None = None, *, header: bool = True, numeric_only: bool = True) -> Table:
    """Read ``path`` and split off the ``target`` column (a name, or a 0-based index; negative
    indices count from the end). With ``numeric_only`` every feature column must be numeric;
    otherwise text columns are kept (for the preprocessing pipeline to encode). A folder or a
    glob of Parquet files is read as one table."""
    many = _is_many(str(path))
    path = Path(path)
    if not many and not path.is_file():
        raise CLIError(f"data file not found: {path}")
    data = _load_many(str(path)) if many else _load_frame(path, header)
    if isinstance(data, np.ndarray):
        columns = list(range(data.shape[1]))
        y, name = None, None
        if target is not None:
            pos = _target_position(target, columns)
            y, name = data[:, pos], pos
            data = np.delete(data, pos, axis=1)
        if data.dtype.kind not in "biuf":
            raise CLIError(f"{path}: features must be numeric; got dtype {data.dtype}.")
        X = data.astype(np.float64, copy=False) if data.dtype.kind != "f" else data
    else:
        columns = list(data.columns)
        y, name = None, None
        if target is not None:
            pos = _target_position(target, columns)
            name = columns[pos]
            y = data.iloc[:, pos].to_numpy()
            data = data.drop(columns=[name])
        bad = [c for c in data.columns if data[c].dtype.kind not in "biuf"] if numeric_only else []
        if bad:
            raise CLIError(f"{path}: feature columns must be numeric; {_show(bad)} are not "
                           "(drop or encode them, or pick the right --target).")
        X = data
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise CLIError(f"{path}: no data ({X.shape[0]} rows x {X.shape[1]} feature columns).")
    return Table(X, y, columns, name, path)
