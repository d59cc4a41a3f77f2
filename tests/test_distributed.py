"""The Dask engine (mercer.distributed): Nyström ridge fitted on a LocalCluster's workers equals the
in-memory fit; predictions of Dask collections; a worker killed mid-fit; CG checkpoints."""

from __future__ import annotations

import logging
import os
import signal
import time
import warnings

import numpy as np
import pytest

import mercer
from mercer.linalg import NumericalWarning, distributed_engine
from mercer.models.ridge import _nystroem

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")


def _ran_on_workers(task_stream, name: str) -> int:
    """Tasks of the function ``name`` the workers ran."""
    return sum(1 for t in task_stream.data if str(t["key"]).startswith(name))


def _data(n=600, d=5, seed=0, classes=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X @ rng.normal(size=d)) + 0.1 * rng.normal(size=n)
    if classes:
        y = np.digitize(y, np.quantile(y, np.linspace(0, 1, classes + 1)[1:-1]))
    X.setflags(write=False)
    return X, y


_PARAMS = dict(gamma=0.2, n_centers=60, alpha=1.0, dtype="float64", tol=1e-9, max_iter=200, random_state=0)


def test_engine_applies_only_with_a_client(dask_client):
    X, _ = _data(50)
    Xd = da.from_array(X, chunks=20)
    assert distributed_engine(X) is None
    assert distributed_engine(Xd) is None  # no client in force: DaskSource streaming in this process
    with dask_client.as_current():
        assert distributed_engine(Xd) is not None
    with mercer.config_context(dask_client=dask_client):
        assert distributed_engine(Xd) is not None
    with pytest.raises(ValueError, match="'dask_client' parameter of Config must be a distributed.Client or None"):
        mercer.config_context(dask_client="tcp://127.0.0.1:8786").__enter__()


def test_config_client_runs_the_fit(dask_client):
    X, y = _data(300)
    params = dict(_PARAMS, solver="cg")
    ref = mercer.NystroemKernelRidge(**params).fit(X, y)
    with mercer.config_context(dask_client=dask_client), distributed.get_task_stream(client=dask_client) as ts:
        model = mercer.NystroemKernelRidge(**params).fit(da.from_array(X, chunks=(100, -1)),
                                                          da.from_array(y, chunks=100))
    assert _ran_on_workers(ts, "_part_kt_k_v") == 3 * int(model.n_iter_[0])  # 3 partitions per CG iteration
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=1e-6)


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("solver", ["cg", "direct"])
def test_regressor_on_cluster_equals_in_memory(dask_in_force, solver, fit_intercept):
    X, y = _data()
    Xt, _ = _data(200, seed=1)
    sw = np.random.default_rng(2).uniform(0.5, 2, size=len(y))
    params = dict(_PARAMS, solver=solver, fit_intercept=fit_intercept)
    ref = mercer.NystroemKernelRidge(**params).fit(X, y, sample_weight=sw)
    with distributed.get_task_stream(client=dask_in_force) as ts:
        model = mercer.NystroemKernelRidge(**params).fit(da.from_array(X, chunks=(170, -1)),
                                                         da.from_array(y, chunks=90), sample_weight=sw)
    assert _ran_on_workers(ts, "_part_kt_k" if solver == "direct" else "_part_kt_k_v") >= 4  # 4 partitions
    np.testing.assert_allclose(model.predict(Xt), ref.predict(Xt), rtol=0, atol=1e-6)


#: Safety factor of the engines' agreement bound: each engine's coefficients are off by about
#: cond * (a few eps) (its own summation order of K_nM^T W K_nM, then a backward stable Cholesky
#: solve), the difference by at most twice that; the estimate is a lower bound of cond (to a small factor).
_AGREEMENT_FACTOR = 10


@pytest.mark.parametrize("scaled", [True, False], ids=["scaled", "unscaled"])
def test_engines_agree_to_the_conditionings_bound(dask_in_force, monkeypatch, scaled):
    """The Dask and in-memory direct Nyström solves agree to _AGREEMENT_FACTOR * cond * eps (coefficients,
    relative), cond being the condition estimate of their system; unscaled features (cond ~1e14) warn."""
    rng = np.random.default_rng(0)
    n = 1500
    X = rng.normal(size=(n, 5)) * np.array([300, 1, 1, 1, 1.0])
    y = np.sin(X[:, 1]) + X[:, 0] / 300 + 0.1 * rng.normal(size=n)
    if scaled:
        X = (X - X.mean(0)) / X.std(0)
    params = dict(gamma=0.2 if scaled else 1e-4, alpha=1e-3, n_centers=100, solver="direct", dtype="float64",
                  random_state=0)
    conds = []
    warn = _nystroem.warn_ill_conditioned
    monkeypatch.setattr(_nystroem, "warn_ill_conditioned", lambda *a, **k: conds.append(warn(*a, **k)))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ref = mercer.NystroemKernelRidge(**params).fit(X, y)
        model = mercer.NystroemKernelRidge(**params).fit(da.from_array(X, chunks=(n // 3, -1)),
                                                         da.from_array(y, chunks=n // 3))
    ill = [w for w in record if issubclass(w.category, NumericalWarning) and "ill-conditioned" in str(w.message)]
    assert len(conds) == 2 and len(ill) == (0 if scaled else 2)
    bound = _AGREEMENT_FACTOR * max(conds) * np.finfo(np.float64).eps
    assert bound < 1e-7 if scaled else bound > 1e-2
    rel = np.linalg.norm(model.coef_ - ref.coef_) / np.linalg.norm(ref.coef_)
    assert rel <= bound
    pred, pred_ref = model.predict(X), ref.predict(X)
    assert np.abs(pred - pred_ref).max() <= bound * np.abs(pred_ref).max()


def test_regressor_dataframe_and_numpy_y(dask_in_force):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y = _data()
    Y = np.column_stack([y, np.cos(y)])
    frame = dd.from_pandas(pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), npartitions=3)
    ref = mercer.NystroemKernelRidge(**_PARAMS).fit(X, Y)
    model = mercer.NystroemKernelRidge(**_PARAMS).fit(frame, Y)  # numpy y: placed like the frame's partitions
    Xt = pd.DataFrame(_data(100, seed=3)[0], columns=frame.columns)
    np.testing.assert_allclose(model.predict(Xt), ref.predict(Xt.to_numpy()), rtol=0, atol=1e-6)


def test_classifier_on_cluster_equals_in_memory(dask_in_force):
    X, y = _data(classes=3)
    labels = np.array(["a", "b", "c"])[y]
    params = dict(_PARAMS, solver="cg")
    ref = mercer.NystroemKernelRidgeClassifier(**params).fit(X, labels)
    model = mercer.NystroemKernelRidgeClassifier(**params).fit(da.from_array(X, chunks=(150, -1)),
                                                               da.from_array(labels, chunks=150))
    Xt = _data(200, seed=4)[0]
    np.testing.assert_allclose(model.decision_function(Xt), ref.decision_function(Xt), rtol=0, atol=1e-6)
    assert (model.predict(Xt) == ref.predict(Xt)).all()


def test_predict_of_dask_array_runs_on_workers(dask_in_force):
    X, y = _data()
    model = mercer.NystroemKernelRidge(**_PARAMS).fit(X, y)
    Xt = _data(300, seed=5)[0]
    out = model.predict(da.from_array(Xt, chunks=(100, -1)))
    assert isinstance(out, da.Array) and out.chunks[0] == (100, 100, 100)
    fut = dask_in_force.compute(out)  # on the cluster's workers
    np.testing.assert_allclose(fut.result(), model.predict(Xt), rtol=0, atol=1e-10)
    assert set(dask_in_force.who_has(fut)[fut.key]) <= set(dask_in_force.scheduler_info()["workers"])


def test_fallback_without_client_streams_in_process():
    X, y = _data(300)
    ref = mercer.NystroemKernelRidge(**_PARAMS).fit(X, y)
    model = mercer.NystroemKernelRidge(**_PARAMS).fit(da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100))
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=1e-6)


def test_operator_products_equal_dense(dask_in_force):
    import torch

    from mercer.distributed import DaskKernelOperator
    from mercer.kernels import RBF

    X, _ = _data(250, d=3)
    X = X.copy()
    Z = torch.from_numpy(X[:17].copy())
    k = RBF(gamma=0.5)
    K = k(torch.from_numpy(X), Z).numpy()
    op = DaskKernelOperator(k, da.from_array(X, chunks=(60, -1)), Z, client=dask_in_force, memory_budget=1 << 22)
    v = np.random.default_rng(0).normal(size=(17, 2))
    w = np.random.default_rng(1).uniform(size=250)
    np.testing.assert_allclose(op.kt_k_v(torch.from_numpy(v), weights=op.per_sample(w)).numpy(), K.T @ (w[:, None] * (K @ v)),
                               rtol=1e-12, atol=1e-12)
    assert op.comm_bytes > 0
    np.testing.assert_allclose(op.rmatvec(op.per_sample(w)).numpy(), K.T @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(op.kt_k().numpy(), K.T @ K, rtol=1e-12, atol=1e-12)


def test_operator_spreads_its_tasks_over_the_workers(dask_in_force):
    """Partitions that all sit on one worker: each product's tasks still run 3 / 3 on the two workers
    (every product waits for its busiest worker). The products equal the dense ones."""
    import torch

    from mercer.distributed import DaskKernelOperator
    from mercer.kernels import RBF

    X, _ = _data(600, d=3)
    X = X.copy()
    Z = torch.from_numpy(X[:11].copy())
    k = RBF(gamma=0.5)
    op = DaskKernelOperator(k, da.from_array(X, chunks=(100, -1)), Z, client=dask_in_force, memory_budget=1 << 22)
    workers = sorted(dask_in_force.scheduler_info()["workers"])
    op._parts = dask_in_force.scatter([X[i:i + 100] for i in range(0, 600, 100)], workers=workers[:1], hash=False)
    assert {w for ws in dask_in_force.who_has(op._parts).values() for w in ws} == {workers[0]}
    K = k(torch.from_numpy(X), Z).numpy()
    v = np.random.default_rng(0).normal(size=(11, 1))
    with distributed.get_task_stream(client=dask_in_force) as ts:
        np.testing.assert_allclose(op.kt_k_v(torch.from_numpy(v)).numpy(), K.T @ (K @ v), rtol=1e-12, atol=1e-12)
    ran = [t["worker"] for t in ts.data if str(t["key"]).startswith("_part_kt_k_v")]
    assert sorted(ran.count(w) for w in workers) == [3, 3]


@pytest.mark.parametrize("make", [
    lambda: mercer.RandomFeatureRidge(alpha=0.1, n_components=40, random_state=0, memory_budget=1 << 18),
    lambda: mercer.ApproximateKernelPCA(n_components=3, n_features=30, gamma=0.1, random_state=0,
                                        memory_budget=1 << 18),
    lambda: mercer.KMeans(4, random_state=0, memory_budget=1 << 18),
    lambda: mercer.KernelKMeans(4, approximation="nystroem", n_components=20, gamma=0.05, random_state=0,
                                memory_budget=1 << 18),
    lambda: mercer.approx.Nystroem(n_components=16, gamma=0.1, random_state=0, memory_budget=1 << 18),
], ids=["RandomFeatureRidge", "ApproximateKernelPCA", "KMeans", "KernelKMeans", "Nystroem"])
def test_streaming_estimators_with_the_cluster_in_force(dask_in_force, make):
    """The other estimators whose fit streams over samples: with a client in force, a Dask array's
    partitions are computed by the cluster and read block by block; the fit equals the in-memory one
    (1e-6), and its predict / transform of a Dask array is a Dask array with the in-memory values."""
    X, y = _data(600, d=4)
    ref, est = make(), make()
    supervised = isinstance(ref, mercer.RandomFeatureRidge)
    ref.fit(X, y) if supervised else ref.fit(X)
    Xd = da.from_array(X, chunks=(137, -1))
    est.fit(Xd, da.from_array(y, chunks=137)) if supervised else est.fit(Xd)
    method = "predict" if hasattr(ref, "predict") and not hasattr(ref, "transform") or supervised else "transform"
    out = getattr(est, method)(Xd)
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(dask_in_force.compute(out).result(), getattr(ref, method)(X), rtol=0, atol=1e-6)
    if hasattr(ref, "labels_"):
        np.testing.assert_array_equal(est.labels_, ref.labels_)


def test_learned_ard_kernel_on_the_cluster_equals_in_memory(dask_in_force):
    """NystroemKernelRidgeCV (ARD RBF, alpha and the centres learned) on a Dask array with the cluster's
    client in force: the learning's two blocked passes read the partitions the workers compute, block
    by block, and learn the hyperparameters and centres of the in-memory fit; the final
    NystroemKernelRidge runs on the workers and predicts as the in-memory one."""
    X, y = _data(800, d=4)
    params = dict(kernel=mercer.kernels.RBF(gamma=[0.2] * 4), n_centers=30, learn_centers=True, max_iter=8,
                  dtype="float64", tol=1e-10, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter=8 stops before convergence, in both fits alike
        ref = mercer.NystroemKernelRidgeCV(**params).fit(X, y)
        est = mercer.NystroemKernelRidgeCV(**params).fit(da.from_array(X, chunks=(190, -1)), da.from_array(y, chunks=190))
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.centers_.numpy(), ref.centers_.numpy(), rtol=1e-10, atol=1e-12)
    assert not np.allclose(est.theta_, np.log(0.2))  # something was learned
    np.testing.assert_allclose(est.predict(X), ref.predict(X), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_worker_killed_mid_fit_gives_the_undisturbed_fit(dask_in_force, monkeypatch):
    """A worker process killed (SIGKILL) after 3 CG iterations: its partitions are recomputed from
    their graph on the other worker (its nanny restarts it) and the fit equals the undisturbed one."""
    X, y = _data(2000, d=4)
    params = dict(_PARAMS, solver="cg", n_centers=100, preconditioner="none", tol=1e-10)
    Xd, yd = da.from_array(X, chunks=(250, -1)), da.from_array(y, chunks=250)
    ref = mercer.NystroemKernelRidge(**params).fit(Xd, yd)
    pids = dask_in_force.run(os.getpid)
    victim = next(iter(pids.values()))
    killed = []

    def factory(t0):
        def cb(it, x, rel):
            if it == 3 and not killed:
                os.kill(victim, signal.SIGKILL)
                killed.append(time.perf_counter())
        return cb

    monkeypatch.setattr(_nystroem._NystroemRidgeBase, "_log_iteration", staticmethod(factory))
    model = mercer.NystroemKernelRidge(**params).fit(Xd, yd)
    assert killed and model.n_iter_[0] > 3
    Xt = _data(200, d=4, seed=6)[0]
    np.testing.assert_array_equal(model.predict(Xt), ref.predict(Xt))  # the same sums in the same order
    dask_in_force.wait_for_workers(2, timeout=60)


class _Interrupt(Exception):
    pass


def _interrupt_at(monkeypatch, k, solve=1):
    """Raise from the CG callback at iteration ``k`` of the ``solve``-th CG run (a crash)."""
    runs = []

    def factory(t0):
        runs.append(t0)

        def cb(it, x, rel):
            if len(runs) == solve and it == k:
                raise _Interrupt
        return cb
    monkeypatch.setattr(_nystroem._NystroemRidgeBase, "_log_iteration", staticmethod(factory))


@pytest.mark.parametrize("alpha, solve", [(1e-1, 1), ([1e-1, 1.0], 2)])
def test_checkpoint_resumes_to_the_uninterrupted_fit(tmp_path, monkeypatch, caplog, alpha, solve):
    X, y = _data(300)
    Y = np.column_stack([y, y ** 2])
    params = dict(_PARAMS, alpha=alpha, solver="cg", tol=1e-10)
    ref = mercer.NystroemKernelRidge(**params).fit(X, Y)
    assert ref.n_iter_.min() > 4
    path = tmp_path / "fit.npz"
    with monkeypatch.context() as m:
        _interrupt_at(m, 4, solve)  # the second case: the first solve (alpha 0.1) done, the second interrupted
        with pytest.raises(_Interrupt):
            mercer.NystroemKernelRidge(**params, checkpoint=path).fit(X, Y)
    assert path.exists()
    with caplog.at_level(logging.INFO, logger="mercer.models.ridge._checkpoint"):
        model = mercer.NystroemKernelRidge(**params, checkpoint=str(path)).fit(X, Y)
    assert f"(solve {solve - 1}, iteration 3)" in caplog.text
    assert not path.exists()  # removed once the fit completes
    np.testing.assert_array_equal(model.n_iter_, ref.n_iter_)
    np.testing.assert_array_equal(model.cg_history_, ref.cg_history_)
    np.testing.assert_array_equal(model.predict(X), ref.predict(X))


def test_checkpoint_of_another_fit_is_ignored(tmp_path, monkeypatch):
    X, y = _data(300)
    params = dict(_PARAMS, solver="cg", tol=1e-10)
    path = tmp_path / "fit.npz"
    with monkeypatch.context() as m:
        _interrupt_at(m, 3)
        with pytest.raises(_Interrupt):
            mercer.NystroemKernelRidge(**params, checkpoint=path).fit(X, y)
    ref = mercer.NystroemKernelRidge(**dict(params, alpha=0.5)).fit(X, y)
    with pytest.warns(UserWarning, match="checkpoint .* of another fit"):
        model = mercer.NystroemKernelRidge(**dict(params, alpha=0.5), checkpoint=path).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), ref.predict(X))


def test_conjugate_gradient_resumes_from_a_saved_state():
    """The generic hook: a state saved after iteration k, resumed, gives the uninterrupted iterates."""
    import copy

    import torch

    from mercer.linalg import conjugate_gradient

    rng = np.random.default_rng(0)
    B = rng.normal(size=(40, 40))
    A = torch.from_numpy(B @ B.T + 0.1 * np.eye(40))
    b = torch.from_numpy(rng.normal(size=(40, 2)))
    states = []
    full = conjugate_gradient(lambda V: A @ V, b, tol=1e-12, max_iter=500,
                              save_state=lambda s: states.append(copy.deepcopy(s)))
    assert full.n_iter > 6 and len(states) == full.n_iter - 1
    resumed = conjugate_gradient(lambda V: A @ V, b, tol=1e-12, max_iter=500, resume=states[5])
    assert resumed.n_iter == full.n_iter
    assert resumed.history == full.history
    torch.testing.assert_close(resumed.x, full.x, rtol=0, atol=0)
