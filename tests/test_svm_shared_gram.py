"""A multi-class KernelSVC / NuSVC fit's machines read their kernel rows from one store
(:class:`mercer.models.svm._dual.SharedRows`): the same model as rows computed per machine (same
iterates: the store holds the float32 values the machines' caches hold), LIBSVM's support set, each
(sample, class) block computed once, and the store only where rows are dense blocked products that
fit the row cache's share of the plan."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import svm
from sklearn.datasets import load_digits, load_wine
from sklearn.preprocessing import StandardScaler

from mercer.models.svm import KernelSVC, NuSVC, _dual


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X[:900])
    return X, y[:900]


@pytest.fixture
def blocked(monkeypatch):
    """RBF rows at 64 features from blocked products (the SMO loop computes them itself otherwise)."""
    monkeypatch.setattr(_dual, "_INLOOP_MAX_FEATURES", 0)


class _Spy:
    """Counts the stores made and the (sample, class) blocks they compute."""

    def __init__(self, monkeypatch):
        self.stores, self.blocks = [], []
        spy = self
        init, fill = _dual.SharedRows.__init__, _dual.SharedRows._fill

        def _init(store, *a, **k):
            init(store, *a, **k)
            spy.stores.append(store)

        def _fill(store, c, g):
            before = store.done[c].sum()
            fill(store, c, g)
            spy.blocks.append((c, int(store.done[c].sum() - before)))

        monkeypatch.setattr(_dual.SharedRows, "__init__", _init)
        monkeypatch.setattr(_dual.SharedRows, "_fill", _fill)


def _fit_both(make, X, y, monkeypatch, **fit):
    monkeypatch.setattr(_dual, "SHARE_ROWS", False)
    own = make().fit(X, y, **fit)
    monkeypatch.setattr(_dual, "SHARE_ROWS", True)
    spy = _Spy(monkeypatch)
    shared = make().fit(X, y, **fit)
    return own, shared, spy


def _same_model(a, b):
    np.testing.assert_array_equal(a.support_, b.support_)
    np.testing.assert_array_equal(a.n_iter_, b.n_iter_)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
    np.testing.assert_array_equal(a.intercept_, b.intercept_)


@pytest.mark.parametrize("solver", ["smo", "batched"])
def test_shared_rows_give_the_per_machine_model_and_libsvm_support(digits, blocked, monkeypatch, solver):
    X, y = digits
    monkeypatch.setattr(_dual, "SOLVER", solver)
    own, shared, spy = _fit_both(lambda: KernelSVC(decision_function_shape="ovo"), X, y, monkeypatch)
    assert len(spy.stores) == 1 and spy.blocks  # one store for the 45 machines, and it was read
    _same_model(own, shared)
    ref = svm.SVC(cache_size=500, decision_function_shape="ovo").fit(X, y)
    np.testing.assert_array_equal(shared.support_, ref.support_)
    np.testing.assert_allclose(shared.decision_function(X), ref.decision_function(X), atol=1e-3)


@pytest.mark.parametrize("fill_all_from", [2.0, 0.0])
def test_blocks_computed_once_and_the_whole_matrix_where_machines_ask_for_most(digits, blocked, monkeypatch,
                                                                                fill_all_from):
    """Block by block (FILL_ALL_FROM above 1: never the whole matrix), each (sample, class) block is
    computed once and only when a machine asks; at once (0: after the first machine), every entry.
    Either way the store holds the kernel and the model is the per-machine rows' model."""
    X, y = digits
    monkeypatch.setattr(_dual, "FILL_ALL_FROM", fill_all_from)
    own, shared, spy = _fit_both(KernelSVC, X, y, monkeypatch)
    _same_model(own, shared)
    store = spy.stores[0]
    counts = np.bincount(y)
    computed = np.zeros(len(counts), dtype=np.int64)
    for c, m in spy.blocks:
        computed[c] += m
    if fill_all_from > 1:
        # the blocks filled add up to what `done` marks (none twice), and the machines asked for less than all
        np.testing.assert_array_equal(computed, store.done.sum(axis=1))
        assert int((store.done * counts[:, None]).sum()) < len(y) ** 2
    else:
        assert store.done.all() and (computed < store.done.sum(axis=1)).all()  # the rest came at once
    # what the store holds is the kernel: its computed entries against a dense reference (float32)
    Xs = X[np.argsort(y, kind="stable")]
    K = np.exp(-(1.0 / (X.shape[1] * X.var())) * ((Xs[:, None, :] - Xs[None, :, :]) ** 2).sum(-1))
    for c in range(len(counts)):
        rows = np.flatnonzero(store.done[c])
        cols = slice(store.start[c], store.start[c + 1])
        np.testing.assert_allclose(store.K[c].numpy()[rows], K[rows, cols], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fill_all_from", [2.0, 0.0])
def test_weights_ovr_and_probability_read_the_store(digits, blocked, monkeypatch, fill_all_from):
    """Machines on part of a class (zero weights), on every sample in the data's order (one-vs-rest)
    and Platt's cross-validation folds gather their columns from the store."""
    X, y = digits
    monkeypatch.setattr(_dual, "FILL_ALL_FROM", fill_all_from)
    sw = np.ones(len(y))
    sw[::7] = 0.0
    sw[1::5] = 2.5
    own, shared, spy = _fit_both(KernelSVC, X, y, monkeypatch, sample_weight=sw)
    assert spy.stores
    _same_model(own, shared)
    own, shared, spy = _fit_both(lambda: KernelSVC(multiclass="ovr"), X[:400], y[:400], monkeypatch)
    assert spy.stores
    _same_model(own, shared)
    with pytest.warns(FutureWarning):
        own, shared, spy = _fit_both(lambda: KernelSVC(probability=True, random_state=0), X[:300], y[:300],
                                     monkeypatch)
    assert spy.stores
    _same_model(own, shared)
    np.testing.assert_array_equal(own._probA, shared._probA)


def test_nusvc_and_other_kernels_share_rows(blocked, monkeypatch):
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    for make in (lambda: NuSVC(nu=0.3), lambda: KernelSVC(kernel="poly", degree=2),
                 lambda: NuSVC(nu=0.2, kernel="sigmoid", gamma=0.01)):
        own, shared, spy = _fit_both(make, X, y, monkeypatch)
        assert spy.stores
        _same_model(own, shared)
        if isinstance(shared, NuSVC) and shared.kernel == "rbf":
            np.testing.assert_array_equal(shared.support_, svm.NuSVC(nu=0.3).fit(X, y).support_)


def test_no_store_where_nothing_is_shared_or_it_does_not_fit(digits, monkeypatch):
    X, y = digits
    spy = _Spy(monkeypatch)
    KernelSVC().fit(X[:300], y[:300])  # RBF at 64 features: the SMO loop computes its rows
    b = y < 5
    KernelSVC(kernel="poly").fit(X[:300], b[:300])  # one machine: nothing to share
    KernelSVC(kernel="poly").fit(sp.csr_matrix(X[:300]), y[:300])  # sparse rows: their compiled path
    K = X[:300] @ X[:300].T
    KernelSVC(kernel="precomputed").fit(K, y[:300])  # a Gram matrix already
    # a store larger than cache_size (MB): each machine computes its own rows
    KernelSVC(kernel="poly", cache_size=300 * 300 * 4 / 2**20 / 2).fit(X[:300], y[:300])
    assert spy.stores == []
    KernelSVC(kernel="poly", cache_size=300 * 300 * 4 / 2**20 * 2).fit(X[:300], y[:300])
    assert len(spy.stores) == 1


def test_non_finite_kernel_from_the_store_is_an_error(monkeypatch):
    X = np.random.default_rng(0).normal(size=(60, 3)) * 1e120
    y = np.arange(60) % 3
    spy = _Spy(monkeypatch)
    with pytest.raises(ValueError, match="non-finite"):
        KernelSVC(kernel="poly", degree=3, gamma=1.0).fit(X, y)
    assert spy.stores and not spy.blocks  # the store's check, before any block is kept


def test_a_cache_size_bounds_the_store_and_the_machines_caches_together(digits, blocked, monkeypatch):
    """With ``cache_size`` given, the store and a machine's own cache share it: the machines' caches
    hold what the store leaves (at least the two rows of a pair), not ``cache_size`` again."""
    X, y = digits
    store_mib = _dual.SharedRows.nbytes(len(y)) / 2**20
    seen = []
    solve = _dual.solve_smo

    def spy(*a, cache_rows, **k):
        seen.append(cache_rows)
        return solve(*a, cache_rows=cache_rows, **k)

    monkeypatch.setattr(_dual, "solve_smo", spy)
    monkeypatch.setattr(_dual, "SOLVER", "smo")
    est = KernelSVC(cache_size=store_mib + 0.1).fit(X, y)  # room for the store and ~0.1 MiB of rows
    capacity = list(seen)
    ref = KernelSVC().fit(X, y)
    assert capacity and max(capacity) <= 0.1 * 2**20 / (4 * 150)  # float32 rows of a machine's 150-190 samples
    assert max(seen[len(capacity):]) > max(capacity)  # the default: every row of a machine
    np.testing.assert_array_equal(est.support_, ref.support_)
