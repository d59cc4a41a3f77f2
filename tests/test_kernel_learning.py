"""KernelRidgeCV: closed-form LOO/GCV against naive refits, learned gamma against GridSearchCV."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.model_selection import GridSearchCV, KFold

from mercer.kernels import RBF, Linear, Matern
from mercer.kernels._columns import Columns
from mercer.linalg import MemoryBudgetError
from mercer.models.ridge import KernelRidgeCV
from mercer.models.ridge._cv import loo_residuals
from mercer.models.ridge import KernelRidge

from conftest import cuda, readonly


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(diabetes_scaled):
    X, y = diabetes_scaled
    return readonly(X[:200], y[:200], X[200:], y[200:])


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


@pytest.mark.parametrize("kernel", [RBF(gamma=0.3), 0.5 * Matern(1.5, 2.0) + Linear()], ids=["rbf", "matern+linear"])
def test_closed_form_loo_equals_naive_refits(data, kernel):
    X, y, _, _ = data
    X, y = X[:50], y[:50]
    res = loo_residuals(kernel, X, y, alpha=0.4)
    naive = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        model = KernelRidge(alpha=0.4, kernel=kernel, solver="dual").fit(X[keep], y[keep])
        naive.append(y[i] - model.predict(X[i:i + 1])[0])
    assert rel(res, naive) < 1e-8
    est = KernelRidgeCV(alpha=0.4, kernel=kernel, optimizer=None).fit(X, y)
    assert est.cv_error_ == pytest.approx(np.mean(np.square(naive)), rel=1e-8)


def test_gcv_closed_form(data):
    X, y, _, _ = data
    X, y = X[:60], y[:60]
    K = RBF(gamma=0.3)(X).cpu().numpy()
    H = K @ np.linalg.inv(K + 0.7 * np.eye(60))
    n = 60
    gcv = n * np.sum(((np.eye(n) - H) @ y) ** 2) / np.trace(np.eye(n) - H) ** 2
    est = KernelRidgeCV(alpha=0.7, kernel=RBF(gamma=0.3), objective="gcv", optimizer=None).fit(X, y)
    assert est.cv_error_ == pytest.approx(gcv, rel=1e-8)


def test_learned_gamma_beats_grid_search_with_fewer_fits(data):
    X, y, Xte, yte = data
    est = KernelRidgeCV(kernel="rbf", alpha=1.0, random_state=0).fit(X, y)
    grid = {"gamma": np.logspace(-3, 1, 9), "alpha": np.logspace(-3, 1, 9)}
    cv = KFold(5, shuffle=True, random_state=0)
    gs = GridSearchCV(SkKernelRidge(kernel="rbf"), grid, cv=cv, scoring="neg_mean_squared_error").fit(X, y)
    n_grid_fits = 81 * 5 + 1
    assert est.n_evals_ < n_grid_fits / 10
    # the learned model's own LOO error is at most the grid's best setting's LOO error
    best = gs.best_params_
    loo_grid = KernelRidgeCV(alpha=best["alpha"], kernel=RBF(gamma=best["gamma"]), optimizer=None).fit(X, y).cv_error_
    assert est.cv_error_ <= loo_grid + 1e-12
    # and its held-out error is as good as the grid search's (within 2%)
    mse_ours = np.mean((est.predict(Xte) - yte) ** 2)
    mse_grid = np.mean((gs.predict(Xte) - yte) ** 2)
    assert mse_ours <= 1.02 * mse_grid
    assert isinstance(est.estimator_, KernelRidge) and est.kernel_.gamma == est.estimator_.kernel.gamma


def test_composite_kernel_and_fixed_alpha(data):
    X, y, _, _ = data
    k = 0.5 * Columns(RBF(gamma=0.1), [0, 1, 2, 3, 4]) + 0.5 * Columns(RBF(gamma=0.1), [5, 6, 7, 8, 9])
    start = KernelRidgeCV(alpha=0.5, kernel=k, optimizer=None).fit(X, y)
    est = KernelRidgeCV(alpha=0.5, kernel=k, learn_alpha=False, objective="gcv", max_iter=30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert est.alpha_ == 0.5 and "alpha" not in est.hyperparameter_names_
    assert len(est.hyperparameter_names_) == 4
    assert est.cv_error_ < start.cv_error_
    adam = KernelRidgeCV(alpha=0.5, kernel="rbf", optimizer="adam", max_iter=30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        adam.fit(X, y)
    assert adam.cv_error_ < KernelRidgeCV(alpha=0.5, kernel="rbf", optimizer=None).fit(X, y).cv_error_


def test_multi_output(data):
    X, y, Xte, _ = data
    Y = readonly(np.c_[y, np.sin(X[:, 1])])
    est = KernelRidgeCV(kernel="rbf", random_state=0).fit(X, Y)
    assert est.predict(Xte).shape == (Xte.shape[0], 2)
    res = loo_residuals(est.kernel_, X, Y, est.alpha_)
    assert est.cv_error_ == pytest.approx(np.mean(res**2), rel=1e-6)


def test_boundary_and_non_convergence_are_reported(data):
    X, _, _, _ = data
    rng = np.random.default_rng(0)
    noise = readonly(rng.normal(size=X.shape[0]))  # pure noise: infinite regularisation is best
    with pytest.warns(ConvergenceWarning, match="'alpha'.*upper bound"):
        KernelRidgeCV(kernel="rbf", alpha_bounds=(1e-3, 10.0), random_state=0).fit(X, noise)
    with pytest.warns(ConvergenceWarning, match="without converging"):
        est = KernelRidgeCV(kernel="rbf", max_iter=1).fit(X, noise)
    assert est.optimizer_results_[0]["n_iter"] == 1


def test_zero_variance_target(data):
    X, _, Xte, _ = data
    y = readonly(np.full(X.shape[0], 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = KernelRidgeCV(kernel="rbf", random_state=0).fit(X, y)
    assert np.all(np.isfinite(est.predict(Xte)))
    assert est.cv_error_ < 0.05  # nearly interpolates the constant


def test_bad_parameters_are_named(data):
    X, y, _, _ = data
    for params, match in [(dict(alpha=-1.0), "'alpha' parameter"), (dict(objective="kfold"), "'objective' parameter"),
                          (dict(optimizer="sgd"), "'optimizer' parameter"), (dict(learn_alpha="no"), "'learn_alpha'"),
                          (dict(alpha_bounds=(0.0, 1.0)), "'alpha_bounds'"), (dict(kernel="precomputed"), "precomputed"),
                          (dict(max_iter=0), "'max_iter'")]:
        with pytest.raises(ValueError, match=match):
            KernelRidgeCV(**params).fit(X, y)
    with pytest.raises(MemoryBudgetError, match="memory budget"):
        KernelRidgeCV(memory_budget=10_000).fit(X, y)


def test_torch_input_and_float32(data):
    X, y, Xte, _ = data
    est = KernelRidgeCV(kernel="rbf", random_state=0).fit(torch.tensor(X), torch.tensor(y))
    out = est.predict(torch.tensor(Xte))
    assert isinstance(out, torch.Tensor)
    est32 = KernelRidgeCV(kernel="rbf", random_state=0, dtype="float32").fit(X.astype(np.float32), y)
    assert est32.predict(Xte.astype(np.float32)).dtype == np.float32
    assert est32.cv_error_ == pytest.approx(est.cv_error_, rel=5e-2)


@cuda
def test_cuda(data):
    X, y, Xte, _ = data
    cpu = KernelRidgeCV(kernel="rbf", random_state=0).fit(X, y)
    gpu = KernelRidgeCV(kernel="rbf", random_state=0, device="cuda").fit(X, y)
    assert gpu.cv_error_ == pytest.approx(cpu.cv_error_, rel=1e-5)


# -- distances reused while learning -------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda t: RBF(gamma=t), lambda t: Matern(2.5, length_scale=t),
                                  lambda t: __import__("mercer.kernels", fromlist=["Laplacian"]).Laplacian(gamma=t),
                                  lambda t: __import__("mercer.kernels", fromlist=["x"]).RationalQuadratic(alpha=t),
                                  lambda t: __import__("mercer.kernels", fromlist=["x"]).ExpSineSquared(periodicity=t)],
                         ids=["RBF", "Matern", "Laplacian", "RationalQuadratic", "ExpSineSquared"])
def test_reused_distances_give_the_same_kernel_and_gradient(make):
    """With a ``DistanceCache`` a kernel evaluated repeatedly on the same inputs equals the plain
    evaluation (values and gradient), the cached matrix is not written by the formula, and an
    in-place change of the inputs is seen; composites and ``Columns`` pass the cache on."""
    from mercer.kernels import DistanceCache

    rng = np.random.default_rng(0)
    X = torch.tensor(rng.normal(size=(30, 3)) + 5.0)
    Z = torch.tensor(rng.normal(size=(20, 3)) + 5.0)
    cache = DistanceCache(X, Z)

    def value_and_grad(v, cache=None):
        t = torch.tensor(v, dtype=torch.float64, requires_grad=True)
        K = make(t)(X, Z, cache=cache)
        (g,) = torch.autograd.grad(K.sum(), t)
        return K.detach().clone(), float(g)

    ref = [value_and_grad(v) for v in (0.3, 0.7)]
    for _ in range(2):  # the second round reads the cache
        for v, (K0, g0) in zip((0.3, 0.7), ref):
            K, g = value_and_grad(v, cache)
            torch.testing.assert_close(K, K0, rtol=1e-10, atol=1e-12)
            assert g == pytest.approx(g0, rel=1e-9)
    assert cache._store  # the distances were cached
    K_float = make(0.3)(X, Z, cache=cache)  # float hyperparameters use the cache too, without writing it
    torch.testing.assert_close(make(0.3)(X, Z, cache=cache), K_float, rtol=0, atol=0)
    composite = 2.0 * Columns(make(0.3), [0, 2]) + make(0.7) * RBF(0.1)
    torch.testing.assert_close(composite(X, Z, cache=cache), composite(X, Z), rtol=1e-10, atol=1e-12)
    X.mul_(0.5)  # in place: the cached distances are stale and not used
    torch.testing.assert_close(make(0.3)(X, Z, cache=cache), make(0.3)(X.clone(), Z), rtol=1e-10, atol=1e-12)


def test_distance_cache_holds_its_own_inputs_only():
    from mercer.kernels import DistanceCache

    X = torch.randn(5, 2, dtype=torch.float64)
    cache = DistanceCache(X)
    torch.testing.assert_close(RBF(0.5)(X, cache=cache), RBF(0.5)(X), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(RBF(0.5)(X, X, cache=cache), RBF(0.5)(X), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="the cache's own input tensors"):
        RBF(0.5)(X.clone(), cache=cache)
    with pytest.raises(ValueError, match="require grad"):
        DistanceCache(X.clone().requires_grad_())


def test_krcv_and_gp_results_do_not_depend_on_the_distance_cache(data):
    """The learned optimum with reused (exact) distances equals the one evaluated without them."""
    from mercer.models import GaussianProcessRegressor

    X, y = data[0][:120], data[1][:120]
    cv = KernelRidgeCV(kernel=RBF(gamma=0.5)).fit(X, y)
    assert cv.cv_error_ == pytest.approx(KernelRidgeCV(kernel=cv.kernel_, alpha=cv.alpha_, optimizer=None)
                                         .fit(X, y).cv_error_, rel=1e-9)
    gp = GaussianProcessRegressor(1.0 * RBF(sigma=1.0), noise=0.1, normalize_y=True).fit(X, y)
    assert gp.log_marginal_likelihood(gp.theta_) == pytest.approx(gp.log_marginal_likelihood_value_, rel=1e-9)
