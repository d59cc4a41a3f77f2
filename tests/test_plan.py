"""One execution plan per call: the memory budget is resolved once when a public method starts, and
every budget a call uses derives from it (mercer.linalg._plan)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import mercer
from mercer.linalg import (SHARES, ExecutionPlan, MemoryBudgetError, active_plan, current_plan, default_memory_budget,
                           nystroem_plan, planned_call)
from mercer.linalg import _plan


@pytest.fixture
def free_memory_reads(monkeypatch):
    """Counts the reads of the free memory (each resolution of a budget from it)."""
    calls = []

    def fake(device=None):
        calls.append(device)
        return 8 * 2**30

    monkeypatch.setattr(_plan, "available_memory", fake)
    return calls


def test_resolution_order_and_validation(free_memory_reads):
    assert ExecutionPlan.resolve(12345) == ExecutionPlan(12345, "cpu", "memory_budget")
    with mercer.config_context(memory_budget=777_777):
        assert ExecutionPlan.resolve() == ExecutionPlan(777_777, "cpu", "config_context")
        assert ExecutionPlan.resolve(5000).budget == 5000
    plan = ExecutionPlan.resolve()
    assert plan.origin == "free memory" and plan.budget == int(8 * 2**30 * mercer.get_config().memory_fraction)
    assert free_memory_reads == ["cpu"]
    with pytest.raises(ValueError, match="'memory_budget' parameter of KernelRidge"):
        ExecutionPlan.resolve(-1, owner="KernelRidge")
    with pytest.raises(ValueError, match="'memory_budget' parameter"):
        ExecutionPlan.resolve(1.5)


def test_derived_budgets():
    plan = ExecutionPlan(1000)
    assert plan.share("row cache") == 500 and plan.part("feature rows").budget == 250
    assert plan.holding(300).budget == 700 and plan.holding(2000).budget == 1
    assert plan.holding(2000, floor=64).budget == 64
    with pytest.raises(MemoryBudgetError, match="the widget needs about 1.95 KiB.*buy more"):
        plan.holding(2000, what="the widget", remedy="buy more")
    with pytest.raises(KeyError, match="no share named 'nothing'"):
        plan.share("nothing")
    assert all(0 < f <= 1 for f in SHARES.values())
    assert int(plan) == 1000 and range(10)[: ExecutionPlan(3)] == range(3)


def test_nystroem_plan_splits_the_budget():
    p = nystroem_plan(ExecutionPlan(100 << 20), 30 << 20, direct=False)
    assert p.tiles.budget == 70 << 20 and p.keep_bytes == 35 << 20 and p.max_tile_bytes == "product"
    d = nystroem_plan(ExecutionPlan(100 << 20), 95 << 20, direct=True)
    assert d.tiles.budget == _plan.MIN_WORK_BYTES and d.keep_bytes == 0 and d.max_tile_bytes == _plan.DIRECT_TILE_BYTES
    with pytest.raises(MemoryBudgetError, match="n_centers=5000 needs .* Use fewer centres"):
        nystroem_plan(ExecutionPlan(1 << 20), 2 << 20, direct=True, owner="X", n_centers=5000)


def test_planned_call_is_reentrant_and_scoped():
    owner, other = object(), object()
    assert active_plan(owner) is None
    with planned_call(owner, 4096) as plan:
        assert active_plan(owner) is plan and current_plan() is plan and default_memory_budget() == 4096
        with planned_call(owner, 999) as again:  # the same call (fit_transform -> fit): the same plan
            assert again is plan
        with planned_call(other) as inner:  # an estimator used inside: the outer call's budget
            assert inner.budget == 4096 and active_plan(other) is inner
        assert current_plan(123).budget == 123  # an explicit budget wins
    assert active_plan(owner) is None


def test_plans_are_per_thread():
    owner, seen = object(), {}

    def run(b):
        with planned_call(owner, b):
            seen[b] = default_memory_budget()

    with planned_call(owner, 1 << 20):
        threads = [threading.Thread(target=run, args=(b,)) for b in (5000, 7000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert default_memory_budget() == 1 << 20
    assert seen == {5000: 5000, 7000: 7000}


@pytest.mark.parametrize("make", [
    lambda: mercer.NystroemKernelRidge(gamma=0.2, n_centers=50, solver="cg", random_state=0),
    lambda: mercer.NystroemKernelRidge(gamma=0.2, n_centers=50, solver="direct", centers="kmeans++", random_state=0),
    lambda: mercer.KernelRidge(kernel="rbf", gamma=0.2),
    lambda: mercer.KernelPCA(3, kernel="rbf", eigen_solver="randomized", random_state=0),
    lambda: mercer.RandomFeatureRidge(gamma=0.2, n_components=40, random_state=0),
])
def test_a_call_reads_the_free_memory_once(free_memory_reads, make):
    """The budget of a fit (and of a predict) is resolved once, however many blocks plan against it
    (it used to be read again at each use: ~6 times per Nyström fit)."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(400, 5)), rng.normal(size=400)
    model = make()
    model.fit(X, y)
    assert len(free_memory_reads) == 1
    (model.predict if hasattr(model, "predict") else model.transform)(X)
    assert len(free_memory_reads) == 2


def test_streamed_fit_plans_once(free_memory_reads, tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(500, 4)), rng.normal(size=500)
    np.save(tmp_path / "X.npy", X)
    model = mercer.NystroemKernelRidge(gamma=0.2, n_centers=30, solver="cg", random_state=0).fit(tmp_path / "X.npy", y)
    assert len(free_memory_reads) == 1
    model.predict(tmp_path / "X.npy")
    assert len(free_memory_reads) == 2


def test_predict_honours_the_callers_context():
    """A fitted model plans each call in the context it is called in (not the budget of its fit)."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 4)), rng.normal(size=300)
    model = mercer.KernelRidge(kernel="rbf", gamma=0.2).fit(X, y)
    expected = model.predict(X)
    with mercer.config_context(memory_budget=64):
        assert model._budget == 64
        with pytest.raises(MemoryBudgetError):
            model.predict(X)
    with mercer.config_context(memory_budget=200_000):  # many blocks, the same predictions
        np.testing.assert_allclose(model.predict(X), expected, rtol=1e-12)


@pytest.mark.skipif(_plan._MALLOC_TRIM is None, reason="glibc's malloc_trim only")
def test_a_fit_returns_the_heap_memory_it_freed():
    """Freed heap blocks stay resident under glibc until trimmed: release_freed_memory returns them
    when the process grew by more than what may be kept, and only then (docs/decisions/0004)."""
    if _plan._MALLOC_TRIM is None:
        pytest.skip("glibc's malloc_trim is not available")
    _plan._MALLOC_TRIM(0)  # free heap left by earlier tests would take the blocks without growing the RSS
    since = _plan.resident_bytes()
    blocks = [np.ones(1000) for _ in range(10_000)]  # 80 MB of 8 KB heap blocks
    del blocks[::2]  # half freed, between live ones: no free top of the heap to trim by itself
    grown = _plan.resident_bytes() - since
    assert grown > 60 * 2**20
    assert not _plan.release_freed_memory(since, keep=grown + 2**20)
    before = _plan.resident_bytes()
    assert _plan.release_freed_memory(since, keep=2**20)
    assert before - _plan.resident_bytes() > 15 * 2**20
    del blocks


def test_planned_fit_releases_only_at_the_outermost_call(monkeypatch):
    calls = []
    monkeypatch.setattr(_plan, "release_freed_memory", lambda since, keep=0: calls.append((since, keep)))
    monkeypatch.setattr(_plan, "_MALLOC_TRIM", lambda pad: 0)
    owner, inner = object(), object()
    with _plan.planned_call(owner, 2**30, release=True):
        with _plan.planned_call(inner, 2**20, release=True):
            pass
        assert not calls
    assert len(calls) == 1 and calls[0][1] == int(2**30 * _plan.SHARES["freed and kept"])
    with _plan.planned_call(owner, 2**30):  # a predict
        pass
    assert len(calls) == 1
