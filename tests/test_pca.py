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


# -- issue 12: scikit-learn's centring, PSD check and pre-images ----------------------------------
ALL_SOLVERS = ["dense", "arpack", "randomized", "lanczos", "power"]


@pytest.mark.parametrize("solver", ALL_SOLVERS)
def test_non_symmetric_precomputed_gram_is_centred_as_h_k_h(solver):
    # H K H for K = [[1, 2], [3, 40]] is [[8.5, -9.5], [-9.5, 8.5]]: eigenvalue 18, vector
    # [1, -1] / sqrt(2). Subtracting column means on both sides gave 17.51 (dense) / 18.01.
    K = readonly(np.array([[1.0, 2.0], [3.0, 40.0]]))
    ours = KernelPCA(1, kernel="precomputed", eigen_solver=solver, random_state=0).fit(K)
    ref = SkKernelPCA(1, kernel="precomputed", eigen_solver="dense").fit(K)
    np.testing.assert_allclose(ours.eigenvalues_, [18.0], rtol=1e-12)
    # The sign of the eigenvector is arbitrary, and no sign rule can pin it here: its two entries
    # tie in magnitude up to the last bit, which the eigensolver's rounding (BLAS-dependent) decides.
    same_up_to_sign(ours.eigenvectors_.numpy(), [[2**-0.5], [-(2**-0.5)]], 1e-12)
    same_up_to_sign(ours.transform(K), ref.transform(K), 1e-12)


@pytest.mark.parametrize("budget", [None, 1_000])  # 1 kB: the blocked operator
@pytest.mark.parametrize("solver", ["dense", "lanczos", "randomized"])
def test_non_symmetric_precomputed_gram_decomposes_the_symmetric_part(solver, budget):
    # H K H of a non-symmetric K is itself not symmetric: every solver (and the blocked operator
    # used when the Gram does not fit) decomposes H ((K + K^T) / 2) H, and transform centres a
    # test Gram with the training column means, as scikit-learn's KernelCenterer.
    if budget is not None and solver == "dense":
        pytest.skip("the dense solver needs the whole Gram matrix")
    rng = np.random.default_rng(0)
    A = rng.normal(size=(12, 4))
    K = A @ A.T + 0.3 * rng.normal(size=(12, 12)) + 5 * np.eye(12)
    H = np.eye(12) - 1.0 / 12
    w, V = np.linalg.eigh(H @ ((K + K.T) / 2) @ H)
    ours = KernelPCA(3, kernel="precomputed", eigen_solver=solver, random_state=0, memory_budget=budget).fit(K)
    np.testing.assert_allclose(ours.eigenvalues_, w[::-1][:3], rtol=1e-8)
    same_up_to_sign(ours.eigenvectors_.numpy(), V[:, ::-1][:, :3], 1e-7)
    ref = SkKernelPCA(3, kernel="precomputed").fit(K)
    ref.eigenvectors_, ref.eigenvalues_ = ours.eigenvectors_.numpy(), ours.eigenvalues_
    Kt = rng.normal(size=(5, 12))
    np.testing.assert_allclose(ours.transform(Kt), ref.transform(Kt), atol=1e-10)


@pytest.mark.parametrize("solver", ["dense", "arpack", "randomized"])
def test_gram_that_is_not_psd_raises_as_sklearn(solver):
    # eigenvalues 3, 3, 0 and one negative after centring: silently clamped to [3, 0, 0] before
    K = np.array([[2.0, -1, -1], [-1, -1, 2], [-1, 2, -1]])
    with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
        SkKernelPCA(kernel="precomputed", eigen_solver=solver, random_state=0).fit(K)  # seeded: randomized
    with pytest.warns(UserWarning, match="negative eigenvalue") if solver == "randomized" else _no_warning():
        with pytest.raises(ValueError, match="KernelPCA: There are significant negative eigenvalues"):
            KernelPCA(kernel="precomputed", eigen_solver=solver, random_state=0).fit(K)


def _no_warning():
    import contextlib

    return contextlib.nullcontext()


def test_round_off_eigenvalues_become_zero_as_sklearn():
    # scikit-learn's test_kernel_conditioning: a tiny positive eigenvalue (round-off) is set to 0
    from sklearn.utils.validation import _check_psd_eigenvalues

    X = [[5, 1], [5 + 1e-8, 1e-8], [5 + 1e-8, 0]]
    model = KernelPCA(kernel="linear", n_components=2).fit(X)
    assert model.eigenvalues_.min() == 0
    np.testing.assert_array_equal(model.eigenvalues_, _check_psd_eigenvalues(model.eigenvalues_))
    # small negative round-off is also 0, larger ones (above 1e-5 of the top) raise
    from mercer.models.decomposition._kernel_pca import check_psd_eigenvalues

    out = check_psd_eigenvalues(torch.tensor([10.0, 1e-12, -1e-11], dtype=torch.float64), "KernelPCA")
    np.testing.assert_array_equal(out.numpy(), [10.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="significant negative"):
        check_psd_eigenvalues(torch.tensor([10.0, -1e-3], dtype=torch.float64), "KernelPCA")
    with pytest.raises(ValueError, match="All eigenvalues are negative"):
        check_psd_eigenvalues(torch.tensor([-1.0, -2.0], dtype=torch.float64), "KernelPCA")
    # float32: scikit-learn's looser thresholds (5e-3 of the top)
    np.testing.assert_array_equal(check_psd_eigenvalues(torch.tensor([10.0, -1e-3]), "KernelPCA").numpy(), [10.0, 0.0])


@pytest.mark.parametrize("params", [
    dict(kernel="rbf"),
    dict(kernel="rbf", gamma=0.3, alpha=1e-3),
    dict(kernel="poly", degree=2, alpha=0.1),
    dict(kernel="linear", alpha=0.5),
    dict(kernel="sigmoid", gamma=0.05, coef0=0.5),
])
def test_inverse_transform_matches_sklearn(params):
    rng = np.random.default_rng(0)
    X, Xt = readonly(rng.normal(size=(60, 4))), readonly(rng.normal(size=(7, 4)))
    ours = KernelPCA(5, fit_inverse_transform=True, **params).fit(X)
    ref = SkKernelPCA(5, fit_inverse_transform=True, eigen_solver="dense", **params).fit(X)
    assert ours.gamma_ == ref.gamma_
    Z = ref.transform(Xt)
    signs = np.sign((ours.transform(Xt) * Z).sum(axis=0))  # eigenvector signs may differ
    np.testing.assert_allclose(ours.inverse_transform(Z * signs), ref.inverse_transform(Z), atol=1e-10)
    np.testing.assert_allclose(ours.X_transformed_fit_.numpy() * signs, ref.X_transformed_fit_, atol=1e-10)


def test_inverse_transform_uses_gamma_of_the_input_not_of_the_embedding():
    # scikit-learn's #26280: gamma=None is 1 / n_features of X (4), not of the embedding (2)
    X = readonly(np.random.default_rng(1).random((5, 4)))
    a = KernelPCA(2, kernel="rbf", fit_inverse_transform=True).fit(X)
    b = KernelPCA(2, kernel="rbf", gamma=0.25, fit_inverse_transform=True).fit(X)
    assert a.gamma_ == 0.25 and b.gamma_ == 0.25
    np.testing.assert_allclose(a.inverse_transform(a.transform(X)), b.inverse_transform(a.transform(X)))


def test_inverse_transform_reconstructs_and_errors():
    from sklearn.datasets import make_blobs
    from sklearn.exceptions import NotFittedError

    X, _ = make_blobs(n_samples=100, n_features=4, random_state=0)
    model = KernelPCA(20, kernel="rbf", fit_inverse_transform=True, alpha=1e-3)
    Xr = model.inverse_transform(model.fit_transform(X))
    assert np.linalg.norm(X - Xr) / np.linalg.norm(X) < 0.1
    Zt = model.transform(torch.as_tensor(X))
    assert isinstance(model.inverse_transform(Zt), torch.Tensor)
    with pytest.raises(ValueError, match=r"expects X of shape \(n_samples, 20\)"):
        model.inverse_transform(X)
    with pytest.raises(NotFittedError, match="fit_inverse_transform"):
        KernelPCA(2).fit(X).inverse_transform(X[:, :2])
    with pytest.raises(ValueError, match="Cannot fit_inverse_transform with a precomputed kernel"):
        KernelPCA(2, kernel="precomputed", fit_inverse_transform=True).fit(X @ X.T)
    with pytest.raises(ValueError, match="'alpha' parameter of KernelPCA"):
        KernelPCA(2, alpha=-1.0, fit_inverse_transform=True).fit(X)


def test_inverse_transform_over_the_memory_budget_says_so():
    X = np.random.default_rng(0).random((300, 3))
    with pytest.raises(MemoryBudgetError, match="fit_inverse_transform solves an n x n kernel ridge system"):
        KernelPCA(2, kernel="rbf", fit_inverse_transform=True, memory_budget=200_000, random_state=0).fit(X)
