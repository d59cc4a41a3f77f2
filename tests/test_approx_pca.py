"""ApproximateKernelPCA: Nyström with every point as a landmark equals exact kernel PCA (mercer's and
scikit-learn's); random-feature eigenvalues converge; blocked path; bad input; the sklearn contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.decomposition import KernelPCA as SkKernelPCA

from mercer.kernels import RBF, Laplacian, Polynomial
from mercer.models.decomposition import ApproximateKernelPCA
from mercer.models.decomposition import KernelPCA

from conftest import cuda, readonly


@pytest.fixture(scope="module")
def data(digits):
    X, _ = digits
    return readonly(X[:200], X[200:260])


def same_up_to_sign(A, B, tol):
    """Columns equal up to a sign each: max |A - B s| relative to max |B|."""
    A, B = np.asarray(A), np.asarray(B)
    s = np.sign(np.sum(A * B, axis=0))
    return np.abs(A * s - B).max() / np.abs(B).max() < tol


# -- exact limit ---------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [dict(kernel="rbf", gamma=0.02), dict(kernel="poly", degree=2, gamma=0.02, coef0=1.0),
                                    dict(kernel=Laplacian(gamma=0.01))], ids=["rbf", "poly", "laplacian"])
def test_nystroem_with_all_points_equals_exact_kernel_pca(data, params):
    X, Xt = data
    k = 6
    ours = ApproximateKernelPCA(k, approximation="nystroem", n_features=len(X), random_state=0, **params)
    Z_fit = ours.fit_transform(X)
    exact = KernelPCA(k, eigen_solver="dense", **params)
    E_fit = exact.fit_transform(X)
    np.testing.assert_allclose(ours.eigenvalues_, exact.eigenvalues_, rtol=1e-8)
    np.testing.assert_allclose(ours.explained_variance_ratio_, exact.explained_variance_ratio_, rtol=1e-8)
    assert same_up_to_sign(Z_fit, E_fit, 1e-7)
    assert same_up_to_sign(ours.transform(Xt), exact.transform(Xt), 1e-7)
    if isinstance(params["kernel"], str):
        ref = SkKernelPCA(k, eigen_solver="dense", **params).fit(X)
        np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
        assert same_up_to_sign(ours.transform(Xt), ref.transform(Xt), 1e-7)


def test_nystroem_eigenvalues_never_exceed_exact(data):
    """K_nystroem <= K in the PSD order, so every centred eigenvalue is at most the exact one;
    with more landmarks they grow towards it."""
    X, _ = data
    exact = KernelPCA(5, kernel="rbf", gamma=0.02, eigen_solver="dense").fit(X).eigenvalues_
    gaps = []
    for M in (20, 60, 150):
        for landmarks in ("uniform", "kmeans++"):
            lam = ApproximateKernelPCA(5, gamma=0.02, n_features=M, landmarks=landmarks, random_state=0).fit(X).eigenvalues_
            assert np.all(lam <= exact * (1 + 1e-10))
        gaps.append(np.abs(lam - exact).max())
    assert gaps[0] > gaps[1] > gaps[2]


def test_rff_eigenvalues_converge_to_exact(data):
    """Random Fourier features at a fixed seed: the largest relative eigenvalue error falls with m
    (like 1/sqrt(m): ~0.14 at m = 50, ~0.05 at m = 800 on this set) and is under 6% at m = 1000."""
    X, _ = data
    exact = KernelPCA(5, kernel="rbf", gamma=0.02, eigen_solver="dense").fit(X).eigenvalues_
    err = []
    for m in (40, 250, 1000):
        lam = ApproximateKernelPCA(5, gamma=0.02, approximation="rff", n_features=m, random_state=0).fit(X).eigenvalues_
        err.append(np.abs(lam - exact).max() / exact[0])
    assert err[0] > err[1] > err[2], err
    assert err[2] < 0.06, err


def test_rff_covariance_path_equals_gram_path(data):
    """D = 2m > n is solved on the n x n Gram; D < n on the D x D covariance: the same components."""
    X, Xt = data
    small = ApproximateKernelPCA(4, gamma=0.02, approximation="rff", n_features=80, random_state=1).fit(X)  # D = 160 < 200
    big_budget = ApproximateKernelPCA(4, gamma=0.02, approximation="rff", n_features=150, random_state=1).fit(X)  # D = 300 > 200
    # the same features through the covariance path: a budget below the Gram path's need
    cov_only = ApproximateKernelPCA(4, gamma=0.02, approximation="rff", n_features=150, random_state=1,
                                    memory_budget=3 * 300 * 300 * 8 + 200_000).fit(X)
    assert small.eigenvectors_.shape == (160, 4) and big_budget.eigenvectors_.shape == (300, 4)
    np.testing.assert_allclose(big_budget.eigenvalues_, cov_only.eigenvalues_, rtol=1e-9)
    assert same_up_to_sign(big_budget.transform(Xt), cov_only.transform(Xt), 1e-8)
    V = big_budget.eigenvectors_.cpu().numpy()
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-10)


# -- properties ----------------------------------------------------------------------------------
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_transform_of_training_data_and_attributes(data, approximation):
    X, _ = data
    model = ApproximateKernelPCA(3, gamma=0.02, approximation=approximation, n_features=50, random_state=0)
    Z = model.fit_transform(X)
    np.testing.assert_allclose(model.transform(X), Z, atol=1e-10)
    np.testing.assert_allclose(Z.mean(axis=0), 0, atol=1e-10)
    np.testing.assert_allclose((Z ** 2).sum(axis=0), model.eigenvalues_, rtol=1e-8)
    assert np.all(np.diff(model.eigenvalues_) <= 0)
    np.testing.assert_allclose(model.explained_variance_, model.eigenvalues_ / len(X))
    full = ApproximateKernelPCA(None, gamma=0.02, approximation=approximation, n_features=50, random_state=0).fit(X)
    assert full.explained_variance_ratio_.sum() == pytest.approx(1.0, rel=1e-8)
    assert list(model.get_feature_names_out()) == ["approximatekernelpca0", "approximatekernelpca1",
                                                    "approximatekernelpca2"]


@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_tiny_memory_budget_equals_default_path(data, approximation):
    X, Xt = data
    args = dict(n_components=4, gamma=0.02, approximation=approximation, n_features=40, random_state=3)
    default = ApproximateKernelPCA(**args).fit(X)
    D = default.feature_map_.n_features_out_
    tiny = ApproximateKernelPCA(**args, memory_budget=3 * D * D * 8 + 30_000).fit(X)
    assert tiny._rows < len(X)  # the two-pass, row-blocked path ran
    np.testing.assert_allclose(tiny.eigenvalues_, default.eigenvalues_, rtol=1e-9)
    assert same_up_to_sign(tiny.transform(Xt), default.transform(Xt), 1e-8)
    assert same_up_to_sign(tiny.fit_transform(X), default.fit_transform(X), 1e-8)


def test_float32_and_torch_in_torch_out(data):
    X, Xt = data
    ref = ApproximateKernelPCA(3, gamma=0.02, n_features=60, random_state=0).fit(X)
    f32 = ApproximateKernelPCA(3, gamma=0.02, n_features=60, random_state=0, dtype="float32").fit(X)
    Z32 = f32.transform(Xt)
    assert Z32.dtype == np.float32
    np.testing.assert_allclose(f32.eigenvalues_, ref.eigenvalues_, rtol=1e-4)
    assert same_up_to_sign(Z32, ref.transform(Xt), 1e-3)
    tt = ApproximateKernelPCA(3, gamma=0.02, n_features=60, random_state=0).fit(torch.as_tensor(np.array(X)))
    Zt = tt.transform(torch.as_tensor(np.array(Xt)))
    assert isinstance(Zt, torch.Tensor)
    assert same_up_to_sign(Zt.cpu().numpy(), ref.transform(Xt), 1e-10)


def test_kernel_objects_and_composites(data):
    X, _ = data
    k = 0.5 * RBF(gamma=0.02) + Polynomial(degree=2, gamma=0.01)
    ours = ApproximateKernelPCA(4, kernel=k, n_features=len(X), random_state=0).fit(X)
    exact = KernelPCA(4, kernel=k, eigen_solver="dense").fit(X)
    np.testing.assert_allclose(ours.eigenvalues_, exact.eigenvalues_, rtol=1e-8)


@cuda
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_cuda_matches_cpu(data, approximation):
    X, Xt = data
    cpu = ApproximateKernelPCA(3, gamma=0.02, approximation=approximation, n_features=50, random_state=0).fit(X)
    gpu = ApproximateKernelPCA(3, gamma=0.02, approximation=approximation, n_features=50, random_state=0,
                               device="cuda").fit(X)
    np.testing.assert_allclose(gpu.eigenvalues_, cpu.eigenvalues_, rtol=1e-6)


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("params, match", [
    (dict(approximation="svd"), "The 'approximation' parameter of ApproximateKernelPCA must be a str among {'nystroem', 'rff'}. Got 'svd' instead."),
    (dict(n_features=0), "The 'n_features' parameter of ApproximateKernelPCA must be an int in the range \\[1, inf\\). Got 0 instead."),
    (dict(n_features=500), "The 'n_features' parameter of ApproximateKernelPCA must be at most n_samples = 200. Got 500 instead."),
    (dict(n_components=0), "'n_components' parameter .* Got 0"),
    (dict(n_components=30, n_features=20), "The 'n_components' parameter of ApproximateKernelPCA must be at most min\\(n_samples, feature dimension\\) = 20. Got 30 instead."),
    (dict(kernel="poly", approximation="rff"), "stationary"),
    (dict(kernel="precomputed"), "not kernel='precomputed'"),
    (dict(memory_budget=1000), "smaller n_features or raise memory_budget"),
])
def test_bad_parameters(data, params, match):
    X, _ = data
    with pytest.raises(ValueError, match=match):
        ApproximateKernelPCA(**{"n_components": 2, "n_features": 20, **params}).fit(X)


def test_bad_data(data):
    X, Xt = data
    Xn = np.array(X)
    Xn[0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ApproximateKernelPCA(2, n_features=10).fit(Xn)
    model = ApproximateKernelPCA(2, n_features=10).fit(X)
    with pytest.raises(ValueError, match="64 features"):
        model.transform(Xt[:, :10])
