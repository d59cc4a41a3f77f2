"""The SMO solver's compiled parts: in-loop RBF kernel rows, LIBSVM's working-set selection in the
``F = -y G`` form, and gradient reconstruction from the kernel cache, each against a dense reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.svm import SVC

from mercer import KernelSVC
from mercer.kernels import RBF, Linear
from mercer.models.svm import _smo
from mercer.models.svm._svc import _INLOOP_MAX_FEATURES, _Rows

_smo._jit("_run")  # the compiled functions (numba) from here on


# -- kernel rows computed inside the loop -----------------------------------------------------------
@pytest.mark.parametrize("d", [1, 3, 9, 64])
def test_inloop_rbf_rows_equal_the_dense_kernel_float64(d):
    rng = np.random.default_rng(d)
    n = 1300  # more than two chunks of _CHUNK entries, and a remainder
    X = rng.normal(size=(n, d)) * rng.uniform(0.01, 8.0, size=(n, 1)) / np.sqrt(d)  # near and far points
    XT = np.ascontiguousarray(X.T)
    scratch = np.empty((3, max(_smo._CHUNK, d)))
    out = np.empty(n)
    for i in range(40):
        _smo._rbf_row(XT, i, out, scratch)
        ref = np.exp(-((X[i] - X) ** 2).sum(1))
        seen = ref > 1e-40  # what a float32 cache row holds (exp(-v) is accurate to |v| ulps)
        np.testing.assert_allclose(out[seen], ref[seen], rtol=1e-13 * max(1.0, ((X[i] - X) ** 2).sum(1).max()))
        assert np.all(out[~seen] < 1e-40) and np.all(out >= 0)
        assert out[i] == 1.0  # the diagonal exactly
        assert np.mean(out.astype(np.float32) == ref.astype(np.float32)) > 0.999


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bands", [2, 3])
def test_inloop_rbf_rows_in_bands_equal_one_thread(bands, dtype):
    # a long row is computed in bands of samples on several threads: the same numbers, bit for bit
    rng = np.random.default_rng(bands)
    n, d = 150_001, 9  # above _PAR_MIN_WORK, bands of whole chunks and a short last one
    assert n * (d + 8) >= _smo._PAR_MIN_WORK
    XT = np.ascontiguousarray((rng.normal(size=(d, n)) / np.sqrt(d)).astype(dtype))
    one, many = np.empty(n, dtype=np.float32), np.full(n, np.nan, dtype=np.float32)
    for i in (0, 17, n - 1):
        _smo._rbf_row(XT, i, one, np.empty((3, _smo._CHUNK), dtype=dtype))
        _smo._rbf_row(XT, i, many, np.empty((3 * bands, _smo._CHUNK), dtype=dtype))
        np.testing.assert_array_equal(many, one)
        assert one[i] == 1.0


def test_inloop_rbf_rows_float32():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(700, 5)).astype(np.float32)
    XT = np.ascontiguousarray(X.T)
    scratch = np.empty((3, _smo._CHUNK), dtype=np.float32)
    out = np.empty(700, dtype=np.float32)
    X64 = X.astype(np.float64)
    for i in range(0, 700, 97):
        _smo._rbf_row(XT, i, out, scratch)
        v = ((X64[i] - X64) ** 2).sum(1)
        ref = np.exp(-v)
        assert np.all(np.abs(out - ref) <= 4e-7 * np.maximum(1.0, v) * ref)  # float32 sums: |v| ulps
        assert out[i] == 1.0


def test_inloop_exp_over_the_whole_range():
    # exp(-v) for v from 0 to beyond the underflow of both precisions
    v = np.concatenate([[0.0, 1e-300, 1e-17, 1e-8], np.linspace(0, 800, 5001), [1e4, 1e300]])
    got = v.copy()
    _smo._exp_chunk64(got, np.empty_like(got))
    ref = np.exp(-v)
    big = ref > 1e-300
    np.testing.assert_allclose(got[big], ref[big], rtol=2e-14)
    assert np.all(got[~big] < 1e-300) and np.all(got >= 0) and got[0] == 1.0
    # in the float32 cache the float64 rows round as the exact exponential does
    assert np.array_equal(got.astype(np.float32), ref.astype(np.float32))
    v32 = v[v < 1e30].astype(np.float32)
    got32 = v32.copy()
    _smo._exp_chunk32(got32, np.empty_like(got32))
    ref32 = np.exp(-v32.astype(np.float64))
    normal = ref32 > 1.2e-38
    np.testing.assert_allclose(got32[normal & (ref32 > np.exp(-87.0))], ref32[normal & (ref32 > np.exp(-87.0))],
                               rtol=3e-7)
    assert np.all(got32[v32 > 87.0] == 0.0) and got32[0] == 1.0


def test_rows_choose_the_inloop_path_for_rbf_at_few_features():
    rng = np.random.default_rng(0)
    for d, rbf, want in [(3, True, True), (_INLOOP_MAX_FEATURES, True, True),
                         (_INLOOP_MAX_FEATURES + 1, True, False), (3, False, False)]:
        X = torch.as_tensor(rng.normal(size=(20, d)))
        rows = _Rows(RBF(gamma=0.3) if rbf else Linear(), X, 2**24)
        feats = rows.features()
        assert (feats is not None) == want
        if want:  # sqrt(gamma) x, one feature per row
            np.testing.assert_allclose(feats, np.sqrt(0.3) * X.numpy().T, rtol=1e-15)
    # |x|^2 (or |x - x'|^2) overflows: the blocked path, which reports it
    for big, dtype in [(1e200, torch.float64), (1e154, torch.float64), (1e19, torch.float32)]:
        X = torch.tensor([[big, 0.0], [-big, 1.0], [0.0, 1.0]], dtype=dtype)
        assert _Rows(RBF(gamma=1.0), X, 2**24).features() is None
    assert _Rows(RBF(gamma=1.0), X[:, 1:], 2**24).features() is not None


# -- the solver with in-loop rows against the solver fed rows from Python -------------------------------
def _problem(n=400, d=4, seed=0):
    X, y = make_classification(n_samples=n, n_features=d, n_informative=min(d, 3), n_redundant=0,
                               flip_y=0.1, random_state=seed)
    yy = np.where(y == 1, 1.0, -1.0)
    g = 1.0 / (d * X.var())
    XT = np.ascontiguousarray((X * np.sqrt(g)).T)
    scratch = np.empty((3, _smo._CHUNK))
    K = np.empty((n, n))
    for i in range(n):  # the very numbers the loop computes
        _smo._rbf_row(XT, i, K[i], scratch)
    return X, yy, XT, K


@pytest.mark.parametrize("cache_rows", [7, 40, 400])
def test_inloop_rows_give_the_iterates_of_rows_from_python(cache_rows):
    X, yy, XT, K = _problem()
    Cb = np.where(yy > 0, 1.0, 2.0)
    kw = dict(matvec=lambda r, c, v: K[np.ix_(r, c)] @ v, cache_rows=cache_rows, cache_dtype=np.float32,
              shrinking=False)
    a = _smo.solve_smo(lambda i: K[i], np.ones(len(yy)), yy, Cb, **kw)
    b = _smo.solve_smo(lambda i: pytest.fail("rows requested"), np.ones(len(yy)), yy, Cb, features=XT, **kw)
    assert a.converged and b.converged and a.n_iter == b.n_iter
    np.testing.assert_array_equal(a.alpha, b.alpha)
    assert a.rho == b.rho
    if cache_rows < len(yy):  # rows were evicted and computed again
        assert b.rows_computed > cache_rows
    # with shrinking (and gradient reconstruction): the same dual, to the tolerance
    kw["shrinking"] = True
    a = _smo.solve_smo(lambda i: K[i], np.ones(len(yy)), yy, Cb, tol=1e-6, **kw)
    b = _smo.solve_smo(lambda i: pytest.fail("rows requested"), np.ones(len(yy)), yy, Cb, tol=1e-6, features=XT,
                       **kw)
    np.testing.assert_allclose(a.alpha, b.alpha, atol=1e-4)
    assert abs(a.objective - b.objective) < 1e-6 * abs(a.objective)


def test_cache_grows_only_by_rows_that_recur(monkeypatch):
    # in-loop rows: GROW_FROM slots fill, then new rows evict the least recently used one; a row
    # evicted before takes a fresh slot (the cache grows by one), up to its capacity
    X, yy, XT, K = _problem()
    n = len(yy)
    st = np.zeros(_smo._N_STATE, dtype=np.int64)
    st[_smo._S_GROWN] = 3
    c = _smo._RowCache(n, 6, np.float32)
    scratch = np.empty((3, _smo._CHUNK))
    for i in range(5):  # rows 0, 1, 2 fill three slots; 3 evicts 0, 4 evicts 1
        s = _smo._row(i, -1, c.cache, c.slot_of, c.owner, c.last_used, st, XT, scratch)
        np.testing.assert_array_equal(c.cache[s], K[i].astype(np.float32))
    assert st[_smo._S_USED] == 3 and list(c.slot_of[:5]) == [_smo._EVICTED, _smo._EVICTED, 2, 0, 1]
    s = _smo._row(0, -1, c.cache, c.slot_of, c.owner, c.last_used, st, XT, scratch)  # 0 recurs: a fresh slot
    assert s == 3 and st[_smo._S_USED] == 4 and st[_smo._S_GROWN] == 4
    s = _smo._row(5, c.slot_of[2], c.cache, c.slot_of, c.owner, c.last_used, st, XT, scratch)  # new: evicts 3
    assert st[_smo._S_USED] == 4 and c.slot_of[3] == _smo._EVICTED and s == 0
    # rows stored from Python follow the same rule
    st2 = np.zeros(_smo._N_STATE, dtype=np.int64)
    st2[_smo._S_GROWN] = 2
    c2 = _smo._RowCache(n, 8, np.float32)
    c2.store(np.array([0, 1]), K[[0, 1]], -1, st2)
    c2.store(np.array([2]), K[[2]], -1, st2)  # evicts row 0
    assert st2[_smo._S_USED] == 2 and c2.slot_of[0] == _smo._EVICTED
    c2.store(np.array([0, 3]), K[[0, 3]], 2, st2)  # 0 recurs: one fresh slot; 3 evicts row 1, not 2
    assert st2[_smo._S_USED] == 3 and c2.slot_of[1] == _smo._EVICTED and c2.slot_of[2] >= 0
    for i in (0, 2, 3):
        np.testing.assert_array_equal(c2.cache[c2.slot_of[i]], K[i].astype(np.float32))
    # a solve: the iterates of a cache that keeps every row
    Cb = np.where(yy > 0, 1.0, 2.0)
    kw = dict(matvec=lambda r, cc, v: K[np.ix_(r, cc)] @ v, cache_rows=n, cache_dtype=np.float32, features=XT)
    full = _smo.solve_smo(None, np.ones(n), yy, Cb, **kw)
    monkeypatch.setattr(_smo, "GROW_FROM", 4)
    small = _smo.solve_smo(None, np.ones(n), yy, Cb, **kw)
    assert small.n_iter == full.n_iter and small.rows_computed > full.rows_computed
    np.testing.assert_array_equal(small.alpha, full.alpha)
    assert small.rho == full.rho


def test_bad_features_are_refused():
    with pytest.raises(ValueError, match=r"features must be a float32 or float64 array of shape \(d, 3\)"):
        _smo.solve_smo(lambda i: None, np.ones(3), np.array([1.0, -1.0, 1.0]), np.ones(3),
                       matvec=lambda r, c, v: None, cache_rows=3, features=np.ones((2, 4)))


# -- working-set selection -----------------------------------------------------------------------------
def _select_reference(F, side, QD, Ki, active, gmax, imax, eps):
    """LIBSVM's WSS3 in its own terms (G = -y F), the last of equal candidates winning."""
    jmin, obj_min, gmax2 = -1, np.inf, -np.inf
    for t in active:
        if side[t] & _smo._LOW:
            gmax2 = max(gmax2, -F[t])
            gd = gmax - F[t]
            if gd > 0:
                quad = QD[imax] + QD[t] - 2.0 * float(Ki[t])
                od = -(gd * gd) / (quad if quad > 0 else _smo.TAU)
                if od <= obj_min:
                    jmin, obj_min = t, od
    return (1, -1) if gmax + gmax2 < eps or jmin == -1 else (0, jmin)


def _select_with_row(F, side, QD, Ki, active, na, gmax, imax, lpos=None):
    """``_select`` given ``imax``'s kernel row ``Ki`` (the only cached row): its code and ``need``."""
    n = F.shape[0]
    slot_of = np.full(n, -1)
    slot_of[imax] = 0
    need = np.zeros(2, dtype=np.int64)
    st = np.zeros(_smo._N_STATE, dtype=np.int64)
    st[_smo._S_USED] = 1
    code = _smo._select(F, side, QD, Ki[None, :].copy(), slot_of, np.array([imax]), np.zeros(1, dtype=np.int64),
                        active, na, 1e-3, st, need, np.empty((0, 0)), np.empty((3, 1)), gmax, imax, None, lpos)
    return code, need


@pytest.mark.parametrize("seed", range(6))
def test_select_is_libsvm_wss3(seed):
    rng = np.random.default_rng(seed)
    n = 300
    F = np.round(rng.normal(size=n), 1)  # many exactly equal values: ties decide by position
    side = rng.integers(0, 4, size=n).astype(np.int8)
    QD = np.where(rng.random(n) < 0.8, 1.0, rng.uniform(0.5, 2.0, size=n))
    Ki = np.round(rng.uniform(-1, 1, size=n), 2).astype(np.float32)
    Ki[rng.random(n) < 0.1] = 1.5  # non-positive curvature: LIBSVM's tau
    active = rng.permutation(n)[: n - 20 * seed]
    gmax, imax = _smo._max_up(F, side, active, len(active))
    code, need = _select_with_row(F, side, QD, Ki, active, len(active), gmax, imax)
    up = [t for t in active if side[t] & _smo._UP]
    assert imax == max((t for t in up if F[t] == max(F[up])), key=lambda t: list(active).index(t))
    ref = _select_reference(F, side, QD, Ki, active, gmax, imax, 1e-3)
    assert code == ref[0] and (code == 1 or need[1] == ref[1])


@pytest.mark.parametrize("seed", range(4))
def test_ascending_active_set_breaks_ties_in_libsvm_order(seed):
    """C-SVC's loop reads its active set in ascending order and carries LIBSVM's order apart (lorder,
    lpos): the maximal violator, WSS3's choice and shrinking are those of the LIBSVM-ordered set, ties
    (many here) included, and the shrunk set is the same set, ascending, LIBSVM's swaps made on lorder."""
    rng = np.random.default_rng(seed)
    n = 300
    F = np.round(rng.normal(size=n), 1)
    side = rng.integers(1, 4, size=n).astype(np.int8)
    QD = np.ones(n)
    Ki = np.round(rng.uniform(-1, 1, size=n), 2).astype(np.float32)
    lorder = rng.permutation(n).astype(_smo._ACTIVE_DTYPE)  # LIBSVM's order after earlier swaps
    lpos = np.empty(n, dtype=np.int64)
    lpos[lorder] = np.arange(n)
    na = n - 15 * seed
    asc = np.concatenate([np.sort(lorder[:na]), np.sort(lorder[na:])]).astype(_smo._ACTIVE_DTYPE)
    ref = lorder.copy()
    g_ref, i_ref = _smo._max_up(F, side, ref, na)
    g_new, i_new = _smo._max_up(F, side, asc, na, lpos)
    assert (g_ref, i_ref) == (g_new, i_new)
    picks = []
    for active, lp in ((ref, None), (asc, lpos)):
        code, need = _select_with_row(F, side, QD, Ki, active, na, g_ref, i_ref, lp)
        picks.append((code, int(need[1])))
    assert picks[0] == picks[1]
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    side_b = np.where(rng.random(n) < 0.5, _smo._UP, _smo._LOW).astype(np.int8)  # at a bound: shrinkable
    F = np.round(np.where(side_b == _smo._UP, F - 1.0, F + 1.0), 1)  # overlapping: some shrink, some stay
    st_ref = np.zeros(_smo._N_STATE, dtype=np.int64)
    st_ref[_smo._S_ACTIVE] = na
    st_ref[_smo._S_UNSHRINK] = 1
    st_new = st_ref.copy()
    lorder_new, lpos_new = lorder.copy(), lpos.copy()
    _smo._shrink(F, side_b, ref, st_ref, 1e-3, y)
    _smo._shrink(F, side_b, asc, st_new, 1e-3, y, lorder_new, lpos_new)
    m = int(st_ref[_smo._S_ACTIVE])
    assert 0 < m < na and int(st_new[_smo._S_ACTIVE]) == m
    np.testing.assert_array_equal(lorder_new, ref)  # LIBSVM's swaps, made on lorder
    np.testing.assert_array_equal(lpos_new[lorder_new], np.arange(n))
    np.testing.assert_array_equal(asc[:m], np.sort(ref[:m]))  # the same active set, ascending
    np.testing.assert_array_equal(np.sort(asc[m:]), np.sort(ref[m:]))


@pytest.mark.parametrize("cache_rows", [9, 500])
@pytest.mark.parametrize("svr", [False, True])
def test_ascending_active_set_gives_the_same_iterates(svr, cache_rows):
    """``ascending=True`` (the order C-SVC's and epsilon-SVR's passes read, LIBSVM's carried apart)
    makes the iterates of LIBSVM's order, bit for bit, with shrinking and reconstructions, on a
    problem with many exact ties (rounded features: duplicated rows)."""
    X, yy, XT, K = _problem(n=400, d=3)
    X = np.round(X, 1)
    g = 1.0 / (X.shape[1] * X.var())
    XT = np.ascontiguousarray((X * np.sqrt(g)).T)
    n = len(yy)
    kw = dict(matvec=lambda r, c, v: Kf[np.ix_(r, c)] @ v, cache_rows=cache_rows, cache_dtype=np.float32,
              shrinking=True, features=XT, tol=1e-4)
    Kf = np.empty((n, n))
    for i in range(n):
        _smo._rbf_row(XT, i, Kf[i], np.empty((3, _smo._CHUNK)))
    if svr:  # epsilon-SVR: 2n variables reading n rows
        t = X[:, 0] + 0.3 * np.round(np.sin(3 * X[:, 1]), 1)
        kw.update(rmap=np.concatenate([np.arange(n), np.arange(n)]), p=np.concatenate([0.1 - t, 0.1 + t]))
        yv, Cb = np.concatenate([np.ones(n), -np.ones(n)]), np.full(2 * n, 2.0)
    else:
        yv, Cb = yy, np.where(yy > 0, 1.0, 3.0)
    a = _smo.solve_smo(lambda i: pytest.fail("rows requested"), np.ones(n), yv, Cb, **kw)
    b = _smo.solve_smo(lambda i: pytest.fail("rows requested"), np.ones(n), yv, Cb, ascending=True, **kw)
    assert a.converged and b.converged and a.n_iter == b.n_iter
    np.testing.assert_array_equal(a.alpha, b.alpha)
    assert a.rho == b.rho and a.rows_computed == b.rows_computed


# -- the pair step (shared by the SMO loop and the batched solver's inner SMO) ----------------------------
@pytest.mark.parametrize("seed", range(4))
def test_pair_step_minimises_the_pair_subproblem(seed):
    # Moving the pair along y^T alpha = const, alpha_i + y_i t, alpha_j - y_j t, changes the dual by
    # (F_j - F_i) t + quad t^2 / 2: the step is its minimiser t* = (F_i - F_j) / quad clipped to the
    # segment where both stay in [0, C] (quad <= 0: LIBSVM's tau).
    rng = np.random.default_rng(seed)
    for _ in range(400):
        y = rng.choice([-1.0, 1.0], size=2)
        Cb = rng.choice([1.0, rng.uniform(0.1, 5.0)], size=2)
        alpha = np.where(rng.random(2) < 0.5, rng.choice([0.0, 1.0], size=2) * Cb, rng.uniform(0, 1, 2) * Cb)
        F = rng.normal(size=2) * rng.choice([1e-3, 1.0, 100.0])
        QD = rng.uniform(0.5, 2.0, size=2)
        Kij = rng.choice([rng.uniform(-1, 1), (QD[0] + QD[1]) / 2, (QD[0] + QD[1]) / 2 + 0.3])  # PSD, 0, < 0
        side = np.zeros(2, dtype=np.int8)
        a0 = alpha.copy()
        dai, daj, nonpsd = _smo._pair_step(0, 1, Kij, y, F, alpha, Cb, QD, side)
        quad = QD[0] + QD[1] - 2 * Kij
        t = (F[0] - F[1]) / (quad if quad > 0 else _smo.TAU)
        # t's feasible segment: 0 <= a0_i + y_i t <= C_i and 0 <= a0_j - y_j t <= C_j
        lo_i, hi_i = sorted([-a0[0] * y[0], (Cb[0] - a0[0]) * y[0]])
        lo_j, hi_j = sorted([a0[1] * y[1], (a0[1] - Cb[1]) * y[1]])
        t = min(max(t, max(lo_i, lo_j)), min(hi_i, hi_j))
        assert abs(dai - t) <= 1e-9 * max(1.0, abs(t)) + 1e-12 and abs(daj + t) <= 1e-9 * max(1.0, abs(t)) + 1e-12
        np.testing.assert_allclose(alpha, a0 + np.array([y[0], -y[1]]) * t, rtol=0, atol=1e-9 * max(1.0, abs(t)))
        # in the box, up to LIBSVM's rounding (s - C_i for s = C_i + C_j rounded: an ulp past C_j)
        assert np.all(alpha >= 0) and np.all(alpha <= Cb * (1 + 4e-16))
        assert bool(nonpsd) == (quad < -_smo._NONPSD_RTOL * (QD[0] + QD[1]))
        for k in range(2):  # the sides of the new multipliers
            up = alpha[k] < Cb[k] if y[k] > 0 else alpha[k] > 0
            low = alpha[k] > 0 if y[k] > 0 else alpha[k] < Cb[k]
            assert side[k] == (_smo._UP if up else 0) | (_smo._LOW if low else 0)


# -- gradient reconstruction ----------------------------------------------------------------------------
def test_reconstruction_from_cached_rows_and_matvec():
    rng = np.random.default_rng(0)
    n = 60
    X, yy, XT, K = _problem(n=n)
    Cb = np.ones(n)
    alpha = np.where(rng.random(n) < 0.5, rng.uniform(0, 1, n), np.where(rng.random(n) < 0.5, 0.0, 1.0))
    d = _smo._start(yy, Cb, np.ones(n), shrinking=True, max_iter=-1)
    d.alpha[:] = alpha
    Q = yy[:, None] * yy[None, :] * K.astype(np.float32).astype(np.float64)
    G = Q @ alpha - 1.0
    d.G_bar[:] = Q[:, alpha >= Cb] @ Cb[alpha >= Cb]
    d.F[:] = -yy * G
    d.active[:] = rng.permutation(n)
    na = 35
    inactive = d.active[na:]
    d.F[inactive] = np.nan  # stale: must all be rewritten
    d.st[_smo._S_ACTIVE] = na
    c = _smo._RowCache(n, 10, np.float32)
    free = np.flatnonzero((alpha > 0) & (alpha < Cb))
    c.store(free[:6], K[free[:6]], -1, d.st)  # some free rows cached, the others from matvec
    calls = []

    def matvec(r, cols, v):
        calls.append(len(cols))
        return K.astype(np.float32).astype(np.float64)[np.ix_(r, cols)] @ v

    _smo._reconstruct(d, matvec, c, np.empty((0, 0)), np.empty((3, 1)))
    assert d.st[_smo._S_ACTIVE] == n and calls == [free.size - 6]
    np.testing.assert_allclose(d.F, -yy * G, rtol=0, atol=1e-12)
    # in-loop rows: every free row from the cache, computed where missing, no matvec
    d.F[inactive] = np.nan
    d.st[_smo._S_ACTIVE] = na
    _smo._reconstruct(d, lambda *a: pytest.fail("matvec called"), _smo._RowCache(n, 8, np.float32), XT,
                      np.empty((3, _smo._CHUNK)))
    np.testing.assert_allclose(d.F, -yy * G, rtol=0, atol=1e-12)


# -- the estimator: LIBSVM's iterations and support vectors ---------------------------------------------
@pytest.mark.parametrize("d", [2, 9, 100])
def test_iterations_and_support_equal_libsvm(d):
    # d = 2, 9: kernel rows inside the loop; d = 100: rows in blocks from torch
    X, y = make_classification(n_samples=800, n_features=d, n_informative=min(d, 5), n_redundant=0,
                               flip_y=0.05, random_state=d)
    for C in (0.5, 10.0):
        ours, ref = KernelSVC(C=C).fit(X, y), SVC(C=C).fit(X, y)
        np.testing.assert_array_equal(ours.n_iter_, ref.n_iter_)
        np.testing.assert_array_equal(ours.support_, ref.support_)
        assert np.abs(ours.decision_function(X) - ref.decision_function(X)).max() < 1e-6
    f32 = KernelSVC(dtype="float32").fit(X, y)
    assert len(np.setxor1d(f32.support_, SVC().fit(X, y).support_)) <= 2


# -- a call that returns (pause, missing row) and resumes keeps the maximal violator ----------------------
@pytest.mark.parametrize("kind", ["svc", "svr", "nu"])
def test_resumed_calls_keep_the_iterates(kind, monkeypatch):
    # The loop keeps the maximal violator across a return that leaves F as it is (_PAUSE, _NEED_ROW)
    # instead of finding it again: a solve that returns after every few iterations, with rows from
    # Python (a return per missing row) and duplicated samples (exactly equal violators), must give
    # the iterates of one that returns only for its rows.
    X, yy, XT, K = _problem(n=300)
    X, yy, K = np.vstack([X, X[:60]]), np.concatenate([yy, yy[:60]]), None
    n = len(yy)
    XT = np.ascontiguousarray((X * np.sqrt(1.0 / (4 * X.var()))).T)
    scratch = np.empty((3, _smo._CHUNK))
    K = np.empty((n, n))
    for i in range(n):
        _smo._rbf_row(XT, i, K[i], scratch)
    kw = dict(matvec=lambda r, c, v: K[np.ix_(r, c)] @ v, cache_rows=40, cache_dtype=np.float32, batch=1)
    if kind == "svc":
        args = (np.ones(n), yy, np.where(yy > 0, 1.0, 2.0))
    elif kind == "svr":  # 2n variables reading n rows
        t = X[:, 0] + 0.1 * X[:, 1]
        args = (np.ones(n), np.r_[np.ones(n), -np.ones(n)], np.full(2 * n, 1.0))
        kw.update(p=np.r_[0.1 - t, 0.1 + t], rmap=np.r_[np.arange(n), np.arange(n)])
    else:  # nu-SVC from LIBSVM's start
        a0 = np.zeros(n)
        for s in (1.0, -1.0):
            idx = np.flatnonzero(yy == s)
            a0[idx[:20]] = 1.0
            a0[idx[20]] = 0.5
        args = (np.ones(n), yy, np.ones(n))
        kw.update(p=np.zeros(n), alpha0=a0, nu=True)
    ref = _smo.solve_smo(lambda i: K[i], *args, **kw)
    monkeypatch.setattr(_smo, "PAUSE_WORK", 600)  # a return every iteration or two
    calls = []
    paused = _smo.solve_smo(lambda i: calls.append(1) or K[i], *args, **kw)
    assert ref.converged and paused.n_iter == ref.n_iter and len(calls) > 40
    np.testing.assert_array_equal(paused.alpha, ref.alpha)
    assert paused.rho == ref.rho and paused.rows_computed == ref.rows_computed


# -- the nu and one-class duals' start through the row cache ------------------------------------------------
@pytest.mark.parametrize("layout", ["nusvr", "svr_pairs", "nusvc"])
@pytest.mark.parametrize("slots", [400, 7])
@pytest.mark.parametrize("inloop", [False, True])
def test_cached_start_equals_the_plain_start(layout, slots, inloop):
    # _warm_start_cached (the SMO's start: rows read twice computed once and kept in the cache, nu-SVR's
    # sums over the first half, mirrored) gives _warm_start's F, G_bar and sides bit for bit, with a
    # cache that holds every start row and one that holds 7; the rows it keeps are the kernel's rows
    rng = np.random.default_rng(7)
    n = 150
    X = rng.normal(size=(n, 3))
    XT = np.ascontiguousarray((X * np.sqrt(0.4)).T)
    scratch = np.empty((3 * _smo._row_bands(), _smo._CHUNK))
    K = np.empty((n, n), dtype=np.float32)  # the loop's own rows (what in-loop rows are)
    for i in range(n):
        _smo._rbf_row(XT, i, K[i], scratch)
    t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    if layout == "nusvc":
        y, p, rmap = np.where(X[:, 1] > 0, 1.0, -1.0), np.zeros(n), None
        Cb = rng.uniform(0.5, 2.0, n)
        a0 = np.where(rng.random(n) < 0.4, np.minimum(Cb, rng.uniform(0.0, 2.0, n)), 0.0)
    else:  # 2n variables reading n rows; nu-SVR's p is odd under the swap of halves, epsilon-SVR's is not
        y, rmap = np.r_[np.ones(n), -np.ones(n)], np.r_[np.arange(n), np.arange(n)]
        p = np.r_[-t, t] if layout == "nusvr" else np.r_[0.1 - t, 0.1 + t]
        Cb = np.full(2 * n, 1.5)
        half = np.where(np.arange(n) < 50, 1.5, 0.0)
        half[50] = 0.7
        a0 = np.r_[half, half] if layout == "nusvr" else np.r_[half, np.where(np.arange(n) % 3 == 0, half, 0.0)]
    qd = np.ones(len(y))
    calls = []

    def rows(idx):
        calls.append(len(idx))
        return K[idx].astype(np.float64)

    ref = _smo._start(y, Cb, qd, shrinking=True, max_iter=-1, p=p, rmap=rmap)
    _smo._warm_start(ref, a0, rows, 16, np.float32)
    d = _smo._start(y, Cb, qd, shrinking=True, max_iter=-1, p=p, rmap=rmap)
    c = _smo._RowCache(n, slots, np.float32)
    calls.clear()
    _smo._warm_start_cached(d, a0, rows, 16, c, XT if inloop else np.empty((0, 0)), scratch)
    np.testing.assert_array_equal(d.F, ref.F)
    np.testing.assert_array_equal(d.G_bar, ref.G_bar)
    np.testing.assert_array_equal(d.side, ref.side)
    np.testing.assert_array_equal(d.alpha, a0)
    # rows read twice (SVR's two variables of a sample) are kept, as many as the cache holds
    rm = np.arange(len(y)) % n
    used = rm[a0 > 0]
    vals, counts = np.unique(used, return_counts=True)
    twice = vals[counts > 1]  # in order of first use too (the first half's variables come first)
    kept = np.flatnonzero(c.slot_of >= 0)
    np.testing.assert_array_equal(kept, twice[:slots])
    assert d.st[_smo._S_ROWS] == len(kept) and d.st[_smo._S_USED] == len(kept)
    for i in kept:
        np.testing.assert_array_equal(c.cache[c.slot_of[i]], K[i])
    # rows computed: each kept row once (in-loop: none from rows()), the others once per variable
    from_rows = int(np.sum(calls))
    assert from_rows == (0 if inloop else len(kept)) + int(np.sum(~np.isin(used, kept)))
