"""FALKON's preconditioner against its dense definition (float64 numpy on small M)."""

import numpy as np
import pytest
import torch

from mercer.linalg import FalkonPreconditioner, conjugate_gradient, falkon_solve_bytes, lower_gram


def _problem(M=30, n=200, d=3, seed=0):
    """K_MM and H = K_nM^T K_nM of an RBF kernel with uniform centres (a typical Nyström system)."""
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    Z = X[rng.choice(n, M, replace=False)]

    def k(A, B):
        return np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))

    K_nm = k(X, Z)
    return k(Z, Z), K_nm.T @ K_nm, K_nm, rng


def _dense(K_mm, lam, tile_dtype, precondition=True):
    """P = T^{-1} A^{-1} and the shifted K_MM, from the definition (float64)."""
    M = K_mm.shape[0]
    eps = float(torch.finfo(tile_dtype).eps)
    K = K_mm + eps * M * np.diag(K_mm).mean() * np.eye(M)
    T = np.linalg.cholesky(K).T                        # upper, T^T T = K
    if not precondition:
        return np.linalg.inv(T), K
    A = np.linalg.cholesky(T @ T.T / M + lam * np.eye(M)).T
    return np.linalg.inv(T) @ np.linalg.inv(A), K


@pytest.mark.parametrize("tile_dtype, rtol", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
@pytest.mark.parametrize("precondition", [True, False])
def test_apply_and_apply_t_equal_the_dense_preconditioner(tile_dtype, rtol, precondition):
    K_mm, _, _, rng = _problem()
    lam = 1e-3
    prec = FalkonPreconditioner.build(torch.as_tensor(K_mm), lam, tile_dtype=tile_dtype, precondition=precondition)
    P, _ = _dense(K_mm, lam, tile_dtype, precondition)
    V = rng.randn(K_mm.shape[0], 4)
    Vt = torch.as_tensor(V)
    scale = np.abs(P).max() * np.abs(V).max()
    np.testing.assert_allclose(prec.apply(Vt).numpy(), P @ V, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(prec.apply_t(Vt).numpy(), P.T @ V, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(prec.rhs(Vt, 7.0).numpy(), P.T @ V / 7.0, rtol=rtol, atol=rtol * scale)
    assert prec.L.dtype == torch.float64 and (prec.La is None) == (not precondition)


@pytest.mark.parametrize("tile_dtype, rtol", [(torch.float64, 1e-8), (torch.float32, 1e-3)])
def test_preconditioned_system_equals_the_dense_one(tile_dtype, rtol):
    K_mm, H, _, _ = _problem()
    M, n, lam = K_mm.shape[0], 200.0, 1e-3
    prec = FalkonPreconditioner.build(torch.as_tensor(K_mm), lam, tile_dtype=tile_dtype)
    P, K = _dense(K_mm, lam, tile_dtype)
    dense = P.T @ (H / n + lam * K) @ P
    Ht = torch.as_tensor(H)
    op = prec.system(lambda v: Ht @ v, n)(torch.eye(M, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(op, dense, rtol=rtol, atol=rtol * np.abs(dense).max())
    # Self-consistency in any precision: the system is P^T (H / n + lam K_MM) P with the object's own P.
    Pt = prec.apply(torch.eye(M, dtype=torch.float64)).numpy()
    L = prec.L.numpy()
    own = Pt.T @ (H / n + lam * L @ L.T) @ Pt
    np.testing.assert_allclose(op, own, rtol=1e-9, atol=1e-9 * np.abs(own).max())
    np.testing.assert_allclose(op, op.T, atol=1e-10 * np.abs(op).max())
    # FALKON's point: the preconditioned matrix is far better conditioned than the original one.
    assert np.linalg.cond(op) < np.linalg.cond(H / n + lam * K) / 100


def test_cg_on_the_preconditioned_system_solves_nystroem_ridge():
    K_mm, H, K_nm, rng = _problem()
    y = rng.randn(K_nm.shape[0], 2)
    n, alpha = K_nm.shape[0], 0.5
    prec = FalkonPreconditioner.build(torch.as_tensor(K_mm), alpha / n)
    _, K = _dense(K_mm, alpha / n, torch.float64)
    b = torch.as_tensor(K_nm.T @ y)
    Ht = torch.as_tensor(H)
    res = conjugate_gradient(prec.system(lambda v: Ht @ v, n), prec.rhs(b, n), tol=1e-12, max_iter=200)
    assert res.converged and res.n_iter < 40
    np.testing.assert_allclose(prec.apply(res.x).numpy(), np.linalg.solve(H + alpha * K, K_nm.T @ y), rtol=1e-6)


def test_with_lam_reuses_the_factor_of_k_mm():
    K_mm, _, _, _ = _problem()
    a = FalkonPreconditioner.build(torch.as_tensor(K_mm), 1e-2)
    b = a.with_lam(1e-4)
    ref = FalkonPreconditioner.build(torch.as_tensor(K_mm), 1e-4)
    assert b.L is a.L and b.lam == 1e-4
    assert torch.equal(b.La, ref.La) and torch.equal(b.L, ref.L)
    none = FalkonPreconditioner.build(torch.as_tensor(K_mm), 1e-2, precondition=False).with_lam(1e-4)
    assert none.La is None and none.lam == 1e-4


def test_k_mm_is_not_modified():
    K_mm, _, _, _ = _problem()
    Kt = torch.as_tensor(K_mm.copy())
    FalkonPreconditioner.build(Kt, 1e-3, tile_dtype=torch.float32)
    assert np.array_equal(Kt.numpy(), K_mm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("M", [40, 512, 1100])
def test_lower_gram_equals_the_dense_product(dtype, M):
    """The recursive product (leaves of GRAM_LEAF rows, odd splits above) equals L^T L, symmetric,
    and leaves L as it was."""
    rng = np.random.RandomState(1)
    L = np.tril(rng.randn(M, M)) + 5 * np.eye(M)
    ref = L.T @ L
    tol = dict(rtol=1e-5, atol=1e-5 * np.abs(ref).max()) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    Lt = torch.tensor(L, dtype=dtype)
    before = Lt.clone()
    out = lower_gram(Lt)
    np.testing.assert_allclose(out.numpy(), ref, **tol)
    assert torch.equal(out, out.mT)
    assert torch.equal(Lt, before)
    # a non-contiguous input: the same result
    Lf = torch.as_tensor(np.asfortranarray(L), dtype=dtype).mT.contiguous().mT
    assert not Lf.is_contiguous()
    np.testing.assert_allclose(lower_gram(Lf).numpy(), ref, **tol)


def test_falkon_solve_bytes():
    assert falkon_solve_bytes(100, 2) == 2 * 100 * 100 * 8 + 2 * 100 * 2 * 8 * 6
    assert falkon_solve_bytes(100, 2, direct=True) == 3 * 100 * 100 * 8 + 2 * 100 * 2 * 8 * 6
    assert falkon_solve_bytes(100, 1, itemsize=4) == 2 * 100 * 100 * 4 + 2 * 100 * 4 * 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    K_mm, H, _, rng = _problem()
    cpu = FalkonPreconditioner.build(torch.as_tensor(K_mm), 1e-3, tile_dtype=torch.float32)
    gpu = FalkonPreconditioner.build(torch.as_tensor(K_mm, device="cuda"), 1e-3, tile_dtype=torch.float32)
    V = torch.as_tensor(rng.randn(K_mm.shape[0], 3))
    np.testing.assert_allclose(gpu.apply(V.cuda()).cpu().numpy(), cpu.apply(V).numpy(), rtol=1e-4, atol=1e-6)
