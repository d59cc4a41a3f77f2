"""top_eigenpairs: every method against numpy.linalg.eigh on small matrices, real data included."""

import warnings

import numpy as np
import pytest
import threadpoolctl
import torch
from sklearn.datasets import load_digits
from sklearn.metrics.pairwise import rbf_kernel

from mercer.linalg import ConvergenceWarning, EigResult, top_eigenpairs

ITERATIVE = ["power", "lanczos", "randomized"]
METHODS = ["dense", *ITERATIVE]


# -- matrices (numpy float64, read-only) -------------------------------------------------------------

def _frozen(a):
    a = np.ascontiguousarray(a, dtype=np.float64)
    a.setflags(write=False)
    return a


def _with_spectrum(eigenvalues, seed=0):
    n = len(eigenvalues)
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    A = (Q * eigenvalues) @ Q.T
    return _frozen((A + A.T) / 2)


def _centre(K):
    return _frozen(K - K.mean(0) - K.mean(1)[:, None] + K.mean())


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data
    return X[np.random.default_rng(0).choice(len(X), 400, replace=False)]


@pytest.fixture(scope="module")
def matrices(digits):
    """Random PSD, RBF Gram of digits (two bandwidths), and its centred version."""
    return {
        "psd": _with_spectrum(0.85 ** np.arange(300)),
        "digits_rbf": _frozen(rbf_kernel(digits, gamma=1e-3)),
        "digits_rbf_centred": _centre(rbf_kernel(digits, gamma=1e-3)),
        # scikit-learn's default gamma = 1 / n_features: tightly clustered eigenvalues
        "digits_rbf_default_gamma": _frozen(rbf_kernel(digits)),
    }


@pytest.fixture(scope="module", autouse=True)
def _numpy_on_one_thread():
    """The references are small LAPACK calls: on a busy 2-core machine they run much faster on
    one thread than on two (mercer itself already uses one thread at these sizes)."""
    with threadpoolctl.threadpool_limits(1):
        yield


_REFERENCE = {}


def _reference(A, k):
    """numpy.linalg.eigh, computed once per matrix."""
    key = (A.ctypes.data, A.shape)
    if key not in _REFERENCE:
        w, V = np.linalg.eigh(A)
        _REFERENCE[key] = (A, w[::-1], V[:, ::-1])  # A kept alive so that its address stays unique
    _, w, V = _REFERENCE[key]
    return w[:k], V[:, :k]


def _check(res, A, k, *, rtol=1e-8, vec_tol=1e-6):
    w, V = _reference(A, k)
    assert isinstance(res, EigResult)
    assert res.values.shape == (k,) and res.vectors.shape == (A.shape[0], k)
    values, vectors = res.values.double().cpu().numpy(), res.vectors.double().cpu().numpy()
    np.testing.assert_allclose(values, w, rtol=rtol, atol=rtol * abs(w[0]) * 1e-3)
    cos = np.abs(np.sum(vectors * V, axis=0))
    assert cos.min() > 1 - vec_tol, cos
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(k), atol=10 * vec_tol)
    assert res.converged
    assert 0 <= res.residual <= (1e-8 if res.values.dtype == torch.float64 else 1e-4) or res.method == "dense"


# -- accuracy ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["psd", "digits_rbf", "digits_rbf_centred"])
def test_matches_numpy_eigh(matrices, name, method):
    A = matrices[name]
    At = torch.tensor(A)
    res = top_eigenpairs(At, 10, method=method)
    _check(res, A, 10)
    assert res.method == method
    assert torch.equal(At, torch.tensor(A))  # A is not modified
    assert (res.iterations == 0) == (method == "dense")


@pytest.mark.parametrize("method", ["lanczos", "randomized"])
def test_clustered_spectrum(matrices, method):
    """scikit-learn's default RBF bandwidth on digits: eigenvalue ratios up to 0.998."""
    A = matrices["digits_rbf_default_gamma"]
    # subspace iteration converges like (lambda_{b+1} / lambda_k)^t: a wider block here
    _check(top_eigenpairs(torch.tensor(A), 10, method=method, n_oversamples=30), A, 10)


@pytest.mark.parametrize("method", ITERATIVE)
def test_callable_matches_tensor(matrices, method):
    A = matrices["digits_rbf_centred"]
    At = torch.tensor(A)
    shapes = []

    def matvec(V):
        shapes.append(tuple(V.shape))
        return At @ V

    res = top_eigenpairs(matvec, 10, method=method, n=A.shape[0], dtype=torch.float64, device="cpu")
    _check(res, A, 10)
    assert res.iterations == len(shapes)
    if method != "power":  # block methods: every product is a block of k + n_oversamples columns
        assert all(t == 20 for _, t in shapes)
    ref = top_eigenpairs(At, 10, method=method)
    np.testing.assert_allclose(res.values.cpu().numpy(), ref.values.cpu().numpy(), rtol=1e-10)


@pytest.mark.parametrize("block_size", [1, 3, 40])
def test_lanczos_block_size(matrices, block_size):
    A = matrices["digits_rbf_default_gamma"]
    shapes = []

    def matvec(V):
        shapes.append(V.shape[1])
        return torch.tensor(A) @ V

    res = top_eigenpairs(matvec, 10, method="lanczos", block_size=block_size, n=A.shape[0], device="cpu")
    _check(res, A, 10)
    assert set(shapes) == {block_size}


def test_randomized_block_size_at_least_k():
    with pytest.raises(ValueError, match=r"'block_size' parameter of top_eigenpairs must be an int in the range \[5, inf\) or None\. Got 4"):
        top_eigenpairs(torch.eye(10, dtype=torch.float64), 5, method="randomized", block_size=4)


def test_dense_rejects_callable():
    with pytest.raises(ValueError, match="dense.*tensor"):
        top_eigenpairs(lambda V: V, 2, method="dense", n=5)


@pytest.fixture(scope="module")
def repeated():
    """Eigenvalues 5 (x3), 3 (x2), then geometric."""
    spectrum = np.concatenate([[5.0] * 3, [3.0] * 2, 2.0 * 0.7 ** np.arange(295)])
    return spectrum, _with_spectrum(spectrum, seed=1)


@pytest.mark.parametrize("method", METHODS)
def test_repeated_eigenvalues(repeated, method):
    """Each eigenspace is recovered (compared as projectors: its basis is not unique)."""
    spectrum, A = repeated
    res = top_eigenpairs(torch.tensor(A), 6, method=method)
    np.testing.assert_allclose(res.values.cpu().numpy(), spectrum[:6], rtol=1e-8)
    _, V = _reference(A, 6)
    U = res.vectors.cpu().numpy()
    for cluster in (slice(0, 3), slice(3, 5), slice(5, 6)):
        P, P_ref = U[:, cluster] @ U[:, cluster].T, V[:, cluster] @ V[:, cluster].T
        assert np.abs(P - P_ref).max() < 1e-7


@pytest.mark.parametrize("method", METHODS)
def test_low_rank(method):
    """Rank 3, k = 5: three exact pairs, then zeros with any orthonormal completion."""
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((200, 3)) * [3.0, 2.0, 1.0]
    A = _frozen(Z @ Z.T)
    res = top_eigenpairs(torch.tensor(A), 5, method=method)
    w, _ = _reference(A, 5)
    np.testing.assert_allclose(res.values.cpu().numpy(), w, rtol=1e-8, atol=1e-10 * w[0])
    U = res.vectors.cpu().numpy()
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e-8)
    assert np.abs(A @ U - U * res.values.cpu().numpy()).max() < 1e-8 * w[0]
    assert res.converged


@pytest.mark.parametrize("method", METHODS)
def test_one_component(matrices, method):
    A = matrices["digits_rbf_centred"]
    _check(top_eigenpairs(torch.tensor(A), 1, method=method), A, 1)


@pytest.mark.parametrize("method", ["dense", "lanczos", "randomized"])
def test_all_eigenpairs_of_small_matrix(method):
    A = _with_spectrum(np.linspace(1.0, 3.0, 12))
    _check(top_eigenpairs(torch.tensor(A), 12, method=method), A, 12)


def test_indefinite_matrix():
    """Lanczos and dense find the largest eigenvalues; power and randomized (largest magnitude) warn."""
    spectrum = np.concatenate([[3.0, 2.0], np.linspace(-1.0, -10.0, 48)])
    A = torch.tensor(_with_spectrum(spectrum, seed=3))
    for method in ("dense", "lanczos"):
        np.testing.assert_allclose(top_eigenpairs(A, 3, method=method).values.cpu().numpy(), [3.0, 2.0, -1.0], rtol=1e-8)
    for method in ("power", "randomized"):
        with pytest.warns(UserWarning, match="negative eigenvalue"):
            top_eigenpairs(A, 3, method=method)


def test_auto_picks_dense_for_small_and_many_components(matrices):
    A = torch.tensor(matrices["digits_rbf"])
    assert top_eigenpairs(A, 3).method == "dense"
    assert top_eigenpairs(lambda V: A @ V, 3, n=A.shape[0], device="cpu").method == "lanczos"
    big = torch.tensor(_with_spectrum(0.9 ** np.arange(520)))
    assert top_eigenpairs(big, 3).method == "lanczos"
    assert top_eigenpairs(big, 131).method == "dense"


# -- float32, signs, determinism -----------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_float32(matrices, method):
    A = matrices["digits_rbf"]
    res = top_eigenpairs(torch.tensor(A, dtype=torch.float32), 10, method=method)
    assert res.values.dtype == res.vectors.dtype == torch.float32
    w, V = _reference(A, 10)
    np.testing.assert_allclose(res.values.cpu().numpy(), w, rtol=0, atol=2e-4 * w[0])
    cos = np.abs(np.sum(res.vectors.double().cpu().numpy() * V, axis=0))
    assert cos.min() > 1 - 1e-3
    assert res.converged and res.residual <= 1e-4


@pytest.mark.parametrize("method", METHODS)
def test_sign_convention(matrices, method):
    V = top_eigenpairs(torch.tensor(matrices["psd"]), 4, method=method).vectors
    top = V.gather(0, V.abs().argmax(dim=0, keepdim=True))
    assert bool((top > 0).all())


@pytest.mark.parametrize("method", ITERATIVE)
def test_deterministic_given_generator(matrices, method):
    A = torch.tensor(matrices["psd"])
    a = top_eigenpairs(A, 4, method=method, generator=torch.Generator().manual_seed(7))
    b = top_eigenpairs(A, 4, method=method, generator=torch.Generator().manual_seed(7))
    c = top_eigenpairs(A, 4, method=method)
    d = top_eigenpairs(A, 4, method=method)
    assert torch.equal(a.values, b.values) and torch.equal(a.vectors, b.vectors)
    assert torch.equal(c.values, d.values) and torch.equal(c.vectors, d.vectors)
    np.testing.assert_allclose(a.values.cpu().numpy(), c.values.cpu().numpy(), rtol=1e-8)
    np.testing.assert_allclose(a.vectors.cpu().numpy(), c.vectors.cpu().numpy(), atol=1e-6)


# -- non-convergence and bad inputs --------------------------------------------------------------

@pytest.mark.parametrize("method, block_size", [("power", None), ("lanczos", None), ("lanczos", 1),
                                                ("randomized", None)])
def test_warns_and_returns_best_estimate_when_not_converged(matrices, method, block_size):
    A = matrices["digits_rbf_default_gamma"]
    with pytest.warns(ConvergenceWarning, match="did not converge.*relative residual"):
        res = top_eigenpairs(torch.tensor(A), 10, method=method, max_iter=2, block_size=block_size)
    assert res.values.shape == (10,) and res.vectors.shape == (A.shape[0], 10)
    assert not res.converged
    assert res.residual > 1e-8 and np.isfinite(res.residual)
    assert bool(torch.isfinite(res.values).all())
    np.testing.assert_allclose(res.vectors.T @ res.vectors, np.eye(10), atol=1e-8)
    assert issubclass(ConvergenceWarning, UserWarning)


def test_no_warning_when_converged(matrices):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        top_eigenpairs(torch.tensor(matrices["psd"]), 5, method="lanczos")


@pytest.mark.parametrize("k", [0, -1, 11, 2.5, True, None])
def test_bad_n_components(k):
    A = torch.eye(10, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"'n_components'.*\[1, 10\].*Got"):
        top_eigenpairs(A, k)


def test_bad_method_lists_choices():
    with pytest.raises(ValueError, match="'method'.*'auto', 'dense', 'power', 'lanczos', 'randomized'.*'arpack'"):
        top_eigenpairs(torch.eye(4, dtype=torch.float64), 2, method="arpack")


def test_callable_needs_n():
    with pytest.raises(ValueError, match="n="):
        top_eigenpairs(lambda V: V, 2)


@pytest.mark.parametrize("kwargs, match", [
    ({"tol": 0.0}, "'tol'"),
    ({"tol": 2.0}, "'tol'"),
    ({"max_iter": 0}, "'max_iter'"),
    ({"n_oversamples": -1}, "'n_oversamples'"),
    ({"block_size": 0}, "'block_size'"),
    ({"dtype": torch.float32}, "dtype"),
    ({"n": 5}, "n=5"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        top_eigenpairs(torch.eye(4, dtype=torch.float64), 2, **kwargs)


def test_bad_matrices():
    with pytest.raises(ValueError, match="square"):
        top_eigenpairs(torch.zeros(3, 4, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="float32 or float64"):
        top_eigenpairs(torch.eye(3, dtype=torch.int64), 1)
    with pytest.raises(TypeError, match="tensor or a callable"):
        top_eigenpairs(np.eye(3), 1)
    with pytest.raises(TypeError, match="Generator"):
        top_eigenpairs(torch.eye(3, dtype=torch.float64), 1, generator=0)
    A = torch.eye(30, dtype=torch.float64)
    A[3, 3] = float("nan")
    for method in METHODS:
        with pytest.raises(ValueError, match="NaN"):
            top_eigenpairs(A, 2, method=method)
    with pytest.raises(ValueError, match=r"shape \(30, 12\)"):
        top_eigenpairs(lambda V: V[:, :1], 2, n=30, method="lanczos")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", METHODS)
def test_cuda(matrices, method):
    A = matrices["digits_rbf_centred"]
    res = top_eigenpairs(torch.tensor(A, device="cuda"), 10, method=method)
    assert res.values.device.type == res.vectors.device.type == "cuda"
    _check(EigResult(res.values.cpu(), res.vectors.cpu(), res.method, res.iterations, res.converged,
                     res.residual), A, 10)
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = top_eigenpairs(lambda V: torch.tensor(A, device="cuda") @ V, 10, method="lanczos" if method == "dense" else method,
                         n=A.shape[0], device="cuda", generator=gen)
    assert res.vectors.device.type == "cuda" and res.converged
