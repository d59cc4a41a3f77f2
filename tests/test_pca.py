"""KernelPCA against scikit-learn, closed forms and the seeds' examples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.decomposition import KernelPCA as SkKernelPCA

from mercer.approx import PolynomialFeatureMap
from mercer.kernels import RBF, Polynomial, Quadratic
from mercer.linalg import MemoryBudgetError
from mercer.models import KernelPCA

from conftest import cuda, readonly

SOLVERS = ["dense", "lanczos", "randomized", "power"]


def same_up_to_sign(A, B, tol):
    A, B = np.asarray(A), np.asarray(B)
    signs = np.sign((A * B).sum(axis=0))
    np.testing.assert_allclose(A * signs, B, atol=tol * max(np.abs(B).max(), 1.0))


@pytest.fixture(scope="module")
def digits_small(digits):
    X, _ = digits
    return readonly(X[:500]), readonly(X[500:700])


@pytest.mark.parametrize("solver", SOLVERS)
def test_matches_sklearn_embedding(digits_small, solver):
    X, Xt = digits_small
    k = 5 if solver == "power" else 8
    ours = KernelPCA(k, kernel="rbf", gamma=0.02, eigen_solver=solver, random_state=0)
    ref = SkKernelPCA(k, kernel="rbf", gamma=0.02, eigen_solver="dense")
    Z, Zref = ours.fit_transform(X), ref.fit_transform(X)
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    same_up_to_sign(Z, Zref, 1e-6)
    same_up_to_sign(ours.transform(Xt), ref.transform(Xt), 1e-6)


def test_transform_of_training_data_equals_fit_transform(digits_small):
    X, _ = digits_small
    model = KernelPCA(4, kernel="poly", degree=2, gamma=0.05)
    np.testing.assert_allclose(model.fit_transform(X), model.transform(X), atol=1e-8)


def test_linear_kernel_equals_pca(digits_small):
    from sklearn.decomposition import PCA

    X, Xt = digits_small
    ours = KernelPCA(5, kernel="linear").fit(X)
    ref = PCA(5).fit(X)
    same_up_to_sign(ours.transform(Xt), ref.transform(Xt), 1e-7)
    np.testing.assert_allclose(ours.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-8)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_ * (len(X) - 1) / len(X), rtol=1e-8)


def test_blocked_path_when_the_gram_does_not_fit(digits_small):
    X, Xt = digits_small
    dense = KernelPCA(5, kernel="rbf", gamma=0.02).fit(X)
    # 500 x 500 float64 = 2 MB; a 600 kB budget forces the implicit centred operator.
    blocked = KernelPCA(5, kernel="rbf", gamma=0.02, memory_budget=600_000, random_state=0).fit(X)
    assert blocked.solver_info_["method"] in ("randomized", "lanczos")
    np.testing.assert_allclose(blocked.eigenvalues_, dense.eigenvalues_, rtol=1e-6)
    same_up_to_sign(blocked.transform(Xt), dense.transform(Xt), 1e-6)
    with pytest.raises(MemoryBudgetError, match="randomized"):
        KernelPCA(5, kernel="rbf", eigen_solver="dense", memory_budget=600_000).fit(X)


def test_ellipse_is_explained_linearly_by_the_quadratic_kernel():
    # Seed 000: x^2 + 4 y^2 = 1 is linear in phi(x, y) = [x^2, sqrt(2) x y, y^2]: phi_1 + 4 phi_3 = 1,
    # so the centred data spans a plane: the third kernel principal value vanishes and its
    # direction in feature space is (1, 0, 4) / sqrt(17).
    t = np.linspace(0, 2 * np.pi, 200, endpoint=False) + 0.1
    X = readonly(np.c_[np.cos(t), 0.5 * np.sin(t)])
    model = KernelPCA(3, kernel=Quadratic(), eigen_solver="dense").fit(X)
    lam = model.eigenvalues_
    assert lam[2] < 1e-10 * lam[0]
    # direction of the vanishing component, v = Phi_c^T alpha, from the explicit map
    F = PolynomialFeatureMap(degree=2, coef0=0.0).fit(X).transform(X)
    Fc = F - F.mean(0)
    cov = Fc.T @ Fc
    w, V = np.linalg.eigh(cov)
    v = V[:, 0]
    names = list(PolynomialFeatureMap(degree=2, coef0=0.0).fit(X).get_feature_names_out())
    coef = dict(zip(names, v / np.sqrt(2) ** (np.array(names) == "x0 x1")))
    ratio = coef["x1^2"] / coef["x0^2"]
    assert abs(ratio - 4.0) < 1e-8 and abs(coef["x0 x1"]) < 1e-8
    assert w[0] < 1e-10 * w[-1]


def test_curve_is_one_dimensional_in_the_cubic_feature_space():
    # Seed 000: x = t, y = 2 t^2 + t^3 looks 2-D but is 1-D; in the feature space of
    # (<u, v> + 1)^3 (which contains y, x^2 and x^3) the points satisfy the linear relation
    # y - 2 x^2 - x^3 = 0, so the centred Gram loses one rank: of the 9 non-constant
    # coordinates only 8 vary independently.
    t = np.linspace(-2, 1, 300)
    X = readonly(np.c_[t, 2 * t**2 + t**3])
    lam = KernelPCA(9, kernel=Polynomial(3, gamma=1.0, coef0=1.0), eigen_solver="dense").fit(X).eigenvalues_
    assert lam[7] > 1e-8 * lam[0]
    assert lam[8] < 1e-10 * lam[0]
    # while in the input space no direction is exactly flat: linear PCA keeps a residual
    from sklearn.decomposition import PCA

    assert PCA(2).fit(X).explained_variance_ratio_[1] > 1e-3


def test_n_components_none_keeps_nonzero_components():
    X = readonly(np.random.default_rng(0).normal(size=(30, 3)))
    model = KernelPCA(kernel="linear").fit(X)
    assert len(model.eigenvalues_) == 3  # a linear kernel on 3 features has rank 3 after centring


@pytest.mark.parametrize("params, match", [
    (dict(n_components=0), "'n_components'"),
    (dict(n_components=51), "The 'n_components' parameter of KernelPCA must be at most n_samples = 50. Got 51 instead."),
    (dict(n_components=2, eigen_solver="magic"), "'eigen_solver'"),
    (dict(n_components=2, tol=-1.0), "'tol'"),
    (dict(n_components=2, kernel="rbf", gamma=0.0), "'gamma'"),
])
def test_bad_parameters(params, match):
    X = np.random.default_rng(0).normal(size=(50, 3))
    with pytest.raises(ValueError, match=match):
        KernelPCA(**params).fit(X)


def test_wrong_n_features_at_transform(digits_small):
    X, _ = digits_small
    model = KernelPCA(2, kernel="rbf").fit(X)
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:, :10])


def test_precomputed(digits_small):
    X, Xt = digits_small
    k = RBF(gamma=0.02)
    ours = KernelPCA(3, kernel="precomputed").fit(k(X).cpu().numpy())
    ref = KernelPCA(3, kernel=k).fit(X)
    same_up_to_sign(ours.transform(k(Xt, X).cpu().numpy()), ref.transform(Xt), 1e-8)


def test_torch_in_torch_out(digits_small):
    X, _ = digits_small
    Z = KernelPCA(2, kernel="rbf").fit_transform(torch.as_tensor(X, dtype=torch.float32))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float32 and Z.shape == (500, 2)


@cuda
@pytest.mark.gpu
def test_cuda_matches_cpu(digits_small):
    X, Xt = digits_small
    cpu = KernelPCA(4, kernel="rbf", gamma=0.02).fit(X)
    gpu = KernelPCA(4, kernel="rbf", gamma=0.02, device="cuda").fit(X)
    np.testing.assert_allclose(gpu.eigenvalues_, cpu.eigenvalues_, rtol=1e-8)
    same_up_to_sign(gpu.transform(Xt), cpu.transform(Xt), 1e-8)
