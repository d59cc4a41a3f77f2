"""Kernel rows for the SVM solvers: the compiled rows of sparse data (``_sparse_rows``) against the
kernel classes, and the SMO's row fetches when its cache cannot hold every row."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mercer import KernelSVC
from mercer._sparse import as_sparse_rows
from mercer.kernels import RBF, Cosine, Laplacian, Linear, Polynomial, Sigmoid
from mercer.models.svm import _smo
from mercer.models.svm._sparse_rows import SparseKernelRows, supports

KERNELS = [Linear(), Polynomial(degree=3, gamma=0.5, coef0=1.0), Polynomial(degree=2, gamma=None, coef0=0.0),
           Sigmoid(gamma=0.3, coef0=-0.2), Cosine(), RBF(gamma=0.7), RBF(gamma=None)]


def _csr(n=240, d=400, seed=0, dtype=np.float64) -> sp.csr_matrix:
    """Text-like rows (3% stored, a few columns in most rows), one all-zero row."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.03, format="lil", random_state=rng.integers(1 << 31), dtype=dtype)
    X[:, :3] = rng.uniform(0.1, 1.0, size=(n, 3)) * (rng.random((n, 3)) < 0.7)
    X[7, :] = 0
    return sp.csr_matrix(X, dtype=dtype)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: repr(k))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rows_equal_the_kernel_classes(kernel, dtype):
    X = as_sparse_rows(_csr(dtype=dtype))
    idx = np.array([0, 7, 19, 239, 19])  # a zero row, a repeat
    got = SparseKernelRows(kernel, X)(idx)
    ref = kernel(X[torch.as_tensor(idx)], X).numpy()
    assert got.dtype == ref.dtype == dtype and got.shape == (5, X.shape[0])
    tol = 1e-13 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    if isinstance(kernel, RBF):  # the zero row's entries: exp(-gamma |x_t|^2)
        g = kernel.gamma or 1.0 / X.shape[1]
        np.testing.assert_allclose(got[1], np.exp(-g * X.row_sq_norms().numpy()), rtol=tol)
    if isinstance(kernel, Cosine):  # a zero row is similar to nothing (scikit-learn's cosine_similarity)
        assert not got[1].any() and not got[:, 7].any()

def test_what_is_not_supported_takes_the_kernel_classes():
    X = as_sparse_rows(_csr())
    assert supports(RBF(gamma=0.5), X) and supports(Cosine(), X)
    assert not supports(RBF(gamma=[0.5] * 400), X)  # ARD
    assert not supports(Polynomial(degree=1.5), X)  # a non-integer power checks its bases
    assert not supports(Laplacian(), X)
    assert not supports(RBF(), torch.zeros(3, 4))  # dense rows
    with pytest.raises(ValueError, match="not supported"):
        SparseKernelRows(Laplacian(), X)


@pytest.mark.parametrize("kernel", ["rbf", "linear", "cosine", "poly"])
def test_svc_on_sparse_rows_equals_the_dense_fit_at_any_cache(kernel):
    """The compiled rows serve KernelSVC's sparse fit; a cache of a tenth of the rows (full, evicting)
    gives the model of the default cache, and both that of the dense fit (LIBSVM's iterates)."""
    X = _csr(400, 300, seed=3)
    y = np.asarray(X[:, :3].sum(1)).ravel() + 0.3 * np.asarray(X[:, 3:60].sum(1)).ravel()
    y = np.digitize(y, np.quantile(y, [0.33, 0.66]))  # 3 classes: one-vs-one machines of ~270 rows
    kw = dict(kernel=kernel, C=10.0, gamma=2.0, degree=2)
    full = KernelSVC(**kw).fit(X, y)
    small = KernelSVC(cache_size=0.1, **kw).fit(X, y)  # ~100 rows of 270
    dense = KernelSVC(**kw).fit(X.toarray(), y)
    # (the gradient's reconstruction after shrinking reads cached float32 rows where they are cached,
    # float64 products elsewhere; dense products round apart from sparse ones)
    for other in (small, dense):
        np.testing.assert_array_equal(other.support_, full.support_)
        np.testing.assert_allclose(other.dual_coef_, full.dual_coef_, rtol=0, atol=1e-6 * kw["C"])
        np.testing.assert_allclose(other.intercept_, full.intercept_, rtol=0, atol=1e-6)


def test_a_full_cache_fetches_the_missing_row_alone():
    """While the cache has free slots a miss brings the top violators' rows along; once it is full
    each fetched row evicts one, and the prefetches evicted each other (68 rows computed an
    iteration on one-hot data): then only the missing row is fetched. The iterates do not depend on
    the cache."""
    rng = np.random.default_rng(0)
    n = 1500
    X = rng.normal(size=(n, 6))
    y = np.where(X[:, 0] + 0.8 * rng.normal(size=n) > 0, 1.0, -1.0)
    K = np.exp(-0.5 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    fetched = []

    def rows(idx):
        fetched.append(len(idx))
        return K[idx]

    kw = dict(matvec=lambda r, c, v: K[np.ix_(r, c)] @ v, cache_dtype=np.float64, batch=64)
    full = _smo.solve_smo(rows, np.ones(n), y, np.full(n, 1.0), cache_rows=n, **kw)
    fetched.clear()
    small = _smo.solve_smo(rows, np.ones(n), y, np.full(n, 1.0), cache_rows=n // 10, **kw)
    assert small.n_iter == full.n_iter
    np.testing.assert_array_equal(small.alpha, full.alpha)
    assert small.rows_computed == sum(fetched) <= 3 * small.n_iter
    assert max(fetched) > 1  # prefetched while the cache filled


@pytest.mark.parametrize("kernel", [RBF(gamma=0.7), Cosine()], ids=repr)
def test_gradient_products_of_sparse_rows_equal_the_dense_ones(kernel):
    """``_Rows.matvec`` (the gradient's reconstruction: K[r][:, c] v) on sparse rows goes through the
    compiled rows, a batch of rows of ``c`` at a time; equal to the dense product."""
    from mercer.models.svm._dual import MAX_BATCH, _Rows

    X = as_sparse_rows(_csr(300, 200, seed=5))
    rows = _Rows(kernel, X, 1 << 30)
    assert rows.sparse_rows is not None
    rng = np.random.default_rng(1)
    r, c = rng.choice(300, 40, replace=False), rng.choice(300, MAX_BATCH + 37, replace=False)  # two batches
    v = rng.normal(size=len(c))
    K = kernel(X, X).numpy()
    np.testing.assert_allclose(rows.matvec(r, c, v), K[np.ix_(r, c)] @ v, rtol=1e-12, atol=1e-12)
