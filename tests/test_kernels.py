"""Tests of mercer.kernels: exact references, contract invariants, algebra, errors, identities,
spectral densities, the Mercer check and the string registry."""

from __future__ import annotations

import math
import pickle
import types
from functools import partial

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import Matern as SkMatern
from sklearn.metrics.pairwise import (
    laplacian_kernel,
    linear_kernel,
    polynomial_kernel,
    rbf_kernel,
    sigmoid_kernel,
)

from contracts import KernelContract, assert_close, gaussian_data, readonly, shared_tensor
from mercer.kernels import (
    KERNELS,
    RBF,
    AdditiveChi2,
    Chi2,
    Cosine,
    ExpSineSquared,
    RationalQuadratic,
    White,
    Constant,
    Gaussian,
    HistogramIntersection,
    Intersection,
    Kernel,
    Laplacian,
    Linear,
    Matern,
    Polynomial,
    Precomputed,
    Product,
    Quadratic,
    Scaled,
    Sigmoid,
    Sum,
    check_mercer,
    encode_sets,
    parse_kernel_spec,
    resolve_kernel,
)

# torch warns (once per process) when it wraps a read-only array; see the report on _as_tensor.


# -- exact references -------------------------------------------------------------------------
def matern_ref(nu, length_scale):
    return lambda X, Z: SkMatern(length_scale=length_scale, nu=nu)(X, Z)


def histogram_ref(X, Z):
    return np.minimum(X[:, None, :], Z[None, :, :]).sum(axis=-1)


def intersection_ref(X, Z):
    """Naive double loop over the sets of indices that the 0/1 rows encode."""
    sets_x = [set(np.flatnonzero(row)) for row in X]
    sets_z = [set(np.flatnonzero(row)) for row in Z]
    return np.array([[len(a & b) for b in sets_z] for a in sets_x], dtype=np.float64)


def constant_ref(value):
    return lambda X, Z: np.full((len(X), len(Z)), value)


# -- per-kernel contract classes ----------------------------------------------------------------
class TestLinear(KernelContract):
    cases = [(Linear(), linear_kernel)]


class TestPolynomial(KernelContract):
    cases = [
        (Polynomial(), polynomial_kernel),  # degree 3, gamma = 1 / d, coef0 = 1
        (Polynomial(degree=2, gamma=0.5, coef0=0.0), partial(polynomial_kernel, degree=2, gamma=0.5, coef0=0)),
        (Polynomial(degree=5, gamma=1.0, coef0=2.0), partial(polynomial_kernel, degree=5, gamma=1.0, coef0=2)),
        (Polynomial(degree=1, gamma=2.0, coef0=0.5), partial(polynomial_kernel, degree=1, gamma=2.0, coef0=0.5)),
    ]


class TestQuadratic(KernelContract):
    cases = [
        (Quadratic(), partial(polynomial_kernel, degree=2, gamma=1.0, coef0=0)),
        (Quadratic(gamma=0.3, coef0=1.5), partial(polynomial_kernel, degree=2, gamma=0.3, coef0=1.5)),
    ]

    def test_default_is_homogeneous_polynomial_of_degree_2(self, data):
        X, Z = data
        assert_close(Quadratic()(X, Z), Polynomial(2, gamma=1, coef0=0)(X, Z))


class TestSigmoid(KernelContract):
    cases = [
        (Sigmoid(), sigmoid_kernel),  # gamma = 1 / d, coef0 = 1
        (Sigmoid(gamma=1.0, coef0=1.0), partial(sigmoid_kernel, gamma=1.0, coef0=1.0)),
        (Sigmoid(gamma=0.2, coef0=-0.5), partial(sigmoid_kernel, gamma=0.2, coef0=-0.5)),
    ]


class TestRBF(KernelContract):
    cases = [
        (RBF(), rbf_kernel),  # gamma = 1 / d
        (RBF(gamma=0.5), partial(rbf_kernel, gamma=0.5)),
        (RBF(gamma=3.0), partial(rbf_kernel, gamma=3.0)),
        (RBF(sigma=0.8), partial(rbf_kernel, gamma=1 / (2 * 0.8**2))),
    ]

    @pytest.mark.parametrize("sigma", [0.1, 0.8, 2.0])
    def test_sigma_form_equals_gamma_form(self, data, sigma):
        X, Z = data
        gamma = 1 / (2 * sigma**2)
        assert RBF(sigma=sigma) == RBF(gamma=gamma)
        assert_close(RBF(sigma=sigma)(X, Z), RBF(gamma=gamma)(X, Z))

    def test_gamma_none_is_one_over_n_features(self, data):
        X, Z = data
        assert_close(RBF()(X, Z), RBF(gamma=1 / X.shape[1])(X, Z))

    def test_gaussian_is_rbf(self):
        assert Gaussian is RBF


class TestLaplacian(KernelContract):
    cases = [
        (Laplacian(), laplacian_kernel),  # gamma = 1 / d
        (Laplacian(gamma=0.7), partial(laplacian_kernel, gamma=0.7)),
    ]


class TestMatern(KernelContract):
    cases = [
        (Matern(nu=nu, length_scale=ls), matern_ref(nu, ls))
        for nu in (0.5, 1.5, 2.5) for ls in (1.0, 0.4)
    ]

    @pytest.mark.parametrize("length_scale", [0.3, 1.0, 2.5])
    def test_half_integer_one_half_is_laplacian_in_1d(self, length_scale):
        X, Z = gaussian_data(d=1)
        assert_close(Matern(0.5, length_scale)(X, Z), Laplacian(gamma=1 / length_scale)(X, Z))

    def test_close_points_are_accurate(self):
        # r near 0 is where the GEMM expansion ||x||^2 + ||y||^2 - 2<x, y> would lose ~1e-5 under sqrt
        X = readonly(np.full((3, 4), 1e3))
        Z = readonly(X + 1e-9 * np.arange(12).reshape(3, 4))
        for nu in (0.5, 1.5, 2.5):
            assert_close(Matern(nu)(X, Z), matern_ref(nu, 1.0)(X, Z))


def binary_data():
    rng = np.random.default_rng(3)
    return readonly(rng.random((13, 12)) < 0.4), readonly(rng.random((9, 12)) < 0.4)


class TestIntersection(KernelContract):
    cases = [(Intersection(), intersection_ref)]
    make_data = staticmethod(binary_data)

    @pytest.mark.parametrize("sets", [
        ["kernel", "mercer", "", "abc", "rrr", "cab"],  # strings are sets of characters
        [{1, 2, 3}, {"a", 2}, frozenset(), [3, 3, "b"], ("a", "b", 1)],
    ], ids=["strings", "mixed-elements"])
    def test_counts_common_elements(self, sets):
        X, vocab = encode_sets(sets)
        expected = [[len(set(a) & set(b)) for b in sets] for a in sets]
        assert X.shape == (len(sets), len(vocab))
        assert_close(Intersection()(X.toarray()), np.array(expected, dtype=np.float64), tol=0)

    def test_fixed_vocabulary_for_new_samples(self):
        train, new = ["apple", "grape", "lemon"], ["pear", "melon", "kiwi", "xyz"]
        X_train, vocab = encode_sets(train)
        X_new, vocab_again = encode_sets(new, vocabulary=vocab)
        assert vocab_again == vocab and X_new.shape == (len(new), len(vocab))
        expected = [[len(set(a) & set(b)) for b in train] for a in new]
        assert_close(Intersection()(X_new.toarray(), X_train.toarray()), np.array(expected, dtype=np.float64), tol=0)

    def test_encoding_is_sorted_indicator(self):
        X, vocab = encode_sets(["ba", "c"])
        assert vocab == ["a", "b", "c"] and X.dtype == np.float64
        np.testing.assert_array_equal(X.toarray(), [[1, 1, 0], [0, 0, 1]])

    def test_rejects_non_indicator_rows(self):
        with pytest.raises(ValueError, match="0/1"):
            Intersection()(readonly([[0.0, 2.0], [1.0, 0.5]]))

    def test_accepts_encode_sets_output_directly(self):
        X, _ = encode_sets(["abc", "bcd"])
        assert_close(Intersection()(X), [[3.0, 2.0], [2.0, 3.0]])

    def test_diag_rejects_non_indicator_rows(self):
        with pytest.raises(ValueError):
            Intersection().diag(readonly([[0.0, 2.0]]))


def histogram_data():
    rng = np.random.default_rng(4)
    X = rng.integers(0, 5, size=(13, 6)) * rng.random((13, 6))
    return readonly(X), readonly(rng.integers(0, 5, size=(9, 6)))


class TestHistogramIntersection(KernelContract):
    cases = [(HistogramIntersection(), histogram_ref)]
    make_data = staticmethod(histogram_data)

    def test_rejects_negative_rows(self):
        X, Z = histogram_data()
        with pytest.raises(ValueError, match="negative"):
            HistogramIntersection()(X, readonly(-Z))

    def test_diag_rejects_negative_rows(self):
        with pytest.raises(ValueError):
            HistogramIntersection().diag(readonly([[-2.0, 3.0]]))


class TestConstant(KernelContract):
    cases = [(Constant(2.5), constant_ref(2.5)), (Constant(0.0), constant_ref(0.0))]


class TestComposite(KernelContract):
    """Sums, products and scalings of the kernels above, against the same combinations of references."""

    cases = [
        (0.5 * RBF(gamma=0.3) + Linear(), lambda X, Z: 0.5 * rbf_kernel(X, Z, gamma=0.3) + linear_kernel(X, Z)),
        (RBF(gamma=0.2) * Polynomial(2, coef0=1.0),
         lambda X, Z: rbf_kernel(X, Z, gamma=0.2) * polynomial_kernel(X, Z, degree=2, coef0=1)),
        (Laplacian() + Matern(2.5) + 2.0,
         lambda X, Z: laplacian_kernel(X, Z) + matern_ref(2.5, 1.0)(X, Z) + 2.0),
        (3.0 * (RBF() * Linear()), lambda X, Z: 3.0 * rbf_kernel(X, Z) * linear_kernel(X, Z)),
        ((Matern(1.5) + Sigmoid()) * Laplacian(0.5),
         lambda X, Z: (matern_ref(1.5, 1.0)(X, Z) + sigmoid_kernel(X, Z)) * laplacian_kernel(X, Z, gamma=0.5)),
        (sum([Linear(), Quadratic(), 0.25 * Constant(4.0)]),
         lambda X, Z: linear_kernel(X, Z) + polynomial_kernel(X, Z, degree=2, gamma=1, coef0=0) + 1.0),
    ]


class TestPrecomputed:
    """A Gram matrix passed through: k(K_rows, X_train) is K_rows itself."""

    @pytest.fixture
    def grams(self):
        X, Z = gaussian_data()
        return readonly(rbf_kernel(X)), readonly(rbf_kernel(Z, X)), X

    def test_returns_the_gram(self, grams):
        K, K_new, X = grams
        assert_close(Precomputed()(K), K, tol=0)
        assert_close(Precomputed()(K_new, X), K_new, tol=0)
        assert_close(Precomputed().diag(K), np.diag(K), tol=0)

    @pytest.mark.parametrize("rows, cols", [(slice(None), slice(None)), (slice(2, 7), slice(0, 4))])
    def test_block_is_slice(self, grams, rows, cols):
        K = grams[0]
        assert_close(Precomputed().block(shared_tensor(K), shared_tensor(K), rows, cols), K[rows, cols], tol=0)

    def test_output_does_not_alias_input(self, grams):
        K, K_new, X = grams
        K0, Kt = K.copy(), shared_tensor(K)
        k = Precomputed()
        for out in (k(Kt), k(Kt, Kt), k.diag(Kt), k.block(Kt, Kt, slice(0, 3), slice(None)), (2.0 * k)(Kt)):
            out.add_(1.0)
        np.testing.assert_array_equal(K, K0)

    def test_float32_and_scaling(self, grams):
        K = grams[0]
        assert Precomputed()(torch.as_tensor(K, dtype=torch.float32)).dtype == torch.float32
        assert_close((2.0 * Precomputed())(K), 2.0 * K)
        assert (2.0 * Precomputed()).is_precomputed

    def test_pickle(self):
        assert pickle.loads(pickle.dumps(Precomputed())) == Precomputed()

    def test_wrong_number_of_columns_raises(self, grams):
        K, K_new, X = grams
        with pytest.raises(ValueError, match="training samples"):
            Precomputed()(K_new, X[:-1])

    def test_diag_of_non_square_raises(self, grams):
        with pytest.raises(ValueError, match="square"):
            Precomputed().diag(grams[1])


# -- algebra ----------------------------------------------------------------------------------
PAIRS = [(RBF(0.5), Linear()), (Laplacian(), Polynomial(2)), (Matern(2.5), Constant(1.5))]


@pytest.fixture
def X():
    return gaussian_data()[0]


@pytest.mark.parametrize("k1, k2", PAIRS, ids=repr)
def test_sum_is_sum_of_values(X, k1, k2):
    assert isinstance(k1 + k2, Sum)
    assert_close((k1 + k2)(X), k1(X) + k2(X))
    assert_close((k1 + k2).diag(X), k1.diag(X) + k2.diag(X))


@pytest.mark.parametrize("k1, k2", PAIRS, ids=repr)
def test_product_is_product_of_values(X, k1, k2):
    assert isinstance(k1 * k2, Product)
    assert_close((k1 * k2)(X), k1(X) * k2(X))
    assert_close((k1 * k2).diag(X), k1.diag(X) * k2.diag(X))


@pytest.mark.parametrize("c", [0.5, 3, np.float64(2.0), torch.tensor(2.0, dtype=torch.float64)], ids=repr)
def test_scaled_is_scaled_values(X, c):
    k = RBF(0.5)
    for scaled in (c * k, k * c):
        assert isinstance(scaled, Scaled)
        assert_close(scaled(X), float(c) * k(X))
        assert_close(scaled.diag(X), float(c) * k.diag(X))


def test_nary_flattening():
    k1, k2, k3, k4 = RBF(), Linear(), Laplacian(), Matern()
    assert (k1 + k2 + k3).kernels == (k1, k2, k3)
    assert (k1 + (k2 + k3)).kernels == (k1, k2, k3)
    assert ((k1 + k2) + (k3 + k4)).kernels == (k1, k2, k3, k4)
    assert ((k1 * k2) * k3).kernels == (k1, k2, k3)
    assert (k1 * (k2 * k3)).kernels == (k1, k2, k3)
    assert len(((k1 + k2) * k3).kernels) == 2  # a product of a sum is not flattened


def test_builtin_sum_of_kernels(X):
    ks = [RBF(), Linear(), Laplacian()]
    total = sum(ks)
    assert isinstance(total, Sum) and total.kernels == tuple(ks)
    assert_close(total(X), sum(k(X) for k in ks))


def test_adding_zero_is_identity():
    k = RBF()
    assert k + 0 is k and 0 + k is k and k + 0.0 is k


def test_adding_a_number_adds_a_constant(X):
    assert (RBF() + 2.0).kernels == (RBF(), Constant(2.0))
    assert_close((2 + RBF())(X), RBF()(X) + 2.0)
    with pytest.raises(ValueError, match="Constant"):
        RBF() + (-1.0)


def test_nested_scaling_collapses(X):
    k = Linear()
    s = 2.0 * (3.0 * k)
    assert isinstance(s, Scaled) and s.kernel is k and s.scale == 6.0
    assert_close(s(X), 6.0 * k(X))


@pytest.mark.parametrize("c", [0, 0.0, -1.0, float("nan"), float("inf"), -float("inf"),
                               torch.tensor(-1.0), torch.tensor(float("nan")), torch.tensor([1.0, 2.0])], ids=repr)
def test_bad_scale_raises(c):
    with pytest.raises(ValueError, match=r"The 'scale' parameter of Scaled must be a float in the range \(0, inf\)\. Got "):
        RBF() * c


def test_infinite_tensor_scale_raises():
    with pytest.raises(ValueError):
        RBF() * torch.tensor(float("inf"))


def test_combining_with_non_kernel_raises():
    with pytest.raises(TypeError):
        RBF() + "linear"
    with pytest.raises(TypeError):
        RBF() * True


@pytest.mark.parametrize("combine", [
    lambda p, k: p + k, lambda p, k: k + p, lambda p, k: p * k, lambda p, k: k * p,
    lambda p, k: 2.0 * p + k, lambda p, k: sum([k, p]), lambda p, k: p + 1.0,
], ids=["p+k", "k+p", "p*k", "k*p", "2p+k", "sum", "p+1"])
def test_precomputed_cannot_be_combined(combine):
    with pytest.raises(ValueError, match="Precomputed"):
        combine(Precomputed(), RBF())


def test_equality_and_hash():
    assert RBF(0.5) == RBF(0.5) and hash(RBF(0.5)) == hash(RBF(0.5))
    assert RBF(0.5) != RBF(0.6) and RBF(0.5) != Laplacian(0.5)
    assert RBF() + Linear() == RBF() + Linear() and RBF() + Linear() != Linear() + RBF()


# -- bad hyperparameters and inputs -------------------------------------------------------------
NAN, INF = float("nan"), float("inf")
BAD_PARAMS = [
    (RBF, {"gamma": -1.0}, "gamma"), (RBF, {"gamma": 0}, "gamma"), (RBF, {"gamma": NAN}, "gamma"),
    (RBF, {"sigma": -1.0}, "sigma"), (RBF, {"sigma": 0.0}, "sigma"), (RBF, {"gamma": 1.0, "sigma": 1.0}, "sigma"),
    (Laplacian, {"gamma": 0.0}, "gamma"), (Laplacian, {"gamma": -2.0}, "gamma"),
    (Polynomial, {"gamma": -0.5}, "gamma"), (Sigmoid, {"gamma": 0.0}, "gamma"), (Sigmoid, {"coef0": NAN}, "coef0"),
    (Matern, {"length_scale": 0.0}, "length_scale"), (Matern, {"length_scale": -1.0}, "length_scale"),
    (Matern, {"length_scale": INF}, "length_scale"), (Matern, {"nu": 1.0}, "nu"), (Matern, {"nu": 3.5}, "nu"),
    (Polynomial, {"degree": 0}, "degree"), (Polynomial, {"degree": -2.5}, "degree"),
    (Polynomial, {"degree": True}, "degree"), (Polynomial, {"coef0": -1.0}, "coef0"),
    (Quadratic, {"coef0": -0.1}, "coef0"), (Constant, {"value": -1.0}, "value"),
]


@pytest.mark.parametrize("cls, params, name", BAD_PARAMS,
                         ids=[f"{c.__name__}({', '.join(f'{k}={v}' for k, v in p.items())})" for c, p, _ in BAD_PARAMS])
def test_bad_hyperparameter_raises_naming_it(cls, params, name):
    with pytest.raises(ValueError, match=name):
        cls(**params)


def test_sigmoid_infinite_coef0_raises():
    with pytest.raises(ValueError, match="coef0"):
        Sigmoid(coef0=float("inf"))


def test_float32_numpy_gives_float32():
    X, Z = (readonly(A, dtype=np.float32) for A in gaussian_data())
    assert RBF()(X, Z).dtype == torch.float32 and RBF().diag(X).dtype == torch.float32


def test_array_follows_the_tensor_in_either_position():
    X, Z = gaussian_data()
    Zt = torch.as_tensor(Z, dtype=torch.float32)
    for K in (RBF()(X, Zt), RBF()(Zt, X).T):
        assert K.dtype == torch.float32
        assert_close(K, RBF()(X, Z), tol=1e-5)


def test_non_contiguous_input():
    X, Z = gaussian_data()
    views = [readonly(np.asfortranarray(X)), X[::2], X[:, 1:]]
    for V in views:
        assert_close(Matern(2.5)(V, Z[:, : V.shape[1]]), Matern(2.5)(V.copy(), Z[:, : V.shape[1]]))


def test_negative_stride_input():
    X, Z = gaussian_data()
    assert_close(RBF()(X[::-1], Z), RBF()(X[::-1].copy(), Z))


@pytest.mark.parametrize("kernel", [RBF(), Linear(), Matern(), HistogramIntersection()], ids=repr)
def test_non_2d_input_raises(kernel):
    with pytest.raises(ValueError, match="ndim"):
        kernel(readonly(np.ones(4)))


# -- spectral densities (Bochner) -------------------------------------------------------------
STATIONARY = [RBF(), RBF(gamma=0.3), RBF(sigma=0.8), Laplacian(), Laplacian(gamma=0.8),
              Matern(0.5), Matern(1.5, 2.0), Matern(2.5, 0.7)]
N_FREQ = 20_000


@pytest.mark.parametrize("kernel", STATIONARY, ids=repr)
def test_frequencies_reproduce_kernel(kernel):
    """E[cos(w^T (x - y))] = k(x, y); the mean of m draws has std <= 1/sqrt(m), bound 5/sqrt(m)."""
    x, y = gaussian_data(n1=6, n2=6, d=3, scale=0.7, seed=1)
    W = kernel.sample_frequencies(3, N_FREQ, generator=torch.Generator().manual_seed(0))
    estimate = torch.cos(torch.as_tensor(x - y) @ W).mean(dim=1)
    assert_close(estimate, np.diag(kernel(x, y).cpu().numpy()), tol=5 / math.sqrt(N_FREQ))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kernel", STATIONARY, ids=repr)
def test_frequencies_shape_dtype_and_seed(kernel, dtype):
    def draw(seed):
        return kernel.sample_frequencies(5, 64, generator=torch.Generator().manual_seed(seed), dtype=dtype)

    W = draw(7)
    assert kernel.is_stationary
    assert W.shape == (5, 64) and W.dtype == dtype and bool(torch.isfinite(W).all())
    assert torch.equal(W, draw(7)) and not torch.equal(W, draw(8))


@pytest.mark.parametrize("kernel", [Linear(), Polynomial(), Sigmoid(), Intersection(), RBF() + Linear(),
                                    Matern() * Polynomial()], ids=repr)
def test_non_stationary_kernels_say_so(kernel):
    assert not kernel.is_stationary


@pytest.mark.parametrize("kernel", [RBF() + Laplacian(), 2.0 * Matern() * RBF(), RBF() + Constant(0.5)], ids=repr)
def test_sums_and_products_of_stationary_kernels_are_stationary(kernel):
    assert kernel.is_stationary


# -- Mercer check -----------------------------------------------------------------------------
class Skewed(Kernel):
    """A user kernel k(x, y) = exp(x_0 - y_0): not symmetric."""

    def _pairwise(self, X1, X2):
        return torch.exp(X1[:, :1] - X2[:, :1].T)

    def _paired(self, X1, X2):
        return torch.ones(X1.shape[0], dtype=X1.dtype)


@pytest.fixture
def mercer_data():
    return readonly(np.random.default_rng(5).normal(size=(60, 5)))


PSD_KERNELS = [RBF(), Polynomial(), Polynomial(4, gamma=1.0, coef0=0.0), 0.5 * Matern() + Linear()]


@pytest.mark.parametrize("kernel", PSD_KERNELS, ids=repr)
def test_psd_kernels_pass_the_mercer_check(kernel, mercer_data):
    report = check_mercer(kernel, mercer_data)
    assert report.is_mercer and report.is_psd and report.is_symmetric and report.n_samples == 60
    assert "looks like a Mercer kernel" in str(report)


def test_sigmoid_is_flagged_not_psd(mercer_data):
    report = check_mercer(Sigmoid(gamma=1.0, coef0=1.0), mercer_data)
    assert report.min_eigenvalue < 0 and not report.is_psd and report.is_symmetric and not report.is_mercer
    assert "NOT a Mercer kernel" in str(report) and f"{report.min_eigenvalue:.6g}" in str(report)


def test_non_symmetric_user_kernel_is_flagged(mercer_data):
    report = check_mercer(Skewed(), mercer_data)
    assert report.max_asymmetry > 0.1 and not report.is_symmetric and not report.is_mercer
    assert "NOT a Mercer kernel" in str(report)


def test_mercer_check_subsamples(mercer_data):
    report = check_mercer(RBF(), mercer_data, max_samples=20, random_state=1)
    assert report.n_samples == 20 and report == check_mercer(RBF(), mercer_data, max_samples=20, random_state=1)
    assert "n=20" in str(report)


def test_mercer_check_needs_a_kernel(mercer_data):
    with pytest.raises(TypeError):
        check_mercer(rbf_kernel, mercer_data)


# -- registry ---------------------------------------------------------------------------------
# what resolve_kernel(name, gamma=0.25, degree=2, coef0=0.5) must give: each takes only what it accepts
FORWARDED = {
    "linear": Linear(),
    "poly": Polynomial(2, gamma=0.25, coef0=0.5), "polynomial": Polynomial(2, gamma=0.25, coef0=0.5),
    "quadratic": Quadratic(gamma=0.25, coef0=0.5), "sigmoid": Sigmoid(gamma=0.25, coef0=0.5),
    "rbf": RBF(gamma=0.25), "gaussian": RBF(gamma=0.25), "laplacian": Laplacian(gamma=0.25), "matern": Matern(),
    "intersection": Intersection(), "histogram": HistogramIntersection(),
    "histogram_intersection": HistogramIntersection(), "precomputed": Precomputed(),
    # added with the scikit-learn names and the GP kernels (see tests/test_kernels_extra.py)
    "cosine": Cosine(), "chi2": Chi2(gamma=0.25), "additive_chi2": AdditiveChi2(),
    "rational_quadratic": RationalQuadratic(), "exp_sine_squared": ExpSineSquared(),
    "periodic": ExpSineSquared(), "white": White(),
}


def test_registry_table_is_covered():
    assert set(FORWARDED) == set(KERNELS)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_name_resolves(name):
    assert type(resolve_kernel(name)) is KERNELS[name]
    assert type(resolve_kernel(name.upper())) is KERNELS[name]


@pytest.mark.parametrize("name", sorted(FORWARDED))
def test_shared_parameters_forwarded_only_where_accepted(name):
    assert resolve_kernel(name, gamma=0.25, degree=2, coef0=0.5) == FORWARDED[name]


def test_kernel_params_not_mutated():
    params = {"nu": 2.5, "length_scale": 0.5}
    frozen = types.MappingProxyType(params)  # any write raises
    assert resolve_kernel("matern", kernel_params=frozen) == Matern(2.5, 0.5)
    assert params == {"nu": 2.5, "length_scale": 0.5}


def test_unknown_kernel_params_raise():
    with pytest.raises(ValueError, match="nu"):
        resolve_kernel("rbf", kernel_params={"nu": 1.5})


def test_kernel_instance_passes_through():
    k = 0.5 * RBF()
    assert resolve_kernel(k, gamma=3.0) is k


@pytest.mark.parametrize("kernel", ["nope", "", 3, None, RBF], ids=repr)  # a callable is a FunctionKernel
def test_unknown_kernel_raises_naming_kernel(kernel):
    with pytest.raises(ValueError, match="'kernel'"):
        resolve_kernel(kernel)


@pytest.mark.parametrize("spec, expected", [
    ("rbf:gamma=0.5+linear", RBF(0.5) + Linear()),
    ("rbf", RBF()),
    (" matern : nu=2.5, length_scale=0.5 ", Matern(2.5, 0.5)),
    ("poly:degree=2,coef0=0+laplacian:gamma=1+linear", Polynomial(2, coef0=0.0) + Laplacian(1.0) + Linear()),
], ids=repr)
def test_parse_kernel_spec(spec, expected):
    assert parse_kernel_spec(spec) == expected


@pytest.mark.parametrize("spec", ["rbf:gamma", "nope", "rbf:nu=1", "rbf:gamma=-1", "", "rbf+", "poly:degree=0.0",
                                  "precomputed+rbf"])
def test_bad_kernel_spec_raises(spec):
    with pytest.raises(ValueError):
        parse_kernel_spec(spec)


# -- CUDA -------------------------------------------------------------------------------------
CONTRACTS = [TestLinear, TestPolynomial, TestQuadratic, TestSigmoid, TestRBF, TestLaplacian, TestMatern,
             TestIntersection, TestHistogramIntersection, TestConstant, TestComposite]
ALL_CASES = [(kernel, ref, cls.make_data) for cls in CONTRACTS for kernel, ref in cls.cases]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel, reference, make_data", ALL_CASES, ids=[repr(c[0]) for c in ALL_CASES])
def test_cuda_matches_reference(kernel, reference, make_data):
    X, Z = make_data()
    Xc, Zc = (torch.as_tensor(A, device="cuda") for A in (X, Z))
    K, d = kernel(Xc, Zc), kernel.diag(Xc)
    assert K.device.type == "cuda" and d.device.type == "cuda"
    assert_close(K, reference(X, Z), tol=1e-10)
    assert_close(d, np.diag(reference(X, X)), tol=1e-10)
    assert_close(kernel(Xc, Z), K)  # numpy second argument follows the first onto the device
    assert_close(kernel(X, Zc), K)  # and a numpy first argument follows the second


# -- small-batch cache of the RBF kernel's stored-point norms --------------------------------
def test_rbf_small_batch_cache_is_exact_and_follows_edits():
    import gc

    from mercer.kernels import _stationary

    g = torch.Generator().manual_seed(3)
    Z = torch.randn(300, 7, generator=g, dtype=torch.float64)
    x = torch.randn(2, 7, generator=g, dtype=torch.float64)
    k = RBF(gamma=0.3)
    naive = lambda a, b: torch.exp(-0.3 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))  # noqa: E731
    assert_close(k(x, Z), naive(x, Z).detach(), tol=1e-12)
    assert id(Z) in _stationary._norm_cache
    assert_close(k(x, Z), naive(x, Z).detach(), tol=1e-12)  # from the cache
    Z[5] += 1.0  # an in-place edit must not be served stale
    assert_close(k(x, Z), naive(x, Z).detach(), tol=1e-12)
    assert_close(RBF(gamma=0.7)(x, Z), naive(x, Z) ** (0.7 / 0.3), tol=1e-12)  # another gamma: no stale hit
    key = id(Z)
    del Z
    gc.collect()
    assert key not in _stationary._norm_cache  # the entry goes with the tensor


def test_rbf_small_batch_cache_skips_autograd():
    from mercer.kernels import _stationary

    Z = torch.randn(50, 3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(1, 3, dtype=torch.float64)
    RBF(gamma=0.5)(x, Z).sum().backward()
    assert id(Z) not in _stationary._norm_cache
    assert Z.grad is not None and torch.isfinite(Z.grad).all()


def test_rbf_small_batch_row_blocks_share_the_cache_of_their_tensor():
    """The block engine passes ``Z[cols]``: those views are served from the whole tensor's norms,
    and an edit through any view invalidates them (views share the version counter)."""
    from mercer.kernels import _stationary
    from mercer.linalg import KernelOperator

    g = torch.Generator().manual_seed(5)
    Z = torch.randn(500, 6, generator=g, dtype=torch.float64)
    x = torch.randn(3, 6, generator=g, dtype=torch.float64)
    naive = lambda a, b: torch.exp(-0.2 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))  # noqa: E731
    k = RBF(gamma=0.2)
    assert_close(k(x, Z[100:350]), naive(x, Z[100:350]), tol=1e-12)
    assert id(Z) in _stationary._norm_cache  # the base's norms, not the view's
    v = torch.randn(500, 2, generator=g, dtype=torch.float64)
    op = KernelOperator(k, x, Z, memory_budget=40_000)  # several column tiles of Z
    assert op.plan.col_block < 500
    assert_close(op.matvec(v), naive(x, Z) @ v, tol=1e-12)
    Z[120:130] *= 3.0  # in place, through a view
    assert_close(k(x, Z[100:350]), naive(x, Z[100:350]), tol=1e-12)


def test_polynomial_with_a_non_integer_degree_as_sklearn():
    from sklearn.metrics.pairwise import polynomial_kernel

    from mercer.approx._polynomial import explicit_feature_map

    X = np.random.RandomState(0).uniform(size=(6, 3))
    k = Polynomial(degree=3.1, gamma=0.5, coef0=0.1)
    assert_close(k(X), polynomial_kernel(X, degree=3.1, gamma=0.5, coef0=0.1))
    assert_close(k.diag(X), np.diag(polynomial_kernel(X, degree=3.1, gamma=0.5, coef0=0.1)))
    assert Polynomial(degree=3.0).degree == 3 and isinstance(Polynomial(degree=3.0).degree, int)
    assert explicit_feature_map(k, 3) is None  # no finite monomial map for a non-integer power
    # a negative base has no real non-integer power: an error, not NaN
    with pytest.raises(ValueError, match=r"negative for some pairs .* no real power 3.1"):
        k(X - 0.5)
    with pytest.raises(ValueError, match="degree"):
        Polynomial(degree=0.0)
