"""KernelSVC (or NuSVC) on Fashion-MNIST with the machines' shared kernel rows and without, in one
process (issue 26: one-vs-one machines sharing kernel rows).

Three settings, fitted alternately (the order reversed every repetition), warm (one untimed fit on
2,000 rows each first): ``auto`` (``_dual.SharedRows`` as shipped: the whole matrix at once where
the first machine asked for ``FILL_ALL_FROM`` of its own, else block by block), ``blocks`` (block by
block only) and ``own`` (``SHARE_ROWS = False``: each machine computes its own rows, as before).
Reported: wall and CPU seconds of each fit, the medians' ratios to ``own``, and whether support
sets, iteration counts and ``dual_coef_`` equal ``own``'s (they should, exactly).

Run: ``.venv/bin/python benchmarks/experiments/svm_shared_rows_ab.py --n 5000 --repeat 3``
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=3, help="timed fits of each setting")
    p.add_argument("--nusvc", action="store_true", help="NuSVC(nu=0.1) instead of KernelSVC()")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "suites"))
    from svm import _solver_data

    from mercer.models.svm import KernelSVC, NuSVC, _dual

    data = _solver_data("fashion", args.n)
    if data is None:
        raise SystemExit("Fashion-MNIST is not available (see benchmarks/suites/svm.py)")
    X, y = data
    make = (lambda: NuSVC(nu=0.1)) if args.nusvc else KernelSVC
    fill_all_from = _dual.FILL_ALL_FROM

    def setting(v):
        _dual.SHARE_ROWS = v != "own"
        _dual.FILL_ALL_FROM = fill_all_from if v == "auto" else 2.0  # above 1: never the whole matrix

    names = ["auto", "blocks", "own"]
    for v in names:
        setting(v)
        make().fit(X[:2000], y[:2000])
    times, models = {v: [] for v in names}, {}
    for r in range(args.repeat):
        for v in names if r % 2 == 0 else names[::-1]:
            setting(v)
            c0, t0 = _cpu(), time.perf_counter()
            models[v] = make().fit(X, y)
            times[v].append((time.perf_counter() - t0, _cpu() - c0))
    setting("auto")
    for v in names:
        print(f"n={args.n} {v:6s} wall {[round(w, 2) for w, _ in times[v]]} cpu {[round(c, 2) for _, c in times[v]]}")
    own = models["own"]
    for v in ("auto", "blocks"):
        wall = np.median([w for w, _ in times[v]]) / np.median([w for w, _ in times["own"]])
        cpu = np.median([c for _, c in times[v]]) / np.median([c for _, c in times["own"]])
        m = models[v]
        print(f"{v}/own: wall {wall:.3f} cpu {cpu:.3f}; same support {np.array_equal(m.support_, own.support_)}, "
              f"n_iter {np.array_equal(m.n_iter_, own.n_iter_)}, max |dual_coef_ diff| "
              f"{np.abs(m.dual_coef_ - own.dual_coef_).max():.3g}")


if __name__ == "__main__":
    main()
