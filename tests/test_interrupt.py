"""Ctrl-C stops every long loop within a second and leaves the estimator unfitted.

Two ways in: SIGINT delivered to the process from a timer thread (what a terminal's Ctrl-C does;
the latency counts from when the signal is due), and an :func:`mercer.linalg.observe_blocks`
observer that raises ``KeyboardInterrupt`` (deterministic: it proves that the loop listens).
The latency table of every method: ``benchmarks/probes/probe_interrupt_latency.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np
import pytest
import scipy.linalg as sla
import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

import mercer
from mercer.linalg import observe_blocks
from mercer.linalg._eig import _syevr_top
from mercer.models.svm import _smo

from conftest import ctrl_c_cli_fit

#: The goal: a Ctrl-C is heard within this many seconds.
LIMIT_S = 1.0


def _data(n, d, seed=0, classes=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(X @ rng.normal(size=d)) + 0.3 * rng.normal(size=n)
    return X, ((f > 0).astype(int) if classes else f)


def _unfitted(est) -> bool:
    """``check_is_fitted`` raises -- and no ``name_`` attribute is left (what it looks for; an
    estimator that predicts unfitted, as a GP from its prior, passes ``check_is_fitted`` anyway)."""
    if [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]:
        return False
    try:
        check_is_fitted(est)
    except NotFittedError:
        return True
    return type(est).__sklearn_tags__(est).requires_fit is False


@contextlib.contextmanager
def _sigint_after(delay: float):
    """SIGINT to this process ``delay`` seconds in; yields a list that receives the due time."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    due = [time.perf_counter() + delay]
    timer = threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        yield due
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)


def _stop_at(desc_prefix: str, after: int = 0):
    """An observer that raises KeyboardInterrupt at the ``after``-th call whose desc starts with the prefix."""
    seen = []

    def observer(desc, done, total):
        if (desc or "").startswith(desc_prefix):
            seen.append((desc, done, total))
            if len(seen) > after:
                raise KeyboardInterrupt

    return observer, seen


def _assert_sigint_stops(call, delay: float = 0.3):
    with _sigint_after(delay) as due, pytest.raises(KeyboardInterrupt):
        call()
        time.sleep(5)  # the call ended before the signal: fail on the latency, not on a missing interrupt
    latency = time.perf_counter() - due[0]
    assert latency < LIMIT_S, f"Ctrl-C took {latency:.2f} s to stop the call"


# -- the SMO loop ----------------------------------------------------------------------------------
def test_smo_pauses_resume_the_same_iterates(monkeypatch):
    """The compiled loop returns every PAUSE_WORK of work and resumes where it stopped: the same
    solution, bit for bit, with the observer called at each return."""
    X, y = _data(1500, 4)
    ref = mercer.KernelSVC(kernel="rbf", gamma=0.5, C=10.0).fit(X, y)
    monkeypatch.setattr(_smo, "PAUSE_WORK", 2**12)
    calls = []
    with observe_blocks(lambda desc, done, total: calls.append(desc)):
        paused = mercer.KernelSVC(kernel="rbf", gamma=0.5, C=10.0).fit(X, y)
    assert calls.count("SMO") > 20
    np.testing.assert_array_equal(paused.dual_coef_, ref.dual_coef_)
    np.testing.assert_array_equal(paused.intercept_, ref.intercept_)
    np.testing.assert_array_equal(paused.n_iter_, ref.n_iter_)


@pytest.mark.parametrize("d", [8, 64])  # rows computed in the compiled loop / by torch in blocks
def test_svc_fit_stops_on_an_observer_and_is_left_unfitted(d):
    X, y = _data(3000, d)
    est = mercer.KernelSVC(kernel="rbf", gamma=1.0 / d, C=10.0)
    observer, seen = _stop_at("SMO", after=2)
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert len(seen) == 3 and _unfitted(est)


@pytest.mark.slow
def test_svc_fit_stops_within_a_second_of_sigint():
    X, y = _data(12000, 8)
    est = mercer.KernelSVC(kernel="rbf", gamma=0.125, C=10.0)
    mercer.KernelSVC(kernel="rbf", gamma=0.125).fit(X[:200], y[:200])  # numba's compilation outside the timing
    _assert_sigint_stops(lambda: est.fit(X, y), delay=0.5)
    assert _unfitted(est)


# -- dense eigendecompositions and factorisations in the worker thread ------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_syevr_top_is_scipys_eigh_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(200, 200)).astype(dtype)
    A = A + A.T
    w0, V0 = sla.eigh(A.T, lower=False, subset_by_index=[200 - 7, 199], driver="evr", check_finite=False)
    w1, V1 = _syevr_top(A, 7)
    np.testing.assert_array_equal(w1, w0)
    np.testing.assert_array_equal(V1, V0)


def test_syevr_top_releases_the_gil():
    """SciPy's own wrapper holds the GIL for the whole call: a worker thread running it would keep
    the main thread (and Ctrl-C) waiting. The ctypes call does not."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(900, 900))
    A = A + A.T
    worker = threading.Thread(target=lambda: _syevr_top(A, 5))
    last, gap = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():
        time.sleep(0.002)
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
    assert gap < 0.1


@pytest.mark.parametrize("make, X", [
    (lambda: mercer.KernelPCA(n_components=5, kernel="rbf", gamma=0.1, eigen_solver="dense"), 700),
    (lambda: mercer.KernelLogisticRegression(kernel="rbf", gamma=0.1), 700),
    (lambda: mercer.Nystroem(n_components=600, kernel="rbf", gamma=0.1), 1000),
], ids=["kernel-pca-dense", "logistic-exact", "nystroem-features"])
def test_dense_eigh_runs_in_the_interruptible_worker(make, X):
    """From EIGH_WORKER_MIN_N rows the eigendecomposition runs in a worker thread while the caller
    polls: an observer (or Ctrl-C) stops the fit at the first poll, and the fit leaves nothing."""
    Xd, y = _data(X, 8)
    est = make()
    observer, seen = _stop_at("eigendecomposition")
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(Xd, y)
    assert seen and _unfitted(est)


def test_dense_eigh_in_the_worker_gives_the_same_model():
    X, _ = _data(600, 5)
    a = mercer.KernelPCA(n_components=4, kernel="rbf", gamma=0.2, eigen_solver="dense").fit(X)
    polls = []
    with observe_blocks(lambda desc, done, total: polls.append(desc)):
        b = mercer.KernelPCA(n_components=4, kernel="rbf", gamma=0.2, eigen_solver="dense").fit(X)
    assert "eigendecomposition" in polls  # the worker's end is reported (desc, n, n)
    np.testing.assert_array_equal(np.asarray(a.eigenvalues_), np.asarray(b.eigenvalues_))
    np.testing.assert_array_equal(np.asarray(a.transform(X[:5])), np.asarray(b.transform(X[:5])))


# -- SciPy's linkage, which holds the GIL: in a child process --------------------------------------------
def test_agglomerative_linkage_in_a_child_process_is_scipys(monkeypatch):
    """From PROCESS_MIN_ELEMENTS distances the linkage runs in a child process on shared memory: the
    same tree as in this process."""
    from mercer.linalg import _process

    X, _ = _data(2100, 4)  # 2,203,950 distances
    polls = []
    with observe_blocks(lambda desc, done, total: polls.append((desc, done, total))):
        child = mercer.KernelAgglomerative(n_clusters=5, kernel="rbf", gamma=0.2).fit(X)
    assert ("linkage", 2100 * 2099 // 2, 2100 * 2099 // 2) in polls  # the child's end, reported
    monkeypatch.setattr(_process, "PROCESS_MIN_ELEMENTS", 2**62)
    here = mercer.KernelAgglomerative(n_clusters=5, kernel="rbf", gamma=0.2).fit(X)
    np.testing.assert_array_equal(child.children_, here.children_)
    np.testing.assert_array_equal(child.distances_, here.distances_)
    np.testing.assert_array_equal(child.labels_, here.labels_)


def test_agglomerative_linkage_stops_on_an_observer_and_is_left_unfitted():
    X, _ = _data(2100, 4)
    est = mercer.KernelAgglomerative(n_clusters=5, kernel="rbf", gamma=0.2)
    observer, seen = _stop_at("linkage")
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(X)
    assert seen and _unfitted(est)


@pytest.mark.slow
def test_agglomerative_linkage_stops_within_a_second_of_sigint():
    """SIGINT 0.5 s into the linkage (n = 6,000: ~3 s of SciPy's average linkage, which held Ctrl-C
    for all of it in this process)."""
    X, _ = _data(6000, 4)
    est = mercer.KernelAgglomerative(n_clusters=5, kernel="rbf", gamma=0.2)
    timers, due = [], []

    def observer(desc, done, total):
        if desc == "linkage" and not timers:
            due.append(time.perf_counter() + 0.5)
            timers.append(threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)))
            timers[0].start()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
            est.fit(X)
            time.sleep(5)  # the fit ended before the signal: fail on the latency
        latency = time.perf_counter() - due[0]
    finally:
        for t in timers:
            t.cancel()
        signal.signal(signal.SIGINT, previous)
    assert latency < LIMIT_S, f"Ctrl-C took {latency:.2f} s to stop the linkage"
    assert _unfitted(est)


# -- every other fit: the loops listen, and an interrupted fit leaves no attribute ------------------
FITS = {
    "ridge-exact": (lambda: mercer.KernelRidge(kernel="rbf", gamma=0.1, alpha=1e-2, memory_budget=2**27), 2500, False),
    "nystroem-cg": (lambda: mercer.NystroemKernelRidge(kernel="rbf", gamma=0.1, n_centers=200, solver="cg",
                                                       memory_budget=2**22), 5000, False),
    "pca-lanczos": (lambda: mercer.KernelPCA(n_components=5, kernel="rbf", gamma=0.1, eigen_solver="lanczos",
                                             memory_budget=2**22), 1500, None),
    "kmeans": (lambda: mercer.KMeans(n_clusters=8, n_init=2, memory_budget=2**20), 20000, None),
    "kernel-kmeans": (lambda: mercer.KernelKMeans(n_clusters=4, kernel="rbf", gamma=0.1, memory_budget=2**20), 1500, None),
    "perceptron": (lambda: mercer.KernelPerceptron(kernel="rbf", gamma=0.5, memory_budget=2**20), 2000, True),
    "mkl": (lambda: mercer.MKLClassifier(kernels=["rbf", "laplacian"], memory_budget=2**27), 1500, True),
    "gp-exact": (lambda: mercer.GaussianProcessRegressor(kernel="rbf", memory_budget=2**26), 600, False),
    "gp-sparse": (lambda: mercer.SparseGPRegressor(n_inducing=50, kernel="rbf", memory_budget=2**20), 3000, False),
    "budget-svc": (lambda: mercer.BudgetSVC(n_vectors=50, kernel="rbf", gamma=0.1, memory_budget=2**20), 3000, True),
    "logistic-nystroem": (lambda: mercer.KernelLogisticRegression(kernel="rbf", gamma=0.1, solver="nystroem",
                                                                 n_components=100, memory_budget=2**25), 3000, True),
    "sketched-ridge": (lambda: mercer.SketchedKernelRidge(kernel="rbf", gamma=0.1, n_components=200,
                                                          memory_budget=2**26), 3000, False),
    "random-feature-ridge": (lambda: mercer.RandomFeatureRidge(kernel="rbf", gamma=0.1, memory_budget=2**25), 20000,
                             False),
}


@pytest.mark.parametrize("name", list(FITS))
def test_an_interrupted_fit_leaves_the_estimator_unfitted(name):
    make, n, classes = FITS[name]
    X, y = _data(n, 6, classes=bool(classes))
    est = make()
    observer, seen = _stop_at("")  # the first block of any planned loop, or the first poll
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(X) if classes is None else est.fit(X, y)
    assert seen and _unfitted(est)


def test_an_interrupted_refit_keeps_the_previous_model():
    X, y = _data(1500, 4)
    est = mercer.KernelSVC(kernel="rbf", gamma=0.5).fit(X, y)
    before = {k: v for k, v in vars(est).items()}
    observer, _ = _stop_at("SMO")
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(X[::-1], y[::-1])
    assert vars(est).keys() == before.keys() and all(vars(est)[k] is v for k, v in before.items())
    np.testing.assert_array_equal(est.predict(X[:10]), est.predict(X[:10]))


@pytest.mark.parametrize("name", ["svc-predict", "pca-transform", "knn-predict"])
def test_predict_listens_to_the_observer(name):
    X, y = _data(1000, 6)
    if name == "svc-predict":
        est = mercer.KernelSVC(kernel="rbf", gamma=0.5, memory_budget=2**20).fit(X, y)
        call = lambda: est.predict(np.tile(X, (20, 1)))  # noqa: E731
    elif name == "pca-transform":
        est = mercer.KernelPCA(n_components=3, kernel="rbf", gamma=0.5, memory_budget=2**20).fit(X)
        call = lambda: est.transform(np.tile(X, (20, 1)))  # noqa: E731
    else:
        est = mercer.KernelKNeighborsClassifier(kernel="rbf", memory_budget=2**20).fit(X, y)
        call = lambda: est.predict(np.tile(X, (20, 1)))  # noqa: E731
    observer, seen = _stop_at("", after=1)
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        call()
    assert seen and not _unfitted(est)


# -- the CLI ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_stops_mercer_fit_svc_within_a_second_and_leaves_no_file(tmp_path):
    X, y = _data(12000, 8)
    status, err, latency, out = ctrl_c_cli_fit(tmp_path, np.column_stack([X, y]), "--model", "svc", "--preprocess",
                                               "none", "--holdout", "0")
    assert status == 130, err
    assert latency < LIMIT_S, f"mercer fit took {latency:.2f} s to stop"
    assert not out.exists() and not list(tmp_path.glob(".m.mercer*"))
