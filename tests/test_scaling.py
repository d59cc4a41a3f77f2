"""Kernel approximations (random features, Nyström, incomplete Cholesky), conjugate gradient, and
the Nyström / random-feature ridge solvers, each against an exact reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import readonly
from sklearn.linear_model import Ridge

from mercer.approx import (IncompleteCholesky, LandmarkFeatures, Nystroem, RandomFourierFeatures, pivoted_cholesky,
                           select_landmarks)
from mercer.kernels import RBF, Laplacian, Linear, Matern, Polynomial
from mercer.linalg import ConvergenceWarning, MemoryBudgetError, conjugate_gradient
from mercer.models import (KernelRidge, KernelRidgeClassifier, NystroemKernelRidge, NystroemKernelRidgeClassifier,
                           RandomFeatureRidge)


@pytest.fixture(scope="module")
def small(digits):
    X, y = digits
    return np.ascontiguousarray(X[:300] / 16.0), y[:300]


def hoeffding_bound(m: int, n_pairs: int, k0: float = 1.0, delta: float = 1e-3) -> float:
    """With probability 1 - delta, every one of n_pairs estimates (means of m terms in [-k0, k0])
    is within this distance of its expectation (Hoeffding + union bound)."""
    return k0 * math.sqrt(2.0 * math.log(2.0 * n_pairs / delta) / m)


# -- random Fourier features ---------------------------------------------------------------
@pytest.mark.parametrize("kernel", [RBF(gamma=0.05), Laplacian(gamma=0.02), Matern(nu=1.5, length_scale=4.0),
                                    Matern(nu=0.5, length_scale=6.0), 2.0 * RBF(gamma=0.05) + Laplacian(gamma=0.02),
                                    RBF(gamma=0.03) * Matern(nu=2.5, length_scale=5.0)], ids=repr)
@pytest.mark.parametrize("variant", ["cossin", "phase"])
def test_rff_gram_within_hoeffding_bound(small, kernel, variant):
    X = small[0][:120]
    m = 3000
    rff = RandomFourierFeatures(kernel, m, variant=variant, random_state=0).fit(X)
    Z = rff.transform(X)
    K = kernel(X).cpu().numpy()
    k0 = rff.amplitude_
    n_pairs = X.shape[0] * (X.shape[0] + 1) // 2
    # cos/sin: each term cos(w^T(x-y)) in [-1, 1]; phase: 2cos(.)cos(.) in [-2, 2]
    bound = hoeffding_bound(m, n_pairs, k0 * (1.0 if variant == "cossin" else 2.0))
    assert np.abs(Z @ Z.T - K).max() < bound
    assert Z.shape == (120, rff.n_features_out_) and rff.n_features_out_ == (2 * m if variant == "cossin" else m)


def test_rff_error_falls_like_one_over_sqrt_m(small):
    X = small[0][:150]
    k = RBF(gamma=0.05)
    K = k(X).cpu().numpy()
    ms = [64, 256, 1024, 4096]
    errs = []
    for m in ms:
        e = [np.abs((Z := RandomFourierFeatures(k, m, random_state=s).fit_transform(X)) @ Z.T - K).mean()
             for s in range(3)]
        errs.append(np.mean(e))
    slope = np.polyfit(np.log(ms), np.log(errs), 1)[0]
    assert -0.6 < slope < -0.4, slope


def test_orthogonal_features_have_lower_error(small):
    X = small[0][:150]
    k = RBF(gamma=0.05)
    K = k(X).cpu().numpy()

    def err(orth):
        return np.mean([np.abs((Z := RandomFourierFeatures(k, 256, orthogonal=orth, random_state=s).fit_transform(X))
                               @ Z.T - K).mean() for s in range(4)])
    assert err(True) < err(False)


def test_rff_composites_and_scale():
    X = np.random.default_rng(0).normal(size=(50, 3))
    k = 3.0 * RBF(gamma=0.2)
    rff = RandomFourierFeatures(k, 20000, random_state=1).fit(X)
    assert rff.amplitude_ == pytest.approx(3.0)
    Z = rff.transform(X)
    assert np.abs(Z @ Z.T - k(X).cpu().numpy()).max() < hoeffding_bound(20000, 1275, 3.0)


def test_rff_is_reproducible_and_keeps_input(small):
    X = readonly(small[0][:40])
    a = RandomFourierFeatures("rbf", 16, gamma=0.1, random_state=3).fit_transform(X)
    b = RandomFourierFeatures("rbf", 16, gamma=0.1, random_state=3).fit_transform(X)
    np.testing.assert_array_equal(a, b)
    Xt = torch.tensor(X)
    out = RandomFourierFeatures("rbf", 16, gamma=0.1, random_state=3).fit_transform(Xt)
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.cpu().numpy(), a)


@pytest.mark.parametrize("kernel", [Linear(), Polynomial(degree=2), RBF() + Linear()], ids=repr)
def test_rff_refuses_non_stationary_kernels(kernel):
    with pytest.raises(ValueError, match="stationary kernel"):
        RandomFourierFeatures(kernel, 10).fit(np.ones((5, 2)))


def test_rff_bad_parameters():
    X = np.ones((5, 2))
    with pytest.raises(ValueError, match=r"'n_components' parameter of RandomFourierFeatures must be an int in the range \[1, inf\)\. Got 0"):
        RandomFourierFeatures(n_components=0).fit(X)
    with pytest.raises(ValueError, match="'variant'"):
        RandomFourierFeatures(variant="sin").fit(X)
    with pytest.raises(ValueError, match="isotropic"):
        RandomFourierFeatures(Laplacian(), 4, orthogonal=True).fit(X)


# -- Nyström and landmark rules ----------------------------------------------------------------
@pytest.mark.parametrize("method", ["eig", "cholesky"])
def test_nystroem_with_all_points_is_exact(small, method):
    X = small[0][:150]
    k = RBF(gamma=0.05)
    Z = Nystroem(k, 150, method=method, random_state=0).fit_transform(X)
    np.testing.assert_allclose(Z @ Z.T, k(X).cpu().numpy(), atol=1e-9)


def _nys_error(X, rule, M, k, seed=0):
    Z = Nystroem(k, M, landmarks=rule, random_state=seed).fit_transform(X)
    return np.abs(Z @ Z.T - k(X).cpu().numpy()).mean()


@pytest.mark.parametrize("rule", ["uniform", "kmeans++", "leverage", "greedy"])
def test_nystroem_rules_approximate_and_improve_with_m(small, rule):
    X = small[0]
    k = RBF(gamma=0.05)
    e20, e80 = _nys_error(X, rule, 20, k), _nys_error(X, rule, 80, k)
    assert e80 < 0.6 * e20
    assert e80 < 0.01


def test_informed_rules_beat_uniform_on_average(small):
    X = small[0]
    k = RBF(gamma=0.05)
    uniform = np.mean([_nys_error(X, "uniform", 30, k, s) for s in range(4)])
    assert _nys_error(X, "greedy", 30, k) < uniform
    assert np.mean([_nys_error(X, "kmeans++", 30, k, s) for s in range(4)]) < uniform


def test_nystroem_kmeans_rule(small):
    pytest.importorskip("mercer.models.cluster")
    X = small[0]
    k = RBF(gamma=0.05)
    ny = Nystroem(k, 30, landmarks="kmeans", random_state=0).fit(X)
    assert ny.component_indices_ is None and ny.landmarks_.shape == (30, 64)
    assert _nys_error(X, "kmeans", 30, k) < np.mean([_nys_error(X, "uniform", 30, k, s) for s in range(4)])


def test_nystroem_user_landmarks_and_duplicates(small):
    X = small[0]
    k = RBF(gamma=0.05)
    L = np.vstack([X[:10], X[:10]])  # duplicates: K_ZZ is singular
    ny = Nystroem(k, landmarks=readonly(L)).fit(X)
    assert ny.rank_ == 10 and ny.component_indices_ is None
    Z = ny.transform(X)
    ref = Nystroem(k, landmarks=X[:10]).fit(X).transform(X)
    np.testing.assert_allclose(Z @ Z.T, ref @ ref.T, atol=1e-9)


def test_nystroem_bad_input(small):
    X = small[0][:20]
    with pytest.raises(ValueError, match=r"'n_components' parameter of Nystroem must be at most n_samples = 20\. Got 25"):
        Nystroem(n_components=25).fit(X)
    with pytest.raises(ValueError, match=r"'landmarks' parameter of Nystroem must have as many columns as X has features \(64\)\. Got 3"):
        Nystroem(landmarks=np.ones((4, 3))).fit(X)
    with pytest.raises(ValueError, match=r"'landmarks' parameter of Nystroem must be a str among \{'uniform', .*\} or an array-like .* Got 'random'"):
        Nystroem(landmarks="random").fit(X)
    with pytest.raises(ValueError, match="'method'"):
        Nystroem(method="svd").fit(X)
    with pytest.raises(MemoryBudgetError, match="fewer landmarks"):
        Nystroem(n_components=20, memory_budget=1000).fit(X)


def test_nystroem_tiny_budget_matches_default(small):
    X = small[0]
    a = Nystroem(RBF(gamma=0.05), 40, random_state=0).fit_transform(X)
    b = Nystroem(RBF(gamma=0.05), 40, random_state=0, memory_budget=200_000).fit_transform(X)
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_landmark_features_are_kernel_columns(small):
    X = small[0]
    lf = LandmarkFeatures("rbf", 12, gamma=0.05, random_state=0).fit(X)
    np.testing.assert_allclose(lf.transform(X), RBF(gamma=0.05)(X, lf.landmarks_).cpu().numpy())
    np.testing.assert_array_equal(lf.landmarks_.cpu().numpy(), X[lf.component_indices_])


def test_leverage_scores_prefer_isolated_points():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 0.05, size=(400, 2)), rng.normal(5, 0.05, size=(4, 2))])  # 4 outliers
    k = RBF(gamma=1.0)
    hits = 0
    for s in range(5):
        Z, idx = select_landmarks(torch.as_tensor(X), 10, "leverage", kernel=k, generator=torch.Generator().manual_seed(s))
        hits += int((idx >= 400).sum())
    assert hits >= 10  # uniform sampling would pick ~0.5 of them in 5 draws


# -- incomplete Cholesky -------------------------------------------------------------------------
@pytest.mark.parametrize("rule", ["diag", "greedy"])
def test_pivoted_cholesky_full_rank_is_exact(rule):
    X = torch.as_tensor(np.random.default_rng(1).normal(size=(40, 3)))
    k = RBF(gamma=0.3)
    res = pivoted_cholesky(k, X, 40, rule=rule, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose((res.G @ res.G.T).cpu().numpy(), k(X).cpu().numpy(), atol=1e-8)
    assert np.all(np.diff(res.residual_trace.cpu().numpy()) <= 1e-12)


def test_incomplete_cholesky_trace_and_out_of_sample(small):
    X = small[0]
    k = RBF(gamma=0.05)
    ic = IncompleteCholesky(k, 40)
    G = ic.fit_transform(X)
    K = k(X).cpu().numpy()
    assert ic.residual_trace_[-1] == pytest.approx(np.trace(K - G @ G.T), rel=1e-8)
    np.testing.assert_allclose(ic.transform(X), G, atol=1e-10)  # the map on training rows is G itself
    np.testing.assert_allclose(G[ic.pivots_] @ G[ic.pivots_].T, K[np.ix_(ic.pivots_, ic.pivots_)], atol=1e-10)
    assert np.allclose(np.triu(ic.factor_.cpu().numpy(), 1), 0)


def test_incomplete_cholesky_tol_stops_early():
    X = np.random.default_rng(0).normal(size=(100, 2))
    ic = IncompleteCholesky(Polynomial(degree=2, gamma=1.0, coef0=1.0), 50, tol=1e-10).fit(X)
    assert ic.n_components_ == 6  # a degree-2 polynomial kernel on 2 inputs has rank C(4, 2) = 6


def test_incomplete_cholesky_bad_input():
    with pytest.raises(ValueError, match=r"'n_components' parameter of IncompleteCholesky must be at most n_samples = 5\. Got 10"):
        IncompleteCholesky(n_components=10).fit(np.ones((5, 2)))
    with pytest.raises(ValueError, match="'tol'"):
        IncompleteCholesky(n_components=2, tol=2.0).fit(np.ones((5, 2)))
    with pytest.raises(MemoryBudgetError, match="lower the rank"):
        IncompleteCholesky(n_components=50, memory_budget=1000).fit(np.random.rand(100, 2))


# -- conjugate gradient --------------------------------------------------------------------------
def _spd(n, cond, seed=0):
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return Q @ torch.diag(torch.logspace(0, math.log10(cond), n, dtype=torch.float64)) @ Q.T


def test_cg_solves_several_right_hand_sides():
    A = _spd(60, 1e3)
    B = torch.randn(60, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    B[:, 2] = 0.0
    res = conjugate_gradient(lambda V: A @ V, B, tol=1e-12, max_iter=500)
    assert res.converged and res.n_iter <= 200
    np.testing.assert_allclose(res.x.cpu().numpy(), torch.linalg.solve(A, B).cpu().numpy(), atol=1e-8)
    assert torch.all(res.x[:, 2] == 0)


def test_cg_with_exact_preconditioner_converges_in_one_step():
    A = _spd(50, 1e6)
    b = torch.randn(50, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    Ainv = torch.linalg.inv(A)
    res = conjugate_gradient(lambda V: A @ V, b, preconditioner=lambda R: Ainv @ R, tol=1e-8)
    assert res.n_iter == 1 and res.converged


def test_cg_reports_non_convergence():
    A = _spd(80, 1e8)
    b = torch.ones(80, dtype=torch.float64)
    res = conjugate_gradient(lambda V: A @ V, b, tol=1e-14, max_iter=5)
    assert not res.converged and res.n_iter == 5 and len(res.history) == 5
    assert float(res.residual[0]) == pytest.approx(float(torch.linalg.norm(b - A @ res.x) / torch.linalg.norm(b)),
                                                   rel=1e-6)


# -- Nyström kernel ridge ------------------------------------------------------------------------
def _direct_nystroem(k, X, Z, y, alpha, w=None, intercept=False):
    """Dense reference: (K_nM^T W K_nM + alpha K_MM) beta = K_nM^T W y; with an intercept, the same
    on the centred K_nM and y (weighted means), and b = mean(y) - mean(K_nM) beta. Returns (beta, b)."""
    Knm = k(X, Z).cpu().numpy()
    W = np.ones(len(X)) if w is None else w
    k_mean, y_mean = (W @ Knm / W.sum(), W @ y / W.sum()) if intercept else (np.zeros(Knm.shape[1]), 0.0)
    Kc, yc = Knm - k_mean, y - y_mean
    H = Kc.T @ (W[:, None] * Kc) + alpha * k(Z).cpu().numpy()
    beta = np.linalg.lstsq(H, Kc.T @ (W * yc), rcond=None)[0]
    return beta, y_mean - k_mean @ beta


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_nystroem_krr_with_all_centres_equals_exact_krr(diabetes, fit_intercept):
    X, y = diabetes
    ref = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.5, fit_intercept=fit_intercept).fit(X, y)
    exact = ref.predict(X)
    m = NystroemKernelRidge(alpha=0.1, kernel="rbf", gamma=0.5, n_centers=len(X), dtype="float64", tol=1e-10,
                            solver="cg", fit_intercept=fit_intercept, random_state=0).fit(X, y)
    np.testing.assert_allclose(m.predict(X), exact, rtol=1e-7, atol=1e-7 * np.abs(exact).max())
    assert m.intercept_ == pytest.approx(ref.intercept_, rel=1e-7, abs=1e-9)
    assert (m.intercept_ != 0.0) == fit_intercept
    # the FALKON preconditioner is exact when the centres are all the points: one CG step (two or
    # three with the intercept: the centring is a rank-one change the preconditioner does not see)
    one = NystroemKernelRidge(alpha=0.1, kernel="rbf", gamma=0.5, n_centers=len(X), dtype="float64", tol=1e-6,
                              solver="cg", fit_intercept=fit_intercept, random_state=0).fit(X, y)
    assert one.n_iter_[0] == 1 if not fit_intercept else one.n_iter_[0] <= 3
    np.testing.assert_allclose(one.predict(X), exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("solver", ["cg", "direct"])
def test_nystroem_krr_matches_the_dense_normal_equations(small, solver, fit_intercept):
    X, y = small
    y = y.astype(float) + 100.0 * fit_intercept  # an offset only the intercept absorbs
    Z = X[::7]
    k = RBF(gamma=0.05)
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=len(y))
    beta, b = _direct_nystroem(k, X, Z, y, 0.3, w, intercept=fit_intercept)
    m = NystroemKernelRidge(alpha=0.3, kernel=k, centers=readonly(Z), dtype="float64", tol=1e-12, max_iter=500,
                            solver=solver, fit_intercept=fit_intercept).fit(readonly(X), readonly(y), sample_weight=w)
    assert m.solver_ == solver
    assert m.intercept_ == pytest.approx(b, rel=1e-7, abs=1e-12)
    np.testing.assert_allclose(m.predict(X), k(X, Z).cpu().numpy() @ beta + b, rtol=1e-6, atol=1e-6)


def test_nystroem_krr_intercept_equals_sklearn_nystroem_ridge_pipeline(small):
    """Same centres, kernel and alpha: Ridge on Nystroem's features phi = k(., Z) K_MM^{-1/2} has
    the objective ||y - K_nM beta - b||^2 + alpha beta^T K_MM beta (w = K_MM^{1/2} beta): one alpha."""
    from sklearn.kernel_approximation import Nystroem as SkNystroem
    from sklearn.pipeline import make_pipeline

    X, y = small
    y = y.astype(float) + 10.0
    pipe = make_pipeline(SkNystroem(gamma=0.05, n_components=40, random_state=0), Ridge(alpha=0.5)).fit(X, y)
    m = NystroemKernelRidge(alpha=0.5, gamma=0.05, centers=pipe[0].components_, dtype="float64",
                            fit_intercept=True).fit(X, y)
    np.testing.assert_allclose(m.predict(X), pipe.predict(X), rtol=1e-6, atol=1e-6)
    assert m.intercept_ == pytest.approx(pipe[-1].intercept_, rel=1e-6)


def test_integer_weights_equal_repeated_rows_with_fixed_centres(small):
    X, y = small
    y = y.astype(float)
    Z = X[:25]
    w = np.random.default_rng(1).integers(0, 3, size=len(y))
    a = NystroemKernelRidge(alpha=0.5, kernel="rbf", gamma=0.05, centers=Z, dtype="float64", tol=1e-12,
                            max_iter=500).fit(X, y, sample_weight=w)
    b = NystroemKernelRidge(alpha=0.5, kernel="rbf", gamma=0.05, centers=Z, dtype="float64", tol=1e-12,
                            max_iter=500).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=1e-6, atol=1e-8)


def test_float32_tiles_are_close_to_float64(small):
    X, y = small
    y = y.astype(float)
    kw = dict(alpha=0.5, kernel="rbf", gamma=0.05, n_centers=60, random_state=0, tol=1e-8, max_iter=300, solver="cg")
    p64 = NystroemKernelRidge(dtype="float64", **kw).fit(X, y).predict(X)
    p32 = NystroemKernelRidge(dtype="float32", **kw).fit(X, y).predict(X)
    # float32 tiles plus FALKON's eps * M shift of K_MM: agreement to a few 1e-3 on this ill-conditioned Gram
    assert np.abs(p32 - p64).max() < 5e-3 * np.abs(p64).max()


@pytest.mark.parametrize("solver", ["cg", "direct"])
def test_multi_output_with_per_target_alpha_equals_separate_fits(small, solver):
    X, y = small
    Y = np.column_stack([y, (y % 3).astype(float)])
    kw = dict(kernel="rbf", gamma=0.05, n_centers=50, random_state=0, dtype="float64", tol=1e-12, max_iter=500,
              solver=solver)
    both = NystroemKernelRidge(alpha=[0.1, 2.0], **kw).fit(X, Y).predict(X)
    np.testing.assert_allclose(both[:, 0], NystroemKernelRidge(alpha=0.1, **kw).fit(X, Y[:, 0]).predict(X),
                               rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(both[:, 1], NystroemKernelRidge(alpha=2.0, **kw).fit(X, Y[:, 1]).predict(X),
                               rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("solver", ["cg", "direct"])
def test_nystroem_krr_tiny_budget_matches_default(small, solver):
    X, y = small
    kw = dict(alpha=0.3, kernel="rbf", gamma=0.05, n_centers=40, random_state=0, dtype="float64", tol=1e-12,
              max_iter=500, solver=solver)
    a = NystroemKernelRidge(**kw).fit(X, y).predict(X)
    b = NystroemKernelRidge(memory_budget=300_000, **kw).fit(X, y).predict(X)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("rule", ["uniform", "kmeans++", "leverage", "greedy"])
def test_every_centre_rule_gives_a_good_model(digits, rule):
    X, y = digits
    clf = NystroemKernelRidgeClassifier(alpha=1e-2, kernel="rbf", gamma=0.05, n_centers=300, centers=rule,
                                        random_state=0).fit(X[:1200], y[:1200])
    assert clf.score(X[1200:], y[1200:]) > 0.93


def test_classifier_with_all_centres_equals_kernel_ridge_classifier(breast_cancer):
    X, y = breast_cancer
    X = (X - X.mean(0)) / X.std(0)
    ref = KernelRidgeClassifier(alpha=1.0, kernel="rbf", gamma=0.02).fit(X, y)
    m = NystroemKernelRidgeClassifier(alpha=1.0, kernel="rbf", gamma=0.02, n_centers=len(X), dtype="float64",
                                      tol=1e-10, random_state=0).fit(X, y)
    np.testing.assert_allclose(m.decision_function(X), ref.decision_function(X), atol=1e-6)
    np.testing.assert_array_equal(m.predict(X), ref.predict(X))


def test_nystroem_krr_warns_when_cg_stops_early(small):
    X, y = small
    with pytest.warns(ConvergenceWarning, match=r"stopped after 2 iterations \(max_iter\) with relative residual"):
        m = NystroemKernelRidge(alpha=1e-6, kernel="rbf", gamma=0.05, n_centers=100, max_iter=2, tol=1e-12,
                                solver="cg", random_state=0).fit(X, y)
    assert m.n_iter_[0] == 2 and m.residual_[0] > 1e-12
    assert np.isfinite(m.predict(X)).all()


def test_direct_and_cg_solvers_agree_and_auto_picks_by_m(small):
    X, y = small
    kw = dict(alpha=0.2, kernel="rbf", gamma=0.05, n_centers=80, random_state=0, dtype="float64")
    cg = NystroemKernelRidge(solver="cg", tol=1e-12, max_iter=1000, **kw).fit(X, y)
    direct = NystroemKernelRidge(**kw).fit(X, y)
    assert direct.solver_ == "direct" and cg.solver_ == "cg" and direct.n_iter_[0] == 1
    np.testing.assert_allclose(direct.predict(X), cg.predict(X), rtol=1e-7, atol=1e-7)


def test_nystroem_krr_bad_input(small):
    X, y = small
    with pytest.raises(ValueError, match=r"The 'n_centers' parameter of NystroemKernelRidge must be at most n_samples = \d+. Got 500 instead."):
        NystroemKernelRidge(n_centers=500).fit(X, y)
    with pytest.raises(ValueError, match=r"'centers' parameter of NystroemKernelRidge must have as many columns as X has features \(64\)\. Got 2"):
        NystroemKernelRidge(centers=np.ones((3, 2))).fit(X, y)
    with pytest.raises(MemoryBudgetError, match="Use fewer centres"):
        NystroemKernelRidge(n_centers=200, memory_budget=100_000).fit(X, y)
    with pytest.raises(MemoryBudgetError, match="Use fewer centres"):
        NystroemKernelRidge(n_centers=200, solver="cg", memory_budget=100_000).fit(X, y)
    with pytest.raises(ValueError, match=r"'alpha' parameter of NystroemKernelRidge must be a float in the range \[0, inf\).* Got -1.0"):
        NystroemKernelRidge(alpha=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="'solver' parameter of NystroemKernelRidge must be a str among .* Got 'lsqr' instead."):
        NystroemKernelRidge(solver="lsqr").fit(X, y)
    with pytest.raises(ValueError, match="'preconditioner' parameter of NystroemKernelRidge .* Got 'jacobi'"):
        NystroemKernelRidge(preconditioner="jacobi").fit(X, y)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        NystroemKernelRidge().fit(Xn, y)


def test_nystroem_krr_torch_in_torch_out(small):
    X, y = small
    m = NystroemKernelRidge(kernel="rbf", gamma=0.05, n_centers=30, random_state=0).fit(torch.as_tensor(X),
                                                                                          torch.as_tensor(y * 1.0))
    out = m.predict(torch.as_tensor(X))
    assert isinstance(out, torch.Tensor) and out.shape == (len(X),)


@pytest.mark.gpu
def test_nystroem_krr_on_cuda(small):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    X, y = small
    kw = dict(alpha=0.3, kernel="rbf", gamma=0.05, n_centers=40, random_state=0, dtype="float64", tol=1e-12)
    cpu = NystroemKernelRidge(centers=X[:40], **{k: v for k, v in kw.items() if k != "n_centers"}).fit(X, y)
    gpu = NystroemKernelRidge(centers=X[:40], device="cuda", **{k: v for k, v in kw.items() if k != "n_centers"}
                              ).fit(X, y)
    np.testing.assert_allclose(gpu.predict(X), cpu.predict(X), rtol=1e-8, atol=1e-8)


# -- random-feature ridge ------------------------------------------------------------------------
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_random_feature_ridge_is_ridge_on_the_features(small, fit_intercept):
    X, y = small
    w = np.random.default_rng(0).uniform(0.0, 2.0, size=len(y))
    m = RandomFeatureRidge(alpha=0.7, kernel="rbf", gamma=0.05, n_components=64, random_state=0,
                           fit_intercept=fit_intercept, memory_budget=600_000).fit(X, y + 50.0, sample_weight=w)
    Z = m.features_.transform(X)
    ref = Ridge(alpha=0.7, fit_intercept=fit_intercept, solver="cholesky").fit(Z, y + 50.0, sample_weight=w)
    np.testing.assert_allclose(m.predict(X), ref.predict(Z), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(m.coef_.cpu().numpy(), ref.coef_, rtol=1e-7, atol=1e-9)
    assert m.intercept_ == pytest.approx(ref.intercept_, rel=1e-9, abs=1e-12)


def test_random_feature_ridge_tends_to_exact_krr(small):
    X, y = small
    y = y.astype(float)
    exact = KernelRidge(alpha=1.0, kernel="rbf", gamma=0.05, fit_intercept=True).fit(X, y).predict(X)
    errs = [np.abs(RandomFeatureRidge(alpha=1.0, gamma=0.05, n_components=m, random_state=0).fit(X, y).predict(X)
                   - exact).mean() for m in (50, 2000)]
    assert errs[1] < 0.25 * errs[0]


def test_random_feature_ridge_refuses_non_stationary():
    with pytest.raises(ValueError, match="stationary kernel"):
        RandomFeatureRidge(kernel="poly").fit(np.ones((4, 2)), np.ones(4))


def test_tiny_budget_random_feature_ridge(small):
    X, y = small
    a = RandomFeatureRidge(gamma=0.05, n_components=30, random_state=0).fit(X, y).predict(X)
    b = RandomFeatureRidge(gamma=0.05, n_components=30, random_state=0, memory_budget=200_000).fit(X, y).predict(X)
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)

