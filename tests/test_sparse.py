"""Sparse rows (mercer._sparse.SparseRows): the representation, the kernels on sparse rows against
the dense computation on ``X.toarray()``, the block engine and the planner on non-zeros."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import mercer._sparse as sparse_mod
from mercer._sparse import SparseRows, as_sparse_rows, is_sparse, plan_features
from mercer.kernels import (RBF, AdditiveChi2, Chi2, Columns, Constant, Cosine, ExpSineSquared, FunctionKernel,
                            HistogramIntersection, Intersection, Laplacian, Linear, Matern, Polynomial,
                            Precomputed, RationalQuadratic, Sigmoid, White)
from mercer.linalg import KernelOperator, MemoryBudgetError, plan_blocks

from contracts import OperatorContract


def _rows(n, d, density, seed, *, nonneg=True):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng)
    if not nonneg:
        X.data -= 0.5
    return X


def _wide(n, d, per_row, seed):
    """``n`` rows of ``d`` columns with ``per_row`` random non-zeros each (scipy's ``sp.random``
    draws among ``n d`` positions: unusable at d = 10^7)."""
    rng = np.random.default_rng(seed)
    cols = np.sort(np.stack([rng.choice(d, per_row, replace=False) for _ in range(n)]), axis=1)
    return sp.csr_matrix((rng.uniform(0.1, 1.0, n * per_row), cols.ravel(), np.arange(0, n * per_row + 1, per_row)),
                         shape=(n, d))


@pytest.fixture(scope="module")
def pair():
    """Rows with an empty row, a duplicate row, rows sharing no column with the others, and a
    column used by one row only; a second block of other rows."""
    X = _rows(37, 250, 0.04, 0)
    lone = sp.csr_matrix(([0.7, 0.2], ([0, 0], [248, 249])), shape=(1, 250))
    empty = sp.csr_matrix((1, 250))
    X = sp.vstack([X[:10], empty, X[3:4], lone, X[10:]]).tocsr()
    X.data[X.indices >= 248] = 0.0  # an explicit zero stored in a row
    X[12, 248], X[12, 249] = 0.7, 0.2
    Y = sp.vstack([_rows(23, 250, 0.06, 1), empty]).tocsr()
    return X, Y


KERNELS = [Linear(), Polynomial(degree=3, gamma=0.7, coef0=0.5), Sigmoid(gamma=0.2, coef0=0.1), Cosine(),
           RBF(gamma=0.9), RBF(gamma=list(np.linspace(0.1, 2.0, 250))), Laplacian(gamma=0.3),
           Laplacian(gamma=list(np.linspace(0.1, 1.0, 250))), Matern(nu=0.5), Matern(nu=1.5),
           Matern(nu=2.5, length_scale=list(np.linspace(0.5, 2.0, 250))), RationalQuadratic(alpha=0.5),
           ExpSineSquared(), Chi2(gamma=0.4), AdditiveChi2(), HistogramIntersection(),
           2.0 * RBF(gamma=0.5) + Linear(), Cosine() * RBF(gamma=0.2) + 1.5, Constant(2.0),
           Columns(Laplacian(gamma=0.5), columns=[249, 3, 17, 248])]


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernels_on_sparse_rows_equal_dense(kernel, dtype, pair):
    X, Y = (M.astype(dtype) for M in pair)
    Xd, Yd = X.toarray(), Y.toarray()
    rtol, atol = (1e-12, 1e-12) if dtype == np.float64 else (2e-5, 2e-5)
    got, want = kernel(X, Y), kernel(Xd, Yd)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(kernel(X).numpy(), kernel(Xd).numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(kernel.diag(X).numpy(), kernel.diag(Xd).numpy(), rtol=rtol, atol=atol)
    # the block engine's tiles and the paired rows of two different inputs
    S = as_sparse_rows(X)
    tile = kernel.block(S, as_sparse_rows(Y), slice(5, 20), slice(3, 11))
    np.testing.assert_allclose(tile.numpy(), want.numpy()[5:20, 3:11], rtol=rtol, atol=atol)
    if kernel.sparse_rows and not isinstance(kernel, Constant):
        np.testing.assert_allclose(kernel._paired(S[:24], as_sparse_rows(Y)).numpy(),
                                   np.diag(want.numpy()[:24, :24]), rtol=rtol, atol=atol)


@pytest.mark.parametrize("kernel", [Linear(), RBF(gamma=0.3), Laplacian(gamma=0.2), Chi2(), HistogramIntersection(),
                                    Matern(nu=2.5)], ids=repr)
def test_mixed_sparse_and_dense_inputs(kernel, pair):
    X, Y = pair
    want = kernel(X.toarray(), Y.toarray()).numpy()
    np.testing.assert_allclose(kernel(X, torch.as_tensor(Y.toarray())).numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kernel(X.toarray(), Y).numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["l1", "sq", "min", "chi2"])
def test_torch_path_equals_compiled_merge(kind, pair):
    """The path other devices take (dense blocks on the union of the columns, by chunks) equals the
    compiled merge, checked here on the CPU."""
    A, B = as_sparse_rows(pair[0]), as_sparse_rows(pair[1])
    want = A.merge_block(B, kind)
    got = sparse_mod._union_dense_block(A, B, kind, torch.zeros_like(want))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    csr = (A.torch_csr() @ B.torch_csr().t()).to_dense()  # the other devices' products
    np.testing.assert_allclose(csr.numpy(), A.dot_block(B).numpy(), rtol=1e-12, atol=1e-12)


def test_intersection_on_sparse_sets():
    from mercer.kernels import encode_sets

    X, _ = encode_sets([{"a", "b"}, {"b", "c", "d"}, set(), {"d"}])
    np.testing.assert_array_equal(Intersection()(X).numpy(), Intersection()(X.toarray()).numpy())
    with pytest.raises(ValueError, match="0/1"):
        Intersection()(X * 2.0)


@pytest.mark.parametrize("kernel", [White(), FunctionKernel(lambda a, b: a @ b.T), Precomputed(),
                                    RBF() + White(), 2.0 * FunctionKernel(lambda a, b: a @ b.T)], ids=repr)
def test_kernels_without_sparse_formula_say_so(kernel, pair):
    X = pair[0]
    with pytest.raises(TypeError, match=r"cannot take sparse input.*Use a kernel that computes on sparse rows"):
        kernel(X)
    with pytest.raises(TypeError, match="cannot take sparse input"):
        kernel.block(as_sparse_rows(X), as_sparse_rows(X), slice(0, 3), slice(0, 3))


def test_histogram_kernels_refuse_negative_sparse_entries():
    X = _rows(10, 30, 0.2, 3, nonneg=False)
    for kernel in (Chi2(), AdditiveChi2(), HistogramIntersection()):
        with pytest.raises(ValueError, match="non-negative"):
            kernel(X)


# -- the representation --------------------------------------------------------------------------
def test_rows_slices_gathers_and_products(pair):
    X = pair[0]
    S, D = as_sparse_rows(X), torch.as_tensor(X.toarray())
    assert is_sparse(S) and S.shape == D.shape and S.nnz == X.nnz
    np.testing.assert_array_equal(S[4:9].to_dense().numpy(), D[4:9].numpy())
    np.testing.assert_array_equal(S[4:20][3:7].to_dense().numpy(), D[7:11].numpy())
    idx = [12, 0, 10, 12, -1]
    np.testing.assert_array_equal(S[idx].to_dense().numpy(), D[idx].numpy())
    np.testing.assert_array_equal(S[4:30].take(torch.tensor([5, 1])).to_dense().numpy(), D[[9, 5]].numpy())
    mask = np.arange(S.shape[0]) % 3 == 0
    np.testing.assert_array_equal(S[mask].to_dense().numpy(), D[mask].numpy())
    np.testing.assert_array_equal(S[::2].to_dense().numpy(), D[::2].numpy())
    W = torch.randn(X.shape[1], 3, dtype=torch.float64)
    np.testing.assert_allclose((S[3:17] @ W).numpy(), (D[3:17] @ W).numpy(), rtol=1e-12, atol=1e-13)
    U = torch.randn(14, 2, dtype=torch.float64)
    np.testing.assert_allclose(S[3:17].t_matmul(U).numpy(), (D[3:17].T @ U).numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(S[2:30].row_sq_norms().numpy(), (D[2:30] ** 2).sum(1).numpy(), rtol=1e-13)
    np.testing.assert_allclose(S.col_sums().numpy(), D.sum(0).numpy(), rtol=1e-12, atol=1e-14)
    assert sp.issparse(S[5:9].to_scipy()) and (S[5:9].to_scipy() != X[5:9]).nnz == 0
    with pytest.raises(IndexError):
        S[[0, S.shape[0]]]


def test_conversions_copy_and_canonicalise():
    # duplicates and unsorted indices (a scipy matrix that is not canonical) are summed and sorted
    X = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([4, 1, 4]), np.array([0, 3])), shape=(1, 6))
    S = as_sparse_rows(X)
    assert S.indices.tolist() == [1, 4] and S.data.tolist() == [2.0, 4.0]
    assert X.data.tolist() == [1.0, 2.0, 3.0]  # the user's matrix untouched
    t = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 0.0]])
    for src in (t.to_sparse_csr(), t.to_sparse(), t):
        R = as_sparse_rows(src)
        np.testing.assert_array_equal(R.to_dense().numpy(), t.numpy())
        assert R.dtype == torch.float32
    Y = sp.random(5, 7, density=0.5, format="csr", random_state=0)
    R = as_sparse_rows(Y)
    R.data.mul_(0)  # no memory shared with the scipy matrix
    assert Y.data.any()
    assert as_sparse_rows(Y, dtype=torch.float32).to(torch.float64).dtype == torch.float64


def test_to_tensor_keeps_sparse_input_sparse():
    from mercer._backend import to_tensor

    X = _wide(50, 10_000_000, 10, 0)  # dense: 3.7 GiB
    T = to_tensor(X, dtype=torch.float64, device=torch.device("cpu"))
    assert is_sparse(T) and T.shape == (50, 10_000_000) and T.nnz == X.nnz


# -- the block engine --------------------------------------------------------------------------
def test_planner_sizes_blocks_from_non_zeros():
    X = _wide(2000, 1_000_000, 20, 0)
    S = as_sparse_rows(X)
    assert plan_features(S) < 60 and plan_features(torch.zeros(3, 7)) == 7
    op = KernelOperator(RBF(gamma=0.1), S, S[:300], memory_budget=8 << 20)
    assert op.plan.full_width and op.plan.row_block >= 1000
    # with d = 10^6 counted per row (a dense block), not even one kernel entry fits these 8 MiB
    with pytest.raises(MemoryBudgetError):
        plan_blocks(2000, 300, 1_000_000, itemsize=8, budget=8 << 20, scratch=0.0)


def test_operator_products_on_sparse_rows_equal_dense(pair):
    X, Y = pair
    kernel = 0.5 * RBF(gamma=0.4) + Chi2(gamma=0.3)
    S, Z = as_sparse_rows(X), as_sparse_rows(Y[:9])
    K = kernel(X.toarray(), Y[:9].toarray()).numpy()
    op = KernelOperator(kernel, S, Z, memory_budget=8_000)  # a tiny budget: many tiles
    assert op.plan.row_block < S.shape[0]
    v = np.random.default_rng(0).normal(size=(9, 2))
    np.testing.assert_allclose(op.matvec(torch.as_tensor(v)).numpy(), K @ v, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(op.rows([3, 0]).numpy(), K[[3, 0]], rtol=1e-12, atol=1e-12)
    sq = KernelOperator(kernel, S, memory_budget=8_000)
    np.testing.assert_allclose(sq.diag().numpy(), kernel.diag(X.toarray()).numpy(), rtol=1e-12)
    full = KernelOperator(kernel, S, memory_budget=40_000).dense()
    np.testing.assert_allclose(full.numpy(), kernel(X.toarray()).numpy(), rtol=1e-11, atol=1e-12)


class TestSparseOperator(OperatorContract):
    """The in-memory operator on sparse rows (the contract's data held as SparseRows, blocked)."""

    @staticmethod
    def make(kernel, X, Z):
        return KernelOperator(kernel, as_sparse_rows(np.asarray(X)), as_sparse_rows(Z), memory_budget=20_000)


def test_sparse_rows_type():
    S = as_sparse_rows(sp.eye(3, format="csr"))
    assert isinstance(S, SparseRows) and "nnz=3" in repr(S)


# -- estimators on sparse rows -------------------------------------------------------------------
@pytest.fixture(scope="module")
def text_like():
    """Classes told apart by a few columns among 2,000, 3% density; a held-out set."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 240)
    X = sp.random(240, 2000, density=0.03, format="csr", random_state=rng)
    X = sp.csr_matrix(X + sp.csr_matrix((np.full(240, 0.8), (np.arange(240), y * 7)), shape=(240, 2000)))
    return X[:180], y[:180], X[180:], y[180:]


@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly", "sigmoid"])
def test_kernel_svc_equals_libsvm_sparse_path(kernel, text_like):
    from sklearn.svm import SVC

    from mercer import KernelSVC

    X, y, Xt, _ = text_like
    ref = SVC(kernel=kernel, C=10.0, tol=1e-6).fit(X, y)
    svc = KernelSVC(kernel=kernel, C=10.0, tol=1e-6).fit(X, y)
    np.testing.assert_array_equal(svc.support_, ref.support_)
    np.testing.assert_allclose(svc.decision_function(Xt), ref.decision_function(Xt), rtol=1e-6, atol=1e-6)
    assert sp.issparse(svc.support_vectors_) and (svc.support_vectors_ != ref.support_vectors_).nnz == 0
    # a model fitted on sparse rows predicts from dense rows the same
    np.testing.assert_allclose(svc.decision_function(Xt.toarray()), svc.decision_function(Xt), rtol=1e-12, atol=1e-12)
    if kernel == "linear":
        np.testing.assert_allclose(svc.coef_, ref.coef_.toarray(), rtol=1e-6, atol=1e-8)


def test_kmeans_equals_scikit_learns_sparse_kmeans(text_like):
    from sklearn.cluster import KMeans as SKKMeans

    from mercer import KMeans

    X = text_like[0]
    init = X[[0, 60, 120]].toarray()
    w = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    ref = SKKMeans(3, init=init, n_init=1, tol=1e-8).fit(X, sample_weight=w)
    got = KMeans(3, init=init, n_init=1, tol=1e-8).fit(X, sample_weight=w)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    np.testing.assert_allclose(got.cluster_centers_, ref.cluster_centers_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.inertia_, ref.inertia_, rtol=1e-10)
    np.testing.assert_array_equal(got.predict(text_like[2]), ref.predict(text_like[2]))
    np.testing.assert_allclose(got.transform(text_like[2]), ref.transform(text_like[2]), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("landmarks", ["uniform", "kmeans++", "leverage", "greedy"])
def test_nystroem_keeps_sparse_landmarks_and_saves_them(landmarks, text_like, tmp_path):
    from mercer import Nystroem, io

    X, _, Xt, _ = text_like
    a = Nystroem(kernel="rbf", gamma=0.5, n_components=20, landmarks=landmarks, random_state=0).fit(X)
    b = Nystroem(kernel="rbf", gamma=0.5, n_components=20, landmarks=landmarks, random_state=0).fit(X.toarray())
    assert is_sparse(a.landmarks_) and a.landmarks_.nnz < 0.1 * 20 * X.shape[1]
    np.testing.assert_allclose(a.landmarks_.to_dense().numpy(), b.landmarks_.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.transform(Xt), b.transform(Xt.toarray()), rtol=1e-9, atol=1e-10)
    io.save(a, tmp_path / "m")
    c = io.load(tmp_path / "m")
    assert is_sparse(c.landmarks_)
    np.testing.assert_array_equal(c.transform(Xt), a.transform(Xt))


def test_kmeans_landmarks_of_sparse_rows(text_like):
    """landmarks='kmeans' on sparse rows: k-means from D^2 seeds drawn as sparse rows gives the dense
    fit's centres (it raised a TypeError in the k-means start); centres that would not fit the memory
    budget are refused with the remedy."""
    from mercer import NystroemKernelRidge, Nystroem

    X, y, Xt, _ = text_like
    a = Nystroem(kernel="rbf", gamma=0.5, n_components=10, landmarks="kmeans", random_state=0).fit(X)
    b = Nystroem(kernel="rbf", gamma=0.5, n_components=10, landmarks="kmeans", random_state=0).fit(X.toarray())
    np.testing.assert_allclose(a.landmarks_.numpy(), b.landmarks_.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.transform(Xt), b.transform(Xt.toarray()), rtol=1e-8, atol=1e-10)
    wide = sp.hstack([X, sp.csr_matrix((X.shape[0], 400_000))]).tocsr()  # 10 dense centres: over 16 MiB with their sums
    with pytest.raises(MemoryBudgetError, match=r"k-means on sparse rows keeps its 10 centres dense .*'kmeans\+\+'"):
        NystroemKernelRidge(kernel="rbf", n_centers=10, centers="kmeans", memory_budget=2**24).fit(wide, y)


@pytest.mark.parametrize("name", ["KernelRidge", "NystroemKernelRidge", "RandomFeatureRidge", "KernelPCA",
                                  "KernelKNeighborsRegressor", "GaussianProcessRegressor"])
def test_estimators_on_sparse_rows_equal_dense(name, text_like):
    import mercer

    X, y, Xt, _ = text_like
    yr = np.asarray(X[:, :20].sum(1)).ravel() + y
    kw = {"KernelRidge": dict(kernel="rbf", gamma=0.5, alpha=0.1),
          "NystroemKernelRidge": dict(kernel="laplacian", gamma=0.5, alpha=0.1, n_centers=30, dtype="float64",
                                      random_state=0),
          "RandomFeatureRidge": dict(gamma=0.5, alpha=0.1, n_components=50, random_state=0),
          "KernelPCA": dict(kernel="cosine", n_components=3),
          "KernelKNeighborsRegressor": dict(kernel="chi2", n_neighbors=4),
          "GaussianProcessRegressor": dict(optimizer=None)}[name]
    cls = getattr(mercer, name)
    a, b = cls(**kw), cls(**kw)
    if name == "KernelPCA":
        ra, rb = a.fit(X).transform(Xt), b.fit(X.toarray()).transform(Xt.toarray())
        ra, rb = np.abs(ra), np.abs(rb)  # eigenvectors up to sign
    else:
        ra, rb = a.fit(X, yr).predict(Xt), b.fit(X.toarray(), yr).predict(Xt.toarray())
    np.testing.assert_allclose(ra, rb, rtol=1e-8, atol=1e-9)
    if name == "NystroemKernelRidge":
        assert is_sparse(a.centers_)


@pytest.mark.parametrize("name", ["SparseGPRegressor", "BudgetSVC", "ReducedSetSVC", "PolynomialFeatureMap"])
def test_estimators_that_learn_dense_points_refuse_sparse_x(name, text_like):
    import mercer

    X, y, _, _ = text_like
    with pytest.raises(TypeError, match=rf"{name} cannot fit sparse X.*(Use|use) "):
        getattr(mercer, name)().fit(X, y)
    assert not getattr(mercer, name)().__sklearn_tags__().input_tags.sparse


def test_sparse_rows_pass_validation_and_refuse_nan():
    from mercer import KernelRidge

    X = sp.random(20, 30, density=0.2, format="csr", random_state=0)
    bad = X.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KernelRidge().fit(bad, np.ones(20))
    t = torch.as_tensor(X.toarray()).to_sparse_csr()
    np.testing.assert_allclose(KernelRidge(kernel="rbf").fit(t, torch.ones(20)).predict(t).numpy(),
                               KernelRidge(kernel="rbf").fit(X, np.ones(20)).predict(X), rtol=1e-12)
