"""Per-feature scales (ARD) of RBF, Laplacian and Matérn: exact values against scikit-learn's
anisotropic kernels (and a naive formula for Laplacian), the kernel contract, validation,
parameters, composites, the block engine, estimators, random Fourier features and persistence."""

from __future__ import annotations

import copy
import json
import math
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF as SkRBF
from sklearn.gaussian_process.kernels import Matern as SkMatern

from contracts import KernelContract, assert_close, gaussian_data, readonly
from mercer.approx import RandomFourierFeatures
from mercer.io import kernel_from_dict, kernel_to_dict, load, save
from mercer.kernels import RBF, Laplacian, Linear, Matern
from mercer.linalg import KernelOperator
from mercer.models import GaussianProcessRegressor, KernelRidge, KernelRidgeCV, KernelSVC

LS = np.array([0.5, 1.3, 2.0, 0.8])  # per-feature length scales for d = 4 (gaussian_data's default)
GAMMA = 1.0 / (2.0 * LS**2)
LAP = np.array([0.3, 1.0, 2.0, 0.7])


def laplacian_ref(gamma):
    g = np.asarray(gamma)
    return lambda X, Z: np.exp(-(np.abs(X[:, None, :] - Z[None, :, :]) * g).sum(-1))


def sk(kernel):
    return lambda X, Z: kernel(X, Z)


# -- exact values and the kernel contract ----------------------------------------------------
class TestARDRBF(KernelContract):
    cases = [
        (RBF(gamma=GAMMA), sk(SkRBF(length_scale=LS))),
        (RBF(gamma=list(GAMMA)), sk(SkRBF(length_scale=LS))),
        (RBF(sigma=torch.tensor(LS)), sk(SkRBF(length_scale=LS))),
        (RBF(gamma=[0.1, 4.0, 1.0, 0.02]), sk(SkRBF(length_scale=1 / np.sqrt(2 * np.array([0.1, 4.0, 1.0, 0.02]))))),
    ]


class TestARDLaplacian(KernelContract):
    cases = [
        (Laplacian(gamma=LAP), laplacian_ref(LAP)),
        (Laplacian(gamma=tuple(LAP[::-1])), laplacian_ref(LAP[::-1])),
    ]


class TestARDMatern(KernelContract):
    cases = [(Matern(nu=nu, length_scale=LS), sk(SkMatern(length_scale=LS, nu=nu))) for nu in (0.5, 1.5, 2.5)]


@pytest.mark.parametrize("make", [RBF, Laplacian, lambda g: Matern(2.5, g)])
def test_equal_scales_give_the_scalar_kernel(make):
    X, Z = gaussian_data(d=5)
    assert_close(make([0.7] * 5)(X, Z), make(0.7)(X, Z))


def test_few_rows_against_many_match_the_full_path():
    # prediction of a small batch takes another route through the distance
    X, Z = gaussian_data(n1=3, n2=200, d=4)
    k = RBF(gamma=GAMMA)
    assert_close(k(X, Z), SkRBF(length_scale=LS)(X, Z))
    assert_close(k(X, Z), k(np.vstack([X, Z]), Z)[:3])


def test_float32_inputs():
    X, Z = gaussian_data()
    for k in (RBF(gamma=GAMMA), Laplacian(gamma=LAP), Matern(1.5, LS)):
        K32 = k(torch.tensor(X, dtype=torch.float32), torch.tensor(Z, dtype=torch.float32))
        assert K32.dtype == torch.float32
        torch.testing.assert_close(K32.double(), k(X, Z), rtol=1e-4, atol=1e-5)


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [[1.0, -2.0], [1.0, 0.0], [1.0, float("nan")], [float("inf"), 1.0], [],
                                   np.ones((2, 2)), ["a", "b"], [True, 1.0], np.array([1, 2], dtype=complex)])
@pytest.mark.parametrize("cls, name", [(RBF, "gamma"), (RBF, "sigma"), (Laplacian, "gamma"), (Matern, "length_scale")])
def test_invalid_vectors_refused(cls, name, value):
    with pytest.raises(ValueError, match=rf"The '{name}' parameter of {cls.__name__} must be a float in the range "
                                         r"\(0, inf\) or a 1-D array of them \(one per feature\)\. Got .* instead\."):
        cls(**{name: value})


@pytest.mark.parametrize("make", [lambda t: RBF(gamma=t), lambda t: RBF(sigma=t), lambda t: Laplacian(gamma=t),
                                  lambda t: Matern(2.5, length_scale=t)], ids=["RBF", "RBF(sigma)", "Laplacian", "Matern"])
def test_learnable_per_feature_tensor(make):
    """A 1-D tensor that requires grad is kept (not copied into floats): the kernel equals the one
    with float values, and autograd's gradient in every entry equals finite differences."""
    X, _ = gaussian_data(9, 4, seed=3)
    Z, _ = gaussian_data(7, 4, seed=4)
    v = torch.tensor([0.7, 1.2, 0.4, 2.0], dtype=torch.float64, requires_grad=True)
    k = make(v)
    assert make(v.detach().numpy()) == make(tuple(v.tolist())) and k.is_ard
    assert_close(k(X, Z), make(v.detach().numpy())(X, Z), tol=1e-14)
    (g,) = torch.autograd.grad(k(X, Z).sum(), v)
    for i in range(4):
        e = np.eye(4)[i] * 1e-6
        fd = (float(make(v.detach().numpy() + e)(X, Z).sum()) - float(make(v.detach().numpy() - e)(X, Z).sum())) / 2e-6
        assert float(g[i]) == pytest.approx(fd, rel=1e-6, abs=1e-8)
    assert v.grad is None and torch.equal(v.detach(), torch.tensor([0.7, 1.2, 0.4, 2.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="must be a float in the range"):
        make(torch.tensor([1.0, -1.0], requires_grad=True))


def test_scalars_unchanged():
    msg = r"The 'gamma' parameter of RBF must be a float in the range \(0, inf\) or None\. Got -1.0 instead\."
    with pytest.raises(ValueError, match=msg):
        RBF(gamma=-1.0)
    assert RBF(gamma=np.float64(0.5)).gamma == 0.5 and type(RBF(gamma=0.5).gamma) is float
    t = torch.tensor(0.5, requires_grad=True)
    assert RBF(gamma=t).gamma is t  # a one-element tensor stays a learnable scalar


def test_gamma_and_sigma_vectors_together_refused():
    with pytest.raises(ValueError, match="not both"):
        RBF(gamma=[1.0, 2.0], sigma=[1.0, 2.0])


@pytest.mark.parametrize("kernel, name", [(RBF(gamma=[1.0, 2.0, 3.0]), "gamma"), (RBF(sigma=[1.0, 2.0, 3.0]), "gamma"),
                                          (Laplacian(gamma=[1.0, 2.0, 3.0]), "gamma"),
                                          (Matern(0.5, [1.0, 2.0, 3.0]), "length_scale")])
def test_wrong_length_raises_at_evaluation(kernel, name):
    X, Z = gaussian_data(d=4)
    msg = (rf"The '{name}' parameter of {type(kernel).__name__} has 3 values \(one per feature\) but the data have "
           r"4 features; they must match\.")
    for call in (lambda: kernel(X), lambda: kernel(X, Z), lambda: kernel.diag(X),
                 lambda: KernelOperator(kernel, torch.as_tensor(X)).dense(),
                 lambda: kernel.sample_frequencies(4, 10, generator=torch.Generator().manual_seed(0))):
        with pytest.raises(ValueError, match=msg):
            call()


# -- parameters, identity, repr ----------------------------------------------------------------
def test_parameters_equality_hash_repr():
    k = RBF(sigma=LS)
    assert k.get_params() == {"gamma": tuple(GAMMA), "sigma": None}
    assert k.hyperparameters["gamma"] == tuple(GAMMA)
    assert k == RBF(gamma=GAMMA) == RBF(gamma=torch.tensor(GAMMA)) and hash(k) == hash(RBF(gamma=list(GAMMA)))
    assert k != RBF(gamma=GAMMA[::-1]) and k != RBF(gamma=1.0)
    assert RBF(gamma=[2.0]) != RBF(gamma=2.0)
    assert len({k, RBF(gamma=GAMMA), Laplacian(gamma=GAMMA)}) == 2
    assert repr(k) == "RBF(gamma=[2, 0.295858, 0.125, 0.78125])"
    assert repr(Matern(2.5, np.ones(20))) == "Matern(nu=2.5, length_scale=[1, 1, 1, ..., 1, 1] (20 values))"
    assert repr(RBF(gamma=0.5)) == "RBF(gamma=0.5)"
    for copied in (clone(k), copy.deepcopy(k), pickle.loads(pickle.dumps(k)), RBF(**k.get_params())):
        assert copied == k and copied is not k


def test_set_params_with_vectors():
    k = RBF(gamma=0.5)
    k.set_params(sigma=LS)
    assert k == RBF(gamma=GAMMA)
    k.set_params(gamma=[1.0, 2.0])
    assert k.gamma == (1.0, 2.0)
    with pytest.raises(ValueError, match="one per feature"):
        k.set_params(gamma=[1.0, -2.0])
    m = Matern(1.5, 1.0).set_params(length_scale=LS)
    assert m == Matern(1.5, LS)
    s = (2 * RBF(0.1) + Linear()).set_params(k1__kernel__gamma=GAMMA)
    assert s.kernels[0].kernel == RBF(gamma=GAMMA)


def test_float_of_vector_scale_is_refused_clearly():
    with pytest.raises(TypeError, match="per-feature"):
        float(RBF(gamma=GAMMA).gamma)


# -- composites, block engine, estimators --------------------------------------------------------
def test_composite():
    X, Z = gaussian_data()
    k = 2 * RBF(gamma=GAMMA) + Linear()
    assert_close(k(X, Z), 2 * SkRBF(length_scale=LS)(X, Z) + X @ Z.T)
    assert_close(k.diag(X), 2 + (X * X).sum(1))
    p = RBF(gamma=GAMMA) * Matern(0.5, LS)
    assert_close(p(X, Z), SkRBF(length_scale=LS)(X, Z) * SkMatern(length_scale=LS, nu=0.5)(X, Z))


@pytest.mark.parametrize("kernel", [RBF(gamma=GAMMA), Laplacian(gamma=LAP), Matern(2.5, LS),
                                    0.5 * RBF(gamma=GAMMA) + Matern(0.5, LS)])
def test_block_engine_with_a_tiny_budget(kernel):
    X, _ = gaussian_data(n1=150, d=4)
    Xt = torch.as_tensor(X)
    v = torch.linspace(-1, 1, 150, dtype=torch.float64)
    op = KernelOperator(kernel, Xt, memory_budget=16 * 1024)  # tiles of a few rows
    assert op.plan.row_block < 150
    assert_close(op.matvec(v), kernel(X) @ v)
    assert_close(op.diag(), kernel.diag(X))
    tiled = KernelOperator(kernel, Xt, memory_budget=1 << 20, max_tile_bytes=3_000)  # many small tiles
    assert_close(tiled.dense(), kernel(X))


def _regression(n=80, m=70, d=4, seed=1):
    rng = np.random.default_rng(seed)
    X, Xt = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    y = np.sin(X @ np.arange(1, d + 1)) + 0.1 * rng.normal(size=n)
    return readonly(X), readonly(y), readonly(Xt)


def test_kernel_ridge_equals_prescaled_features():
    X, y, Xt = _regression()
    s = np.sqrt(GAMMA)
    ard = KernelRidge(alpha=0.1, kernel=RBF(gamma=GAMMA)).fit(X, y)
    ref = KernelRidge(alpha=0.1, kernel=RBF(gamma=1.0)).fit(X * s, y)
    np.testing.assert_allclose(ard.predict(Xt), ref.predict(Xt * s), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ard.predict(Xt[:5]), ref.predict(Xt[:5] * s), rtol=0, atol=1e-10)  # small batch


def test_kernel_svc_with_ard_rbf():
    X, y, Xt = _regression()
    s = np.sqrt(GAMMA)
    labels = (y > 0).astype(int)
    ard = KernelSVC(kernel=RBF(gamma=GAMMA)).fit(X, labels)
    ref = KernelSVC(kernel=RBF(gamma=1.0)).fit(X * s, labels)
    np.testing.assert_allclose(ard.decision_function(Xt), ref.decision_function(Xt * s), rtol=0, atol=1e-6)


def _relevance_data(n=120, seed=0):
    """Feature 0 matters at a short scale, feature 1 at a long one, features 2 and 3 not at all."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=n)
    return X, y


def test_gp_learns_per_feature_scales_as_scikit_learn():
    """ARD RBF learned by the GP: the log marginal likelihood at any theta equals scikit-learn's
    anisotropic C * RBF + White, the optimum reaches scikit-learn's, and the irrelevant features
    get long length scales."""
    from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    X, y = _relevance_data()
    ours = GaussianProcessRegressor(1.0 * RBF(sigma=[1.0] * 4), noise=0.1, random_state=0).fit(X, y)
    assert ours.hyperparameter_names_ == ["scale"] + [f"kernel__gamma[{i}]" for i in range(4)] + ["noise"]
    ref = SkGPR(ConstantKernel(1.0) * SkRBF([1.0] * 4) + WhiteKernel(0.1), alpha=0.0, random_state=0).fit(X, y)
    c, ls, s = ref.kernel_.k1.k1.constant_value, ref.kernel_.k1.k2.length_scale, ref.kernel_.k2.noise_level
    theta = np.log(np.r_[c, 1.0 / (2.0 * ls**2), s])
    assert ours.log_marginal_likelihood(theta) == pytest.approx(ref.log_marginal_likelihood_value_, rel=1e-9)
    assert ours.log_marginal_likelihood_value_ >= ref.log_marginal_likelihood_value_ - 1e-4
    learned = 1.0 / np.sqrt(2.0 * np.asarray(ours.kernel_.kernel.gamma))  # length scales
    assert learned[0] < 2.0 and learned[1] > learned[0] and min(learned[2], learned[3]) > 10 * learned[0]
    assert isinstance(ours.kernel_.kernel.gamma, tuple)  # plain floats after fitting


def test_gp_with_sklearn_anisotropic_kernel_and_fixed_bounds():
    """A scikit-learn kernel with a vector length scale, one of its parts fixed (scikit-learn's
    mode): the fixed part is not learned, the per-feature bounds are those scikit-learn gave, and
    the optimum is scikit-learn's."""
    from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
    from sklearn.gaussian_process.kernels import ConstantKernel

    X, y = _relevance_data(80)
    k = ConstantKernel(2.0, constant_value_bounds="fixed") * SkRBF([1.0] * 4, length_scale_bounds=(0.1, 50.0))
    gp = GaussianProcessRegressor(k, alpha=0.01).fit(X, y)
    ref = SkGPR(k, alpha=0.01).fit(X, y)
    assert gp.hyperparameter_names_ == [f"k2__length_scale[{i}]" for i in range(4)]
    assert gp.kernel_.k1.constant_value == 2.0
    ls = gp.kernel_.k2.length_scale
    assert np.all(ls >= 0.1 * (1 - 1e-9)) and np.all(ls <= 50.0 * (1 + 1e-9)) and ls.max() == pytest.approx(50.0)
    np.testing.assert_allclose(gp.kernel_.theta, ref.kernel_.theta, atol=1e-3)
    assert gp.log_marginal_likelihood_value_ == pytest.approx(ref.log_marginal_likelihood_value_, rel=1e-6)


def test_krcv_learns_per_feature_scales():
    """KernelRidgeCV with an ARD Laplacian: one entry per feature, a lower LOO error than the
    isotropic kernel from the same start, and a fitted model equal to KernelRidge with them."""
    X, y = _relevance_data(100)
    iso = KernelRidgeCV(kernel=Laplacian(gamma=0.5)).fit(X, y)
    ard = KernelRidgeCV(kernel=Laplacian(gamma=[0.5] * 4)).fit(X, y)
    assert ard.hyperparameter_names_ == [f"gamma[{i}]" for i in range(4)] + ["alpha"]
    assert ard.cv_error_ < iso.cv_error_
    g = np.asarray(ard.kernel_.gamma)
    assert g[0] > 5 * max(g[2], g[3])
    ref = KernelRidge(alpha=ard.alpha_, kernel=Laplacian(gamma=g)).fit(X, y)
    np.testing.assert_allclose(ard.predict(X[:10]), ref.predict(X[:10]), rtol=1e-10, atol=1e-12)


def test_matern_ard_gp_equals_rescaled_inputs():
    X, y, _ = _regression(n=30)
    ard = GaussianProcessRegressor(kernel=Matern(1.5, LS), optimizer=None).fit(X, y)
    iso = GaussianProcessRegressor(kernel=Matern(1.5, 1.0), optimizer=None).fit(X / LS, y)
    np.testing.assert_allclose(ard.predict(X[:5]), iso.predict(X[:5] / LS), rtol=1e-10, atol=1e-12)
    assert ard.log_marginal_likelihood_value_ == pytest.approx(iso.log_marginal_likelihood_value_, rel=1e-10)


# -- random Fourier features -----------------------------------------------------------------------
def _rff_error(kernel, X, m, seed=0):
    Zf = RandomFourierFeatures(kernel, n_components=m, random_state=seed).fit_transform(X)
    return np.abs(Zf @ Zf.T - kernel(X).numpy()).max()


@pytest.mark.parametrize("kernel", [RBF(gamma=GAMMA), Laplacian(gamma=LAP), Matern(0.5, LS), Matern(1.5, LS),
                                    Matern(2.5, LS), 0.7 * RBF(gamma=GAMMA) + 0.3 * Matern(2.5, LS),
                                    RBF(gamma=GAMMA) * Laplacian(gamma=LAP)])
def test_random_features_approach_the_ard_gram(kernel):
    X, _ = gaussian_data(n1=40, d=4, scale=0.8)
    errors = [_rff_error(kernel, X, m) for m in (200, 20000)]
    # sup error of an average of m bounded terms: a few / sqrt(m)
    assert errors[1] < 6 / math.sqrt(20000)
    assert errors[1] < errors[0] / 3


@pytest.mark.parametrize("make", [RBF, Laplacian, lambda s: Matern(1.5, s)])
def test_equal_scales_draw_the_scalar_frequencies(make):
    gen = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    W_ard = make([0.7] * 3).sample_frequencies(3, 50, generator=gen())
    W = make(0.7).sample_frequencies(3, 50, generator=gen())
    assert torch.equal(W_ard, W)


@pytest.mark.parametrize("make", [RBF, Laplacian, lambda s: Matern(1.5, s)])
def test_frequency_scales_per_feature(make):
    W = make([0.5, 2.0]).sample_frequencies(2, 20000, generator=torch.Generator().manual_seed(0))
    W1 = make(1.0).sample_frequencies(2, 20000, generator=torch.Generator().manual_seed(0))
    v = torch.tensor([0.5, 2.0], dtype=torch.float64)
    # against unit scale: RBF N(0, 2 gamma_i) = sqrt(gamma_i) N(0, 2); Cauchy(0, gamma_i); Student-t / l_i
    f = v.sqrt() if make is RBF else v if make is Laplacian else 1 / v
    torch.testing.assert_close(W, W1 * f[:, None], rtol=1e-14, atol=0)


def test_scalar_random_features_unchanged():
    # the first features of row 1, as drawn before per-feature scales existed (seed 3)
    X = np.random.default_rng(0).normal(size=(150, 5))
    X = X[:10]  # the map is row-wise: a few rows give the same values
    expected = {
        "rbf": (RBF(gamma=0.3), [-0.0014744170206096193, -0.005981876698710212, 0.07401570798156686,
                                 0.1825682322524449, 0.029677430953251642]),
        "lap": (Laplacian(gamma=0.2), [0.10307503263767714, 0.04807283811754451, 0.18252510632833377,
                                       -0.15069462823894925, -0.042193057815957793]),
        "m25": (Matern(nu=2.5, length_scale=0.6), [-0.17827364590118547, -0.15172738591314625, -0.14980331039681158,
                                                    -0.03939340694116301, -0.10876513877018686]),
        "comp": (2 * RBF(0.2) + Matern(nu=2.5) * Laplacian(0.1),
                 [0.305273941478048, 0.23223868639639725, 0.08574426597802913, 0.08250951856881326,
                  0.3145047880838357]),
    }
    for kernel, values in expected.values():
        Zf = RandomFourierFeatures(kernel, 30, random_state=3).fit_transform(X)
        # Same draws, not same bits: the projection X W is a BLAS product whose last-bit rounding
        # depends on the CPU's kernels (it differs on AMD EPYC); a different draw moves every value
        # by O(0.1). The small atol covers features near zero (the cosine's argument is rounded
        # absolutely, ~1e-16 of its size).
        np.testing.assert_allclose(Zf[1, [0, 7, 29, 30, 45]], values, rtol=1e-13, atol=1e-15)


def test_orthogonal_features_need_one_scale():
    X, _ = gaussian_data()
    with pytest.raises(ValueError, match="isotropic"):
        RandomFourierFeatures(RBF(gamma=GAMMA), 10, orthogonal=True).fit(X)


# -- persistence ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [RBF(gamma=GAMMA / 3), Laplacian(gamma=LAP), Matern(0.5, LS),
                                    2 * RBF(sigma=[0.1, 1 / 3]) + Linear()])
def test_kernel_dict_round_trip_is_exact(kernel):
    spec = json.loads(json.dumps(kernel_to_dict(kernel)))
    back = kernel_from_dict(spec)
    assert back == kernel and hash(back) == hash(kernel)


def test_kernel_dict_is_a_list_of_floats():
    assert kernel_to_dict(RBF(gamma=[0.5, 2.0])) == {"type": "RBF", "params": {"gamma": [0.5, 2.0]}}


def test_fitted_kernel_ridge_round_trip(tmp_path):
    X, y, Xt = _regression()
    model = KernelRidge(alpha=0.1, kernel=RBF(gamma=GAMMA / 7)).fit(X, y)
    save(model, tmp_path / "ard.mercer")
    loaded = load(tmp_path / "ard.mercer")
    assert loaded.kernel == model.kernel
    np.testing.assert_array_equal(loaded.predict(Xt), model.predict(Xt))


# -- CUDA -------------------------------------------------------------------------------------------
ARD_CASES = [c for cls in (TestARDRBF, TestARDLaplacian, TestARDMatern) for c in cls.cases]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel, reference", ARD_CASES, ids=[repr(c[0]) for c in ARD_CASES])
def test_cuda_matches_reference(kernel, reference):
    X, Z = gaussian_data()
    Xc, Zc = (torch.as_tensor(A, device="cuda") for A in (X, Z))
    K = kernel(Xc, Zc)
    assert K.device.type == "cuda"
    assert_close(K, reference(X, Z), tol=1e-10)
    assert_close(kernel.diag(Xc), np.ones(len(X)), tol=1e-10)
    W = RandomFourierFeatures(kernel, 8, random_state=0).fit(X).frequencies_
    Wc = RandomFourierFeatures(kernel, 8, random_state=0, device="cuda").fit(X).frequencies_
    assert Wc.device.type == "cuda" and torch.equal(Wc.cpu(), W)  # drawn on the CPU: the same on any device
