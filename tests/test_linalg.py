"""Planner, blocked operator and jittered Cholesky: the blocked path equals the dense one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mercer import config_context
from mercer.kernels import RBF, HistogramIntersection, Laplacian, Linear, Precomputed
from mercer.linalg import (KernelOperator, MemoryBudgetError, NumericalWarning, default_memory_budget,
                           jittered_cholesky, plan_blocks)


# -- planner --------------------------------------------------------------------------------

def test_plan_prefers_full_width_rows():
    plan = plan_blocks(10_000, 5_000, 10, itemsize=8, budget=64 * 2**20)
    assert plan.full_width and plan.row_block >= 64
    assert plan.tile_bytes <= plan.budget


@pytest.mark.parametrize("budget", [2_000, 50_000, 10**6, 10**8])
@pytest.mark.parametrize("scratch", [0.0, 1.0, 3.0])
def test_plan_always_fits_the_budget(budget, scratch):
    plan = plan_blocks(100_000, 100_000, 28, itemsize=4, budget=budget, scratch=scratch, n_rhs=4)
    assert plan.tile_bytes <= budget
    assert 1 <= plan.row_block <= 100_000 and 1 <= plan.col_block <= 100_000


def test_plan_splits_columns_when_rows_are_too_wide():
    plan = plan_blocks(1_000_000, 1_000_000, 28, itemsize=4, budget=8 * 2**20)
    assert not plan.full_width and plan.tile_bytes <= 8 * 2**20


def test_plan_refuses_an_impossible_budget():
    with pytest.raises(MemoryBudgetError, match="raise memory_budget"):
        plan_blocks(10, 10, 1000, itemsize=8, budget=100)


def test_plan_bad_arguments():
    with pytest.raises(ValueError, match="budget"):
        plan_blocks(10, 10, 3, itemsize=8, budget=0)


def test_default_budget_follows_config():
    assert default_memory_budget("cpu", 12345) == 12345
    with config_context(memory_budget=777_777):
        assert default_memory_budget("cpu") == 777_777
    assert default_memory_budget("cpu") > 16 * 2**20


# -- operator -------------------------------------------------------------------------------

@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(301, 6, generator=g, dtype=torch.float64)
    Z = torch.randn(97, 6, generator=g, dtype=torch.float64)
    return X, Z


@pytest.mark.parametrize("kernel", [RBF(gamma=0.3), Laplacian(), 2.0 * Linear() + RBF(), HistogramIntersection()])
@pytest.mark.parametrize("budget", [None, 60_000, 3_000])
def test_blocked_products_equal_dense(data, kernel, budget):
    X, Z = data
    if isinstance(kernel, HistogramIntersection):
        X, Z = X.abs(), Z.abs()
    K = kernel(X, Z)
    op = KernelOperator(kernel, X, Z, memory_budget=budget, n_rhs=3)
    if budget == 3_000:
        assert not op.plan.full_width  # the tiny budget really forces column tiles
    v = torch.randn(97, 3, dtype=torch.float64)
    u = torch.randn(301, dtype=torch.float64)
    torch.testing.assert_close(op.matvec(v), K @ v, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(op.matvec(v[:, 0]), K @ v[:, 0], rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(op.rmatvec(u), K.T @ u, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(op.kt_k_v(v), K.T @ (K @ v), rtol=1e-12, atol=1e-8)
    torch.testing.assert_close(op.rows([3, 0, 200]), K[[3, 0, 200]], rtol=1e-12, atol=1e-12)


def test_square_operator_diag_and_dense(data):
    X, _ = data
    k = RBF(gamma=0.2)
    op = KernelOperator(k, X, memory_budget=2_000_000)
    torch.testing.assert_close(op.diag(), torch.ones(301, dtype=torch.float64))
    torch.testing.assert_close(op.dense(), k(X), rtol=0, atol=1e-14)
    lower = op.dense(lower_only=True)
    torch.testing.assert_close(torch.tril(lower), torch.tril(k(X)), rtol=0, atol=1e-14)


def test_dense_over_budget_is_a_clear_error(data):
    X, _ = data
    with pytest.raises(MemoryBudgetError, match="more than the memory budget"):
        KernelOperator(RBF(), X, memory_budget=100_000).dense()


def test_precomputed_operator(data):
    X, _ = data
    K = RBF()(X)
    op = KernelOperator(Precomputed(), K, memory_budget=50_000)
    v = torch.randn(301, dtype=torch.float64)
    torch.testing.assert_close(op.matvec(v), K @ v)
    torch.testing.assert_close(op.diag(), torch.diagonal(K))


def test_operator_checks_vector_length(data):
    X, Z = data
    with pytest.raises(ValueError, match="expects 97"):
        KernelOperator(RBF(), X, Z).matvec(torch.ones(5, dtype=torch.float64))


def test_operator_does_not_modify_inputs(data):
    X, Z = data
    X0, Z0 = X.clone(), Z.clone()
    op = KernelOperator(0.5 * RBF(), X, Z, memory_budget=5_000)
    op.matvec(torch.ones(97, dtype=torch.float64))
    op.kt_k_v(torch.ones(97, dtype=torch.float64))
    assert torch.equal(X, X0) and torch.equal(Z, Z0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kept_matrix_gives_the_same_products(data, dtype):
    """keep_bytes: the first full pass keeps K; every later product reads it and equals, bit for bit,
    the product of an operator that recomputes its tiles (same tiles, same order), shift included."""
    X, Z = (a.to(dtype) for a in data)
    k = RBF(gamma=0.3)
    budget = 60_000 if dtype == torch.float32 else 100_000
    fresh = KernelOperator(k, X, Z, memory_budget=budget, n_rhs=2)
    kept = KernelOperator(k, X, Z, memory_budget=budget, n_rhs=2, keep_bytes=301 * 97 * X.element_size())
    assert fresh.plan.full_width and fresh.plan.row_block < 301  # several row blocks
    v = torch.randn(97, 2, dtype=torch.float64)
    u = torch.randn(301, 2, dtype=dtype)
    assert not kept.kept
    assert torch.equal(kept.rmatvec(u, out_dtype=torch.float64), fresh.rmatvec(u, out_dtype=torch.float64))
    assert kept.kept  # the pass ran to its end
    shift = k(X, Z).mean(0)
    fresh.shift = kept.shift = shift  # subtracted from the kept matrix as from each fresh tile
    for _ in range(2):
        assert torch.equal(kept.kt_k_v(v, out_dtype=torch.float64), fresh.kt_k_v(v, out_dtype=torch.float64))
    assert torch.equal(kept.matvec(v.to(dtype)), fresh.matvec(v.to(dtype)))
    assert torch.equal(kept.rmatvec(u), fresh.rmatvec(u))
    assert torch.equal(kept.kt_k(out_dtype=torch.float64), fresh.kt_k(out_dtype=torch.float64))
    Kc = k(X, Z) - shift
    torch.testing.assert_close(kept.matvec(v.to(dtype)), Kc @ v.to(dtype))
    kept.shift = fresh.shift = 2 * shift  # a second shift: the kept matrix is dropped and recomputed
    assert not kept.kept
    assert torch.equal(kept.matvec(v.to(dtype)), fresh.matvec(v.to(dtype)))
    assert kept.kept
    assert torch.equal(X, data[0].to(dtype)) and torch.equal(Z, data[1].to(dtype))


def test_kept_matrix_only_when_it_fits_and_the_pass_ends(data):
    X, Z = data
    v = torch.ones(97, dtype=torch.float64)
    small = KernelOperator(RBF(), X, Z, keep_bytes=301 * 97 * 8 - 1)
    small.matvec(v)
    assert not small.kept  # one entry short of the bytes it may keep
    split = KernelOperator(RBF(), X, Z, memory_budget=3_000, keep_bytes=10**9)
    split.kt_k_v(v)
    assert not split.plan.full_width and not split.kept  # tiles split columns: nothing is kept
    K = RBF()(X)
    pre = KernelOperator(Precomputed(), K, keep_bytes=10**9)
    pre.matvec(torch.ones(301, dtype=torch.float64))
    assert not pre.kept  # a precomputed matrix is the user's already
    op = KernelOperator(RBF(), X, Z, memory_budget=100_000, keep_bytes=10**9)
    assert op.plan.full_width and op.plan.row_block < 301
    rows = op._full_rows()
    next(rows)
    rows.close()  # an interrupted pass (an error, Ctrl-C) keeps nothing
    assert not op.kept


# -- Cholesky -------------------------------------------------------------------------------

def test_cholesky_solves(data):
    X, _ = data
    A = RBF()(X)
    A.diagonal().add_(0.1)
    ref = A.clone()
    b = torch.randn(301, 2, dtype=torch.float64)
    f = jittered_cholesky(A)
    assert f.jitter == 0.0
    torch.testing.assert_close(ref @ f.solve(b), b, rtol=1e-8, atol=1e-8)


def test_cholesky_jitter_on_singular_matrix():
    x = torch.arange(5.0, dtype=torch.float64).repeat(3)[:, None]  # duplicates: rank 5 of 15
    A = RBF(gamma=1.0)(x)
    with pytest.warns(NumericalWarning, match="jitter"):
        f = jittered_cholesky(A, owner="test")
    assert f.jitter > 0


def test_cholesky_gives_up_on_an_indefinite_matrix():
    A = -torch.eye(4, dtype=torch.float64)
    with pytest.raises(np.linalg.LinAlgError, match="far from positive"):
        jittered_cholesky(A, max_tries=2)
