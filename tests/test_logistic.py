"""KernelLogisticRegression against scikit-learn's LogisticRegression (linear kernel, explicit
feature maps, Nystroem features) and against itself (exact vs Nyström with every point)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import LogisticRegression

from mercer.approx import PolynomialFeatureMap
from mercer.datasets import make_circle_separable
from mercer.kernels import RBF, Polynomial
from mercer.linalg import MemoryBudgetError
from mercer.models.linear import KernelLogisticRegression

from conftest import cuda, readonly


def sk_logistic(C, **kw):
    return LogisticRegression(C=C, tol=1e-12, max_iter=20_000, **kw)


@pytest.fixture(scope="module")
def small_digits(digits):
    X, y = digits
    return readonly(X[:300], y[:300])


# -- exactness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("C", [0.05, 3.0])
def test_linear_kernel_equals_sklearn_binary(breast_cancer, C):
    X, y = breast_cancer
    X, y = X[:300], y[:300]
    ours = KernelLogisticRegression(C=C, kernel="linear").fit(X, y)
    ref = sk_logistic(C).fit(X, y)
    np.testing.assert_allclose(X.T @ ours.dual_coef_.cpu().numpy()[:, 0], ref.coef_[0], atol=2e-5 * max(1, np.abs(ref.coef_).max()))
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-5)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-5)
    assert ours.converged_ and ours.solver_ == "newton"


def test_linear_kernel_equals_sklearn_multinomial(small_digits):
    X, y = small_digits
    X, y = X[:200], y[:200] % 4
    ours = KernelLogisticRegression(C=0.5, kernel="linear").fit(X, y)
    ref = sk_logistic(0.5).fit(X, y)
    np.testing.assert_allclose(X.T @ ours.dual_coef_.cpu().numpy(), ref.coef_.T, atol=1e-5)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)
    np.testing.assert_allclose(ours.predict_log_proba(X), np.log(ours.predict_proba(X)), atol=1e-10)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


def test_weights_match_sklearn(breast_cancer):
    X, y = breast_cancer
    X, y = X[:250], y[:250]
    sw = readonly(np.random.default_rng(0).uniform(0.1, 3.0, len(y)))
    ours = KernelLogisticRegression(C=0.7, kernel="linear", class_weight={0: 2.0, 1: 0.5}).fit(X, y, sample_weight=sw)
    ref = sk_logistic(0.7, class_weight={0: 2.0, 1: 0.5}).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)


def test_no_intercept_matches_sklearn(breast_cancer):
    X, y = breast_cancer
    ours = KernelLogisticRegression(C=0.2, kernel="linear", fit_intercept=False).fit(X[:200], y[:200])
    ref = sk_logistic(0.2, fit_intercept=False).fit(X[:200], y[:200])
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)
    assert ours.intercept_[0] == 0.0


@pytest.mark.parametrize("coef0", [1.0, 0.0])
def test_polynomial_kernel_equals_logistic_on_lifted_features(coef0):
    """Seed 001: logistic regression on explicit polynomial features is the kernel model."""
    X, y = readonly(*make_circle_separable(150, margin=0.05, random_state=0))
    X_test, _ = make_circle_separable(80, random_state=1)
    phi = PolynomialFeatureMap(degree=2, gamma=0.5, coef0=coef0).fit(X)
    ref = sk_logistic(4.0).fit(phi.transform(X), y)
    ours = KernelLogisticRegression(C=4.0, kernel=Polynomial(degree=2, gamma=0.5, coef0=coef0)).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X_test), ref.predict_proba(phi.transform(X_test)), atol=1e-6)


def test_separates_circle_data_on_lifted_features():
    X, y = readonly(*make_circle_separable(200, margin=0.05, random_state=3))
    X_test, y_test = make_circle_separable(500, margin=0.05, random_state=4)
    model = KernelLogisticRegression(C=100.0, kernel="poly", degree=2, gamma=1.0, coef0=1.0).fit(X, y)
    assert model.converged_
    assert model.score(X, y) == 1.0
    assert model.score(X_test, y_test) > 0.97


def test_nystroem_equals_sklearn_nystroem_pipeline(small_digits):
    X, y = small_digits
    y = y % 3
    ours = KernelLogisticRegression(C=2.0, gamma=0.05, solver="nystroem", n_components=60, random_state=0).fit(X, y)
    ny = Nystroem(gamma=0.05, n_components=60, random_state=0).fit(X)
    ref = sk_logistic(2.0).fit(ny.transform(X), y)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(ny.transform(X)), atol=1e-6)
    assert ours.centres_.shape == (60, X.shape[1]) and ours.dual_coef_.shape == (60, 3)


def test_nystroem_with_every_point_equals_exact(breast_cancer):
    X, y = breast_cancer
    X, y = X[:150], y[:150]
    exact = KernelLogisticRegression(C=3.0, gamma=0.05, solver="newton").fit(X, y)
    full = KernelLogisticRegression(C=3.0, gamma=0.05, solver="nystroem", n_components=1000).fit(X, y)
    assert full.n_components_ == 150
    np.testing.assert_allclose(full.predict_proba(X), exact.predict_proba(X), atol=1e-7)
    np.testing.assert_allclose(full.objective_, exact.objective_, rtol=1e-10)


def test_exact_rbf_satisfies_the_optimality_condition(small_digits):
    """At the optimum of 0.5 a^T K a + C sum loss(K a + b): a = -C (p - t) for two classes."""
    X, y = small_digits
    X, y = X[:120], (y[:120] > 4).astype(int)
    model = KernelLogisticRegression(C=2.0, kernel=RBF(gamma=0.05)).fit(X, y)
    p = model.predict_proba(X)[:, 1]
    np.testing.assert_allclose(model.dual_coef_.cpu().numpy()[:, 0], -2.0 * (p - y), atol=1e-6)
    np.testing.assert_allclose((p - y).sum(), 0.0, atol=1e-6)  # the intercept's condition
    assert model.rank_ == 120


def test_rbf_on_digits_generalises(digits):
    X, y = digits
    model = KernelLogisticRegression(C=10.0, gamma=0.05).fit(X[:400], y[:400])
    assert model.score(X[1000:1400], y[1000:1400]) > 0.9
    proba = model.predict_proba(X[:5])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.classes_[proba.argmax(axis=1)], model.predict(X[:5]))


def test_class_weight_balanced_helps_the_minority():
    rng = np.random.default_rng(0)
    X = readonly(np.r_[rng.normal(0, 1, (190, 2)), rng.normal(1.5, 1, (10, 2))])
    y = readonly(np.r_[np.zeros(190, int), np.ones(10, int)])
    plain = KernelLogisticRegression(kernel="linear").fit(X, y)
    balanced = KernelLogisticRegression(kernel="linear", class_weight="balanced").fit(X, y)
    assert (balanced.predict(X[y == 1]) == 1).mean() > (plain.predict(X[y == 1]) == 1).mean()


def test_precomputed_kernel_equals_rbf(breast_cancer):
    X, y = breast_cancer
    K = RBF(gamma=0.05)(X[:260]).cpu().numpy()
    for solver, kw in (("newton", {}), ("nystroem", dict(n_components=50, random_state=0))):
        ref = KernelLogisticRegression(gamma=0.05, solver=solver, **kw).fit(X[:200], y[:200])
        pre = KernelLogisticRegression(kernel="precomputed", solver=solver, **kw).fit(readonly(K[:200, :200]), y[:200])
        np.testing.assert_allclose(pre.predict_proba(readonly(K[200:, :200])), ref.predict_proba(X[200:260]), atol=1e-8)


def test_tiny_memory_budget_gives_the_same_numbers_and_names_nystroem(breast_cancer):
    X, y = breast_cancer
    X, y = X[:200], y[:200]
    ref = KernelLogisticRegression(gamma=0.05, solver="nystroem", n_components=40, random_state=0).fit(X, y)
    small = KernelLogisticRegression(gamma=0.05, solver="nystroem", n_components=40, random_state=0,
                                     memory_budget=300_000).fit(X, y)
    np.testing.assert_allclose(small.predict_proba(X), ref.predict_proba(X), atol=1e-10)
    with pytest.raises(MemoryBudgetError, match="solver='nystroem'"):
        KernelLogisticRegression(solver="newton", memory_budget=300_000).fit(X, y)
    auto = KernelLogisticRegression(gamma=0.05, n_components=40, random_state=0, memory_budget=300_000).fit(X, y)
    assert auto.solver_ == "nystroem"
    np.testing.assert_allclose(auto.predict_proba(X), ref.predict_proba(X), atol=1e-10)


def test_non_convergence_warns(breast_cancer):
    X, y = breast_cancer
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        model = KernelLogisticRegression(max_iter=1).fit(X[:100], y[:100])
    assert not model.converged_ and model.n_iter_ == 1


def test_torch_in_torch_out_float32_and_inputs_untouched(breast_cancer):
    X, y = breast_cancer
    X, y = X[:150], y[:150]
    X_copy = X.copy()
    ref = KernelLogisticRegression(gamma=0.05).fit(X, y)
    f32 = KernelLogisticRegression(gamma=0.05, dtype="float32", tol=1e-4).fit(X, y)
    assert f32.predict_proba(X).dtype == np.float32
    np.testing.assert_allclose(f32.predict_proba(X), ref.predict_proba(X), atol=1e-3)
    np.testing.assert_array_equal(X, X_copy)
    Xt = torch.tensor(X)
    model = KernelLogisticRegression(gamma=0.05).fit(Xt, torch.tensor(y))
    out = model.predict_proba(Xt)
    assert isinstance(out, torch.Tensor) and isinstance(model.predict(Xt), torch.Tensor)
    np.testing.assert_allclose(out.cpu().numpy(), ref.predict_proba(X), atol=1e-10)


# -- bad input ---------------------------------------------------------------------------------
def test_string_labels(breast_cancer):
    X, y = breast_cancer
    labels = readonly(np.where(y[:150] == 1, "benign", "malignant"))
    model = KernelLogisticRegression(gamma=0.05).fit(X[:150], labels)
    assert list(model.classes_) == ["benign", "malignant"]
    # Column 1 of predict_proba is classes_[1] = "malignant" (label 0 in y).
    assert model.predict_proba(X[:150])[y[:150] == 0, 1].mean() > 0.8
    assert set(model.predict(X[150:200])) <= {"benign", "malignant"}


def test_one_class_is_an_error(breast_cancer):
    X, _ = breast_cancer
    with pytest.raises(ValueError, match="only one class: 'a'"):
        KernelLogisticRegression().fit(X[:20], np.array(["a"] * 20))


@pytest.mark.parametrize("bad, match", [
    (dict(C=0.0), "'C' parameter of KernelLogisticRegression must be a float in the range \\(0, inf\\). Got 0.0"),
    (dict(C=-1), "'C' parameter .* Got -1"),
    (dict(C=np.inf), "'C' parameter .* Got inf"),
    (dict(solver="lbfgs"), "'solver' parameter .* among \\{'auto', 'newton', 'nystroem'\\}. Got 'lbfgs'"),
    (dict(n_components=0), "'n_components' parameter .* Got 0"),
    (dict(max_iter=1.5), "'max_iter' parameter .* Got 1.5"),
    (dict(tol=-1e-3), "'tol' parameter .* Got -0.001"),
    (dict(class_weight="auto"), "'class_weight' parameter .* Got 'auto'"),
    (dict(kernel="nope"), "'kernel' parameter"),
])
def test_bad_parameters_name_the_parameter(breast_cancer, bad, match):
    X, y = breast_cancer
    with pytest.raises(ValueError, match=match):
        KernelLogisticRegression(**bad).fit(X[:40], y[:40])


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_and_inf_are_rejected(breast_cancer, value):
    X, y = breast_cancer
    Xb = X[:40].copy()
    Xb[5, 1] = value
    with pytest.raises(ValueError, match="NaN|infinity"):
        KernelLogisticRegression().fit(Xb, y[:40])
    model = KernelLogisticRegression().fit(X[:40], y[:40])
    with pytest.raises(ValueError, match="NaN|infinity"):
        model.predict_proba(Xb)


@cuda
def test_cuda_matches_cpu(breast_cancer):
    X, y = breast_cancer
    cpu = KernelLogisticRegression(gamma=0.05).fit(X[:300], y[:300])
    gpu = KernelLogisticRegression(gamma=0.05, device="cuda").fit(X[:300], y[:300])
    np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), atol=1e-7)
    ny = KernelLogisticRegression(gamma=0.05, solver="nystroem", n_components=100, random_state=0, device="cuda")
    ny.fit(torch.as_tensor(X, device="cuda"), torch.as_tensor(y))
    assert ny.predict_proba(torch.as_tensor(X, device="cuda")).device.type == "cuda"
