"""No silent NaN (issue 12): on inputs whose squared norms overflow, extreme kernel parameters or huge
targets, every feature map and ridge-family estimator either returns finite values or raises an
error that names the cause. Each case below returned NaN (or raised an unrelated LinAlgError /
OverflowError) before."""

from __future__ import annotations

import numpy as np
import pytest

from mercer.approx import (IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap, RandomFourierFeatures,
                           RandomMaclaurin, TensorSketch, check_finite)
from mercer.models import (KernelRidge, KernelRidgeClassifier, NystroemKernelRidge, NystroemKernelRidgeClassifier,
                           RandomFeatureRidge, SketchedKernelRidge)

TOO_LARGE = r"input values too large: squared norms overflow float64 \(largest \|x\| = \d\.\d+e\+200, 4 features\)"


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = X[:, 0] + 0.1 * rng.normal(size=60)
    return X, y


MAPS = {
    "Nystroem": lambda: Nystroem(n_components=20, random_state=0),
    "LandmarkFeatures": lambda: LandmarkFeatures(n_components=20, random_state=0),
    "IncompleteCholesky": lambda: IncompleteCholesky(n_components=20),
    "PolynomialFeatureMap": lambda: PolynomialFeatureMap(),
    "TensorSketch": lambda: TensorSketch(n_components=20, random_state=0),
    "RandomMaclaurin": lambda: RandomMaclaurin(n_components=20, random_state=0),
}


@pytest.mark.parametrize("name", sorted(MAPS))
def test_feature_maps_name_overflowing_inputs(data, name):
    X, _ = data
    with pytest.raises(ValueError, match=f"{name}: .* not finite \\(NaN or infinity\\): {TOO_LARGE}"):
        MAPS[name]().fit_transform(X * 1e200)


@pytest.mark.parametrize("name", sorted(MAPS))
def test_feature_maps_at_transform_are_finite_or_name_the_cause(data, name):
    """Far from every landmark an RBF feature is exactly 0 (|x|^2 = inf, exp(-inf) = 0): a correct
    finite answer. Polynomial features of such inputs overflow: an error naming the cause."""
    X, _ = data
    model = MAPS[name]().fit(X)
    if name in ("Nystroem", "LandmarkFeatures", "IncompleteCholesky"):
        assert np.all(model.transform(X * 1e200) == 0.0)
    else:
        with pytest.raises(ValueError, match=f"{name}: the features are not finite.*{TOO_LARGE}"):
            model.transform(X * 1e200)


def test_random_fourier_features_stay_finite_on_large_inputs(data):
    X, _ = data
    assert np.isfinite(RandomFourierFeatures(n_components=20, random_state=0).fit_transform(X * 1e200)).all()


def test_random_maclaurin_names_gamma_when_its_coefficients_overflow(data):
    X, _ = data
    with pytest.raises(ValueError, match=r"RandomMaclaurin: .*overflow float64 with gamma=1e\+300, coef0=1, degree=2"):
        RandomMaclaurin(gamma=1e300, n_components=20, random_state=0).fit(X)


REGRESSORS = {
    "KernelRidge-rbf": lambda: KernelRidge(kernel="rbf"),
    "KernelRidge-linear": lambda: KernelRidge(kernel="linear"),
    "KernelRidge-poly": lambda: KernelRidge(kernel="poly"),
    "NystroemKernelRidge-direct": lambda: NystroemKernelRidge(n_centers=20, random_state=0, solver="direct"),
    "NystroemKernelRidge-cg": lambda: NystroemKernelRidge(n_centers=20, random_state=0, solver="cg"),
    "SketchedKernelRidge": lambda: SketchedKernelRidge(n_components=20, random_state=0),
}


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_ridge_estimators_name_overflowing_inputs(data, name):
    X, y = data
    owner = name.split("-")[0]
    with pytest.raises(ValueError, match=f"{owner}: .* not finite \\(NaN or infinity\\): {TOO_LARGE}"):
        REGRESSORS[name]().fit(X * 1e200, y)


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_ridge_predictions_are_finite_or_name_the_cause(data, name):
    """RBF models far from the data predict their intercept (kernel values exactly 0), a linear one
    the (finite) linear function; a polynomial kernel overflows, and so do float32 tiles (1e200 is
    inf in float32): errors that name the cause."""
    X, y = data
    model = REGRESSORS[name]().fit(X, y)
    if name in ("KernelRidge-poly", "NystroemKernelRidge-direct", "NystroemKernelRidge-cg"):
        with pytest.raises(ValueError, match=f"the predictions are not finite \\(NaN or infinity\\): {TOO_LARGE}"):
            model.predict(X * 1e200)
    elif name == "KernelRidge-linear":
        np.testing.assert_allclose(model.predict(X * 1e200), model.predict(X) * 1e200, rtol=1e-10)
    else:
        np.testing.assert_array_equal(model.predict(X * 1e200), np.full(len(X), model.intercept_))


@pytest.mark.parametrize("cls", [KernelRidgeClassifier, NystroemKernelRidgeClassifier])
def test_ridge_classifiers_name_overflowing_inputs(data, cls):
    X, y = data
    kw = {"kernel": "rbf"} if cls is KernelRidgeClassifier else {"n_centers": 20, "random_state": 0}
    with pytest.raises(ValueError, match=TOO_LARGE):
        cls(**kw).fit(X * 1e200, y > 0)


def test_random_feature_ridge_stays_finite_on_large_inputs(data):
    X, y = data
    assert np.isfinite(RandomFeatureRidge(n_components=20, random_state=0).fit(X * 1e200, y).predict(X * 1e200)).all()


@pytest.mark.parametrize("cls", [NystroemKernelRidge, NystroemKernelRidgeClassifier])
@pytest.mark.parametrize("solver", ["direct", "cg"])
def test_nystroem_ridge_names_a_gamma_its_float32_tiles_cannot_hold(data, cls, solver):
    """Was: all-NaN predictions with only a jitter warning."""
    X, y = data
    target = y if cls is NystroemKernelRidge else y > 0
    with pytest.raises(ValueError, match=rf"{cls.__name__}: the kernel parameter 'gamma' = 1e\+300 overflows float32, "
                                         r"the dtype of the kernel computation; use dtype='float64'"):
        cls(gamma=1e300, n_centers=20, random_state=0, solver=solver).fit(X, target)
    pred = cls(gamma=1e300, n_centers=20, random_state=0, solver="direct", dtype="float64").fit(X, target).predict(X)
    assert np.isfinite(np.asarray(pred, dtype=float)).all()


@pytest.mark.parametrize("solver", ["direct", "cg"])
def test_nystroem_ridge_names_targets_its_float32_tiles_cannot_hold(data, solver):
    X, y = data
    with pytest.raises(ValueError, match=r"target values too large: their squares overflow \(largest \|y\| = 2.\d+e\+300\)"):
        NystroemKernelRidge(n_centers=20, random_state=0, solver=solver).fit(X, y * 1e300)


def test_kernel_ridge_names_a_polynomial_gamma_that_overflows(data):
    X, y = data
    with pytest.raises(ValueError, match=r"KernelRidge: .* the kernel values overflow float64 with these parameters "
                                         r"\(gamma=1e\+300\)"):
        KernelRidge(kernel="poly", gamma=1e300).fit(X, y)


def test_float32_overflow_is_named_for_float32(data):
    X, _ = data
    model = LandmarkFeatures(n_components=20, random_state=0, dtype="float32").fit(X * 1e20)
    with pytest.raises(ValueError, match=r"squared norms overflow float32 \(largest \|x\| = \d\.\d+e\+20, 4 features\)"):
        model.transform(X * 1e20)
    ok = LandmarkFeatures(n_components=20, random_state=0, dtype="float64").fit(X * 1e20).transform(X * 1e20)
    assert np.isfinite(ok).all()


def test_check_finite_passes_finite_values_through():
    import torch

    check_finite([torch.ones(3), 2.0], "Owner", "values")
    with pytest.raises(ValueError, match="Owner: values are not finite"):
        check_finite([torch.ones(3), float("nan")], "Owner", "values")
