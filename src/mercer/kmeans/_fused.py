"""Lloyd's iterations on the CPU, one compiled pass per iteration (numba), no ``n x k`` block.

An iteration, for each chunk of rows (:func:`chunk_rows`; threads claim chunks in turn -- in the
compiled loop, groups of consecutive chunks, one compiled call each (:func:`_chunks_pass`) --
:func:`fused_threads`):

1. move the Hamerly bounds by the centres' last shifts and list the points whose label they do
   not prove (the others cost O(1); a point whose bound fails is first re-checked with its exact
   distance to its own centre, O(d));
2. for the listed points, the ``k`` values ``|c|^2 - 2 x.c`` and their two smallest: with few
   features in a compiled loop over blocks of points (vectorised over the points), for larger
   ``k * d`` (:func:`uses_gemm`) by one GEMM per block (BLAS, through torch);
3. a point whose label changed moves its weighted row from the old cluster's sum to the new one's
   (sums and weights kept from iteration to iteration, in float64; each chunk writes its changes
   to its own buffer and the buffers are added in chunk order, so the numbers do not depend on
   the threads), so the centre update reads no data.

scikit-learn's Lloyd computes every distance of every iteration (a GEMM per 256 rows) and reads
the data twice per iteration; here, once the centres settle, most points cost a few operations.
The loop over samples is the chunk loop (progress is reported per iteration). A pass takes as many
threads as it has chunks' worth of work (:meth:`_State.pass_threads`: once the bounds settle, a small
problem's passes stay on the calling thread), and in the compiled loop, passes under two chunks'
work run many iterations in one compiled call (:func:`_serial_passes`), with the same numbers.

The labels are those of plain Lloyd's algorithm, first index on ties: a label is kept without
computing distances only when the bounds prove it with a margin for round-off, and a point whose
two closest centres are within the round-off of ``|c|^2 - 2 x.c`` is settled by its exact
distances (so float32 data follow the float64 answer more closely than scikit-learn's float32 runs,
whose labels change with its thread count). The compiled functions are built on the first fit (numba is imported then, not by
``import mercer``) and cached on disk (``cache=True``).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .._backend import num_threads
from .._jit import LazyJit
from .._progress import task
from ..linalg import KMEANS_BLOCK_BYTES, KMEANS_MAX_CHUNK_BYTES

__all__ = ["GEMM_MIN_CLUSTERS_FOR_BOUNDS", "GEMM_MIN_WORK", "LOOP_MIN_CLUSTERS_FOR_BOUNDS", "centre", "chunk_rows",
           "fused_threads", "lloyd_fused", "uses_gemm"]

log = logging.getLogger(__name__)


#: From ``k * d`` of this size on, the distances of the points whose labels the bounds do not prove
#: are computed by one GEMM per block of rows (BLAS through torch) rather than in the compiled loop
#: (:func:`uses_gemm`). Figures: benchmarks/results/cluster/history/notes.md.
GEMM_MIN_WORK = 1500

#: Fewest clusters for which Hamerly's bounds are used by default in the compiled loop (where they
#: pay: benchmarks/results/cluster/history/notes.md).
LOOP_MIN_CLUSTERS_FOR_BOUNDS = 8

#: The same with the GEMM blocks (the torch passes' :data:`mercer.kmeans.MIN_CLUSTERS_FOR_BOUNDS` is 24;
#: figures: benchmarks/results/cluster/history/notes.md).
GEMM_MIN_CLUSTERS_FOR_BOUNDS = 8

#: A row flagged by its moved bounds costs :func:`_check` about this many features' worth of its
#: distance besides (a mispredicted branch, a scattered row): above ``d / (d + _TIGHT_ROW_COST)`` of a
#: chunk's rows flagged on the last pass (a quarter at d = 9), its next check computes every row's
#: distance to its own centre without a branch (:func:`_check_tight`). Figures:
#: benchmarks/results/cluster/history/notes.md.
_TIGHT_ROW_COST = 27

#: Rows per GEMM block (the (k, rows) distance block and the running minima stay in cache).
_GEMM_ROWS = 1024

#: A chunk of rows -- the unit of work that a thread claims -- holds about this many operations of
#: a full pass (``rows * k * (d + 4)``: the distances and the running minima), about half a
#: millisecond on one core; four times as many with the GEMM (whose chunk also pays Python and
#: torch calls).
_CHUNK_WORK = 2**21

#: The bounds' check of a row in operations of the distance work (:func:`chunk_rows` counts
#: ``k * (d + 4)`` per row; figure: benchmarks/results/cluster/history/notes.md).
_CHECK_WORK = 64

#: Passes of less distance work than this (two chunks' worth in the compiled loop) run in
#: one compiled call, :data:`_SERIAL_ITERS` iterations at most, then Python reports progress and
#: takes an interrupt (Ctrl-C) before the next call.
_SERIAL_MAX_WORK = 2 * _CHUNK_WORK
_SERIAL_ITERS = 64

#: A pass of the compiled loop on several threads is cut into this many groups of chunks per thread,
#: each one compiled call, claimed in turn (a thread held up by another process delays a pass by
#: one group at most); on one thread the whole pass is one call.
_GROUPS_PER_THREAD = 4

#: At most this many chunks (a chunk keeps its own (k, d) float64 buffer of changes to the sums)
#: and at most this many bytes of those buffers.
_MAX_CHUNKS = 64

_jit = LazyJit(globals())  # the compiled functions below, built on the first fit
_POOL_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []


def uses_gemm(k: int, d: int) -> bool:
    """Whether the distances of ``k`` centres in ``d`` features are computed by GEMM blocks
    (:data:`GEMM_MIN_WORK`) rather than in the compiled loop."""
    return k * d >= GEMM_MIN_WORK


def chunk_rows(n: int, k: int, d: int, gemm: bool) -> int:
    """Rows per chunk of a pass: about :data:`_CHUNK_WORK` operations of a full pass (four times as
    many, and at least 256 rows, with the GEMM), at most :data:`_MAX_CHUNKS` chunks and
    :data:`mercer.linalg.KMEANS_MAX_CHUNK_BYTES` of buffers. It depends on the problem only, never on the threads: the sums are added chunk by chunk in a fixed
    order, so every thread count gives the same numbers."""
    rows = max(256, 4 * _CHUNK_WORK // (k * (d + 4))) if gemm else max(1, _CHUNK_WORK // (k * (d + 4)))
    chunks = min(-(-n // rows), _MAX_CHUNKS, max(1, KMEANS_MAX_CHUNK_BYTES // (8 * k * d)))
    return -(-n // max(chunks, 1))


def fused_threads(n: int, k: int, d: int, gemm: bool) -> int:
    """Threads of the fused Lloyd passes over ``n`` points, ``k`` centres, ``d`` features: one per
    chunk of :func:`chunk_rows` (~0.5 ms of a full pass each), at most torch's intra-op threads
    (the caller's setting, which :func:`mercer._backend.num_threads` scopes).

    Problems of one chunk (k = 50: n <= ~7,000 at d = 2, ~3,500 at d = 8) run on the calling
    thread, as a pass is then shorter than the hand-over to a second thread is worth;
    this is the pool's size, and each pass uses as many of them as its own work is worth
    (:meth:`_State.pass_threads`).
    The threads are a pool of Python threads running numba code without the GIL (and torch GEMMs
    on one thread each), never OpenMP: they block rather than spin while they wait, and claim
    chunks as they go, so a thread held up by another process on its core delays a pass by one
    chunk at most (figures on a busy machine: benchmarks/results/cluster/history/notes.md).
    """
    chunks = -(-n // chunk_rows(n, k, d, gemm))
    return max(1, min(torch.get_num_threads(), chunks))


def _set_one_thread() -> None:
    """Initializer of the pool's threads: their torch ops (the GEMMs) run on themselves alone."""
    torch.set_num_threads(1)


def _pool(threads: int) -> ThreadPoolExecutor | None:
    """A process-wide pool of at least ``threads - 1`` workers (the calling thread is the other)."""
    if threads <= 1:
        return None
    with _POOL_LOCK:
        if not _POOL or _POOL[0]._max_workers < threads - 1:
            if _POOL:
                _POOL.pop().shutdown(wait=False)
            _POOL.append(ThreadPoolExecutor(max_workers=max(threads - 1, (os.cpu_count() or 2) - 1),
                                            thread_name_prefix="mercer-kmeans", initializer=_set_one_thread))
        return _POOL[0]


# -- compiled kernels ------------------------------------------------------------------------------
@_jit.mark(fastmath={"reassoc", "contract"})
def _sq_dist(x, c):
    """``|x - c|^2`` by subtraction, summed in float64 (in any order: the sum vectorises)."""
    s = 0.0
    for t in range(x.shape[0]):
        e = np.float64(x[t]) - np.float64(c[t])
        s += e * e
    return s


@_jit.mark
def _check(X, C, move, half_sep, margin, labels, u, l, lo, hi, todo):
    """Moves the bounds of the rows ``lo:hi`` by the centres' last shifts and lists in ``todo``
    the rows whose label they do not prove; returns how many, and how many of the moved bounds
    failed. ``move = (shift..., top, second, argtop)``.

    Two loops: the first moves every bound and flags (in ``todo``) the rows whose moved bounds
    fail, without a branch (it vectorises); the second re-checks a flagged row with its exact
    distance to its own centre (O(d)) and lists it when that fails too."""
    k = C.shape[0]
    k1 = int(move[k + 2])
    top = move[k]
    second = move[k + 1]
    f = 0
    for i in range(lo, hi):
        a = labels[i]
        ui = u[i] + move[a]
        li = l[i] - (second if a == k1 else top)
        u[i] = ui
        l[i] = li
        fail = ui > max(li, half_sep[a]) - margin
        todo[i - lo] = fail
        f += fail
    m = 0
    for p in range(hi - lo):  # todo[m] with m <= p: a flag is read before its slot is written
        if todo[p]:
            i = lo + p
            a = labels[i]
            ui = math.sqrt(_sq_dist(X[i], C[a]))
            u[i] = ui
            if ui > max(l[i], half_sep[a]) - margin:
                todo[m] = i
                m += 1
    return m, f


@_jit.mark(fastmath={"reassoc", "contract"})
def _check_tight(X, C, move, half_sep, margin, labels, u, l, lo, hi, todo):
    """:func:`_check` for rows whose moved bounds mostly fail: the exact distance of every row to
    its own centre becomes ``u``, without a branch (no moved upper bound to test first); returns
    the same two counts."""
    k = C.shape[0]
    d = X.shape[1]
    k1 = int(move[k + 2])
    top = move[k]
    second = move[k + 1]
    m = 0
    f = 0
    for i in range(lo, hi):
        a = labels[i]
        li = l[i] - (second if a == k1 else top)
        l[i] = li
        s = 0.0
        for t in range(d):
            e = np.float64(X[i, t]) - np.float64(C[a, t])
            s += e * e
        ui = math.sqrt(s)
        thr = max(li, half_sep[a]) - margin
        f += u[i] + move[a] > thr
        u[i] = ui
        todo[m] = i
        m += ui > thr
    return m, f


@_jit.mark
def _check_chunk(X, C, move, half_sep, margin, labels, u, l, lo, hi, first, bounds, todo, flagged, c):
    """The rows of chunk ``c`` (``lo:hi``) whose labels the bounds do not prove, listed in ``todo``
    (every row on the ``first`` pass or without ``bounds``); returns how many. :func:`_check_tight`
    where the chunk's moved bounds failed for enough of its rows on the last pass (``flagged[c]``,
    updated; :data:`_TIGHT_ROW_COST`), else :func:`_check`."""
    if first or not bounds:
        for i in range(lo, hi):
            todo[i - lo] = i
        flagged[c] = hi - lo
        return hi - lo
    d = X.shape[1]
    if flagged[c] * (d + _TIGHT_ROW_COST) > d * (hi - lo):
        m, f = _check_tight(X, C, move, half_sep, margin, labels, u, l, lo, hi, todo)
    else:
        m, f = _check(X, C, move, half_sep, margin, labels, u, l, lo, hi, todo)
    flagged[c] = f
    return m


@_jit.mark
def _keep_two(j, vals, m, m1, m2, i1):
    """Running two smallest of ``vals[:m]`` over the centres seen so far (``j``: this centre; the
    first index is kept on ties): a loop over the points, vectorised."""
    for p in range(m):
        v = vals[p]
        a = m1[p]
        i1[p] = j if v < a else i1[p]
        m2[p] = min(m2[p], max(v, a))
        m1[p] = min(a, v)


@_jit.mark
def _exact_two(x, C):
    """The closest centre to ``x`` (first index on ties) and the two smallest squared distances,
    each by subtraction."""
    b = 0
    d1 = math.inf
    d2 = math.inf
    for j in range(C.shape[0]):
        v = _sq_dist(x, C[j])
        if v < d1:
            d2 = d1
            d1 = v
            b = j
        elif v < d2:
            d2 = v
    return b, d1, d2


@_jit.mark
def _write(X, x_sq, w, C, tie, tie_c, todo, m, labels, u, l, bounds, m1, m2, i1, dsums, dweights, dmembers):
    """Labels (and bounds) of the rows ``todo[:m]`` from their two smallest ``|c|^2 - 2 x.c``; a
    row whose two are closer than the round-off of the expansion (``tie |x|^2 + tie_c``) is settled
    by its exact distances (:func:`_exact_two`), so that the labels do not depend on how the GEMM
    rounds. A row whose label changes moves from its old cluster's sums to the new one's
    (``dsums``: the weighted rows, ``dweights``: the weights, ``dmembers``: how many rows of
    non-zero weight). Returns how many labels changed."""
    changed = 0
    d = X.shape[1]
    for p in range(m):
        i = todo[p]
        b = i1[p]
        a = labels[i]
        d1 = m1[p] + np.float64(x_sq[i])
        d2 = m2[p] + np.float64(x_sq[i])
        if d2 - d1 <= tie * x_sq[i] + tie_c:
            b, d1, d2 = _exact_two(X[i], C)
        if bounds:
            u[i] = math.sqrt(max(d1, 0.0))
            l[i] = math.sqrt(max(d2, 0.0))
        if a == b:
            continue
        changed += 1
        labels[i] = b
        wi = w[i]
        x = X[i]
        new = dsums[b]
        for t in range(d):
            new[t] += wi * x[t]
        dweights[b] += wi
        dmembers[b] += wi != 0
        if a >= 0:
            old = dsums[a]
            for t in range(d):
                old[t] -= wi * x[t]
            dweights[a] -= wi
            dmembers[a] -= wi != 0
    return changed


@_jit.mark
def _settle(X, x_sq, w, C, Ct2, c_sq, tie, tie_c, todo, n_todo, labels, u, l, bounds, XT, acc, m1, m2, i1, dsums,
            dweights, dmembers):
    """Closest centres of the rows ``todo[:n_todo]`` (:func:`_write`), in blocks of
    ``XT.shape[1]`` rows: a block transposed into ``XT``, its values ``|c|^2 - 2 x.c`` for one
    centre at a time in ``acc`` (a loop over the block's rows, vectorised). Returns how many
    labels changed."""
    d, k = Ct2.shape
    block = XT.shape[1]
    changed = 0
    for s in range(0, n_todo, block):
        m = min(block, n_todo - s)
        for p in range(m):
            i = todo[s + p]
            for t in range(d):
                XT[t, p] = X[i, t]
            m1[p] = math.inf
            m2[p] = math.inf
            i1[p] = 0
        for j in range(k):
            c0 = c_sq[j]
            for p in range(m):
                acc[p] = c0
            for t in range(d):
                c = Ct2[t, j]
                row = XT[t]
                for p in range(m):
                    acc[p] += row[p] * c
            _keep_two(j, acc, m, m1, m2, i1)
        changed += _write(X, x_sq, w, C, tie, tie_c, todo[s:], m, labels, u, l, bounds, m1, m2, i1, dsums, dweights,
                          dmembers)
    return changed


@_jit.mark
def _settle_columns(DT, X, x_sq, w, C, tie, tie_c, todo, labels, u, l, bounds, m1, m2, i1, dsums, dweights,
                    dmembers):
    """As :func:`_settle` for the rows ``todo[:DT.shape[1]]`` whose ``|c|^2 - 2 x.c`` are the
    columns of ``DT`` (k, m), computed by a GEMM."""
    k, m = DT.shape
    for p in range(m):
        m1[p] = math.inf
        m2[p] = math.inf
        i1[p] = 0
    for j in range(k):
        _keep_two(j, DT[j], m, m1, m2, i1)
    return _write(X, x_sq, w, C, tie, tie_c, todo, m, labels, u, l, bounds, m1, m2, i1, dsums, dweights, dmembers)


@_jit.mark
def _own_sq(X, C, labels, lo, hi, out):
    """``out[i] = |x_i - c_{labels_i}|^2`` (by subtraction) for the rows ``lo:hi``."""
    for i in range(lo, hi):
        out[i] = _sq_dist(X[i], C[labels[i]])


@_jit.mark
def _weighted_own_sq(X, C, labels, w, lo, hi):
    """``sum w_i |x_i - c_{labels_i}|^2`` (by subtraction) over the rows ``lo:hi``."""
    s = 0.0
    for i in range(lo, hi):
        s += w[i] * _sq_dist(X[i], C[labels[i]])
    return s


@_jit.mark
def _column_sums(X, out):
    """``out``: the column sums of ``X`` (any layout; float64), read in the order of its memory,
    each summed in blocks of 512 rows (a block's sum then added: less round-off than one running
    sum; in a fixed order, so that a streamed fit, which sums the same blocks, starts from the
    same mean bit for bit)."""
    n, d = X.shape
    out[:] = 0.0
    part = np.empty(d)
    if X.strides[0] < X.strides[1]:  # columns in consecutive memory: one column at a time
        for t in range(d):
            for s in range(0, n, 512):
                p = 0.0
                for i in range(s, min(s + 512, n)):
                    p += X[i, t]
                out[t] += p
        return
    for s in range(0, n, 512):
        part[:] = 0.0
        for i in range(s, min(s + 512, n)):
            for t in range(d):
                part[t] += X[i, t]
        out += part


@_jit.mark(fastmath={"reassoc", "contract"})
def _centre_rows(X, mean, out, x_sq, lo, hi):
    """Rows ``lo:hi``: ``out = X - mean`` (``out`` may be ``X``) and ``x_sq``, their squared norms
    (summed in float64)."""
    d = X.shape[1]
    for i in range(lo, hi):
        s = 0.0
        for t in range(d):
            v = X[i, t] - mean[t]
            out[i, t] = v
            s += np.float64(v) * np.float64(v)
        x_sq[i] = s


@_jit.mark
def _geometry(C, Ct2, c_sq, half_sep):
    """For the centres ``C``: ``Ct2 = -2 C^T``, ``c_sq = |c|^2`` and half the distance from each
    centre to its nearest other centre (``half_sep``)."""
    k, d = C.shape
    for j in range(k):
        s = 0.0
        for t in range(d):
            Ct2[t, j] = -2.0 * C[j, t]
            s += C[j, t] * C[j, t]
        c_sq[j] = s
        half_sep[j] = math.inf
    for j in range(k):
        for m in range(j + 1, k):
            h = 0.5 * math.sqrt(_sq_dist(C[j], C[m]))
            half_sep[j] = min(half_sep[j], h)
            half_sep[m] = min(half_sep[m], h)


@_jit.mark
def _means(sums, weights, members, C, C_new, move):
    """``C_new``: the means ``sums / weights`` (the old centre where no member has a weight);
    ``move``: each centre's shift, the two largest and the index of the largest. Returns the
    summed squared shift."""
    k, d = C.shape
    top = 0.0
    second = 0.0
    argtop = 0
    total = 0.0
    for j in range(k):
        s = 0.0
        for t in range(d):
            c = sums[j, t] / weights[j] if members[j] > 0 else C[j, t]
            C_new[j, t] = c
            e = c - C[j, t]
            s += e * e
        total += s
        dj = math.sqrt(s)
        move[j] = dj
        if dj > top:
            second = top
            top = dj
            argtop = j
        elif dj > second:
            second = dj
    move[k] = top
    move[k + 1] = second
    move[k + 2] = argtop
    return total


@_jit.mark
def _chunks_pass(X, x_sq, w, C, Ct2, c_sq, half_sep, move, margin_sq, tie_c, margin, labels, u, l, todo, first, bounds,
                 XT, acc, m1, m2, i1, dsums, dweights, dmembers, dirty, flagged, starts, c0, c1, listed, changed):
    """The assignment pass (:func:`_check_chunk`, then :func:`_settle`) over the chunks ``c0:c1`` (``starts``:
    their first rows, then ``n``), each writing its changes to the sums into its own buffers (reset
    first where ``dirty``); ``listed[c]`` and ``changed[c]``: the rows chunk ``c`` listed and the
    labels it changed. One call for many chunks: a pass over a thread's share costs one call from
    Python, not one per chunk."""
    for c in range(c0, c1):
        lo = starts[c]
        hi = starts[c + 1]
        if dirty[c]:
            dsums[c].fill(0.0)
            dweights[c].fill(0.0)
            dmembers[c].fill(0)
        t = todo[lo:hi]
        m = _check_chunk(X, C, move, half_sep, margin, labels, u, l, lo, hi, first, bounds, t, flagged, c)
        ch = _settle(X, x_sq, w, C, Ct2, c_sq, margin_sq, tie_c, t, m, labels, u, l, bounds, XT, acc, m1, m2, i1,
                     dsums[c], dweights[c], dmembers[c])
        dirty[c] = ch > 0
        listed[c] = m
        changed[c] = ch


@_jit.mark
def _add_changes(dirty, dsums, dweights, dmembers, sums, weights, members):
    """The chunks' changes added to the clusters' sums, weights and member counts, in chunk order (so
    the numbers do not depend on which thread ran which chunk)."""
    for c in range(dirty.shape[0]):
        if dirty[c]:
            sums += dsums[c]
            weights += dweights[c]
            members += dmembers[c]


#: How :func:`_serial_passes` stopped: converged on unchanged labels, on ``tol``, at ``max_iter``;
#: with an empty cluster after a pass (the caller re-seeds it); before a pass of more work than
#: :data:`_SERIAL_MAX_WORK`, or after :data:`_SERIAL_ITERS` iterations (the caller goes on).
_STRICT, _TOL, _MAX_ITER, _EMPTY, _PAUSE = 0, 1, 2, 3, 4


@_jit.mark
def _serial_passes(X, x_sq, w, C, C_new, Ct2, c_sq, half_sep, move, margin_sq, data_sq, labels, u, l, todo, bounds,
                   XT, acc, m1, m2, i1, sums, weights, members, dsums, dweights, dmembers, dirty, flagged, starts, it,
                   max_iter, tol):
    """Lloyd's iterations ``it + 1, it + 2, ...`` on the calling thread, each one pass over the
    chunks (``starts``: their first rows, then ``n``) in the order of :meth:`_State.run_pass` (so the
    same numbers) and the centre update of :meth:`_State.update`, without returning to Python
    between them. Stops as the Python loop of :func:`lloyd_fused` does, and also, without updating
    the centres, when a cluster is empty after a pass (``_EMPTY``: the caller re-seeds it), and
    after an iteration whose next pass would have more work than :data:`_SERIAL_MAX_WORK` (as
    :meth:`_State.pass_work` counts it) or after :data:`_SERIAL_ITERS` iterations (``_PAUSE``).
    Runs one iteration at least. Returns ``(it, status, changed, listed, shift, total)`` of the last
    iteration (``listed``: the rows its pass listed; ``total``: the rows listed by all its passes)."""
    n = X.shape[0]
    k = C.shape[0]
    nc = starts.shape[0] - 1
    chunk_listed = np.zeros(nc, dtype=np.int64)
    chunk_changed = np.zeros(nc, dtype=np.int64)
    changed = 0
    listed = 0
    total = 0
    shift = math.inf
    stop = min(max_iter, it + _SERIAL_ITERS)
    while it < stop:
        first = it == 0
        it += 1
        _geometry(C, Ct2, c_sq, half_sep)
        tie_c = margin_sq * c_sq.max()
        margin = math.sqrt(margin_sq * data_sq + tie_c)
        _chunks_pass(X, x_sq, w, C, Ct2, c_sq, half_sep, move, margin_sq, tie_c, margin, labels, u, l, todo, first,
                     bounds, XT, acc, m1, m2, i1, dsums, dweights, dmembers, dirty, flagged, starts, 0, nc,
                     chunk_listed, chunk_changed)
        changed = chunk_changed.sum()
        listed = chunk_listed.sum()
        total += listed
        _add_changes(dirty, dsums, dweights, dmembers, sums, weights, members)
        for j in range(k):
            if members[j] == 0:
                return it, _EMPTY, changed, listed, shift, total
        shift = _means(sums, weights, members, C, C_new, move)
        C[:] = C_new
        if it > 1 and changed == 0:
            return it, _STRICT, changed, listed, shift, total
        if shift <= tol:
            return it, _TOL, changed, listed, shift, total
        if (n if not bounds else listed) * k * (X.shape[1] + 4) + n * _CHECK_WORK >= _SERIAL_MAX_WORK:
            break  # the next pass is worth the pool's threads (or Python's per-pass progress)
    return it, _MAX_ITER if it >= max_iter else _PAUSE, changed, listed, shift, total


# -- the driver ------------------------------------------------------------------------------------
class _State:
    """Arrays of a run: the data, the centres and their geometry, the bounds, the clusters' sums
    (kept from pass to pass), each chunk's changes to them and each thread's buffers.
    :meth:`run_pass` is one assignment pass, :meth:`update` the centre update, :meth:`inertia` the
    final distortion."""

    def __init__(self, X, x_sq, w, C0, *, threads: int, rows: int, gemm_rows: int | None):
        n, d = X.shape
        k = C0.shape[0]
        dt = X.dtype
        self.X, self.x_sq, self.w = X, x_sq, w
        self.C = np.array(C0, dtype=dt, order="C")  # a copy: the serial passes update it in place
        self.Ct2 = np.empty((d, k), dtype=dt)
        self.c_sq = np.empty(k, dtype=dt)
        self.half_sep = np.empty(k)
        self.move = np.zeros(k + 3)
        self.labels = np.full(n, -1, dtype=np.int64)
        self.u = np.zeros(n)
        self.l = np.zeros(n)
        self.todo = np.empty(n, dtype=np.int64)
        self.sums = np.zeros((k, d))
        self.weights = np.zeros(k)
        self.members = np.zeros(k, dtype=np.int64)
        self.chunks = [(lo, min(lo + rows, n)) for lo in range(0, n, rows)]
        nc = len(self.chunks)
        self.dsums = np.zeros((nc, k, d))
        self.dweights = np.zeros((nc, k))
        self.dmembers = np.zeros((nc, k), dtype=np.int64)
        self.dirty = np.zeros(nc, dtype=bool)  # chunks whose changes are not zero
        self.gemm_rows = gemm_rows  # rows per GEMM block (None: distances in the compiled loop)
        block = max(16, min(256, KMEANS_BLOCK_BYTES // (d * dt.itemsize))) if gemm_rows is None else gemm_rows
        self.XT = [np.zeros((d, block), dtype=dt) for _ in range(threads)] if gemm_rows is None else None
        self.acc = [np.empty(block, dtype=dt) for _ in range(threads)]
        if gemm_rows is not None:  # the GEMM blocks' torch views and buffers, per thread
            self.Xt, self.c_sq_t = torch.from_numpy(X), torch.from_numpy(self.c_sq)[:, None]  # c_sq: updated in place
            self.gathered = [torch.empty(gemm_rows * d, dtype=self.Xt.dtype) for _ in range(threads)]
            self.values = [torch.empty(k * gemm_rows, dtype=self.Xt.dtype) for _ in range(threads)]
        self.m1 = [np.empty(block, dtype=dt) for _ in range(threads)]
        self.m2 = [np.empty(block, dtype=dt) for _ in range(threads)]
        self.i1 = [np.empty(block, dtype=np.int64) for _ in range(threads)]
        self.threads = threads
        self.pool = _pool(threads)
        self.margin_sq = 64 * float(np.finfo(dt).eps)
        self.data_sq = float(x_sq.max()) if n else 0.0
        self.computed = 0  # points whose k distances were computed
        self.listed = n  # points listed by the last pass (their k distances computed)
        self.starts = np.array([lo for lo, _ in self.chunks] + [n], dtype=np.int64)  # chunk boundaries
        self.chunk_listed = np.zeros(nc, dtype=np.int64)  # rows each chunk listed, labels it changed (last pass)
        self.chunk_changed = np.zeros(nc, dtype=np.int64)
        self.flagged = np.zeros(nc, dtype=np.int64)  # rows whose moved bounds failed, per chunk (last pass)
        self.C_next = None  # the next centres of serial_passes

    def pass_work(self, every: bool) -> int:
        """Operations of the next pass, as :func:`chunk_rows` counts them: the distances of every row
        on the first pass or without bounds (``every``), else of as many rows as the last pass
        listed, plus the bounds' check of every row (:data:`_CHECK_WORK`)."""
        n, d = self.X.shape
        return (n if every else self.listed) * self.C.shape[0] * (d + 4) + n * _CHECK_WORK

    def pass_threads(self, every: bool) -> int:
        """Threads of the next pass: one per chunk's worth of its work (:meth:`pass_work`;
        :func:`chunk_rows`), at most ``threads``.
        Once the bounds settle most labels, a small problem's pass runs on the calling thread alone
        rather than pay the hand-over to the pool."""
        if self.threads <= 1:
            return 1
        per_chunk = _CHUNK_WORK * (4 if self.gemm_rows is not None else 1)
        return max(1, min(self.threads, self.pass_work(every) // per_chunk))

    def _drain(self, job, items, threads: int | None = None) -> list:
        """``job(item, thread)`` for every item, claimed in turn by the calling thread and the
        pool's (``threads`` of them at most, default all); the results in the order of the items."""
        threads = self.threads if threads is None else threads
        if self.pool is None or len(items) == 1 or threads <= 1:
            return [job(item, 0) for item in items]
        claim = itertools.count()

        def worker(t):
            done = []
            while (c := next(claim)) < len(items):  # itertools.count: atomic under the GIL
                done.append((c, job(items[c], t)))
            return done

        futures = [self.pool.submit(worker, t) for t in range(1, min(threads, len(items)))]
        done = worker(0)
        for f in futures:
            done += f.result()
        return [r for _, r in sorted(done, key=lambda cr: cr[0])]

    def run_pass(self, first: bool, bounds: bool) -> int:
        """Labels and bounds of every row for the current centres, the clusters' sums updated;
        returns how many labels changed."""
        _jit("_geometry")(self.C, self.Ct2, self.c_sq, self.half_sep)
        tie_c = self.margin_sq * float(self.c_sq.max())  # the expansion's round-off: margin_sq (|x|^2 + max |c|^2)
        margin = math.sqrt(self.margin_sq * self.data_sq + tie_c)
        check, settle = _jit("_check_chunk"), _jit("_settle")
        every = first or not bounds  # every row is recomputed: GEMM blocks are slices of X

        threads = self.pass_threads(every)
        if self.gemm_rows is None:  # the compiled loop: one call per group of chunks
            nc = len(self.chunks)
            groups = 1 if threads <= 1 else min(nc, _GROUPS_PER_THREAD * threads)
            cuts = [nc * g // groups for g in range(groups + 1)]
            args = (self.X, self.x_sq, self.w, self.C, self.Ct2, self.c_sq, self.half_sep, self.move, self.margin_sq,
                    tie_c, margin, self.labels, self.u, self.l, self.todo, first, bounds)
            chunks_pass = _jit("_chunks_pass")

            def group(g, t):
                chunks_pass(*args, self.XT[t], self.acc[t], self.m1[t], self.m2[t], self.i1[t], self.dsums, self.dweights,
                            self.dmembers, self.dirty, self.flagged, self.starts, cuts[g], cuts[g + 1],
                            self.chunk_listed, self.chunk_changed)

            self._drain(group, list(range(groups)), threads)
            self.listed = int(self.chunk_listed.sum())
            self.computed += self.listed
            _jit("_add_changes")(self.dirty, self.dsums, self.dweights, self.dmembers, self.sums, self.weights,
                                 self.members)
            return int(self.chunk_changed.sum())

        def job(c, t):
            lo, hi = self.chunks[c]
            if self.dirty[c]:
                self.dsums[c].fill(0.0)
                self.dweights[c].fill(0.0)
                self.dmembers[c].fill(0)
            todo = self.todo[lo:hi]
            m = check(self.X, self.C, self.move, self.half_sep, margin, self.labels, self.u, self.l, lo, hi, first,
                      bounds, todo, self.flagged, c)
            if self.gemm_rows is not None:
                dense = every or 2 * m > hi - lo  # then the GEMM takes the whole chunk (a slice, no gather)
                if dense and m < hi - lo:
                    todo[:] = np.arange(lo, hi)
                    m = hi - lo
                changed = self._settle_gemm(todo[:m], c, t, bounds, dense, tie_c)
            else:
                changed = settle(self.X, self.x_sq, self.w, self.C, self.Ct2, self.c_sq, self.margin_sq, tie_c, todo,
                                 m, self.labels, self.u, self.l, bounds, self.XT[t], self.acc[t], self.m1[t],
                                 self.m2[t], self.i1[t], self.dsums[c], self.dweights[c], self.dmembers[c])
            self.dirty[c] = changed > 0
            return m, changed

        out = self._drain(job, list(range(len(self.chunks))), threads)
        self.listed = sum(m for m, _ in out)
        self.computed += self.listed
        for c in np.flatnonzero(self.dirty):  # in chunk order: the same sums for every thread count
            self.sums += self.dsums[c]
            self.weights += self.dweights[c]
            self.members += self.dmembers[c]
        return sum(changed for _, changed in out)

    def serial_passes(self, it: int, max_iter: int, tol: float, bounds: bool) -> tuple[int, int, int, float]:
        """Iterations from ``it + 1`` on the calling thread in one compiled call
        (:func:`_serial_passes`, the compiled loop only) while their passes stay small
        (:data:`_SERIAL_MAX_WORK`); returns ``(it, status, changed, shift)``."""
        assert self.gemm_rows is None
        if self.C_next is None:
            self.C_next = np.empty_like(self.C)
        it, status, changed, self.listed, shift, total = _jit("_serial_passes")(
            self.X, self.x_sq, self.w, self.C, self.C_next, self.Ct2, self.c_sq, self.half_sep, self.move,
            self.margin_sq, self.data_sq, self.labels, self.u, self.l, self.todo, bounds, self.XT[0], self.acc[0],
            self.m1[0], self.m2[0], self.i1[0], self.sums, self.weights, self.members, self.dsums, self.dweights,
            self.dmembers, self.dirty, self.flagged, self.starts, it, max_iter, tol)
        self.computed += total
        return it, status, changed, shift

    def _settle_gemm(self, todo, c: int, t: int, bounds: bool, every: bool, tie_c: float) -> int:
        """Closest centres of the rows ``todo`` of chunk ``c`` (``every``: all its rows, in order),
        ``|c|^2 - 2 C x`` by one GEMM per block of rows (on thread ``t`` alone)."""
        if not todo.size:
            return 0
        Xt, C, c_sq = self.Xt, torch.from_numpy(self.C), self.c_sq_t
        (k, d), gathered, values = C.shape, self.gathered[t], self.values[t]
        idx = torch.from_numpy(todo)
        settle = _jit("_settle_columns")
        changed, first_row, step = 0, int(todo[0]), self.gemm_rows
        for s in range(0, todo.size, step):
            e = min(s + step, todo.size)
            m = e - s
            if every:
                Xb = Xt[first_row + s:first_row + e]
            else:  # the rows gathered into this thread's buffer (no allocation per block)
                Xb = torch.index_select(Xt, 0, idx[s:e], out=gathered[:m * d].view(m, d))
            DT = torch.addmm(c_sq, C, Xb.T, alpha=-2.0, out=values[:k * m].view(k, m))
            changed += settle(DT.numpy(), self.X, self.x_sq, self.w, self.C, self.margin_sq, tie_c, todo[s:e],
                              self.labels, self.u, self.l, bounds, self.m1[t], self.m2[t], self.i1[t], self.dsums[c],
                              self.dweights[c], self.dmembers[c])
        return changed

    def own_sq(self) -> np.ndarray:
        """``|x_i - c_{labels_i}|^2`` of every row (by subtraction)."""
        (n, d), out = self.X.shape, np.empty(self.X.shape[0])
        own = _jit("_own_sq")
        self._drain(lambda c, t: own(self.X, self.C, self.labels, *self.chunks[c], out), list(range(len(self.chunks))),
                    max(1, n * (d + 4) // _CHUNK_WORK))  # threads: one per chunk's worth of work, as a pass
        return out

    def inertia(self) -> float:
        """``sum w_i |x_i - c_{labels_i}|^2`` (by subtraction), added chunk by chunk in order."""
        n, d = self.X.shape
        own = _jit("_weighted_own_sq")
        parts = self._drain(lambda c, t: own(self.X, self.C, self.labels, self.w, *self.chunks[c]),
                            list(range(len(self.chunks))), max(1, n * (d + 4) // _CHUNK_WORK))
        return float(math.fsum(parts))

    def update(self) -> float:
        """The new centres: the clusters' means, an empty cluster re-seeded as
        :func:`mercer.kmeans.lloyd` does (with one of the points farthest from their centre, which
        leaves its cluster for this update; the kept sums follow the labels). The shifts go to
        ``move`` for the next pass's bounds. Returns the summed squared shift."""
        sums, weights, members = self.sums, self.weights, self.members
        empty = np.flatnonzero(members == 0)
        if empty.size:
            sums, weights, members = sums.copy(), weights.copy(), members.copy()
            far = torch.topk(torch.from_numpy(self.own_sq()), empty.size).indices.numpy()
            for e, f in zip(empty.tolist(), far.tolist()):
                wf, a = self.w[f], self.labels[f]
                sums[a] -= self.X[f] * wf
                weights[a] -= wf
                members[a] -= wf != 0
                sums[e] = self.X[f] * wf
                weights[e] = wf
                members[e] = wf != 0
        C_new = np.empty_like(self.C)
        shift = _jit("_means")(sums, weights, members, self.C, C_new, self.move)
        self.C = C_new
        return shift


def centre(X: np.ndarray, in_place: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, X - mean, |X - mean|^2 by row)`` of a float array ``X`` (n, d) of any layout, in two
    compiled reads of ``X``: the column means, then the centred rows (C order; written into ``X``
    itself when ``in_place`` and ``X`` is C-contiguous) with their squared norms, one part of the
    rows per thread (torch's intra-op threads, as :func:`fused_threads`)."""
    n, d = X.shape
    sums = np.empty(d)
    _jit("_column_sums")(X, sums)
    mean = (sums / max(n, 1)).astype(X.dtype)
    out = X if in_place and X.flags.c_contiguous and X.flags.writeable else np.empty((n, d), dtype=X.dtype)
    x_sq = np.empty(n, dtype=X.dtype)
    threads = max(1, min(torch.get_num_threads(), 4 * n * d // _CHUNK_WORK))  # a part per chunk's worth
    cuts = [n * p // threads for p in range(threads + 1)]
    centre_rows = _jit("_centre_rows")
    pool = _pool(threads)
    jobs = [pool.submit(centre_rows, X, mean, out, x_sq, cuts[p], cuts[p + 1]) for p in range(1, threads)]
    centre_rows(X, mean, out, x_sq, cuts[0], cuts[1])
    for job in jobs:
        job.result()
    return mean, out, x_sq


def lloyd_fused(X: torch.Tensor, x_sq: torch.Tensor, centers: torch.Tensor, *, rows: int, sample_weight=None,
                max_iter: int = 300, tol: float = 0.0, bounds: bool | None = None, threads: int | None = None,
                gemm: bool | None = None, serial: bool | None = None):
    """:func:`mercer.kmeans.lloyd` on CPU tensors (float32 or float64), one compiled pass per
    iteration (see the module docstring).

    Same stopping rules (labels unchanged, summed squared shift at most ``tol``, ``max_iter``) and
    the same labels; ``bounds`` switches Hamerly's bounds on (they prove most labels unchanged
    without computing distances once the centres settle; by default from
    :data:`LOOP_MIN_CLUSTERS_FOR_BOUNDS` or :data:`GEMM_MIN_CLUSTERS_FOR_BOUNDS`
    clusters). ``gemm``: whether the distances are computed by GEMM blocks of at most ``rows``
    rows (:func:`~mercer.kmeans.block_rows`) or in the compiled loop (default: :func:`uses_gemm`).
    ``threads`` defaults to :func:`fused_threads`; the result does not depend on it. In the compiled
    loop, iterations whose passes are small (:data:`_SERIAL_MAX_WORK`: not worth a second
    thread) run in one compiled call, up to :data:`_SERIAL_ITERS` at a time (:func:`_serial_passes`;
    ``serial=False`` returns after every pass); the numbers are the same either way.

    Returns ``(centers, labels, inertia, n_iter, converged_labels)`` as in
    :class:`~mercer.kmeans.KMeansResult`.
    """
    n, d = X.shape
    k = centers.shape[0]
    gemm = uses_gemm(k, d) if gemm is None else gemm
    if bounds is None:
        bounds = k >= (GEMM_MIN_CLUSTERS_FOR_BOUNDS if gemm else LOOP_MIN_CLUSTERS_FOR_BOUNDS)
    bounds = bool(bounds and k > 1)
    threads = fused_threads(n, k, d, gemm) if threads is None else max(1, int(threads))
    Xn = X.detach().contiguous().numpy()
    w = np.ones(n) if sample_weight is None else sample_weight.detach().to(torch.float64).contiguous().numpy()
    st = _State(Xn, x_sq.detach().contiguous().numpy(), w, centers.detach().contiguous().numpy(), threads=threads,
                rows=chunk_rows(n, k, d, gemm), gemm_rows=max(1, min(int(rows), _GEMM_ROWS)) if gemm else None)
    strict, it = False, 0
    serial = not gemm if serial is None else serial and not gemm
    bar = task("Lloyd (k-means)", total=max_iter, unit="it")
    with num_threads(1):  # every thread's GEMMs on itself alone (the pool's threads: see _set_one_thread)
        while it < max_iter:
            if serial and st.pass_work(every=it == 0 or not bounds) < _SERIAL_MAX_WORK:
                it, status, changed, shift = st.serial_passes(it, max_iter, tol, bounds)
                if status == _PAUSE:  # (at least one iteration was run)
                    bar.update(it, shift=shift)
                    continue
                if status != _EMPTY:  # it stopped as the lines below would have
                    bar.update(it, shift=shift)
                    strict = status == _STRICT
                    break
            else:
                it += 1
                changed = st.run_pass(first=it == 1, bounds=bounds)
            shift = st.update()
            bar.update(it, shift=shift)
            if it > 1 and changed == 0:
                strict = True
                break
            if shift <= tol:
                break
        bar.close()
        if not strict:  # labels for the final centres (after strict convergence they are theirs already)
            st.run_pass(first=False, bounds=bounds)
        inertia = st.inertia()
    log.debug("fused Lloyd: %d iterations on %d threads, %.3g of the n k distances computed", it, threads,
              st.computed / max(n * it, 1))
    return torch.from_numpy(st.C), torch.from_numpy(st.labels), inertia, it, strict
