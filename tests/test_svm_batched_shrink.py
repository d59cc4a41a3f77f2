"""Shrinking in the batched working-set solver (``models/svm/_batched.py``): the active problem made
smaller and the shrunk variables' gradients reconstructed, for every problem type of LIBSVM's
general dual, with kernel rows computed in the compiled loop (RBF at few features) and by the
caller (other kernels, dense RBF at many features), against LIBSVM's solution; and the row
cache's narrowing."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import svm
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.preprocessing import StandardScaler
from test_svm_batched import _same_machine

from mercer.models.svm import KernelSVC, KernelSVR, NuSVC, NuSVR, OneClassSVM
from mercer.models.svm import _batched, _dual


@pytest.fixture
def shrinks(monkeypatch):
    """Batched solves with working sets of 32 (many outer iterations, so that shrinking happens);
    records the active problem's size at each narrowing and each reconstruction."""
    seen = {"narrow": [], "widen": 0}
    narrow, reset = _batched._Cache.narrow, _batched._Cache.reset

    def spy_narrow(self, keep, carry):
        seen["narrow"].append(keep.shape[0])
        return narrow(self, keep, carry)

    def spy_reset(self, width):
        if getattr(self, "width", None) is not None and width > self.width:
            seen["widen"] += 1
        return reset(self, width)

    monkeypatch.setattr(_dual, "SOLVER", "batched")
    monkeypatch.setattr(_batched, "Q_MAX", 32)
    monkeypatch.setattr(_batched._Cache, "narrow", spy_narrow)
    monkeypatch.setattr(_batched._Cache, "reset", spy_reset)
    return seen


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return StandardScaler().fit_transform(X), (y - y.mean()) / y.std()


CASES = {
    "SVC": (lambda **k: (KernelSVC(C=10.0, **k), svm.SVC(C=10.0, **k)), "clf", "decision_function"),
    "SVR": (lambda **k: (KernelSVR(C=3.0, **k), svm.SVR(C=3.0, **k)), "reg", "predict"),
    "NuSVC": (lambda **k: (NuSVC(nu=0.3, **k), svm.NuSVC(nu=0.3, **k)), "clf", "decision_function"),
    "NuSVR": (lambda **k: (NuSVR(nu=0.3, **k), svm.NuSVR(nu=0.3, **k)), "reg", "predict"),
    "OneClassSVM": (lambda **k: (OneClassSVM(nu=0.2, **k), svm.OneClassSVM(nu=0.2, **k)), None, "decision_function"),
}


def _fit(case, cancer, diabetes, **params):
    make, kind, values = CASES[case]
    ours, ref = make(**params)
    X, y = diabetes if kind == "reg" else cancer
    if kind is None:
        ours.fit(X), ref.fit(X)
    else:
        ours.fit(X, y), ref.fit(X, y)
    return ours, ref, X, values


@pytest.mark.parametrize(("case", "kernel"), [(case, "rbf") for case in CASES] + [("SVC", "poly"), ("SVR", "poly")])
def test_shrinking_reaches_libsvm_solution(shrinks, cancer, diabetes, case, kernel):
    """Solved to tol = 1e-7 with shrinking (the active problem narrowed, the shrunk gradients
    reconstructed), the support set and dual coefficients are LIBSVM's to 1e-5; RBF rows computed
    in the compiled loop, polynomial ones by the caller's products. (The nu duals with the
    polynomial kernel are too flat for 1e-5: the SMO's and the batched solver's coefficients,
    both at tol = 1e-7, differ by 5e-4 there with or without shrinking.)"""
    params = {"tol": 1e-7, "kernel": kernel} | ({"degree": 2} if kernel == "poly" else {})
    ours, ref, X, values = _fit(case, cancer, diabetes, **params)
    assert shrinks["narrow"], "the active problem was never made smaller"
    assert shrinks["widen"] >= 1, "the shrunk variables' gradients were never reconstructed"
    _same_machine(ours, ref, X, values=values, tol=1e-5, dual_tol=1e-5)


def test_kept_half_holding_every_candidate(shrinks, cancer, monkeypatch):
    """Working sets of 512 on 569 variables: once the active problem is about q, the kept half can
    hold every candidate; the solve then selects afresh (it had stopped there, 1e-3 from the optimum)."""
    monkeypatch.setattr(_batched, "Q_MAX", 512)
    ours, ref, X, values = _fit("NuSVC", cancer, None, tol=1e-7, kernel="poly", degree=2)
    assert shrinks["narrow"]
    _same_machine(ours, ref, X, values=values, tol=1e-5, dual_tol=1e-4)  # the flat dual (see above): 3e-5


@pytest.mark.parametrize("case", ["SVC", "NuSVR"])
def test_without_shrinking_the_problem_stays_whole(shrinks, cancer, diabetes, case):
    ours, ref, X, values = _fit(case, cancer, diabetes, shrinking=False)
    assert not shrinks["narrow"]
    _same_machine(ours, ref, X, values=values)


def test_shrinking_at_default_tol_matches_libsvm(shrinks, cancer):
    X, y = cancer
    ours, ref = KernelSVC(C=1.0).fit(X, y), svm.SVC(C=1.0).fit(X, y)
    assert shrinks["narrow"]
    _same_machine(ours, ref, X, values="decision_function")


def test_cache_narrowing_keeps_recent_rows_columns():
    """Narrowing moves the most recently used rows, restricted to the kept columns, into the
    narrower layout (their slots found again), drops the others, and holds more rows."""
    rng = np.random.default_rng(0)
    n, w = 12, 12
    c = _batched._Cache(n, capacity=5 * w, width=w, dtype=np.float32, grow_from=100)
    full = rng.normal(size=(n, w)).astype(np.float32)

    class Source:
        def fill(self, samples, dest, slots):
            dest[slots] = full[samples][:, cols]

    cols = np.arange(w)
    for batch in ([0, 1, 2], [3, 4], [5]):  # 6 rows in 5 slots: row 0 evicted (least recent)
        c.lookup(np.array(batch), Source())
    assert c.slot_of[0] < 0 and c.cache.shape == (5, w)
    keep = np.array([1, 4, 5, 9, 11])
    c.narrow(keep, carry=3)  # the three most recent: rows 3, 4, 5
    cols = keep
    assert c.cache.shape == (n, keep.size)  # capacity / 5 entries, at most one slot per sample
    assert sorted(np.flatnonzero(c.slot_of >= 0).tolist()) == [3, 4, 5]
    for s in (3, 4, 5):
        np.testing.assert_array_equal(c.cache[c.slot_of[s]], full[s, keep])
    slots = c.lookup(np.array([4, 7]), Source())  # a kept row found, a new one computed on the new columns
    np.testing.assert_array_equal(c.cache[slots], full[[4, 7]][:, keep])


def test_shrinkable_is_libsvms_rule():
    """A variable at a bound leaves when it cannot be the other member of a violating pair: at its
    lower side only (I_up) when -F exceeds max_{I_low} -F, at its upper side only when F exceeds
    max_{I_up} F; free variables (both sides) never."""
    F = np.array([1.0, -3.0, 0.5, 2.0, -0.5, 0.0])
    side = np.array([1, 1, 2, 2, 3, 1], dtype=np.int8)  # up, up, low, low, both, up
    y = np.ones(6)
    # max_{I_up} F = 1.0 (t = 0), max_{I_low} -F = 0.5 (t = 4)
    np.testing.assert_array_equal(_batched._shrinkable(F, side, y, False), [False, True, False, True, False, False])
