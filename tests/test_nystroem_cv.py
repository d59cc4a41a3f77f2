"""NystroemKernelRidgeCV (kernel, alpha and centres learned from blocked GCV / hold-out objectives)
and SparseGPRegressor learning through the blocked statistics at budgets that refused it before."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import mercer
from mercer import io, sources
from mercer.kernels import RBF
from mercer.linalg import MemoryBudgetError
from mercer.models.ridge import NystroemKernelRidge, NystroemKernelRidgeCV


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(0)
    X = rng.randn(400, 5)
    f = lambda A: np.sin(2 * A[:, 0]) + np.cos(2 * A[:, 1]) + 3.0  # noqa: E731
    y = f(X) + 0.1 * rng.randn(400)
    Xs = rng.randn(300, 5)
    X.flags.writeable = False
    y.flags.writeable = False
    return X, y, Xs, f(Xs)


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - b) ** 2)))


@pytest.mark.parametrize("objective", ["gcv", pytest.param("holdout", marks=pytest.mark.slow)])
def test_learns_which_features_matter_and_beats_the_default(data, objective):
    X, y, Xs, ys = data
    model = NystroemKernelRidgeCV(kernel=RBF(gamma=[0.2] * 5), n_centers=30, objective=objective, max_iter=25,
                                  dtype="float64", random_state=0).fit(X, y)
    gamma = np.asarray(model.kernel_.gamma)
    assert gamma[:2].min() > 10 * gamma[2:].max()
    default = NystroemKernelRidge(n_centers=30, random_state=0, dtype="float64").fit(X, y)
    assert rmse(model.predict(Xs), ys) < 0.5 * rmse(default.predict(Xs), ys)
    assert model.objective_path_.size == model.n_evals_
    assert model.cv_error_ == pytest.approx(np.nanmin(model.objective_path_))
    assert model.cv_error_ < model.objective_path_[0]


def test_without_optimizer_it_is_the_nystroem_ridge_with_the_same_centres(data):
    X, y, Xs, _ = data
    cv = NystroemKernelRidgeCV(alpha=0.3, gamma=0.5, n_centers=40, optimizer=None, dtype="float64",
                               random_state=0).fit(X, y)
    ref = NystroemKernelRidge(alpha=0.3, gamma=0.5, n_centers=40, dtype="float64", random_state=0).fit(X, y)
    assert torch.equal(cv.centers_.cpu(), ref.centers_.cpu().to(torch.float64))
    np.testing.assert_allclose(cv.predict(Xs), ref.predict(Xs), rtol=1e-10, atol=1e-10)
    assert cv.alpha_ == 0.3 and cv.n_evals_ == 1


def test_gcv_of_the_learned_model_is_that_of_its_residuals(data):
    """The GCV the optimiser saw equals the one of the final model's training residuals."""
    X, y, _, _ = data
    model = NystroemKernelRidgeCV(n_centers=40, max_iter=10, dtype="float64", solver="direct",
                                  random_state=0).fit(X, y)
    est = model.estimator_
    K = est.kernel_(torch.as_tensor(X), est.centers_.to(torch.float64))
    Kc = K - K.mean(0)
    H = Kc.T @ Kc + model.alpha_ * est.kernel_(est.centers_.to(torch.float64))
    df = float(torch.trace(torch.linalg.solve(H, Kc.T @ Kc))) + 1.0
    rss = np.sum((y - model.predict(X)) ** 2)
    assert model.cv_error_ == pytest.approx((rss / len(y)) / (1 - df / len(y)) ** 2, rel=1e-6)


def test_gcv_refuses_a_point_whose_residuals_are_rounding():
    """Where A_c + alpha K_MM is ill-conditioned, |beta| is huge and rss = yy - 2 beta^T b + beta^T A beta
    is rounding (it went negative on an optimiser's path, which then took it for the best point): the
    GCV refuses such a point, and elsewhere equals the GCV of the residuals computed row by row."""
    from mercer.linalg import kernel_statistics
    from mercer.models.ridge._nystroem_cv import _centred, _solve, nystroem_gcv

    rng = np.random.RandomState(0)
    X = torch.tensor(rng.randn(400, 5))
    y = (torch.sin(2 * X[:, 0]) + 3.0 + 0.1 * torch.tensor(rng.randn(400)))[:, None]
    Z = X[:30]
    for gamma, alpha, refused in ((1e-2, 1e-8, False), (1e-3, 1e-8, True), (1e-3, 1e-12, True), (1e-4, 1e-8, False)):
        k = RBF(gamma=gamma)
        stats = kernel_statistics(lambda t, k=k: k, torch.zeros(0, dtype=torch.float64), Z, X, y)
        K_mm = k(Z, Z)
        A, b, _, k_mean, y_mean = _centred(stats, 0, True)
        L, beta = _solve(A, b, K_mm, alpha)
        rss = float((((y - y_mean) - (k(X, Z) - k_mean) @ beta) ** 2).sum())  # no cancellation
        s = 1.0 - (float(torch.cholesky_solve(A, L).diagonal().sum()) + 1.0) / 400
        if refused:
            with pytest.raises(FloatingPointError, match="rounding error"):
                nystroem_gcv(stats, K_mm, alpha)
        else:
            assert float(nystroem_gcv(stats, K_mm, alpha)) == pytest.approx(rss / 400 / s**2, rel=1e-3)


@pytest.mark.parametrize("coarse_rows", [None, [150]])
def test_streamed_from_disk_learns_the_same(data, tmp_path, coarse_rows):
    X, y, _, _ = data
    np.save(tmp_path / "x.npy", X)
    kw = dict(kernel=RBF(gamma=[0.2] * 5), n_centers=30, max_iter=8, dtype="float64", random_state=0,
              memory_budget=2**20, coarse_rows=coarse_rows)
    mem = NystroemKernelRidgeCV(**kw).fit(X, y)
    disk = NystroemKernelRidgeCV(**kw).fit(sources.as_source(str(tmp_path / "x.npy")), y)
    np.testing.assert_allclose(disk.theta_, mem.theta_, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_learning_the_centres_lowers_the_objective(data):
    X, y, _, _ = data
    kw = dict(n_centers=10, max_iter=30, dtype="float64", random_state=0)
    fixed = NystroemKernelRidgeCV(**kw).fit(X, y)
    moved = NystroemKernelRidgeCV(learn_centers=True, **kw).fit(X, y)
    assert moved.cv_error_ < fixed.cv_error_
    assert not np.allclose(moved.centers_.cpu().numpy(), fixed.centers_.cpu().numpy())
    assert np.allclose(moved.estimator_.centers_.cpu().numpy(), moved.centers_.cpu().numpy())


def test_in_a_pipeline_and_a_grid_search_and_saved(data, tmp_path):
    X, y, Xs, _ = data
    pipe = make_pipeline(StandardScaler(), NystroemKernelRidgeCV(max_iter=3, dtype="float64", random_state=0))
    search = GridSearchCV(pipe, {"nystroemkernelridgecv__n_centers": [10, 20]}, cv=2).fit(X, y)
    assert search.best_params_["nystroemkernelridgecv__n_centers"] in (10, 20)
    model = mercer.NystroemKernelRidgeCV(n_centers=20, max_iter=5, random_state=0).fit(X, y)
    io.save(model, tmp_path / "m.zip")
    back = io.load(tmp_path / "m.zip")
    np.testing.assert_array_equal(back.predict(Xs), model.predict(Xs))
    assert back.alpha_ == model.alpha_ and repr(back.kernel_) == repr(model.kernel_)


def test_bad_parameters_are_named(data):
    X, y, _, _ = data
    for params, match in [(dict(objective="loo"), "'objective' parameter"),
                          (dict(validation_fraction=1.5), "'validation_fraction' parameter"),
                          (dict(alpha_bounds=(1, 0.1)), "'alpha_bounds' parameter"),
                          (dict(learn_centers="yes"), "'learn_centers' parameter")]:
        with pytest.raises(ValueError, match=match):
            NystroemKernelRidgeCV(**params).fit(X, y)
    with pytest.raises(ValueError, match="validation_fraction=0.01 leaves no validation rows"):
        NystroemKernelRidgeCV(objective="holdout", validation_fraction=0.01, n_centers=5).fit(X[:20], y[:20])


def test_coarse_stages_learn_on_subsamples_with_alpha_in_all_rows_units(data):
    """coarse_rows: L-BFGS first on random subsamples (the values carried over), then on all rows. The
    first evaluation is the GCV of the drawn rows with alpha r / n; the last stage's best is the GCV
    on all rows of the learned values."""
    from mercer.kernels import LearnableKernel
    from mercer.linalg import kernel_statistics
    from mercer.models.ridge._nystroem_cv import nystroem_gcv

    X, y, Xs, ys = data
    kw = dict(kernel=RBF(gamma=[0.2] * 5), alpha=4.0, n_centers=30, max_iter=12, dtype="float64", random_state=0)
    model = NystroemKernelRidgeCV(coarse_rows=[100, 200], **kw).fit(X, y)
    assert [st["n_rows"] for st in model.stages_] == [100, 200, 400]
    assert [st["max_iter"] for st in model.stages_] == [12, 4, 4]  # a fifth of the one before, at least 4
    assert model.n_evals_ == sum(st["n_evals"] for st in model.stages_) == model.objective_path_.size
    last = model.stages_[-1]
    assert model.cv_error_ == pytest.approx(np.nanmin(model.objective_path_[last["first_eval"]:]))
    assert model.stages_[1]["first_eval"] == model.stages_[0]["n_evals"]
    # the first evaluation: the drawn rows (the estimator's RandomState draws them first) at alpha r / n
    rows = np.sort(np.random.RandomState(0).choice(400, 100, replace=False))
    lk = LearnableKernel(RBF(gamma=[0.2] * 5), 5, model.hyperparameter_bounds)
    Z = NystroemKernelRidgeCV(optimizer=None, **kw).fit(X, y).centers_
    Xt, Y = torch.as_tensor(X[rows]), torch.as_tensor(y[rows, None])
    stats = kernel_statistics(lk.at, torch.as_tensor(lk.theta0), Z, Xt, Y)
    first = nystroem_gcv(stats, lk.at(torch.as_tensor(lk.theta0))(Z), 4.0 * 100 / 400)
    assert model.objective_path_[0] == pytest.approx(float(first), rel=1e-10)
    # it learned: which features matter, and a model far better than the default one
    gamma = np.asarray(model.kernel_.gamma)
    assert gamma[:2].min() > 10 * gamma[2:].max()
    default = NystroemKernelRidge(n_centers=30, random_state=0, dtype="float64").fit(X, y)
    assert rmse(model.predict(Xs), ys) < 0.5 * rmse(default.predict(Xs), ys)
    plain = NystroemKernelRidgeCV(coarse_rows=None, **dict(kw, max_iter=2)).fit(X, y)
    assert plain.stages_ == [dict(n_rows=400, max_iter=2, n_evals=plain.n_evals_, n_iter=plain.n_iter_,
                                  objective=plain.cv_error_, first_eval=0)]


def test_coarse_rows_auto_and_bad_values():
    est = NystroemKernelRidgeCV(n_centers=200)
    assert est._coarse_stages(torch.zeros(13_500, 26), 13_500, 200, 2) == [2000, 8000]
    assert est._coarse_stages(torch.zeros(57_000, 27), 57_000, 200, 2) == [5700, 22800]  # a tenth of the rows
    assert est._coarse_stages(torch.zeros(2_999, 4), 2_999, 200, 2) == []  # small n: all rows only
    assert est._coarse_stages(torch.zeros(20_000, 4), 20_000, 500, 2) == [5000]  # 10 rows per centre
    # a stage's rows are held in memory: within the in-memory share of the budget (a quarter), 8 x 28 bytes a row
    with mercer.config_context(memory_budget=4_000_000):  # ~4,400 rows: 2,000, not 8,000
        assert est._coarse_stages(torch.zeros(13_500, 26), 13_500, 200, 2) == [2000]
    with mercer.config_context(memory_budget=1_000_000):  # ~1,100 rows
        assert est._coarse_stages(torch.zeros(13_500, 26), 13_500, 200, 2) == []
    X, y = np.random.RandomState(0).randn(50, 3), np.arange(50.0)
    for bad in ([30, 20], 50, [0], "fast", [2.5], [[10]]):
        with pytest.raises(ValueError, match="'coarse_rows' parameter"):
            NystroemKernelRidgeCV(n_centers=5, coarse_rows=bad).fit(X, y)
    X, y = np.random.RandomState(0).randn(200, 3), np.arange(200.0)
    with pytest.raises(MemoryBudgetError, match="the 150 rows of a coarse stage .coarse_rows."):
        NystroemKernelRidgeCV(n_centers=5, coarse_rows=150, memory_budget=4000).fit(X, y)  # 150 x 40 bytes


def test_max_evals_stops_lbfgs_inside_a_line_search_at_the_best_point_evaluated():
    """optimize(max_evals=k): at most k evaluations after the start's, even within one line search
    (L-BFGS-B checks its own maxfun only between iterations), and the lowest point evaluated."""
    from mercer.models._hyperopt import optimize

    seen = []

    def loss(t):  # a steep valley: the first steps overshoot, the line searches backtrack
        value = (1e4 * (t[0] - 1.0) ** 2 + (t[1] + 2.0) ** 2) * torch.exp(0.1 * t.square().sum())
        seen.append((float(value.detach()), t.detach().clone().numpy()))
        return value

    x0, bounds = np.array([3.0, 3.0]), np.array([[-10.0, 10.0]] * 2)
    kw = dict(method="lbfgs", max_iter=50, n_restarts=0, rng=np.random.RandomState(0))
    full, _ = optimize(loss, x0, bounds, **kw)
    assert full.n_evals > 8
    for k in (1, 3, 8):
        seen.clear()
        best, runs = optimize(loss, x0, bounds, max_evals=k, **kw)
        assert runs[0].n_evals == len(seen) == k + 1
        lowest = min(seen, key=lambda s: s[0])
        assert best.loss == lowest[0] and np.array_equal(best.theta, lowest[1])
        assert not best.converged and "max_evals" in best.message


@pytest.mark.slow
def test_coarse_stages_of_the_holdout_error_scale_alpha_by_the_drawn_training_rows(data):
    """With objective="holdout" a stage's rows are drawn after the validation rows; its alpha is
    alpha times the drawn training rows' weight over all rows' (the training share, as on all rows)."""
    from mercer.kernels import LearnableKernel
    from mercer.linalg import kernel_statistics
    from mercer.models.ridge._nystroem_cv import nystroem_holdout_error

    X, y, _, _ = data
    kw = dict(kernel=RBF(gamma=[0.2] * 5), alpha=4.0, n_centers=30, max_iter=3, dtype="float64", random_state=0,
              objective="holdout")
    model = NystroemKernelRidgeCV(coarse_rows=[150], **kw).fit(X, y)
    rs = np.random.RandomState(0)
    val = np.zeros(400)
    val[rs.choice(400, 80, replace=False)] = 1.0
    rows = np.sort(rs.choice(400, 150, replace=False))
    W = torch.as_tensor(np.stack([1.0 - val, val], 1)[rows])
    lk = LearnableKernel(RBF(gamma=[0.2] * 5), 5, model.hyperparameter_bounds)
    Z = NystroemKernelRidgeCV(optimizer=None, **kw).fit(X, y).centers_
    theta = torch.as_tensor(lk.theta0)
    stats = kernel_statistics(lk.at, theta, Z, torch.as_tensor(X[rows]), torch.as_tensor(y[rows, None]), W)
    first = nystroem_holdout_error(stats, lk.at(theta)(Z), 4.0 * float(W[:, 0].sum()) / 400)
    assert model.objective_path_[0] == pytest.approx(float(first), rel=1e-10)
    assert [st["n_rows"] for st in model.stages_] == [150, 400]


def test_sparse_gp_learns_within_a_budget_smaller_than_its_n_by_m_matrices(data):
    """Learning held four n x M matrices (here 4 x 400 x 20 x 8 bytes = 250 KiB) and was refused
    under a smaller budget; the blocked statistics need O(block + M^2)."""
    X, y, Xs, ys = data
    kw = dict(n_inducing=20, kernel=RBF(gamma=[0.2] * 5), max_iter=8, random_state=0)
    small = mercer.SparseGPRegressor(memory_budget=120_000, **kw).fit(X, y)
    big = mercer.SparseGPRegressor(**kw).fit(X, y)
    np.testing.assert_allclose(small.theta_, big.theta_, rtol=1e-5, atol=1e-7)
    assert rmse(small.predict(Xs), ys) < 0.5


def test_the_classifier_learns_on_the_codes_and_predicts_labels():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    labels = np.where(y == 1, "benign", "malignant")
    rng = np.random.RandomState(0)
    idx = rng.permutation(len(y))
    tr, te = idx[:400], idx[400:]
    kw = dict(n_centers=40, random_state=0, dtype="float64")
    cv = mercer.NystroemKernelRidgeClassifierCV(alpha=1e2, gamma=0.1, max_iter=20, **kw).fit(X[tr], labels[tr])
    fixed = mercer.NystroemKernelRidgeClassifier(alpha=1e2, gamma=0.1, **kw).fit(X[tr], labels[tr])
    assert list(cv.classes_) == ["benign", "malignant"]
    assert cv.decision_function(X[te]).shape == (len(te),)
    assert cv.score(X[te], labels[te]) > fixed.score(X[te], labels[te]) + 0.1
    assert cv.kernel_.gamma < 0.1 and cv.cv_error_ < cv.objective_path_[0]
