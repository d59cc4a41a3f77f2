"""Sequential minimal optimisation for the soft-margin SVM dual, as in LIBSVM.

Solves :math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha - e^T \\alpha` subject to
:math:`0 \\le \\alpha_i \\le C_i` and :math:`y^T \\alpha = 0`, with :math:`Q_{ij} = y_i y_j K_{ij}`,
by SMO with the second-order working-set selection of Fan, Chen & Lin (2005, "WSS3"), LIBSVM's
shrinking heuristic with gradient reconstruction, and LIBSVM's ``tau`` fix for non-positive
curvature (so that the iteration terminates for indefinite kernels too).

The sequential loop is compiled with numba, imported on the first solve (its import costs ~0.15 s,
which ``import mercer`` does not pay). Kernel rows live in an LRU cache of full-length rows (a 2-D
array filled by the caller); when the loop needs a row that is not cached it returns to Python,
which computes that row *and a batch of likely next ones* (the current top violators) in one
BLAS-sized kernel block, then resumes the loop. Gradient reconstruction after shrinking is one
blocked kernel-matrix product, also done by the caller.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..._progress import task

__all__ = ["SMOResult", "solve_smo"]

log = logging.getLogger(__name__)

TAU = 1e-12
#: Curvature ``K_ii + K_jj - 2 K_ij`` below ``-_NONPSD_RTOL (K_ii + K_jj)`` counts as a non-PSD step
#: (float32 cached rows round ``K_ij`` at ~6e-8 relative). Zero curvature is a singular PSD Gram
#: (duplicate points), not an indefinite one: LIBSVM's tau fix applies, no warning.
_NONPSD_RTOL = 1e-6
# return codes of the compiled loop
_CONVERGED, _NEED_ROW, _MAX_ITER, _RECONSTRUCT, _RECONSTRUCT_FINAL = 0, 1, 2, 3, 4
# integer state slots
_S_ACTIVE, _S_ITER, _S_COUNTER, _S_UNSHRINK, _S_CLOCK, _S_MAXITER, _S_SHRINKING, _S_PENDING, _S_NONPSD = range(9)


#: the functions of the compiled loop, in the order they are defined (``_run`` calls the others)
_COMPILED: list[str] = []
_COMPILE_LOCK = threading.Lock()


def _compiled(fn: Callable) -> Callable:
    """Marks a function of the loop: numba compiles it, on the first solve (see :func:`_loop`)."""
    _COMPILED.append(fn.__name__)
    return fn


def _loop() -> Callable:
    """The loop ``_run`` as a numba dispatcher. The first call imports numba and turns every
    :func:`_compiled` function of this module into a dispatcher (``_run`` finds ``_select`` and
    ``_shrink`` as dispatchers when numba compiles it, on its first call); the machine code comes
    from numba's on-disk cache when it is there (``cache=True``)."""
    namespace = globals()
    with _COMPILE_LOCK:
        if not hasattr(namespace["_run"], "py_func"):
            from numba import njit

            for name in _COMPILED:
                if not hasattr(namespace[name], "py_func"):
                    namespace[name] = njit(cache=True, nogil=True)(namespace[name])
    return namespace["_run"]


@_compiled
def _select(y, G, alpha, Cb, QD, cache, slot_of, last_used, active, n_active, eps, st, need):
    """WSS3. Returns 0 with the pair in need[0], need[1]; 1 when optimal; 2 when row need[0] is missing."""
    gmax = -np.inf
    imax = -1
    for k in range(n_active):
        t = active[k]
        if y[t] > 0:
            if alpha[t] < Cb[t] and -G[t] >= gmax:
                gmax = -G[t]
                imax = t
        elif alpha[t] > 0 and G[t] >= gmax:
            gmax = G[t]
            imax = t
    if imax == -1:
        return 1
    si = slot_of[imax]
    if si < 0:
        need[0] = imax
        need[1] = -1
        return 2
    Ki = cache[si]
    qi = QD[imax]
    gmax2 = -np.inf
    jmin = -1
    obj_min = np.inf
    for k in range(n_active):
        t = active[k]
        if y[t] > 0:
            if alpha[t] > 0:
                gd = gmax + G[t]
                if G[t] >= gmax2:
                    gmax2 = G[t]
                if gd > 0:
                    quad = qi + QD[t] - 2.0 * Ki[t]
                    if quad <= 0:
                        quad = TAU
                    od = -(gd * gd) / quad
                    if od <= obj_min:
                        jmin = t
                        obj_min = od
        elif alpha[t] < Cb[t]:
            gd = gmax - G[t]
            if -G[t] >= gmax2:
                gmax2 = -G[t]
            if gd > 0:
                quad = qi + QD[t] - 2.0 * Ki[t]
                if quad <= 0:
                    quad = TAU
                od = -(gd * gd) / quad
                if od <= obj_min:
                    jmin = t
                    obj_min = od
    if gmax + gmax2 < eps or jmin == -1:
        return 1
    need[0] = imax
    need[1] = jmin
    return 0


@_compiled
def _shrink(y, G, alpha, Cb, active, st, eps):
    """LIBSVM's do_shrinking. Returns True when the caller must reconstruct the gradient first."""
    n = y.shape[0]
    g1 = -np.inf
    g2 = -np.inf
    na = st[_S_ACTIVE]
    for k in range(na):
        t = active[k]
        up = alpha[t] >= Cb[t]
        low = alpha[t] <= 0
        if y[t] > 0:
            if not up and -G[t] >= g1:
                g1 = -G[t]
            if not low and G[t] >= g2:
                g2 = G[t]
        else:
            if not up and -G[t] >= g2:
                g2 = -G[t]
            if not low and G[t] >= g1:
                g1 = G[t]
    if st[_S_UNSHRINK] == 0 and g1 + g2 <= eps * 10:
        st[_S_UNSHRINK] = 1
        if na < n:
            return True
    k = 0
    while k < na:
        t = active[k]
        up = alpha[t] >= Cb[t]
        low = alpha[t] <= 0
        shrunk = False
        if up:
            shrunk = (-G[t] > g1) if y[t] > 0 else (-G[t] > g2)
        elif low:
            shrunk = (G[t] > g2) if y[t] > 0 else (G[t] > g1)
        if shrunk:
            na -= 1
            active[k] = active[na]
            active[na] = t
        else:
            k += 1
    st[_S_ACTIVE] = na
    return False


@_compiled
def _run(y, G, G_bar, alpha, Cb, QD, cache, slot_of, last_used, active, st, eps, need):
    """Iterate until converged / a row is missing / a reconstruction is needed / max_iter."""
    n = y.shape[0]
    while True:
        if st[_S_ITER] >= st[_S_MAXITER]:
            return _MAX_ITER
        if st[_S_PENDING] == 1:
            if _shrink(y, G, alpha, Cb, active, st, eps):
                return _RECONSTRUCT
            st[_S_PENDING] = 0
            st[_S_COUNTER] = min(n, 1000)
        code = _select(y, G, alpha, Cb, QD, cache, slot_of, last_used, active, st[_S_ACTIVE], eps, st, need)
        if code == 2:
            return _NEED_ROW
        if code == 1:
            if st[_S_ACTIVE] < n:
                return _RECONSTRUCT_FINAL
            return _CONVERGED
        i = need[0]
        j = need[1]
        sj = slot_of[j]
        if sj < 0:
            need[0] = j
            need[1] = i
            return _NEED_ROW
        si = slot_of[i]
        st[_S_CLOCK] += 1
        last_used[si] = st[_S_CLOCK]
        last_used[sj] = st[_S_CLOCK]
        Ki = cache[si]
        Kj = cache[sj]
        st[_S_ITER] += 1
        Ci = Cb[i]
        Cj = Cb[j]
        ai_old = alpha[i]
        aj_old = alpha[j]
        up_i = ai_old >= Ci
        up_j = aj_old >= Cj
        quad = QD[i] + QD[j] - 2.0 * Ki[j]
        if quad <= 0:  # counted only when negative beyond round-off (zero: duplicate points, still PSD)
            st[_S_NONPSD] += quad < -_NONPSD_RTOL * (QD[i] + QD[j])
            quad = TAU
        ai = ai_old
        aj = aj_old
        if y[i] != y[j]:
            delta = (-G[i] - G[j]) / quad
            diff = ai - aj
            ai += delta
            aj += delta
            if diff > 0:
                if aj < 0:
                    aj = 0.0
                    ai = diff
            elif ai < 0:
                ai = 0.0
                aj = -diff
            if diff > Ci - Cj:
                if ai > Ci:
                    ai = Ci
                    aj = Ci - diff
            elif aj > Cj:
                aj = Cj
                ai = Cj + diff
        else:
            delta = (G[i] - G[j]) / quad
            s = ai + aj
            ai -= delta
            aj += delta
            if s > Ci:
                if ai > Ci:
                    ai = Ci
                    aj = s - Ci
            elif aj < 0:
                aj = 0.0
                ai = s
            if s > Cj:
                if aj > Cj:
                    aj = Cj
                    ai = s - Cj
            elif ai < 0:
                ai = 0.0
                aj = s
        alpha[i] = ai
        alpha[j] = aj
        dai = (ai - ai_old) * y[i]
        daj = (aj - aj_old) * y[j]
        na = st[_S_ACTIVE]
        for k in range(na):
            t = active[k]
            G[t] += y[t] * (Ki[t] * dai + Kj[t] * daj)
        # G_bar[k] = sum over alpha at the upper bound of C_l Q_lk (for gradient reconstruction)
        if up_i != (ai >= Ci):
            c = Ci * y[i] if not up_i else -Ci * y[i]
            for t in range(n):
                G_bar[t] += c * y[t] * Ki[t]
        if up_j != (aj >= Cj):
            c = Cj * y[j] if not up_j else -Cj * y[j]
            for t in range(n):
                G_bar[t] += c * y[t] * Kj[t]
        if st[_S_SHRINKING] == 1:
            st[_S_COUNTER] -= 1
            if st[_S_COUNTER] <= 0:
                st[_S_PENDING] = 1


@dataclass
class SMOResult:
    """What the solver did. ``alpha`` (n,), ``rho`` (decision = sum alpha_i y_i K(x_i, x) - rho)."""

    alpha: np.ndarray
    rho: float
    objective: float
    n_iter: int
    converged: bool
    rows_computed: int
    nonpsd_steps: int
    index: np.ndarray | None = None  # the machine's samples (set by the caller)


def _rho(y, G, alpha, Cb) -> float:
    yG = y * G
    up = alpha >= Cb
    low = alpha <= 0
    free = ~up & ~low
    if free.any():
        return float(yG[free].mean())
    ub_mask = (up & (y < 0)) | (low & (y > 0))
    lb_mask = (up & (y > 0)) | (low & (y < 0))
    ub = yG[ub_mask].min() if ub_mask.any() else np.inf
    lb = yG[lb_mask].max() if lb_mask.any() else -np.inf
    return float((ub + lb) / 2)


class _RowCache:
    """LRU cache of full-length kernel rows: ``cache[slot_of[i]]`` is row ``i`` (``slot_of[i] < 0``:
    not cached); ``last_used`` holds the loop's clock at each slot's last use."""

    def __init__(self, n: int, n_slots: int, dtype) -> None:
        # torch's allocator, not numpy's: numpy madvises large blocks for transparent huge pages, and
        # with THP defrag in "madvise" mode every first touch then waits on compaction (measured on
        # this project's VMs: 800 MB in 2.8 s vs 0.46 s) -- and the cache is written once per row.
        self.cache = torch.empty((n_slots, n), dtype=torch.float32 if np.dtype(dtype) == np.float32
                                 else torch.float64).numpy()
        self.slot_of = np.full(n, -1, dtype=np.int64)
        self.owner = np.full(n_slots, -1, dtype=np.int64)
        self.last_used = np.zeros(n_slots, dtype=np.int64)
        self.free_slots = list(range(n_slots - 1, -1, -1))
        self.computed = 0

    def store(self, idx: np.ndarray, block: np.ndarray, protect: int, st: np.ndarray) -> None:
        """Put rows ``idx`` (``block``) in free slots, else evict the least recently used rows,
        never the row of the pending pair (``protect``); advances the clock ``st[_S_CLOCK]``."""
        m = len(idx)
        take = min(m, len(self.free_slots))
        slots = [self.free_slots.pop() for _ in range(take)]
        if take < m:
            lu = self.last_used.copy()
            if protect >= 0 and self.slot_of[protect] >= 0:
                lu[self.slot_of[protect]] = np.iinfo(np.int64).max
            lu[slots] = np.iinfo(np.int64).max
            victims = np.argpartition(lu, m - take - 1)[:m - take]
            self.slot_of[self.owner[victims]] = -1
            slots.extend(int(v) for v in victims)
        slots = np.asarray(slots, dtype=np.int64)
        self.cache[slots] = block
        self.owner[slots] = idx
        self.slot_of[idx] = slots
        self.last_used[slots] = st[_S_CLOCK] + 1 + np.arange(m)
        st[_S_CLOCK] += m
        self.computed += m


@dataclass
class _Dual:
    """The iterate of the compiled loop: multipliers, gradient ``G``, ``G_bar`` (the part of the
    gradient from multipliers at their upper bound), the active set and the integer state."""

    y: np.ndarray
    Cb: np.ndarray
    QD: np.ndarray
    alpha: np.ndarray
    G: np.ndarray
    G_bar: np.ndarray
    active: np.ndarray
    st: np.ndarray
    need: np.ndarray


def _start(y, Cb, diag, *, shrinking: bool, max_iter: int | None) -> _Dual:
    """alpha = 0 (so G = -1), every sample active, LIBSVM's iteration limit for ``max_iter < 0``."""
    n = y.shape[0]
    st = np.zeros(9, dtype=np.int64)
    st[_S_ACTIVE] = n
    st[_S_COUNTER] = min(n, 1000)
    st[_S_MAXITER] = max(10_000_000, 100 * n) if max_iter is None or max_iter < 0 else int(max_iter)
    st[_S_SHRINKING] = int(bool(shrinking))
    return _Dual(np.ascontiguousarray(y, dtype=np.float64), np.ascontiguousarray(Cb, dtype=np.float64),
                 np.ascontiguousarray(diag, dtype=np.float64), np.zeros(n), -np.ones(n), np.zeros(n),
                 np.arange(n, dtype=np.int64), st, np.zeros(2, dtype=np.int64))


def _rows_to_fetch(d: _Dual, slot_of: np.ndarray, first: int, batch: int) -> np.ndarray:
    """The missing row ``first`` and, up to ``batch`` rows in all, the uncached active samples
    that violate the KKT conditions most (the likely next working-set members)."""
    want = [first]
    if batch > 1:
        act = d.active[:d.st[_S_ACTIVE]]
        miss = act[slot_of[act] < 0]
        if miss.size > 1:
            a, g, yy, cb = d.alpha[miss], d.G[miss], d.y[miss], d.Cb[miss]
            up_score = np.where(np.where(yy > 0, a < cb, a > 0), -yy * g, -np.inf)
            low_score = np.where(np.where(yy > 0, a > 0, a < cb), yy * g, -np.inf)
            score = np.maximum(up_score, low_score)
            k = min(batch - 1, miss.size - 1)
            if k > 0:
                top = miss[np.argpartition(-score, k)[:k + 1]]
                want.extend(int(t) for t in top if t != first)
                want = want[:batch]
    return np.asarray(want, dtype=np.int64)


def _reconstruct(d: _Dual, matvec) -> None:
    """LIBSVM's gradient reconstruction of the shrunk samples; makes every sample active."""
    n = d.y.shape[0]
    na = d.st[_S_ACTIVE]
    if na == n:
        return
    inactive = d.active[na:]
    free = np.flatnonzero((d.alpha > 0) & (d.alpha < d.Cb))
    d.G[inactive] = d.G_bar[inactive] - 1.0
    if free.size:
        d.G[inactive] += d.y[inactive] * matvec(inactive, free, d.alpha[free] * d.y[free])
    d.st[_S_ACTIVE] = n


def solve_smo(rows: Callable[[np.ndarray], np.ndarray], diag: np.ndarray, y: np.ndarray, Cb: np.ndarray, *,
              matvec: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], cache_rows: int,
              cache_dtype=np.float64, tol: float = 1e-3, shrinking: bool = True, max_iter: int = -1,
              batch: int = 64) -> SMOResult:
    """Solve the C-SVC dual by SMO.

    Parameters
    ----------
    rows : callable
        ``rows(idx)`` -> kernel rows ``K[idx, :]`` as an array of shape ``(len(idx), n)``.
    diag : ndarray (n,)
        ``K[i, i]``.
    y : ndarray (n,) of +-1
    Cb : ndarray (n,)
        Upper bounds ``C_i`` (class and sample weights included), all > 0.
    matvec : callable
        ``matvec(r, c, v)`` -> ``K[r][:, c] @ v`` (for gradient reconstruction).
    cache_rows : int
        Number of kernel rows the cache holds (>= 2; capped at n).
    batch : int
        Rows computed per kernel call on a cache miss (the missing row and the top violators).
    """
    n = y.shape[0]
    d = _start(y, Cb, diag, shrinking=shrinking, max_iter=max_iter)
    n_slots = int(max(2, min(cache_rows, n)))
    # a batch at most an eighth of the cache: prefetched rows must not evict the useful ones
    batch = int(max(1, min(batch, n_slots // 8)))
    c = _RowCache(n, n_slots, cache_dtype)
    # the compiled loop's arguments: arrays updated in place, never rebound
    args = (d.y, d.G, d.G_bar, d.alpha, d.Cb, d.QD, c.cache, c.slot_of, c.last_used, d.active, d.st, float(tol), d.need)
    converged = True
    run = _loop()
    bar = task("SMO", unit="it")  # objective: approximate while shrinking (stale gradients)
    while True:
        code = run(*args)
        bar.update(int(d.st[_S_ITER]), objective=lambda: float(d.alpha @ (d.G - 1.0) / 2), rows=c.computed)
        if code == _NEED_ROW:
            idx = _rows_to_fetch(d, c.slot_of, int(d.need[0]), batch)
            c.store(idx, rows(idx), int(d.need[1]), d.st)
        elif code == _RECONSTRUCT:
            _reconstruct(d, matvec)
        elif code == _RECONSTRUCT_FINAL:
            _reconstruct(d, matvec)
            d.st[_S_COUNTER] = 1
        elif code == _MAX_ITER:
            _reconstruct(d, matvec)
            converged = False
            break
        else:
            break
    bar.close()
    rho = _rho(d.y, d.G, d.alpha, d.Cb)
    obj = float(d.alpha @ (d.G - 1.0) / 2)
    return SMOResult(d.alpha, rho, obj, int(d.st[_S_ITER]), converged, c.computed, int(d.st[_S_NONPSD]))
