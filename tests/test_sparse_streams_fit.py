"""Every estimator whose fit streams (``_streams_fit``) reads a sparse source block by block (issue 29):
never more rows at once than its plan holds (the budget, below the rows' size; the Nystroem ridges'
tiles: at least ``MIN_WORK_BYTES``), never its rows made dense (scipy's ``toarray`` and the sparse rows'
``to_dense`` are allowed a few rows only: seeds, centres), and the model predicts as the in-memory
CSR fit's. The estimators that read their data into memory get the CSR, not a dense matrix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from mercer import sources
from mercer._sparse import SparseRows
from mercer.linalg import MIN_WORK_BYTES
from mercer.models import (ApproximateKernelPCA, KernelKMeans, KernelKNeighborsClassifier, KMeans,
                           NystroemKernelRidge, NystroemKernelRidgeClassifier, RandomFeatureRidge)
from mercer.models._registry import ESTIMATORS
from mercer.models.ridge import NystroemKernelRidgeClassifierCV, NystroemKernelRidgeCV

from conftest import CountingSource, text_like_rows

N, D = 2000, 2000
BUDGET = 1 << 19  # 512 KiB: below the rows' own size (~0.65 MiB as CSR); the (d, m) / (k, d) dense arrays fit
FEW = 64  # rows that may be made dense at once (seeds, centres)

STREAMING = {
    "KMeans": lambda: KMeans(3, random_state=0, memory_budget=BUDGET),
    "KernelKMeans": lambda: KernelKMeans(3, approximation="nystroem", n_components=20, gamma=0.2, random_state=0,
                                         memory_budget=BUDGET),
    "NystroemKernelRidge": lambda: NystroemKernelRidge(n_centers=30, gamma=0.2, random_state=0, memory_budget=BUDGET),
    "NystroemKernelRidgeClassifier": lambda: NystroemKernelRidgeClassifier(n_centers=30, gamma=0.2, random_state=0,
                                                                           memory_budget=BUDGET),
    "NystroemKernelRidgeCV": lambda: NystroemKernelRidgeCV(n_centers=20, gamma=0.5, max_iter=2, random_state=0,
                                                           memory_budget=BUDGET),
    "NystroemKernelRidgeClassifierCV": lambda: NystroemKernelRidgeClassifierCV(n_centers=20, gamma=0.5, max_iter=2,
                                                                               random_state=0, memory_budget=BUDGET),
    "RandomFeatureRidge": lambda: RandomFeatureRidge(n_components=10, gamma=0.2, random_state=0, memory_budget=BUDGET),
    "ApproximateKernelPCA": lambda: ApproximateKernelPCA(n_components=3, n_features=30, gamma=0.2, random_state=0,
                                                         memory_budget=BUDGET),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X, labels = text_like_rows(N, D, density=0.01, spacing=11)
    y = np.asarray(X[:, :40].sum(1)).ravel()
    path = tmp_path_factory.mktemp("streams_fit") / "X.npz"
    sp.save_npz(path, X, compressed=False)
    return X, y, labels, path


@pytest.fixture
def no_dense_rows(monkeypatch):
    """Making more than :data:`FEW` sparse rows dense fails the test."""
    for cls in (sp.csr_matrix, sp.csr_array):
        real = cls.toarray

        def toarray(self, *a, _real=real, **kw):
            assert min(self.shape) <= FEW, f"densified {self.shape}"
            return _real(self, *a, **kw)

        monkeypatch.setattr(cls, "toarray", toarray)
    real_dense = SparseRows.to_dense

    def to_dense(self):
        assert min(self.shape) <= FEW, f"densified {tuple(self.shape)}"
        return real_dense(self)

    monkeypatch.setattr(SparseRows, "to_dense", to_dense)


def test_the_list_covers_every_streaming_estimator():
    """A registered estimator that streams its fit (in some configuration) is in STREAMING."""
    streaming = set()
    for e in ESTIMATORS:
        cls = e.load()
        flag = cls.__dict__.get("_streams_fit", getattr(cls, "_streams_fit", False))
        if flag is True or isinstance(flag, property):
            streaming.add(e.name)
    assert streaming == set(STREAMING)


#: ~10-16 s each here (many small blocks under the small budget): with -m slow
SLOW = ("NystroemKernelRidgeCV", "NystroemKernelRidgeClassifierCV", "RandomFeatureRidge", "ApproximateKernelPCA")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in STREAMING])
def test_streams_a_sparse_source_in_blocks_without_dense_rows(name, data, no_dense_rows):
    X, y, labels, path = data
    est, ref = STREAMING[name](), STREAMING[name]()
    assert est._streams_fit is True
    target = labels if "Classifier" in name else None if name in ("KMeans", "KernelKMeans", "ApproximateKernelPCA") \
        else y
    src = CountingSource(sources.SparseSource(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CV estimators' two iterations stop before convergence, alike
        est.fit(src, target)
        ref.fit(X, target)
    # the Nystroem ridges' kernel tiles take at least MIN_WORK_BYTES (16 MiB, nystroem_plan), whatever the budget
    bound = max(BUDGET, MIN_WORK_BYTES) if name.startswith("Nystroem") else BUDGET
    assert src.bytes_per_row * N > BUDGET
    assert src.reads and max(src.reads) * src.bytes_per_row <= bound, f"{name} read {max(src.reads)} rows at once"
    method = "transform" if name == "ApproximateKernelPCA" else "predict"
    np.testing.assert_allclose(getattr(est, method)(X[:200]), getattr(ref, method)(X[:200]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: KernelKMeans(3, gamma=0.2, random_state=0),
                                  lambda: KernelKNeighborsClassifier(n_neighbors=3)],
                         ids=["KernelKMeans-exact", "KernelKNeighborsClassifier"])
def test_in_memory_fits_read_a_sparse_source_as_csr(make, data, no_dense_rows):
    """Estimators that need their data in memory read the source as CSR (the rows stay sparse)."""
    X, _, labels, path = data
    est, ref = make(), make()
    assert est._streams_fit is False
    sub = X[:600]
    sp.save_npz(path.parent / "sub.npz", sub, compressed=False)
    y = labels[:600] if hasattr(est, "predict_proba") else None
    est.fit(str(path.parent / "sub.npz"), y)
    ref.fit(sub, y)
    np.testing.assert_array_equal(est.predict(sub[:100]), ref.predict(sub[:100]))
