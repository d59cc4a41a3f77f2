"""Feature maps as scikit-learn's (issue 12): RandomFourierFeatures ``gamma="scale"`` (RBFSampler's),
Nystroem / LandmarkFeatures on ``kernel="precomputed"`` (Nystroem's), and its parameter errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import polynomial_kernel, rbf_kernel

from mercer.approx import LandmarkFeatures, Nystroem, RandomFourierFeatures

from conftest import readonly


@pytest.fixture(scope="module")
def X():
    return readonly(np.random.default_rng(0).normal(size=(40, 3)) * 3.0 + 1.0)


def test_gamma_scale_is_one_over_n_features_times_variance(X):
    rff = RandomFourierFeatures(gamma="scale", n_components=5, random_state=0).fit(X)
    assert rff.kernel_.gamma == pytest.approx(1.0 / (X.shape[1] * X.var()), rel=1e-12)
    # scikit-learn's own check: X = [[0], [1]] has variance 1/4, so gamma = 4
    assert RandomFourierFeatures(gamma="scale").fit([[0.0], [1.0]]).kernel_.gamma == pytest.approx(4.0)
    # RBFSampler's private _gamma, which scikit-learn's tests read
    assert RandomFourierFeatures(gamma="scale").fit([[0.0], [1.0]])._gamma == pytest.approx(4.0)
    assert RandomFourierFeatures(gamma=0.3).fit(X)._gamma == 0.3
    # the same features as the numeric gamma
    same = RandomFourierFeatures(gamma=float(rff.kernel_.gamma), n_components=5, random_state=0).fit(X)
    np.testing.assert_array_equal(rff.transform(X), same.transform(X))


def test_gamma_scale_on_sparse_and_constant_data(X):
    sparse = RandomFourierFeatures(gamma="scale", n_components=5, random_state=0).fit(sp.csr_matrix(X))
    assert sparse.kernel_.gamma == pytest.approx(1.0 / (X.shape[1] * X.var()), rel=1e-10)
    assert RandomFourierFeatures(gamma="scale").fit(np.ones((5, 2))).kernel_.gamma == 1.0


def test_gamma_scale_names_itself_when_the_variance_overflows(X):
    with pytest.raises(ValueError, match=r"gamma='scale' is 1 / \(n_features \* X.var\(\)\), and X.var\(\) = inf"):
        RandomFourierFeatures(gamma="scale").fit(X * 1e300)
    with pytest.raises(ValueError, match="The 'gamma' parameter of RandomFourierFeatures must be .* Got 'auto'"):
        RandomFourierFeatures(gamma="auto").fit(X)


@pytest.mark.parametrize("method", ["eig", "cholesky"])
def test_nystroem_on_a_precomputed_gram_equals_nystroem_on_the_kernel(X, method):
    K = rbf_kernel(X, gamma=0.2)
    pre = Nystroem(kernel="precomputed", n_components=15, method=method, random_state=0).fit(readonly(K))
    ref = Nystroem(kernel="rbf", gamma=0.2, n_components=15, method=method, random_state=0).fit(X)
    np.testing.assert_array_equal(pre.component_indices_, ref.component_indices_)
    np.testing.assert_allclose(pre.transform(K[:7]), ref.transform(X[:7]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pre.landmarks_.cpu().numpy(), K[pre.component_indices_])
    assert pre.__sklearn_tags__().input_tags.pairwise


def test_nystroem_precomputed_with_all_components_is_exact(X):
    K = polynomial_kernel(X, degree=2, coef0=0.1)
    F = Nystroem(kernel="precomputed", n_components=len(X)).fit_transform(K)
    np.testing.assert_allclose(F @ F.T, K, rtol=1e-8, atol=1e-8 * np.abs(K).max())


def test_landmark_features_on_a_precomputed_gram_are_its_columns(X):
    K = rbf_kernel(X, gamma=0.2)
    lf = LandmarkFeatures(kernel="precomputed", n_components=10, random_state=0).fit(K)
    np.testing.assert_array_equal(lf.transform(K[:5]), K[:5][:, lf.component_indices_])


def test_precomputed_errors(X):
    K = rbf_kernel(X)
    with pytest.raises(ValueError, match="Don't pass gamma, coef0 or degree to Nystroem"):
        Nystroem(kernel="precomputed", gamma=1.0).fit(K)
    with pytest.raises(ValueError, match="Don't pass gamma, coef0 or degree to Nystroem"):
        Nystroem(kernel=lambda A, B: A @ B.T, n_components=5, degree=2).fit(X)
    with pytest.raises(ValueError, match="landmarks must be 'uniform'. Got 'kmeans' instead."):
        Nystroem(kernel="precomputed", n_components=5, landmarks="kmeans").fit(K)
    with pytest.raises(ValueError, match=r"square \(n, n\) Gram matrix .* got shape \(40, 3\)"):
        Nystroem(kernel="precomputed", n_components=2).fit(X)
    model = Nystroem(kernel="precomputed", n_components=5, random_state=0).fit(K)
    with pytest.raises(ValueError, match="features"):
        model.transform(K[:, :10])


@pytest.mark.parametrize("variant", ["cossin", "phase"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rbf_sampler_attributes_give_the_same_features(X, variant, dtype):
    """random_weights_ / random_offset_ (scikit-learn's names): sqrt(2 k0 / D) cos(X W + b) is transform(X)."""
    Xd = np.asarray(X, dtype=dtype)
    rff = RandomFourierFeatures(gamma=0.1, n_components=7, variant=variant, random_state=0).fit(Xd)
    W, b = rff.random_weights_, rff.random_offset_
    assert W.dtype == b.dtype == dtype and W.shape == (3, rff.n_features_out_) and b.shape == (rff.n_features_out_,)
    ref = np.sqrt(2 * rff.amplitude_ / W.shape[1]) * np.cos(Xd.astype(float) @ W + b)
    np.testing.assert_allclose(rff.transform(Xd), ref, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-5)


def test_nystroem_with_a_non_integer_polynomial_degree_as_sklearn():
    from sklearn.metrics.pairwise import polynomial_kernel

    from mercer.approx import Nystroem

    Xu = readonly(np.random.RandomState(37).uniform(size=(10, 4)))
    F = Nystroem(kernel="polynomial", n_components=10, degree=3.1, coef0=0.1).fit_transform(Xu)
    np.testing.assert_allclose(F @ F.T, polynomial_kernel(Xu, degree=3.1, coef0=0.1), atol=1e-10)


def test_nystroem_calls_a_per_pair_callable_as_sklearn():
    """scikit-learn's count: a per-pair kernel is called once per unordered pair of the landmarks."""
    from sklearn.kernel_approximation import Nystroem as SkNystroem

    from mercer.approx import Nystroem

    Xu = np.random.RandomState(42).uniform(size=(10, 4))

    def histogram(x, y, log):
        log.append(1)
        return np.minimum(x, y).sum()

    ours, ref = [], []
    m = Nystroem(kernel=histogram, n_components=9, kernel_params={"log": ours}, random_state=0).fit(list(Xu))
    SkNystroem(kernel=histogram, n_components=9, kernel_params={"log": ref}, random_state=0).fit(list(Xu))
    assert len(ours) == len(ref) == 9 * 10 // 2
    ours.clear()
    m.transform(Xu[:3])
    assert len(ours) == 3 * 9  # per pair from then on (the convention is remembered): no probe
