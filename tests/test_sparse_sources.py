"""Sparse rows streamed from disk (issue 29): scipy ``.npz`` files, Parquet in the sparse layout and
Dask arrays of CSR chunks are read block by block as CSR, never densified, and every estimator that
streams its fit gives the model of the same data in memory as CSR (tiny budgets: many blocks)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from mercer import approx, sources
from mercer._sparse import SparseRows
from mercer.linalg import KernelOperator, MemoryBudgetError, engine_for, source_rows, tensor_blocks
from mercer.models import (ApproximateKernelPCA, KernelKMeans, KernelSVC, KMeans, NystroemKernelRidge,
                           NystroemKernelRidgeClassifier, RandomFeatureRidge)

from conftest import assert_fit_matches, text_like_rows, write_parquet_parts
from contracts import OperatorContract

BUDGET = 1 << 18  # 256 KiB: several blocks per pass
WIDE_BUDGET = 1 << 22  # for the estimators that hold (k, d) or (d, m) dense arrays (centres, frequencies)
N, D = 500, 2000


@pytest.fixture(scope="module")
def data():
    """Text-like rows: 2.5% dense, three classes told apart by a few columns; a smooth target."""
    X, labels = text_like_rows(N, D, density=0.025, spacing=11)
    y = np.asarray(X[:, :40].sum(1)).ravel() + np.sin(3 * X[:, 11].toarray().ravel())
    return X, y, labels


@pytest.fixture(scope="module")
def stored(data, tmp_path_factory):
    """The same X as a compressed and an uncompressed .npz, and two Parquet files in the sparse layout."""
    X, y, _ = data
    root = tmp_path_factory.mktemp("sparse_sources")
    sp.save_npz(root / "X.npz", X)
    sp.save_npz(root / "X_stored.npz", X, compressed=False)
    write_parquet_parts(root, lambda path, rows, size: sources.write_sparse_parquet(path, X[rows], y[rows],
                                                                                    row_group_size=size), 230)
    return root


KINDS = ["npz", "npz_stored", "parquet", "dask"]


def _source(kind, stored, X):
    if kind == "npz":
        return str(stored / "X.npz")
    if kind == "npz_stored":
        return sources.SparseSource(stored / "X_stored.npz")
    if kind == "parquet":
        return sources.read_parquet(stored / "pq", target="y")[0]
    da = pytest.importorskip("dask.array")
    return da.from_array(X, chunks=(137, -1), asarray=False)


def _check(kind, stored, data, est, method="predict", y=None, atol=1e-8, **fit_kw):
    """Fit on the source and on the CSR in memory: the same outputs, applied to the source and to the CSR."""
    X = data[0]
    ref, got = assert_fit_matches(est, _source(kind, stored, X), X, y=y, method=method, apply_to=[X], atol=atol,
                                  **fit_kw)
    assert got.n_features_in_ == D
    return ref, got


# -- the sources themselves -------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_blocks_are_the_rows_as_csr(kind, stored, data):
    X = data[0]
    src = sources.as_source(_source(kind, stored, X))
    assert src.sparse and src.shape == X.shape and src.dtype == np.float64 and src.feature_names is None
    assert src.nnz >= X.nnz and src.bytes_per_row < D  # sized from the entries, not from d
    blocks = list(src.iter_blocks([slice(0, 100), slice(100, 333), slice(333, N)]))
    assert all(sp.isspmatrix_csr(b) and b.has_canonical_format for _, b in blocks)
    assert (sp.vstack([b for _, b in blocks]) != X).nnz == 0
    assert (src.read(227, 236) != X[227:236]).nnz == 0  # across the Parquet files
    idx = [499, 3, 3, 250, 0, 229, 230]
    assert (src.take(idx) != X[idx]).nnz == 0
    assert src.take([]).shape == (0, D) and src.read(5, 5).shape == (0, D)
    with pytest.raises(IndexError):
        src.take([N])
    f32 = src.astype(np.float32)
    assert f32.read(0, 10).dtype == np.float32 and src.read(0, 10).dtype == np.float64


def test_tensor_blocks_are_sparse_rows(stored, data):
    X = data[0]
    src = sources.SparseSource(stored / "X.npz")
    seen = []
    for r, Xb in tensor_blocks(src, 64, dtype=torch.float32, device="cpu"):
        assert isinstance(Xb, SparseRows) and Xb.dtype == torch.float32
        seen.append(Xb.to_scipy())
    assert len(seen) == -(-N // 64)
    np.testing.assert_allclose(sp.vstack(seen).toarray(), X.toarray(), rtol=1e-7)
    Z = source_rows(src, torch.tensor([7, 1]), dtype=torch.float64, device="cpu")
    assert isinstance(Z, SparseRows) and (Z.to_scipy() != X[[7, 1]]).nnz == 0


def test_in_memory_matrix_source_never_writes_to_it(data):
    X = data[0]
    Xu = sp.csr_matrix((X.data[::-1].copy(), X.indices[::-1].copy(), X.indptr.copy()), shape=X.shape)  # unsorted
    saved = (Xu.data.copy(), Xu.indices.copy())
    src = sources.as_source(Xu)
    block = src.read(0, N)
    assert block.has_canonical_format and (block != Xu).nnz == 0
    assert np.array_equal(Xu.data, saved[0]) and np.array_equal(Xu.indices, saved[1])


def test_sparse_files_bad_input(tmp_path, data):
    X = data[0]
    sp.save_npz(tmp_path / "csc.npz", X.tocsc())
    with pytest.raises(ValueError, match="CSC matrix.*save X.tocsr"):
        sources.SparseSource(tmp_path / "csc.npz")
    np.savez(tmp_path / "dense.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a sparse matrix written by scipy.sparse.save_npz"):
        sources.as_source(str(tmp_path / "dense.npz"))
    with pytest.raises(FileNotFoundError):
        sources.SparseSource(tmp_path / "missing.npz")
    bad = X[:20].copy()
    bad.data[5] = np.nan
    sp.save_npz(tmp_path / "nan.npz", bad)
    with pytest.raises(ValueError, match=r"NaN or infinity \(streamed rows"):
        NystroemKernelRidge(n_centers=5).fit(str(tmp_path / "nan.npz"), np.zeros(20))


def test_parquet_sparse_layout_errors(tmp_path, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    X, y, _ = data
    table = pa.table({"indices": pa.array([[0, 3], [], [2]]), "values": pa.array([[1.0, 2.0], [], [4.0]]),
                      "y": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "no_meta.parquet")
    with pytest.raises(ValueError, match="no n_features: pass n_features"):
        sources.read_parquet(tmp_path / "no_meta.parquet", target="y")
    Xs, yy = sources.read_parquet(tmp_path / "no_meta.parquet", target="y", n_features=5)
    np.testing.assert_array_equal(Xs.to_numpy().toarray(), [[1, 0, 0, 2, 0], [0] * 5, [0, 0, 4, 0, 0]])
    with pytest.raises(ValueError, match=r"column indices out of range \[0, 3\)"):
        sources.read_parquet(tmp_path / "no_meta.parquet", target="y", n_features=3)[0].to_numpy()
    pq.write_table(pa.table({"indices": pa.array([[0, 1]]), "values": pa.array([[1.0]])}), tmp_path / "ragged.parquet")
    with pytest.raises(ValueError, match="row 0 .* has 2 indices and 1 values"):
        sources.ParquetSource(tmp_path / "ragged.parquet", n_features=4).to_numpy()
    pq.write_table(pa.table({"indices": pa.array([[0], None]), "values": pa.array([[1.0], None])}),
                   tmp_path / "null.parquet")
    with pytest.raises(ValueError, match="null row"):
        sources.ParquetSource(tmp_path / "null.parquet", n_features=4).to_numpy()
    with pytest.raises(ValueError, match="n_features is for the sparse layout"):
        pd.DataFrame({"a": [1.0], "b": [2.0]}).to_parquet(tmp_path / "dense.parquet")
        sources.ParquetSource(tmp_path / "dense.parquet", n_features=4)
    with pytest.raises(TypeError, match="must be a scipy sparse matrix"):
        sources.write_sparse_parquet(tmp_path / "x.parquet", X.toarray())
    # unsorted indices and duplicates in a row: summed, as scipy does
    pq.write_table(pa.table({"indices": pa.array([[3, 0, 3]]), "values": pa.array([[1.0, 2.0, 0.5]])}),
                   tmp_path / "dups.parquet")
    np.testing.assert_array_equal(sources.ParquetSource(tmp_path / "dups.parquet", n_features=4).to_numpy().toarray(),
                                  [[2.0, 0, 0, 1.5]])


def test_float32_parquet_values_give_float32_blocks(tmp_path, data):
    X, y, _ = data
    sources.write_sparse_parquet(tmp_path / "f32.parquet", X.astype(np.float32), y)
    Xs, _ = sources.read_parquet(tmp_path / "f32.parquet", target="y")
    assert Xs.dtype == np.float32 and Xs.read(0, 3).dtype == np.float32


# -- the streamed operator on sparse blocks -----------------------------------------------------
class TestSparseSourceOperator(OperatorContract):
    """Sparse rows read from a source block by block (tiny budget: many blocks, several reads)."""

    @staticmethod
    def make(kernel, X, Z):
        from mercer._sparse import as_sparse_rows

        source = sources.SparseSource(sp.csr_matrix(np.asarray(X)))
        return engine_for(source).operator(kernel, source, as_sparse_rows(Z), memory_budget=1 << 14)


def test_streamed_operator_plans_from_the_non_zeros(stored, data):
    """d = 2000 but ~52 entries a row: the tiles hold many more rows than the dense width allows."""
    from mercer._sparse import as_sparse_rows
    from mercer.kernels import RBF

    X = data[0]
    Z = as_sparse_rows(X[:20])
    op = KernelOperator(RBF(gamma=0.5), sources.SparseSource(stored / "X.npz"), Z, memory_budget=1 << 18)
    dense_rows = KernelOperator(RBF(gamma=0.5), torch.as_tensor(X.toarray()), torch.as_tensor(X[:20].toarray()),
                                memory_budget=1 << 18).plan.row_block
    assert op.plan.row_block > 4 * dense_rows
    K = RBF(gamma=0.5)(X.toarray(), X[:20].toarray()).numpy()
    v = np.random.default_rng(0).normal(size=20)
    np.testing.assert_allclose(op.matvec(torch.as_tensor(v)).numpy(), K @ v, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(op.rows([9, 2]).numpy(), K[[9, 2]], rtol=1e-12, atol=1e-13)


# -- estimators that stream their fit: the model of the CSR in memory -------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("solver", ["direct", "cg"])
def test_nystroem_ridge(kind, solver, stored, data):
    X, y, _ = data
    est = NystroemKernelRidge(alpha=0.1, n_centers=40, gamma=0.2, solver=solver, tol=1e-12, random_state=0,
                              dtype="float64", memory_budget=BUDGET)
    ref, got = _check(kind, stored, data, est, y=y)
    assert isinstance(got.centers_, SparseRows) and (got.centers_.to_scipy() != ref.centers_.to_scipy()).nnz == 0
    assert got.n_iter_.tolist() == ref.n_iter_.tolist()


@pytest.mark.parametrize("kind", ["npz", "parquet"])
def test_nystroem_ridge_float32_weights_no_intercept(kind, stored, data):
    X, y, _ = data
    w = np.random.default_rng(1).uniform(0.2, 2.0, N)
    est = NystroemKernelRidge(alpha=0.5, n_centers=30, kernel="laplacian", gamma=0.1, fit_intercept=False,
                              random_state=1, memory_budget=BUDGET)
    _check(kind, stored, data, est, y=y, atol=1e-5, sample_weight=w)


@pytest.mark.parametrize("kind", ["npz_stored", "dask"])
def test_nystroem_ridge_classifier(kind, stored, data):
    X, _, labels = data
    est = NystroemKernelRidgeClassifier(alpha=0.1, n_centers=40, kernel="cosine", random_state=0, dtype="float64",
                                        memory_budget=BUDGET)
    ref, got = _check(kind, stored, data, est, method="decision_function", y=labels)
    assert (got.predict(X) == labels).mean() > 0.9


@pytest.mark.parametrize("kind", ["parquet"])
def test_random_feature_ridge(kind, stored, data):
    est = RandomFeatureRidge(alpha=0.1, n_components=40, gamma=0.2, random_state=0, memory_budget=WIDE_BUDGET)
    _check(kind, stored, data, est, y=data[1], atol=1e-6)


@pytest.mark.parametrize("kind", ["npz"])
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_approximate_kernel_pca(kind, approximation, stored, data):
    est = ApproximateKernelPCA(n_components=3, n_features=30, approximation=approximation, gamma=0.2,
                               random_state=0, memory_budget=BUDGET if approximation == "nystroem" else WIDE_BUDGET)
    ref, got = _check(kind, stored, data, est, method="transform", atol=1e-6)
    np.testing.assert_allclose(got.eigenvalues_, ref.eigenvalues_, rtol=1e-10)


@pytest.mark.parametrize("kind,init", [("npz", "k-means++"), ("parquet", "random")])
def test_kmeans(kind, init, stored, data):
    """A sparse source is streamed block by block as sparse rows and clustered as the CSR in memory
    (tests/test_kmeans_sparse_streamed.py: never read whole, scikit-learn's sparse k-means)."""
    est = KMeans(3, init=init, random_state=0, memory_budget=WIDE_BUDGET)
    ref, got = _check(kind, stored, data, est)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    assert sp.issparse(got.cluster_centers_) == sp.issparse(ref.cluster_centers_)
    assert got.inertia_ == pytest.approx(ref.inertia_, rel=1e-10) and got.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("kind", ["npz"])
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_kernel_kmeans_approximate(kind, approximation, stored, data):
    est = KernelKMeans(3, approximation=approximation, n_components=20, gamma=0.2, random_state=0,
                       memory_budget=WIDE_BUDGET)
    ref, got = _check(kind, stored, data, est)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    assert got.inertia_ == pytest.approx(ref.inertia_, rel=1e-10)


MAPS = [approx.RandomFourierFeatures(n_components=16, gamma=0.2, random_state=0),
        approx.RandomFourierFeatures(n_components=16, gamma="scale", random_state=0),
        approx.Nystroem(n_components=16, gamma=0.2, random_state=0, memory_budget=BUDGET),
        approx.LandmarkFeatures(n_components=16, gamma=0.2, random_state=0, memory_budget=BUDGET),
        approx.TensorSketch(n_components=16, gamma=0.2, random_state=0),
        approx.RandomMaclaurin(n_components=16, gamma=0.2, random_state=0),
        approx.IncompleteCholesky(n_components=8, gamma=0.2, random_state=0)]


@pytest.mark.parametrize("kind", ["npz", pytest.param("parquet", marks=pytest.mark.slow)])
@pytest.mark.parametrize("fmap", MAPS, ids=lambda m: type(m).__name__ + ("_scale" if getattr(m, "gamma", 0) == "scale"
                                                                           else ""))
def test_feature_maps(kind, fmap, stored, data):
    _check(kind, stored, data, fmap, method="transform", atol=1e-9)


def test_polynomial_feature_map_refuses_a_sparse_source(stored):
    with pytest.raises(TypeError, match="PolynomialFeatureMap cannot fit sparse X.*TensorSketch"):
        approx.PolynomialFeatureMap().fit(str(stored / "X.npz"))


def test_non_streaming_fit_reads_the_csr_into_memory(stored, data):
    X, _, labels = data
    lab = labels == 1
    ref = KernelSVC(kernel="linear", random_state=0).fit(X, lab)
    got = KernelSVC(kernel="linear", random_state=0).fit(str(stored / "X.npz"), lab)
    assert sp.issparse(got.support_vectors_)
    np.testing.assert_allclose(got.decision_function(str(stored / "X.npz")), ref.decision_function(X), atol=1e-8)
    # the budget counts the stored entries: the CSR (~0.3 MiB) fits 1 MiB where the dense X (7.6 MiB) would not
    KernelSVC(kernel="linear", memory_budget=1 << 20).fit(str(stored / "X.npz"), lab)
    with pytest.raises(MemoryBudgetError, match="NystroemKernelRidge.*RandomFeatureRidge"):
        KernelSVC(memory_budget=4096).fit(str(stored / "X.npz"), lab)


# -- the Dask engine on sparse chunks (dask_client, dask_in_force: conftest.py) ---------------
@pytest.mark.usefixtures("dask_in_force")
class TestDaskSparseOperator(OperatorContract):
    """The Dask engine's operator on partitions that are scipy CSR matrices, with sparse centres."""

    @staticmethod
    def make(kernel, X, Z):
        import dask.array as da

        from mercer._sparse import as_sparse_rows
        from mercer.linalg import _engines

        Xd = da.from_array(sp.csr_matrix(np.asarray(X)), chunks=(40, -1), asarray=False)
        engine = engine_for(Xd)
        assert engine is not _engines._ENGINES["local"]
        return engine.operator(kernel, Xd, as_sparse_rows(Z), memory_budget=1 << 20)


@pytest.mark.parametrize("solver,dtype,fit_intercept", [("direct", "float64", True), ("cg", "float64", False),
                                                        ("cg", "float32", True)])
def test_dask_engine_fits_nystroem_on_sparse_chunks(dask_client, data, solver, dtype, fit_intercept):
    """Run on the workers (their task stream shows the products) and equal to the in-memory CSR fit."""
    import dask.array as da
    from distributed import get_task_stream

    X, y, _ = data
    kw = dict(alpha=0.1, n_centers=40, gamma=0.2, solver=solver, tol=1e-12, random_state=0, dtype=dtype,
              fit_intercept=fit_intercept)
    ref = NystroemKernelRidge(**kw).fit(X, y)
    Xd = da.from_array(X, chunks=(120, -1), asarray=False)
    with dask_client.as_current(), get_task_stream(dask_client) as ts:
        got = NystroemKernelRidge(**kw).fit(Xd, da.from_array(y, chunks=120))
        pred = got.predict(Xd).compute()
    ran = {str(t["key"]).split("-")[0] for t in ts.data}
    assert {"_part_rmatvec", "_part_kt_k" if solver == "direct" else "_part_kt_k_v"} <= ran
    assert isinstance(got.centers_, SparseRows)
    tol = 1e-10 if dtype == "float64" else 1e-4
    np.testing.assert_allclose(pred, ref.predict(X), rtol=0, atol=tol * max(1.0, np.abs(y).max()))
    np.testing.assert_allclose(got.predict(X), ref.predict(X), rtol=0, atol=tol * max(1.0, np.abs(y).max()))


def test_twenty_thousand_by_a_million_within_a_budget_far_below_dense(tmp_path):
    """20,000 x 10^6 rows with 100 entries each (24 MiB as CSR, 149 GiB dense) streamed from a .npz
    under a 64 MiB budget: the blocks are planned from the entries, the model is that of the CSR in
    memory, and it learns the rows' topics (held-out R^2)."""
    n, d, k, topics, vocab = 20_000, 1_000_000, 100, 20, 200
    rng = np.random.default_rng(0)

    def rows(m):
        t = rng.integers(0, topics, m)
        cols = np.concatenate([np.sort(rng.integers(0, vocab - 79, (m, 80)), axis=1) + np.arange(80) + (t * vocab)[:, None],
                               np.sort(rng.integers(topics * vocab, d - 19, (m, 20)), axis=1) + np.arange(20)], axis=1)
        vals = rng.uniform(0.5, 1.5, (m, k))
        vals /= np.linalg.norm(vals, axis=1, keepdims=True)
        X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, m * k + 1, k)), shape=(m, d))
        return X, np.linspace(-2, 2, topics)[t] + 0.1 * rng.standard_normal(m)

    X, y = rows(n)
    Xt, yt = rows(2000)
    assert X.has_canonical_format and n * d * 8 > 2000 * (64 << 20)
    sp.save_npz(tmp_path / "X.npz", X, compressed=False)
    kw = dict(n_centers=200, alpha=1.0, gamma=1.0, solver="cg", tol=1e-8, random_state=0, dtype="float64",
              memory_budget=64 << 20)
    src = sources.as_source(str(tmp_path / "X.npz"))
    assert src.bytes_per_row == k * 16 + 8
    got = NystroemKernelRidge(**kw).fit(src, y)
    ref = NystroemKernelRidge(**kw).fit(X, y)
    pred = got.predict(Xt)
    np.testing.assert_allclose(pred, ref.predict(Xt), rtol=0, atol=1e-8)
    assert 1 - ((pred - yt) ** 2).sum() / ((yt - yt.mean()) ** 2).sum() > 0.5



@pytest.mark.usefixtures("dask_in_force")
def test_cv_estimators_learn_on_sparse_chunks_on_the_cluster(data):
    """NystroemKernelRidgeCV / ClassifierCV on a Dask array of CSR chunks, the cluster's client in force:
    the blocked statistics and their gradients read the workers' sparse partitions and learn the
    hyperparameters, alpha and model of the in-memory CSR fit."""
    import warnings

    import dask.array as da

    from mercer.models.ridge import NystroemKernelRidgeClassifierCV, NystroemKernelRidgeCV

    X, y, labels = data
    kw = dict(n_centers=20, gamma=0.5, max_iter=3, dtype="float64", solver="direct", random_state=0,
              memory_budget=BUDGET)
    Xd = da.from_array(X, chunks=(137, -1), asarray=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter=3 may stop before convergence, in both fits alike
        ref = NystroemKernelRidgeCV(**kw).fit(X, y)
        got = NystroemKernelRidgeCV(**kw).fit(Xd, da.from_array(y, chunks=137))
        ref_c = NystroemKernelRidgeClassifierCV(**kw).fit(X, labels)
        got_c = NystroemKernelRidgeClassifierCV(**kw).fit(Xd, da.from_array(labels, chunks=137))
    assert isinstance(got.centers_, SparseRows) and isinstance(got_c.centers_, SparseRows)
    assert not np.allclose(ref.theta_[0], np.log(0.5))  # something was learned
    np.testing.assert_allclose(got.theta_, ref.theta_, rtol=1e-10, atol=1e-12)
    assert abs(got.cv_error_ - ref.cv_error_) <= 1e-10 * abs(ref.cv_error_)
    np.testing.assert_allclose(got.predict(X), ref.predict(X), rtol=0, atol=1e-8 * np.abs(y).max())
    np.testing.assert_allclose(got_c.theta_, ref_c.theta_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(got_c.predict(X), ref_c.predict(X))
