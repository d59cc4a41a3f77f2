"""Tests of the kernels added for users: Cosine, Chi2, AdditiveChi2, RationalQuadratic, ExpSineSquared,
White, FunctionKernel (callable kernels), and every scikit-learn kernel name as a string."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import ExpSineSquared as SkExpSineSquared
from sklearn.gaussian_process.kernels import RationalQuadratic as SkRationalQuadratic
from sklearn.gaussian_process.kernels import WhiteKernel
from sklearn.metrics.pairwise import (
    KERNEL_PARAMS,
    PAIRWISE_KERNEL_FUNCTIONS,
    additive_chi2_kernel,
    chi2_kernel,
    cosine_similarity,
    pairwise_kernels,
)

from contracts import KernelContract, assert_close, gaussian_data, readonly, shared_tensor
from mercer import io as mio
from mercer.kernels import (
    KERNEL_CONSTRAINTS,
    KERNELS,
    RBF,
    AdditiveChi2,
    Chi2,
    Cosine,
    ExpSineSquared,
    FunctionKernel,
    Laplacian,
    RationalQuadratic,
    White,
    check_mercer,
    resolve_kernel,
)
from mercer.linalg import KernelOperator


# -- user functions (module level: they pickle) ---------------------------------------------------
def torch_rbf(X1, X2, gamma=0.5):
    """A block function written with torch."""
    return torch.exp(-gamma * torch.cdist(X1, X2) ** 2)


def numpy_rbf(X1, X2, gamma=0.5):
    """A block function written for numpy."""
    d2 = ((X1[:, None, :] - X2[None, :, :]) ** 2).sum(-1)
    return np.exp(-gamma * d2)


def unit_diagonal(X, gamma=0.5):
    return torch.ones(X.shape[0], dtype=X.dtype)


def wrong_shape(X1, X2):
    return torch.zeros(X1.shape[0])


def rbf_ref(gamma):
    return lambda X, Z: np.exp(-gamma * ((X[:, None, :] - Z[None, :, :]) ** 2).sum(-1))


# -- naive dense formulas (one pair at a time) -------------------------------------------------------
def naive(pair):
    return lambda X, Z: np.array([[pair(x, z) for z in Z] for x in X], dtype=np.float64).reshape(len(X), len(Z))


def cosine_pair(x, z):
    nx, nz = np.linalg.norm(x), np.linalg.norm(z)
    return 0.0 if nx == 0 or nz == 0 else float(x @ z) / (nx * nz)


def additive_chi2_pair(x, z):
    return -sum((a - b) ** 2 / (a + b) for a, b in zip(x, z) if a + b > 0)


def rq_pair(x, z, length_scale, alpha):
    return (1 + ((x - z) ** 2).sum() / (2 * alpha * length_scale**2)) ** -alpha


def ess_pair(x, z, length_scale, periodicity):
    return math.exp(-2 * math.sin(math.pi * np.linalg.norm(x - z) / periodicity) ** 2 / length_scale**2)


def on_copies(fn, **params):
    """scikit-learn's chi2 kernels (Cython) refuse read-only arrays: give them copies."""
    return lambda X, Z: fn(np.array(X), np.array(Z), **params)


def white_ref(noise):
    return lambda X, Z: noise * np.eye(len(X)) if Z is X else np.zeros((len(X), len(Z)))


# -- data ---------------------------------------------------------------------------------------------
def histogram_data():
    rng = np.random.default_rng(5)
    X = rng.integers(0, 4, size=(13, 6)) * rng.random((13, 6))  # zeros in both rows happen: 0/0 terms
    Z = rng.integers(0, 4, size=(9, 6)) * rng.random((9, 6))
    return readonly(X), readonly(Z)


def data_with_zero_rows():
    X, Z = gaussian_data()
    X, Z = X.copy(), Z.copy()
    X[3], Z[0] = 0.0, 0.0
    return readonly(X), readonly(Z)


def periodic_data():
    return gaussian_data(d=1, scale=2.0)


# -- contracts -----------------------------------------------------------------------------------------
class TestCosine(KernelContract):
    cases = [(Cosine(), cosine_similarity), (Cosine(), naive(cosine_pair))]
    make_data = staticmethod(data_with_zero_rows)

    def test_zero_rows_as_scikit_learn(self, data):
        X, _ = data
        d = Cosine().diag(X).numpy()
        assert d[3] == 0.0 and np.allclose(np.delete(d, 3), 1.0)


class TestChi2(KernelContract):
    cases = [(Chi2(), on_copies(chi2_kernel)), (Chi2(gamma=0.3), on_copies(chi2_kernel, gamma=0.3)),
             (Chi2(gamma=0.3), lambda X, Z: np.exp(0.3 * naive(additive_chi2_pair)(X, Z)))]
    make_data = staticmethod(histogram_data)


class TestAdditiveChi2(KernelContract):
    cases = [(AdditiveChi2(), on_copies(additive_chi2_kernel)), (AdditiveChi2(), naive(additive_chi2_pair))]
    make_data = staticmethod(histogram_data)

    def test_is_flagged_not_psd_but_conditionally_psd(self, data):
        X, _ = data
        report = check_mercer(AdditiveChi2(), X)
        assert not report.is_psd
        K = AdditiveChi2()(X).numpy()
        P = np.eye(len(X)) - 1.0 / len(X)  # projector on sum(c) = 0
        assert np.linalg.eigvalsh(P @ K @ P).min() > -1e-10


class TestRationalQuadratic(KernelContract):
    cases = [(RationalQuadratic(), SkRationalQuadratic()),
             (RationalQuadratic(0.7, 2.5), SkRationalQuadratic(length_scale=0.7, alpha=2.5)),
             (RationalQuadratic(0.7, 2.5), naive(partial(rq_pair, length_scale=0.7, alpha=2.5)))]


class TestExpSineSquared(KernelContract):
    cases = [(ExpSineSquared(), SkExpSineSquared()),
             (ExpSineSquared(0.8, 2.5), SkExpSineSquared(length_scale=0.8, periodicity=2.5)),
             (ExpSineSquared(0.8, 2.5), naive(partial(ess_pair, length_scale=0.8, periodicity=2.5)))]

    def test_one_feature_too(self):
        X, Z = periodic_data()
        assert_close(ExpSineSquared(1.3, 0.9)(X, Z), SkExpSineSquared(1.3, 0.9)(X, Z))


class TestWhite(KernelContract):
    cases = [(White(), white_ref(1.0)), (White(0.25), white_ref(0.25))]

    def test_scikit_learn_white_kernel(self, data):
        X, Z = data
        assert_close(White(0.3)(X), WhiteKernel(0.3)(X))
        assert_close(White(0.3)(X, Z), WhiteKernel(0.3)(X, Z))
        assert_close(White(0.3).diag(X), WhiteKernel(0.3).diag(X))


class TestFunctionKernel(KernelContract):
    cases = [(FunctionKernel(torch_rbf), rbf_ref(0.5)),
             (FunctionKernel(torch_rbf, {"gamma": 2.0}), rbf_ref(2.0)),
             (FunctionKernel(numpy_rbf, {"gamma": 0.3}, numpy=True), rbf_ref(0.3)),
             (FunctionKernel(torch_rbf, diagonal=unit_diagonal), rbf_ref(0.5)),
             (FunctionKernel(torch_rbf, {"gamma": 0.5}, diagonal=1.0), rbf_ref(0.5))]


# -- the block engine sees White's noise on the diagonal tiles --------------------------------------------
@pytest.mark.parametrize("kernel, dense", [
    (White(0.5), lambda X: 0.5 * torch.eye(len(X), dtype=X.dtype)),
    (RBF(0.3) + White(0.5), lambda X: RBF(0.3)(X) + 0.5 * torch.eye(len(X), dtype=X.dtype)),
    (2.0 * (White(0.5) + Laplacian()), lambda X: 2.0 * (Laplacian()(X) + 0.5 * torch.eye(len(X), dtype=X.dtype))),
], ids=["white", "rbf+white", "scaled-sum"])
def test_white_in_blocked_operator(kernel, dense):
    X = torch.as_tensor(gaussian_data(n1=37)[0])
    op = KernelOperator(kernel, X, memory_budget=1 << 20, max_tile_bytes=3_000)  # many small tiles
    assert min(op.plan.row_block, op.plan.col_block) < len(X)
    assert_close(op.dense(), dense(X))
    v = torch.linspace(-1, 1, len(X), dtype=X.dtype)
    assert_close(op.matvec(v), dense(X) @ v)
    assert_close(op.diag(), torch.diagonal(dense(X)))


def test_white_tiles_follow_global_indices():
    X = shared_tensor(gaussian_data(n1=12)[0])
    full = White(2.0)(X).numpy()
    for rows, cols in [(slice(0, 5), slice(2, 9)), (slice(4, 8), slice(4, 8)), (slice(1, None, 2), slice(None, None, 3)),
                       (slice(8, 12), slice(0, 4))]:
        assert_close(White(2.0).block(X, X, rows, cols), full[rows, cols])
        assert_close((White(2.0) + RBF()).block(X, X, rows, cols), (full + RBF()(X).numpy())[rows, cols])


def test_white_is_zero_between_different_inputs():
    X, _ = gaussian_data()
    Xt = torch.as_tensor(X)
    assert not White()(Xt, Xt.clone()).any()
    assert not White()(X, X.copy()).any()
    assert not White().is_stationary


# -- every scikit-learn kernel name ------------------------------------------------------------------------
SK_PARAMS = [{}, {"gamma": 0.3, "degree": 2, "coef0": 0.7}]


@pytest.mark.parametrize("params", SK_PARAMS, ids=["defaults", "given"])
@pytest.mark.parametrize("name", sorted(PAIRWISE_KERNEL_FUNCTIONS))
def test_every_scikit_learn_name(name, params):
    rng = np.random.default_rng(0)
    X, Y = readonly(rng.random((11, 5))), readonly(rng.random((7, 5)))  # non-negative: valid for chi2
    Xw, Yw = np.array(X), np.array(Y)  # scikit-learn's chi2 (Cython) refuses read-only arrays
    expected = pairwise_kernels(Xw, Yw, metric=name, filter_params=True, **params)
    assert_close(resolve_kernel(name, **params)(X, Y), expected)
    own = {k: v for k, v in params.items() if k in KERNEL_PARAMS[name]}  # what scikit-learn passes on
    assert_close(resolve_kernel(name, kernel_params=own)(X, Y), pairwise_kernels(Xw, Yw, metric=name, **own))


def test_new_names_resolve():
    assert set(PAIRWISE_KERNEL_FUNCTIONS) <= set(KERNELS)
    assert resolve_kernel("chi2", gamma=0.2) == Chi2(0.2)
    assert resolve_kernel("rational_quadratic", kernel_params={"alpha": 2.0}) == RationalQuadratic(alpha=2.0)
    assert resolve_kernel("periodic", kernel_params={"periodicity": 3.0}) == ExpSineSquared(periodicity=3.0)
    assert resolve_kernel("white", gamma=0.3, kernel_params={"noise_level": 0.1}) == White(0.1)


# -- errors --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [Chi2(), AdditiveChi2()], ids=repr)
def test_negative_histograms_raise(kernel):
    X = readonly([[1.0, -0.5], [0.0, 2.0]])
    with pytest.raises(ValueError, match=f"{type(kernel).__name__} expects non-negative"):
        kernel(X)
    with pytest.raises(ValueError, match="non-negative"):
        kernel.diag(X)


@pytest.mark.parametrize("cls, params, message", [
    (Chi2, {"gamma": -1.0}, "The 'gamma' parameter of Chi2 must be a float in the range (0, inf). Got -1.0 instead."),
    (RationalQuadratic, {"alpha": 0.0}, "The 'alpha' parameter of RationalQuadratic must be"),
    (RationalQuadratic, {"length_scale": math.inf}, "The 'length_scale' parameter of RationalQuadratic must be"),
    (ExpSineSquared, {"periodicity": -2.0}, "The 'periodicity' parameter of ExpSineSquared must be"),
    (White, {"noise_level": -0.1}, "The 'noise_level' parameter of White must be"),
    (FunctionKernel, {"function": 3}, "The 'function' parameter of FunctionKernel must be a callable"),
    (FunctionKernel, {"function": torch_rbf, "params": [1]}, "The 'params' parameter of FunctionKernel"),
    (FunctionKernel, {"function": torch_rbf, "diagonal": "x"}, "The 'diagonal' parameter of FunctionKernel"),
    (FunctionKernel, {"function": RBF()}, "The 'function' parameter of FunctionKernel must be a function"),
])
def test_bad_parameters_raise(cls, params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        cls(**params)


def test_function_returning_wrong_shape_names_it():
    X, Z = gaussian_data()
    with pytest.raises(ValueError, match=r"function wrong_shape returned shape \(13,\).*\(13, 9\) block"):
        FunctionKernel(wrong_shape)(X, Z)


# -- callable kernels ----------------------------------------------------------------------------------------
def test_resolve_kernel_wraps_a_callable_with_kernel_params():
    k = resolve_kernel(torch_rbf, gamma=9.0, kernel_params={"gamma": 0.2})
    assert k == FunctionKernel(torch_rbf, {"gamma": 0.2})  # gamma goes to callables only via kernel_params
    X, Z = gaussian_data()
    assert_close(k(X, Z), rbf_ref(0.2)(X, Z))
    assert "callable" in KERNEL_CONSTRAINTS["kernel"]


def test_diagonal_from_row_pairs_and_from_the_user():
    calls = []

    def counted(X):
        calls.append(len(X))
        return torch.ones(len(X), dtype=X.dtype)

    X, _ = gaussian_data()
    assert_close(FunctionKernel(torch_rbf).diag(X), np.ones(len(X)))
    assert_close(FunctionKernel(torch_rbf, diagonal=counted).diag(X), np.ones(len(X)))
    assert calls == [len(X)]


def test_function_kernel_keeps_gradients():
    X = torch.as_tensor(gaussian_data()[0])
    g = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    FunctionKernel(torch_rbf, {"gamma": g})(X).sum().backward()
    assert g.grad is not None and g.grad < 0


def test_function_kernel_composes():
    X, Z = gaussian_data()
    k = 0.5 * FunctionKernel(torch_rbf) + Laplacian()
    assert_close(k(X, Z), 0.5 * rbf_ref(0.5)(X, Z) + Laplacian()(X, Z).numpy())


@pytest.mark.parametrize("model", ["KernelRidge", "KernelSVC"])
def test_estimators_accept_a_callable_kernel(model):
    import mercer

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    if model == "KernelSVC":
        y = (y > 0).astype(int)
    cls = getattr(mercer, model)
    by_function = cls(kernel=torch_rbf, kernel_params={"gamma": 0.4}).fit(X, y)
    builtin = cls(kernel="rbf", gamma=0.4).fit(X, y)
    np.testing.assert_allclose(by_function.predict(X), builtin.predict(X), rtol=1e-10, atol=1e-10)
    if model == "KernelSVC":
        np.testing.assert_allclose(by_function.decision_function(X), builtin.decision_function(X), atol=1e-8)


# -- spectral densities ------------------------------------------------------------------------------------------
N_FREQ = 20_000


@pytest.mark.parametrize("kernel, d", [(RationalQuadratic(), 3), (RationalQuadratic(0.6, 0.8), 3),
                                       (ExpSineSquared(), 1), (ExpSineSquared(1.5, 2.0), 1)], ids=repr)
def test_frequencies_reproduce_kernel(kernel, d):
    """E[cos(w^T (x - y))] = k(x, y); the mean of m draws has std <= 1/sqrt(m), bound 5/sqrt(m)."""
    x, y = gaussian_data(n1=6, n2=6, d=d, scale=0.7, seed=1)
    W = kernel.sample_frequencies(d, N_FREQ, generator=torch.Generator().manual_seed(0))
    assert W.shape == (d, N_FREQ) and kernel.is_stationary
    estimate = torch.cos(torch.as_tensor(x - y) @ W).mean(dim=1)
    assert_close(estimate, np.diag(kernel(x, y).numpy()), tol=5 / math.sqrt(N_FREQ))


def test_periodic_frequencies_need_one_feature():
    with pytest.raises(ValueError, match="one feature"):
        ExpSineSquared().sample_frequencies(2, 10, generator=torch.Generator().manual_seed(0))


# -- persistence ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [Cosine(), Chi2(0.3), AdditiveChi2(), RationalQuadratic(0.5, 2.0),
                                    ExpSineSquared(0.7, 3.0), White(0.2), RBF(0.5) + White(0.1)], ids=repr)
def test_io_roundtrip(kernel):
    spec = mio.kernel_to_dict(kernel)
    again = mio.kernel_from_dict(spec)
    assert again == kernel and type(again) is type(kernel)


@pytest.mark.parametrize("kernel", [FunctionKernel(torch_rbf), RBF() + FunctionKernel(torch_rbf, {"gamma": 1.0})],
                         ids=["alone", "in-a-sum"])
def test_function_kernel_cannot_be_saved(kernel):
    with pytest.raises(TypeError, match=r"cannot save the kernel FunctionKernel\(torch_rbf.*Python function"):
        mio.kernel_to_dict(kernel)


def test_random_fourier_features_of_the_rational_quadratic_kernel():
    from mercer.approx import RandomFourierFeatures

    X = gaussian_data(n1=30, d=3)[0]
    kernel = RationalQuadratic(0.8, 1.5)
    Z = RandomFourierFeatures(kernel, n_components=4000, random_state=0).fit(X).transform(X)
    Z = np.asarray(Z)
    assert np.abs(Z @ Z.T - kernel(X).numpy()).max() < 0.1


@pytest.mark.parametrize("name", ["chi2", "cosine", "laplacian"])
def test_kernel_ridge_with_a_scikit_learn_name_equals_scikit_learn(name):
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

    import mercer

    rng = np.random.default_rng(1)
    X, y = rng.random((30, 4)), rng.normal(size=30)
    ours = mercer.KernelRidge(kernel=name, gamma=0.7, alpha=0.5).fit(X, y).predict(X)
    theirs = SkKernelRidge(kernel=name, gamma=0.7, alpha=0.5).fit(X, y).predict(X)
    np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-10)


def test_scikit_learn_parameter_protocol():
    from sklearn.base import clone

    k = FunctionKernel(torch_rbf, {"gamma": 0.5}, diagonal=1.0)
    assert k.get_params() == {"function": torch_rbf, "params": {"gamma": 0.5}, "diagonal": 1.0, "numpy": False}
    assert clone(k) == k and clone(k).params is not k.params
    assert RationalQuadratic(0.3, 2.0).set_params(alpha=4.0) == RationalQuadratic(0.3, 4.0)
    assert (RBF() + White(0.1)).set_params(k2__noise_level=0.5) == RBF() + White(0.5)


def test_white_noise_inside_a_composite_when_one_array_is_given_twice():
    X = np.random.default_rng(0).normal(size=(6, 2))
    k = RBF(0.5) + White(noise_level=0.3)
    np.testing.assert_allclose(k(X, X).numpy(), k(X).numpy(), rtol=0, atol=0)
    assert np.allclose(np.diag(k(X, X).numpy()) - np.diag(RBF(0.5)(X).numpy()), 0.3)


def test_function_in_scikit_learns_per_pair_convention():
    """A callable written for scikit-learn (two 1-D rows in, a number out) gives scikit-learn's
    Gram matrix, its diagonal, and the same model as scikit-learn's KernelRidge."""
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
    from sklearn.metrics.pairwise import pairwise_kernels

    from mercer.models import KernelRidge

    def per_pair(x, y, scale=1.0):
        return scale * float(np.exp(-np.abs(x - y).sum()))

    X, Z = gaussian_data()
    k = FunctionKernel(per_pair, {"scale": 2.0})
    assert_close(k(X, Z), pairwise_kernels(X, Z, metric=per_pair, scale=2.0))
    assert_close(k.diag(X), np.full(len(X), 2.0))
    y = X[:, 0]
    ours = KernelRidge(alpha=0.5, kernel=lambda a, b: a @ b).fit(X, y)  # a block call fails: (n, d) @ (n, d)
    ref = SkKernelRidge(alpha=0.5, kernel=lambda a, b: a @ b).fit(X, y)
    np.testing.assert_allclose(ours.predict(Z), ref.predict(Z), rtol=1e-10)
    with pytest.raises(ValueError, match="returned shape"):  # neither convention: the block error stands
        FunctionKernel(wrong_shape)(X, Z)


def test_function_convention_is_found_without_extra_calls():
    """One call on the first pair of rows tells the conventions apart and is not wasted: a per-pair
    function is called exactly once per entry (each unordered pair once on K(X, X)), a block
    function once more than its blocks (the probe), whatever the number of blocks after it."""
    X = gaussian_data()[0][:7]
    calls = []

    def per_pair(x, y):
        calls.append(np.shape(x))
        return float(np.exp(-((np.asarray(x) - np.asarray(y)) ** 2).sum()))

    k = FunctionKernel(per_pair)
    assert_close(k(X), pairwise_kernels(X, metric=per_pair))
    calls.clear()
    k = FunctionKernel(per_pair)
    k(X)
    assert len(calls) == 7 * 8 // 2
    calls.clear()
    k(X, X[:3])  # remembered: no probe
    assert len(calls) == 7 * 3

    blocks = []

    def block(A, B):
        blocks.append((A.shape[0], B.shape[0]))
        return torch_rbf(A, B)

    k = FunctionKernel(block)
    Xt = torch.as_tensor(X)
    assert_close(k(X, X[:3]), torch_rbf(Xt, Xt[:3]))
    k(X)
    assert blocks == [(1, 1), (7, 3), (7, 7)]
