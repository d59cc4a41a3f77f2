"""KernelRidge / KernelRidgeClassifier against scikit-learn and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.linear_model import Ridge, RidgeClassifier

from mercer import config_context
from mercer.kernels import RBF, Linear, Polynomial
from mercer.linalg import MemoryBudgetError, NumericalWarning
from mercer.models import KernelRidge, KernelRidgeClassifier

from conftest import cuda, readonly

KERNELS = [
    dict(kernel="rbf", gamma=0.5),
    dict(kernel="laplacian", gamma=0.3),
    dict(kernel="linear"),
    dict(kernel="poly", degree=3, gamma=1.0, coef0=1),
    dict(kernel="poly", degree=2, gamma=0.5, coef0=0),
    dict(kernel="sigmoid", gamma=0.01, coef0=0.5),
]


def rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


@pytest.mark.parametrize("params", KERNELS, ids=lambda p: p["kernel"] + str(p.get("degree", "")))
@pytest.mark.parametrize("alpha", [0.1, 2.0])
def test_matches_sklearn(diabetes, params, alpha):
    X, y = diabetes
    ours = KernelRidge(alpha=alpha, **params).fit(X[:300], y[:300])
    ref = SkKernelRidge(alpha=alpha, **params).fit(X[:300], y[:300])
    assert rel(ours.predict(X[300:]), ref.predict(X[300:])) < 1e-6


@pytest.mark.parametrize("solver", ["dual", "primal"])
def test_primal_and_dual_agree(diabetes, solver):
    X, y = diabetes
    model = KernelRidge(alpha=0.5, kernel="poly", degree=2, gamma=1.0, solver=solver).fit(X[:200], y[:200])
    ref = SkKernelRidge(alpha=0.5, kernel="poly", degree=2, gamma=1.0).fit(X[:200], y[:200])
    assert model.solver_ == solver
    assert rel(model.predict(X[200:]), ref.predict(X[200:])) < 1e-6


def test_auto_picks_primal_when_features_are_fewer_than_samples(diabetes):
    X, y = diabetes
    assert KernelRidge(kernel="linear").fit(X, y).solver_ == "primal"  # D = 10 < n
    assert KernelRidge(kernel="linear").fit(X[:5], y[:5]).solver_ == "dual"  # D = 10 > n = 5
    assert KernelRidge(kernel="rbf").fit(X[:50], y[:50]).solver_ == "dual"  # no finite map


def test_linear_kernel_equals_ridge_without_intercept(diabetes):
    X, y = diabetes
    ours = KernelRidge(alpha=0.7, kernel="linear", solver="dual").fit(X, y)
    ref = Ridge(alpha=0.7, fit_intercept=False).fit(X, y)
    assert rel(ours.predict(X), ref.predict(X)) < 1e-8


def test_closed_form_dual_coefficients(diabetes):
    X, y = diabetes
    model = KernelRidge(alpha=0.3, kernel=RBF(gamma=0.2)).fit(X[:100], y[:100])
    K = RBF(gamma=0.2)(X[:100]).cpu().numpy()
    expected = np.linalg.solve(K + 0.3 * np.eye(100), y[:100])
    assert rel(model.dual_coef_.cpu().numpy(), expected) < 1e-8


def test_sample_weight_matches_sklearn(diabetes):
    X, y = diabetes
    sw = readonly(np.random.default_rng(0).uniform(0.1, 3.0, 200))
    for kernel in ("rbf", "linear"):
        ours = KernelRidge(alpha=0.4, kernel=kernel).fit(X[:200], y[:200], sample_weight=sw)
        ref = SkKernelRidge(alpha=0.4, kernel=kernel).fit(X[:200], y[:200], sample_weight=sw)
        assert rel(ours.predict(X[200:]), ref.predict(X[200:])) < 1e-6


def test_multi_output_with_alpha_per_target(diabetes):
    X, y = diabetes
    Y = readonly(np.c_[y, np.sqrt(y), -y])
    ours = KernelRidge(alpha=[0.1, 1.0, 0.1], kernel="rbf", gamma=0.3).fit(X[:250], Y[:250])
    ref = SkKernelRidge(alpha=[0.1, 1.0, 0.1], kernel="rbf", gamma=0.3).fit(X[:250], Y[:250])
    pred = ours.predict(X[250:])
    assert pred.shape == (len(X) - 250, 3)
    assert rel(pred, ref.predict(X[250:])) < 1e-6


def test_precomputed_kernel(diabetes):
    X, y = diabetes
    K = RBF(gamma=0.5)(X).cpu().numpy()
    ours = KernelRidge(alpha=0.2, kernel="precomputed").fit(readonly(K[:300, :300]), y[:300])
    ref = KernelRidge(alpha=0.2, kernel="rbf", gamma=0.5).fit(X[:300], y[:300])
    np.testing.assert_allclose(ours.predict(readonly(K[300:, :300])), ref.predict(X[300:]), rtol=1e-9)


def test_composite_kernel_equals_precomputed_sum(diabetes):
    X, y = diabetes
    k = 0.5 * RBF(gamma=0.3) + Linear() * RBF(gamma=0.1) + 2.0
    ours = KernelRidge(alpha=1.0, kernel=k).fit(X[:200], y[:200])
    K = k(X).cpu().numpy()
    ref = SkKernelRidge(alpha=1.0, kernel="precomputed").fit(K[:200, :200], y[:200])
    assert rel(ours.predict(X[200:]), ref.predict(K[200:, :200])) < 1e-6


def test_tiny_budget_gives_the_same_numbers(diabetes):
    X, y = diabetes
    dense = KernelRidge(alpha=0.3, kernel="rbf").fit(X[:200], y[:200]).predict(X[200:])
    # 200 x 200 Gram = 320 kB; a 400 kB budget forces small tiles for the Gram and the prediction.
    small = KernelRidge(alpha=0.3, kernel="rbf", memory_budget=400_000).fit(X[:200], y[:200])
    np.testing.assert_allclose(small.predict(X[200:]), dense, rtol=1e-12, atol=1e-9)


def test_gram_over_budget_names_the_alternatives(diabetes):
    X, y = diabetes
    with pytest.raises(MemoryBudgetError, match="NystroemKernelRidge"):
        KernelRidge(kernel="rbf", memory_budget=100_000).fit(X, y)
    with config_context(memory_budget=100_000), pytest.raises(MemoryBudgetError, match="memory budget"):
        KernelRidge(kernel="rbf").fit(X, y)


def test_singular_gram_gets_jitter_and_a_warning():
    X = readonly(np.repeat(np.arange(5.0)[:, None], 4, axis=0))  # duplicated rows: singular Gram
    y = readonly(np.arange(20.0))
    with pytest.warns(NumericalWarning, match="jitter"):
        model = KernelRidge(alpha=0.0, kernel="rbf", gamma=1.0).fit(X, y)
    assert model.jitter_ > 0
    assert np.all(np.isfinite(model.predict(X)))


def test_float32_is_close_to_float64(diabetes):
    X, y = diabetes
    ys = (y - y.mean()) / y.std()
    d64 = KernelRidge(alpha=1.0, kernel="rbf").fit(X[:300], ys[:300]).predict(X[300:])
    m32 = KernelRidge(alpha=1.0, kernel="rbf", dtype="float32").fit(X[:300], ys[:300])
    assert m32.dual_coef_.dtype == torch.float32
    np.testing.assert_allclose(m32.predict(X[300:]), d64, atol=1e-3)


def test_torch_in_torch_out_and_sparse_in(diabetes):
    X, y = diabetes
    ref = KernelRidge(kernel="rbf").fit(X[:200], y[:200]).predict(X[200:])
    model = KernelRidge(kernel="rbf").fit(torch.as_tensor(X[:200]), torch.as_tensor(y[:200]))
    out = model.predict(torch.as_tensor(X[200:]))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-10)
    sparse = KernelRidge(kernel="rbf").fit(sp.csr_matrix(X[:200]), y[:200]).predict(sp.csr_matrix(X[200:]))
    np.testing.assert_allclose(sparse, ref, rtol=1e-10)


def test_pandas_input(diabetes):
    pd = pytest.importorskip("pandas")
    X, y = diabetes
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = KernelRidge(kernel="rbf").fit(df.iloc[:200], pd.Series(y[:200]))
    np.testing.assert_allclose(model.predict(df.iloc[200:]), KernelRidge(kernel="rbf").fit(X[:200], y[:200]).predict(X[200:]))
    assert list(model.feature_names_in_) == list(df.columns)


@pytest.mark.parametrize("bad, match", [
    (dict(alpha=-1.0), "'alpha' parameter of KernelRidge"),
    (dict(alpha="x"), "'alpha' parameter"),
    (dict(kernel="nope"), "'kernel' parameter of KernelRidge"),
    (dict(kernel="rbf", gamma=-2.0), "'gamma' parameter of RBF"),
    (dict(kernel="poly", degree=0), "'degree' parameter of Polynomial"),
    (dict(solver="qr"), "'solver' parameter"),
    (dict(memory_budget=-5), "'memory_budget' parameter"),
    (dict(kernel="rbf", kernel_params={"bogus": 1}), "bogus"),
    (dict(device="tpu"), "device"),
])
def test_bad_parameters_name_the_parameter(diabetes, bad, match):
    X, y = diabetes
    with pytest.raises(ValueError, match=match):
        KernelRidge(**bad).fit(X[:20], y[:20])


def test_kernel_params_are_not_mutated(diabetes):
    X, y = diabetes
    params = {"gamma": 0.5}
    KernelRidge(kernel="rbf", kernel_params=params).fit(X[:20], y[:20])
    assert params == {"gamma": 0.5}


@pytest.mark.parametrize("X, match", [
    (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
    (np.array([[1.0, np.inf], [0.0, 1.0]]), "infinity"),
    (np.zeros((0, 3)), "0 sample"),
    (np.array([["a", "b"], ["c", "d"]], dtype=object), "could not convert|dtype"),
    (np.arange(4.0), "2D array"),
])
def test_bad_X(X, match):
    with pytest.raises(ValueError, match=match):
        KernelRidge().fit(X, np.arange(len(X), dtype=float))


def test_wrong_n_features_at_predict_and_one_sample(diabetes):
    X, y = diabetes
    model = KernelRidge(kernel="rbf").fit(X[:1], y[:1])  # one sample is a valid (tiny) problem
    assert model.predict(X[:3]).shape == (3,)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:3, :4])
    with pytest.raises(ValueError, match="NaN"):
        model.predict(np.full((2, X.shape[1]), np.nan))


def test_torch_input_checks():
    with pytest.raises(ValueError, match="ndim = 3"):
        KernelRidge().fit(torch.zeros(2, 2, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        KernelRidge().fit(torch.tensor([[float("nan")], [1.0]]), torch.zeros(2))


# -- classifier -----------------------------------------------------------------------------

def test_classifier_matches_ridge_classifier_for_linear_kernel(breast_cancer):
    X, y = breast_cancer
    ours = KernelRidgeClassifier(alpha=1.0, kernel="linear", fit_intercept=False).fit(X, y)
    ref = RidgeClassifier(alpha=1.0, fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), rtol=1e-7, atol=1e-9)
    assert (ours.predict(X) == ref.predict(X)).all()


def test_classifier_on_digits(digits):
    X, y = digits
    model = KernelRidgeClassifier(alpha=0.1, kernel="rbf", gamma=0.1).fit(X[:1200], y[:1200])
    assert model.score(X[1200:], y[1200:]) > 0.96
    scores = model.decision_function(X[1200:])
    assert scores.shape == (len(X) - 1200, 10)
    assert (model.classes_[scores.argmax(1)] == model.predict(X[1200:])).all()


def test_classifier_string_labels_and_one_vs_rest_codes(breast_cancer):
    X, y = breast_cancer
    labels = np.where(y == 1, "benign", "malignant")
    model = KernelRidgeClassifier(kernel="rbf", gamma=0.05, alpha=0.5, fit_intercept=False).fit(X[:400], labels[:400])
    codes = np.where(labels[:400] == model.classes_[1], 1.0, -1.0)
    ref = SkKernelRidge(kernel="rbf", gamma=0.05, alpha=0.5).fit(X[:400], codes)
    np.testing.assert_allclose(model.decision_function(X[400:]), ref.predict(X[400:]), rtol=1e-7, atol=1e-9)
    assert set(model.predict(X[400:])) <= {"benign", "malignant"}


def test_classifier_one_class_is_an_error(breast_cancer):
    X, _ = breast_cancer
    with pytest.raises(ValueError, match="only one class"):
        KernelRidgeClassifier().fit(X[:10], np.zeros(10))


def test_class_weight_balanced_helps_the_minority():
    rng = np.random.default_rng(0)
    X = readonly(np.r_[rng.normal(0, 1, (190, 2)), rng.normal(1.5, 1, (10, 2))])
    y = readonly(np.r_[np.zeros(190), np.ones(10)])
    plain = KernelRidgeClassifier(kernel="rbf", gamma=0.5).fit(X, y)
    balanced = KernelRidgeClassifier(kernel="rbf", gamma=0.5, class_weight="balanced").fit(X, y)
    assert (balanced.predict(X[y == 1]) == 1).mean() > (plain.predict(X[y == 1]) == 1).mean()


@cuda
@pytest.mark.gpu
def test_cuda_matches_cpu(diabetes):
    X, y = diabetes
    cpu = KernelRidge(kernel="rbf").fit(X[:300], y[:300]).predict(X[300:])
    gpu = KernelRidge(kernel="rbf", device="cuda").fit(X[:300], y[:300]).predict(X[300:])
    np.testing.assert_allclose(gpu, cpu, rtol=1e-8)
    t = KernelRidge(kernel=Polynomial(2)).fit(torch.as_tensor(X[:300], device="cuda"), torch.as_tensor(y[:300]))
    assert t.predict(torch.as_tensor(X[300:], device="cuda")).device.type == "cuda"
