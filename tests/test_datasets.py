"""Synthetic data from the seeds, the UCI folder loader and the IDX / Fashion-MNIST reader."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from mercer.datasets import (
    load_fashion_mnist,
    load_uci,
    make_circle_separable,
    make_curve,
    make_ellipse,
    read_idx,
)

from conftest import SHARED_DATA


# -- synthetic --------------------------------------------------------------------------------
def test_curve_is_the_seeds_cubic():
    X, t = make_curve(300, random_state=0)
    assert X.shape == (300, 2) and t.shape == (300,) and X.dtype == np.float64
    assert t.min() >= -2 and t.max() <= 1
    np.testing.assert_array_equal(X[:, 0], t)
    np.testing.assert_allclose(X[:, 1], 2 * t**2 + t**3, rtol=0, atol=1e-12)


def test_curve_seed_and_noise():
    X1, t1 = make_curve(50, random_state=3)
    X2, t2 = make_curve(50, random_state=3)
    np.testing.assert_array_equal(X1, X2)
    Xn, tn = make_curve(50, noise=0.1, random_state=3)
    np.testing.assert_array_equal(tn, t1)
    residual = Xn - X1
    assert 0.05 < residual.std() < 0.2


def test_ellipse_lies_on_the_conic():
    X = make_ellipse(400, random_state=1)
    assert X.shape == (400, 2)
    np.testing.assert_allclose(X[:, 0] ** 2 + 4 * X[:, 1] ** 2, 1.0, atol=1e-12)
    assert (X[:, 0] > 0).any() and (X[:, 0] < 0).any()


def test_circle_separable_labels_and_margin():
    X, y = make_circle_separable(500, random_state=2)
    assert X.shape == (500, 2) and set(np.unique(y)) == {-1, 1}
    assert np.abs(X).max() <= 1
    r2 = (X**2).sum(axis=1)
    np.testing.assert_array_equal(y, np.where(r2 < 0.6, 1, -1))
    X, y = make_circle_separable(500, margin=0.1, random_state=2)
    r2 = (X**2).sum(axis=1)
    assert len(X) == 500 and np.abs(r2 - 0.6).min() >= 0.1
    np.testing.assert_array_equal(y, np.sign(0.6 - r2).astype(int))


@pytest.mark.parametrize("call, match", [
    (lambda: make_curve(0), r"'n_samples' parameter of make_curve must be an int in the range \[1, inf\)\. Got 0"),
    (lambda: make_curve(10, noise=-1.0), r"'noise' parameter of make_curve .* \[0, inf\)\. Got -1\.0"),
    (lambda: make_curve(10, noise=float("inf")), r"'noise' parameter of make_curve .* Got inf"),
    (lambda: make_ellipse(2.5), r"'n_samples' parameter of make_ellipse .* Got 2\.5"),
    (lambda: make_circle_separable(10, radius2=2.0), r"'radius2' parameter of make_circle_separable .* \(0, 2\)\. Got 2\.0"),
    (lambda: make_circle_separable(10, margin=0.7), r"'margin' parameter of make_circle_separable .* Got 0\.7"),
])
def test_synthetic_bad_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- UCI folder format --------------------------------------------------------------------------
def _write_gz_csv(path, arr, fmt):
    with gzip.open(path, "wt") as fh:
        np.savetxt(fh, arr, delimiter=",", fmt=fmt)


@pytest.fixture()
def uci_root(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(20, 4))
    mask = np.zeros((20, 10), dtype=int)
    for s in range(10):
        mask[[2 * s, 2 * s + 1], s] = 1
    (tmp_path / "toy").mkdir()
    _write_gz_csv(tmp_path / "toy" / "data.csv.gz", data, "%.17g")
    _write_gz_csv(tmp_path / "toy" / "test_mask.csv.gz", mask, "%d")
    return tmp_path, data


@pytest.mark.parametrize("split", [0, 7])
def test_load_uci_split(uci_root, split):
    root, data = uci_root
    X_train, y_train, X_test, y_test = load_uci("toy", root, split=split)
    assert X_train.shape == (18, 3) and X_test.shape == (2, 3)
    assert y_train.shape == (18,) and y_test.shape == (2,)
    assert all(a.dtype == np.float64 for a in (X_train, y_train, X_test, y_test))
    test_rows = [2 * split, 2 * split + 1]
    np.testing.assert_array_equal(X_test, data[test_rows, :3])
    np.testing.assert_array_equal(y_test, data[test_rows, 3])
    np.testing.assert_array_equal(y_train, np.delete(data[:, 3], test_rows))


def test_load_uci_missing_files_named(tmp_path):
    (tmp_path / "toy").mkdir()
    with pytest.raises(FileNotFoundError, match=r"data\.csv\.gz.*test_mask\.csv\.gz"):
        load_uci("toy", tmp_path)
    with pytest.raises(FileNotFoundError, match="nothere"):
        load_uci("nothere", tmp_path)


def test_load_uci_bad_arguments(uci_root):
    root, _ = uci_root
    with pytest.raises(ValueError, match="split"):
        load_uci("toy", root, split=10)
    with pytest.raises(ValueError, match="root"):
        load_uci("toy", None)
    with pytest.raises(ValueError, match="folder name"):
        load_uci("../toy", root)


@pytest.mark.skipif(not (SHARED_DATA / "uci" / "pol").is_dir(), reason="shared UCI data not present")
def test_load_uci_real_pol():
    X_train, y_train, X_test, y_test = load_uci("pol", SHARED_DATA / "uci", split=3)
    assert X_train.shape[1] == X_test.shape[1] == 26
    assert len(y_train) + len(y_test) == 15000
    assert 0.08 < len(y_test) / 15000 < 0.12


# -- IDX / Fashion-MNIST --------------------------------------------------------------------------
def _idx_bytes(arr: np.ndarray) -> bytes:
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}
    code = codes[arr.dtype.type]
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def _write_idx(path, arr, gz=False):
    data = _idx_bytes(arr)
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_roundtrip(tmp_path, dtype, gz):
    arr = (np.arange(2 * 3 * 4) - 5).reshape(2, 3, 4).astype(dtype) if dtype != np.uint8 else \
        np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.idx.gz" if gz else "a.idx")
    _write_idx(path, arr, gz=gz)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, arr)


def test_read_idx_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"PK\x03\x04 not idx")
    with pytest.raises(ValueError, match="not an IDX"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(_idx_bytes(np.zeros((4, 2), np.uint8))[:-3])
    with pytest.raises(ValueError, match="shape"):
        read_idx(short)


def test_load_fashion_mnist_from_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = np.array([0, 9, 3, 3, 1], dtype=np.uint8)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", images, gz=True)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels, gz=True)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", images[:2])       # uncompressed works too
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", labels[:2])
    X_train, y_train, X_test, y_test = load_fashion_mnist(tmp_path)
    assert X_train.shape == (5, 784) and X_test.shape == (2, 784)
    assert X_train.dtype == np.float32 and y_train.dtype == np.int64
    np.testing.assert_allclose(X_train, images.reshape(5, -1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y_train, labels)
    np.testing.assert_array_equal(y_test, labels[:2])
    assert X_train.min() >= 0 and X_train.max() <= 1


def test_load_fashion_mnist_missing_says_how_to_install(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist(tmp_path)


def test_load_fashion_mnist_inconsistent_files(tmp_path):
    _write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((3, 2, 2), np.uint8))
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4, np.uint8))
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((1, 2, 2), np.uint8))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match="expected images"):
        load_fashion_mnist(tmp_path)
