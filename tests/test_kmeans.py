"""The input-space k-means core (mercer.kmeans) against naive computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mercer._backend import make_generator, row_sq_norms
from mercer.kmeans import (MIN_CLUSTERS_FOR_BOUNDS, assign, d2_sampling, kmeans, kmeans_plusplus, lloyd,
                           sq_distances)
from mercer.models.cluster import KMeans


def _naive_lloyd(X, C, n_iter):
    """Plain Lloyd: full distance matrix, argmin, means (no empty clusters in these tests)."""
    for _ in range(n_iter):
        labels = ((X[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
        C = np.stack([X[labels == c].mean(0) for c in range(len(C))])
    return C, ((X[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)


@pytest.mark.parametrize("k", [5, MIN_CLUSTERS_FOR_BOUNDS + 6])  # plain passes, then Hamerly's bounds
def test_lloyd_equals_naive_lloyd(breast_cancer, k):
    X = breast_cancer[0]
    C0 = X[np.random.default_rng(0).choice(len(X), k, replace=False)]
    Xt = torch.tensor(X)
    res = lloyd(Xt, row_sq_norms(Xt), torch.tensor(C0), rows=37, max_iter=8, tol=0.0)
    C, labels = _naive_lloyd(X, C0, res.n_iter)
    np.testing.assert_allclose(res.centers.numpy(), C, atol=1e-10)
    np.testing.assert_array_equal(res.labels.numpy(), labels)
    assert res.inertia == pytest.approx(((X - C[labels]) ** 2).sum(), rel=1e-10)


def test_kmeans_is_the_estimator(digits):
    X = digits[0]
    est = KMeans(12, n_init=2, random_state=3).fit(X)
    res = kmeans(torch.tensor(X), 12, n_init=2, generator=make_generator(3), memory_budget=2**30)
    np.testing.assert_array_equal(res.centers.numpy(), est.cluster_centers_)
    np.testing.assert_array_equal(res.labels.numpy(), est.labels_)
    assert res.inertia == est.inertia_ and res.n_iter == est.n_iter_


def test_blocks_do_not_change_the_answer(digits):
    X = torch.tensor(digits[0][:500])
    small = kmeans(X, 30, generator=make_generator(0), memory_budget=40_000)  # blocks of 64 rows
    large = kmeans(X, 30, generator=make_generator(0), memory_budget=2**30)
    torch.testing.assert_close(small.centers, large.centers, rtol=0, atol=1e-12)
    assert torch.equal(small.labels, large.labels)
    labels, mind = assign(X, row_sq_norms(X), large.centers, rows=7)
    D = sq_distances(X, large.centers, rows=11)
    assert torch.equal(labels, D.argmin(1)) and torch.allclose(mind, D.min(1).values, atol=1e-12)


def test_kmeans_plusplus_with_integer_weights_picks_repeated_rows(breast_cancer):
    X = torch.tensor(breast_cancer[0][:60])
    w = torch.tensor(np.random.default_rng(0).integers(1, 4, 60), dtype=torch.float64)
    R = X.repeat_interleave(w.long(), dim=0)

    def oracle(Y):
        return lambda idx, s: ((Y[s, None, :] - Y[idx][None]) ** 2).sum(-1)

    weighted = kmeans_plusplus(60, 6, oracle(X), make_generator(1), rows=16, sample_weight=w, n_local_trials=1)
    repeated = kmeans_plusplus(len(R), 6, oracle(R), make_generator(1), rows=16, n_local_trials=1)
    torch.testing.assert_close(X[weighted], R[repeated], rtol=0, atol=0)


def test_d2_sampling_distinct_even_with_duplicates():
    X = torch.tensor(np.repeat(np.eye(4), 5, axis=0))  # 4 distinct points, 20 rows
    idx = d2_sampling(X, 10, make_generator(0))
    assert len(set(idx.tolist())) == 10
    assert len({tuple(r) for r in X[idx[:4]].tolist()}) == 4  # the distinct points come first
