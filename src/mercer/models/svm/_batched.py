"""A batched working-set solver for LIBSVM's general dual (two-level decomposition, as oneDAL's and
ThunderSVM's "thunder" solvers).

Solves the problem of :func:`~mercer.models.svm._smo.solve_smo` (C-SVC, epsilon-SVR, and with
``nu=True`` LIBSVM's Solver_NU: nu-SVC, nu-SVR, the one-class SVM) by an outer loop over working
sets of ``q`` variables:

1. **Selection.** The ``q / 2`` newest members of the previous working set stay (oneDAL's
   ``copyLastToFirst``, ThunderSVM's alternating halves; their rows stay cached); the
   other half is filled with the most violating variables not in it, alternately the largest
   ``F = -y G`` on I_up and the smallest on I_low (Keerthi's maximal violators, first order; the
   pairs inside the working set are then chosen by second-order WSS3). The maximal violation over
   *all* variables, ``max_{I_up} F - min_{I_low} F``, is LIBSVM's stopping quantity: the solve
   stops when it is below ``tol`` (LIBSVM's rule, so the solution is LIBSVM's to within what ``tol``
   resolves: decision values to ~2e-3 of their range and the support set up to borderline vectors
   at tol = 1e-3; the same support set and coefficients to 1e-5 at tol = 1e-7). Solver_NU's sets
   are pairs of one sign class at a time, the more violating class first.
2. **Block.** The set's ``q x q`` kernel block is computed on its own where rows against a few
   columns are cheap (RBF rows at few features, computed in the compiled loop by the SMO's
   :func:`~mercer.models.svm._smo._rbf_band`; dense RBF products); else it is read from the set's
   cached rows.
3. **Inner SMO** (compiled, :func:`_inner`): WSS3 pairs on the block, until its own violation is
   below ``max(tol, first violation / 10)`` or ``100 q`` iterations (oneDAL's and ThunderSVM's
   local stopping rule).
4. **Gradient.** ``F -= K[:, W] (y dalpha)_W`` over the active variables, from the kernel rows of
   the variables the inner solve moved (typically a fraction of the set): looked up in an
   LRU cache of float32 rows (LIBSVM's, sized by the caller from the memory plan), the missing
   ones computed in one call (in-loop RBF rows on every core, straight into the cache; or the
   caller's ``rows(idx, cols)``: the kernel classes / block engine, several calls when one would
   pass ``rows_per_call``); the float32 rows summed in float64 (compiled, bands of variables in
   parallel).
5. **Shrinking** (LIBSVM's, ``shrinking=True``). Each outer iteration LIBSVM's rule marks the
   variables at a bound that cannot join a violating pair; once they are :data:`SHRINK_MIN` of the
   active ones, the active problem is made smaller: the selection, the gradient update and the
   rows (and the cache's rows: the cache holds more of the narrower rows) run on the rest. The
   shrunk variables' gradients are brought up to date (LIBSVM's reconstruction) when the
   violation first falls below ``10 tol`` and when the active problem has converged: each shrunk
   variable's ``F`` moves by ``-K[t, moved] (y dalpha)_moved``, the change of the multipliers
   since it was shrunk (kernel rows of the moved variables against the shrunk ones; LIBSVM
   keeps ``G_bar`` instead), then every variable is active again and the solve goes on until the
   violation over all of them is below ``tol``.

Each outer iteration returns to Python: a Ctrl-C is raised between two of them (the inner solve is
bounded by ``100 q^2`` work), progress and :func:`~mercer.linalg.observe_blocks` observers are
updated. ``rho`` (and Solver_NU's ``r``) come from the final gradient by LIBSVM's formulas.

In-loop RBF rows are computed in float32 where the cache is float32 and ``tol`` is at least
:data:`F32_ROWS_TOL` (their squared distances then carry ~5e-7 relative error, kernel values ~2e-7
absolute, three times the cache's own rounding and far below what such a ``tol`` resolves; timings
in benchmarks/results/svm/history/batchshrink-crossover.md); else in the data's precision, rounded to the
cache's as LIBSVM's (float32 rows moved the diabetes SVR's dual coefficients by 9e-5 at tol = 1e-7,
where LIBSVM's are matched to 1e-5).

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
from ._smo import (_LOW, _S_ITER, _S_MAXITER, _S_ROWS, _UP, TAU, SMOResult, _pair_step, _rbf_band, _rho, _rho_nu,
                   _set_side, _start, _warm_start)

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
    """The compiled function ``name``, ``prange`` being numba's and the SMO's pieces (its pair step,
    :func:`~mercer.models.svm._smo._pair_step`, and its in-loop RBF band) their compiled ones when the
    module compiles. (numba's on-disk cache of :func:`_inner` is keyed on this file only: after editing
    ``_pair_step`` alone, delete this module's ``__pycache__/_batched.*.nb*`` files.)"""
    global prange, _pair_step, _set_side, _rbf_band
    if prange is range:
        from numba import prange as numba_prange

        _pair_step, _set_side, _rbf_band = _smo._jit("_pair_step"), _smo._jit("_set_side"), _smo._jit("_rbf_band")
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


@_jit.mark(parallel=True)
def _fill_rows(XT, w, dest, slots, scratch):
    """``dest[slots[r], t] = exp(-|x_r - XT[:, t]|^2)`` for ``t < w``, the row's features ``x_r`` in
    column ``w + r`` of ``XT`` (the SMO's in-loop RBF band, each row on one thread, the rows on
    ``scratch.shape[0] / 3`` threads)."""
    bands = scratch.shape[0] // 3
    m = slots.shape[0]
    for b in prange(bands):
        for r in range(b, m, bands):
            _rbf_band(XT, w + r, dest[slots[r]], scratch[3 * b:3 * b + 3], 0, w)


@_jit.mark
def _move_rows(flat, order, old_w, new_w, keep):
    """Row ``order[j]`` of width ``old_w`` (ascending) restricted to columns ``keep`` (ascending)
    becomes row ``j`` of width ``new_w``: in place, each entry read before it can be overwritten
    (its new place, ``j new_w + k``, is at or before its old one, ``order[j] old_w + keep[k]``)."""
    for j in range(order.shape[0]):
        src = order[j] * old_w
        dst = j * new_w
        for k in range(keep.shape[0]):
            flat[dst + k] = flat[src + keep[k]]


class _RowSource:
    """Kernel rows of samples against a set of columns (samples, repeats allowed: SVR's two variables
    of a sample), written into rows of a float array: computed in the compiled loop from the RBF
    features (``features``, (d, n)) or fetched from ``rows(idx, cols)`` (``cols``: samples, None
    for all) ``per_call`` rows at a time."""

    def __init__(self, rows, features: np.ndarray | None, n: int, per_call: int):
        self.rows, self.XT, self.n, self.per_call = rows, features, n, max(1, per_call)
        if features is not None:
            bands = _smo._row_bands()
            self.scratch = np.empty((3 * bands, max(_smo._CHUNK, features.shape[0])), dtype=features.dtype)

    def on(self, cols: np.ndarray) -> None:
        """Rows from now on hold these columns (samples)."""
        self.w = cols.shape[0]
        if self.XT is not None:  # the columns' features, then room for a call's rows' own
            self.buf = np.empty((self.XT.shape[0], self.w + self.per_call), dtype=self.XT.dtype)
            self.buf[:, :self.w] = self.XT[:, cols]
            return
        self.ucols, self.inv = np.unique(cols, return_inverse=True)
        self.full = self.ucols.shape[0] == self.n  # every sample (then inv maps them to the columns)
        self.plain = self.full and np.array_equal(self.inv, np.arange(self.w))

    def fill(self, samples: np.ndarray, dest: np.ndarray, slots: np.ndarray) -> None:
        """``dest[slots[r]]`` = row of ``samples[r]`` against the columns."""
        for s0 in range(0, samples.shape[0], self.per_call):  # a Ctrl-C is heard between calls
            part, sl = samples[s0:s0 + self.per_call], slots[s0:s0 + self.per_call]
            if self.XT is not None:
                self.buf[:, self.w:self.w + part.shape[0]] = self.XT[:, part]
                _compiled("_fill_rows")(self.buf, self.w, dest, sl, self.scratch)
                continue
            block = np.asarray(self.rows(part, None if self.full else self.ucols))
            dest[sl] = block if self.plain else block[:, self.inv]


class _Block:
    """The working set's ``q x q`` kernel block, computed apart from the rows (a fraction of their
    cost) where rows against a few columns are cheap (in-loop RBF rows, or ``rows.few_columns``):
    full rows are then computed, or looked up, only for the variables the inner solve moved."""

    def __init__(self, rows, features, q: int, n: int):
        self.src = _RowSource(rows, features, n, q)
        self.out = np.empty(q * q, dtype=np.float32)

    def square(self, samples: np.ndarray) -> np.ndarray:
        """``K[samples][:, samples]`` in float64, its entries rounded to float32 as the cached rows'."""
        uniq, where = np.unique(samples, return_inverse=True)
        k = uniq.shape[0]
        self.src.on(uniq)
        dest = self.out[:k * k].reshape(k, k)
        self.src.fill(uniq, dest, np.arange(k))
        return dest[np.ix_(where, where)].astype(np.float64)


#: Smallest ``tol`` at which in-loop RBF rows of float64 data are computed in float32 (see the
#: module's docstring).
F32_ROWS_TOL = 1e-5
#: Fraction of the active variables that LIBSVM's shrinking rule must take out before the active
#: problem is made smaller (its arrays, row cache and row columns rebuilt on the rest).
SHRINK_MIN = 0.1
#: Cached rows carried over when the active problem is made smaller, per working-set member (the
#: most recently used ones: the kept half's and those likely to recur).
CARRY_ROWS = 2


class _Cache:
    """LRU cache of kernel rows of samples against the active variables' samples, in one buffer of
    ``capacity`` entries (float32) seen as ``(slots, width)``: ``slot_of[s]`` is sample ``s``'s slot
    (``-1``: not cached, ``_EVICTED``: cached before). Fresh slots (pages not touched yet) are taken
    up to ``grow_from`` slots, then only for rows that recur (were evicted before), as the SMO's cache
    (page faults cost about what a low-d row does, and most rows are not used again)."""

    def __init__(self, n: int, capacity: int, width: int, dtype, grow_from: int):
        import mmap

        self.dtype = np.dtype(dtype)
        self.capacity = int(capacity)
        self.flat = np.frombuffer(mmap.mmap(-1, max(1, self.capacity) * self.dtype.itemsize), dtype=self.dtype,
                                  count=self.capacity)
        self.slot_of = np.full(n, -1, dtype=np.int64)
        self.grow_from = grow_from
        self.touched = 0  # entries of the buffer written at least once
        self.clock = 0
        self.rows = 0  # rows computed
        self.reset(width)

    def reset(self, width: int) -> None:
        """Empty, rows of ``width`` entries."""
        self.width = max(1, int(width))
        n_slots = int(min(self.slot_of.shape[0], self.capacity // self.width))
        self.cache = self.flat[:n_slots * self.width].reshape(n_slots, self.width)
        self.slot_of[self.slot_of >= 0] = -1
        self.owner = np.full(n_slots, -1, dtype=np.int64)
        self.last_used = np.zeros(n_slots, dtype=np.int64)
        self.used = 0

    def lookup(self, samples: np.ndarray, source: _RowSource) -> np.ndarray:
        """Slots of ``samples`` (distinct), the missing rows computed; every one of them becomes the
        most recently used (the others are evicted first)."""
        slots = self.slot_of[samples]
        self.clock += 1
        self.last_used[slots[slots >= 0]] = self.clock
        miss = np.flatnonzero(slots < 0)
        if miss.size:
            new = self._take(samples[miss])
            source.fill(samples[miss], self.cache, new)
            self.rows += miss.size
            slots[miss] = new
        return slots

    def _take(self, samples: np.ndarray) -> np.ndarray:
        m, n_slots = samples.shape[0], self.owner.shape[0]
        touched_slots = self.touched // self.width
        recur = int(np.count_nonzero(self.slot_of[samples] == -2))
        free = max(self.grow_from, touched_slots, self.used + recur) - self.used
        take = max(0, min(m, n_slots - self.used, free))
        slots = np.arange(self.used, self.used + take, dtype=np.int64)
        self.used += take
        self.touched = max(self.touched, self.used * self.width)
        if take < m:  # the least recently used rows (the set's own were just made the most recent)
            victims = np.argpartition(self.last_used[:self.used - take], m - take - 1)[:m - take]
            self.slot_of[self.owner[victims]] = -2
            slots = np.concatenate([slots, victims])
        self.owner[slots] = samples
        self.slot_of[samples] = slots
        self.last_used[slots] = self.clock
        return slots

    def narrow(self, keep: np.ndarray, carry: int) -> None:
        """Rows of the columns ``keep`` (positions, ascending) only: the ``carry`` most recently
        used rows are moved into the narrower layout, the others dropped."""
        old_w, new_w = self.width, max(1, keep.shape[0])
        order = np.argsort(-self.last_used[:self.used], kind="stable")[:carry]
        order = np.sort(order)  # ascending slots: each row's new place lies at or before its old one
        samples, lu = self.owner[order].copy(), self.last_used[order].copy()
        if order.size:
            _compiled("_move_rows")(self.flat, order, old_w, new_w, keep)
        self.reset(keep.shape[0])
        m = order.shape[0]
        self.owner[:m], self.last_used[:m], self.used = samples, lu, m
        self.slot_of[samples] = np.arange(m)


def _shrinkable(F, side, y, nu: bool) -> np.ndarray:
    """LIBSVM's be_shrunk on every variable (Solver_NU's per sign class): a variable at a bound that
    cannot be the other member of a violating pair."""
    up = np.where(side & _UP, F, -np.inf)
    low = np.where(side & _LOW, -F, -np.inf)
    if nu:
        pos = y > 0
        g1 = np.where(pos, up[pos].max(initial=-np.inf), up[~pos].max(initial=-np.inf))
        g2 = np.where(pos, low[pos].max(initial=-np.inf), low[~pos].max(initial=-np.inf))
    else:
        g1, g2 = up.max(), low.max()
    return ((side == _UP) & (-F > g2)) | ((side == _LOW) & (F > g1))


def solve_batched(rows: Callable[..., np.ndarray], diag: np.ndarray, y: np.ndarray, Cb: np.ndarray, *,
                  q: int, cache_rows: int, cache_dtype=np.float32, tol: float = 1e-3, max_iter: int = -1,
                  p: np.ndarray | None = None, alpha0: np.ndarray | None = None, rmap: np.ndarray | None = None,
                  nu: bool = False, warm_batch: int = 64, rows_per_call: int | None = None, shrinking: bool = True,
                  features: np.ndarray | None = None) -> SMOResult:
    """Solve LIBSVM's general dual (arguments as :func:`~mercer.models.svm._smo.solve_smo`) with
    working sets of ``q`` variables (even, >= 2) and an LRU cache of ``cache_rows`` kernel rows' worth
    of entries (at least ``2 q`` full rows). ``max_iter`` counts inner pair steps, as SMO's
    iterations; ``-1``: LIBSVM's limit ``max(10^7, 100 l)``.

    ``rows(idx, cols=None)``: kernel rows of samples ``idx`` against samples ``cols`` (None: all),
    at most ``rows_per_call`` rows per call (the memory of one product; a Ctrl-C is heard between
    calls). ``features``: the RBF features (as ``solve_smo``'s): rows are then computed in the
    compiled loop, straight into the cache (``rows`` only for the nu duals' start). ``shrinking``:
    LIBSVM's shrinking (see the module's docstring)."""
    n = np.asarray(diag).shape[0]
    rm = np.arange(len(y), dtype=np.int64) if rmap is None else np.ascontiguousarray(rmap, dtype=np.int64)
    qd = np.asarray(diag, dtype=np.float64)[rm]
    d = _start(y, Cb, qd, shrinking=False, max_iter=max_iter, p=p, rmap=rm)
    if alpha0 is not None:
        _warm_start(d, np.asarray(alpha0, dtype=np.float64), rows, max(1, warm_batch), cache_dtype)
    l_vars = d.y.shape[0]
    q = int(max(2, min(q, l_vars)))
    half = q // 2
    per_call = q if rows_per_call is None else max(1, int(rows_per_call))
    if features is not None:  # float32 distances where the cache is float32 and tol far above their error
        f32 = np.dtype(cache_dtype) == np.float32 and tol >= F32_ROWS_TOL
        features = np.ascontiguousarray(features, dtype=np.float32 if f32 else None)
    source = _RowSource(rows, features, n, per_call)
    source.on(rm)
    block = _Block(rows, source.XT, q, n) if features is not None or getattr(rows, "few_columns", False) else None
    c = _Cache(n, max(cache_rows, 2 * q) * l_vars, l_vars, cache_dtype, grow_from=8 * q)
    limit = int(d.st[_S_MAXITER])
    out = np.zeros(3)
    steps = nonpsd = outer = 0
    converged = True
    inner, update = _compiled("_inner"), _compiled("_update")
    observer = current_observer()
    bar = task("batched SMO", unit="it")
    tol = float(tol)
    # the active problem: variables act (all until shrinking), their arrays (copies of d's)
    act = np.arange(l_vars, dtype=np.int64)
    y_a, Cb_a, QD_a, a_a, F_a, side_a = d.y, d.Cb, d.QD, d.alpha, d.F, d.side  # d's own while all are active
    epochs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (shrunk, then active, their alpha then)
    unshrunk = False
    W = np.empty(0, dtype=np.int64)  # the working set (positions in act), oldest half first

    def narrow(keep_mask):
        nonlocal act, y_a, Cb_a, QD_a, a_a, F_a, side_a, W
        keep = np.flatnonzero(keep_mask)
        d.F[act], d.alpha[act], d.side[act] = F_a, a_a, side_a
        epochs.append((act[~keep_mask], act[keep], d.alpha[act[keep]].copy()))
        pos = np.full(act.shape[0], -1, dtype=np.int64)
        pos[keep] = np.arange(keep.shape[0])
        W = pos[W][pos[W] >= 0]
        act = act[keep]
        y_a, Cb_a, QD_a, a_a, F_a, side_a = d.y[act], d.Cb[act], d.QD[act], d.alpha[act], d.F[act], d.side[act]
        c.narrow(keep, CARRY_ROWS * q)
        source.on(rm[act])

    def widen():
        """LIBSVM's gradient reconstruction: each shrunk variable's F moved by the change of the
        multipliers since it was shrunk (``F_t -= sum_s y_s K_ts dalpha_s``), every variable active."""
        nonlocal act, y_a, Cb_a, QD_a, a_a, F_a, side_a, W
        d.F[act], d.alpha[act], d.side[act] = F_a, a_a, side_a
        for shrunk, later, before in epochs:
            moved = later[d.alpha[later] != before]
            if moved.size == 0 or shrunk.size == 0:
                continue
            coef = (d.alpha[moved] - before[d.alpha[later] != before]) * d.y[moved]
            source.on(rm[shrunk])
            m = int(max(1, min(per_call, c.capacity // shrunk.size)))
            block = c.flat[:m * shrunk.size].reshape(m, shrunk.size)  # the cache's buffer as scratch
            Fs = d.F[shrunk]
            for s0 in range(0, moved.size, m):
                part = moved[s0:s0 + m]
                source.fill(rm[part], block, np.arange(part.size))
                update(Fs, block, np.arange(part.size), coef[s0:s0 + m])
            d.F[shrunk] = Fs
            c.touched = max(c.touched, m * shrunk.size)
        epochs.clear()
        act = np.arange(l_vars, dtype=np.int64)
        y_a, Cb_a, QD_a, a_a, F_a, side_a = d.y, d.Cb, d.QD, d.alpha, d.F, d.side
        W = W[:0]
        source.on(rm)
        c.reset(l_vars)

    while True:
        viol = _violation(F_a, side_a, y_a, nu)
        if viol < tol:
            if act.shape[0] == l_vars:
                break
            widen()  # LIBSVM's final check on every variable
            continue
        if steps >= limit:
            converged = False
            break
        if shrinking:
            if not unshrunk and viol <= 10 * tol:  # LIBSVM's one reconstruction near the end
                unshrunk = True
                if act.shape[0] < l_vars:
                    widen()
                    continue
            out_mask = _shrinkable(F_a, side_a, y_a, nu)
            out_mask[W[W.size - half:] if outer else W[:0]] = False
            if np.count_nonzero(out_mask) >= SHRINK_MIN * act.shape[0]:
                narrow(~out_mask)
        keep = W[W.size - half:] if outer else W[:0]  # the newest half stays
        new = _select(F_a, side_a, y_a, keep, q - keep.size, nu)
        if new.size == 0:
            if keep.size:  # the kept half holds every candidate (an active problem of about q): afresh
                W = W[:0]
                continue
            break
        W = np.concatenate([keep, new])
        if block is not None:
            Kw = block.square(rm[act[W]])
        else:  # the set's rows, then its block from them
            samples, where = np.unique(rm[act[W]], return_inverse=True)
            w_slots = c.lookup(samples, source)[where]
            Kw = c.cache[np.ix_(w_slots, W)].astype(np.float64)
        a_old = a_a[W].copy()
        aw, Fw = a_old.copy(), F_a[W].copy()
        inner(Kw, y_a[W], Cb_a[W], aw, Fw, QD_a[W], tol, min(INNER_STEPS * q, limit - steps), nu, out)
        if out[1] == 0:
            if keep.size:  # the kept half and the new violators hold no violating pair: select afresh
                W = W[:0]
                continue
            converged = False  # not even the maximal violators can move (round-off at tol): as good as it gets
            break
        steps += int(out[1])
        nonpsd += int(out[2])
        outer += 1
        coef = (aw - a_old) * y_a[W]
        nz = np.flatnonzero(coef)
        a_a[W] = aw
        below, above = aw < Cb_a[W], aw > 0
        yw = y_a[W]
        side_a[W] = np.where(yw > 0, np.where(below, _UP, 0) | np.where(above, _LOW, 0),
                             np.where(above, _UP, 0) | np.where(below, _LOW, 0))
        if block is not None:
            samples, where = np.unique(rm[act[W[nz]]], return_inverse=True)
            update(F_a, c.cache, c.lookup(samples, source)[where], coef[nz])
        else:
            update(F_a, c.cache, w_slots[nz], coef[nz])
        d.st[_S_ITER] = steps
        bar.update(steps, rows=c.rows, outer=outer, active=act.shape[0])
        if observer is not None:
            observer("SMO", steps, limit)
    if act.shape[0] < l_vars:  # stopped early (max_iter): every gradient brought up to date
        widen()
    bar.close()
    d.st[_S_ROWS] = c.rows
    rho, r = _rho_nu(d.y, d.F, d.alpha, d.Cb) if nu else (_rho(d.y, d.F, d.alpha, d.Cb), 0.0)
    return SMOResult(d.alpha, rho, d.objective(), steps, converged, c.rows, nonpsd, r=r)
