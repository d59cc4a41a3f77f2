"""Sequential minimal optimisation for the SVM duals, as in LIBSVM.

Solves LIBSVM's general problem :math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha + p^T \\alpha` subject to
:math:`0 \\le \\alpha_t \\le C_t` and :math:`y^T \\alpha = \\delta`, with :math:`Q_{st} = y_s y_t K_{r(s) r(t)}`
over ``l`` variables that read the kernel rows of ``n`` samples through a row map ``r`` (C-SVC:
``p = -1``, ``r`` the identity; epsilon-SVR: ``l = 2n``, ``r(t) = t mod n``), by SMO with the
second-order working-set selection of Fan, Chen & Lin (2005, "WSS3"), LIBSVM's shrinking heuristic
with gradient reconstruction, and LIBSVM's ``tau`` fix for non-positive curvature (so that the
iteration terminates for indefinite kernels too). With ``nu=True`` it is LIBSVM's Solver_NU (the
nu-SVC and nu-SVR duals, with a second equality constraint): pairs within each sign class, its
shrinking, and its ``rho`` and ``r``.

The sequential loop is compiled with numba, imported on the first solve (its import costs ~0.15 s,
which ``import mercer`` does not pay). Kernel rows live in an LRU cache of full-length rows (a 2-D
array, float32 as LIBSVM's for the estimators). Where the rows come from:

- RBF at few features (``features`` given): the loop computes a missing row itself, one row when
  it is needed (a vectorised exponential, :func:`_exp_chunk64`): at low d a row costs less than
  the return to Python that would fetch it, and no prefetched row is wasted.
- any other kernel: the loop returns to Python, which computes the missing row *and a batch of
  likely next ones* (the current top violators) in one BLAS-sized kernel block, then resumes.

Per iteration the loop makes two passes over the active samples, as LIBSVM: the choice of the
second member of the pair (WSS3), and the gradient update, which also finds the next iteration's
first member (LIBSVM makes a separate pass for it). It keeps ``F = -y * G``, so that both
members are extremes of F on the sets I_up, I_low (bits of ``side``) with no sign branches,
and skips the division of WSS3 for samples that cannot be the new minimum; these reformulations
are exact (the iterates, hence iteration counts and support vectors, are those of the plain
formulas). A cached row holds one entry per sample, as LIBSVM's (SVR_Q): variable t reads entry
``r(t)``, so SVR's two variables of a sample read one entry of one row. Gradient reconstruction
after shrinking uses the free samples' cached rows, as LIBSVM's, and a blocked kernel product (by
the caller) for the others.
"""

from __future__ import annotations

import logging
import mmap
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..._jit import LazyJit, numba_threads
from ..._progress import task
from ...linalg import current_observer

__all__ = ["SMOResult", "solve_smo"]

log = logging.getLogger(__name__)

TAU = 1e-12
#: Curvature ``K_ii + K_jj - 2 K_ij`` below ``-_NONPSD_RTOL (K_ii + K_jj)`` counts as a non-PSD step
#: (float32 cached rows round ``K_ij`` at ~6e-8 relative). Zero curvature is a singular PSD Gram
#: (duplicate points), not an indefinite one: LIBSVM's tau fix applies, no warning.
_NONPSD_RTOL = 1e-6
# return codes of the compiled loop
_CONVERGED, _NEED_ROW, _MAX_ITER, _RECONSTRUCT, _RECONSTRUCT_FINAL, _PAUSE = 0, 1, 2, 3, 4, 5
# integer state slots
(_S_ACTIVE, _S_ITER, _S_COUNTER, _S_UNSHRINK, _S_CLOCK, _S_MAXITER, _S_SHRINKING, _S_PENDING, _S_NONPSD,
 _S_USED, _S_ROWS, _S_WORK_MAX, _S_NU, _S_GROWN, _S_FRESH, _S_IMAX, _S_IMAXN) = range(17)
_N_STATE = 17
#: ``slot_of[i]`` of a row that was cached and evicted (``-1``: never cached).
_EVICTED = -2
#: A clock value no slot reaches (slots excluded from eviction).
_NEVER = np.iinfo(np.int64).max
#: Slots the row cache fills before it evicts, when the loop computes its rows itself (RBF at few
#: features); past them it takes a fresh slot only for a row it had evicted (a row that recurs),
#: up to its capacity. A fresh slot's first touch (page faults, ~1-4 us a page) costs about what an
#: in-loop row costs at d = 9, and most rows are never used again: protein (d = 9) at n = 41,157
#: computed 25,316 rows with 33,000 slots, 27,359 with 760 (same iterates), while page faults
#: took a third of the fit's CPU (benchmarks/results/svm/history/smo-cache-growth.md).
GROW_FROM = 1024
#: The active set's indices are unsigned: numba then indexes ``F[t]``, ``K_i[t]``, ... without the
#: negative-index wraparound it adds for signed ones (the loop's two passes index through it).
_ACTIVE_DTYPE = np.uint32
#: Work (sample visits: an iteration counts its active samples plus ``_ITER_WORK``, an update of
#: ``G_bar`` ``n``, an in-loop kernel row ``n * (d + 8) / 4``: an entry, d multiply-adds and an
#: exponential, takes about the time of (d + 8) / 4 visits) after which the compiled loop returns to
#: Python (``_PAUSE``) so that a Ctrl-C, an :func:`~mercer.linalg.observe_blocks` observer and a
#: progress bar are heard; the next call resumes where it stopped (same iterates, bit for bit).
#: A visit costs ~1 ns while the active set is the whole training set (sequential rows), up to
#: ~35 ns after shrinking (scattered entries of rows out of the CPU caches: 800 active of 10,000
#: samples, ~100 us per iteration on a loaded machine), so 2^22 visits are 4-150 ms; a return
#: costs the call's dispatch (its arguments checked and unboxed), not a pass over the active set
#: (the maximal violator is kept across it: ``_S_FRESH``, ``_S_IMAX``; the nu solver's second, ``_S_IMAXN``).
PAUSE_WORK = 4_194_304  # 2^22 sample visits (a count of work, not bytes)
#: Seconds a call should last: the work per call is lowered from ``PAUSE_WORK`` when calls take
#: longer (a loaded machine), so that Ctrl-C is heard within ~0.1 s.
_PAUSE_S = 0.05
#: What an iteration counts besides its active samples.
_ITER_WORK = 2**8


#: the functions of the compiled loop (``_run`` calls the others), compiled on the first solve
prange = range  # numba's prange once compiled (the parallel row's bands); plain range before


class _LazyJit(LazyJit):
    """:class:`~mercer._jit.LazyJit` that makes ``prange`` numba's before the module compiles."""

    def __call__(self, name: str):
        global prange
        if prange is range:
            from numba import prange as numba_prange

            prange = numba_prange
        return super().__call__(name)


_jit = _LazyJit(globals())
#: Floating-point licence of the in-loop exponential: contraction into FMAs and no NaN/inf checks,
#: but no reassociation (``_exp_chunk`` rounds with ``x + 1.5 * 2**52 - 1.5 * 2**52``, which
#: reassociation would fold away).
_EXP_FLAGS = {"nnan", "ninf", "nsz", "contract", "arcp"}


# -- kernel rows computed inside the loop (RBF, few features) ---------------------------------------
# exp(x) for x <= 0, vectorised: x = k ln 2 + r with |r| <= ln 2 / 2 (Cody-Waite: ln 2 in two parts),
# exp(r) by its Taylor polynomial (degree 11 in float64, 7 in float32: truncation below 1e-14 and
# 5e-9 relative), times 2**k built in the exponent bits. x is clamped at -708 in float64 (exp is
# then 0 in the float32 cache); in float32, entries below exp(-87) (near the smallest normal
# float32) are 0.
_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_ROUND = 6755399441055744.0  # 1.5 * 2**52: (x + _ROUND) - _ROUND is x rounded to an integer
_X_MIN = -708.0
_F = np.float32
_LOG2E32, _LN2_HI32, _LN2_LO32 = _F(1.44269504), _F(0.693359375), _F(-2.12194440e-4)
_ROUND32, _X_MIN32, _ZERO32, _ONE32 = _F(12582912.0), _F(-87.0), _F(0.0), _F(1.0)
_P2, _P3, _P4, _P5, _P6, _P7 = _F(1 / 2), _F(1 / 6), _F(1 / 24), _F(1 / 120), _F(1 / 720), _F(1 / 5040)
#: Entries per chunk of an in-loop kernel row (its scratch stays in the L1 cache).
_CHUNK = 512


@_jit.mark(fastmath=_EXP_FLAGS)
def _exp_chunk64(v, buf):
    """``v[:] = exp(-v)`` for ``v >= 0`` (float64); ``buf``: scratch of ``v``'s length."""
    m = v.shape[0]
    bits = buf.view(np.int64)
    for t in range(m):
        x = max(-v[t], _X_MIN)
        kd = x * _LOG2E + _ROUND
        buf[t] = kd
        k = kd - _ROUND
        r = x - k * _LN2_HI - k * _LN2_LO
        v[t] = 1.0 + r * (1.0 + r * (0.5 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (1 / 720 + r * (
            1 / 5040 + r * (1 / 40320 + r * (1 / 362880 + r * (1 / 3628800 + r * (1 / 39916800)))))))))))
    for t in range(m):
        bits[t] = (bits[t] + 1023) << 52  # the low bits of kd hold k: 2**k
    for t in range(m):
        v[t] *= buf[t]


@_jit.mark(fastmath=_EXP_FLAGS)
def _exp_chunk32(v, buf):
    """``v[:] = exp(-v)`` for ``v >= 0`` (float32, every constant float32); ``buf``: scratch."""
    m = v.shape[0]
    bits = buf.view(np.int32)
    for t in range(m):
        xo = -v[t]
        x = max(xo, _X_MIN32)
        kd = x * _LOG2E32 + _ROUND32
        buf[t] = kd
        k = kd - _ROUND32
        r = x - k * _LN2_HI32 - k * _LN2_LO32
        p = _ONE32 + r * (_ONE32 + r * (_P2 + r * (_P3 + r * (_P4 + r * (_P5 + r * (_P6 + r * _P7))))))
        v[t] = p if xo >= _X_MIN32 else _ZERO32
    for t in range(m):
        bits[t] = (bits[t] + 127) << 23
    for t in range(m):
        v[t] *= buf[t]


#: Least work (entries times ``d + 8``) of an in-loop row computed in bands on several threads
#: (~0.4 ms on one): a parallel region's wake-up of its sleeping threads (mercer._threads) costs
#: ~50 us here, so that a row of 41,157 entries at d = 9 (~110 us) took as long in two bands as on
#: one thread, at best of 200, and one of 200,000 (~0.9 ms) 0.5-0.6 of it
#: (benchmarks/results/svm/history/smo-cache-growth.md). Passes over the active set (50-250 us at
#: 40,000 variables) gained nothing in bands either; they stay on one thread.
_PAR_MIN_WORK = 2_097_152  # 2^21 (a count of work, not bytes)


@_jit.mark
def _rbf_row(XT, i, out, scratch):
    """``out[t] = exp(-|x_i - x_t|^2)`` for every sample t, the features ``XT`` (d, n) scaled by
    sqrt(gamma) beforehand; chunks of ``scratch.shape[1]`` entries. ``scratch``: (3 b, chunk), the
    scratch of ``b`` bands of samples computed on ``b`` threads (one band when the row is small).
    Every entry is computed as by one thread (the same operations on it): the same row, bit for bit."""
    d, n = XT.shape
    bands = scratch.shape[0] // 3
    if bands > 1 and n * (d + 8) >= _PAR_MIN_WORK:
        _rbf_bands(XT, i, out, scratch, bands)
    else:
        _rbf_band(XT, i, out, scratch[:3], 0, n)


@_jit.mark(parallel=True)
def _rbf_bands(XT, i, out, scratch, bands):
    """:func:`_rbf_band` on ``bands`` bands of samples (whole chunks), in parallel."""
    n = XT.shape[1]
    B = scratch.shape[1]
    width = ((n + bands - 1) // bands + B - 1) // B * B
    for b in prange(bands):
        lo = b * width
        hi = min(n, lo + width)
        if lo < hi:
            _rbf_band(XT, i, out, scratch[3 * b:3 * b + 3], lo, hi)


@_jit.mark(fastmath=_EXP_FLAGS)
def _rbf_band(XT, i, out, scratch, lo, hi):
    """``out[t] = exp(-|x_i - x_t|^2)`` for samples ``lo <= t < hi``, chunks of ``scratch.shape[1]``
    entries (``scratch``: (3, chunk))."""
    d = XT.shape[0]
    B = scratch.shape[1]
    xi = scratch[2]
    for k in range(d):
        xi[k] = XT[k, i]
    for s0 in range(lo, hi, B):
        m = min(B, hi - s0)
        acc = scratch[0, :m]
        for t in range(m):
            acc[t] = 0
        k = 0
        while k + 4 <= d:  # four features per sweep of acc (a quarter of its loads and stores)
            c0, c1, c2, c3 = xi[k], xi[k + 1], xi[k + 2], xi[k + 3]
            x0, x1, x2, x3 = XT[k, s0:s0 + m], XT[k + 1, s0:s0 + m], XT[k + 2, s0:s0 + m], XT[k + 3, s0:s0 + m]
            for t in range(m):  # the sums of the one-feature loop below, in its order
                a = acc[t]
                e = x0[t] - c0
                a += e * e
                e = x1[t] - c1
                a += e * e
                e = x2[t] - c2
                a += e * e
                e = x3[t] - c3
                a += e * e
                acc[t] = a
            k += 4
        while k < d:
            c = xi[k]
            xk = XT[k, s0:s0 + m]
            for t in range(m):
                diff = xk[t] - c
                acc[t] += diff * diff
            k += 1
        if XT.itemsize == 4:
            _exp_chunk32(acc, scratch[1, :m])
        else:
            _exp_chunk64(acc, scratch[1, :m])
        o = out[s0:s0 + m]
        for t in range(m):
            o[t] = acc[t]


@_jit.mark
def _new_slot(i, protect, slot_of, owner, last_used, st):
    """The cache slot for row ``i``: a never-used one while fewer than ``st[_S_GROWN]`` slots are in
    use, or when row ``i`` was evicted before (it recurs: the cache grows by one), while any is left;
    else the least recently used, never slot ``protect`` (the other row of the pair); advances the clock."""
    n_slots = owner.shape[0]
    s = st[_S_USED]
    if s < n_slots and (s < st[_S_GROWN] or slot_of[i] == _EVICTED):
        st[_S_USED] = s + 1
        st[_S_GROWN] = max(st[_S_GROWN], s + 1)
    else:
        used = s
        s = -1
        oldest = np.iinfo(np.int64).max
        for k in range(used):
            if k != protect and last_used[k] < oldest:
                oldest = last_used[k]
                s = k
        slot_of[owner[s]] = _EVICTED
    owner[s] = i
    slot_of[i] = s
    st[_S_ROWS] += 1
    st[_S_CLOCK] += 1
    last_used[s] = st[_S_CLOCK]
    return s


@_jit.mark
def _sample(rmap, t):
    """The sample of variable ``t`` (``rmap`` None: the identity, compiled away)."""
    return t if rmap is None else rmap[t]


@_jit.mark
def _row(i, protect, cache, slot_of, owner, last_used, st, XT, scratch):
    """Slot of kernel row ``i`` (a sample), computed here when missing and ``XT`` holds the features
    (RBF); -1 when missing and the caller must compute it."""
    s = slot_of[i]
    if s >= 0:
        return s
    if XT.shape[1] != slot_of.shape[0]:
        return -1
    s = _new_slot(i, protect, slot_of, owner, last_used, st)
    _rbf_row(XT, i, cache[s], scratch)
    return s


@_jit.mark
def _subtract_free_rows(F, coef, free, cols, cache, slot_of, owner, last_used, st, XT, scratch, done, start, rmap):
    """``F[cols] -= coef[r] * K[free[r], cols]`` for each row ``r >= start`` the cache holds (or,
    with in-loop rows, computes): LIBSVM's reconstruction from its kernel cache. ``done[r]``: row r
    was used. Returns the first row not visited: before ``free``'s end when ``st[_S_WORK_MAX]`` work
    was done (call again from there, to let a Ctrl-C be heard)."""
    n = slot_of.shape[0]
    row_work = n * (XT.shape[0] + 8) // 4
    work = 0
    for r in range(start, free.shape[0]):
        if work >= st[_S_WORK_MAX]:
            return r
        rows0 = st[_S_ROWS]
        s = _row(_sample(rmap, free[r]), -1, cache, slot_of, owner, last_used, st, XT, scratch)
        if s < 0:
            continue
        work += cols.shape[0] + (st[_S_ROWS] - rows0) * row_work
        done[r] = True
        row = cache[s]
        c = coef[r]
        for t in cols:
            F[t] -= c * row[_sample(rmap, t)]
    return free.shape[0]


# Order of the active set: LIBSVM's (its shrinking moves the last active sample into a shrunk one's
# place) or, with ``ascending`` (solve_smo), ascending (after shrinking, the samples that stay keep
# their order; a reconstruction makes it 0, 1, ..., l - 1 again): the two passes then read F, side
# and the kernel rows in address order, not scattered over arrays past the CPU caches (timings in
# benchmarks/results/svm/history/nusvr-ab.md and smo-ascending-libsvm-ties.md). The order decides
# only exact ties between candidates (the last one wins in LIBSVM). In ascending order C-SVC's and
# epsilon-SVR's loop keeps LIBSVM's iterates, ties included: it carries LIBSVM's order apart
# (``lorder``, ``lpos``: the Solver's swaps, made by _shrink) and breaks ties by it (_at_least,
# _at_most). The nu solver is always ascending and breaks ties by that order (its iterates are
# LIBSVM's but for exact ties, as on duplicated rows).

#: Bits of ``side[t]``: sample t can move up (Keerthi et al.'s I_up: y > 0 below C, or y < 0 above 0)
#: and down (I_low). The loop keeps ``F = -y * G``, so the most violating pair is the largest F on
#: I_up and the smallest on I_low, with no sign branches (``-y * G`` is exact: same iterates).
_UP, _LOW = 1, 2


@_jit.mark
def _set_side(t, y, alpha, Cb, side):
    below = alpha[t] < Cb[t]
    above = alpha[t] > 0
    if y[t] > 0:
        side[t] = (_UP if below else 0) | (_LOW if above else 0)
    else:
        side[t] = (_UP if above else 0) | (_LOW if below else 0)


@_jit.mark
def _pair_step(i, j, Kij, y, F, alpha, Cb, QD, side):
    """One SMO step on the pair ``(i, j)``, as LIBSVM's Solver::solve: the two-variable subproblem
    solved in closed form and clipped to the box ``[0, C]`` along ``y^T alpha = const``, with
    LIBSVM's ``tau`` for non-positive curvature ``QD_i + QD_j - 2 K_ij`` (``Kij``: ``K_ij``).
    Writes ``alpha[i], alpha[j]`` and their ``side``; returns ``(y_i dalpha_i, y_j dalpha_j,
    non_psd)``, ``non_psd``: the curvature was negative beyond round-off (zero is a singular PSD
    Gram: duplicate points). Shared by the SMO loop and the batched solver's inner SMO."""
    Ci = Cb[i]
    Cj = Cb[j]
    ai_old = alpha[i]
    aj_old = alpha[j]
    quad = QD[i] + QD[j] - 2.0 * Kij
    nonpsd = False
    if quad <= 0:
        nonpsd = quad < -_NONPSD_RTOL * (QD[i] + QD[j])
        quad = TAU
    ai = ai_old
    aj = aj_old
    if y[i] != y[j]:
        delta = (y[i] * F[i] + y[j] * F[j]) / quad  # (-G_i - G_j) / quad
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
        delta = (y[j] * F[j] - y[i] * F[i]) / quad  # (G_i - G_j) / quad
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
    _set_side(i, y, alpha, Cb, side)
    _set_side(j, y, alpha, Cb, side)
    return (ai - ai_old) * y[i], (aj - aj_old) * y[j], nonpsd


@_jit.mark
def _at_least(f, g, lpos, t, u):
    """Whether candidate ``t`` (value ``f``) takes the place of ``u`` (value ``g``, ``u < 0``: none yet)
    as the maximum: ``f >= g`` (the last of equal ones in active order) where ``lpos`` is None, else
    ties go to the later of the two in LIBSVM's order (``lpos``: each variable's position there).
    The None case compiles to the plain comparison (numba prunes the other branch)."""
    if lpos is None:
        return f >= g
    return f > g or (f == g and (u < 0 or lpos[t] > lpos[u]))


@_jit.mark
def _at_most(f, g, lpos, t, u):
    """:func:`_at_least` for a minimum."""
    if lpos is None:
        return f <= g
    return f < g or (f == g and (u < 0 or lpos[t] > lpos[u]))


@_jit.mark
def _max_up(F, side, active, n_active, lpos=None):
    """The largest ``F`` on I_up and its sample (the last of equal ones in LIBSVM's order: the
    largest ``lpos``; None: the last in active order)."""
    gmax = -np.inf
    imax = -1
    for k in range(n_active):
        t = active[k]
        f = F[t] if side[t] & _UP else -np.inf
        if _at_least(f, gmax, lpos, t, imax):
            gmax = f
            imax = t
    return gmax, imax


@_jit.mark
def _max_up_nu(F, y, side, active, n_active):
    """The largest ``F`` on I_up among the samples with ``y > 0`` and among those with ``y < 0``, and
    their samples (as :func:`_max_up`: the last of equal ones; a side with none: ``-inf``)."""
    gmaxp = -np.inf
    ip = -1
    gmaxn = -np.inf
    iN = -1
    for k in range(n_active):
        t = active[k]
        f = F[t] if side[t] & _UP else -np.inf
        if y[t] > 0:
            if f >= gmaxp:
                gmaxp = f
                ip = t
        elif f >= gmaxn:
            gmaxn = f
            iN = t
    return gmaxp, ip, gmaxn, iN


@_jit.mark
def _select(F, side, QD, cache, slot_of, owner, last_used, active, n_active, eps, st, need, XT, scratch,
            gmax, imax, rmap=None, lpos=None):
    """WSS3 (Fan, Chen & Lin 2005), given ``i = imax``, the maximal violator on I_up (value ``gmax``).
    Returns 0 with the pair (variables) in need[0], need[1]; 1 when optimal; 2 when the kernel row of
    sample need[0] is missing (need[1] = -1). ``rmap``: each variable's sample (None: the identity)."""
    if gmax == -np.inf:  # I_up is empty (imax is then a sample off I_up, or -1)
        return 1
    ri = _sample(rmap, imax)
    si = _row(ri, -1, cache, slot_of, owner, last_used, st, XT, scratch)
    if si < 0:
        need[0] = ri
        need[1] = -1
        return 2
    Ki = cache[si]
    qi = QD[imax]
    gmax2 = -np.inf
    jmin = -1
    obj_min = np.inf
    bound = 0.0  # -obj_min, less a margin: gd^2 / quad reaches it whenever -(gd^2 / quad) <= obj_min
    for k in range(n_active):
        # Branch-free (which side a sample is on is unpredictable) up to a test that few samples
        # pass, without the division; those that pass get LIBSVM's exact comparison.
        t = active[k]
        low = (side[t] & _LOW) != 0
        f = F[t]
        gmax2 = max(gmax2, -f if low else -np.inf)
        gd = gmax - f
        quad = qi + QD[t] - 2.0 * Ki[_sample(rmap, t)]
        quad = quad if quad > 0 else TAU
        g = gd if low & (gd > 0) else 0.0
        if g * g > bound * quad:
            od = -(gd * gd) / quad
            if _at_most(od, obj_min, lpos, t, jmin):
                jmin = t
                obj_min = od
                bound = -od * (1.0 - 1e-12)
    if gmax + gmax2 < eps or obj_min == np.inf:  # no candidate j (jmin is then a sample off I_low)
        return 1
    need[0] = imax
    need[1] = jmin
    return 0


@_jit.mark
def _select_nu(F, pos, side, QD, cache, slot_of, owner, last_used, active, n_active, eps, st, need, XT, scratch,
               gmaxp, ip, gmaxn, iN, rmap):
    """LIBSVM's Solver_NU working-set selection: WSS3 within each sign class (the nu dual has two
    equality constraints, so both members of a pair have the same y), given the maximal violators
    on I_up of each class (:func:`_max_up_nu`'s, or the update pass's). Returns as :func:`_select`;
    on a missing row, need[1] is the sample whose row must stay cached. ``pos``: ``y > 0`` per variable
    (1 byte each: the pass reads it, not y's 8). As :func:`_select`, the division is made only for the
    samples that can be the new minimum (the same choice as LIBSVM's)."""
    if gmaxp == -np.inf:  # no sample of that class on I_up (ip is then off I_up, or -1)
        ip = -1
    if gmaxn == -np.inf:
        iN = -1
    sp = -1
    if ip >= 0:
        sp = _row(_sample(rmap, ip), -1, cache, slot_of, owner, last_used, st, XT, scratch)
        if sp < 0:
            need[0] = _sample(rmap, ip)
            need[1] = -1
            return 2
    sn = -1
    if iN >= 0:
        sn = _row(_sample(rmap, iN), sp, cache, slot_of, owner, last_used, st, XT, scratch)
        if sn < 0:
            need[0] = _sample(rmap, iN)
            need[1] = _sample(rmap, ip) if ip >= 0 else -1
            return 2
    Kp = cache[max(sp, 0)]
    Kn = cache[max(sn, 0)]
    qp = QD[max(ip, 0)]
    qn = QD[max(iN, 0)]
    gmaxp2 = -np.inf
    gmaxn2 = -np.inf
    jmin = -1
    obj_min = np.inf
    bound = 0.0  # -obj_min, less a margin: gd^2 / quad reaches it whenever -(gd^2 / quad) <= obj_min
    for k in range(n_active):
        t = active[k]
        if side[t] & _LOW:
            f = F[t]
            if pos[t]:
                gmaxp2 = max(gmaxp2, -f)
                gd = gmaxp - f
                if gd > 0:
                    quad = qp + QD[t] - 2.0 * Kp[_sample(rmap, t)]
                    quad = quad if quad > 0 else TAU
                    if gd * gd > bound * quad:
                        od = -(gd * gd) / quad
                        if od <= obj_min:
                            jmin = t
                            obj_min = od
                            bound = -od * (1.0 - 1e-12)
            else:
                gmaxn2 = max(gmaxn2, -f)
                gd = gmaxn - f
                if gd > 0:
                    quad = qn + QD[t] - 2.0 * Kn[_sample(rmap, t)]
                    quad = quad if quad > 0 else TAU
                    if gd * gd > bound * quad:
                        od = -(gd * gd) / quad
                        if od <= obj_min:
                            jmin = t
                            obj_min = od
                            bound = -od * (1.0 - 1e-12)
    if max(gmaxp + gmaxp2, gmaxn + gmaxn2) < eps or jmin == -1:
        return 1
    need[0] = ip if pos[jmin] else iN
    need[1] = jmin
    return 0


@_jit.mark
def _shrink(F, side, active, st, eps, y, lorder=None, lpos=None):
    """LIBSVM's do_shrinking (Solver_NU's with ``st[_S_NU]``: the bounds per sign class). Returns
    True when the caller must reconstruct the gradient first. ``lorder`` / ``lpos`` (LIBSVM's
    Solver: its order of the variables and each one's position in it; None: ``active`` is that
    order): LIBSVM's swaps are made on them, and ``active`` becomes the variables that stay, in
    ascending order, then those that leave (see the note on the order above ``_UP``)."""
    n = F.shape[0]
    nu = st[_S_NU] == 1
    g1 = -np.inf  # max F on I_up (nu: of y > 0)
    g2 = -np.inf  # max -F on I_low
    g1n = -np.inf  # nu: the same for y < 0
    g2n = -np.inf
    na = st[_S_ACTIVE]
    for k in range(na):
        t = active[k]
        if nu and y[t] < 0:
            if side[t] & _UP and F[t] >= g1n:
                g1n = F[t]
            if side[t] & _LOW and -F[t] >= g2n:
                g2n = -F[t]
            continue
        if side[t] & _UP and F[t] >= g1:
            g1 = F[t]
        if side[t] & _LOW and -F[t] >= g2:
            g2 = -F[t]
    if st[_S_UNSHRINK] == 0 and max(g1 + g2, g1n + g2n) <= eps * 10:
        st[_S_UNSHRINK] = 1
        if na < n:
            return True
    # LIBSVM's Solver moves the last active sample into a shrunk one's place (its order decides ties,
    # and the SVC / SVR iterates follow LIBSVM's); the nu solver's samples that stay keep their order,
    # ascending (see the note on the order above _UP), those that leave go after them
    left = np.empty(na if nu else 0, dtype=active.dtype)
    kept = 0
    gone = 0
    k = 0
    if lorder is None:
        order = active
    else:
        order = active if nu else lorder
    while k < na:
        t = order[k]
        neg = nu and y[t] < 0
        # a sample at a bound is on one side only; it leaves when it cannot become the pair's other member
        if side[t] == _UP:
            shrunk = -F[t] > (g2n if neg else g2)
        elif side[t] == _LOW:
            shrunk = F[t] > (g1n if neg else g1)
        else:
            shrunk = False
        if nu:
            if shrunk:
                left[gone] = t
                gone += 1
            else:
                active[kept] = t
                kept += 1
            k += 1
        elif shrunk:
            na -= 1
            order[k] = order[na]
            order[na] = t
            if lpos is not None:
                lpos[order[k]] = k
                lpos[t] = na
        else:
            k += 1
    if nu:
        active[kept:na] = left[:gone]
        na = kept
    elif lorder is not None and lpos is not None:  # the active variables in ascending order, then the others
        a = 0
        b = na
        for t in range(n):
            if lpos[t] < na:
                active[a] = t
                a += 1
            else:
                active[b] = t
                b += 1
    st[_S_ACTIVE] = na
    return False


@_jit.mark
def _run(y, F, G_bar, alpha, Cb, QD, side, cache, slot_of, owner, last_used, active, st, eps, need, XT, scratch, rmap,
         pos, lorder=None, lpos=None):
    """Iterate until converged / a row is missing / a reconstruction is needed / max_iter /
    ``st[_S_WORK_MAX]`` work done in this call (``_PAUSE``: call again to resume). ``need`` on
    ``_NEED_ROW``: the sample whose kernel row is missing, and the one whose row must stay cached.
    ``rmap`` None (the identity) and ``pos`` None (LIBSVM's Solver; the nu solver's: ``y > 0`` per
    variable, one byte each) are compiled away: C-SVC's loop is the plain one."""
    n = y.shape[0]  # variables
    row_work = slot_of.shape[0] * (XT.shape[0] + 8) // 4  # an in-loop kernel row (see PAUSE_WORK)
    work = 0
    rows0 = st[_S_ROWS]
    # gmax, imax hold the maximal violator of the current F (found by the update pass): kept across a
    # return that leaves F as it is (_PAUSE, _NEED_ROW), so that a resumed call does not pay a
    # _max_up pass over the active set (a call lasts a few iterations when rows are computed here)
    # (the nu solver: gmax, imax for the samples with y > 0, gmaxn, imaxn for those with y < 0)
    fresh = st[_S_FRESH] == 1
    st[_S_FRESH] = 0
    imax = st[_S_IMAX] if fresh else -1
    gmax = F[imax] if imax >= 0 and side[imax] & _UP else -np.inf  # -inf: as _max_up's (then off I_up)
    imaxn = st[_S_IMAXN] if fresh else -1
    gmaxn = F[imaxn] if imaxn >= 0 and side[imaxn] & _UP else -np.inf
    while True:
        if st[_S_ITER] >= st[_S_MAXITER]:
            return _MAX_ITER
        if work >= st[_S_WORK_MAX]:
            st[_S_FRESH] = 1 if fresh else 0
            st[_S_IMAX] = imax
            st[_S_IMAXN] = imaxn
            return _PAUSE
        if st[_S_PENDING] == 1:
            if _shrink(F, side, active, st, eps, y, lorder, lpos):
                return _RECONSTRUCT
            st[_S_PENDING] = 0
            st[_S_COUNTER] = min(n, 1000)
            fresh = False
        if pos is not None:
            if not fresh:
                gmax, imax, gmaxn, imaxn = _max_up_nu(F, y, side, active, st[_S_ACTIVE])
            code = _select_nu(F, pos, side, QD, cache, slot_of, owner, last_used, active, st[_S_ACTIVE], eps, st, need,
                              XT, scratch, gmax, imax, gmaxn, imaxn, rmap)
        else:
            if not fresh:
                gmax, imax = _max_up(F, side, active, st[_S_ACTIVE], lpos)
            code = _select(F, side, QD, cache, slot_of, owner, last_used, active, st[_S_ACTIVE], eps, st, need, XT,
                           scratch, gmax, imax, rmap, lpos)
        if code == 2:  # F is as it was: gmax, imax stay
            st[_S_FRESH] = 1
            st[_S_IMAX] = imax
            st[_S_IMAXN] = imaxn
            return _NEED_ROW
        fresh = False
        if code == 1:
            if st[_S_ACTIVE] < n:
                return _RECONSTRUCT_FINAL
            return _CONVERGED
        i = need[0]
        j = need[1]
        si = slot_of[_sample(rmap, i)]
        sj = _row(_sample(rmap, j), si, cache, slot_of, owner, last_used, st, XT, scratch)
        if sj < 0:
            need[0] = _sample(rmap, j)
            need[1] = _sample(rmap, i)
            st[_S_FRESH] = 1
            st[_S_IMAX] = imax
            st[_S_IMAXN] = imaxn
            return _NEED_ROW
        st[_S_CLOCK] += 1
        last_used[si] = st[_S_CLOCK]
        last_used[sj] = st[_S_CLOCK]
        Ki = cache[si]
        Kj = cache[sj]
        st[_S_ITER] += 1
        work += _ITER_WORK + st[_S_ACTIVE] + (st[_S_ROWS] - rows0) * row_work
        rows0 = st[_S_ROWS]
        Ci = Cb[i]
        Cj = Cb[j]
        up_i = alpha[i] >= Ci
        up_j = alpha[j] >= Cj
        dai, daj, nonpsd = _pair_step(i, j, Ki[_sample(rmap, j)], y, F, alpha, Cb, QD, side)
        st[_S_NONPSD] += nonpsd
        ai = alpha[i]
        aj = alpha[j]
        # the gradient update, which also finds the next iteration's maximal violator (the nu
        # solver: one for each sign of y, as _max_up_nu)
        gmax = -np.inf
        imax = -1
        gmaxn = -np.inf
        imaxn = -1
        for k in range(st[_S_ACTIVE]):
            t = active[k]
            r = _sample(rmap, t)
            f = F[t] - (Ki[r] * dai + Kj[r] * daj)
            F[t] = f
            f = f if side[t] & _UP else -np.inf
            if pos is None or pos[t]:  # C-SVC's loop: one maximum (pos None is compiled away)
                if _at_least(f, gmax, lpos, t, imax):  # (the nu solver has no lpos: ascending ties)
                    gmax = f
                    imax = t
            elif f >= gmaxn:
                gmaxn = f
                imaxn = t
        fresh = True
        # G_bar[k] = sum over alpha at the upper bound of C_l Q_lk (for gradient reconstruction)
        if up_i != (ai >= Ci):
            c = Ci * y[i] if not up_i else -Ci * y[i]
            for t in range(n):
                G_bar[t] += c * y[t] * Ki[_sample(rmap, t)]
            work += n
        if up_j != (aj >= Cj):
            c = Cj * y[j] if not up_j else -Cj * y[j]
            for t in range(n):
                G_bar[t] += c * y[t] * Kj[_sample(rmap, t)]
            work += n
        if st[_S_SHRINKING] == 1:
            st[_S_COUNTER] -= 1
            if st[_S_COUNTER] <= 0:
                st[_S_PENDING] = 1


@_jit.mark
def _start_gradient(G, G_bar, block, part, alpha, Cb, y, rmap):
    """``G += alpha_t Q_t`` and ``G_bar += C_t Q_t`` (for ``alpha_t`` at its bound) for the variables
    ``part``, whose samples' kernel rows are ``block`` (cache precision), one variable after the other
    as LIBSVM's start (the same sums, rounded the same way)."""
    for k in range(part.shape[0]):
        t = part[k]
        a = alpha[t]
        ub = a >= Cb[t]
        row = block[k]
        for j in range(G.shape[0]):
            q = y[t] * y[j] * np.float64(row[rmap[j]])
            G[j] += a * q
            if ub:
                G_bar[j] += Cb[t] * q


@_jit.mark
def _start_gradient_rows(G, G_bar, cache, block, src, part, alpha, Cb, y, m, rmap):
    """:func:`_start_gradient` for the entries ``j < m`` (the same sums in the same order), the row
    of variable ``part[k]`` in ``cache[src[k]]`` (``src[k] >= 0``) or ``block[-1 - src[k]]``."""
    for k in range(part.shape[0]):
        t = part[k]
        a = alpha[t]
        yt = y[t]
        row = cache[src[k]] if src[k] >= 0 else block[-1 - src[k]]
        if a >= Cb[t]:
            c = Cb[t]
            for j in range(m):
                q = yt * y[j] * np.float64(row[_sample(rmap, j)])
                G[j] += a * q
                G_bar[j] += c * q
        else:
            for j in range(m):
                q = yt * y[j] * np.float64(row[_sample(rmap, j)])
                G[j] += a * q


@_jit.mark(parallel=True)
def _rbf_rows(XT, idx, cache, slots, scratch):
    """Kernel rows ``idx`` into ``cache[slots]``, as :func:`_rbf_row` computes them (bit for bit),
    one row per thread (``scratch``: :func:`_rbf_row`'s, three rows per thread)."""
    bands = scratch.shape[0] // 3
    m = idx.shape[0]
    n = XT.shape[1]
    for b in prange(bands):
        for k in range(b, m, bands):
            _rbf_band(XT, idx[k], cache[slots[k]], scratch[3 * b:3 * b + 3], 0, n)


@dataclass
class SMOResult:
    """What the solver did. ``alpha`` (one per variable), ``rho`` (decision = sum alpha_i y_i K(x_i, x) - rho);
    ``r``: the nu solver's second multiplier (LIBSVM's ``si->r``; 0 otherwise)."""

    alpha: np.ndarray
    rho: float
    objective: float
    n_iter: int
    converged: bool
    rows_computed: int
    nonpsd_steps: int
    index: np.ndarray | None = None  # the machine's samples (set by the caller)
    r: float = 0.0


def _rho_nu(y, F, alpha, Cb) -> tuple[float, float]:
    """LIBSVM's Solver_NU::calculate_rho: ``(rho, r)`` from the two sign classes' mean free gradient
    (or the middle of their bounds)."""
    G = -y * F
    r12 = []
    for s in (1.0, -1.0):
        cls = y == s
        up, low = cls & (alpha >= Cb), cls & (alpha <= 0)
        free = cls & ~up & ~low
        if free.any():
            r12.append(float(G[free].mean()))
        else:
            ub = G[low].min() if low.any() else np.inf
            lb = G[up].max() if up.any() else -np.inf
            r12.append(float((ub + lb) / 2))
    return (r12[0] - r12[1]) / 2, (r12[0] + r12[1]) / 2


def _rho(y, F, alpha, Cb) -> float:
    yG = -F
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
    not cached; ``_EVICTED``: cached before), ``owner[s]`` the row in slot ``s``; ``last_used``
    holds the loop's clock at each slot's last use; slots ``st[_S_USED]`` onwards have never been
    used. New rows take never-used slots up to ``st[_S_GROWN]``, then evict the least recently used
    row, except that a row evicted before takes a never-used slot (and raises ``st[_S_GROWN]``)."""

    def __init__(self, n: int, n_slots: int, dtype, rmap: np.ndarray | None = None) -> None:
        # An anonymous mapping of its own, not numpy's or torch's heap: its pages are resident only
        # once a row is written, and they go back to the system when the solve ends. (Through malloc,
        # glibc keeps a freed block of a size it has seen freed before: the caches of one-vs-one
        # machines, one after the other, left the heap holding the largest ones.) numpy's allocator
        # would also madvise the block for transparent huge pages, whose first touch waits on
        # compaction with THP defrag in "madvise" mode.
        # a row holds one entry per variable: K[i, rmap[t]] (rmap[:n] is the identity)
        self.tail = None if rmap is None or len(rmap) == n else np.asarray(rmap[n:], dtype=np.int64)
        width = n if self.tail is None else n + len(self.tail)
        dt = np.dtype(np.float32 if np.dtype(dtype) == np.float32 else np.float64)
        self.cache = np.frombuffer(mmap.mmap(-1, max(1, n_slots * width) * dt.itemsize), dtype=dt,
                                   count=n_slots * width).reshape(n_slots, width)
        self.slot_of = np.full(n, -1, dtype=np.int64)
        self.owner = np.full(n_slots, -1, dtype=np.int64)
        self.last_used = np.zeros(n_slots, dtype=np.int64)

    def store(self, idx: np.ndarray, block: np.ndarray, protect: int, st: np.ndarray) -> None:
        """Put rows ``idx`` (``block``) in never-used slots, else in those of the least recently
        used rows, never the row of the pending pair (``protect``); advances the clock ``st[_S_CLOCK]``."""
        slots = self.claim(idx, protect, st)
        if self.tail is None:
            self.cache[slots] = block
        else:
            n = block.shape[1]
            self.cache[slots, :n] = block
            self.cache[slots, n:] = block[:, self.tail]

    def claim(self, idx: np.ndarray, protect: int, st: np.ndarray) -> np.ndarray:
        """The slots rows ``idx`` go in (as :meth:`store`'s), made theirs; the caller writes the rows."""
        m, n_slots = len(idx), self.owner.shape[0]
        used = int(st[_S_USED])
        # fresh slots up to st[_S_GROWN], and one more for each row that was evicted before
        grown = max(int(st[_S_GROWN]), used + int(np.count_nonzero(self.slot_of[idx] == _EVICTED)))
        take = max(0, min(m, n_slots - used, grown - used))
        slots = np.arange(used, used + take, dtype=np.int64)
        st[_S_USED] = used + take
        st[_S_GROWN] = max(int(st[_S_GROWN]), used + take)
        protected = int(self.slot_of[protect]) if protect >= 0 else -1
        if take < m and take == 0 and m == 1:  # a full cache's one miss (see solve_smo): the LRU row
            lu = self.last_used[:used]  # distinct clock values: argmin is argpartition's choice
            if protected >= 0:
                keep, lu[protected] = lu[protected], _NEVER
            victims = np.array([np.argmin(lu)], dtype=np.int64)
            if protected >= 0:
                lu[protected] = keep
            self.slot_of[self.owner[victims]] = _EVICTED
            slots = victims
        elif take < m:
            lu = self.last_used[:used + take].copy()
            if protected >= 0:
                lu[protected] = _NEVER
            lu[slots] = _NEVER
            victims = np.argpartition(lu, m - take - 1)[:m - take]
            self.slot_of[self.owner[victims]] = _EVICTED
            slots = np.concatenate([slots, victims])
        self.owner[slots] = idx
        self.slot_of[idx] = slots
        self.last_used[slots] = st[_S_CLOCK] + 1 + np.arange(m)
        st[_S_CLOCK] += m
        st[_S_ROWS] += m
        return slots


@dataclass
class _Dual:
    """The iterate of the compiled loop: multipliers, ``F = -y * G`` (G: the dual's gradient),
    ``G_bar`` (the part of G from multipliers at their upper bound), each sample's ``side`` (bits
    ``_UP``, ``_LOW``), the active set and the integer state."""

    y: np.ndarray
    Cb: np.ndarray
    QD: np.ndarray
    alpha: np.ndarray
    F: np.ndarray
    G_bar: np.ndarray
    side: np.ndarray
    active: np.ndarray  # of _ACTIVE_DTYPE
    st: np.ndarray
    need: np.ndarray
    p: np.ndarray  # the linear term
    rmap: np.ndarray  # each variable's sample (the kernel row it reads)
    lorder: np.ndarray = None  # LIBSVM's order of the variables (its Solver's swaps; ties follow it)
    lpos: np.ndarray = None  # each variable's position in lorder

    def objective(self) -> float:
        """``alpha^T Q alpha / 2 + p^T alpha = alpha^T (G + p) / 2``."""
        return float(self.alpha @ (-self.y * self.F + self.p) / 2)


def _start(y, Cb, diag, *, shrinking: bool, max_iter: int | None, p=None, rmap=None) -> _Dual:
    """alpha = 0 (so G = p, F = -y p; C-SVC's p = -1: F = y), every variable active, LIBSVM's
    iteration limit for ``max_iter < 0``. ``diag``: ``Q_ii`` per variable."""
    n = y.shape[0]
    st = np.zeros(_N_STATE, dtype=np.int64)
    st[_S_ACTIVE] = n
    st[_S_COUNTER] = min(n, 1000)
    st[_S_MAXITER] = max(10_000_000, 100 * n) if max_iter is None or max_iter < 0 else int(max_iter)
    st[_S_SHRINKING] = int(bool(shrinking))
    st[_S_WORK_MAX] = PAUSE_WORK
    st[_S_GROWN] = np.iinfo(np.int64).max  # every slot (solve_smo lowers it for in-loop rows)
    y = np.ascontiguousarray(y, dtype=np.float64)
    side = np.where(y > 0, _UP, _LOW).astype(np.int8)  # alpha = 0 < C: y > 0 can only go up, y < 0 down
    p = -np.ones(n) if p is None else np.ascontiguousarray(p, dtype=np.float64)
    rmap = np.arange(n, dtype=np.int64) if rmap is None else np.ascontiguousarray(rmap, dtype=np.int64)
    return _Dual(y, np.ascontiguousarray(Cb, dtype=np.float64), np.ascontiguousarray(diag, dtype=np.float64),
                 np.zeros(n), -y * p, np.zeros(n), side, np.arange(n, dtype=_ACTIVE_DTYPE), st,
                 np.zeros(2, dtype=np.int64), p, rmap)


def _warm_start(d: _Dual, alpha0: np.ndarray, rows, batch: int, cache_dtype) -> None:
    """Start from ``alpha0`` (feasible: the nu and one-class duals' starting points, as LIBSVM's):
    ``G = p + Q alpha``, ``G_bar = Q[:, at C] C``, each variable's side. Q's rows are the kernel rows
    of the nonzero variables' samples, ``batch`` at a time, rounded to the cache's precision as
    LIBSVM's (whose float32 rows make its start; the iterates then follow it)."""
    d.alpha[:] = alpha0
    y, rm = d.y, d.rmap
    G = d.p.copy()
    nz = np.flatnonzero(alpha0 > 0)
    for s in range(0, nz.size, batch):
        part = nz[s:s + batch]
        block = np.ascontiguousarray(rows(rm[part]), dtype=cache_dtype)
        _jit("_start_gradient")(G, d.G_bar, block, part, alpha0, d.Cb, y, rm)
    d.F[:] = -y * G
    below, above = alpha0 < d.Cb, alpha0 > 0
    d.side[:] = np.where(y > 0, np.where(below, _UP, 0) | np.where(above, _LOW, 0),
                         np.where(above, _UP, 0) | np.where(below, _LOW, 0))


def _warm_start_cached(d: _Dual, alpha0: np.ndarray, rows, batch: int, c: _RowCache, XT: np.ndarray,
                       scratch: np.ndarray) -> None:
    """:func:`_warm_start` through the row cache, as LIBSVM's start (its ``get_Q`` of each nonzero
    variable goes through its kernel cache), for the rows the start reads twice (SVR's two variables
    of a sample read one row): each is computed once and, as many as the cache holds, kept there for
    the solve (the loop would otherwise compute them again); in-loop rows
    (``XT`` holds the features) are computed as the loop computes them. The others (nu-SVC's,
    one-class's: a row per variable) come in ``batch``-row blocks of ``rows``, as before, and are
    not kept: a row per variable, most of which the loop never reads again, costs the page faults of
    fresh slots for nothing (benchmarks/results/svm/history/nusvr-ab.md). The sums are
    :func:`_warm_start`'s, in its order, bit for bit. Where
    ``p`` and ``y`` are odd under the swap of SVR's two halves (the nu-SVR dual: variable ``t + n``
    is sample ``t`` with ``y`` and ``p`` negated), each term of ``G`` and ``G_bar`` at ``t + n`` is
    that at ``t`` negated, so only the first half is summed and the second is its negation, exactly."""
    d.alpha[:] = alpha0
    y, rm = d.y, d.rmap
    n, l = c.slot_of.shape[0], y.shape[0]
    inloop = XT.shape[1] == n
    mirror = (l == 2 * n and np.array_equal(rm[n:], np.arange(n)) and np.array_equal(y[n:], -y[:n])
              and np.array_equal(d.p[n:], -d.p[:n]))
    G = d.p.copy()
    nz = np.flatnonzero(alpha0 > 0)
    if nz.size:
        need = rm[nz]
        _, first, count = np.unique(need, return_index=True, return_counts=True)
        by_use = np.argsort(first)  # the rows read twice, in order of first use, as many as the cache holds
        distinct = need[first[by_use][count[by_use] > 1]][:c.owner.shape[0]]
        for s in range(0, distinct.size, batch):
            part = distinct[s:s + batch]
            if inloop:
                _jit("_rbf_rows")(XT, part, c.cache, c.claim(part, -1, d.st), scratch)
            else:
                c.store(part, rows(part), -1, d.st)
        accumulate = _jit("_start_gradient_rows")
        width = c.cache.shape[1]
        buf = np.empty((min(batch, nz.size), width), dtype=c.cache.dtype)
        for s in range(0, nz.size, batch):
            part = nz[s:s + batch]
            src = c.slot_of[rm[part]]
            missing = np.flatnonzero(src < 0)  # rows read once, or that the cache could not hold
            block = buf[:missing.size]
            if missing.size:
                block[:, :n] = rows(rm[part[missing]])
                if width > n:
                    block[:, n:] = block[:, c.tail]
                src[missing] = -1 - np.arange(missing.size)
            accumulate(G, d.G_bar, c.cache, block, src, part, alpha0, d.Cb, y, n if mirror else l,
                       None if mirror else _loop_map(d, n))
    if mirror:
        G[n:] = -G[:n]
        d.G_bar[n:] = -d.G_bar[:n]
    d.F[:] = -y * G
    below, above = alpha0 < d.Cb, alpha0 > 0
    d.side[:] = np.where(y > 0, np.where(below, _UP, 0) | np.where(above, _LOW, 0),
                         np.where(above, _UP, 0) | np.where(below, _LOW, 0))


def _rows_to_fetch(d: _Dual, slot_of: np.ndarray, first: int, batch: int) -> np.ndarray:
    """The missing row ``first`` (a sample) and, up to ``batch`` rows in all, those of the uncached
    active variables that violate the KKT conditions most (the likely next working-set members)."""
    want = [first]
    if batch > 1:
        act = d.active[:d.st[_S_ACTIVE]]
        miss = act[slot_of[d.rmap[act]] < 0]
        if miss.size > 1:
            f, side = d.F[miss], d.side[miss]
            score = np.maximum(np.where(side & _UP, f, -np.inf), np.where(side & _LOW, -f, -np.inf))
            k = min(batch - 1, miss.size - 1)
            if k > 0:
                top = d.rmap[miss[np.argpartition(-score, k)[:k + 1]]]
                seen = {first}
                for t in top.tolist():
                    if t not in seen:
                        seen.add(t)
                        want.append(t)
                want = want[:batch]
    return np.asarray(want, dtype=np.int64)


def _loop_map(d: _Dual, n: int) -> np.ndarray | None:
    """The row map as the compiled loop takes it: None for the identity (compiled away), else
    unsigned (indexed without numba's negative-index wraparound)."""
    return None if d.rmap.shape[0] == n else d.rmap.astype(_ACTIVE_DTYPE)


def _reconstruct(d: _Dual, matvec, c: _RowCache, XT: np.ndarray, scratch: np.ndarray) -> None:
    """LIBSVM's gradient reconstruction of the shrunk samples; makes every sample active.
    ``G = G_bar - 1 + y K[:, free] (alpha y)[free]``: the free samples' cached kernel rows (in
    float32, as LIBSVM's), ``matvec`` for the others."""
    n = d.y.shape[0]
    na = d.st[_S_ACTIVE]
    if na == n:
        return
    inactive = d.active[na:].copy()
    free = np.flatnonzero((d.alpha > 0) & (d.alpha < d.Cb))
    d.F[inactive] = -d.y[inactive] * (d.G_bar[inactive] + d.p[inactive])  # F = -y G
    if free.size:
        coef = d.alpha[free] * d.y[free]
        done = np.zeros(free.size, dtype=np.bool_)
        r = 0
        while r < free.size:  # a Ctrl-C is raised between two calls
            r = _subtract_free_rows(d.F, coef, free, inactive, c.cache, c.slot_of, c.owner, c.last_used, d.st, XT,
                                    scratch, done, r, _loop_map(d, c.slot_of.shape[0]))
        if not done.all():
            d.F[inactive] -= matvec(d.rmap[inactive], d.rmap[free[~done]], coef[~done])
    if d.st[_S_NU] == 1 or d.lorder is not None:  # every variable, in address order (the note above _UP)
        d.active[:] = np.arange(n, dtype=_ACTIVE_DTYPE)
    d.st[_S_ACTIVE] = n


def _row_bands() -> int:
    """Threads an in-loop kernel row is computed on: torch's intra-op threads (the caller's
    setting, :mod:`mercer._threads`), at most numba's."""
    return int(max(1, min(torch.get_num_threads(), numba_threads())))


def solve_smo(rows: Callable[[np.ndarray], np.ndarray], diag: np.ndarray, y: np.ndarray, Cb: np.ndarray, *,
              matvec: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], cache_rows: int,
              cache_dtype=np.float64, tol: float = 1e-3, shrinking: bool = True, max_iter: int = -1,
              batch: int = 64, features: np.ndarray | None = None, p: np.ndarray | None = None,
              alpha0: np.ndarray | None = None, rmap: np.ndarray | None = None, nu: bool = False,
              ascending: bool = False) -> SMOResult:
    """Solve LIBSVM's general dual by SMO.

    :math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha + p^T \\alpha` subject to :math:`y^T \\alpha = \\delta`
    (``delta`` fixed by the feasible start ``alpha0``) and :math:`0 \\le \\alpha_t \\le C_t`, with
    :math:`Q_{st} = y_s y_t K(x_{r(s)}, x_{r(t)})` over ``l`` variables reading ``n`` samples through the
    row map ``r`` (``rmap``). With the defaults (``p = -1``, ``alpha0 = 0``, ``r`` the identity) it is
    the C-SVC dual; epsilon-SVR has ``l = 2n`` variables, ``r(t) = t mod n``, signs +1 then -1,
    ``p = epsilon -+ y``. ``nu=True`` is LIBSVM's Solver_NU (the nu-SVC and nu-SVR duals, whose extra
    constraint ``e^T alpha = const`` holds from ``alpha0`` on): pairs are chosen within each sign class,
    and ``rho`` and ``r`` (``SMOResult.r``) come from the two classes' gradients.

    Parameters
    ----------
    rows : callable
        ``rows(idx)`` -> kernel rows ``K[idx, :]`` of samples ``idx``, an array of shape ``(len(idx), n)``.
    diag : ndarray (n,)
        ``K[i, i]``.
    y : ndarray (l,) of +-1
    Cb : ndarray (l,)
        Upper bounds ``C_t`` (class and sample weights included), all > 0.
    matvec : callable
        ``matvec(r, c, v)`` -> ``K[r][:, c] @ v`` on samples (for the gradients).
    cache_rows : int
        Number of kernel rows the cache holds (>= 2; capped at n).
    batch : int
        Rows computed per kernel call on a cache miss (the missing row and the top violators).
    features : ndarray (d, n), float32 or float64, optional
        For an RBF kernel: the samples' features times ``sqrt(gamma)``, one feature per row (C order).
        The compiled loop then computes each missing kernel row ``exp(-|x_i - x_t|^2)`` itself,
        one row when it is needed (``rows`` is not called): at a few features a row costs less
        than the call that would fetch it. Its entries must be finite, their squares summable.
    p : ndarray (l,), optional
        The linear term (default -1: C-SVC).
    alpha0 : ndarray (l,), optional
        A feasible start (default 0).
    rmap : ndarray (l,) of int, optional
        Each variable's sample, ``rmap[:n]`` the identity (default: ``l = n``, the identity).
    nu : bool
        LIBSVM's Solver_NU instead of Solver.
    ascending : bool
        C-SVC's and epsilon-SVR's active set in ascending order, LIBSVM's carried apart (the same
        iterates; see the note above ``_UP``): faster where the passes over the active set dominate
        (epsilon-SVR's 2n variables, sparse rows), slower on C-SVC at few features (measured in
        benchmarks/results/svm/history/smo-ascending-libsvm-ties.md). The nu solver is always ascending.
    """
    n = np.asarray(diag).shape[0]  # samples (kernel rows); y.shape[0] variables
    rm = None if rmap is None else np.ascontiguousarray(rmap, dtype=np.int64)
    if rm is not None and not np.array_equal(rm[:n], np.arange(n)):
        raise ValueError("solve_smo: rmap[:n] must be the identity (the first n variables are the samples).")
    qd = np.asarray(diag, dtype=np.float64) if rm is None else np.asarray(diag, dtype=np.float64)[rm]
    d = _start(y, Cb, qd, shrinking=shrinking, max_iter=max_iter, p=p, rmap=rm)
    if ascending and not nu:
        d.lorder, d.lpos = np.arange(d.y.shape[0], dtype=_ACTIVE_DTYPE), np.arange(d.y.shape[0], dtype=np.int64)
    d.st[_S_NU] = int(bool(nu))
    n_slots = int(max(2, min(cache_rows, n)))
    c = _RowCache(n, n_slots, cache_dtype)  # rows of n entries, read through rmap (LIBSVM's SVR_Q)
    if features is None:
        XT, scratch = np.empty((0, 0)), np.empty((3, 1))
    else:
        XT = np.ascontiguousarray(features)
        if XT.shape[1] != n or XT.dtype not in (np.float32, np.float64):
            raise ValueError(f"solve_smo: features must be a float32 or float64 array of shape (d, {n}); got "
                             f"{XT.dtype} of shape {XT.shape}.")
        scratch = np.empty((3 * _row_bands(), max(_CHUNK, XT.shape[0])), dtype=XT.dtype)
    if alpha0 is not None:  # the start's rows stay cached (fresh slots)
        _warm_start_cached(d, np.asarray(alpha0, dtype=np.float64), rows, max(1, batch), c, XT, scratch)
    if features is not None:  # rows that recur grow the cache, not every row computed (the start's aside)
        d.st[_S_GROWN] = d.st[_S_USED] + GROW_FROM
    # a batch at most an eighth of the cache: prefetched rows must not evict the useful ones
    batch = int(max(1, min(batch, n_slots // 8)))
    # the compiled loop's arguments: arrays updated in place, never rebound
    args = (d.y, d.F, d.G_bar, d.alpha, d.Cb, d.QD, d.side, c.cache, c.slot_of, c.owner, c.last_used, d.active,
            d.st, float(tol), d.need, XT, scratch, _loop_map(d, n), (d.y > 0) if nu else None, d.lorder, d.lpos)
    converged = True
    run = _jit("_run")
    observer = current_observer()
    bar = task("SMO", unit="it")  # objective: approximate while shrinking (stale gradients)
    while True:  # a Ctrl-C is raised between two calls (at most PAUSE_WORK of loop apart)
        t0 = time.perf_counter()
        code = run(*args)
        elapsed = time.perf_counter() - t0
        if code == _PAUSE:  # aim at _PAUSE_S per call, never above PAUSE_WORK
            d.st[_S_WORK_MAX] = min(PAUSE_WORK, max(16_384, int(d.st[_S_WORK_MAX] * min(2.0, _PAUSE_S / max(elapsed, 1e-6)))))
        bar.update(int(d.st[_S_ITER]), objective=d.objective, rows=int(d.st[_S_ROWS]))
        if observer is not None:
            observer("SMO", int(d.st[_S_ITER]), int(d.st[_S_MAXITER]))
        if code == _PAUSE:
            continue
        if code == _NEED_ROW:
            # the likely next rows come along while the cache has free slots; once it is full each
            # would evict a cached row, and where the cache cannot hold the rows in play prefetched
            # rows evict each other (docs/user_guide/svm.md): then the missing row alone
            idx = _rows_to_fetch(d, c.slot_of, int(d.need[0]), batch if d.st[_S_USED] < n_slots else 1)
            c.store(idx, rows(idx), int(d.need[1]), d.st)
        elif code == _RECONSTRUCT:
            _reconstruct(d, matvec, c, XT, scratch)
        elif code == _RECONSTRUCT_FINAL:
            _reconstruct(d, matvec, c, XT, scratch)
            d.st[_S_COUNTER] = 1
        elif code == _MAX_ITER:
            _reconstruct(d, matvec, c, XT, scratch)
            converged = False
            break
        else:
            break
    bar.close()
    rho, r = _rho_nu(d.y, d.F, d.alpha, d.Cb) if nu else (_rho(d.y, d.F, d.alpha, d.Cb), 0.0)
    return SMOResult(d.alpha, rho, d.objective(), int(d.st[_S_ITER]), converged, int(d.st[_S_ROWS]),
                     int(d.st[_S_NONPSD]), r=r)
