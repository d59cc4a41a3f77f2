"""How far LIBSVM's support set depends on the order of the samples, next to mercer's distance from it.

Fits scikit-learn's ``SVC`` (LIBSVM; RBF, C = 1, gamma = 'scale', one-vs-one decision values) on a
data set of ``benchmarks/suites/svm.py``'s solver part (``--data``, ``--n``) as given and with its
rows shuffled (``--seeds``): the same optimisation problem, whose solution LIBSVM's stopping rule
fixes only to ``tol``. Reports, against the fit on the rows as given, how many support vectors each
shuffled fit has that the other lacks (indices mapped back to the given order) and the largest
difference of decision values on the first 5,000 rows; then the same for mercer's ``KernelSVC`` fit
(the solver ``auto`` picks). Equal support sets are a property of one solver's path, not of the
problem, where the shuffled LIBSVM fits differ from the given one. ``--family``: the same for
``SVR``, ``NuSVR``, ``NuSVC`` and ``OneClassSVM`` on the suite's family data (kin40k's first
``--n`` rows, as ``svm.py --family``), predictions (regression) or decision values compared.

Run from the repository root (``$MERCER_FLIGHTS`` / ``$MERCER_UCI_DIR`` as for the suite)::

    .venv/bin/python benchmarks/experiments/libsvm_row_order.py --data protein --n 41157
    .venv/bin/python benchmarks/experiments/libsvm_row_order.py --family --n 20000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from sklearn import svm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "suites"), os.path.join(HERE, "..")]

from svm import _kin40k, _solver_data  # noqa: E402

from mercer import KernelSVC, KernelSVR, NuSVC, NuSVR, OneClassSVM  # noqa: E402

FAMILY = [("SVR", KernelSVR, svm.SVR, {"C": 1.0, "epsilon": 0.1}, "reg"),
          ("NuSVR", NuSVR, svm.NuSVR, {"nu": 0.5}, "reg"),
          ("NuSVC", NuSVC, svm.NuSVC, {"nu": 0.5}, "clf"),
          ("OneClassSVM", OneClassSVM, svm.OneClassSVM, {"nu": 0.1}, "x")]


def family(a) -> None:
    X, t = _kin40k(a.n)
    targets = {"reg": t, "clf": (t > np.median(t)).astype(int), "x": None}
    Xe = X[:5000]
    for name, ours, ref, params, kind in FAMILY:
        y = targets[kind]
        values = "predict" if kind == "reg" else "decision_function"

        def libsvm(order, ref=ref, params=params, y=y, values=values):
            m = ref(cache_size=a.cache_size, **params)
            m.fit(X[order]) if y is None else m.fit(X[order], y[order])
            return np.sort(order[m.support_]), getattr(m, values)(Xe)

        sv, dec = libsvm(np.arange(len(X)))
        print(f"{name}, kin40k n = {len(X)}: LIBSVM on the rows as given: {len(sv)} support vectors", flush=True)
        for seed in a.seeds:
            s_sv, s_dec = libsvm(np.random.default_rng(seed).permutation(len(X)))
            print(f"  LIBSVM, rows shuffled (seed {seed}): {len(s_sv)}, {len(np.setxor1d(s_sv, sv))} not in both; "
                  f"values differ by {np.abs(s_dec - dec).max():.2e} at most", flush=True)
        m = ours(**params)
        m.fit(X) if y is None else m.fit(X, y)
        print(f"  mercer {ours.__name__}: {len(m.support_)}, {len(np.setxor1d(m.support_, sv))} not in both; values "
              f"differ by {np.abs(getattr(m, values)(Xe) - dec).max():.2e} at most", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="protein")
    p.add_argument("--n", type=int, default=41157)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--cache-size", type=float, default=2000.0, help="LIBSVM's cache_size (MB)")
    p.add_argument("--family", action="store_true", help="SVR, NuSVR, NuSVC, OneClassSVM on kin40k")
    a = p.parse_args()
    if a.family:
        return family(a)
    data = _solver_data(a.data, a.n)
    if data is None:
        sys.exit(f"{a.data}: data not found")
    X, y = data
    Xe = X[:5000]

    def libsvm(order):
        t = time.perf_counter()
        m = svm.SVC(cache_size=a.cache_size, decision_function_shape="ovo").fit(X[order], y[order])
        return np.sort(order[m.support_]), m.decision_function(Xe), time.perf_counter() - t

    sv, dec, dt = libsvm(np.arange(len(X)))
    print(f"{a.data}, n = {len(X)}, d = {X.shape[1]}: LIBSVM on the rows as given: {len(sv)} support vectors "
          f"({dt:.1f} s)")
    for seed in a.seeds:
        s_sv, s_dec, dt = libsvm(np.random.default_rng(seed).permutation(len(X)))
        print(f"  LIBSVM, rows shuffled (seed {seed}): {len(s_sv)} support vectors, {len(np.setxor1d(s_sv, sv))} "
              f"not in both; decision values differ by {np.abs(s_dec - dec).max():.2e} at most ({dt:.1f} s)")
    t = time.perf_counter()
    m = KernelSVC(decision_function_shape="ovo").fit(X, y)
    dt = time.perf_counter() - t
    print(f"  mercer KernelSVC: {len(m.support_)} support vectors, {len(np.setxor1d(m.support_, sv))} not in both; "
          f"decision values differ by {np.abs(m.decision_function(Xe) - dec).max():.2e} at most ({dt:.1f} s)")


if __name__ == "__main__":
    main()
