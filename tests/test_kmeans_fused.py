"""The compiled Lloyd passes (mercer.kmeans._fused) against scikit-learn and the torch passes."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans as SkKMeans
from threadpoolctl import threadpool_limits

import mercer.kmeans._fused as fused
from mercer._backend import num_threads
from mercer.kmeans import lloyd
from mercer.kmeans._lloyd import _centred
from mercer.models.cluster import KMeans


def _problem(X, k, seed=0, dtype=np.float64):
    X = np.asarray(X, dtype=dtype)
    C0 = X[np.random.default_rng(seed).choice(len(X), k, replace=False)]
    return X, C0


def _lloyd(X, C0, w=None, *, fused_pass=True, rows=4096, max_iter=300, rel_tol=1e-4, **kw):
    """mercer's Lloyd on centred data, as the estimator runs it (centres moved back): the compiled
    passes (``kw``: ``bounds``, ``gemm``, ``threads`` of :func:`lloyd_fused`) or the torch ones."""
    Xt = torch.tensor(X)
    mean, Xc, x_sq = _centred(Xt, False, compiled=True)  # (the estimator's centring: its numbers, bit for bit)
    tol = rel_tol * float(x_sq.sum(dtype=torch.float64)) / Xc.numel()
    wt = None if w is None else torch.tensor(w, dtype=Xt.dtype)
    C0 = torch.tensor(C0) - mean
    if fused_pass:
        C, labels, inertia, n_iter, _ = fused.lloyd_fused(Xc, x_sq, C0, rows=rows, sample_weight=wt, tol=tol,
                                                          max_iter=max_iter, **kw)
    else:
        with num_threads(1):
            res = lloyd(Xc, x_sq, C0, rows=rows, sample_weight=wt, tol=tol, max_iter=max_iter, fused=False, **kw)
        C, labels, inertia, n_iter = res.centers, res.labels, res.inertia, res.n_iter
    return C + mean, labels.numpy(), inertia, n_iter


def _sklearn(X, C0, w=None, max_iter=300, tol=1e-4):
    with threadpool_limits(1):  # small problems: OpenMP threads only wait on a busy machine
        return SkKMeans(len(C0), init=C0, n_init=1, max_iter=max_iter, tol=tol).fit(X, sample_weight=w)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d, gemm", [(4, False), (4, True), (30, False), (30, True)])
@pytest.mark.parametrize("k, bounds", [(6, False), (6, True), (30, True)])  # plain passes, Hamerly's bounds
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_equals_sklearn_and_torch_passes(breast_cancer, dtype, d, gemm, k, bounds, weighted):
    X, C0 = _problem(breast_cancer[0][:, :d], k, dtype=dtype)
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(X)) if weighted else None
    ref = _sklearn(X, C0, w)
    C, labels, inertia, n_iter = _lloyd(X, C0, w, gemm=gemm, bounds=bounds, rows=37)  # GEMM blocks cut chunks
    Ct, labels_t, inertia_t, n_iter_t = _lloyd(X, C0, w, fused_pass=False, bounds=bounds)
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_array_equal(labels, ref.labels_)
    np.testing.assert_array_equal(labels, labels_t)
    assert n_iter == ref.n_iter_ == n_iter_t
    assert inertia == pytest.approx(ref.inertia_, rel=10 * rtol) and inertia == pytest.approx(inertia_t, rel=rtol)
    np.testing.assert_allclose(C.numpy(), ref.cluster_centers_, rtol=0, atol=100 * rtol)
    np.testing.assert_allclose(C.numpy(), Ct.numpy(), rtol=0, atol=100 * rtol)


def test_fused_is_the_estimators_path_on_cpu(breast_cancer):
    X, C0 = _problem(breast_cancer[0], 40)
    est = KMeans(40, init=C0, n_init=1).fit(X)
    C, labels, inertia, n_iter = _lloyd(X, C0)
    np.testing.assert_array_equal(est.labels_, labels)
    np.testing.assert_array_equal(est.cluster_centers_, C.numpy())
    assert est.inertia_ == inertia and est.n_iter_ == n_iter
    ref = _sklearn(X, C0)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-12) and est.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("gemm", [False, True])
@pytest.mark.parametrize("above", [False, True])
def test_default_bounds_on_both_paths(breast_cancer, caplog, gemm, above):
    """By default Hamerly's bounds are used from LOOP_MIN_CLUSTERS_FOR_BOUNDS (compiled loop) or
    GEMM_MIN_CLUSTERS_FOR_BOUNDS (GEMM blocks) clusters on: then fewer than the n k distances of
    every iteration are computed, and the labels stay scikit-learn's."""
    least = fused.GEMM_MIN_CLUSTERS_FOR_BOUNDS if gemm else fused.LOOP_MIN_CLUSTERS_FOR_BOUNDS
    X, C0 = _problem(breast_cancer[0], least + 2 if above else least - 2)
    with caplog.at_level(logging.DEBUG, logger="mercer.kmeans._fused"):
        _, labels, inertia, n_iter = _lloyd(X, C0, gemm=gemm)
    computed = float(re.search(r"([0-9.e+-]+) of the n k distances computed", caplog.text).group(1))
    assert (computed < 0.9) if above else (computed >= 1.0)
    ref = _sklearn(X, C0)
    np.testing.assert_array_equal(labels, ref.labels_)
    assert n_iter == ref.n_iter_ and inertia == pytest.approx(ref.inertia_, rel=1e-12)


@pytest.mark.parametrize("gemm", [False, True])
def test_threads_and_chunks_do_not_change_the_numbers(monkeypatch, gemm):
    """Many small chunks (as a large problem has), claimed by 1 or 3 threads: the same numbers,
    bit for bit (the sums are added chunk by chunk in a fixed order)."""
    monkeypatch.setattr(fused, "_CHUNK_WORK", 1)  # chunks of 256 rows (GEMM) or 1 row: capped at 64 chunks
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 40 if gemm else 5)) + 3 * rng.normal(size=(20, 40 if gemm else 5))[rng.integers(0, 20, 3000)]
    X, C0 = _problem(X, 30)
    runs = [_lloyd(X, C0, gemm=gemm, threads=t, rows=50) for t in (1, 3)]
    for a, b in zip(runs[0], runs[1]):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        elif isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b
    ref = _sklearn(X, C0)
    np.testing.assert_array_equal(runs[0][1], ref.labels_)
    assert runs[0][2] == pytest.approx(ref.inertia_, rel=1e-12)


@pytest.mark.parametrize("case", ["switch", "empty", "weighted", "long"])
def test_serial_passes_equal_the_pass_by_pass_loop(monkeypatch, breast_cancer, case):
    """The iterations run in one compiled call (``_serial_passes``) give the numbers of the loop
    that returns to Python after every pass, bit for bit: when the passes move from the pool's
    threads to the calling thread as the bounds settle (``switch``), when a cluster empties and
    Python re-seeds it in between (``empty``), with weights, and over more iterations than one
    compiled call runs (``long``)."""
    X, w, threads = breast_cancer[0][:, :6], None, 1
    if case == "switch":  # the first passes are worth the pool's threads (every row: 7.2M operations), later ones not
        rng = np.random.default_rng(0)
        X = rng.normal(size=(24_000, 6)) + 4 * rng.normal(size=(30, 6))[rng.integers(0, 30, 24_000)]
        assert len(X) * 30 * (6 + 4) > fused._SERIAL_MAX_WORK
        threads = 3
    tol = 1e-4
    if case == "long":  # 77 iterations at tol = 0: the compiled loop returns to Python after 64 (progress, Ctrl-C)
        X, tol = np.random.default_rng(0).uniform(size=(6000, 2)), 0.0
    C0 = X[np.random.default_rng(0).choice(len(X), 30, replace=False)]
    if case == "empty":
        C0 = np.vstack([X[:25], np.full((3, X.shape[1]), 50.0)])
    elif case == "weighted":
        w = np.random.default_rng(1).uniform(0.2, 3.0, len(X))
    calls = []
    real = fused._State.serial_passes
    monkeypatch.setattr(fused._State, "serial_passes", lambda self, *a: calls.append(a[0]) or real(self, *a))
    a = _lloyd(X, C0, w, gemm=False, threads=threads, rel_tol=tol)
    assert calls and (case != "switch" or calls[0] > 0)  # the compiled loop ran (after threaded passes)
    assert all(b > a for a, b in zip(calls, calls[1:]))  # every compiled call ran an iteration at least
    assert case != "long" or (len(calls) >= 2 and calls[1] == fused._SERIAL_ITERS)
    b = _lloyd(X, C0, w, gemm=False, threads=threads, serial=False, rel_tol=tol)
    assert torch.equal(a[0], b[0]) and a[2] == b[2] and a[3] == b[3]
    np.testing.assert_array_equal(a[1], b[1])
    ref = _sklearn(X, C0, w, tol=tol)
    np.testing.assert_array_equal(a[1], ref.labels_)
    assert a[3] == ref.n_iter_


@pytest.mark.parametrize("gemm", [False, True])
def test_empty_clusters_and_max_iter_as_sklearn(breast_cancer, gemm):
    """A centre no point is closest to is re-seeded with the farthest point (scikit-learn's rule);
    a run stopped by max_iter ends with the labels of its last centres."""
    X = breast_cancer[0]
    C0 = np.vstack([X[:25], np.full((3, X.shape[1]), 50.0)])
    for max_iter in (2, 300):
        ref = _sklearn(X, C0, max_iter=max_iter)
        C, labels, inertia, n_iter = _lloyd(X, C0, gemm=gemm, max_iter=max_iter)
        Ct, labels_t, _, _ = _lloyd(X, C0, fused_pass=False, max_iter=max_iter)
        np.testing.assert_array_equal(labels, ref.labels_)
        np.testing.assert_array_equal(labels, labels_t)
        np.testing.assert_allclose(C.numpy(), ref.cluster_centers_, atol=1e-10)
        assert inertia == pytest.approx(ref.inertia_, rel=1e-12) and n_iter == ref.n_iter_


def test_zero_weight_cluster_is_empty_as_in_sklearn(breast_cancer):
    """A cluster whose points all weigh nothing is empty for the update (scikit-learn's rule)."""
    X = breast_cancer[0][:, :5]
    C0 = X[[0, 1, 2, 3, 4, 5]]
    w = np.ones(len(X))
    labels0 = _sklearn(X, C0, max_iter=1).labels_
    w[labels0 == 0] = 0.0  # cluster 0 weighs nothing after the first assignment
    ref = _sklearn(X, C0, w)
    C, labels, inertia, n_iter = _lloyd(X, C0, w)
    np.testing.assert_array_equal(labels, ref.labels_)
    np.testing.assert_allclose(C.numpy(), ref.cluster_centers_, atol=1e-10)
    assert inertia == pytest.approx(ref.inertia_, rel=1e-12)


def test_one_cluster_and_tiny_data():
    X = np.random.default_rng(0).normal(size=(7, 3))
    C, labels, inertia, _ = _lloyd(X, X[:1])
    np.testing.assert_allclose(C.numpy()[0], X.mean(0), atol=1e-14)
    assert (labels == 0).all() and inertia == pytest.approx(((X - X.mean(0)) ** 2).sum(), rel=1e-12)
    C, labels, inertia, _ = _lloyd(X, X)  # k = n: every point its own centre
    np.testing.assert_array_equal(labels, np.arange(7))
    assert inertia == pytest.approx(0.0, abs=1e-20)


def test_thread_rule():
    """One thread for a problem of one chunk, at most torch's threads otherwise."""
    assert fused.fused_threads(5_000, 50, 2, False) == 1
    assert fused.fused_threads(10**6, 50, 8, False) == min(torch.get_num_threads(), fused._MAX_CHUNKS)
    rows = fused.chunk_rows(10**6, 50, 784, True)
    assert rows >= 256 and (10**6 / rows) * 50 * 784 * 8 <= fused.KMEANS_MAX_CHUNK_BYTES * 1.01


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_centre_any_layout(dtype, layout):
    """The compiled centring: numpy's column means and centred rows (C order) with their squared
    norms, for rows in any memory layout; in place only where asked and possible."""
    X = np.random.default_rng(0).normal(3.0, 2.0, (1100, 7)).astype(dtype)
    X = {"C": X, "F": np.asfortranarray(X), "strided": X[::2, 1:6]}[layout]
    orig = X.copy()
    mean, Xc, x_sq = fused.centre(X)
    rtol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(mean, X.mean(0, dtype=np.float64), rtol=rtol)
    np.testing.assert_allclose(Xc, X - mean, rtol=0, atol=0)
    np.testing.assert_allclose(x_sq, (Xc.astype(np.float64) ** 2).sum(1), rtol=rtol)
    assert Xc.flags.c_contiguous and Xc.dtype == x_sq.dtype == mean.dtype == dtype
    np.testing.assert_array_equal(X, orig)  # not in place unless asked
    Y = X.copy(order="K")
    _, Yc, _ = fused.centre(Y, in_place=True)
    assert np.shares_memory(Y, Yc) == Y.flags.c_contiguous
    np.testing.assert_array_equal(Yc, Xc)


def test_estimator_reads_user_rows_in_place(breast_cancer):
    """A float64 numpy X is read where it lies (no copy before centring), never written: read-only,
    Fortran-ordered and negatively strided X (copied: torch takes no negative strides) give the
    C-ordered fit's numbers."""
    X, C0 = _problem(breast_cancer[0], 12)
    ref = KMeans(12, init=C0, n_init=1).fit(X.copy())
    ro = X.copy()
    ro.flags.writeable = False
    flipped = (np.ascontiguousarray(X[::-1])[::-1], np.ascontiguousarray(X[:, ::-1])[:, ::-1])  # same rows
    for Xv in (ro, np.asfortranarray(X), *flipped):
        before = Xv.copy()
        est = KMeans(12, init=C0, n_init=1).fit(Xv)
        np.testing.assert_array_equal(Xv, before)
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-12)
        assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-13)
