"""Exact kernel ridge by a float32 factorisation refined in float64: the pieces against dense
references, and KernelRidge on that path against scikit-learn and the float64 path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

import mercer.models.ridge._exact as exact
from mercer.kernels import RBF, Linear, Precomputed
from mercer.linalg import (KernelOperator, NumericalWarning, blocked_cholesky, fill_lower_gram, fill_mixed_gram,
                           gram_tile_plan, mixed_precision_solve, symmetric_matvec)
from mercer.models import KernelRidge, KernelRidgeClassifier

from conftest import readonly


def rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


def _spd(n, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 3, generator=g, dtype=torch.float64)
    K = RBF(gamma=0.5)(X)
    K.diagonal().add_(0.1)
    return K.to(dtype)


@pytest.fixture
def mixed(monkeypatch):
    """KernelRidge takes the mixed-precision path from any size."""
    monkeypatch.setattr(exact, "_MIXED_MIN_N", 0)


# -- blocked Cholesky ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n, block", [(1, 4), (37, 8), (64, 16), (100, 384)])
def test_blocked_cholesky_equals_lapack(dtype, n, block):
    A = _spd(n, dtype)
    expected = torch.linalg.cholesky(A)
    W = A.tril() + torch.full_like(A, float("nan")).triu(1)  # the strict upper triangle is never read
    assert blocked_cholesky(W, block=block) == 0
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(W.tril(), expected, atol=tol, rtol=tol)


def test_blocked_cholesky_reports_the_failing_column_as_lapack():
    A = _spd(50)
    A[30, 30] = -1.0
    _, info = torch.linalg.cholesky_ex(A)
    assert blocked_cholesky(A.clone(), block=8) == int(info) == 31


def test_blocked_cholesky_checks_its_input():
    with pytest.raises(ValueError, match="'A' parameter of blocked_cholesky must be a square matrix"):
        blocked_cholesky(torch.zeros(3, 4))


# -- the lower-triangle product and the Gram fill ------------------------------------------------------
def _lower_only(A):
    """``A``'s lower triangle, NaN above: a function that reads the upper triangle fails."""
    return A.tril() + torch.full_like(A, float("nan")).triu(1)


@pytest.mark.parametrize("n", [1, 10, 300, 700])  # 700: several row blocks of DIAG_ROWS, several column chunks
def test_symmetric_matvec_reads_only_the_lower_triangle(n, monkeypatch):
    import mercer.linalg._mixed as mixed_mod

    monkeypatch.setattr(mixed_mod, "_MATVEC_CHUNK_BYTES", 256 * 8 * 300)  # chunks of 300 columns
    A = _spd(n)
    V = torch.randn(n, 3, dtype=torch.float64)
    torch.testing.assert_close(symmetric_matvec(_lower_only(A), V, 0.7), A @ V + 0.7 * V, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(symmetric_matvec(_lower_only(A), V[:, :1]), A @ V[:, :1], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("precomputed", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("signed", [False, True])
def test_fill_mixed_gram_writes_both_matrices_and_the_row_sums(precomputed, weighted, signed):
    rng = np.random.default_rng(0)
    n = 70
    X = torch.as_tensor(rng.standard_normal((n, 4)))
    kernel = RBF(gamma=0.3) + Linear() if signed else RBF(gamma=0.3)
    K = kernel(X)
    assert bool((K < 0).any()) == signed  # negative entries: the sums are of absolute values
    w = torch.as_tensor(rng.uniform(0.5, 2.0, n)) if weighted else None
    K_user = K.clone()
    op = KernelOperator(Precomputed(), K_user) if precomputed else KernelOperator(kernel, X)
    # a tiny budget: tiles of a few rows and columns
    plan = gram_tile_plan(n, 4, itemsize=8, budget=6_000, scratch=1.0)
    assert plan.row_block < n and plan.col_block < n
    A = torch.full((n, n), float("nan"), dtype=torch.float64)
    F = torch.full((n, n), float("nan"), dtype=torch.float32)
    sums = fill_mixed_gram(op, plan, A, F, w)
    Kw = K if w is None else w[:, None] * K * w[None, :]
    torch.testing.assert_close(A.tril(), Kw.tril(), atol=1e-15, rtol=1e-14)
    torch.testing.assert_close(F.tril(), Kw.float().tril())
    torch.testing.assert_close(sums, Kw.abs().sum(1), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(K_user, K, atol=0, rtol=0)  # the user's matrix is untouched
    full = torch.full((n, n), float("nan"), dtype=torch.float64)
    fill_lower_gram(op, plan, full, w)
    torch.testing.assert_close(full.tril(), Kw.tril(), atol=1e-15, rtol=1e-14)


# -- the solve ---------------------------------------------------------------------------------------
def _system(n, alpha, t=2, seed=0):
    K = _spd(n, seed=seed)
    K.diagonal().sub_(0.1)
    P = _lower_only(K)  # what the solve reads, and leaves as it was
    F = K.float()
    F.diagonal().add_(alpha)
    B = torch.randn(n, t, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return K, P, F, B


@pytest.mark.parametrize("alpha", [1.0, 1e-3])
def test_mixed_precision_solve_reaches_float64_accuracy(alpha):
    n = 300
    K, P, F, B = _system(n, alpha)
    B[:, 1] = 0.0  # a zero right-hand side converges at once, and does not hold up the other
    A = K + alpha * torch.eye(n, dtype=torch.float64)
    X, info = mixed_precision_solve(P, alpha, F, B, norm_a=float(A.abs().sum(1).max()))
    assert info.converged and info.reason == ""
    assert info.backward_error <= torch.finfo(torch.float64).eps
    expected = torch.linalg.solve(A, B)
    # the float64 direct solve's own error is ~cond * eps; ours is the same order
    cond = float(torch.linalg.cond(A))
    assert float((X - expected).abs().max() / expected.abs().max()) < 10 * cond * 2.2e-16
    assert bool((X[:, 1] == 0).all())
    torch.testing.assert_close(P, _lower_only(K), equal_nan=True, atol=0, rtol=0)


def test_mixed_precision_solve_reports_a_float32_matrix_that_is_not_positive_definite():
    n = 200
    K, P, F, B = _system(n, 0.0)
    F = K.float()  # smallest eigenvalue far below float32's resolution of the largest
    F.diagonal().sub_(1e-3)
    X, info = mixed_precision_solve(P, 0.0, F, B, norm_a=float(K.abs().sum(1).max()))
    assert X is None and not info.converged
    assert "not numerically positive definite" in info.reason


def test_mixed_precision_solve_reports_stalled_refinement(monkeypatch):
    n = 200
    K, P, F, B = _system(n, 1.0)
    F.diagonal().add_(30.0)  # a poor preconditioner, and too few iterations allowed for it
    import mercer.linalg._mixed as mixed_mod  # its iteration cap
    monkeypatch.setattr(mixed_mod, "_MAX_ITER", 2)
    X, info = mixed_precision_solve(P, 1.0, F, B, norm_a=float(K.abs().sum(1).max()) + 1.0)
    assert X is None and not info.converged and "backward error" in info.reason


# -- KernelRidge on the mixed path --------------------------------------------------------------------
@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5))
    Y = np.c_[np.sin(X[:, 0]) + 0.1 * rng.standard_normal(400), X[:, 1] ** 2, np.cos(X[:, 2] + X[:, 3])]
    return readonly(X[:300], Y[:300], X[300:])


@pytest.mark.parametrize("alpha", [1.0, 1e-3, [0.5, 1e-3, 0.5]])
def test_kernel_ridge_mixed_matches_sklearn_and_the_float64_path(regression, mixed, alpha):
    X, Y, Xte = regression
    ours = KernelRidge(alpha=alpha, kernel="rbf", gamma=0.2).fit(X, Y)
    assert ours.n_refine_iter_ > 0  # the mixed path ran
    ref = SkKernelRidge(alpha=alpha, kernel="rbf", gamma=0.2).fit(X, Y)
    assert rel(ours.predict(Xte), ref.predict(Xte)) < 1e-10
    assert rel(ours.dual_coef_.numpy(), ref.dual_coef_) < 1e-9


def test_float64_path_below_the_threshold(regression):
    X, Y, _ = regression
    assert exact._MIXED_MIN_N > len(X)
    assert KernelRidge(kernel="rbf").fit(X, Y).n_refine_iter_ == 0


def test_kernel_ridge_mixed_with_weights_and_intercept(regression, mixed):
    X, Y, Xte = regression
    y = Y[:, 0] + 5.0
    sw = readonly(np.random.default_rng(1).uniform(0.2, 3.0, len(X)))
    ours = KernelRidge(alpha=0.3, kernel="rbf", gamma=0.2).fit(X, y, sample_weight=sw)
    assert ours.n_refine_iter_ > 0
    ref = SkKernelRidge(alpha=0.3, kernel="rbf", gamma=0.2).fit(X, y, sample_weight=sw)
    assert rel(ours.predict(Xte), ref.predict(Xte)) < 1e-10
    with_b = KernelRidge(alpha=0.3, kernel="rbf", gamma=0.2, fit_intercept=True).fit(X, y, sample_weight=sw)
    exact._MIXED_MIN_N = 10**9
    try:
        f64 = KernelRidge(alpha=0.3, kernel="rbf", gamma=0.2, fit_intercept=True).fit(X, y, sample_weight=sw)
    finally:
        exact._MIXED_MIN_N = 0
    assert with_b.n_refine_iter_ > 0 and f64.n_refine_iter_ == 0
    assert abs(with_b.intercept_ - f64.intercept_) < 1e-10 * abs(f64.intercept_)
    assert rel(with_b.predict(Xte), f64.predict(Xte)) < 1e-10


def test_kernel_ridge_classifier_mixed(regression, mixed):
    X, Y, Xte = regression
    labels = np.digitize(Y[:, 2], [-0.3, 0.3])
    ours = KernelRidgeClassifier(alpha=0.5, kernel="rbf", gamma=0.2).fit(X, labels)
    assert ours.n_refine_iter_ > 0
    exact._MIXED_MIN_N = 10**9
    try:
        ref = KernelRidgeClassifier(alpha=0.5, kernel="rbf", gamma=0.2).fit(X, labels)
    finally:
        exact._MIXED_MIN_N = 0
    assert rel(ours.decision_function(Xte), ref.decision_function(Xte)) < 1e-10


def test_tiny_alpha_factors_in_float64(regression, mixed):
    X, Y, Xte = regression
    model = KernelRidge(alpha=1e-9, kernel="rbf", gamma=0.2).fit(X, Y[:, 0])
    assert model.n_refine_iter_ == 0  # below _MIXED_MIN_ALPHA: not tried
    ref = SkKernelRidge(alpha=1e-9, kernel="rbf", gamma=0.2).fit(X, Y[:, 0])
    assert rel(model.predict(Xte), ref.predict(Xte)) < 1e-6


def test_failed_float32_factorisation_falls_back_to_float64(monkeypatch, mixed):
    """Duplicated rows and alpha = 0: the float32 matrix is singular; the float64 path adds jitter."""
    monkeypatch.setattr(exact, "_MIXED_MIN_ALPHA", 0.0)
    X = readonly(np.repeat(np.arange(5.0)[:, None], 4, axis=0))
    y = readonly(np.arange(20.0))
    with pytest.warns(NumericalWarning, match="jitter"):
        model = KernelRidge(alpha=0.0, kernel="rbf", gamma=1.0).fit(X, y)
    assert model.n_refine_iter_ == 0 and model.jitter_ > 0
    assert np.all(np.isfinite(model.predict(X)))


def test_mixed_path_fits_the_budget_of_the_float64_gram(regression, mixed):
    """Only the lower triangles are written: float64 and float32 together take less than the float64 Gram."""
    X, Y, Xte = regression
    n = len(X)
    budget = 8 * n * n + 20_000  # the float64 Gram and small tiles: the mixed path's triangles fit within it
    model = KernelRidge(alpha=1.0, kernel="rbf", gamma=0.2, memory_budget=budget).fit(X, Y)
    assert model.n_refine_iter_ > 0
    ref = SkKernelRidge(alpha=1.0, kernel="rbf", gamma=0.2).fit(X, Y)
    assert rel(model.predict(Xte), ref.predict(Xte)) < 1e-10


def test_overflowing_kernel_is_named_on_the_mixed_path(mixed):
    rng = np.random.default_rng(0)
    X, y = readonly(rng.standard_normal((40, 3)), rng.standard_normal(40))
    with pytest.raises(ValueError, match=r"KernelRidge: .* the kernel values overflow float64"):
        KernelRidge(kernel="poly", gamma=1e300, solver="dual").fit(X, y)


# -- the float64 path's blocked factorisation -------------------------------------------------------
@pytest.fixture
def blocked_everywhere(monkeypatch):
    import mercer.linalg._factor as factor

    monkeypatch.setattr(factor, "BLOCKED_MIN_N", 0)


def test_jittered_cholesky_blocked_equals_lapack_and_jitters_the_same(blocked_everywhere):
    from mercer.linalg import jittered_cholesky

    A = _spd(150)
    f = jittered_cholesky(A.clone(), blocked=True)
    torch.testing.assert_close(f.L.tril(), torch.linalg.cholesky(A), atol=1e-12, rtol=1e-12)
    X = torch.randn(60, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    S = X @ X.T  # rank 3
    with pytest.warns(NumericalWarning, match="jitter"):
        fb = jittered_cholesky(S.clone(), blocked=True, owner="test")
    with pytest.warns(NumericalWarning, match="jitter"):
        fl = jittered_cholesky(S.clone(), owner="test")
    assert fb.jitter == fl.jitter > 0
    L = fb.L.tril()
    torch.testing.assert_close(L @ L.mT, S + fb.jitter * torch.eye(60, dtype=torch.float64), atol=1e-12, rtol=1e-12)


def test_kernel_ridge_float32_and_jitter_on_the_blocked_factorisation(regression, blocked_everywhere):
    X, Y, Xte = regression
    d64 = KernelRidge(alpha=1.0, kernel="rbf", gamma=0.2).fit(X, Y).predict(Xte)
    m32 = KernelRidge(alpha=1.0, kernel="rbf", gamma=0.2, dtype="float32").fit(X, Y)
    np.testing.assert_allclose(m32.predict(Xte), d64, atol=1e-4)
    Xs = readonly(np.repeat(np.arange(5.0)[:, None], 4, axis=0))  # duplicated rows: singular Gram
    with pytest.warns(NumericalWarning, match="jitter"):
        model = KernelRidge(alpha=0.0, kernel="rbf", gamma=1.0).fit(Xs, readonly(np.arange(20.0)))
    assert model.jitter_ > 0 and np.all(np.isfinite(model.predict(Xs)))


def test_blocked_cholesky_reports_to_an_observer_between_blocks():
    from mercer.linalg import observe_blocks

    calls = []
    with observe_blocks(lambda desc, done, total: calls.append((desc, done, total))):
        blocked_cholesky(_spd(50), block=16)
    assert calls == [("Cholesky factorisation", k, 50) for k in (16, 32, 48, 50)]

    def stop(desc, done, total):
        raise KeyboardInterrupt

    with observe_blocks(stop), pytest.raises(KeyboardInterrupt):
        blocked_cholesky(_spd(50), block=16)


def test_the_fill_leaves_the_upper_triangle_unwritten():
    """What keeps the memory of the Gram at its lower triangle: nothing right of each row's diagonal
    square (of DIAG_ROWS rows) is written, so those pages are never mapped."""
    from mercer.linalg._mixed import DIAG_ROWS

    n = 2 * DIAG_ROWS + 100
    X = torch.as_tensor(np.random.default_rng(0).standard_normal((n, 3)))
    op = KernelOperator(RBF(gamma=0.5), X)
    plan = gram_tile_plan(n, 3, itemsize=8, budget=10**9, scratch=0.0)
    K = torch.full((n, n), float("nan"), dtype=torch.float64)
    F = torch.full((n, n), float("nan"), dtype=torch.float32)
    fill_mixed_gram(op, plan, K, F)
    row = torch.arange(n)[:, None]
    col = torch.arange(n)[None, :]
    square_end = (row // DIAG_ROWS + 1) * DIAG_ROWS
    assert bool(K[col >= square_end].isnan().all()) and bool(F[col >= square_end].isnan().all())
    assert not bool(K[col <= row].isnan().any())
