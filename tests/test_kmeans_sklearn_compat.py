"""KMeans as scikit-learn's (issue 12): ``algorithm`` ("lloyd", "elkan"), ``copy_x``, ``verbose``,
a callable ``init``, exact zero distances in ``transform``, scikit-learn's warnings."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans as SkKMeans
from sklearn.exceptions import ConvergenceWarning

from mercer.kmeans import kmeans
from mercer.models import KMeans

from conftest import readonly


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(40, 3)) * 4
    return readonly(centres[rng.integers(0, 40, 1500)] + rng.normal(size=(1500, 3)))


@pytest.mark.parametrize("k", [5, 40])
def test_elkan_and_lloyd_give_the_same_clustering(blobs, k):
    a = KMeans(k, algorithm="lloyd", random_state=0, tol=0).fit(blobs)
    b = KMeans(k, algorithm="elkan", random_state=0, tol=0).fit(blobs)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-12)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-12) and a.n_iter_ == b.n_iter_


@pytest.mark.parametrize("k", [5, 40])
def test_bounded_iterations_equal_plain_lloyd(blobs, k):
    """The bounds only skip distance computations: the same labels as plain Lloyd, every iteration."""
    X = torch.as_tensor(np.array(blobs))
    kw = dict(memory_budget=1 << 24, max_iter=50, tol=0.0)
    plain = kmeans(X, k, generator=torch.Generator().manual_seed(1), bounds=False, **kw)
    bound = kmeans(X, k, generator=torch.Generator().manual_seed(1), bounds=True, **kw)
    assert torch.equal(plain.labels, bound.labels) and plain.n_iter == bound.n_iter
    torch.testing.assert_close(plain.centers, bound.centers, rtol=1e-12, atol=1e-12)


def test_same_inertia_as_sklearn_from_the_same_centres(blobs):
    init = np.array(blobs[:: 1500 // 40][:40])
    for algorithm in ("lloyd", "elkan"):
        ours = KMeans(40, init=init, n_init=1, algorithm=algorithm, tol=0).fit(blobs)
        ref = SkKMeans(40, init=init, n_init=1, algorithm=algorithm, tol=0).fit(blobs)
        np.testing.assert_array_equal(ours.labels_, ref.labels_)
        assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-10)


def test_elkan_with_one_cluster_warns_as_sklearn(blobs):
    with pytest.warns(RuntimeWarning, match="algorithm='elkan' doesn't make sense for a single cluster"):
        KMeans(1, algorithm="elkan").fit(blobs)


def test_bad_algorithm_names_the_parameter(blobs):
    with pytest.raises(ValueError, match=r"The 'algorithm' parameter of KMeans must be a str among .* Got 'auto'"):
        KMeans(algorithm="auto").fit(blobs)


@pytest.mark.parametrize("tol, stop", [(0.0, r"Converged at iteration \d+: strict convergence\."),
                                       (1e-2, r"Converged at iteration \d+: center shift .* within tolerance")])
def test_verbose_prints_sklearns_lines(blobs, capsys, tol, stop):
    KMeans(5, random_state=0, verbose=1, tol=tol).fit(blobs)
    out = capsys.readouterr().out
    assert "Initialization complete" in out
    assert re.search(r"Iteration 0, inertia [0-9.e+]+\.", out)
    assert re.search(stop, out)
    KMeans(5, random_state=0).fit(blobs)
    assert capsys.readouterr().out == ""


def test_copy_x_false_leaves_x_untouched(blobs):
    X = np.array(blobs)
    X.setflags(write=False)  # any write to the user's array fails
    a = KMeans(5, random_state=0, copy_x=False).fit(X)
    b = KMeans(5, random_state=0).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(X, blobs)


def test_callable_init_is_called_once_per_run(blobs):
    calls = []

    def init(X, n_clusters, random_state):
        assert isinstance(random_state, np.random.RandomState)
        calls.append(X.shape)
        return X[random_state.choice(len(X), n_clusters, replace=False)]

    model = KMeans(6, init=init, random_state=0).fit(blobs)
    assert len(calls) == 10 == model._n_init  # "auto": 10 for a callable, as scikit-learn
    first = init(np.array(blobs), 6, np.random.RandomState(0))
    ref = KMeans(6, init=first, n_init=1).fit(blobs)
    assert model.inertia_ <= ref.inertia_ + 1e-9
    with pytest.raises(ValueError, match=r"'init' parameter of KMeans must be an array of shape .* \(6, 3\)"):
        KMeans(6, init=lambda X, k, random_state: X[:2], n_init=1).fit(blobs)


def test_transform_of_the_centres_is_exactly_zero_on_the_diagonal(blobs):
    km = KMeans(8, random_state=0).fit(np.array(blobs) + 50.0)  # large norms: cancellation in |x|^2 - 2 x.c + |c|^2
    D = km.transform(km.cluster_centers_)
    assert np.all(np.diag(D) == 0.0)
    ref = np.sqrt(((km.cluster_centers_[:, None, :] - km.cluster_centers_[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(D, ref, rtol=1e-9)


def test_fewer_distinct_points_warns_with_sklearns_wording():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [2.0, 2.0]])
    with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(3\) found smaller than "
                                                r"n_clusters \(4\)\. Possibly due to duplicate points in X\."):
        KMeans(4, random_state=0).fit(X)


def test_wrong_sizes_say_it_in_sklearns_words_too(blobs):
    n = len(blobs)
    with pytest.raises(ValueError, match=rf"n_clusters' parameter of KMeans must be at most n_samples = {n}\. "
                                         rf"Got {n + 1} instead: n_samples={n} should be >= n_clusters={n + 1}"):
        KMeans(n + 1).fit(blobs)
    for init, what in ((blobs[:2], "clusters 6"), (blobs[:6, :2], "features of the data 3")):
        for given in (init, lambda X, k, random_state, init=init: init):
            with pytest.raises(ValueError, match=r"The shape of the initial centers \(\d+, \d+\) does not match "
                                                 rf"the number of {what}"):
                KMeans(6, init=given, n_init=1).fit(blobs)


@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_init_centroids_as_sklearn(blobs, init):
    """scikit-learn's private _init_centroids (its tests call it): seeds are data points, never
    one of zero weight, and the weights change them."""
    X = np.asarray(blobs)
    sq = (X ** 2).sum(1)
    w = np.random.RandomState(0).uniform(size=len(X))
    w[::2] = 0.0
    model = KMeans(6, init=init, n_init=1, max_iter=1, random_state=0)

    def seeds(weights, **kw):
        return model._init_centroids(X=X, x_squared_norms=sq, init=init, sample_weight=weights,
                                     random_state=np.random.RandomState(0), **kw)

    C = seeds(w, n_centroids=10)
    assert C.shape == (10, 3)
    d = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    assert np.all(d.min(0) == 0)  # every seed is a data point
    assert not np.any(np.isclose(d[::2], 0.0))  # never one of weight zero
    assert not np.allclose(seeds(w), seeds(np.ones(len(X))))
    assert seeds(w, init_size=20).shape == (6, 3)
    # given centres (an array, a callable) come back as they are, checked as fit checks them
    np.testing.assert_array_equal(model._init_centroids(X, sq, X[:6], None, w), X[:6])
    with pytest.raises(ValueError, match="does not match the number of clusters 6"):
        model._init_centroids(X, sq, lambda X_, k, random_state: X_[:2], np.random.RandomState(0), w)
