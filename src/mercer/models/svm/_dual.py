"""One SMO solve on a subset of the training samples, shared by the whole SVM family.

:func:`solve_on` builds the kernel rows of the samples ``idx`` (:class:`_Rows`:
blocked products, or the RBF rows computed inside the compiled loop), sizes the row cache from the
execution plan (or ``cache_size``) and the prefetch batch, and runs
:func:`~mercer.models.svm._smo.solve_smo` on LIBSVM's general dual
:math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha + p^T \\alpha`, :math:`y^T \\alpha = \\delta`,
:math:`0 \\le \\alpha_t \\le C_t`: C-SVC (:class:`~mercer.models.svm.KernelSVC`), nu-SVC
(:class:`~mercer.models.svm.NuSVC`), epsilon- and nu-SVR (:class:`~mercer.models.svm.KernelSVR`,
:class:`~mercer.models.svm.NuSVR`, two variables per sample reading one kernel row) and the
one-class SVM (:class:`~mercer.models.svm.OneClassSVM`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ..._backend import row_sq_norms, to_numpy
from ..._sparse import is_sparse
from ...kernels import RBF, Kernel
from ...linalg import SVM_BATCH_BYTES, KernelOperator, MiB, NumericalWarning, plan_rows
from ._batched import solve_batched, working_set_size
from ._smo import SMOResult, solve_smo
from ._sparse_rows import SparseKernelRows, supports

__all__ = ["solve_on"]

#: Most features at which the SMO loop computes RBF kernel rows itself (see ``_Rows.features``).
_INLOOP_MAX_FEATURES = 64

#: Most kernel rows computed per cache miss (the missing row and the top violators) ...
MAX_BATCH = 64
#: ... and fewest, when the rows are so long that a batch of 64 would pass
#: :data:`mercer.linalg.SVM_BATCH_BYTES`.
MIN_BATCH = 8
#: Bytes per entry of the kernel-row cache: float32 rows, as LIBSVM's.
CACHE_ITEMSIZE = 4
#: Smallest stopping tolerance SMO is run with: its float64 gradient, updated a column at a time,
#: does not resolve smaller KKT violations (tol=1e-300 ran to the 10^7-iteration limit; 1e-13 stops).
TOL_MIN = 1e-12
#: Which solver :func:`solve_on` runs: ``"auto"`` (:func:`use_batched`), ``"smo"`` (pair at a time)
#: or ``"batched"`` (working sets); tests and benchmarks set it to compare the two.
SOLVER = "auto"
#: Fewest samples at which ``"auto"`` takes the batched working-set solver when the SMO loop computes
#: its RBF rows itself (few features, CPU) or the rows are sparse products (set by
#: benchmarks/suites/svm.py --solver; figures in benchmarks/results/svm/history/solver-crossovers.md) ...
BATCHED_MIN_INLOOP = 50_000
#: ... and when kernel rows come from dense blocked products (many features, other kernels,
#: precomputed Gram matrices, GPU); below both the SMO runs, LIBSVM's iterates exactly.
BATCHED_MIN_BLOCKED = 1_000


def use_batched(n: int, inloop: bool) -> bool:
    """Whether :func:`solve_on` runs the batched working-set solver on a problem of ``n`` samples
    (``inloop``: the SMO loop would compute RBF rows itself, or its rows are sparse products)."""
    if SOLVER != "auto":
        return SOLVER == "batched"
    return n >= (BATCHED_MIN_INLOOP if inloop else BATCHED_MIN_BLOCKED)


class _Rows:
    """Kernel rows, diagonal and blocked products on one (sub)problem's samples."""

    def __init__(self, kernel: Kernel, Xs: torch.Tensor, budget: int, cols=None, owner: str = "KernelSVC"):
        self.kernel, self.X, self.budget, self.owner = kernel, Xs, budget, owner
        self.pre = kernel.is_precomputed
        if self.pre:  # Xs: rows of the Gram matrix restricted to this problem's columns
            self.X = Xs[:, cols] if cols is not None else Xs
        self.rbf = type(kernel) is RBF and not kernel.is_ard  # per-feature gammas: the generic path
        # sparse rows: the common kernels' rows in one compiled call (no dispatch per call)
        self.sparse_rows = SparseKernelRows(kernel, self.X) if not self.pre and supports(kernel, self.X) else None
        if self.rbf:
            self.g = float(kernel.gamma if kernel.gamma is not None else 1.0 / Xs.shape[1])
            self.nrm = row_sq_norms(Xs).mul_(-self.g)

    def features(self) -> np.ndarray | None:
        """For the RBF kernel at few features on the CPU: the samples' features times sqrt(gamma),
        one feature per row, for the SMO loop to compute its kernel rows itself (None otherwise:
        rows come from this object, in blocks). Data whose squared distances may overflow keeps the
        blocked path, which reports a non-finite kernel."""
        X = self.X
        if not (self.rbf and X.device.type == "cpu" and X.layout == torch.strided
                and X.shape[1] <= _INLOOP_MAX_FEATURES
                and float(self.nrm.min()) > -torch.finfo(X.dtype).max / 8):  # -gamma |x|^2; NaN fails too
            return None
        return to_numpy((X * math.sqrt(self.g)).T.contiguous())

    def diag(self) -> np.ndarray:
        if self.pre:
            return to_numpy(torch.diagonal(self.X)).astype(np.float64)
        return to_numpy(KernelOperator(self.kernel, self.X, memory_budget=self.budget).diag()).astype(np.float64)

    def __call__(self, idx: np.ndarray, out: torch.Tensor | None = None) -> np.ndarray:
        """Rows ``idx``; ``out``: a ``(len(idx), n)`` tensor the RBF rows of dense data are computed in
        (reused from call to call: a fresh block of that size is page-faulted in on every call)."""
        block = self._block(idx, out)
        if not np.isfinite(block).all():  # O(rows * n) next to the O(rows * n * d) block
            raise ValueError(f"{self.owner}: the kernel matrix has non-finite values (NaN or inf) on the training "
                             "data; the dual coefficients or intercepts would not be finite. The input data may "
                             "contain large values and need to be preprocessed.")
        return block

    def _block(self, idx: np.ndarray, out: torch.Tensor | None = None) -> np.ndarray:
        if self.sparse_rows is not None:
            return self.sparse_rows(idx)
        it = torch.as_tensor(idx, device=self.X.device)
        if self.pre:
            return to_numpy(self.X[it])
        if self.rbf and not is_sparse(self.X):  # sparse rows: the kernel's own sparse product
            if out is not None:
                D = torch.addmm(self.nrm[None, :], self.X[it], self.X.T, alpha=2.0 * self.g, out=out)
            else:
                D = torch.addmm(self.nrm[None, :], self.X[it], self.X.T, alpha=2.0 * self.g)
            return to_numpy(D.add_(self.nrm[it][:, None]).clamp_max_(0.0).exp_())
        return to_numpy(self.kernel(self.X[it], self.X))

    def reusing(self, m: int):
        """``self`` as a function of ``idx`` alone that computes up to ``m`` dense RBF rows in one
        buffer, reused from call to call (the prefetches, the working sets, the nu duals' feasible
        start): a fresh block past malloc's mmap threshold is page-faulted in on every call."""
        if not (self.rbf and not self.pre and not is_sparse(self.X)):
            return self
        n = self.X.shape[0]
        buf = []  # allocated on the first call (the SMO with in-loop rows may never make one)

        def block(idx: np.ndarray) -> np.ndarray:
            if len(idx) > min(m, n):
                return self(idx)
            if not buf:
                buf.append(torch.empty((min(m, n), n), dtype=self.X.dtype, device=self.X.device))
            return self(idx, buf[0][:len(idx)])

        return block

    def matvec(self, r, c, v) -> np.ndarray:
        if self.sparse_rows is not None:  # K[r][:, c] v = K[c][:, r]^T v, rows of c a batch at a time
            r, c = np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.int64)
            out = np.zeros(len(r))
            for a in range(0, len(c), MAX_BATCH):
                out += self.sparse_rows(c[a:a + MAX_BATCH])[:, r].T @ np.asarray(v[a:a + MAX_BATCH], dtype=np.float64)
            return out
        vt = torch.as_tensor(v, dtype=self.X.dtype, device=self.X.device)
        rt = torch.as_tensor(r, device=self.X.device)
        ct = torch.as_tensor(c, device=self.X.device)
        if self.pre:
            return to_numpy(self.X[rt][:, ct] @ vt).astype(np.float64)
        return to_numpy(KernelOperator(self.kernel, self.X[rt], self.X[ct], memory_budget=self.budget).matvec(vt)).astype(np.float64)


def solver_tol(est) -> float:
    """``est.tol``, or :data:`TOL_MIN` with a warning when it is smaller (a fit that could not stop)."""
    tol = float(est.tol)
    if tol >= TOL_MIN:
        return tol
    warnings.warn(f"{type(est).__name__}: tol={tol:g} is below what SMO's float64 gradient resolves; it stops "
                  f"at tol={TOL_MIN:g} instead (a smaller tol would only run to max_iter).", NumericalWarning,
                  stacklevel=5)
    return TOL_MIN


def solve_on(est, Xt: torch.Tensor, idx: np.ndarray, y: np.ndarray, Cb: np.ndarray, *, p=None, alpha0=None,
             pairs: bool = False, nu: bool = False) -> SMOResult:
    """Solve the dual of estimator ``est`` (its kernel ``kernel_``, ``tol``, ``shrinking``,
    ``max_iter``, ``cache_size`` and execution plan) on samples ``idx`` of ``Xt``.

    ``y``, ``Cb``, ``p``, ``alpha0``: per variable (see :func:`~mercer.models.svm._smo.solve_smo`);
    ``pairs``: two variables per sample (SVR: variable ``t`` and ``t + n`` read sample ``t``'s
    kernel row), so ``len(y) == 2 len(idx)``; ``nu``: LIBSVM's Solver_NU. Sets ``index`` of the result.
    """
    n = len(idx)
    it = torch.as_tensor(idx, device=Xt.device)
    rows = _Rows(est.kernel_, Xt[it], est._budget, cols=it if est.kernel_.is_precomputed else None,
                 owner=type(est).__name__)
    width = 2 * n if pairs else n  # the batched solver's cached row holds one entry per variable
    # The cache's capacity (LIBSVM's cache_size): at least the two rows of the pair being updated.
    # (a cache_size of 1e308 MiB is inf bytes: capped, never int(inf))
    cache_bytes = est._plan.share("row cache") if est.cache_size is None else int(min(est.cache_size * MiB, 2.0**62))
    rmap = np.concatenate([np.arange(n), np.arange(n)]) if pairs else None
    features = rows.features()
    if use_batched(n, features is not None or is_sparse(rows.X)):
        cache_rows = max(2, min(n, cache_bytes // max(1, width * CACHE_ITEMSIZE)))
        q = working_set_size(width, cache_rows)
        # the new rows of a working set in one product, within the batch memory of the SMO's prefetch
        per_call = plan_rows(q, n * (Xt.element_size() + CACHE_ITEMSIZE), budget=est._budget, min_rows=1,
                             max_bytes=SVM_BATCH_BYTES, what="a block of kernel rows")
        res = solve_batched(rows.reusing(per_call), rows.diag(), y, Cb, q=q, cache_rows=cache_rows,
                            cache_dtype=np.float32, tol=solver_tol(est), max_iter=int(est.max_iter), p=p,
                            alpha0=alpha0, rmap=rmap, nu=nu, rows_per_call=per_call, warm_batch=per_call)
        res.index = idx
        return res
    # the SMO's cached row holds one entry per sample (SVR's two variables of a sample read one)
    cache_rows = max(2, min(n, cache_bytes // max(1, n * CACHE_ITEMSIZE)))
    batch = plan_rows(MAX_BATCH, n * CACHE_ITEMSIZE, budget=est._budget, min_rows=MIN_BATCH,
                      max_bytes=SVM_BATCH_BYTES, what="a batch of kernel rows")
    res = solve_smo(rows.reusing(batch), rows.diag(), y, Cb, matvec=rows.matvec, cache_rows=cache_rows,
                    cache_dtype=np.float32, tol=solver_tol(est), shrinking=bool(est.shrinking),
                    max_iter=int(est.max_iter), batch=batch, features=features, p=p, alpha0=alpha0, rmap=rmap, nu=nu)
    res.index = idx
    return res
