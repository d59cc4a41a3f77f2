"""KMeans on sparse sources streams (issue 29): a scipy ``.npz``, Parquet in the sparse layout or a Dask
array of CSR chunks is read block by block as sparse rows (never whole, never densified), and the fit
is scikit-learn's sparse k-means from the same initial centres and mercer's in-memory CSR fit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.cluster import KMeans as SKKMeans

from mercer import sources
from mercer.linalg import MemoryBudgetError, observe_blocks
from mercer.models import KMeans

from conftest import CountingSource, text_like_rows, write_parquet_parts

N, D = 600, 3000
BUDGET = 1 << 20  # 1 MiB: the (k, 3000) dense centres and blocks of ~70 rows (a counting source shows it)
SMALL_BUDGET = 3 << 17  # 384 KiB: below the CSR's own size (~0.42 MiB)


@pytest.fixture(scope="module")
def data():
    X, labels = text_like_rows(N, D, density=0.02, spacing=13)
    return X, labels


@pytest.fixture(scope="module")
def stored(data, tmp_path_factory):
    X = data[0]
    root = tmp_path_factory.mktemp("kmeans_sparse")
    sp.save_npz(root / "X.npz", X, compressed=False)
    write_parquet_parts(root, lambda path, rows, size: sources.write_sparse_parquet(path, X[rows],
                                                                                    row_group_size=size), 250)
    return root


def _csr_bytes(X) -> int:
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


def _same_fit(got, ref, rel=1e-10):
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    assert got.inertia_ == pytest.approx(ref.inertia_, rel=rel)
    np.testing.assert_allclose(got.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-12)


@pytest.mark.parametrize("init", ["k-means++", "random"])
@pytest.mark.parametrize("weighted", [False, True])
def test_streams_blocks_and_equals_the_in_memory_fit(data, stored, init, weighted):
    """Read in blocks (every read is a fraction of the rows), many passes: the same seeds, labels,
    centres and inertia as the in-memory CSR fit."""
    X = data[0]
    w = np.random.default_rng(1).uniform(0.5, 2.0, N) if weighted else None
    src = CountingSource(sources.SparseSource(stored / "X.npz"))
    kw = dict(n_clusters=4, init=init, n_init=2, random_state=0, memory_budget=BUDGET)
    got = KMeans(**kw).fit(src, sample_weight=w)
    ref = KMeans(**kw).fit(X, sample_weight=w)
    assert src.reads and max(src.reads) <= N // 4 and sum(src.reads) > 4 * N  # many blocks, many passes
    _same_fit(got, ref)
    assert got.n_iter_ == ref.n_iter_ and got.n_features_in_ == D
    assert isinstance(got.cluster_centers_, np.ndarray) and got.cluster_centers_.shape == (4, D)
    np.testing.assert_array_equal(got.predict(X), ref.predict(X))


def test_fits_a_budget_below_the_csrs_size(data, stored):
    """The file is never read whole: a budget below the CSR's own size fits it (in blocks of a few
    rows), with the model of the CSR in memory."""
    X = data[0]
    assert _csr_bytes(X) > SMALL_BUDGET
    src = CountingSource(sources.SparseSource(stored / "X.npz"))
    kw = dict(n_clusters=3, init="random", n_init=1, max_iter=3, random_state=0, memory_budget=SMALL_BUDGET)
    _same_fit(KMeans(**kw).fit(src), KMeans(**kw).fit(X))
    assert max(src.reads) <= N // 10


def test_equals_scikit_learns_sparse_kmeans_from_the_same_centres(data, stored):
    """scikit-learn's KMeans on the CSR in memory, from the centres mercer's k-means++ drew: the same
    labels and inertia (1e-10 relative), and the same centres."""
    X = data[0]
    seeds = KMeans(5, random_state=3, max_iter=1, memory_budget=BUDGET).fit(str(stored / "X.npz"))
    C0 = seeds._init_centroids(X, np.asarray(X.multiply(X).sum(1)).ravel(), "k-means++",
                               np.random.RandomState(3), np.ones(N))
    ref = SKKMeans(5, init=C0, n_init=1, tol=1e-8, algorithm="lloyd").fit(X)
    got = KMeans(5, init=C0, tol=1e-8, memory_budget=BUDGET).fit(str(stored / "X.npz"))
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    assert got.inertia_ == pytest.approx(ref.inertia_, rel=1e-10)
    np.testing.assert_allclose(got.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-10)
    assert got.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("kind", ["parquet", "dask"])
def test_other_sparse_sources(kind, data, stored):
    X = data[0]
    if kind == "parquet":
        src = sources.read_parquet(stored / "pq")[0]
        assert src.sparse
    else:
        da = pytest.importorskip("dask.array")
        src = da.from_array(X, chunks=(137, -1), asarray=False)
    kw = dict(n_clusters=3, random_state=0, memory_budget=BUDGET)
    _same_fit(KMeans(**kw).fit(src), KMeans(**kw).fit(X))


@pytest.mark.slow  # the LocalCluster's start-up: ~10 s here
@pytest.mark.usefixtures("dask_in_force")
def test_dask_csr_chunks_with_the_cluster_in_force(data):
    """With a LocalCluster's client in force the workers compute the CSR partitions; the fit is the
    in-memory one."""
    da = pytest.importorskip("dask.array")
    X = data[0]
    kw = dict(n_clusters=3, init="random", n_init=2, random_state=0, memory_budget=BUDGET)
    _same_fit(KMeans(**kw).fit(da.from_array(X, chunks=(150, -1), asarray=False)), KMeans(**kw).fit(X))


def test_empty_cluster_is_reseeded_as_in_memory(data, stored):
    """A centre that wins no point takes the point farthest from its centre, as the in-memory fit does."""
    X = data[0]
    far = X[:4].toarray()
    far[3] = 0.0
    far[3, -1] = 1e3  # no row is nearest to it
    w = np.random.default_rng(2).uniform(0.5, 2.0, N)
    kw = dict(n_clusters=4, init=far, max_iter=5, memory_budget=BUDGET)
    got = KMeans(**kw).fit(str(stored / "X.npz"), sample_weight=w)
    ref = KMeans(**kw).fit(X, sample_weight=w)
    _same_fit(got, ref)
    assert len(np.unique(got.labels_)) == 4


def test_verbose_progress_and_ctrl_c(data, stored, capsys):
    """scikit-learn's verbose lines as in memory; the passes are planned loops (progress) that stop on
    an interrupt, leaving the estimator unfitted."""
    X = data[0]
    KMeans(3, random_state=0, verbose=1, memory_budget=BUDGET).fit(X)
    mem = capsys.readouterr().out
    KMeans(3, random_state=0, verbose=1, memory_budget=BUDGET).fit(str(stored / "X.npz"))
    streamed = capsys.readouterr().out
    lines = [ln.split(",")[0] for ln in mem.splitlines()]
    assert [ln.split(",")[0] for ln in streamed.splitlines()] == lines and "Initialization complete" in lines

    seen = []

    def observer(desc, done, total):
        seen.append(desc)
        if desc and desc.startswith("Lloyd") and done > 1:
            raise KeyboardInterrupt

    est = KMeans(3, random_state=0, memory_budget=BUDGET)
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(str(stored / "X.npz"))
    assert {"k-means: moments", "k-means++"} <= set(seen)
    assert not hasattr(est, "cluster_centers_")


def test_dense_centres_beyond_the_budget_are_refused(stored):
    dense = r"k-means on sparse rows keeps its 50 centres dense \(50 x 3000.*2.29 MiB.*1.00 MiB.*fewer clusters"
    with pytest.raises(MemoryBudgetError, match=dense):
        KMeans(50, memory_budget=1 << 20).fit(str(stored / "X.npz"))
