"""Invariants every mercer kernel must satisfy (shared contract tests, GPyTorch-style).

A kernel's test class inherits :class:`KernelContract` and declares

* ``cases``: a list of ``(kernel, reference)`` pairs, where ``reference(X, Z)`` is an exact
  numpy oracle (scikit-learn, a closed form or a naive loop) returning the ``(n1, n2)`` matrix;
* optionally ``make_data()``: a static method returning ``(X, Z)``, two READ-ONLY float64 arrays
  with the same number of features, valid inputs for every kernel in ``cases``.

Each contract test then runs once per case. Fixtures are read-only numpy arrays, and where a
test needs tensors it wraps the same memory (``torch.as_tensor``), so a kernel that writes into
its input changes the user's array; every test that calls a kernel on user data compares the
data with a private copy afterwards (torch does not honour numpy's ``writeable`` flag).
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

__all__ = [
    "TOL",
    "KernelContract",
    "OperatorContract",
    "assert_close",
    "gaussian_data",
    "readonly",
    "shared_tensor",
]

#: Agreement with an exact reference: absolute for |value| <= 1, relative above.
TOL = 1e-12


def readonly(arr, dtype=np.float64) -> np.ndarray:
    """A private read-only copy of ``arr``."""
    out = np.array(arr, dtype=dtype, copy=True)
    out.flags.writeable = False
    return out


def shared_tensor(arr: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``arr``'s memory (in-place writes to it would reach the user's array)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.as_tensor(arr)


def to_numpy(K) -> np.ndarray:
    return K.detach().cpu().numpy() if isinstance(K, torch.Tensor) else np.asarray(K)


def assert_close(got, expected, tol: float = TOL) -> None:
    """``|got - expected| <= tol * max(1, |expected|)`` elementwise, shapes equal."""
    got, expected = to_numpy(got).astype(np.float64), to_numpy(expected).astype(np.float64)
    assert got.shape == expected.shape, f"shape {got.shape} != expected {expected.shape}"
    if got.size:
        err = np.abs(got - expected) / np.maximum(1.0, np.abs(expected))
        assert err.max() <= tol, f"max scaled error {err.max():.3g} > {tol:g}"


def gaussian_data(n1: int = 13, n2: int = 9, d: int = 4, scale: float = 0.6, seed: int = 0):
    """Two read-only float64 samples from N(0, scale^2 I) with the same number of features."""
    rng = np.random.default_rng(seed)
    return readonly(scale * rng.normal(size=(n1, d))), readonly(scale * rng.normal(size=(n2, d)))


#: (rows, cols) tiles for the block test: whole, interior, 1x1, empty, strided
BLOCKS = [(slice(None), slice(None)), (slice(0, 5), slice(2, 9)), (slice(7, 8), slice(0, 1)),
          (slice(3, 3), slice(None)), (slice(1, None, 2), slice(None, None, 3))]


def _case_id(case) -> str:
    return repr(case[0])


class KernelContract:
    """Base class: subclasses set ``cases`` (and ``make_data``); every test runs per case."""

    cases: list = []
    #: tolerance of the float32 comparison with float64
    rtol32, atol32 = 1e-4, 1e-5

    @staticmethod
    def make_data():
        return gaussian_data()

    def pytest_generate_tests(self, metafunc):
        if "case" in metafunc.fixturenames:
            metafunc.parametrize("case", self.cases, ids=[_case_id(c) for c in self.cases])

    @pytest.fixture
    def data(self):
        return self.make_data()

    # -- exact values ------------------------------------------------------------------------
    def test_matches_reference(self, case, data):
        kernel, reference = case
        X, Z = data
        assert_close(kernel(X, Z), reference(X, Z))
        assert_close(kernel(X), reference(X, X))

    def test_gram_equals_pair_with_itself(self, case, data):
        X, _ = data
        assert_close(case[0](X), case[0](X, X))

    def test_diag_equals_diagonal_of_gram(self, case, data):
        X, _ = data
        assert_close(case[0].diag(X), np.diag(to_numpy(case[0](X))))

    def test_symmetric(self, case, data):
        X, Z = data
        assert_close(case[0](X, Z), to_numpy(case[0](Z, X)).T)

    # -- shapes and dtypes -------------------------------------------------------------------
    def test_shape_and_dtype(self, case, data):
        X, Z = data
        K, d = case[0](X, Z), case[0].diag(X)
        assert isinstance(K, torch.Tensor) and K.shape == (len(X), len(Z)) and K.dtype == torch.float64
        assert isinstance(d, torch.Tensor) and d.shape == (len(X),) and d.dtype == torch.float64

    def test_empty_rows(self, case, data):
        X, Z = data
        empty = readonly(np.zeros((0, X.shape[1])))
        assert case[0](empty, Z).shape == (0, len(Z))
        assert case[0](X, empty).shape == (len(X), 0)
        assert case[0].diag(empty).shape == (0,)

    def test_float32_tensor_gives_float32(self, case, data):
        kernel = case[0]
        X, Z = data
        X32, Z32 = (torch.tensor(A, dtype=torch.float32) for A in (X, Z))
        K32, d32 = kernel(X32, Z32), kernel.diag(X32)
        assert K32.dtype == torch.float32 and d32.dtype == torch.float32
        torch.testing.assert_close(K32.double(), kernel(X, Z), rtol=self.rtol32, atol=self.atol32)
        torch.testing.assert_close(d32.double(), kernel.diag(X), rtol=self.rtol32, atol=self.atol32)

    # -- blocks, pickling, user data ---------------------------------------------------------
    def test_block_is_slice_of_full_matrix(self, case, data):
        X, Z = data
        full = to_numpy(case[0](X, Z))
        for rows, cols in BLOCKS:
            assert_close(case[0].block(shared_tensor(X), shared_tensor(Z), rows, cols), full[rows, cols])

    def test_pickle_roundtrip(self, case, data):
        kernel = case[0]
        X, Z = data
        clone = pickle.loads(pickle.dumps(kernel))
        assert clone == kernel and type(clone) is type(kernel)
        assert torch.equal(clone(X, Z), kernel(X, Z))
        assert torch.equal(clone.diag(X), kernel.diag(X))

    def test_inputs_not_modified(self, case, data):
        kernel = case[0]
        X, Z = data
        X0, Z0 = X.copy(), Z.copy()
        Xt, Zt = shared_tensor(X), shared_tensor(Z)
        kernel(X), kernel(X, Z), kernel.diag(X)
        kernel(Xt), kernel(Xt, Zt), kernel.diag(Xt), kernel.block(Xt, Zt, slice(0, 4), slice(1, 6))
        np.testing.assert_array_equal(X, X0)
        np.testing.assert_array_equal(Z, Z0)

    def test_mismatched_features_raise(self, case, data):
        X, Z = data
        with pytest.raises(ValueError, match="features"):
            case[0](X, Z[:, :-1])

    # -- what the declaration (PARAMS) gives ----------------------------------------------------
    def test_parameters_rebuild_the_kernel(self, case, data):
        """``get_params`` lists the declared parameters; they rebuild an equal kernel, as do
        ``clone`` and ``set_params`` with the same values."""
        from sklearn.base import clone

        from mercer.kernels import Kernel

        kernel = case[0]
        params = kernel.get_params(deep=False)
        if type(kernel)._shallow_params is Kernel._shallow_params:  # (composites name their parts k1, k2, ...)
            assert list(params) == [p.name for p in type(kernel).PARAMS]
        X, Z = data
        for other in (type(kernel)._from_params(params), clone(kernel), clone(kernel).set_params(**params)):
            assert other == kernel and hash(other) == hash(kernel) and other is not kernel
            assert torch.equal(other(X, Z), kernel(X, Z))

    def test_distance_cache_gives_the_same_block(self, case, data):
        """Evaluated with a :class:`~mercer.kernels.DistanceCache` of its inputs (as the learning
        loops do), the kernel gives the block it gives without one."""
        from mercer.kernels import DistanceCache

        kernel = case[0]
        Xt, Zt = (torch.tensor(A) for A in data)
        for cache in (DistanceCache(Xt, Zt), DistanceCache(Xt)):
            args = (Xt, Zt) if cache.X2 is Zt else (Xt,)
            for _ in range(2):  # the second time from the cache
                assert_close(kernel(*args, cache=cache), to_numpy(kernel(*args)), tol=1e-10)


class OperatorContract:
    """Invariants of every :class:`mercer.linalg.ProductOperator` (each engine's operator).

    A test class inherits this and defines ``make(kernel, X, Z)``, which returns the operator of
    ``K = kernel(X, Z)`` on its engine (``X``: a read-only float64 numpy array, ``Z``: a float64
    tensor). Every product is checked against the dense float64 matrix, with and without weights,
    with and without the intercept's column shift, so an engine cannot differ from the others.
    """

    tol = 1e-10

    @staticmethod
    def make(kernel, X, Z):  # pragma: no cover - each engine's class defines it
        raise NotImplementedError

    @pytest.fixture
    def problem(self):
        from mercer.kernels import RBF

        rng = np.random.default_rng(0)
        X = readonly(rng.normal(size=(157, 3)))
        Z = torch.as_tensor(rng.normal(size=(11, 3)))
        kernel = RBF(gamma=0.4)
        K = kernel(torch.as_tensor(np.array(X)), Z).numpy()
        w = rng.uniform(0.2, 2.0, size=157)
        return kernel, X, Z, K, w, rng

    @staticmethod
    def _np(a) -> np.ndarray:
        if hasattr(a, "compute"):
            a = a.compute()
        return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)

    def test_is_a_product_operator(self, problem):
        from mercer.linalg import ProductOperator

        kernel, X, Z, K, *_ = problem
        op = self.make(kernel, X, Z)
        assert isinstance(op, ProductOperator)
        assert tuple(op.shape) == K.shape and op.dtype == torch.float64 and op.shift is None

    def test_per_sample_keeps_values(self, problem):
        kernel, X, Z, K, w, _ = problem
        op = self.make(kernel, X, Z)
        assert op.per_sample(None) is None
        np.testing.assert_array_equal(self._np(op.per_sample(w)), w)
        with pytest.raises(ValueError):
            op.per_sample(w[:-1])

    @pytest.mark.parametrize("shifted", [False, True])
    def test_products_equal_dense(self, problem, shifted):
        kernel, X, Z, K, w, rng = problem
        op = self.make(kernel, X, Z)
        if shifted:
            s = rng.normal(size=K.shape[1])
            op.shift = torch.as_tensor(s)
            K = K - s
        u, v = rng.normal(size=(K.shape[0], 2)), rng.normal(size=(K.shape[1], 2))
        assert_close(self._np(op.rmatvec(op.per_sample(u))), K.T @ u, self.tol)
        assert_close(self._np(op.rmatvec(op.per_sample(u[:, 0]))), K.T @ u[:, 0], self.tol)
        assert_close(self._np(op.kt_k_v(torch.as_tensor(v))), K.T @ (K @ v), self.tol)
        assert_close(self._np(op.kt_k_v(torch.as_tensor(v[:, 0]), weights=op.per_sample(w))),
                     K.T @ (w * (K @ v[:, 0])), self.tol)
        assert_close(self._np(op.kt_k()), K.T @ K, self.tol)
        assert_close(self._np(op.kt_k(weights=op.per_sample(w), out_dtype=torch.float64)), K.T @ (w[:, None] * K),
                     self.tol)

    @pytest.mark.parametrize("weighted", [False, True])
    @pytest.mark.parametrize("centre", [False, True])
    @pytest.mark.parametrize("gram", [False, True])
    def test_statistics_equal_dense(self, problem, weighted, centre, gram):
        kernel, X, Z, K, w, rng = problem
        w = w if weighted else np.ones(K.shape[0])
        y = rng.normal(size=(K.shape[0], 2)) + 5.0
        n_w = w.sum()
        y_c = y - w @ y / n_w
        op = self.make(kernel, X, Z)
        U = op.per_sample(w[:, None] * y_c)
        st = op.statistics(U, weights=op.per_sample(w) if weighted else None, n_w=float(n_w), centre=centre,
                           gram=gram)
        k_mean = w @ K / n_w
        Kc = K - k_mean if centre else K
        assert_close(self._np(st.rhs), Kc.T @ (w[:, None] * y_c), self.tol)
        if centre:
            assert_close(self._np(st.col_mean), k_mean, self.tol)
        else:
            assert st.col_mean is None
        if gram:
            assert_close(self._np(st.gram), Kc.T @ (w[:, None] * Kc), self.tol)
        else:
            assert st.gram is None
        if centre:  # later products are those of the centred columns (to the tiles' rounding)
            op.shift = st.col_mean
            v = rng.normal(size=K.shape[1])
            assert_close(self._np(op.kt_k_v(torch.as_tensor(v))), Kc.T @ (Kc @ v), 1e-8)

    def test_inputs_not_modified(self, problem):
        kernel, X, Z, K, w, rng = problem
        Z0, w0 = Z.clone(), w.copy()
        op = self.make(kernel, X, Z)
        op.statistics(op.per_sample(w[:, None]), weights=op.per_sample(w), centre=True)
        op.kt_k_v(torch.ones(K.shape[1], dtype=torch.float64), weights=op.per_sample(w))
        assert torch.equal(Z, Z0) and np.array_equal(w, w0)
