"""Fits that stream their training data (issue 16): each equals the in-memory fit on the same data.

Every estimator whose algorithm streams over samples is fit and applied from (a) a ``.npy`` file
(memory-mapped), (b) a folder of two Parquet files with uneven row groups, (c) a Dask array read
in this process, and compared with the in-memory fit (same ``random_state``). A small
``memory_budget`` forces several blocks per pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs

from mercer import approx, sources
from mercer.cli import main
from mercer.io import load
from mercer.linalg import MemoryBudgetError
from mercer.models import (ApproximateKernelPCA, KernelKMeans, KernelSVC, KMeans, NystroemKernelRidge,
                           RandomFeatureRidge)

from conftest import assert_fit_matches, write_parquet_parts

BUDGET = 1 << 18  # 256 KiB: several blocks per pass for the data below
N, D = 600, 4


@pytest.fixture(scope="module")
def data():
    X, labels = make_blobs(N, n_features=D, centers=4, cluster_std=1.5, random_state=0)
    y = np.sin(X[:, 0]) + 0.1 * X[:, 1]
    X.setflags(write=False)
    return X, y, labels


@pytest.fixture(scope="module")
def stored(data, tmp_path_factory):
    """The same X as a .npy file and as a folder of two Parquet files with uneven row groups."""
    X, y, _ = data
    root = tmp_path_factory.mktemp("streamed")
    np.save(root / "X.npy", X)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(D)])
    frame["y"] = y
    write_parquet_parts(root, lambda path, rows, size: frame.iloc[rows].to_parquet(path, row_group_size=size), 250)
    return root


def _inputs(stored, X):
    """name -> X for each kind of streamed data (the model is fitted on it and applied to it)."""
    out = {"npy": str(stored / "X.npy"), "parquet": sources.read_parquet(stored / "pq", target="y")[0]}
    try:
        import dask.array as da
    except ImportError:
        return out
    out["dask"] = da.from_array(np.asarray(X), chunks=(137, D))
    return out


KINDS = ["npy", "parquet", "dask"]


def _frame(X):
    return pd.DataFrame(X, columns=[f"x{j}" for j in range(D)])


def _reference_X(kind, X):
    return _frame(X) if kind == "parquet" else X  # Parquet carries column names: compare with a named frame


def _check(kind, stored, data, est, method="predict", y=None, atol=1e-6, **fit_kw):
    X = data[0]
    inputs = _inputs(stored, X)
    if kind not in inputs:
        pytest.skip("dask is not installed")
    ref, got = assert_fit_matches(est, inputs[kind], _reference_X(kind, X), y=y, method=method, atol=atol, **fit_kw)
    assert got.n_features_in_ == D
    return ref, got


@pytest.mark.parametrize("kind", KINDS)
def test_random_feature_ridge(kind, stored, data):
    est = RandomFeatureRidge(alpha=0.1, n_components=40, random_state=0, memory_budget=BUDGET)
    _check(kind, stored, data, est, y=data[1])


def test_random_feature_ridge_weights(stored, data):
    w = np.random.default_rng(1).uniform(0.2, 2.0, N)
    est = RandomFeatureRidge(alpha=0.1, n_components=40, random_state=0, memory_budget=BUDGET)
    _check("npy", stored, data, est, y=data[1], sample_weight=w)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_approximate_kernel_pca(kind, approximation, stored, data):
    est = ApproximateKernelPCA(n_components=3, n_features=30, approximation=approximation, gamma=0.1,
                               random_state=0, memory_budget=BUDGET)
    ref, got = _check(kind, stored, data, est, method="transform")
    assert ref._rows < N  # the blocked (two-pass) path ran
    np.testing.assert_allclose(got.eigenvalues_, ref.eigenvalues_, rtol=1e-10)


def test_approximate_kernel_pca_fit_transform_and_small_data(stored, data):
    X = data[0]
    est = ApproximateKernelPCA(n_components=2, n_features=20, random_state=0)  # fits at once: read whole
    np.testing.assert_allclose(clone(est).fit_transform(str(stored / "X.npy")), clone(est).fit_transform(X),
                               atol=1e-10)
    with pytest.raises(ValueError, match="landmark rule 'kmeans'.*needs the training data in memory"):
        ApproximateKernelPCA(n_features=20, landmarks="kmeans").fit(str(stored / "X.npy"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("init", ["k-means++", "random", "array"])
def test_kmeans(kind, init, stored, data):
    X = data[0]
    init = X[[0, 100, 200, 300]] + 0.5 if init == "array" else init
    est = KMeans(4, init=init, random_state=0, memory_budget=BUDGET)
    ref, got = _check(kind, stored, data, est)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    np.testing.assert_allclose(got.cluster_centers_, ref.cluster_centers_, atol=1e-10)
    assert got.inertia_ == pytest.approx(ref.inertia_, rel=1e-10) and got.n_iter_ == ref.n_iter_


def test_kmeans_many_clusters_weights_restarts_and_empty_clusters(stored, data):
    X = data[0]
    path = str(stored / "X.npy")
    w = np.random.default_rng(2).uniform(0.1, 3.0, N)
    for est, kw in [(KMeans(30, random_state=1, memory_budget=BUDGET), {}),
                    (KMeans(5, init="random", n_init=3, random_state=1, memory_budget=BUDGET), {"sample_weight": w}),
                    (KMeans(5, random_state=3, tol=0, memory_budget=BUDGET), {"sample_weight": w})]:
        ref, got = clone(est).fit(X, **kw), clone(est).fit(path, **kw)
        np.testing.assert_array_equal(got.labels_, ref.labels_)
        np.testing.assert_allclose(got.cluster_centers_, ref.cluster_centers_, atol=1e-10)
    far = np.vstack([X[:3], [[1e3] * D]])  # a centre no point is closest to: re-seeded with the farthest point
    ref = KMeans(4, init=far, max_iter=5, memory_budget=BUDGET).fit(X)
    got = KMeans(4, init=far, max_iter=5, memory_budget=BUDGET).fit(path)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    np.testing.assert_allclose(got.cluster_centers_, ref.cluster_centers_, atol=1e-10)


def test_kmeans_verbose_lines_match(stored, data, capsys):
    KMeans(4, random_state=0, verbose=1).fit(data[0])
    ref = capsys.readouterr().out
    KMeans(4, random_state=0, verbose=1).fit(str(stored / "X.npy"))
    got = capsys.readouterr().out
    def words(text):  # the lines with their numbers rounded (the tolerance differs in the last digits)
        return [re.sub(r"\d+\.\d+(e-?\d+)?", lambda m: f"{float(m.group()):.9g}", line) for line in text.splitlines()]
    assert words(got) == words(ref) and "Converged" in got


def test_kmeans_callable_init_reads_into_memory(stored, data):
    def init(X, k, random_state):
        assert isinstance(X, np.ndarray)
        return X[:k]
    ref = KMeans(4, init=init, n_init=1).fit(data[0])
    got = KMeans(4, init=init, n_init=1).fit(str(stored / "X.npy"))
    np.testing.assert_array_equal(got.labels_, ref.labels_)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_kernel_kmeans_approximate(kind, approximation, stored, data):
    est = KernelKMeans(4, approximation=approximation, n_components=20, gamma=0.05, random_state=0,
                       memory_budget=BUDGET)
    ref, got = _check(kind, stored, data, est)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    assert got.inertia_ == pytest.approx(ref.inertia_, rel=1e-10)


MAPS = [approx.RandomFourierFeatures(n_components=16, random_state=0),
        approx.RandomFourierFeatures(n_components=16, gamma="scale", random_state=0),
        approx.Nystroem(n_components=16, gamma=0.1, random_state=0, memory_budget=BUDGET),
        approx.LandmarkFeatures(n_components=16, gamma=0.1, random_state=0, memory_budget=BUDGET),
        approx.TensorSketch(n_components=16, gamma=0.1, random_state=0),
        approx.RandomMaclaurin(n_components=16, gamma=0.1, random_state=0),
        approx.PolynomialFeatureMap(gamma=0.1),
        approx.IncompleteCholesky(n_components=8, gamma=0.1, random_state=0)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmap", MAPS, ids=lambda m: type(m).__name__ + ("_scale" if getattr(m, "gamma", 0) == "scale"
                                                                           else ""))
def test_feature_maps(kind, fmap, stored, data):
    _check(kind, stored, data, fmap, method="transform", atol=1e-9)


def test_nystroem_ridge_streams_from_every_kind(stored, data):
    X, y, _ = data
    est = NystroemKernelRidge(alpha=0.1, n_centers=30, gamma=0.1, random_state=0, dtype="float64",
                              memory_budget=BUDGET)
    for kind in KINDS:
        inputs = _inputs(stored, X)
        if kind in inputs:
            _check(kind, stored, data, est, y=y)


def test_non_streaming_fit_reads_into_memory(stored, data):
    X, y, labels = data
    lab = labels % 2
    ref = KernelSVC(gamma=0.1, random_state=0).fit(X, lab)
    got = KernelSVC(gamma=0.1, random_state=0).fit(str(stored / "X.npy"), lab)
    np.testing.assert_allclose(got.decision_function(str(stored / "X.npy")), ref.decision_function(X), atol=1e-8)


def test_non_streaming_fit_over_budget_names_streaming_estimators(stored, data):
    lab = data[2] % 2
    with pytest.raises(MemoryBudgetError, match="NystroemKernelRidge.*RandomFeatureRidge.*KMeans"):
        KernelSVC(memory_budget=4096).fit(str(stored / "X.npy"), lab)
    with pytest.raises(MemoryBudgetError, match="stream their training data"):
        approx.IncompleteCholesky(n_components=4, memory_budget=4096).fit(str(stored / "X.npy"))


def test_parquet_text_column_and_nulls(tmp_path):
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["u", "v", "w"], "y": [0.0, 1.0, 2.0]})
    frame.to_parquet(tmp_path / "text.parquet")
    with pytest.raises(ValueError, match=r"columns \['b'\] are not numeric"):
        sources.read_parquet(tmp_path / "text.parquet", target="y")
    frame = pd.DataFrame({"a": [1.0, np.nan, 3.0], "y": [0.0, 1.0, 2.0]})
    frame.to_parquet(tmp_path / "nulls.parquet")
    X, y = sources.read_parquet(tmp_path / "nulls.parquet", target="y")
    with pytest.raises(ValueError, match="column 'a' has 1 null value"):  # pandas writes NaN as a null
        RandomFeatureRidge(n_components=4).fit(X, y)
    pd.DataFrame({"a": pd.array([1, None, 3], dtype="Int64"), "y": [0.0, 1.0, 2.0]}).to_parquet(
        tmp_path / "ints.parquet")
    X, y = sources.read_parquet(tmp_path / "ints.parquet", target="y")
    with pytest.raises(ValueError, match="column 'a' has 1 null value"):
        KMeans(2).fit(X)


def test_nan_in_npy_names_the_rows(tmp_path):
    X = np.random.default_rng(0).normal(size=(50, 3))
    X[33, 1] = np.nan
    np.save(tmp_path / "X.npy", X)
    for est in (KMeans(2, memory_budget=1024), RandomFeatureRidge(n_components=4, memory_budget=1 << 14)):
        with pytest.raises(ValueError, match="NaN or infinity"):
            est.fit(str(tmp_path / "X.npy"), np.zeros(50))


# -- mercer.sources -------------------------------------------------------------------------------
def test_take_with_repeats_and_unsorted(stored, data):
    X = data[0]
    idx = [599, 3, 3, 250, 249, 0, 598, 3]
    for src in (sources.as_source(str(stored / "X.npy")), sources.read_parquet(stored / "pq", target="y")[0]):
        np.testing.assert_array_equal(src.take(idx), X[idx])
        assert src.take([]).shape == (0, D)
        with pytest.raises(IndexError):
            src.take([N])


def test_iter_blocks_across_file_boundaries(stored, data):
    X = data[0]
    src, y = sources.read_parquet(stored / "pq", target="y")
    np.testing.assert_allclose(y, data[1])
    assert list(src.feature_names) == [f"x{j}" for j in range(D)] and src.n_samples == N
    for rows in (1, 64, 249, 250, 251, 599, 1000):
        slices = [slice(s, min(s + rows, N)) for s in range(0, N, rows)]
        got = list(src.iter_blocks(slices))
        assert [r for r, _ in got] == slices
        np.testing.assert_array_equal(np.concatenate([b for _, b in got]), X)
    np.testing.assert_array_equal(src.read(240, 260), X[240:260])  # a read spanning the two files


def test_read_parquet_targets_globs_and_missing_files(stored, tmp_path, data):
    X, y, _ = data
    Xg, yg = sources.read_parquet(str(stored / "pq" / "part-*.parquet"), target="y")
    np.testing.assert_array_equal(Xg.to_numpy(), X)
    np.testing.assert_array_equal(yg, y)
    Xc, y2 = sources.read_parquet(stored / "pq", target=["y", "x0"])
    assert Xc.n_features == D - 1 and y2.shape == (N, 2)
    assert sources.read_parquet(stored / "pq")[1] is None
    labels = pd.DataFrame({"a": [1.0, 2.0], "cls": ["p", "q"]})
    labels.to_parquet(tmp_path / "labels.parquet")
    assert list(sources.read_parquet(tmp_path / "labels.parquet", target="cls")[1]) == ["p", "q"]
    with pytest.raises(FileNotFoundError, match="no Parquet files match"):
        sources.read_parquet(str(tmp_path / "nothing-*.parquet"))
    with pytest.raises(FileNotFoundError, match="not found"):
        sources.ParquetSource(tmp_path / "missing.parquet")
    with pytest.raises(ValueError, match="column 'z'.* is not in"):
        sources.read_parquet(stored / "pq", target="z")


# -- the CLI --------------------------------------------------------------------------------------
def test_cli_fit_streams_a_parquet_glob(stored, data, tmp_path, capsys):
    X, y, _ = data
    out = tmp_path / "m.mercer"
    code = main(["fit", "--data", str(stored / "pq" / "*.parquet"), "--target", "y", "--model", "nystroem-ridge",
                 "--kernel", "rbf:gamma=0.1", "--alpha", "0.1", "--centers", "30", "--dtype", "float64",
                 "--out", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "data streamed from disk block by block" in text and "held-out score: skipped" in text
    model = load(out)
    ref = NystroemKernelRidge(alpha=0.1, n_centers=30, gamma=0.1, random_state=0, dtype="float64").fit(_frame(X), y)
    np.testing.assert_allclose(model.predict(_frame(X)), ref.predict(_frame(X)), atol=1e-8)
    # the same folder with a model that does not stream: read into memory, preprocessed
    code = main(["fit", "--data", str(stored / "pq"), "--target", "y", "--model", "ridge", "--holdout", "0",
                 "--out", str(tmp_path / "r.mercer")])
    text, err = capsys.readouterr()
    assert code == 0, err and "standardised" in text


def test_cli_streamed_table_must_be_numeric(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "t": ["u", "v", "w"], "y": [0.0, 1.0, 2.0]}).to_parquet(
        tmp_path / "d" / "p.parquet")
    argv = ["fit", "--data", str(tmp_path / "d"), "--target", "y", "--model", "nystroem-ridge", "--out",
            str(tmp_path / "m")]
    assert main(argv) == 2
    assert "feature columns must be numeric when the data are streamed" in capsys.readouterr().err
    assert main(argv + ["--drop", "t", "--centers", "2"]) == 0, capsys.readouterr().err


# -- peak memory ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_peak_memory_of_a_streamed_fit_stays_far_below_the_data(tmp_path):
    """NystroemKernelRidge on a ~1 GB .npy with a 64 MiB budget: the resident set grows by a small
    fraction of the file (measured in a fresh process with getrusage)."""
    n, d = 4_200_000, 32  # 4.2e6 x 32 float64 = 1.07 GB
    path = tmp_path / "big.npy"
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, d))
    rng = np.random.default_rng(0)
    for s in range(0, n, 500_000):
        arr[s:s + 500_000] = rng.standard_normal((min(500_000, n - s), d))
    arr.flush()
    del arr
    script = textwrap.dedent(f"""
        import resource, numpy as np, torch
        from mercer.models import NystroemKernelRidge
        torch.set_num_threads(1)
        y = np.zeros({n}); y[::3] = 1.0
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        NystroemKernelRidge(alpha=1.0, n_centers=200, gamma=0.05, solver="cg", max_iter=3, random_state=0,
                            memory_budget=64 << 20).fit({str(path)!r}, y)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    growth = int(res.stdout.split()[-1])
    size = os.path.getsize(path)
    assert growth < size / 5, f"RSS grew by {growth / 2**20:.0f} MiB for a {size / 2**20:.0f} MiB file"
