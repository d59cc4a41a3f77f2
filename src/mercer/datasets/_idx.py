"""The IDX format (MNIST, Fashion-MNIST) and the Fashion-MNIST loader.

IDX: two zero bytes, a type byte, the number of dimensions, then each dimension as a big-endian
uint32, then the values in C order, big-endian. Files may be gzip-compressed.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

__all__ = ["FASHION_MNIST_ROOT", "load_fashion_mnist", "read_idx"]

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"

_TYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
          0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path) -> np.ndarray:
    """Read an IDX file (gzip-compressed or not) into a native-endian numpy array."""
    path = Path(path)
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _TYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number {raw[:4].hex() or 'empty'}).")
    dtype, ndim = _TYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header.")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header != count * dtype.itemsize:
        raise ValueError(
            f"{path}: IDX header says shape {shape} ({count * dtype.itemsize} bytes of data) but the "
            f"file holds {len(raw) - header}."
        )
    arr = np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))


def _find(root: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return root / name
    return None


def load_fashion_mnist(root=FASHION_MNIST_ROOT):
    """Fashion-MNIST from its original IDX files (as installed by Debian's ``dataset-fashion-mnist``).

    Parameters
    ----------
    root : str or path, default="/usr/share/datasets/fashion-mnist"
        Folder with ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``).

    Returns
    -------
    X_train : ndarray of shape (60000, 784), float32 in [0, 1]
    y_train : ndarray of shape (60000,), int64 in 0..9
    X_test : ndarray of shape (10000, 784), float32 in [0, 1]
    y_test : ndarray of shape (10000,), int64
    """
    root = Path(root).expanduser()
    stems = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    paths = [_find(root, s) for s in stems]
    if any(p is None for p in paths):
        missing = [s for s, p in zip(stems, paths) if p is None]
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {root}: missing {', '.join(m + '[.gz]' for m in missing)}. "
            "On Debian/Ubuntu: apt-get install dataset-fashion-mnist, or pass root= to the folder "
            "holding the original IDX files."
        )
    out = []
    for img_path, lab_path in ((paths[0], paths[1]), (paths[2], paths[3])):
        images, labels = read_idx(img_path), read_idx(lab_path)
        if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"{img_path} / {lab_path}: expected images (n, rows, cols) and labels (n,); got "
                f"{images.shape} and {labels.shape}."
            )
        X = images.reshape(images.shape[0], -1).astype(np.float32)
        X /= 255.0
        out += [X, labels.astype(np.int64)]
    return tuple(out)
