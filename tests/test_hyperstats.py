"""Blocked kernel statistics and their backward pass (mercer.linalg.kernel_statistics), and the
objectives written on them: Titsias' SGPR bound, Nyström GCV and hold-out error. Every value and
gradient is checked against autograd through the dense float64 computation (the n x M matrix
formed), at budgets that force many blocks, in memory and streamed from .npy and Parquet."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mercer import sources
from mercer.kernels import RBF, LearnableKernel, Matern, RationalQuadratic
from mercer.linalg import centres_gram, kernel_statistics, statistics_rows
from mercer.linalg._hyperstats import _RBFGradient
from mercer.models.gp._sparse import _sgpr_bound, sgpr_bound_from_statistics
from mercer.models.ridge._nystroem_cv import nystroem_gcv, nystroem_holdout_error

N, D, M = 150, 3, 7
BUDGET = 6_000  # bytes: ~10 rows per block, so 15 blocks
KEEP_BUDGET = 60_000  # the N x M tiles (8.4 kB) fit the kept-matrix share: the RBF backward pass reads them


def kernels():
    return {
        "ard": RBF(gamma=[0.3, 0.8, 0.5]),
        "scaled-ard": 0.8 * RBF(gamma=[0.3, 0.8, 0.5]),
        "scaled-rbf": 1.3 * RBF(gamma=0.4),
        "sum-of-scaled": 1.7 * RBF(gamma=0.4) + 0.5 * Matern(length_scale=1.3),
        "product": 1.2 * Matern(nu=2.5, length_scale=[1.0, 2.0, 0.7]) * RationalQuadratic(length_scale=1.5, alpha=2.0),
    }


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g, dtype=torch.float64)
    Y = torch.randn(N, 2, generator=g, dtype=torch.float64) + 1.5
    W = torch.rand(N, 2, generator=g, dtype=torch.float64)
    Z = torch.randn(M, D, generator=g, dtype=torch.float64)
    return X, Y, W, Z


def rel(a, b):
    return float((a - b).norm() / b.norm())


def dense_statistics(k, X, Z, Y, W):
    K = k(X, Z)
    return (torch.stack([K.T @ (W[:, j, None] * K) for j in range(W.shape[1])]),
            torch.stack([K.T @ (W[:, j, None] * Y) for j in range(W.shape[1])]), W.T @ K, W.T @ k.diag(X))


def test_a_small_budget_forces_many_blocks():
    rows = statistics_rows(N, M, D, 2, 2, itemsize=8, scratch=1.0, memory_budget=BUDGET)
    assert 1 <= rows and -(-N // rows) >= 10


@pytest.mark.parametrize("budget", [BUDGET, KEEP_BUDGET], ids=["tiles-recomputed", "tiles-kept"])
@pytest.mark.parametrize("name, far", [(name, False) for name in kernels()]
                         + [("scaled-ard", True), ("sum-of-scaled", True)])
def test_statistics_and_their_gradients_equal_the_dense_computation(data, name, far, budget, monkeypatch):
    """``far``: the closed form expands ``(x - z)^2``; data 100 units from the origin and signed
    weights (an adjoint of either sign) still give autograd's dense gradient to 1e-8 (the values,
    sums of terms of either sign taken in another order, to 1e-10). ``budget``: the RBF backward pass
    recomputes each block's tile, or reads the forward pass's when the tiles fit the plan."""
    X, Y, W, Z0 = data
    recomputed = []
    tile = _RBFGradient.tile
    monkeypatch.setattr(_RBFGradient, "tile", lambda self, k, Xb: recomputed.append(1) or tile(self, k, Xb))
    if far:
        X, Z0, W = X + 100.0, Z0 + 100.0, W - 0.4
    lk = LearnableKernel(kernels()[name], D)
    g = torch.Generator().manual_seed(2 if far else 1)
    adj = [torch.randn(2, M, M, generator=g, dtype=torch.float64), torch.randn(2, M, 2, generator=g, dtype=torch.float64),
           torch.randn(2, M, generator=g, dtype=torch.float64), torch.randn(2, generator=g, dtype=torch.float64)]

    def run(blocked):
        theta = torch.tensor(lk.theta0, requires_grad=True)
        Z = Z0.clone().requires_grad_(True)
        if blocked:
            st = kernel_statistics(lk.at, theta, Z, X, Y, W, memory_budget=budget)
            parts = (st.gram, st.rhs, st.colsum, st.kdiag)
        else:
            parts = dense_statistics(lk.at(theta), X, Z, Y, W)
        loss = sum((p * a).sum() for p, a in zip(parts, adj)) + lk.at(theta)(Z).square().sum()
        return [p.detach() for p in parts], loss.detach(), torch.autograd.grad(loss, [theta, Z])

    (pb, lb, gb), (pd, ld, gd) = run(True), run(False)
    if _RBFGradient.handles(kernels()[name]):
        assert (not recomputed) == (budget == KEEP_BUDGET)
    value_tol = 1e-10 if far else 1e-12
    for a, b in zip(pb, pd):
        assert rel(a, b) < value_tol
    assert float(abs(lb - ld) / abs(ld)) < value_tol
    for a, b in zip(gb, gd):
        assert rel(a, b) < 1e-8


@pytest.mark.parametrize("name, far", [(name, False) for name in kernels()] + [("scaled-ard", True)])
def test_centres_gram_equals_the_kernel_and_autograd_through_it(data, name, far):
    """K_MM = k(Z, Z) of the objectives: RBF and c * RBF take the closed-form backward (the centres are
    the tile's rows and columns), the others autograd; the gradients of a non-symmetric adjoint agree."""
    _, _, _, Z0 = data
    Z0 = Z0 + 100.0 if far else Z0
    lk = LearnableKernel(kernels()[name], D)
    G = torch.randn(M, M, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    results = []
    for ours in (True, False):
        theta = torch.tensor(lk.theta0, requires_grad=True) + 0.1
        Z = Z0.clone().requires_grad_(True)
        K = centres_gram(lk.at, theta, Z) if ours else lk.at(theta)(Z)
        if ours:
            assert ("_CentresGram" in type(K.grad_fn).__name__) == _RBFGradient.handles(kernels()[name])
        results.append((K.detach(), *torch.autograd.grad((K * G).sum(), [theta, Z])))
    assert torch.equal(results[0][0], results[1][0])
    for a, b in zip(results[0][1:], results[1][1:]):
        assert rel(a, b) < 1e-8


def test_rbf_kernels_take_the_closed_form_backward_and_the_others_autograd():
    closed = {name for name, k in kernels().items() if _RBFGradient.handles(k)}
    assert closed == {"ard", "scaled-ard", "scaled-rbf"}
    assert _RBFGradient.handles(RBF()) and not _RBFGradient.handles(Matern(length_scale=[1.0, 2.0, 0.7]))


@pytest.mark.parametrize("kind", ["npy", "parquet", "dask"])
def test_streamed_from_a_source_equals_in_memory(data, tmp_path, kind):
    """(A Dask collection is read block by block in this process: the passes do not run on workers.)"""
    X, Y, W, Z0 = data
    if kind == "dask":
        da = pytest.importorskip("dask.array")
        src = sources.as_source(da.from_array(X.numpy(), chunks=(45, -1)))
    elif kind == "npy":
        np.save(tmp_path / "x.npy", X.numpy())
        src = sources.as_source(str(tmp_path / "x.npy"))
    else:
        pd = pytest.importorskip("pandas")
        pytest.importorskip("pyarrow")
        pd.DataFrame(X.numpy(), columns=[f"x{i}" for i in range(D)]).to_parquet(tmp_path / "x.parquet",
                                                                                  row_group_size=40)
        src = sources.as_source(str(tmp_path / "x.parquet"))
    lk = LearnableKernel(kernels()["ard"], D)
    out = []
    for X_in in (X, src):
        theta = torch.tensor(lk.theta0, requires_grad=True)
        st = kernel_statistics(lk.at, theta, Z0, X_in, Y, W, memory_budget=BUDGET)
        loss = st.gram.square().sum() + st.rhs.sum() + st.kdiag.sum() + st.colsum.sum()
        out.append((loss.detach(), torch.autograd.grad(loss, theta)[0]))
    assert float(abs(out[0][0] - out[1][0]) / abs(out[1][0])) < 1e-12
    assert rel(out[1][1], out[0][1]) < 1e-12


def test_bad_shapes_are_named(data):
    X, Y, W, Z = data
    lk = LearnableKernel(RBF(), D)
    theta = torch.tensor(lk.theta0)
    with pytest.raises(ValueError, match="Y must have shape"):
        kernel_statistics(lk.at, theta, Z, X, Y[:-1])
    with pytest.raises(ValueError, match="Z must have shape"):
        kernel_statistics(lk.at, theta, Z[:, :2], X, Y)
    with pytest.raises(ValueError, match="weights must have"):
        kernel_statistics(lk.at, theta, Z, X, Y, W[:-1])


# -- the SGPR bound -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(kernels()))
def test_sgpr_bound_from_statistics_equals_the_dense_bound(data, name):
    X, Y, _, Z0 = data
    lk = LearnableKernel(kernels()[name], D)
    jitter = 1e-6

    def run(blocked):
        theta = torch.tensor(lk.theta0, requires_grad=True)
        Z = Z0.clone().requires_grad_(True)
        log_noise = torch.tensor(np.log(0.3), dtype=torch.float64, requires_grad=True)
        noise = torch.exp(log_noise)
        if blocked:
            st = kernel_statistics(lk.at, theta, Z, X, Y, memory_budget=BUDGET)
            bound = sgpr_bound_from_statistics(st, lk.at(theta)(Z), noise, jitter)
        else:
            bound = _sgpr_bound(lk, theta, noise, Z, X, Y, jitter)
        return bound.detach(), torch.autograd.grad(bound, [theta, Z, log_noise])

    (vb, gb), (vd, gd) = run(True), run(False)
    assert float(abs(vb - vd) / abs(vd)) < 1e-10
    for a, b in zip(gb, gd):
        assert rel(a, b) < 1e-8


# -- Nyström ridge objectives ---------------------------------------------------------------------------
def _dense_ridge(k, X, Z, Y, w, alpha, fit_intercept):
    """(beta, intercept) of the Nyström ridge on rows weighted by ``w``, from the n x M matrix."""
    K = k(X, Z)
    n_w = w.sum()
    if fit_intercept:
        k_mean, y_mean = (w @ K) / n_w, (w @ Y) / n_w
        Kc, Yc = K - k_mean, Y - y_mean
    else:
        Kc, Yc = K, Y
    H = Kc.T @ (w[:, None] * Kc) + alpha * k(Z)
    beta = torch.linalg.solve(H, Kc.T @ (w[:, None] * Yc))
    c0 = (y_mean - k_mean @ beta) if fit_intercept else torch.zeros(Y.shape[1], dtype=Y.dtype)
    return K, Kc, Yc, H, beta, c0


def dense_gcv(k, X, Z, Y, w, alpha, fit_intercept):
    K, Kc, Yc, H, beta, _ = _dense_ridge(k, X, Z, Y, w, alpha, fit_intercept)
    n_w = w.sum()
    rss = (w[:, None] * (Yc - Kc @ beta) ** 2).sum(0)
    df = torch.trace(Kc @ torch.linalg.solve(H, Kc.T * w)) + (1.0 if fit_intercept else 0.0)
    return (rss / n_w).mean() / (1 - df / n_w) ** 2


def dense_holdout(k, X, Z, Y, W, alpha, fit_intercept):
    _, _, _, _, beta, c0 = _dense_ridge(k, X, Z, Y, W[:, 0], alpha, fit_intercept)
    f = k(X, Z) @ beta + c0
    return ((W[:, 1, None] * (Y - f) ** 2).sum(0) / W[:, 1].sum()).mean()


@pytest.mark.parametrize("objective", ["gcv", "holdout"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("name", list(kernels()))
def test_nystroem_objectives_equal_the_dense_computation(data, name, objective, fit_intercept):
    X, Y, W, Z0 = data
    lk = LearnableKernel(kernels()[name], D)
    W = W if objective == "holdout" else W[:, :1]

    def run(blocked):
        theta = torch.tensor(lk.theta0, requires_grad=True)
        Z = Z0.clone().requires_grad_(True)
        log_alpha = torch.tensor(np.log(0.7), dtype=torch.float64, requires_grad=True)
        alpha, k = torch.exp(log_alpha), lk.at(theta)
        if blocked:
            st = kernel_statistics(lk.at, theta, Z, X, Y, W, memory_budget=BUDGET)
            f = nystroem_gcv if objective == "gcv" else nystroem_holdout_error
            value = f(st, k(Z), alpha, fit_intercept=fit_intercept)
        elif objective == "gcv":
            value = dense_gcv(k, X, Z, Y, W[:, 0], alpha, fit_intercept)
        else:
            value = dense_holdout(k, X, Z, Y, W, alpha, fit_intercept)
        return value.detach(), torch.autograd.grad(value, [theta, Z, log_alpha])

    (vb, gb), (vd, gd) = run(True), run(False)
    assert float(abs(vb - vd) / abs(vd)) < 1e-10
    for a, b in zip(gb, gd):
        assert rel(a, b) < 1e-8


@pytest.mark.parametrize("stage", ["statistics", "gradient"])
def test_both_passes_report_their_blocks_and_stop_between_them(data, stage):
    from mercer.linalg import observe_blocks

    X, Y, _, Z = data
    lk = LearnableKernel(RBF(gamma=[0.3, 0.8, 0.5]), D)
    seen = []

    def observer(desc, done, total):
        seen.append((desc, done))
        if stage in (desc or "") and done < total:
            raise KeyboardInterrupt

    theta = torch.tensor(lk.theta0, requires_grad=True)
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        st = kernel_statistics(lk.at, theta, Z, X, Y, memory_budget=BUDGET, desc="probe")
        torch.autograd.grad(st.gram.sum() + st.rhs.sum(), theta)
    assert seen[-1] == (f"probe: {stage}", seen[-1][1]) and seen[-1][1] < N


@pytest.mark.parametrize("alpha", [0.7, 1e-6])
@pytest.mark.parametrize("extra", [0.0, 1.0])
def test_gcv_gradient_written_out_equals_autograd_through_the_factorisation(alpha, extra):
    """nystroem_gcv's backward (written out) against autograd through Cholesky and the solves, also
    where alpha is small and H = A + alpha K_MM ill-conditioned (as learned on bike: alpha / n ~ 1e-11)."""
    from mercer.models._hyperopt import chol_with_jitter
    from mercer.models.ridge._nystroem_cv import _GCV

    g = torch.Generator().manual_seed(1)
    n, m, t = 400, 25, 2
    F = torch.randn(n, m, generator=g, dtype=torch.float64)
    Y = torch.randn(n, t, generator=g, dtype=torch.float64)
    R = torch.randn(m, m, generator=g, dtype=torch.float64)
    leaves = [(F.T @ F), F.T @ Y, (Y * Y).sum(0), R @ R.T / m + 0.1 * torch.eye(m, dtype=torch.float64),
              torch.tensor(alpha, dtype=torch.float64)]
    leaves = [x.clone().requires_grad_() for x in leaves]
    A, b, yy, K, a = leaves
    n_w = torch.tensor(float(n), dtype=torch.float64)

    H = A + a * K
    L = chol_with_jitter(0.5 * (H + H.mT))
    beta = torch.cholesky_solve(b, L)
    rss = yy - 2.0 * (beta * b).sum(0) + (beta * (A @ beta)).sum(0)
    df = torch.cholesky_solve(A, L).diagonal().sum() + extra
    ref = (rss / n_w).mean() / (1.0 - df / n_w) ** 2
    value = _GCV.apply(A, b, yy, K, a, n_w, extra)
    assert float(abs(value - ref) / ref) < 1e-10
    for x, y in zip(torch.autograd.grad(value, leaves), torch.autograd.grad(ref, leaves)):
        assert rel(x, y) < 1e-8
