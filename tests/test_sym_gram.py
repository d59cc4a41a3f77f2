"""SymmetricGram (the lower-triangle Gram of KernelPCA), the Nyström start of the block solvers, and
KernelPCA on them, against dense references (numpy.linalg.eigh on the whole centred matrix)."""

from __future__ import annotations

import numpy as np
import pytest
import threadpoolctl
import torch

from mercer.kernels import RBF, Laplacian, Polynomial
from mercer.linalg import KernelOperator, MemoryBudgetError, SymmetricGram, top_eigenpairs
from mercer.linalg._eig import nystrom_start
from mercer.models import KernelPCA

from conftest import readonly


def _points(n, d, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    return torch.from_numpy(readonly(X))


def _budget_for_tiles(n, tile):
    """A budget that holds the n x n matrix and little more: the build's tiles get ~tile rows."""
    return n * n * 8 + tile * tile * 8 + 4096


# -- SymmetricGram -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", [RBF(gamma=0.3), Laplacian(gamma=0.2), Polynomial(degree=2, gamma=0.1, coef0=1.0)])
@pytest.mark.parametrize("n, budget_tile", [(1, None), (37, None), (300, None), (300, 64), (300, 40)])
def test_lower_triangle_row_sums_and_products_equal_the_dense_matrix(kernel, n, budget_tile):
    X = _points(n, 3)
    budget = None if budget_tile is None else _budget_for_tiles(n, budget_tile)
    G = SymmetricGram(kernel, X, memory_budget=budget)
    if budget_tile is not None:
        assert G.tile < n and G.tile % 32 == 0  # several tiles, panels split them evenly
    K = KernelOperator(kernel, X).dense()
    np.testing.assert_allclose(torch.tril(G.matrix), torch.tril(K), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(G.row_sums, K.sum(dim=1), rtol=1e-12)
    np.testing.assert_allclose(G.diagonal(), torch.diagonal(K), rtol=1e-12)
    V = torch.from_numpy(np.random.default_rng(1).standard_normal((n, 5)))
    np.testing.assert_allclose(G.matvec(V), K @ V, rtol=1e-11, atol=1e-12 * float(K.abs().sum(1).max()))
    np.testing.assert_allclose(G.full_(), K, rtol=1e-12, atol=1e-14)


def test_diagonal_tiles_are_exactly_symmetric():
    X = _points(200, 4)
    G = SymmetricGram(RBF(gamma=0.5), X, memory_budget=_budget_for_tiles(200, 64))
    for s in range(0, 200, G.tile):
        D = G.matrix[s:s + G.tile, s:s + G.tile]
        assert torch.equal(D, D.mT)


def test_threads_give_the_same_numbers():
    # the chunks do not depend on the threads and their sums are taken in a fixed order
    X = _points(400, 3)
    one = SymmetricGram(RBF(gamma=0.2), X, memory_budget=_budget_for_tiles(400, 64), threads=1)
    three = SymmetricGram(RBF(gamma=0.2), X, memory_budget=_budget_for_tiles(400, 64), threads=3)
    assert torch.equal(torch.tril(one.matrix), torch.tril(three.matrix))
    assert torch.equal(one.row_sums, three.row_sums)
    V = torch.from_numpy(np.random.default_rng(2).standard_normal((400, 7)))
    assert torch.equal(one.matvec(V), three.matvec(V))


def test_input_is_not_written_and_errors():
    X = _points(50, 2)  # read-only memory underneath: any write would fail
    G = SymmetricGram(RBF(gamma=1.0), X)
    with pytest.raises(ValueError, match=r"V of shape \(50, t\)"):
        G.matvec(torch.zeros(49, 2, dtype=torch.float64))
    with pytest.raises(MemoryBudgetError, match="50 x 50 kernel matrix"):
        SymmetricGram(RBF(gamma=1.0), X, memory_budget=10_000)
    from mercer.kernels import resolve_kernel
    with pytest.raises(ValueError, match="precomputed"):
        SymmetricGram(resolve_kernel("precomputed"), X)


# -- Nyström start --------------------------------------------------------------------------------

def _low_rank_psd(n, rank, seed=0):
    B = np.random.default_rng(seed).standard_normal((n, rank)) * np.geomspace(10, 1, rank)
    return torch.from_numpy(B @ B.T)


def test_nystrom_start_is_exact_when_the_columns_span_the_range():
    A = _low_rank_psd(120, 6)
    idx = torch.randperm(120, generator=torch.Generator().manual_seed(0))[:20]
    S = nystrom_start(A[:, idx], idx, 4)
    w, U = np.linalg.eigh(A.numpy())
    top = U[:, ::-1][:, :4]
    Q, _ = np.linalg.qr(S.numpy())
    np.testing.assert_allclose(np.abs(Q.T @ top), np.eye(4), atol=1e-8)  # same columns, in order
    assert nystrom_start(torch.zeros(120, 20, dtype=torch.float64), idx, 4).shape == (120, 0)


def test_start_saves_products_and_gives_the_same_eigenpairs():
    A = _low_rank_psd(300, 40, seed=1)
    w, U = np.linalg.eigh(A.numpy())
    for method in ("lanczos", "randomized", "power"):
        k = 3 if method == "power" else 5
        cold = top_eigenpairs(A, k, method=method, block_size=None if method == "power" else 8)
        start = torch.from_numpy(U[:, ::-1][:, :8].copy())
        warm = top_eigenpairs(A, k, method=method, start=start, block_size=None if method == "power" else 8)
        np.testing.assert_allclose(warm.values, w[::-1][:k], rtol=1e-10)
        np.testing.assert_allclose(cold.values, w[::-1][:k], rtol=1e-10)
        assert warm.iterations < cold.iterations
    # a start narrower than the block is completed with random columns
    res = top_eigenpairs(A, 5, method="lanczos", block_size=8, start=torch.from_numpy(U[:, -2:].copy()))
    np.testing.assert_allclose(res.values, w[::-1][:5], rtol=1e-10)


@pytest.mark.parametrize("start, match", [
    (torch.zeros(10, 2, dtype=torch.float64), r"shape \(300, t\)"),
    (np.zeros((300, 2)), r"shape \(300, t\)"),
    (torch.full((300, 2), float("nan"), dtype=torch.float64), "finite"),
])
def test_bad_start(start, match):
    with pytest.raises(ValueError, match=match):
        top_eigenpairs(_low_rank_psd(300, 5), 2, method="lanczos", start=start)


# -- KernelPCA on SymmetricGram --------------------------------------------------------------------

def _dense_reference(X, gamma, k):
    """Top-k eigenpairs of the centred RBF Gram by numpy.linalg.eigh, and the embedding."""
    sq = (X * X).sum(1)
    K = np.exp(-gamma * np.maximum(sq[:, None] + sq[None, :] - 2 * X @ X.T, 0))
    Kc = K - K.mean(0) - K.mean(1)[:, None] + K.mean()
    with threadpoolctl.threadpool_limits(1):  # small: one thread (a shared CPU stalls a second one)
        w, U = np.linalg.eigh(Kc)
    w, U = w[::-1][:k], U[:, ::-1][:, :k]
    return w, U * np.sqrt(w)


def _same_up_to_sign(A, B, rtol):
    signs = np.sign((A * B).sum(axis=0))
    np.testing.assert_allclose(A * signs, B, atol=rtol * np.abs(B).max())


@pytest.fixture(scope="module")
def points_700():
    rng = np.random.default_rng(0)
    X = readonly(rng.standard_normal((700, 3)) @ rng.standard_normal((3, 5)))  # > 500 rows: "auto" is Lanczos
    return X, _dense_reference(X, 0.1, 10)


@pytest.mark.parametrize("solver", ["auto", "lanczos", "randomized", "power", "dense"])
def test_kernel_pca_matches_dense_eigh(points_700, solver):
    X, (w, Z) = points_700
    k = 4 if solver == "power" else 10
    model = KernelPCA(k, kernel="rbf", gamma=0.1, eigen_solver=solver, random_state=0)
    Zm = model.fit_transform(X)
    np.testing.assert_allclose(model.eigenvalues_, w[:k], rtol=1e-9)
    _same_up_to_sign(Zm, Z[:, :k], 1e-6)
    _same_up_to_sign(model.transform(X), Z[:, :k], 1e-6)
    assert model.solver_info_["method"] == ("lanczos" if solver == "auto" else solver)


def test_fast_decaying_spectrum_needs_few_products():
    # RBF on 2-D points: the Nyström start holds the top eigenvectors nearly exactly (block
    # Lanczos from a random start takes 4 block steps here)
    X = readonly(np.random.default_rng(3).uniform(-2, 2, (1500, 2)))
    model = KernelPCA(10, kernel="rbf", gamma=0.25, random_state=0).fit(X)
    assert model.solver_info_["iterations"] <= 2
    w, Z = _dense_reference(X, 0.25, 10)
    np.testing.assert_allclose(model.eigenvalues_, w, rtol=1e-9)


def test_blocked_path_uses_the_nystrom_start():
    X = readonly(np.random.default_rng(4).uniform(-2, 2, (600, 2)))
    # the 600 x 600 Gram (2.9 MB) does not fit; the 600 x 160 landmark columns (0.8 MB) do
    model = KernelPCA(10, kernel="rbf", gamma=0.25, memory_budget=3_500_000, random_state=0).fit(X)
    assert model.solver_info_["iterations"] <= 2
    w, Z = _dense_reference(X, 0.25, 10)
    np.testing.assert_allclose(model.eigenvalues_, w, rtol=1e-9)
    _same_up_to_sign(model.transform(X), Z, 1e-6)


def test_threads_give_the_same_embedding():
    X = readonly(np.random.default_rng(5).standard_normal((2500, 4)))  # above the threaded size
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = KernelPCA(10, kernel="rbf", random_state=0).fit_transform(X)
        torch.set_num_threads(2)
        two = KernelPCA(10, kernel="rbf", random_state=0).fit_transform(X)
    finally:
        torch.set_num_threads(old)
    np.testing.assert_allclose(one, two, rtol=0, atol=1e-12 * np.abs(one).max())
