"""Every engine's operator passes one contract (tests/contracts.py::OperatorContract): the in-memory
and streamed KernelOperator, the Dask engine's operator on a LocalCluster, and a toy engine written
in this file (what a new engine needs: an operator, an engine object, one registration)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contracts import OperatorContract
from mercer.linalg import KernelOperator, Statistics, engine_for, register_engine
from mercer.linalg import _engines
from mercer.sources import ArraySource


class TestInMemoryOperator(OperatorContract):
    @staticmethod
    def make(kernel, X, Z):
        return engine_for(X).operator(kernel, torch.as_tensor(np.array(X)), Z, memory_budget=1 << 16)


class TestStreamedOperator(OperatorContract):
    """Rows read from a source block by block (tiny budget: many blocks, several reads)."""

    @staticmethod
    def make(kernel, X, Z):
        source = ArraySource(np.array(X))
        assert engine_for(source) is _engines._ENGINES["local"]
        return engine_for(source).operator(kernel, source, Z, memory_budget=1 << 14)


class TestKeptOperator(OperatorContract):
    """The matrix kept between products (what Nyström CG asks for when it fits)."""

    @staticmethod
    def make(kernel, X, Z):
        op = KernelOperator(kernel, torch.as_tensor(np.array(X)), Z, max_tile_bytes="product", keep_bytes=1 << 30)
        return op


# -- a toy engine: the dense matrix in this process, as a third-party engine would plug in ----------
class ToyOperator:
    """The whole matrix computed once: enough for the contract and for a Nyström fit."""

    def __init__(self, kernel, X, Z):
        self.K = kernel(torch.as_tensor(np.asarray(X.array)), Z.to(torch.float64)).to(Z.dtype)
        self.shift = None
        self.calls = 0

    @property
    def shape(self):
        return tuple(self.K.shape)

    @property
    def dtype(self):
        return self.K.dtype

    def _k(self):
        self.calls += 1
        return self.K if self.shift is None else self.K - torch.as_tensor(self.shift).to(self.K)

    def per_sample(self, u):
        if u is None:
            return None
        u = torch.as_tensor(u).to(self.K.dtype)
        if u.shape[0] != self.shape[0]:
            raise ValueError(f"a per-sample array has {u.shape[0]} rows; X has {self.shape[0]}.")
        return u

    def rmatvec(self, u, *, out_dtype=None):
        return (self._k().T @ torch.as_tensor(u).to(self.K)).to(out_dtype or self.dtype)

    def kt_k_v(self, v, *, weights=None, out_dtype=None):
        K = self._k()
        Kv = K @ torch.as_tensor(v).to(K)
        if weights is not None:
            Kv = Kv * (weights if Kv.ndim == 1 else weights[:, None])
        return (K.T @ Kv).to(out_dtype or self.dtype)

    def kt_k(self, *, weights=None, out_dtype=None):
        K = self._k()
        return (K.T @ (K if weights is None else weights[:, None] * K)).to(out_dtype or self.dtype)

    def statistics(self, U, *, weights=None, n_w=None, centre=False, gram=True):
        U = U if U.ndim == 2 else U[:, None]
        w = torch.ones(self.shape[0], dtype=self.dtype) if weights is None else weights
        n_w = float(w.sum()) if n_w is None else n_w
        self.shift = None
        mean = (self.rmatvec(w) / n_w).to(torch.float64) if centre else None
        self.shift = mean
        return Statistics(self.kt_k(weights=weights, out_dtype=torch.float64) if gram else None,
                          self.rmatvec(U, out_dtype=torch.float64), mean)


class ToySource(ArraySource):
    engine = "toy"


class ToyEngine:
    def applies(self, X):
        return True

    def operator(self, kernel, X, Z, *, memory_budget=None, n_rhs=1, max_tile_bytes=None, keep_bytes=0):
        return ToyOperator(kernel, X, Z)

    def targets(self, y, X, owner):
        return None


@pytest.fixture
def toy_engine():
    register_engine("toy", ToyEngine())
    yield
    _engines._ENGINES.pop("toy", None)


class TestToyEngineOperator(OperatorContract):
    @pytest.fixture(autouse=True)
    def _registered(self, toy_engine):
        yield

    @staticmethod
    def make(kernel, X, Z):
        return engine_for(ToySource(np.array(X))).operator(kernel, ToySource(np.array(X)), Z)


@pytest.mark.parametrize("solver", ["direct", "cg"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_a_new_engine_runs_the_nystroem_fit(toy_engine, solver, fit_intercept):
    """Registered once, chosen by the input: the estimator runs on it without knowing it."""
    import mercer

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = np.sin(X[:, 0]) + 2.0
    kw = dict(gamma=0.3, n_centers=40, alpha=0.5, dtype="float64", solver=solver, tol=1e-12, max_iter=300,
              random_state=0, fit_intercept=fit_intercept)
    ref = mercer.NystroemKernelRidge(**kw).fit(X, y)
    made = []
    original = ToyEngine.operator

    def spy(self, *a, **k):
        made.append(original(self, *a, **k))
        return made[-1]

    ToyEngine.operator = spy
    try:
        toy = mercer.NystroemKernelRidge(**kw).fit(ToySource(X), y)
    finally:
        ToyEngine.operator = original
    assert made and made[-1].calls > 0
    np.testing.assert_allclose(toy.predict(X), ref.predict(X), rtol=1e-8, atol=1e-8)


def test_unknown_engine_is_a_clear_error():
    class Lost(ArraySource):
        engine = "nowhere"

    with pytest.raises(ValueError, match="no execution engine named 'nowhere'"):
        engine_for(Lost(np.zeros((3, 2))))


def test_register_engine_checks_the_engine():
    with pytest.raises(TypeError, match="has no method targets"):
        register_engine("broken", type("Broken", (), {"applies": lambda s, X: True,
                                                      "operator": lambda s, *a, **k: None})())


# -- the Dask engine (dask_client, dask_in_force: conftest.py) ------------------------------------
@pytest.mark.usefixtures("dask_in_force")
class TestDaskOperator(OperatorContract):
    @staticmethod
    def make(kernel, X, Z):
        import dask.array as da

        Xd = da.from_array(np.array(X), chunks=(40, -1))
        engine = engine_for(Xd)
        assert engine is not _engines._ENGINES["local"]
        return engine.operator(kernel, Xd, Z, memory_budget=1 << 20)
