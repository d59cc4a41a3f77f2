"""scikit-learn's GP kernel objects in mercer: ``from_sklearn`` against scikit-learn's own numbers,
the bounds it keeps, and estimators given a scikit-learn kernel."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
import sklearn.gaussian_process.kernels as sk
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

from mercer.kernels import (KERNEL_CONSTRAINTS, RBF, Constant, ExpSineSquared, Linear, Matern, Polynomial,
                            Product, RationalQuadratic, Scaled, Sum, White, from_sklearn, resolve_kernel)
from mercer._validation import check_param
from mercer.models import KernelRidge
from mercer.models.gp import GaussianProcessRegressor

from conftest import readonly


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(0)
    X = rng.uniform(0.1, 2.0, size=(30, 3))  # positive: chi2 and additive_chi2 need it
    return readonly(X, rng.uniform(0.1, 2.0, size=(11, 3)))


LEAVES = [
    sk.ConstantKernel(0.7),
    sk.RBF(0.8),
    sk.RBF([1.7]),  # a length-1 vector is isotropic in scikit-learn
    sk.Matern(0.9, nu=0.5),
    sk.Matern(1.2, nu=1.5),
    sk.Matern(0.6, nu=2.5),
    sk.Matern(1.1, nu=np.inf),
    sk.RationalQuadratic(0.7, alpha=2.5),
    sk.ExpSineSquared(1.3, periodicity=2.1),
    sk.DotProduct(0.6),
    sk.DotProduct(0.0),
    sk.WhiteKernel(0.3),
    sk.PairwiseKernel(0.4, metric="rbf"),
    sk.PairwiseKernel(0.2, metric="laplacian"),
    sk.PairwiseKernel(0.3, metric="poly", pairwise_kernels_kwargs={"degree": 2, "coef0": 0.5}),
    sk.PairwiseKernel(0.3, metric="sigmoid", pairwise_kernels_kwargs={"coef0": 0.1}),
    sk.PairwiseKernel(0.5, metric="chi2"),
    sk.PairwiseKernel(metric="additive_chi2"),
    sk.PairwiseKernel(metric="cosine"),
    sk.PairwiseKernel(metric="linear"),
]


def assert_same(kernel, X, Y):
    """``from_sklearn(kernel)`` gives scikit-learn's ``k(X)``, ``k(X, Y)`` and ``diag`` (float64)."""
    ours = from_sklearn(kernel)
    close = dict(rtol=1e-12, atol=1e-12)
    X, Y = X.copy(), Y.copy()  # scikit-learn's chi2 kernels refuse read-only arrays
    np.testing.assert_allclose(ours(X).numpy(), kernel(X), **close)
    np.testing.assert_allclose(ours(X, Y).numpy(), kernel(X, Y), **close)
    np.testing.assert_allclose(ours.diag(X).numpy(), kernel.diag(X), **close)
    assert ours(X, Y).dtype == torch.float64
    return ours


@pytest.mark.parametrize("kernel", LEAVES, ids=repr)
def test_leaf_equals_sklearn(kernel, data):
    assert_same(kernel, *data)


@pytest.mark.parametrize("kernel, expected", [
    (sk.ConstantKernel(0.7), Constant(0.7)),
    (sk.RBF(0.8), RBF(sigma=0.8)),
    (sk.Matern(0.9, nu=0.5), Matern(0.5, length_scale=0.9)),
    (sk.Matern(1.1, nu=np.inf), RBF(sigma=1.1)),
    (sk.RationalQuadratic(0.7, alpha=2.5), RationalQuadratic(0.7, alpha=2.5)),
    (sk.ExpSineSquared(1.3, periodicity=2.1), ExpSineSquared(1.3, periodicity=2.1)),
    (sk.DotProduct(0.6), Linear() + Constant(0.36)),
    (sk.WhiteKernel(0.3), White(0.3)),
    (sk.PairwiseKernel(0.3, metric="poly", pairwise_kernels_kwargs={"degree": 2, "coef0": 0.5}),
     Polynomial(2, gamma=0.3, coef0=0.5)),
    (sk.ConstantKernel(2.0) * sk.RBF(0.5), Scaled(2.0, RBF(sigma=0.5))),
    (sk.RBF(0.5) * sk.ConstantKernel(2.0), Scaled(2.0, RBF(sigma=0.5))),
    (sk.RBF(0.5) + sk.WhiteKernel(0.1), Sum([RBF(sigma=0.5), White(0.1)])),
    (sk.RBF(0.5) * sk.DotProduct(1.0), Product([RBF(sigma=0.5), Linear() + Constant(1.0)])),
    (sk.RBF(0.5) ** 3, Product([RBF(sigma=0.5)] * 3)),
    (sk.RBF(0.5) ** 1, RBF(sigma=0.5)),
    (sk.RBF(0.5) ** 0, Constant(1.0)),
    # c1 * (c2 * k): both factors kept (Scaled would merge them, and their bounds)
    (sk.ConstantKernel(2.0) * (sk.ConstantKernel(3.0) * sk.RBF(0.5)),
     Product([Constant(2.0), Scaled(3.0, RBF(sigma=0.5))])),
    (sk.ConstantKernel(0.0) * sk.RBF(0.5), Product([Constant(0.0), RBF(sigma=0.5)])),
], ids=lambda v: repr(v) if isinstance(v, sk.Kernel) else "")
def test_conversion_is_the_documented_kernel(kernel, expected):
    assert from_sklearn(kernel) == expected


def _random_kernel(rng, depth):
    """A random scikit-learn kernel: leaves, sums, products, constants, powers, 2-3 levels deep."""
    if depth == 0:
        leaves = [sk.RBF(rng.uniform(0.5, 2)), sk.Matern(rng.uniform(0.5, 2), nu=rng.choice([0.5, 1.5, 2.5])),
                  sk.RationalQuadratic(rng.uniform(0.5, 2), alpha=rng.uniform(0.5, 3)),
                  sk.ExpSineSquared(rng.uniform(0.5, 2), periodicity=rng.uniform(1, 3)),
                  sk.DotProduct(rng.uniform(0, 1)), sk.WhiteKernel(rng.uniform(0.1, 1)),
                  sk.ConstantKernel(rng.uniform(0.1, 2))]
        return leaves[rng.randint(len(leaves))]
    a, b = _random_kernel(rng, depth - 1), _random_kernel(rng, rng.randint(depth))
    choice = rng.randint(4)
    if choice == 0:
        return a + b
    if choice == 1:
        return a * b
    if choice == 2:
        return sk.ConstantKernel(rng.uniform(0.1, 2)) * a + b
    return a ** 2 + b


@pytest.mark.parametrize("seed", range(12))
def test_random_composites_equal_sklearn(seed, data):
    rng = np.random.RandomState(seed)
    kernel = _random_kernel(rng, 2 + seed % 2)
    assert_same(kernel, *data)


# -- bounds --------------------------------------------------------------------------------------
def test_bounds_are_kept_in_mercer_parameters():
    k = (sk.ConstantKernel(2.0, (1e-2, 1e2)) * sk.RBF(0.5, (0.1, 10.0))
         + sk.DotProduct(1.0, (0.5, 3.0)) + sk.WhiteKernel(0.1, "fixed"))
    ours = from_sklearn(k)
    assert ours.bounds == {
        "k1__scale": (1e-2, 1e2),
        "k1__kernel__gamma": (pytest.approx(0.5 / 10.0**2), pytest.approx(0.5 / 0.1**2)),
        "k3__value": (0.25, 9.0),  # the DotProduct's parts: Linear (k2), Constant(sigma_0^2) (k3)
        "k4__noise_level": "fixed",
    }
    assert set(ours.bounds) <= set(ours.get_params(deep=True))
    assert "bounds" not in ours.get_params(deep=True)
    assert ours.kernels[0].bounds == {"scale": (1e-2, 1e2), "kernel__gamma": ours.bounds["k1__kernel__gamma"]}
    assert ours.kernels[0].kernel.bounds == {"gamma": ours.bounds["k1__kernel__gamma"]}
    for kept in (pickle.loads(pickle.dumps(ours)), copy.deepcopy(ours)):
        assert kept.bounds == ours.bounds


@pytest.mark.parametrize("kernel, bounds", [
    (sk.Matern(1.0, (0.2, 5.0), nu=1.5), {"length_scale": (0.2, 5.0)}),
    (sk.Matern(1.0, (0.2, 5.0), nu=np.inf), {"gamma": (0.5 / 25.0, 0.5 / 0.04)}),
    (sk.RationalQuadratic(1.0, 2.0, (0.2, 5.0), (0.1, 10.0)), {"length_scale": (0.2, 5.0), "alpha": (0.1, 10.0)}),
    (sk.ExpSineSquared(1.0, 2.0, (0.2, 5.0), "fixed"), {"length_scale": (0.2, 5.0), "periodicity": "fixed"}),
    (sk.PairwiseKernel(1.0, (0.01, 3.0), metric="rbf"), {"gamma": (0.01, 3.0)}),
    (sk.PairwiseKernel(metric="linear"), {}),
    (sk.RBF(1.0, (0.0, np.inf)), {"gamma": (0.0, np.inf)}),
    (sk.RBF(1.0, (0.1, 10.0)) ** 2, {"k1__gamma": (0.005, 50.0), "k2__gamma": (0.005, 50.0)}),
], ids=lambda v: repr(v) if isinstance(v, sk.Kernel) else "")
def test_bounds_of_each_kernel(kernel, bounds):
    got = from_sklearn(kernel).bounds
    assert got.keys() == bounds.keys()
    for name, value in bounds.items():
        assert got[name] == (value if value == "fixed" else pytest.approx(value))


# -- refused kernels -----------------------------------------------------------------------------
@pytest.mark.parametrize("kernel, match", [
    (sk.Matern(1.0, nu=1.2), r"Got Matern\(length_scale=1, nu=1.2\) instead: .*0.5, 1.5, 2.5.*not nu=1.2"),
    (sk.RBF(1.0) + sk.Matern(1.0, nu=0.7), r"Got Matern\(length_scale=1, nu=0.7\) instead"),
    (sk.RBF(1.0) ** 0.5, r"exponent must be an integer >= 0, not 0.5"),
    (sk.RBF(1.0) ** -1, r"exponent must be an integer >= 0, not -1"),
    (sk.CompoundKernel([sk.RBF(), sk.RBF()]), r"Got CompoundKernel.* instead: it has no mercer equivalent"),
    (sk.PairwiseKernel(metric=lambda x, y: float(x @ y)), r"PairwiseKernel's metric must be among"),
    (sk.PairwiseKernel(metric="precomputed"), r"PairwiseKernel's metric must be among"),
], ids=lambda v: repr(v) if isinstance(v, sk.Kernel) else "")
def test_unsupported_kernels_are_refused_naming_them(kernel, match):
    with pytest.raises(ValueError, match=match) as info:
        from_sklearn(kernel)
    assert "built from ConstantKernel, RBF, Matern" in str(info.value)  # what is supported


def test_user_subclass_and_non_kernels_are_refused():
    class MyRBF(sk.RBF):
        pass

    with pytest.raises(ValueError, match="Got MyRBF.* instead: it has no mercer equivalent"):
        from_sklearn(MyRBF(1.0))
    with pytest.raises(ValueError, match="must be a scikit-learn GP kernel"):
        from_sklearn(RBF())


# -- anisotropic kernels (mercer's per-feature scales, ARD) ----------------------------------------
ANISOTROPIC = [
    sk.RBF([0.5, 1.3, 2.0]),
    sk.Matern([0.5, 1.3, 2.0], nu=0.5),
    sk.Matern([0.7, 1.1, 0.4], nu=1.5),
    sk.Matern([0.5, 1.3, 2.0], nu=2.5),
    sk.Matern([0.5, 1.3, 2.0], nu=np.inf),
    sk.ConstantKernel(1.5) * sk.RBF([0.5, 1.3, 2.0]) + sk.WhiteKernel(0.2),
    sk.RBF([0.9, 0.3, 1.2]) * sk.Matern(0.8, nu=1.5) + sk.DotProduct(0.3),
]


@pytest.mark.parametrize("kernel", ANISOTROPIC, ids=repr)
def test_anisotropic_kernels_equal_sklearn(kernel, data):
    assert_same(kernel, *data)


def test_anisotropic_conversion_and_bounds():
    ours = from_sklearn(sk.RBF([0.5, 2.0], [(0.1, 10.0), (0.2, 5.0)]))
    assert ours == RBF(sigma=[0.5, 2.0]) and ours.is_ard
    low, high = ours.bounds["gamma"]
    np.testing.assert_allclose(low, [0.5 / 10.0**2, 0.5 / 5.0**2])
    np.testing.assert_allclose(high, [0.5 / 0.1**2, 0.5 / 0.2**2])
    ours = from_sklearn(sk.Matern([0.5, 2.0], (0.1, 10.0), nu=2.5))
    assert ours == Matern(2.5, length_scale=[0.5, 2.0])
    assert ours.bounds == {"length_scale": ((0.1, 0.1), (10.0, 10.0))}


def test_anisotropic_length_scale_of_other_kernels_is_refused():
    with pytest.raises(ValueError, match=r"Got RationalQuadratic\(.*\[1.0, 2.0\].*\) instead: an anisotropic"):
        from_sklearn(sk.RationalQuadratic([1.0, 2.0]))  # scikit-learn's own repr and call fail on it


# -- estimators ----------------------------------------------------------------------------------
def test_resolve_kernel_and_constraints_accept_sklearn_kernels():
    k = sk.ConstantKernel(2.0) * sk.RBF(0.5)
    assert resolve_kernel(k, gamma=3.0, kernel_params={"ignored": 1}) == Scaled(2.0, RBF(sigma=0.5))
    check_param("KernelRidge", "kernel", k, KERNEL_CONSTRAINTS["kernel"])
    with pytest.raises(ValueError, match="The 'kernel' parameter of KernelRidge must be a scikit-learn kernel"):
        resolve_kernel(sk.Matern(nu=1.2), owner="KernelRidge")


@pytest.mark.parametrize("k", [sk.RBF(0.8), sk.RBF([0.5, 1.3, 2.0]), sk.ConstantKernel(2.0) * sk.Matern(0.9)],
                         ids=repr)
def test_kernel_ridge_equals_sklearn_kernel_ridge(k, data):
    X, Xt = data
    y = np.sin(X).sum(1)
    ref = SkKernelRidge(alpha=0.1, kernel=k).fit(X, y)  # scikit-learn evaluates GP kernels as a whole
    ours = KernelRidge(alpha=0.1, kernel=k).fit(X, y)
    np.testing.assert_allclose(ours.predict(Xt), ref.predict(Xt), rtol=1e-9, atol=1e-12)
    assert ours.kernel is k and clone(ours).kernel is not k  # kept as given, converted in fit


def test_estimator_searches_the_sklearn_kernel_parameters(data):
    X, _ = data
    y = np.sin(X).sum(1)
    est = KernelRidge(alpha=0.1, kernel=sk.ConstantKernel(1.0) * sk.RBF(1.0))
    assert est.get_params()["kernel__k2__length_scale"] == 1.0
    est.set_params(kernel__k2__length_scale=0.5).fit(X, y)
    np.testing.assert_allclose(est.predict(X), KernelRidge(alpha=0.1, kernel=Scaled(1.0, RBF(sigma=0.5))).fit(X, y)
                               .predict(X), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", [
    sk.ConstantKernel(1.3) * sk.RBF(0.7),
    sk.ConstantKernel(0.8) * sk.Matern(1.1, nu=2.5) + sk.WhiteKernel(0.05),
    sk.RBF(0.6) + sk.ConstantKernel(0.5) * sk.RationalQuadratic(2.0, alpha=1.5),
], ids=repr)
def test_gp_with_fixed_sklearn_kernel_matches_sklearn(kernel, data):
    X, Xt = data
    y = np.sin(2 * X).sum(1)
    ref = SkGPR(kernel, alpha=0.01, optimizer=None).fit(X, y)
    ours = GaussianProcessRegressor(kernel, alpha=0.01, optimizer=None).fit(X, y)
    assert ours.log_marginal_likelihood_value_ == pytest.approx(ref.log_marginal_likelihood_value_, rel=1e-9)
    m1, s1 = ref.predict(Xt, return_std=True)
    m2, s2 = ours.predict(Xt, return_std=True)
    np.testing.assert_allclose(m2, m1, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(s2, s1, rtol=1e-7, atol=1e-10)


def test_gp_learns_hyperparameters_of_an_sklearn_kernel(data):
    """scikit-learn's mode: the same optimum as scikit-learn's GP (theta, LML, predictions), with
    ``kernel_`` a scikit-learn kernel, and the given kernel object left alone."""
    X, Xt = data
    y = np.sin(2 * X).sum(1) + 0.1 * np.random.RandomState(1).randn(len(X))
    kernel = sk.ConstantKernel(1.0) * sk.RBF(1.0) + sk.WhiteKernel(0.1)
    gp = GaussianProcessRegressor(kernel, random_state=0).fit(X, y)
    ref = SkGPR(kernel, random_state=0).fit(X, y)
    assert type(gp.kernel_) is type(ref.kernel_) and gp.hyperparameter_names_ == ["k1__k1__constant_value",
                                                                                   "k1__k2__length_scale",
                                                                                   "k2__noise_level"]
    np.testing.assert_allclose(gp.kernel_.theta, ref.kernel_.theta, rtol=0, atol=1e-4)
    assert gp.log_marginal_likelihood_value_ == pytest.approx(ref.log_marginal_likelihood_value_, rel=1e-7)
    assert gp.log_marginal_likelihood(ref.kernel_.theta) == pytest.approx(
        ref.log_marginal_likelihood(ref.kernel_.theta), rel=1e-10)
    np.testing.assert_allclose(gp.predict(Xt), ref.predict(Xt), rtol=1e-4, atol=1e-6)
    assert gp.kernel is kernel and kernel.k1.k2.length_scale == 1.0  # the given object is not modified


def test_estimators_with_sklearn_kernels_save_and_load(tmp_path, data):
    """mercer.io keeps a scikit-learn kernel parameter (allow-listed, no pickle), and a GP fitted in
    scikit-learn's mode loads with its scikit-learn kernel_ and predicts bit for bit."""
    from mercer.io import load, save

    X, Xt = data
    y = np.sin(2 * X).sum(1)
    kernel = sk.ConstantKernel(1.0) * sk.RBF([1.0] * X.shape[1]) + sk.WhiteKernel(0.1)
    for est in (GaussianProcessRegressor(kernel, alpha=np.full(len(X), 1e-3)).fit(X, y),
                KernelRidge(alpha=0.1, kernel=sk.Matern(0.7, nu=1.5)).fit(X, y)):
        save(est, tmp_path / "m.mercer")
        back = load(tmp_path / "m.mercer")
        assert repr(back.get_params()["kernel"]) == repr(est.get_params()["kernel"])
        np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    assert type(back.kernel) is sk.Matern
    gp = GaussianProcessRegressor(kernel, alpha=np.full(len(X), 1e-3)).fit(X, y)
    save(gp, tmp_path / "gp.mercer")
    load_gp = load(tmp_path / "gp.mercer")
    assert type(load_gp.kernel_) is type(gp.kernel_)
    np.testing.assert_array_equal(load_gp.kernel_.theta, gp.kernel_.theta)
    assert load_gp.log_marginal_likelihood(gp.theta_) == gp.log_marginal_likelihood(gp.theta_)
