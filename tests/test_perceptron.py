"""KernelPerceptron against the primal perceptron, scikit-learn's Perceptron and a naive dual loop."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Perceptron

from mercer.approx import PolynomialFeatureMap
from mercer.datasets import make_circle_separable
from mercer.kernels import RBF, Polynomial
from mercer.models.linear import KernelPerceptron

from conftest import cuda, readonly

# -- references --------------------------------------------------------------------------------
def primal_perceptron(Z, Y, epochs, *, intercept=True, averaged=False, steps=None):
    """Textbook primal perceptron on features Z (n, D), one-vs-rest columns Y (n, k) in {-1, +1}."""
    n, k = Y.shape
    steps = np.ones((n, k)) if steps is None else steps
    W, b = np.zeros((Z.shape[1], k)), np.zeros(k)
    W_sum, b_sum, t = np.zeros_like(W), np.zeros_like(b), 0
    for _ in range(epochs):
        for i in range(n):
            wrong = (Y[i] * (Z[i] @ W + b) <= 0) & (steps[i] > 0)
            W += np.outer(Z[i], Y[i] * steps[i] * wrong)
            if intercept:
                b += Y[i] * steps[i] * wrong
            W_sum += W
            b_sum += b
            t += 1
    return (W_sum / t, b_sum / t) if averaged else (W, b)


def naive_dual_perceptron(K, Y, epochs, *, averaged=False, budget=None, multinomial=False):
    """Dual perceptron on a full Gram matrix, every score recomputed from scratch; the budget
    removes the oldest support vector with its share of the bias and of the average."""
    n = Y.shape[0]
    C = int(Y.max()) + 1 if multinomial else Y.shape[1]
    A, A_sum, S, t = np.zeros((n, C)), np.zeros((n, C)), [], 0
    for _ in range(epochs):
        for i in range(n):
            f = K[i] @ A + A.sum(axis=0)  # intercept: the kernel plus the constant 1
            d = np.zeros(C)
            if multinomial:
                c = int(Y[i, 0])
                other = f.copy()
                other[c] = -np.inf
                r = int(np.argmax(other))
                if other[r] >= f[c]:
                    d[c], d[r] = 1.0, -1.0
            else:
                d = Y[i] * (Y[i] * f <= 0)
            if np.any(d != 0):
                if i not in S:
                    if budget is not None and len(S) >= budget:
                        v = S.pop(0)
                        A[v] = 0
                        A_sum[v] = 0
                    S.append(i)
                A[i] += d
            A_sum += A
            t += 1
    coef = A_sum / t if averaged else A
    return coef, coef.sum(axis=0)


def ovr_codes(y, classes):
    return np.where(y[:, None] == classes[None, :], 1.0, -1.0) if len(classes) > 2 else \
        np.where(y == classes[1], 1.0, -1.0)[:, None]


def quiet_fit(model, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y, **kw)


@pytest.fixture(scope="module")
def small_digits(digits):
    X, y = digits
    return readonly(X[:240], y[:240])


# -- exactness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("averaged", [False, True])
@pytest.mark.parametrize("n_classes", [2, 4])
def test_linear_kernel_equals_primal_perceptron(small_digits, averaged, n_classes):
    X, y = small_digits
    keep = y < n_classes
    X, y = X[keep], y[keep]
    model = quiet_fit(KernelPerceptron(kernel="linear", shuffle=False, tol=None, max_iter=4, averaged=averaged), X, y)
    W, b = primal_perceptron(X, ovr_codes(y, np.unique(y)), model.n_iter_, averaged=averaged)
    dec = model.decision_function(X)
    ref = X @ W + b
    np.testing.assert_allclose(dec, ref[:, 0] if n_classes == 2 else ref, rtol=1e-10, atol=1e-9)
    # The primal weights are the support vectors combined with the dual coefficients.
    np.testing.assert_allclose(model.dual_coef_.cpu().numpy() @ model.support_vectors_.cpu().numpy(), W.T, atol=1e-9)


@pytest.mark.parametrize("class_weight", [None, {0: 3.0, 1: 0.5}])
def test_linear_kernel_equals_sklearn_perceptron(small_digits, class_weight):
    X, y = small_digits
    X, y = X[y < 3], y[y < 3]
    sw = readonly(np.random.default_rng(0).uniform(0.2, 2.0, len(y)))
    ours = quiet_fit(KernelPerceptron(kernel="linear", shuffle=False, tol=None, max_iter=5, class_weight=class_weight),
                     X, y, sample_weight=sw)
    ref = quiet_fit(Perceptron(shuffle=False, tol=None, max_iter=ours.n_iter_, class_weight=class_weight), X, y,
                    sample_weight=sw)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


@pytest.mark.parametrize("variant", [dict(), dict(averaged=True), dict(budget=25), dict(budget=25, averaged=True),
                                     dict(multi_class="multinomial"), dict(multi_class="multinomial", averaged=True)],
                         ids=str)
def test_rbf_equals_naive_dual_loop(small_digits, variant):
    X, y = small_digits
    X, y = X[:150], y[:150] % 3
    model = quiet_fit(KernelPerceptron(kernel=RBF(gamma=0.05), shuffle=False, tol=None, max_iter=3, **variant), X, y)
    multinomial = variant.get("multi_class") == "multinomial"
    Y = y[:, None].astype(float) if multinomial else ovr_codes(y, np.unique(y))
    K = RBF(gamma=0.05)(X).cpu().numpy()
    A, b = naive_dual_perceptron(K, Y, model.n_iter_, averaged=variant.get("averaged", False),
                                 budget=variant.get("budget"), multinomial=multinomial)
    support = np.flatnonzero(np.any(A != 0, axis=1))
    np.testing.assert_array_equal(model.support_, support)
    np.testing.assert_allclose(model.dual_coef_.cpu().numpy(), A[support].T, atol=1e-12)
    np.testing.assert_allclose(model.intercept_, b, atol=1e-12)
    if "budget" in variant:
        assert len(model.support_) <= variant["budget"]


def test_polynomial_kernel_equals_perceptron_on_lifted_features():
    """Seed 001: the same model learnt parametrically (explicit map) and non-parametrically (kernel)."""
    X, y = make_circle_separable(200, margin=0.05, random_state=0)
    X, y = readonly(X, y)
    kernel = Polynomial(degree=2, gamma=0.5, coef0=1.0)
    model = KernelPerceptron(kernel=kernel, shuffle=False, tol=None, max_iter=100).fit(X, y)
    Z = PolynomialFeatureMap(degree=2, gamma=0.5, coef0=1.0).fit_transform(X)
    W, b = primal_perceptron(Z, ovr_codes(y, np.unique(y)), model.n_iter_)
    X_test, _ = make_circle_separable(100, random_state=1)
    Z_test = PolynomialFeatureMap(degree=2, gamma=0.5, coef0=1.0).fit(X).transform(X_test)
    np.testing.assert_allclose(model.decision_function(X_test), (Z_test @ W + b)[:, 0], rtol=1e-9, atol=1e-9)
    # The lifted data are linearly separable: the perceptron stops after an epoch without mistakes.
    assert model.mistakes_per_epoch_[-1] == 0
    assert model.score(X, y) == 1.0


def test_separates_circle_data_with_rbf_and_stops():
    X, y = readonly(*make_circle_separable(300, margin=0.05, random_state=2))
    model = KernelPerceptron(gamma=2.0, random_state=0, max_iter=200).fit(X, y)
    assert model.score(X, y) == 1.0
    assert model.mistakes_per_epoch_[-1] == 0 and model.n_iter_ < 200
    assert len(model.support_) < len(X)


# -- options -----------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["oldest", "smallest", "random"])
def test_budget_bounds_the_support_set(small_digits, policy):
    X, y = small_digits
    model = quiet_fit(KernelPerceptron(gamma=0.05, budget=40, budget_policy=policy, random_state=0, max_iter=3), X, y)
    assert 0 < len(model.support_) <= 40
    assert model.support_vectors_.shape == (len(model.support_), X.shape[1])
    unbounded = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3), X, y)
    assert len(unbounded.support_) > 40


def test_shuffle_is_seeded(small_digits):
    X, y = small_digits
    a = quiet_fit(KernelPerceptron(gamma=0.05, random_state=3, max_iter=3), X, y)
    b = quiet_fit(KernelPerceptron(gamma=0.05, random_state=3, max_iter=3), X, y)
    c = quiet_fit(KernelPerceptron(gamma=0.05, random_state=4, max_iter=3), X, y)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    assert not np.array_equal(a.decision_function(X), c.decision_function(X))


def test_multiclass_on_digits_generalises(digits):
    X, y = digits
    for multi_class in ("ovr", "multinomial"):
        model = quiet_fit(KernelPerceptron(gamma=0.05, multi_class=multi_class, averaged=True, random_state=0, max_iter=5),
                          X[:500], y[:500])
        assert model.score(X[1000:1400], y[1000:1400]) > 0.9
        assert model.decision_function(X[:3]).shape == (3, 10)


def test_not_separable_warns_and_tol_stops(breast_cancer):
    X, y = breast_cancer
    X, y = X[:200], y[:200]
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        KernelPerceptron(kernel="linear", tol=None, max_iter=2, random_state=0).fit(X, y)
    flipped = y.copy()
    flipped[::7] = 1 - flipped[::7]  # label noise: never separable
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = KernelPerceptron(kernel="linear", tol=0.5, n_iter_no_change=2, max_iter=50, random_state=0).fit(X, flipped)
    assert model.n_iter_ == 3 and model.mistakes_per_epoch_[-1] > 0


def test_class_weight_balanced_helps_the_minority():
    rng = np.random.default_rng(0)
    X = readonly(np.r_[rng.normal(0, 1, (180, 2)), rng.normal(1.2, 1, (20, 2))])
    y = readonly(np.r_[np.zeros(180, int), np.ones(20, int)])
    plain = quiet_fit(KernelPerceptron(kernel="linear", averaged=True, random_state=0, max_iter=10), X, y)
    balanced = quiet_fit(KernelPerceptron(kernel="linear", averaged=True, class_weight="balanced", random_state=0,
                                          max_iter=10), X, y)
    assert (balanced.predict(X[y == 1]) == 1).mean() > (plain.predict(X[y == 1]) == 1).mean()


def test_precomputed_kernel_equals_rbf(small_digits):
    X, y = small_digits
    K = RBF(gamma=0.05)(X).cpu().numpy()
    ref = quiet_fit(KernelPerceptron(gamma=0.05, shuffle=False, max_iter=3, budget=50), X[:200], y[:200])
    pre = quiet_fit(KernelPerceptron(kernel="precomputed", shuffle=False, max_iter=3, budget=50),
                    readonly(K[:200, :200]), y[:200])
    np.testing.assert_array_equal(pre.support_, ref.support_)
    np.testing.assert_allclose(pre.decision_function(readonly(K[200:, :200])), ref.decision_function(X[200:]), atol=1e-10)
    with pytest.raises(ValueError, match="square"):
        KernelPerceptron(kernel="precomputed").fit(K[:50, :40], y[:50])


def test_tiny_memory_budget_gives_the_same_numbers(small_digits):
    X, y = small_digits
    ref = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3), X, y)
    small = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3, memory_budget=400_000), X, y)
    np.testing.assert_array_equal(small.support_, ref.support_)
    np.testing.assert_allclose(small.decision_function(X), ref.decision_function(X), rtol=1e-10, atol=1e-10)


def test_torch_in_torch_out_float32_and_inputs_untouched(small_digits):
    X, y = small_digits
    X_copy = X.copy()
    model = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3, dtype="float32"), X, y)
    assert model.decision_function(X).dtype == np.float32
    np.testing.assert_array_equal(X, X_copy)
    Xt = torch.tensor(X)
    out = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3), Xt, torch.tensor(y))
    assert isinstance(out.decision_function(Xt), torch.Tensor) and isinstance(out.predict(Xt), torch.Tensor)
    np.testing.assert_allclose(out.decision_function(Xt).cpu().numpy(),
                               quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3), X, y).decision_function(X))


# -- bad input ---------------------------------------------------------------------------------
def test_string_labels(breast_cancer):
    X, y = breast_cancer
    labels = readonly(np.where(y[:150] == 1, "benign", "malignant"))
    model = quiet_fit(KernelPerceptron(gamma=0.1, random_state=0, max_iter=5), X[:150], labels)
    assert list(model.classes_) == ["benign", "malignant"]
    assert set(model.predict(X[150:200])) <= {"benign", "malignant"}
    assert model.score(X[:150], labels) > 0.9


def test_one_class_is_an_error(breast_cancer):
    X, _ = breast_cancer
    with pytest.raises(ValueError, match="only one class: 'a'"):
        KernelPerceptron().fit(X[:20], np.array(["a"] * 20))


@pytest.mark.parametrize("bad, match", [
    (dict(max_iter=0), "'max_iter' parameter of KernelPerceptron must be an int in the range \\[1, inf\\). Got 0"),
    (dict(budget=0), "'budget' parameter .* Got 0"),
    (dict(budget=2.5), "'budget' parameter .* Got 2.5"),
    (dict(budget_policy="newest"), "'budget_policy' parameter .* among \\{'oldest', 'smallest', 'random'\\}. Got 'newest'"),
    (dict(multi_class="ovo"), "'multi_class' parameter .* Got 'ovo'"),
    (dict(tol=-1.0), "'tol' parameter .* Got -1.0"),
    (dict(shuffle="yes"), "'shuffle' parameter .* 'bool'. Got 'yes'"),
    (dict(class_weight="auto"), "'class_weight' parameter .* Got 'auto'"),
    (dict(class_weight={7: 2.0}), "The .class_weight. parameter of KernelPerceptron must have labels among .* Got labels \\[7\\]"),
    (dict(kernel="cosine-ish"), "'kernel' parameter"),
    (dict(memory_budget=-1), "'memory_budget' parameter"),
])
def test_bad_parameters_name_the_parameter(small_digits, bad, match):
    X, y = small_digits
    with pytest.raises(ValueError, match=match):
        KernelPerceptron(**bad).fit(X[:50], y[:50] % 2)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_and_inf_are_rejected(small_digits, value):
    X, y = small_digits
    Xb = X[:30].copy()
    Xb[3, 2] = value
    with pytest.raises(ValueError, match="NaN|infinity"):
        KernelPerceptron().fit(Xb, y[:30] % 2)
    model = quiet_fit(KernelPerceptron(max_iter=2), X[:30], y[:30] % 2)
    with pytest.raises(ValueError, match="NaN|infinity"):
        model.predict(Xb)


def test_labels_must_match_samples(small_digits):
    X, y = small_digits
    with pytest.raises(ValueError, match="y must be 1-D with 30 labels"):
        KernelPerceptron().fit(X[:30], y[:20])
    with pytest.raises(ValueError, match="y to be passed"):
        KernelPerceptron().fit(X[:30], None)


@cuda
def test_cuda_matches_cpu(small_digits):
    X, y = small_digits
    cpu = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3), X, y)
    gpu = quiet_fit(KernelPerceptron(gamma=0.05, random_state=0, max_iter=3, device="cuda"), X, y)
    np.testing.assert_array_equal(gpu.support_, cpu.support_)
    np.testing.assert_allclose(gpu.decision_function(X), cpu.decision_function(X), atol=1e-8)
    Xt = torch.as_tensor(X, device="cuda")
    assert gpu.decision_function(Xt).device.type == "cuda"
