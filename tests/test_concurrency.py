"""Concurrency: one fitted model shared by threads, fits inside parallel grid searches, and the
per-call memory plans (a contextvar, :mod:`mercer.linalg._plan`) kept apart between threads.

* every estimator of the registry, fitted once on small data: predict / transform /
  decision_function / predict_proba called from 8 threads, on different slices and all on the same
  slice, give exactly the serial results;
* ``GridSearchCV(n_jobs=2)`` with joblib's threading backend and with its process (loky) backend
  gives the serial search's scores and best model (KernelRidge, NystroemKernelRidge, KernelSVC,
  KMeans, KernelPCA in a pipeline);
* a thread under ``config_context(memory_budget=1)`` fails with ``MemoryBudgetError`` while threads
  without it fit and predict normally at the same time: no thread sees another's plan.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from joblib import parallel_backend
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline

import mercer
from mercer.linalg import MemoryBudgetError
from mercer.linalg._plan import active_plan
from mercer.models._registry import CLASSIFIER, ESTIMATORS, REGRESSOR

ENTRIES = {e.name: e for e in ESTIMATORS}
METHODS = ("predict", "transform", "decision_function", "predict_proba")
THREADS = 8


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 4))
    y_reg = X[:, 0] - 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=64)
    y_clf = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    X_new = rng.normal(size=(96, 4))
    return X, y_reg, y_clf, X_new


def _fitted(name, data):
    X, y_reg, y_clf, _ = data
    entry = ENTRIES[name]
    est = entry.instances()[0]
    if est.get_params().get("random_state", 0) is None:
        est.set_params(random_state=0)  # the same model in every fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if entry.kind == CLASSIFIER:
            return est.fit(X, y_clf)
        if entry.kind == REGRESSOR:
            return est.fit(X, y_reg)
        return est.fit(X)


def _call(est, method, X):
    out = getattr(est, method)(X)
    return out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_threads_share_a_fitted_model(name, data):
    X_new = data[3]
    est = _fitted(name, data)
    methods = [m for m in METHODS if hasattr(est, m)]
    if not methods:
        pytest.skip(f"{name} has no predict / transform (fit_predict only): covered by the fit test below")
    starts = range(0, len(X_new), 12)  # slices of 12 rows
    tasks = [(m, i) for m in methods for i in starts] * 2 + [(m, 0) for m in methods] * THREADS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serial = {(m, i): _call(est, m, X_new[i:i + 12]) for m, i in set(tasks)}
        with ThreadPoolExecutor(THREADS) as pool:
            results = list(pool.map(lambda t: _call(est, t[0], X_new[t[1]:t[1] + 12]), tasks))
    for (m, i), got in zip(tasks, results):
        np.testing.assert_array_equal(got, serial[(m, i)], err_msg=f"{name}.{m} rows {i}:{i + 12}")


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_threads_fit_clones(name, data):
    """Fits of clones in 4 threads at once: each the serial fit's outputs."""
    X_new = data[3]
    serial = _fitted(name, data)
    methods = [m for m in METHODS if hasattr(serial, m)]

    def outputs(est):
        out = {m: _call(est, m, X_new) for m in methods}
        if hasattr(est, "labels_"):
            out["labels_"] = np.asarray(est.labels_)
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = outputs(serial)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: outputs(_fitted(name, data)), range(4)))
    for g in got:
        assert g.keys() == expected.keys()
        for key in expected:
            np.testing.assert_allclose(g[key], expected[key], rtol=1e-6, atol=1e-8, err_msg=f"{name}.{key}")


def test_threads_do_not_see_each_others_plans(data):
    """A 1-byte budget in one thread's context; the others fit within their own (free memory)."""
    X, y, _, X_new = data
    expected = mercer.models.KernelRidge(kernel="rbf").fit(X, y).predict(X_new)

    def starved(_):
        with mercer.config_context(memory_budget=1):
            with pytest.raises(MemoryBudgetError):
                mercer.models.NystroemKernelRidge(n_centers=32, random_state=0).fit(X, y)
            return mercer.get_config().memory_budget

    def normal(_):
        assert mercer.get_config().memory_budget is None and active_plan() is None
        return mercer.models.KernelRidge(kernel="rbf").fit(X, y).predict(X_new)

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(starved if i % 2 else normal, i) for i in range(4 * THREADS)]
        results = [f.result() for f in futures]
    for i, r in enumerate(results):
        if i % 2:
            assert r == 1
        else:
            np.testing.assert_array_equal(r, expected)
    assert mercer.get_config().memory_budget is None and active_plan() is None


# -- grid searches ------------------------------------------------------------------------------------
def _searches():
    from mercer.models import KernelPCA, KernelRidge, KernelSVC, KMeans, NystroemKernelRidge
    from sklearn.linear_model import Ridge

    return {
        "KernelRidge": (KernelRidge(kernel="rbf"), {"alpha": [0.1, 1.0], "gamma": [0.1, 0.5]}, "reg"),
        "NystroemKernelRidge": (NystroemKernelRidge(n_centers=16, random_state=0, dtype="float64"),
                                {"alpha": [1e-3, 1e-1], "n_centers": [8, 16]}, "reg"),
        "KernelSVC": (KernelSVC(kernel="rbf"), {"C": [0.5, 5.0], "gamma": [0.1, 1.0]}, "clf"),
        "KMeans": (KMeans(n_clusters=2, n_init=2, random_state=0), {"n_clusters": [2, 3, 4]}, "none"),
        "KernelPCA-pipeline": (make_pipeline(KernelPCA(n_components=3, kernel="rbf"), Ridge()),
                               {"kernelpca__gamma": [0.1, 0.5], "ridge__alpha": [0.1, 1.0]}, "reg"),
    }


@pytest.mark.parametrize("backend", ["threading", "loky"])
@pytest.mark.parametrize("name", ["KernelRidge", "NystroemKernelRidge", "KernelSVC", "KMeans", "KernelPCA-pipeline"])
def test_grid_search_in_parallel_gives_the_serial_result(name, backend, data):
    X, y_reg, y_clf, X_new = data
    est, grid, target = _searches()[name]
    y = {"reg": y_reg, "clf": y_clf, "none": None}[target]
    cv = KFold(3, shuffle=True, random_state=0)
    serial = GridSearchCV(clone(est), grid, cv=cv, n_jobs=1).fit(X, y)
    with parallel_backend(backend, n_jobs=2):
        parallel = GridSearchCV(clone(est), grid, cv=cv, n_jobs=2).fit(X, y)
    np.testing.assert_allclose(parallel.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"],
                               rtol=1e-10)
    assert parallel.best_params_ == serial.best_params_
    method = "predict" if hasattr(serial, "predict") else "transform"
    np.testing.assert_allclose(getattr(parallel, method)(X_new), getattr(serial, method)(X_new), rtol=1e-10)
