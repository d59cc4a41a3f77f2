"""A batched working-set solver for LIBSVM's general dual (two-level decomposition, as oneDAL's and
ThunderSVM's "thunder" solvers).

Solves the problem of :func:`~mercer.models.svm._smo.solve_smo` (C-SVC, epsilon-SVR, and with
``nu=True`` LIBSVM's Solver_NU: nu-SVC, nu-SVR, the one-class SVM) by an outer loop over working
sets of ``q`` variables:

1. **Selection.** The ``q / 2`` newest members of the previous working set stay (their kernel rows
   are kept, not recomputed: oneDAL's ``copyLastToFirst``, ThunderSVM's alternating halves); the
   other half is filled with the most violating variables not in it, alternately the largest
   ``F = -y G`` on I_up and the smallest on I_low (Keerthi's maximal violators, first order; the
   pairs inside the working set are then chosen by second-order WSS3). The maximal violation over
   *all* variables, ``max_{I_up} F - min_{I_low} F``, is LIBSVM's stopping quantity: the solve
   stops when it is below ``tol`` (LIBSVM's rule, so the solution is LIBSVM's to within what ``tol``
   resolves: decision values to ~2e-3 of their range and the support set up to borderline vectors
   at tol = 1e-3; the same support set and coefficients to 1e-5 at tol = 1e-7). Solver_NU's sets
   are pairs of one sign class at a time, the more violating class first.
2. **Rows.** The set's rows are looked up in an LRU cache of float32 rows (LIBSVM's, sized by the
   caller from the memory plan); the missing ones are computed in one blocked product by the row
   source (``rows(idx)``: the kernel classes / block engine, every core; several products when
   one would pass the caller's ``rows_per_call``).
3. **Inner SMO** (compiled, :func:`_inner`): WSS3 pairs on the ``q x q`` subproblem held in
   cache, until its own violation is below ``max(tol, first violation / 10)`` or ``100 q``
   iterations (oneDAL's and ThunderSVM's local stopping rule).
4. **Gradient.** ``F -= K[:, W] (y dalpha)_W``: one product over all variables, the float32 rows
   summed in float64 (compiled, bands of variables in parallel). No shrinking.

Each outer iteration returns to Python: a Ctrl-C is raised between two of them (the inner solve is
bounded by ``100 q^2`` work), progress and :func:`~mercer.linalg.observe_blocks` observers are
updated. ``rho`` (and Solver_NU's ``r``) come from the final gradient by LIBSVM's formulas.

Facts taken from the peers (their code is not used): oneDAL's working-set size is the largest power of
two below the number of variables, capped (2048); both keep the newest half of the previous working
set; both stop the inner solver at a tenth of its first violation; ThunderSVM caps it at
``100 q`` pair steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..._jit import LazyJit
from ..._progress import task
from ...linalg import current_observer
from . import _smo
from ._smo import (_LOW, _S_CLOCK, _S_ITER, _S_MAXITER, _S_ROWS, _UP, TAU, SMOResult, _pair_step, _rho, _rho_nu,
                   _RowCache, _set_side, _start, _warm_start)

__all__ = ["solve_batched", "working_set_size"]

_jit = LazyJit(globals())
prange = range  # numba's prange once compiled (its parallel loops); plain range before

#: Inner SMO steps per working-set member before the inner solve stops (ThunderSVM's and oneDAL's).
INNER_STEPS = 100
#: Largest working set: its q x q float64 block (2 MiB at 512) stays in the L2/L3 cache.
Q_MAX = 512


def working_set_size(n_vars: int, cache_rows: int, q_max: int | None = None) -> int:
    """Working-set size ``q``: a power of two (oneDAL's choice), at most ``q_max`` (:data:`Q_MAX`)
    and the number of variables, with at least ``4 q`` rows in the cache (the set's, the next new
    half's, and room for rows that recur);
    at least 2 (one pair: SMO with its rows recomputed)."""
    q_max = Q_MAX if q_max is None else q_max
    q = 2
    while q * 2 <= min(n_vars, q_max) and 4 * q <= cache_rows:
        q *= 2
    return q


@_jit.mark
def _inner(Kw, y, Cb, alpha, F, QD, tol, max_steps, nu, out):
    """SMO with WSS3 on the working set (``Kw``: its ``q x q`` kernel block in float64; ``y``, ``Cb``,
    ``alpha``, ``F = -y G``, ``QD``: its variables', updated in place). Stops when the set's violation
    is below ``max(tol, first / 10)`` or after ``max_steps`` steps. ``nu``: pairs within a sign class
    (Solver_NU). ``out``: (first violation, steps, non-PSD steps)."""
    q = y.shape[0]
    side = np.zeros(q, dtype=np.int8)
    for t in range(q):
        _set_side(t, y, alpha, Cb, side)
    local_eps = tol
    steps = 0
    nonpsd = 0
    out[0] = 0.0
    while True:
        # i: the largest F on I_up (per sign class for nu); j: WSS3 on I_low with i's row
        best_obj = np.inf
        i = -1
        j = -1
        diff = -np.inf
        for cls in range(2 if nu else 1):
            gmax = -np.inf
            ii = -1
            for t in range(q):
                if nu and (y[t] > 0) != (cls == 0):
                    continue
                if side[t] & _UP and F[t] >= gmax:
                    gmax = F[t]
                    ii = t
            gmax2 = -np.inf
            jj = -1
            obj = np.inf
            for t in range(q):
                if nu and (y[t] > 0) != (cls == 0):
                    continue
                if side[t] & _LOW:
                    f = F[t]
                    if -f > gmax2:
                        gmax2 = -f
                    gd = gmax - f
                    if ii >= 0 and gd > 0:
                        quad = QD[ii] + QD[t] - 2.0 * Kw[ii, t]
                        od = -(gd * gd) / (quad if quad > 0 else TAU)
                        if od <= obj:
                            jj = t
                            obj = od
            if gmax + gmax2 > diff:
                diff = gmax + gmax2
            if jj >= 0 and obj <= best_obj:
                best_obj = obj
                i = ii
                j = jj
        if steps == 0:
            out[0] = diff
            local_eps = max(tol, 0.1 * diff)
        if diff < local_eps or j < 0 or steps >= max_steps:
            break
        steps += 1
        dai, daj, non_psd = _pair_step(i, j, Kw[i, j], y, F, alpha, Cb, QD, side)
        nonpsd += non_psd
        for t in range(q):
            F[t] -= Kw[i, t] * dai + Kw[j, t] * daj
    out[1] = steps
    out[2] = nonpsd


def _violation(F, side, y, nu: bool) -> float:
    """LIBSVM's stopping quantity ``max_{I_up} F - min_{I_low} F`` (Solver_NU: the larger of the two
    sign classes')."""
    up = np.where(side & _UP, F, -np.inf)
    low = np.where(side & _LOW, -F, -np.inf)
    if not nu:
        return float(up.max() + low.max())
    pos = y > 0
    return float(max(up[pos].max(initial=-np.inf) + low[pos].max(initial=-np.inf),
                     up[~pos].max(initial=-np.inf) + low[~pos].max(initial=-np.inf)))


def _interleave(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[0], b[0], a[1], b[1], ...``, then the longer one's rest."""
    merged = np.empty(a.size + b.size, dtype=np.int64)
    m = min(a.size, b.size)
    merged[0:2 * m:2] = a[:m]
    merged[1:2 * m:2] = b[:m]
    merged[2 * m:] = a[m:] if a.size > m else b[m:]
    return merged


def _first_each(v: np.ndarray) -> np.ndarray:
    """``v`` without repeats, each at its first place."""
    _, first = np.unique(v, return_index=True)
    return v[np.sort(first)]


def _top(score: np.ndarray, k: int) -> np.ndarray:
    """The (at most ``k``) variables of largest finite ``score``, largest first."""
    m = min(k, score.shape[0])
    top = np.argpartition(-score, m - 1)[:m] if m < score.shape[0] else np.arange(score.shape[0])
    top = top[np.isfinite(score[top])]
    return top[np.argsort(-score[top], kind="stable")]


def _select(F, side, y, exclude: np.ndarray, k: int, nu: bool) -> np.ndarray:
    """Up to ``k`` variables not in ``exclude``: alternately the largest F on I_up and the smallest on
    I_low (each list in order of violation; a free variable on both lists is taken once). ``nu``:
    the two sign classes alternately too (Solver_NU pairs variables within a class, so each class
    needs its own violators)."""
    up = np.where(side & _UP, F, -np.inf)
    low = np.where(side & _LOW, -F, -np.inf)
    up[exclude] = -np.inf
    low[exclude] = -np.inf
    if nu:  # pairs of one class at a time, the more violating class first (a set of 2 must hold a pair)
        lists, gaps = [], []
        for cls in (y > 0, y < 0):
            u, lo = np.where(cls, up, -np.inf), np.where(cls, low, -np.inf)
            lists.append(_first_each(_interleave(_top(u, k), _top(lo, k))))
            gaps.append(u.max(initial=-np.inf) + lo.max(initial=-np.inf))
        a, b = lists if gaps[0] >= gaps[1] else lists[::-1]
        merged = np.concatenate([np.concatenate([a[i:i + 2], b[i:i + 2]]) for i in range(0, max(a.size, b.size), 2)]
                                or [np.empty(0, dtype=np.int64)])
    else:
        merged = _interleave(_top(up, k), _top(low, k))
    return _first_each(merged)[:k]


def _compiled(name: str):
    """The compiled function ``name``, ``prange`` being numba's and the SMO's pair step its compiled
    one (:func:`~mercer.models.svm._smo._pair_step`) when the module compiles. (numba's on-disk cache of
    :func:`_inner` is keyed on this file only: after editing ``_pair_step`` alone, delete this
    module's ``__pycache__/_batched.*.nb*`` files.)"""
    global prange, _pair_step, _set_side
    if prange is range:
        from numba import prange as numba_prange

        _pair_step, _set_side = _smo._jit("_pair_step"), _smo._jit("_set_side")
        prange = numba_prange
    return _jit(name)


@_jit.mark(parallel=True)
def _update(F, cache, slots, coef):
    """``F -= coef @ cache[slots]`` in float64 (the float32 rows' products summed in float64, as
    LIBSVM's gradient updates), bands of variables in parallel."""
    n = F.shape[0]
    band = 4096
    for b in prange((n + band - 1) // band):
        lo = b * band
        hi = min(n, lo + band)
        for k in range(slots.shape[0]):
            row = cache[slots[k]]
            c = coef[k]
            for t in range(lo, hi):
                F[t] -= c * row[t]


def solve_batched(rows: Callable[[np.ndarray], np.ndarray], diag: np.ndarray, y: np.ndarray, Cb: np.ndarray, *,
                  q: int, cache_rows: int, cache_dtype=np.float32, tol: float = 1e-3, max_iter: int = -1,
                  p: np.ndarray | None = None, alpha0: np.ndarray | None = None, rmap: np.ndarray | None = None,
                  nu: bool = False, warm_batch: int = 64, rows_per_call: int | None = None) -> SMOResult:
    """Solve LIBSVM's general dual (arguments as :func:`~mercer.models.svm._smo.solve_smo`) with
    working sets of ``q`` variables (even, >= 2) and an LRU cache of ``cache_rows`` kernel rows
    (at least ``2 q``: the working set's rows and the next half's). ``max_iter`` counts inner pair
    steps, as SMO's iterations; ``-1``: LIBSVM's limit ``max(10^7, 100 l)``. ``rows_per_call``: most
    kernel rows per call of ``rows`` (the memory of one product; a Ctrl-C is heard between calls)."""
    n = np.asarray(diag).shape[0]
    rm = np.arange(len(y), dtype=np.int64) if rmap is None else np.ascontiguousarray(rmap, dtype=np.int64)
    qd = np.asarray(diag, dtype=np.float64)[rm]
    d = _start(y, Cb, qd, shrinking=False, max_iter=max_iter, p=p, rmap=rm)
    if alpha0 is not None:
        _warm_start(d, np.asarray(alpha0, dtype=np.float64), rows, max(1, warm_batch), cache_dtype)
    l_vars = d.y.shape[0]
    q = int(max(2, min(q, l_vars)))
    half = q // 2
    c = _RowCache(n, int(min(n, max(cache_rows, 2 * q))), cache_dtype, None if l_vars == n else rm)
    limit = int(d.st[_S_MAXITER])
    W = np.empty(0, dtype=np.int64)  # the working set (variables), oldest half first
    out = np.zeros(3)
    steps = nonpsd = outer = 0
    converged = True
    inner, update = _compiled("_inner"), _compiled("_update")
    observer = current_observer()
    bar = task("batched SMO", unit="it")
    tol = float(tol)
    while True:
        if _violation(d.F, d.side, d.y, nu) < tol:
            break
        if steps >= limit:
            converged = False
            break
        keep = W[W.size - half:] if outer else W[:0]  # the newest half stays
        new = _select(d.F, d.side, d.y, keep, q - keep.size, nu)
        if new.size == 0:
            break
        W = np.concatenate([keep, new])
        samples = np.unique(rm[W])
        hit = samples[c.slot_of[samples] >= 0]
        d.st[_S_CLOCK] += 1  # the set's cached rows become the most recent: the new rows evict others
        c.last_used[c.slot_of[hit]] = d.st[_S_CLOCK]
        miss = samples[c.slot_of[samples] < 0]
        step = miss.size if rows_per_call is None else max(1, int(rows_per_call))
        for s0 in range(0, miss.size, step):  # one product for the new rows, unless their memory is too much
            part = miss[s0:s0 + step]
            c.store(part, np.asarray(rows(part)), -1, d.st)
        slots = c.slot_of[rm[W]]
        Kw = c.cache[np.ix_(slots, W)].astype(np.float64)
        a_old = d.alpha[W].copy()
        aw, Fw = a_old.copy(), d.F[W].copy()
        inner(Kw, d.y[W], d.Cb[W], aw, Fw, d.QD[W], tol, min(INNER_STEPS * q, limit - steps), nu, out)
        if out[1] == 0:
            if keep.size:  # the kept half and the new violators hold no violating pair: select afresh
                W = W[:0]
                continue
            converged = False  # not even the maximal violators can move (round-off at tol): as good as it gets
            break
        steps += int(out[1])
        nonpsd += int(out[2])
        outer += 1
        coef = (aw - a_old) * d.y[W]
        nz = np.flatnonzero(coef)
        d.alpha[W] = aw
        below, above = aw < d.Cb[W], aw > 0
        d.side[W] = np.where(d.y[W] > 0, np.where(below, _UP, 0) | np.where(above, _LOW, 0),
                             np.where(above, _UP, 0) | np.where(below, _LOW, 0))
        update(d.F, c.cache, slots[nz], coef[nz])
        d.st[_S_ITER] = steps
        bar.update(steps, objective=d.objective, rows=int(d.st[_S_ROWS]), outer=outer)
        if observer is not None:
            observer("SMO", steps, limit)
    bar.close()
    rho, r = _rho_nu(d.y, d.F, d.alpha, d.Cb) if nu else (_rho(d.y, d.F, d.alpha, d.Cb), 0.0)
    return SMOResult(d.alpha, rho, d.objective(), steps, converged, int(d.st[_S_ROWS]), nonpsd, r=r)
