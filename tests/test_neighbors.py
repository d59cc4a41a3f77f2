"""Kernel k-NN and radius-NN against scikit-learn (linear kernel = Euclidean) and naive distances."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn import neighbors as skn

from mercer.kernels import Polynomial
from mercer.models.neighbors import (
    KernelKNeighborsClassifier,
    KernelKNeighborsRegressor,
    KernelRadiusNeighborsClassifier,
    KernelRadiusNeighborsRegressor,
)

from conftest import cuda, readonly


def _split(data, n_train):
    X, y = data
    return X[:n_train], y[:n_train], X[n_train:]


# -- agreement with scikit-learn -----------------------------------------------------------------------
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_kneighbors_exact_on_continuous_data(breast_cancer, weights):
    Xtr, ytr, Xte = _split(breast_cancer, 400)
    ours = KernelKNeighborsClassifier(7, weights=weights).fit(Xtr, ytr)
    ref = skn.KNeighborsClassifier(7, weights=weights, algorithm="brute").fit(Xtr, ytr)
    d, i = ours.kneighbors(Xte)
    rd, ri = ref.kneighbors(Xte)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(d, rd, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), atol=1e-12)
    assert ours.score(Xte, breast_cancer[1][400:]) == ref.score(Xte, breast_cancer[1][400:])
    # training-set query excludes each sample itself, as scikit-learn
    np.testing.assert_array_equal(ours.kneighbors(n_neighbors=4, return_distance=False),
                                  ref.kneighbors(n_neighbors=4, return_distance=False))


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_and_regressor_match_sklearn_on_digits(digits, weights):
    """Digits' pixel values make many distances tie exactly; predictions still agree."""
    Xtr, ytr, Xte = _split(digits, 1200)
    ours = KernelKNeighborsClassifier(5, weights=weights).fit(Xtr, ytr)
    ref = skn.KNeighborsClassifier(5, weights=weights).fit(Xtr, ytr)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), atol=1e-12)
    np.testing.assert_allclose(ours.kneighbors(Xte)[0], ref.kneighbors(Xte)[0], atol=1e-12)
    yf = ytr.astype(float)
    reg = KernelKNeighborsRegressor(5, weights=weights).fit(Xtr, yf)
    np.testing.assert_allclose(reg.predict(Xte), skn.KNeighborsRegressor(5, weights=weights).fit(Xtr, yf).predict(Xte),
                               atol=1e-12)


def test_regressor_multioutput_and_callable_weights(diabetes):
    X, y = diabetes
    Y = np.column_stack([y, y ** 0.5])

    def w(d):
        return np.exp(-d)

    ours = KernelKNeighborsRegressor(6, weights=w).fit(X[:300], Y[:300])
    ref = skn.KNeighborsRegressor(6, weights=w).fit(X[:300], Y[:300])
    np.testing.assert_allclose(ours.predict(X[300:]), ref.predict(X[300:]), rtol=1e-10)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_radius_estimators_match_sklearn(digits, weights):
    Xtr, ytr, Xte = _split(digits, 1200)
    ours = KernelRadiusNeighborsClassifier(1.4, weights=weights, outlier_label="most_frequent").fit(Xtr, ytr)
    ref = skn.RadiusNeighborsClassifier(1.4, weights=weights, outlier_label="most_frequent").fit(Xtr, ytr)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    np.testing.assert_allclose(ours.predict_proba(Xte), ref.predict_proba(Xte), atol=1e-12)
    d, i = ours.radius_neighbors(Xte[:40])
    rd, ri = ref.radius_neighbors(Xte[:40])
    for a, b, da, db in zip(i, ri, d, rd):
        order = np.argsort(b)
        np.testing.assert_array_equal(a, b[order])  # ours: index order
        np.testing.assert_allclose(da, db[order], atol=1e-12)
    yf = ytr.astype(float)
    reg = KernelRadiusNeighborsRegressor(1.4, weights=weights).fit(Xtr, yf)
    rreg = skn.RadiusNeighborsRegressor(1.4, weights=weights).fit(Xtr, yf)
    with pytest.warns(UserWarning, match="no neighbors"):
        p = reg.predict(Xte)
    with pytest.warns(UserWarning):
        rp = rreg.predict(Xte)
    np.testing.assert_allclose(p, rp, atol=1e-12)  # NaN where there is no neighbour, in both


def test_radius_neighbors_sorted_and_self_excluded(breast_cancer):
    X, y = breast_cancer
    ours = KernelRadiusNeighborsClassifier(4.0).fit(X, y)
    ref = skn.RadiusNeighborsClassifier(4.0).fit(X, y)
    d, i = ours.radius_neighbors(X[:30], sort_results=True)
    rd, ri = ref.radius_neighbors(X[:30], sort_results=True)
    for a, b, da, db in zip(i, ri, d, rd):
        np.testing.assert_array_equal(a, b)
        # d = sqrt(k(x,x) + k(z,z) - 2k(x,z)): a zero distance comes out as sqrt(round-off) ~ 1e-7
        np.testing.assert_allclose(da, db, atol=1e-6)
    own = ours.radius_neighbors(return_distance=False)
    ref_own = ref.radius_neighbors(return_distance=False)
    for q, (a, b) in enumerate(zip(own, ref_own)):
        assert q not in a
        np.testing.assert_array_equal(a, np.sort(b))


# -- kernels -------------------------------------------------------------------------------------------
def test_polynomial_kernel_distances_match_naive(breast_cancer):
    Xtr, ytr, Xte = _split(breast_cancer, 300)
    k = Polynomial(degree=2, gamma=0.1, coef0=1.0)
    model = KernelKNeighborsClassifier(4, kernel=k).fit(Xtr, ytr)
    K = k(Xte, Xtr).cpu().numpy()
    D2 = np.diag(k(Xte).cpu().numpy())[:, None] + np.diag(k(Xtr).cpu().numpy())[None, :] - 2 * K
    D2 = np.maximum(D2, 0)
    order = np.argsort(D2, axis=1, kind="stable")[:, :4]
    d, i = model.kneighbors(Xte)
    np.testing.assert_array_equal(i, order)
    np.testing.assert_allclose(d, np.sqrt(np.take_along_axis(D2, order, 1)), rtol=1e-9)


def test_rbf_neighbours_are_euclidean_ones(breast_cancer):
    Xtr, ytr, Xte = _split(breast_cancer, 300)
    rbf = KernelKNeighborsClassifier(5, kernel="rbf", gamma=0.01).fit(Xtr, ytr)
    lin = KernelKNeighborsClassifier(5).fit(Xtr, ytr)
    d_rbf, i_rbf = rbf.kneighbors(Xte)
    d_lin, i_lin = lin.kneighbors(Xte)
    np.testing.assert_array_equal(i_rbf, i_lin)
    np.testing.assert_allclose(d_rbf ** 2, 2 - 2 * np.exp(-0.01 * d_lin ** 2), atol=1e-12)


def test_tiny_budget_same_answer(breast_cancer):
    """Blocked search (many query and training blocks) gives the same neighbours. Continuous data:
    on data with exact ties (digits), other tile shapes change the GEMMs' round-off, hence tie order."""
    Xtr, ytr, Xte = _split(breast_cancer, 400)
    a = KernelKNeighborsClassifier(6, kernel="rbf", gamma=0.05).fit(Xtr, ytr)
    b = KernelKNeighborsClassifier(6, kernel="rbf", gamma=0.05, memory_budget=30_000).fit(Xtr, ytr)
    assert b._query_plan(len(Xte), 12)[1] < len(Xtr)  # the training samples are split into column blocks
    da, ia = a.kneighbors(Xte)
    db, ib = b.kneighbors(Xte)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_allclose(da, db, atol=1e-12)
    ra = KernelRadiusNeighborsClassifier(1.0, kernel="rbf", gamma=0.05, outlier_label=-1).fit(Xtr, ytr)
    rb = KernelRadiusNeighborsClassifier(1.0, kernel="rbf", gamma=0.05, outlier_label=-1,
                                         memory_budget=30_000).fit(Xtr, ytr)
    np.testing.assert_array_equal(ra.predict(Xte), rb.predict(Xte))


def test_duplicates_and_ties_lowest_index_first():
    X = readonly(np.array([[0.0], [1.0], [1.0], [1.0], [5.0]]))
    y = readonly(np.array([0, 1, 1, 2, 2]))
    model = KernelKNeighborsClassifier(2).fit(X, y)
    d, i = model.kneighbors(np.array([[1.0]]))
    np.testing.assert_array_equal(i, [[1, 2]])
    np.testing.assert_allclose(d, [[0.0, 0.0]])
    # a duplicate of the query itself: each sample excludes itself, the other copies remain
    np.testing.assert_array_equal(model.kneighbors(return_distance=False)[1:4], [[2, 3], [1, 3], [1, 2]])
    dist = KernelKNeighborsClassifier(3, weights="distance").fit(X, y)
    # zero distances take all the weight (scikit-learn): the three copies of 1.0 vote 1, 1, 2
    np.testing.assert_allclose(dist.predict_proba(np.array([[1.0]])), [[0.0, 2 / 3, 1 / 3]])


def test_torch_in_torch_out(breast_cancer):
    Xtr, ytr, Xte = _split(breast_cancer, 300)
    model = KernelKNeighborsClassifier(3).fit(torch.tensor(Xtr), ytr)
    d, i = model.kneighbors(torch.tensor(Xte))
    assert isinstance(d, torch.Tensor) and isinstance(i, torch.Tensor)
    assert isinstance(model.predict(torch.tensor(Xte)), torch.Tensor)
    np.testing.assert_array_equal(model.predict(torch.tensor(Xte)).cpu().numpy(), model.predict(Xte))
    f32 = KernelKNeighborsClassifier(3, dtype="float32").fit(Xtr, ytr)
    assert f32.kneighbors(Xte)[0].dtype == np.float32


# -- bad input ------------------------------------------------------------------------------------------
def test_bad_input():
    rng = np.random.default_rng(0)
    X = readonly(rng.normal(size=(6, 2)))
    y = readonly(np.array([0, 1, 0, 1, 0, 1]))
    at_most = "The 'n_neighbors' parameter of KernelKNeighborsClassifier must be at most n_samples"
    with pytest.raises(ValueError, match=f"{at_most} = 6. Got 7 instead"):
        KernelKNeighborsClassifier(7).fit(X, y)
    model = KernelKNeighborsClassifier(3).fit(X, y)
    with pytest.raises(ValueError, match=f"{at_most} = 6. Got 7 instead"):
        model.kneighbors(X, n_neighbors=7)
    with pytest.raises(ValueError, match=f"{at_most} - 1 = 5. Got 6 instead"):
        model.kneighbors(n_neighbors=6)  # the query on the training set excludes each sample itself
    with pytest.raises(ValueError, match="'n_neighbors' parameter"):
        KernelKNeighborsRegressor(0).fit(X, y)
    with pytest.raises(ValueError, match="'weights' parameter"):
        KernelKNeighborsClassifier(2, weights="gaussian").fit(X, y)
    with pytest.raises(ValueError, match="'radius' parameter"):
        KernelRadiusNeighborsRegressor(-1.0).fit(X, y)
    with pytest.raises(ValueError, match="precomputed"):
        KernelKNeighborsClassifier(2, kernel="precomputed").fit(np.eye(6), y)
    bad = np.array(X)
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KernelKNeighborsClassifier(2).fit(bad, y)
    with pytest.raises(ValueError, match="NaN"):
        model.predict(bad)
    with pytest.raises(ValueError, match="X has 3 features"):
        model.predict(np.zeros((2, 3)))


def test_radius_without_neighbours():
    X = readonly(np.array([[0.0], [0.5], [10.0]]))
    y = readonly(np.array(["a", "b", "b"]))
    query = np.array([[0.2], [5.0], [9.9]])
    model = KernelRadiusNeighborsClassifier(1.0).fit(X, y)
    with pytest.raises(ValueError, match=r"No neighbors found for test samples array\(\[1\]\)"):
        model.predict(query)
    most = KernelRadiusNeighborsClassifier(1.0, outlier_label="most_frequent").fit(X, y)
    np.testing.assert_array_equal(most.predict(query), ["a", "b", "b"][:1] + ["b", "b"])
    np.testing.assert_allclose(most.predict_proba(query)[1], [0.0, 1.0])
    other = KernelRadiusNeighborsClassifier(1.0, outlier_label="none").fit(X, y)
    with pytest.warns(UserWarning, match="not in training classes"):
        proba = other.predict_proba(query)
    np.testing.assert_allclose(proba[1], [0.0, 0.0])
    with pytest.warns(UserWarning, match="not in training classes"):
        assert list(other.predict(query)) == ["a", "none", "b"]
    reg = KernelRadiusNeighborsRegressor(1.0).fit(X, np.array([1.0, 2.0, 3.0]))
    with pytest.warns(UserWarning, match="predicting NaN"):
        p = reg.predict(query)
    assert np.isnan(p[1]) and p[0] == pytest.approx(1.5) and p[2] == 3.0


@cuda
def test_cuda_matches_cpu(digits):
    Xtr, ytr, Xte = _split(digits, 1000)
    a = KernelKNeighborsClassifier(5, kernel="rbf", gamma=0.05).fit(Xtr, ytr)
    b = KernelKNeighborsClassifier(5, kernel="rbf", gamma=0.05, device="cuda").fit(Xtr, ytr)
    np.testing.assert_array_equal(a.predict(Xte), b.predict(Xte))


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_radius_predictions_hold_one_block_of_neighbour_lists(weights):
    """Every query has all 600 training samples within the radius: the lists of all queries (360,000
    neighbours, 5.5 MiB) are over a 1 MiB budget, so radius_neighbors refuses them with a remedy, while
    predict, which holds one block of queries' lists at a time, gives scikit-learn's answer."""
    from mercer.linalg import MemoryBudgetError

    rng = np.random.default_rng(0)
    X, Xq = readonly(rng.standard_normal((600, 3))), readonly(rng.standard_normal((600, 3)))
    y = readonly(X[:, 0] + 0.1 * rng.standard_normal(600))
    labels = readonly((y > 0).astype(int))
    reg = KernelRadiusNeighborsRegressor(100.0, weights=weights, memory_budget=2**20).fit(X, y)
    clf = KernelRadiusNeighborsClassifier(100.0, weights=weights, memory_budget=2**20).fit(X, labels)
    assert reg._radius_plan(len(Xq))[0] < len(Xq)  # several blocks of queries
    np.testing.assert_allclose(reg.predict(Xq), skn.RadiusNeighborsRegressor(
        radius=100.0, weights=weights, algorithm="brute").fit(X, y).predict(Xq), rtol=1e-10)
    np.testing.assert_allclose(clf.predict_proba(Xq), skn.RadiusNeighborsClassifier(
        radius=100.0, weights=weights, algorithm="brute").fit(X, labels).predict_proba(Xq), rtol=1e-10)
    with pytest.raises(MemoryBudgetError, match=r"radius_neighbors: .* Query fewer rows at a time.*memory_budget"):
        reg.radius_neighbors(Xq)
    dist, ind = reg.radius_neighbors(Xq[:50])  # 30,000 neighbours fit
    assert all(len(i) == 600 for i in ind) and all(len(d) == 600 for d in dist)
