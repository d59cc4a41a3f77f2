"""Top-k eigenpairs of a symmetric matrix or operator: dense, power, block Lanczos, randomized.

``top_eigenpairs(A, k)`` returns the ``k`` largest eigenvalues ``lambda_1 >= ... >= lambda_k`` of a
symmetric ``A`` and orthonormal eigenvectors ``V`` (``A V = V diag(lambda)``), together with what
the solver did (iterations, residual, converged). ``A`` is a dense tensor or a callable
``matvec(V) -> A @ V`` over blocks ``V`` of shape ``(n, t)``; the iterative methods only ever call
it on blocks, so a blocked kernel product (:class:`KernelOperator`) pays one pass over the kernel
per block, not per vector.

Accuracy is judged by the relative residual ``max_j ||A v_j - lambda_j v_j|| / max_j |lambda_j|``,
computed from products the solver already has (``"power"``: one block product at the end), and
reported in every result.

No gradient flows through the result (the solvers run under ``torch.no_grad``). Memory beyond
``A``: ``"lanczos"`` keeps ``2 * max(8 b, 3 k + 3 b, 40)`` vectors of length ``n`` (the basis and
its products, ``b = block_size``), ``"randomized"`` about ``4 b``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from .._backend import num_threads as _num_threads
from .._backend import resolve_device, resolve_dtype
from .._validation import Interval, Options, check_param, describe
from ._blocking import EIGH_WORKER_MIN_N

__all__ = ["EigResult", "auto_method", "eigh", "top_eigenpairs", "nystrom_start", "ConvergenceWarning"]

METHODS = ("auto", "dense", "power", "lanczos", "randomized")
_OWNER = "top_eigenpairs"

#: ``method="auto"`` decomposes a dense tensor with LAPACK up to this size (or when more than a
#: quarter of the spectrum is asked for); above it block Lanczos is faster (centred RBF Gram,
#: k = 10, 2 cores: n = 500 dense 19 ms, lanczos 23 ms; n = 1000 dense 76 ms, lanczos 40 ms;
#: n = 2000 406 ms vs 82 ms; n = 5000 8.6 s vs 0.43 s). Decision record:
#: docs/decisions/0001-eigensolver-auto-dense-crossover.md; probe: benchmarks/probes/probe_auto_dense_max_n.py.
AUTO_DENSE_MAX_N = 500

#: Up to this size a dense ``A`` is handled on one thread (LAPACK for ``"dense"``, the products
#: of the iterative methods): a small multi-threaded op on a shared CPU can wait scheduler slices
#: for its second thread (eigh of 400 x 400: 10 ms on one thread, 20-260 ms on two while another
#: process was busy), and on an idle CPU the second thread saves little at this size.
DENSE_SERIAL_MAX_N = 1000

#: Default ``max_iter``: power iterations per eigenpair, subspace iterations; Lanczos: block steps
#: (``max(300, 3000 // block_size)``, so that single-vector Lanczos may build 3000 vectors).
DEFAULT_MAX_ITER = {"power": 10_000, "randomized": 1000}


@dataclasses.dataclass(frozen=True)
class EigResult:
    """Top eigenpairs of a symmetric matrix and what the solver did.

    Attributes
    ----------
    values : tensor of shape (k,)
        Eigenvalues, descending.
    vectors : tensor of shape (n, k)
        Orthonormal eigenvectors, column ``j`` for ``values[j]``; each column's entry of largest
        magnitude is positive.
    method : str
        The method that ran (``"auto"`` resolved).
    iterations : int
        Products with ``A`` (block matvec calls; 0 for ``"dense"``).
    converged : bool
        Whether the tolerance was met (always true for ``"dense"``).
    residual : float
        ``max_j ||A v_j - lambda_j v_j|| / max(max_j |lambda_j|, tiny)``.
    """

    values: torch.Tensor
    vectors: torch.Tensor
    method: str
    iterations: int
    converged: bool
    residual: float


class _Operator:
    """``V -> A @ V`` with shape checks and a call counter."""

    def __init__(self, A, n: int, dtype: torch.dtype, device: torch.device):
        self.dense = A if isinstance(A, torch.Tensor) else None
        self._fn = A
        self.n, self.dtype, self.device = n, dtype, device
        self.calls = 0
        # Products with A run on the caller's threads, except for a small dense A (see _dense).
        small = self.dense is not None and device.type == "cpu" and n <= DENSE_SERIAL_MAX_N
        self.threads = 1 if small else torch.get_num_threads()

    def __call__(self, V: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        with _num_threads(self.threads):
            if self.dense is not None:
                # (V^T A)^T = A V for symmetric A, with V^T contiguous: the GEMM layout that runs
                # fastest for a tall-skinny V (2-3x over A @ V with MKL on 2 cores, measured).
                Y = (V.mT.contiguous() @ self.dense).mT
            else:
                Y = self._fn(V)
        if self.dense is None:
            if not isinstance(Y, torch.Tensor) or tuple(Y.shape) != tuple(V.shape):
                raise ValueError(f"top_eigenpairs: matvec(V) must return a tensor of shape "
                                 f"{tuple(V.shape)} (A @ V); got {describe(Y)}.")
            Y = Y.to(device=self.device, dtype=self.dtype)
        if not bool(torch.isfinite(Y).all()):
            raise ValueError("top_eigenpairs: A @ V contains NaN or infinity; A must be finite.")
        return Y

    def random(self, t: int, generator: torch.Generator) -> torch.Tensor:
        """``t`` Gaussian columns drawn on the generator's device, then moved to the operator's."""
        Z = torch.randn(self.n, t, generator=generator, dtype=self.dtype, device=generator.device)
        return Z.to(self.device)

    def initial(self, t: int, start: torch.Tensor | None, generator: torch.Generator) -> torch.Tensor:
        """A starting block of ``t`` columns: the first columns of ``start``, then random ones."""
        if start is None or start.shape[1] == 0:
            return self.random(t, generator)
        S = start[:, :t].to(device=self.device, dtype=self.dtype)
        return S if S.shape[1] == t else torch.cat([S, self.random(t - S.shape[1], generator)], dim=1)


# -- public entry point ------------------------------------------------------------------------

def top_eigenpairs(A, n_components: int, *, method: str = "auto", tol: float | None = None,
                   max_iter: int | None = None, generator: torch.Generator | None = None,
                   n_oversamples: int = 10, block_size: int | None = None, n: int | None = None,
                   dtype=None, device=None, start: torch.Tensor | None = None) -> EigResult:
    """The ``n_components`` largest eigenvalues of a symmetric ``A`` and their eigenvectors.

    Parameters
    ----------
    A : tensor of shape (n, n), or callable
        A symmetric matrix (only its lower triangle is read by ``"dense"``), or a symmetric
        operator ``matvec(V) -> A @ V`` for ``V`` of shape ``(n, t)``; a callable needs ``n``
        (and takes ``dtype``, default float64, and ``device``, default the configured one).
    n_components : int
        Number ``k`` of eigenpairs, ``1 <= k <= n``.
    method : {"auto", "dense", "power", "lanczos", "randomized"}
        * ``"dense"``: LAPACK on the whole matrix (tensor only), O(n^3).
        * ``"power"``: power iteration on ``A - sum_i lambda_i v_i v_i^T`` (deflation, "peeling"),
          one vector at a time; simple, but as slow as the eigengaps are small.
        * ``"lanczos"``: block Lanczos with full re-orthogonalisation, Rayleigh-Ritz and thick
          restarts. It resolves eigenvalues repeated up to ``block_size`` times.
          ``block_size=1`` is single-vector Lanczos: the fewest products with ``A`` (each a
          matrix-vector product), blind to repeated eigenvalues, like ARPACK.
        * ``"randomized"``: randomized subspace iteration (Halko, Martinsson & Tropp 2011) on
          ``k + n_oversamples`` columns, QR each iteration, Rayleigh-Ritz.
        * ``"auto"``: ``"dense"`` for a tensor with ``n <= 500`` or ``k > n / 4``, else
          ``"lanczos"`` (measured: see ``AUTO_DENSE_MAX_N``; randomized needs more products,
          10 times more on clustered spectra).

        ``"power"`` and ``"randomized"`` converge to the eigenvalues largest in *magnitude*; for a
        positive semi-definite ``A`` (every kernel matrix) those are the largest ones.
    tol : float, optional
        Relative residual to reach, ``||A v - lambda v|| <= tol * |lambda_1|`` for every pair
        (``"power"`` and ``"randomized"`` also wait for the eigenvalues to settle to ``tol``
        relative). Default ``1e-8`` in float64 and ``1e-4`` in float32.
    max_iter : int, optional
        ``"power"``: iterations per eigenpair (default 10 000); ``"lanczos"``: block steps
        (default ``max(300, 3000 // block_size)``); ``"randomized"``: subspace iterations
        (default 1000). When reached, a :class:`ConvergenceWarning` gives the residual and the
        best estimate is returned with ``converged=False``.
    generator : torch.Generator, optional
        Source of the random start; the default is a generator seeded with 0, so results are
        deterministic either way.
    n_oversamples : int
        Extra columns of the block methods.
    block_size : int, optional
        Columns of each product with ``A`` in ``"lanczos"`` (any ``>= 1``) and ``"randomized"``
        (``>= k``); default ``k + n_oversamples`` (at most ``n``). Ignored by the other methods.
    n, dtype, device
        Size, dtype (float32 or float64) and device of a callable ``A``; for a tensor they
        default to (and must agree with) the tensor's.
    start : tensor of shape (n, t), optional
        Starting directions, e.g. approximate eigenvectors from :func:`nystrom_start`: the first
        block of ``"lanczos"`` and ``"randomized"`` is made of its first columns (random ones
        complete it when ``t < block_size``); ``"power"`` starts pair ``j`` from column ``j``
        when there is one. Ignored by ``"dense"``. A good start saves products with ``A``; the
        result is the same to the tolerance either way.

    Returns
    -------
    EigResult
        No gradient flows through it; see the module docstring for the memory each method keeps.
    """
    with torch.no_grad():
        return _solve(A, n_components, method, tol, max_iter, generator, n_oversamples, block_size, n, dtype, device,
                      start)


def _solve(A, n_components, method, tol, max_iter, generator, n_oversamples, block_size, n, dtype, device,
           start) -> EigResult:
    op = _as_operator(A, n, dtype, device)
    k = _check_params(op.n, n_components, method, tol, max_iter, generator, n_oversamples, block_size)
    _check_start(start, op.n)
    if method == "auto":
        method = auto_method(op.n, k, op.dense is not None)
    if method == "dense" and op.dense is None:
        raise ValueError("top_eigenpairs: method='dense' needs A as a tensor; got a callable. "
                         "Use method='lanczos' or 'randomized' for an operator.")
    if tol is None:
        tol = 1e-4 if op.dtype == torch.float32 else 1e-8
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    if method == "dense":
        return _finish(*_dense(op, k), method, 0, True, tol, None)
    block = min(op.n, k + n_oversamples if block_size is None else block_size)
    if max_iter is None:
        max_iter = max(300, 3000 // block) if method == "lanczos" else DEFAULT_MAX_ITER[method]
    with _num_threads(1 if op.device.type == "cpu" else None):
        if method == "power":
            values, vectors, res, ok = _power(op, k, tol, max_iter, generator, start)
        else:
            solver = _lanczos if method == "lanczos" else _randomized
            values, vectors, res, ok = solver(op, k, block, tol, max_iter, generator, start)
        if method != "lanczos" and float(values.min()) < -tol * _scale(values):
            warnings.warn(
                f"top_eigenpairs(method={method!r}): A has a negative eigenvalue "
                f"({float(values.min()):.3g}), so it is not positive semi-definite; this method finds "
                "the eigenvalues largest in magnitude, which may not be the largest ones. Use "
                "method='lanczos' or 'dense' for an indefinite matrix.", UserWarning, stacklevel=3)
        return _finish(values, vectors, res, method, op.calls, ok, tol, max_iter)


# -- validation ----------------------------------------------------------------------------------

def _as_operator(A, n, dtype, device) -> _Operator:
    if isinstance(A, torch.Tensor):
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"The 'A' parameter of {_OWNER} must be a square matrix. Got a tensor of shape "
                             f"{tuple(A.shape)} instead.")
        if A.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"The 'A' parameter of {_OWNER} must have dtype float32 or float64. Got {A.dtype} instead.")
        for name, given, actual in (("n", n, A.shape[0]), ("dtype", dtype, A.dtype), ("device", device, A.device)):
            if given is not None and _normalise(name, given) != actual:
                raise ValueError(f"The {name!r} parameter of {_OWNER} must be None or agree with the tensor A "
                                 f"({name} {actual}). Got {name}={given!r} instead.")
        return _Operator(A, A.shape[0], A.dtype, A.device)
    if not callable(A):
        raise TypeError(f"The 'A' parameter of {_OWNER} must be a torch tensor or a callable V -> A @ V. "
                        f"Got {describe(A)} instead.")
    if n is None:
        raise ValueError(f"The 'n' parameter of {_OWNER} must be given for a callable A: pass n= (and dtype=, "
                         "device=). Got None instead.")
    check_param(_OWNER, "n", n, [Interval(Integral, 0, None, closed="left")])
    return _Operator(A, int(n), resolve_dtype(dtype if dtype is not None else torch.float64), resolve_device(device))


def _check_start(start, n: int) -> None:
    if start is None:
        return
    if not isinstance(start, torch.Tensor) or start.ndim != 2 or start.shape[0] != n:
        raise ValueError(f"The 'start' parameter of {_OWNER} must be None or a tensor of shape ({n}, t) (n rows, "
                         f"like A). Got {describe(start)} instead.")
    if not bool(torch.isfinite(start).all()):
        raise ValueError(f"The 'start' parameter of {_OWNER} must be finite. Got a tensor with NaN or infinity "
                         "instead.")


def _normalise(name, value):
    if name == "dtype":
        return resolve_dtype(value)
    if name == "device":
        dev = torch.device(value)
        return torch.device(dev.type, 0) if dev.type == "cuda" and dev.index is None else dev
    return value


def _check_params(n, k, method, tol, max_iter, generator, n_oversamples, block_size) -> int:
    """The parameters of :func:`top_eigenpairs`, in the one message style (``n``: the size of ``A``)."""
    check_param(_OWNER, "n_components", k, [Interval(Integral, 1, n, closed="both")])
    check_param(_OWNER, "method", method, [Options(*METHODS)])
    check_param(_OWNER, "tol", tol, [Interval(Real, 0, 1, closed="neither"), None])
    check_param(_OWNER, "max_iter", max_iter, [Interval(Integral, 1, None, closed="left"), None])
    check_param(_OWNER, "n_oversamples", n_oversamples, [Interval(Integral, 0, None, closed="left")])
    # randomized subspace iteration needs a block of at least k columns
    low_block = k if method == "randomized" else 1
    check_param(_OWNER, "block_size", block_size, [Interval(Integral, low_block, None, closed="left"), None])
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"The 'generator' parameter of {_OWNER} must be an instance of 'torch.Generator' or None. "
                        f"Got {describe(generator)} instead.")
    return int(k)


# -- shared pieces -------------------------------------------------------------------------------

def _scale(values: torch.Tensor) -> float:
    """The denominator of relative residuals: the largest ``|lambda|`` (at least ``tiny``)."""
    return max(float(values.abs().max()) if values.numel() else 0.0, torch.finfo(values.dtype).tiny)


def _fix_signs(V: torch.Tensor) -> torch.Tensor:
    """Flip columns so that each one's entry of largest magnitude is positive."""
    idx = V.abs().argmax(dim=0, keepdim=True)
    signs = torch.sign(torch.gather(V, 0, idx))
    return V * torch.where(signs == 0, torch.ones_like(signs), signs)


def _finish(values, vectors, residuals, method, iterations, converged, tol, max_iter) -> EigResult:
    """Sort, fix signs, turn the residual norms into the relative residual, warn if not converged."""
    order = torch.argsort(values, descending=True)
    values, vectors = values[order], vectors[:, order]
    residual = float(residuals.max()) / _scale(values) if residuals.numel() else 0.0
    if not converged:
        warnings.warn(
            f"top_eigenpairs(method={method!r}) did not converge in max_iter={max_iter} ({iterations} "
            f"products with A): relative residual {residual:.2e}, tol {tol:.1e}. Returning the best "
            "estimate (converged=False); raise max_iter or tol, or use another method.",
            ConvergenceWarning, stacklevel=4,
        )
    return EigResult(values, _fix_signs(vectors), method, iterations, bool(converged), residual)


def _eigh_desc(H: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` eigenpairs of a small symmetric matrix, descending (computed in float64)."""
    w, S = torch.linalg.eigh(((H + H.mT) / 2).to(torch.float64))
    w, S = w.flip(0)[:k], S.flip(1)[:, :k]
    return w.to(H.dtype), S.to(H.dtype)


def _settled(new: torch.Tensor, old: torch.Tensor | None, tol: float, scale: float) -> bool:
    """Eigenvalue estimates changed by at most ``tol`` relative (round-off level near zero)."""
    if old is None:
        return False
    atol = 100 * torch.finfo(new.dtype).eps * scale
    return bool(((new - old).abs() <= tol * new.abs() + atol).all())


def _orthonormalize(W: torch.Tensor, Q: torch.Tensor, op: _Operator, gen: torch.Generator) -> torch.Tensor:
    """Orthonormal basis of the part of ``W`` orthogonal to the orthonormal columns of ``Q``.

    Classical Gram-Schmidt twice, then QR. When a column lost most of its norm (``W`` was nearly
    in ``span(Q)``, or its columns nearly dependent), QR's output is checked with one more pass:
    a column that loses half its norm there was round-off and is replaced by a random direction.
    """
    def project(X):
        return X - Q @ (Q.mT @ X) if Q.shape[1] else X

    norms = W.norm(dim=0)
    V, R = torch.linalg.qr(project(project(W)))
    if bool((R.diagonal().abs() > 1e-3 * norms).all()):
        return V
    for _ in range(5):
        V, R = torch.linalg.qr(project(V))
        bad = R.diagonal().abs() < 0.5
        if not bool(bad.any()):
            return V
        Z = op.random(int(bad.sum()), gen)
        V = V.clone()
        V[:, bad] = Z / Z.norm(dim=0)
    raise RuntimeError("top_eigenpairs: could not extend the orthonormal basis (is n_components <= n?).")


# -- methods ---------------------------------------------------------------------------------------

def _dense(op: _Operator, k: int):
    if op.device.type == "cpu" and op.n <= DENSE_SERIAL_MAX_N:
        with _num_threads(1, blas=True):
            return _dense_eigh(op.dense, k)
    return _dense_eigh(op.dense, k)


_SYEVR: dict = {}


def _syevr(dtype):
    """SciPy's LAPACK ``?syevr`` (the routine of ``scipy.linalg.eigh(driver="evr")``) as a ctypes
    function: ctypes releases the GIL during the call, SciPy's own wrapper holds it throughout (so a
    worker thread running it would keep Ctrl-C waiting)."""
    name = "dsyevr" if dtype == np.float64 else "ssyevr"
    if name not in _SYEVR:
        from scipy.linalg import cython_lapack

        capsule = cython_lapack.__pyx_capi__[name]
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        _SYEVR[name] = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 21)(get_pointer(capsule, get_name(capsule)))
    return _SYEVR[name]


def _syevr_top(A: np.ndarray, k: int):
    """The ``k`` largest eigenpairs (ascending) of the symmetric C-ordered ``A`` (float32 or float64)
    from its lower triangle, by LAPACK's ``?syevr`` on a copy -- the call ``scipy.linalg.eigh(A.T,
    lower=False, subset_by_index=[n - k, n - 1], driver="evr")`` makes (workspace query, ``abstol = 0``),
    same results, but with the GIL released."""
    n = A.shape[0]
    dt = A.dtype
    a = np.array(A, dtype=dt, order="C", copy=True)  # Fortran reads it as A^T: its upper triangle is A's lower
    real = ctypes.c_double if dt == np.float64 else ctypes.c_float
    ints = [ctypes.c_int(v) for v in (n, n, n - k + 1, n, 0, n, 0, 0, 0)]
    N, lda, il, iu, m, ldz, lwork, liwork, info = ints
    vl, vu, abstol = real(0), real(0), real(0)
    w = np.empty(n, dtype=dt)
    z = np.empty((max(k, 1), n), dtype=dt)  # Fortran's n x k, column-major
    isuppz = np.empty(2 * max(k, 1), dtype=np.int32)
    f = _syevr(dt)

    def call(work, iwork):
        ref = ctypes.byref
        f(b"V", b"I", b"U", ref(N), a.ctypes.data, ref(lda), ref(vl), ref(vu), ref(il), ref(iu), ref(abstol),
          ref(m), w.ctypes.data, z.ctypes.data, ref(ldz), isuppz.ctypes.data, work.ctypes.data, ref(lwork),
          iwork.ctypes.data, ref(liwork), ref(info))
        if info.value:
            raise np.linalg.LinAlgError(f"top_eigenpairs: LAPACK ?syevr failed (info={info.value}).")

    work, iwork = np.empty(1, dtype=dt), np.empty(1, dtype=np.int32)
    lwork.value, liwork.value = -1, -1
    call(work, iwork)  # workspace query
    lwork.value, liwork.value = int(work[0]), int(iwork[0])
    call(np.empty(max(1, lwork.value), dtype=dt), np.empty(max(1, liwork.value), dtype=np.int32))
    return w[:m.value], z[:m.value].T


def eigh(A: torch.Tensor, desc: str = "eigendecomposition"):
    """``torch.linalg.eigh(A)``, run on the CPU from :data:`~mercer.linalg._blocking.EIGH_WORKER_MIN_N`
    rows in a worker thread while this one listens for Ctrl-C (``mercer.linalg._factor._interruptible``):
    same call, same result."""
    from ._factor import _interruptible

    return _interruptible(lambda: torch.linalg.eigh(A), A, desc, min_n=EIGH_WORKER_MIN_N)


def _dense_eigh(A: torch.Tensor, k: int):
    n = A.shape[0]
    if not bool(torch.isfinite(A).all()):  # O(n^2) next to LAPACK's O(n^3)
        raise ValueError("top_eigenpairs: A contains NaN or infinity; A must be finite.")
    if A.device.type == "cpu":
        # LAPACK's syevr for the top k only: no back-transformation of the other n - k vectors; in a
        # worker thread for large A, so that Ctrl-C is heard (mercer.linalg._factor._interruptible).
        An = A.detach().numpy()
        from ._factor import _interruptible

        w, V = _interruptible(lambda: _syevr_top(An, k), A, "eigendecomposition", min_n=EIGH_WORKER_MIN_N)
        w, V = torch.from_numpy(w[::-1].copy()), torch.from_numpy(V[:, ::-1].copy())  # copies: positive strides
    else:
        w, V = torch.linalg.eigh(A)
        w, V = w.flip(0)[:k], V.flip(1)[:, :k].contiguous()
    residuals = (A @ V - V * w).norm(dim=0)
    return w, V, residuals


def _power(op: _Operator, k: int, tol: float, max_iter: int, gen: torch.Generator, start=None):
    """Power iteration with deflation: pair ``j`` is the dominant pair of ``A - sum_{i<j} lambda_i v_i v_i^T``.

    The iterate is also kept orthogonal to the pairs found, so its residual is measured after
    that projection: the error left in the found vectors (up to ``tol``) would otherwise put a
    floor under the next pair's residual. Each pair goes to ``tol / (2 sqrt(k))``, so that the
    residuals with ``A`` itself, computed at the end with one block product, stay within ``tol``.
    """
    V = torch.zeros(op.n, k, dtype=op.dtype, device=op.device)
    values = torch.zeros(k, dtype=op.dtype, device=op.device)
    inner_tol = tol / (2 * k ** 0.5)
    all_ok, scale = True, None
    for j in range(k):
        Vj, lj = V[:, :j], values[:j]
        first = start[:, j:j + 1] if start is not None and j < start.shape[1] else None
        v = _orthonormalize(op.initial(1, first, gen), Vj, op, gen)
        lam_old, ok = None, False
        for _ in range(max_iter):
            w = op(v) - Vj @ (lj[:, None] * (Vj.mT @ v))  # (A - sum_i lambda_i v_i v_i^T) v
            lam = (v.mT @ w).reshape(())
            pw = w - Vj @ (Vj.mT @ w)  # kept orthogonal to the found vectors
            scale_j = scale if scale is not None else max(abs(float(lam)), torch.finfo(op.dtype).tiny)
            ok = float((pw - lam * v).norm()) <= inner_tol * scale_j and _settled(lam[None], lam_old, tol, scale_j)
            V[:, j:j + 1], values[j], lam_old = v, lam, lam[None]
            if ok:
                break
            norm = float(pw.norm())
            v = pw / norm if norm > 0.5 * float(w.norm()) else _orthonormalize(w, Vj, op, gen)
        scale = scale if scale is not None else scale_j
        all_ok = all_ok and ok
    residuals = (op(V) - V * values).norm(dim=0)  # with A itself, not the deflated operator
    all_ok = all_ok and float(residuals.max()) <= tol * _scale(values)
    return values, V, residuals, all_ok


def _randomized(op: _Operator, k: int, block: int, tol: float, max_iter: int, gen: torch.Generator, start=None):
    """Subspace iteration ``Q <- qr(A Q)`` on ``block`` columns, Rayleigh-Ritz every iteration."""
    none = torch.zeros(op.n, 0, dtype=op.dtype, device=op.device)
    Q = _orthonormalize(op.initial(block, start, gen), none, op, gen)
    old = None
    for _ in range(max_iter):
        Y = op(Q)
        theta, S = _eigh_desc(Q.mT @ Y, block)
        # Ritz vectors and their products (no extra pass over A): U = Q S, A U = Y S.
        U, AU = Q @ S, Y @ S
        res = (AU[:, :k] - U[:, :k] * theta[:k]).norm(dim=0)
        scale = _scale(theta[:k])
        if float(res.max()) <= tol * scale and _settled(theta[:k], old, tol, scale):
            return theta[:k], U[:, :k], res, True
        old = theta[:k]
        Q, _ = torch.linalg.qr(AU)
    return theta[:k], U[:, :k], res, False


def _lanczos(op: _Operator, k: int, block: int, tol: float, max_iter: int, gen: torch.Generator, start=None,
             max_basis: int | None = None):
    """Block Lanczos with full re-orthogonalisation, Rayleigh-Ritz and thick restarts.

    The basis ``Q`` grows by one block ``V_{j+1} = orth(A V_j)`` per product with ``A``; the
    products ``A Q`` are kept, so Ritz residuals are exact, not estimated. When the basis would
    exceed ``max_basis`` columns, it restarts from the best ``max_basis - 2 block`` Ritz vectors
    (and their products), plus the pending block, which is orthogonal to all of them.
    """
    n = op.n
    if max_basis is None:
        max_basis = max(8 * block, 3 * k + 3 * block, 40)
    max_basis = min(n, max_basis)
    keep = max(k, max_basis - 2 * block)
    max_iter = max(max_iter, -(-k // block))  # at least k vectors, even when not converged
    # The basis and its products fill preallocated buffers (no copy of the basis per step).
    Qb = torch.empty(n, max_basis, dtype=op.dtype, device=op.device)
    AQb = torch.empty_like(Qb)
    c, H = 0, torch.zeros(0, 0, dtype=op.dtype, device=op.device)
    V = _orthonormalize(op.initial(block, start, gen), Qb[:, :0], op, gen)
    for _ in range(max_iter):
        AV = op(V)
        t = V.shape[1]
        Qb[:, c:c + t], AQb[:, c:c + t] = V, AV
        Q, AQ = Qb[:, :c + t], AQb[:, :c + t]
        C = Q.mT @ AV  # new block column of Q^T A Q
        H = torch.cat([torch.cat([H, C[:c].mT], dim=0), C], dim=1)
        c += t
        theta, S = _eigh_desc(H, c)
        U, AU = Q @ S[:, :k], AQ @ S[:, :k]
        res = (AU - U * theta[:k]).norm(dim=0)
        if c >= k and float(res.max()) <= tol * _scale(theta[:k]):
            return theta[:k], U, res, True
        if c >= n:  # the whole space: the Ritz pairs are exact up to round-off
            break
        V = _orthonormalize(AV[:, : min(block, n - c)], Q, op, gen)
        if c + V.shape[1] > max_basis:  # thick restart on the best Ritz vectors
            S = S[:, :keep]
            Qb[:, :keep], AQb[:, :keep] = Q @ S, AQ @ S
            c, H = keep, torch.diag(theta[:keep])
    return theta[:k], U, res, False


# -- starting blocks -------------------------------------------------------------------------------

def auto_method(n: int, k: int, dense: bool = True) -> str:
    """What ``method="auto"`` runs for ``k`` eigenpairs of an ``n x n`` matrix (``dense``: the
    matrix is at hand as a tensor): ``"dense"`` up to :data:`AUTO_DENSE_MAX_N` or for more than a
    quarter of the spectrum, else ``"lanczos"``."""
    return "dense" if dense and (n <= AUTO_DENSE_MAX_N or 4 * k > n) else "lanczos"


def nystrom_start(C: torch.Tensor, index: torch.Tensor, t: int, *, rcond: float | None = None) -> torch.Tensor:
    """Approximate top eigenvectors of a symmetric positive semi-definite ``A`` from ``m`` of its
    columns, as a starting block for :func:`top_eigenpairs` (``start=``).

    The Nyström approximation ``A ~ C W^+ C^T`` (``C = A[:, index]``, ``W = A[index][:, index]``)
    is decomposed at ``O(n m^2)`` cost: ``W = U diag(w) U^T`` without the eigenvalues below
    ``rcond * max(w)``, ``B = C U diag(w)^{-1/2}`` (so that ``C W^+ C^T = B B^T``), and the top
    eigenvectors of ``B B^T`` are ``B P`` with ``P`` those of the small ``B^T B``. When ``A``'s
    spectrum decays fast, a few hundred columns give its top eigenvectors to many digits, and
    block Lanczos from them needs few products with ``A``.

    Parameters
    ----------
    C : tensor of shape (n, m)
        Columns ``index`` of ``A``.
    index : tensor of shape (m,)
        The rows of ``C`` that form ``W = C[index]``.
    t : int
        Columns to return (at most the numerical rank of ``W``).
    rcond : float, optional
        Relative cut-off on ``W``'s eigenvalues; default ``1e-8`` (float64) or ``1e-4`` (float32).

    Returns
    -------
    tensor of shape (n, t') with ``t' <= t``
        Columns in descending order of the approximate eigenvalues, not normalised (the solver
        orthonormalises its start); ``t' = 0`` when ``W`` has no positive eigenvalue.
    """
    with torch.no_grad():
        if rcond is None:
            rcond = 1e-4 if C.dtype == torch.float32 else 1e-8
        W = C[index].to(torch.float64)
        w, U = torch.linalg.eigh((W + W.mT) * 0.5)
        top = float(w.max()) if w.numel() else 0.0
        if not top > 0:
            return C[:, :0]
        keep = w > rcond * top
        U = (U[:, keep] * w[keep].rsqrt()).to(C.dtype)
        B = C @ U
        s, P = torch.linalg.eigh((B.mT @ B).to(torch.float64))
        P = P.flip(1)[:, :min(t, P.shape[1])].to(C.dtype)
        return B @ P
