"""UCI regression sets in the ``uci_datasets`` folder format (fixed train/test splits).

A set ``name`` is a folder ``root/name`` holding

* ``data.csv.gz``: headerless CSV, every column but the last an input, the last the target;
* ``test_mask.csv.gz``: headerless CSV with 10 columns; a 1 in column ``s`` marks a test row of
  split ``s``.

The package ships no data and knows no default location: ``root`` is always given.
"""

from __future__ import annotations

import numbers
from pathlib import Path

import numpy as np

__all__ = ["load_uci"]

_DATA, _MASK = "data.csv.gz", "test_mask.csv.gz"


def _read_csv(path: Path, dtype) -> np.ndarray:
    """Headerless numeric CSV (pandas' parser when installed: several times faster than numpy's)."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is an optional dependency
        return np.loadtxt(path, delimiter=",", dtype=dtype, ndmin=2)
    # exact decimal -> binary parsing: pandas < 3's default parser can be 1 ulp off (seen with
    # pandas 2 on the GPU machine); pandas 3 parses exactly by default and deprecates the option
    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    return pd.read_csv(path, header=None, dtype=dtype, **exact).to_numpy()


def load_uci(name: str, root, split: int = 0):
    """Load one UCI set with its train/test split ``split`` (0-9).

    Parameters
    ----------
    name : str
        Folder name under ``root``, e.g. ``"pol"``, ``"elevators"``, ``"kin40k"``.
    root : str or path
        Folder that holds one sub-folder per data set.
    split : int in [0, 9], default=0

    Returns
    -------
    X_train : ndarray of shape (n_train, d), float64
    y_train : ndarray of shape (n_train,), float64
    X_test : ndarray of shape (n_test, d), float64
    y_test : ndarray of shape (n_test,), float64

    Raises
    ------
    FileNotFoundError
        When ``root/name`` lacks ``data.csv.gz`` or ``test_mask.csv.gz`` (the message names both).
    ValueError
        For a bad ``split`` or inconsistent files.
    """
    if root is None:
        raise ValueError("load_uci needs root=, the folder that holds the data sets (e.g. .../data/uci).")
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"The 'name' parameter of load_uci must be a folder name such as 'pol'. Got {name!r} instead.")
    folder = Path(root).expanduser() / name
    data_path, mask_path = folder / _DATA, folder / _MASK
    missing = [p for p in (data_path, mask_path) if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"load_uci({name!r}): expected {data_path} and {mask_path} (headerless CSV, target in the "
            f"last column; 10 split columns in the mask); missing: {', '.join(str(p) for p in missing)}."
        )
    data = _read_csv(data_path, np.float64)
    mask = _read_csv(mask_path, np.float64)
    n_splits = mask.shape[1]
    if not isinstance(split, numbers.Integral) or isinstance(split, bool) or not 0 <= split < n_splits:
        raise ValueError(f"The 'split' parameter of load_uci must be an int in the range [0, {n_splits - 1}]. "
                         f"Got {split!r} instead.")
    if data.shape[1] < 2:
        raise ValueError(f"{data_path}: expected at least 2 columns (inputs and target); got {data.shape[1]}.")
    if mask.shape[0] != data.shape[0]:
        raise ValueError(f"{mask_path} has {mask.shape[0]} rows but {data_path} has {data.shape[0]}.")
    col = mask[:, split]
    if not np.isin(col, (0.0, 1.0)).all():
        raise ValueError(f"{mask_path}: column {split} must hold only 0 and 1.")
    test = col == 1.0
    X, y = data[:, :-1], data[:, -1]
    return (np.ascontiguousarray(X[~test]), np.ascontiguousarray(y[~test]),
            np.ascontiguousarray(X[test]), np.ascontiguousarray(y[test]))
