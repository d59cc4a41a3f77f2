"""Multiple kernel learning: ALIGNF against a reference QP, EasyMKL's QP, statistics, MKL vs single kernels."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.exceptions import ConvergenceWarning

from mercer.kernels import RBF, Intersection, Linear, Polynomial, encode_sets
from mercer.kernels._columns import Columns
from mercer.linalg import MemoryBudgetError
from mercer.models.mkl import MKLClassifier, MKLRegressor
from mercer.models.mkl._mkl import alignf_weights, easymkl_gamma, kernel_statistics
from mercer.models.ridge import KernelRidge

from conftest import cuda, readonly


pytestmark = pytest.mark.usefixtures("one_thread")


def two_groups(n=500, seed=0):
    """Signal in two feature groups with very different scales (group B is 20x larger)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, 3))
    B = 20.0 * rng.normal(size=(n, 3))
    y = np.sin(2 * A[:, 0]) + np.cos(A[:, 1]) + np.sin(B[:, 0] / 10) * (B[:, 1] / 20) + 0.1 * rng.normal(size=n)
    return readonly(np.hstack([A, B]), y)


GROUP_KERNELS = ([Columns(RBF(gamma=g), [0, 1, 2]) for g in (0.1, 1.0, 10.0)]
                 + [Columns(RBF(gamma=g), [3, 4, 5]) for g in (2.5e-4, 2.5e-3, 2.5e-2)])


def dense_stats(kernels, X, Y):
    n = X.shape[0]
    H = np.eye(n) - 1.0 / n
    Ks = [k(X).cpu().numpy() for k in kernels]
    Kc = [H @ K @ H for K in Ks]
    Yc = H @ Y
    F = np.array([[np.sum(a * b) for b in Ks] for a in Ks])
    Fc = np.array([[np.sum(a * b) for b in Kc] for a in Kc])
    a = np.array([np.sum(K * (Yc @ Yc.T)) for K in Kc])
    return F, Fc, a


@pytest.mark.parametrize("budget", [10**9, 30_000])
def test_kernel_statistics_match_dense(budget):
    X, y = two_groups(80)
    kernels = [RBF(gamma=0.05), Linear(), Columns(Polynomial(2, gamma=0.1), [0, 3])]
    Y = np.c_[y, y**2]
    s = kernel_statistics(kernels, torch.tensor(X), torch.tensor(Y), budget=budget)
    F, Fc, a = dense_stats(kernels, X, Y)
    assert np.allclose(s["F"], F, rtol=1e-10) and np.allclose(s["Fc"], Fc, rtol=1e-9) and np.allclose(s["a"], a, rtol=1e-9)
    # features mode: K_i = Phi_i Phi_i^T exactly
    feats = [torch.tensor(X), torch.tensor(X[:, :2] ** 2)]
    s2 = kernel_statistics([Linear(), Linear()], torch.tensor(X), torch.tensor(Y), budget=budget, features=feats)
    F2, Fc2, a2 = dense_stats([Linear(), Columns(Linear(), [0, 1])], X, Y)
    Fc2_ = dense_stats([Linear()], X, Y)
    assert np.allclose(s2["Fc"][0, 0], Fc2_[1][0, 0])
    K2 = X[:, :2] ** 2 @ (X[:, :2] ** 2).T
    H = np.eye(80) - 1 / 80
    assert np.isclose(s2["Fc"][1, 1], np.sum((H @ K2 @ H) ** 2))
    with pytest.raises(MemoryBudgetError, match="n_components"):
        kernel_statistics(kernels, torch.tensor(X), torch.tensor(Y), budget=100)


def test_alignf_qp_matches_reference_solver():
    rng = np.random.default_rng(1)
    for trial in range(5):
        G = rng.normal(size=(4, 7))
        M = G @ G.T
        a = M @ rng.normal(size=4)  # in the range of M, as an alignment vector always is
        v = alignf_weights(M, a)
        ref = scipy.optimize.minimize(lambda x: x @ M @ x - 2 * x @ a, np.ones(4) / 4, jac=lambda x: 2 * M @ x - 2 * a,
                                      bounds=[(0, None)] * 4, method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12})
        w = ref.x / np.linalg.norm(ref.x) if np.linalg.norm(ref.x) > 0 else ref.x
        assert np.all(v >= 0)
        assert np.allclose(v, w, atol=1e-5)
    # closed form when the unconstrained optimum is non-negative: v = M^{-1} a
    M = np.array([[2.0, 0.5], [0.5, 1.0]])
    a = M @ np.array([1.0, 2.0])
    assert np.allclose(alignf_weights(M, a), np.array([1.0, 2.0]) / np.sqrt(5))


def test_alignf_combination_is_at_least_as_aligned_as_any_base_kernel():
    X, y = two_groups(300)
    est = MKLRegressor(GROUP_KERNELS, alpha=0.1).fit(X, y)
    n = X.shape[0]
    H = np.eye(n) - 1 / n
    yc = y - y.mean()

    def alignment(K):
        Kc = H @ K @ H
        return yc @ Kc @ yc / (np.linalg.norm(Kc) * (yc @ yc))

    combined = alignment(est.kernel_(X).cpu().numpy())
    singles = [alignment(k(X).cpu().numpy()) for k in GROUP_KERNELS]
    assert np.allclose(singles, est.alignment_, rtol=1e-8)
    assert combined >= max(singles) - 1e-10
    rng = np.random.default_rng(0)
    for _ in range(5):
        w = rng.uniform(size=len(GROUP_KERNELS))
        K = sum(wi * k(X).cpu().numpy() / s for wi, k, s in zip(w, GROUP_KERNELS, est.kernel_scales_))
        assert combined >= alignment(K) - 1e-10
    assert est.weights_.sum() == pytest.approx(1.0) and np.all(est.weights_ >= 0)


def test_mkl_beats_the_best_single_kernel():
    X, y = two_groups(600)
    Xtr, ytr, Xte, yte = X[:400], y[:400], X[400:], y[400:]
    mkl = MKLRegressor(GROUP_KERNELS, alpha=0.1).fit(Xtr, ytr)
    mse_mkl = np.mean((mkl.predict(Xte) - yte) ** 2)
    singles = []
    for g in (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0):
        for alpha in (0.01, 0.1, 1.0):
            model = KernelRidge(alpha=alpha, kernel=RBF(gamma=g)).fit(Xtr, ytr)
            singles.append(np.mean((model.predict(Xte) - yte) ** 2))
    for k in GROUP_KERNELS:  # each base kernel alone (unit mean diagonal already)
        singles.append(np.mean((KernelRidge(alpha=0.1, kernel=k).fit(Xtr, ytr).predict(Xte) - yte) ** 2))
    assert mse_mkl < 0.8 * min(singles)
    # interpretable: both groups get weight, the A group's gamma=1 kernel the largest
    wA, wB = mkl.weights_[:3], mkl.weights_[3:]
    assert wA.sum() > 0.2 and wB.sum() > 0.1 and np.argmax(wA) == 1


def test_easymkl_qp_matches_reference_solver():
    rng = np.random.default_rng(3)
    n = 12
    G = rng.normal(size=(n, 5))
    K = G @ G.T
    y = np.where(rng.uniform(size=n) > 0.5, 1.0, -1.0)
    y[:2] = [1.0, -1.0]
    lam = 0.2
    Q = (1 - lam) * np.outer(y, y) * K + lam * np.eye(n)
    cons = [{"type": "eq", "fun": lambda g: g[y > 0].sum() - 1}, {"type": "eq", "fun": lambda g: g[y < 0].sum() - 1}]
    ref = scipy.optimize.minimize(lambda g: g @ Q @ g, np.full(n, 0.2), jac=lambda g: 2 * Q @ g, bounds=[(0, None)] * n,
                                  constraints=cons, method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
    Kt = torch.tensor(K)
    g, conv, _ = easymkl_gamma(lambda v: Kt @ v, torch.tensor(y), lam, max_iter=20000, tol=1e-12)
    g = g.cpu().numpy()
    assert conv
    assert g[y > 0].sum() == pytest.approx(1.0) and g[y < 0].sum() == pytest.approx(1.0) and np.all(g >= 0)
    assert g @ Q @ g == pytest.approx(ref.fun, rel=1e-6)


def test_easymkl_classifier_on_two_groups():
    X, y = two_groups(500)
    labels = readonly((y > np.median(y)).astype(int))
    clf = MKLClassifier(GROUP_KERNELS, alpha=0.1).fit(X[:350], labels[:350])
    assert clf.weights_.sum() == pytest.approx(1.0) and np.all(clf.weights_ >= 0)
    acc = clf.score(X[350:], labels[350:])
    assert acc > 0.75
    multi = readonly(np.digitize(y, np.quantile(y, [0.33, 0.66])))
    clf3 = MKLClassifier(GROUP_KERNELS, alpha=0.1).fit(X[:350], multi[:350])
    assert clf3.classes_.tolist() == [0, 1, 2] and clf3.decision_function(X[350:]).shape == (150, 3)


def test_set_kernel_and_feature_groups():
    rng = np.random.default_rng(0)
    n = 200
    sets = [set(rng.choice(12, size=4, replace=False).tolist()) for _ in range(n)]
    S, _ = encode_sets(sets, vocabulary=list(range(12)))
    S = S.toarray()
    Z = rng.normal(size=(n, 2))
    y = S[:, :3].sum(1) + np.sin(2 * Z[:, 0]) + 0.05 * rng.normal(size=n)
    X = readonly(np.hstack([S, Z]))
    kernels = [Columns(Intersection(), range(12)), Columns(RBF(gamma=1.0), [12, 13]), Columns(RBF(gamma=1.0), range(12))]
    est = MKLRegressor(kernels, alpha=0.1).fit(X[:150], y[:150])
    assert est.weights_[0] > 0 and est.weights_[1] > 0
    assert np.mean((est.predict(X[150:]) - y[150:]) ** 2) < 0.5 * np.var(y[150:])


def test_nystroem_features_for_large_n():
    X, y = two_groups(600)
    exact = MKLRegressor(GROUP_KERNELS, alpha=0.1).fit(X[:400], y[:400])
    ny = MKLRegressor(GROUP_KERNELS, alpha=0.1, n_components=150, random_state=0).fit(X[:400], y[:400])
    assert np.abs(ny.weights_ - exact.weights_).max() < 0.1
    mse_exact = np.mean((exact.predict(X[400:]) - y[400:]) ** 2)
    mse_ny = np.mean((ny.predict(X[400:]) - y[400:]) ** 2)
    assert mse_ny < 1.5 * mse_exact + 0.02
    # with as many landmarks as points the features reproduce the kernels: same weights
    full = MKLRegressor(GROUP_KERNELS[:2], alpha=0.1, n_components=100, random_state=0).fit(X[:100], y[:100])
    ref = MKLRegressor(GROUP_KERNELS[:2], alpha=0.1).fit(X[:100], y[:100])
    assert np.allclose(full.weights_, ref.weights_, atol=1e-5)


def test_zero_variance_target_and_non_aligned_kernels():
    X, _ = two_groups(60)
    y = readonly(np.ones(60))
    with pytest.warns(ConvergenceWarning, match="every learned weight is 0"):
        est = MKLRegressor(GROUP_KERNELS).fit(X, y)
    assert np.allclose(est.weights_, est.weights_[0])
    assert np.all(np.isfinite(est.predict(X)))


def test_bad_parameters_are_named():
    X, y = two_groups(40)
    labels = (y > 0).astype(int)
    for params, match in [(dict(kernels="rbf"), "'kernels' parameter"), (dict(kernels=[]), "'kernels' parameter"),
                          (dict(method="easymkl"), "'method' parameter"), (dict(n_components=0), "'n_components'"),
                          (dict(normalize="yes"), "'normalize'"), (dict(kernels=["precomputed"]), "precomputed")]:
        with pytest.raises(ValueError, match=match):
            MKLRegressor(**params).fit(X, y)
    for params, match in [(dict(lam=1.5), "'lam' parameter"), (dict(method="simplemkl"), "'method' parameter"),
                          (dict(max_iter=0), "'max_iter'")]:
        with pytest.raises(ValueError, match=match):
            MKLClassifier(**params).fit(X, labels)
    with pytest.raises(ValueError, match="only one class"):
        MKLClassifier().fit(X, np.zeros(40))
    with pytest.raises(ValueError, match="columns"):
        Columns(RBF(), [0, 0])
    with pytest.raises(ValueError, match="column 9 was selected"):
        MKLRegressor([Columns(RBF(), [9])]).fit(X, y)


def test_torch_in_torch_out():
    X, y = two_groups(80)
    est = MKLRegressor(GROUP_KERNELS).fit(torch.tensor(X), torch.tensor(y))
    out = est.predict(torch.tensor(X))
    assert isinstance(out, torch.Tensor)
    ref = MKLRegressor(GROUP_KERNELS).fit(X, y).predict(X)
    assert np.allclose(out.cpu().numpy(), ref)


@cuda
def test_cuda():
    X, y = two_groups(100)
    cpu = MKLRegressor(GROUP_KERNELS).fit(X, y)
    gpu = MKLRegressor(GROUP_KERNELS, device="cuda").fit(X, y)
    assert np.allclose(cpu.weights_, gpu.weights_, atol=1e-8)


def test_columns_kernel_is_the_kernel_on_the_selected_columns():
    rng = np.random.default_rng(0)
    X, Z = torch.tensor(rng.normal(size=(10, 5))), torch.tensor(rng.normal(size=(7, 5)))
    k = Columns(RBF(gamma=0.4), [4, 1])
    assert torch.allclose(k(X, Z), RBF(gamma=0.4)(X[:, [4, 1]], Z[:, [4, 1]]))
    assert torch.allclose(k.diag(X), torch.ones(10, dtype=torch.float64))
    assert Columns(RBF(), slice(0, 2)).columns == (0, 1)
    assert Columns(RBF(), [0, 1]) == Columns(RBF(), range(2))
    # gamma=None resolves to 1 / (number of selected columns)
    assert torch.allclose(Columns(RBF(), [0, 1])(X), RBF(gamma=0.5)(X[:, :2]))
    # with random Fourier features' frequency sampler: zero on the other columns
    W = k.sample_frequencies(5, 20, generator=torch.Generator().manual_seed(0))
    assert W.shape == (5, 20) and torch.all(W[[0, 2, 3]] == 0)
    for bad in ([], [-1], ["a"], slice(0, None)):
        with pytest.raises(ValueError, match="columns"):
            Columns(RBF(), bad)
    with pytest.raises(TypeError, match="mercer kernel"):
        Columns("rbf", [0])
