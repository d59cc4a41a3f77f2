"""Reading tables for the CLI: CSV, NumPy ``.npy`` and Parquet, and picking the target column."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["CLIError", "Table", "read_table"]


class CLIError(Exception):
    """A user error: reported as one line on stderr, exit status 2."""


class Table:
    """Feature columns and an optional target, as read from a file.

    ``X`` is a pandas DataFrame (CSV, Parquet: column names are kept so a model can check them) or
    a 2-D float ndarray (``.npy``); ``columns`` lists the column labels of the whole file.
    """

    def __init__(self, X, y, columns: list, target_name, path: Path):
        self.X, self.y, self.columns, self.target_name, self.path = X, y, columns, target_name, path

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
                   "use .csv, .tsv, .npy or .parquet.")


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


def read_table(path, target: str | None = None, *, header: bool = True, numeric_only: bool = True) -> Table:
    """Read ``path`` and split off the ``target`` column (a name, or a 0-based index; negative
    indices count from the end). With ``numeric_only`` every feature column must be numeric;
    otherwise text columns are kept (for the preprocessing pipeline to encode)."""
    path = Path(path)
    if path.is_dir():
        raise CLIError(f"--data {path} is a directory; give a data file (.csv, .tsv, .npy or .parquet).")
    if not path.is_file():
        raise CLIError(f"data file not found: {path}")
    data = _load_frame(path, header)
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
