"""TensorSketch and RandomMaclaurin: unbiasedness, consistency, scikit-learn's PolynomialCountSketch as
a reference of error magnitude, the transformer contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.kernel_approximation import PolynomialCountSketch

from mercer.approx._sketch import RandomMaclaurin, TensorSketch
from mercer.kernels import RBF, Linear, Polynomial, Quadratic

from conftest import cuda, readonly

CLASSES = [TensorSketch, RandomMaclaurin]
CONFIGS = [(2, 1.0, 1.0), (3, 0.5, 0.5), (2, 1.0, 0.0), (1, 2.0, 1.0)]


def points(n=8, d=12, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, d)) / np.sqrt(d)
    return readonly(X)


def exact(X, degree, gamma, coef0, Z=None):
    Xt = torch.as_tensor(np.array(X))
    return Polynomial(degree=degree, gamma=gamma, coef0=coef0)(Xt, None if Z is None else torch.as_tensor(np.array(Z))).cpu().numpy()


def estimates(cls, X, degree, gamma, coef0, m, seeds):
    out = []
    for s in seeds:
        Z = cls(degree, gamma, coef0, m, random_state=int(s)).fit_transform(X)
        out.append(Z @ Z.T)
    return np.stack(out)


# -- statistics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "p{}_g{}_c{}".format(*c))
def test_unbiased_within_four_standard_errors(cls, config):
    """The average of k_m over 250 seeds is within 4 standard errors of k, entry by entry; the same
    bound rejects a 3% scaling of the estimate (so the test has the power to see a bias)."""
    X = points()
    K = exact(X, *config)
    E = estimates(cls, X, *config, m=256, seeds=range(250))
    mean, se = E.mean(axis=0), E.std(axis=0, ddof=1) / np.sqrt(E.shape[0])
    iu = np.triu_indices(len(X))
    assert np.all(np.abs(mean - K)[iu] <= 4 * se[iu] + 1e-12)
    assert np.any(np.abs(1.03 * mean - K)[iu] > 4 * se[iu])


@pytest.mark.parametrize("cls", CLASSES)
def test_error_falls_as_n_components_grows(cls):
    """Mean |k_m - k| over 40 points, averaged over 3 fixed seeds, falls at each 4x increase of m
    (the variance falls like 1/m, so the error like 1/sqrt(m): ratios near 2)."""
    X = points(n=40, d=30)
    K = exact(X, 3, 1.0, 1.0)
    errors = [np.abs(estimates(cls, X, 3, 1.0, 1.0, m, range(3)) - K).mean() for m in (64, 256, 1024, 4096)]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(ratios > 1.4), (errors, ratios)


def test_tensor_sketch_equals_sklearn_given_the_same_hash_functions():
    """With scikit-learn's hash and sign functions copied in, the features are the same."""
    X = points(n=20, d=6)
    for degree, gamma, coef0 in CONFIGS:
        ref = PolynomialCountSketch(degree=degree, gamma=gamma, coef0=coef0, n_components=32, random_state=7).fit(X)
        ours = TensorSketch(degree, gamma, coef0, 32, random_state=0).fit(X)
        index, bit = ref.indexHash_, ref.bitHash_
        if coef0 == 0:  # sklearn drops the constant coordinate sqrt(coef0) = 0; ours keeps it (no effect)
            index, bit = np.c_[index, np.zeros(degree, int)], np.c_[bit, np.ones(degree)]
        ours.index_hash_ = torch.as_tensor(index, device=ours.index_hash_.device)
        ours.bit_hash_ = torch.as_tensor(bit, dtype=torch.float64, device=ours.bit_hash_.device)
        np.testing.assert_allclose(ours.transform(X), ref.transform(X), rtol=1e-10, atol=1e-12)


def test_tensor_sketch_error_matches_sklearn_polynomial_count_sketch():
    """Same construction as scikit-learn's: mean error over 10 seeds (others than sklearn's) within
    25% of sklearn's."""
    X = points(n=40, d=30)
    for degree, gamma, coef0 in CONFIGS[:3]:
        K = exact(X, degree, gamma, coef0)
        ours = np.abs(estimates(TensorSketch, X, degree, gamma, coef0, 256, range(10)) - K).mean()
        ref = np.mean([np.abs((Z := PolynomialCountSketch(degree=degree, gamma=gamma, coef0=coef0, n_components=256,
                                                          random_state=100 + s).fit_transform(X)) @ Z.T - K).mean()
                       for s in range(10)])
        assert 0.75 < ours / ref < 1.25, (degree, ours, ref)


def test_random_maclaurin_error_is_of_the_same_order_as_sklearn():
    """Random Maclaurin has a larger variance than TensorSketch (products of Rademacher
    projections), but stays within a small factor of PolynomialCountSketch's error."""
    X = points(n=40, d=30)
    K = exact(X, 2, 1.0, 1.0)
    ours = np.abs(estimates(RandomMaclaurin, X, 2, 1.0, 1.0, 512, range(10)) - K).mean()
    ref = np.mean([np.abs((Z := PolynomialCountSketch(degree=2, gamma=1.0, coef0=1.0, n_components=512,
                                                      random_state=s).fit_transform(X)) @ Z.T - K).mean()
                   for s in range(10)])
    assert ours < 4 * ref, (ours, ref)


def test_out_of_sample_cross_kernel_unbiased():
    X, Y = points(n=5), points(n=4, seed=1)
    K = exact(X, 2, 1.0, 1.0, Y)
    for cls in CLASSES:
        E = []
        for s in range(200):
            t = cls(2, 1.0, 1.0, 64, random_state=s).fit(X)
            E.append(t.transform(X) @ t.transform(Y).T)
        E = np.stack(E)
        assert np.all(np.abs(E.mean(0) - K) <= 4 * E.std(0, ddof=1) / np.sqrt(len(E)) + 1e-12)


# -- construction --------------------------------------------------------------------------------
def test_random_maclaurin_degree_measure():
    X = points()
    t = RandomMaclaurin(degree=3, gamma=1.0, coef0=1.0, n_components=4000, random_state=0).fit(X)
    q = 2.0 ** -(np.arange(4) + 1.0)
    np.testing.assert_allclose(t.degree_probabilities_, q / q.sum())
    freq = np.bincount(t.feature_degrees_, minlength=4) / 4000
    assert np.abs(freq - t.degree_probabilities_).max() < 0.03
    homogeneous = RandomMaclaurin(degree=3, gamma=1.0, coef0=0.0, n_components=50, random_state=0).fit(X)
    assert np.all(homogeneous.feature_degrees_ == 3)  # a_n = 0 below degree 3: no feature spent there
    # With coef0 = 0 and degree 1, a feature is <w, x> * sqrt(gamma / m): Z Z^T = gamma X W W^T X^T / m.
    lin = RandomMaclaurin(degree=1, gamma=2.0, coef0=0.0, n_components=30, random_state=0).fit(X)
    W = lin._rademacher[1][0].cpu().numpy()
    np.testing.assert_allclose(lin.transform(X), X @ W * np.sqrt(2.0 / 30), rtol=1e-12)


def test_tensor_sketch_degree_one_is_a_count_sketch():
    X = points()
    t = TensorSketch(degree=1, gamma=1.0, coef0=0.0, n_components=7, random_state=3).fit(X)
    S = np.zeros((X.shape[1] + 1, 7))
    S[np.arange(X.shape[1] + 1), t.index_hash_[0].cpu().numpy()] = t.bit_hash_[0].cpu().numpy()
    np.testing.assert_allclose(t.transform(X), np.c_[X, np.zeros(len(X))] @ S, atol=1e-14)


def test_gemm_count_sketch_equals_index_add():
    """The accelerator path (a GEMM with the hashing matrix, deterministic where index_add_ uses
    atomics) equals the CPU path, with slabs smaller than the input too."""
    X = torch.as_tensor(points(n=30, d=9))
    t = TensorSketch(degree=3, gamma=0.7, coef0=1.0, n_components=16, random_state=2).fit(X)
    A = torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], dim=1)
    for j in range(3):
        ref = t._count_sketch(A, j)
        for slab in (32 << 20, 3 * 16 * 8):  # one slab, and slabs of 3 input features
            torch.testing.assert_close(t._count_sketch_gemm(A, j, slab_bytes=slab), ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("cls", CLASSES)
def test_kernel_object_equals_parameters(cls):
    X = points()
    a = cls(degree=3, gamma=0.5, coef0=2.0, n_components=20, random_state=0).fit_transform(X)
    b = cls(n_components=20, kernel=Polynomial(degree=3, gamma=0.5, coef0=2.0), random_state=0).fit_transform(X)
    np.testing.assert_array_equal(a, b)
    c = cls(degree=2, gamma=1.0, coef0=0.0, n_components=20, random_state=0).fit_transform(X)
    d = cls(n_components=20, kernel=Quadratic(), random_state=0).fit_transform(X)
    np.testing.assert_array_equal(c, d)
    e = cls(degree=1, gamma=1.0, coef0=0.0, n_components=20, random_state=0).fit_transform(X)
    f = cls(n_components=20, kernel=Linear(), random_state=0).fit_transform(X)
    np.testing.assert_array_equal(e, f)
    g = cls(degree=2, gamma=None, coef0=1.0, n_components=20, random_state=0).fit(X)
    assert g.gamma_ == pytest.approx(1.0 / X.shape[1])


@pytest.mark.parametrize("cls", CLASSES)
def test_torch_in_torch_out_float32_and_determinism(cls):
    X = points()
    t = cls(n_components=32, random_state=5, dtype="float32").fit(X)
    Z = t.transform(X)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float32 and Z.shape == (8, 32)
    Z64 = cls(n_components=32, random_state=5).fit(X).transform(X)
    np.testing.assert_allclose(Z, Z64, rtol=1e-4, atol=1e-5)
    Xt = torch.tensor(X)
    Zt = cls(n_components=32, random_state=5).fit(Xt).transform(Xt)
    assert isinstance(Zt, torch.Tensor)
    np.testing.assert_allclose(Zt.cpu().numpy(), Z64, rtol=1e-12)
    assert list(t.get_feature_names_out()) == [f"{cls.__name__.lower()}{i}" for i in range(32)]


@cuda
@pytest.mark.parametrize("cls", CLASSES)
def test_cuda_matches_cpu(cls):
    X = points()
    cpu = cls(n_components=32, random_state=5).fit_transform(X)
    gpu = cls(n_components=32, random_state=5, device="cuda").fit(X)
    Zg = gpu.transform(torch.as_tensor(X, device="cuda"))
    assert Zg.device.type == "cuda"
    np.testing.assert_allclose(Zg.cpu().numpy(), cpu, rtol=1e-10, atol=1e-12)


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("params, match", [
    (dict(n_components=0), r"'n_components' parameter .* int in the range \[1, inf\). Got 0"),
    (dict(n_components=2.5), "'n_components' parameter .* Got 2.5"),
    (dict(degree=0), r"'degree' parameter .* int in the range \[1, inf\). Got 0"),
    (dict(gamma=-1.0), "'gamma' parameter .* Got -1.0"),
    (dict(coef0=-0.5), "'coef0' parameter .* Got -0.5"),
    (dict(kernel=RBF()), "'kernel' parameter .* Polynomial, Quadratic or Linear .* Got RBF"),
])
def test_bad_parameters(cls, params, match):
    with pytest.raises(ValueError, match=match):
        cls(**params).fit(points())


def test_bad_p_base():
    with pytest.raises(ValueError, match="'p_base' parameter of RandomMaclaurin must be a float in the range \\(1, inf\\). Got 1.0"):
        RandomMaclaurin(p_base=1.0).fit(points())


@pytest.mark.parametrize("cls", CLASSES)
def test_bad_data(cls):
    X = np.array(points())
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cls().fit(X)
    t = cls(n_components=4).fit(points())
    with pytest.raises(ValueError, match="12 features"):
        t.transform(points(d=5))
    with pytest.raises(ValueError, match="NaN"):
        t.transform(torch.as_tensor(X))
