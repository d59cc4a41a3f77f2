"""KernelSVC on the SMO of another commit and on the current one, in one process (issue 26: the
generalised solver must keep C-SVC's iterates and speed).

The solver module of ``--base`` (``git show <base>:src/mercer/models/svm/_smo.py``) is written next to
the current one as a temporary module (removed at the end), and ``KernelSVC().fit`` runs alternately
on both (the order swapped every repetition), warm: the first fit of each is not timed. Data: the UCI
set kin40k (``../shared/data``), first ``n`` rows standardised, classes by the target's median.
Reported: iterations and support sets of both (they must be equal), the CPU time of the compiled
loop (``_run``), of the whole fit, and the wall time, as ratios current / base (medians and best).
On a loaded machine the CPU times are the steadier measure.

Run: ``.venv/bin/python benchmarks/experiments/smo_before_after.py --base 0b9a546 --n 10000 --repeat 6``
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TMP_NAME = "_smo_base_experiment"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="0b9a546", help="commit whose SMO is the reference (default: before issue 26's)")
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=6, help="timed fits of each (after one untimed)")
    args = p.parse_args(argv)
    from sklearn.preprocessing import StandardScaler

    from mercer import KernelSVC
    from mercer.datasets import load_uci
    from mercer.models.svm import _dual, _smo

    src = subprocess.run(["git", "show", f"{args.base}:src/mercer/models/svm/_smo.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    path = os.path.join(os.path.dirname(_smo.__file__), TMP_NAME + ".py")
    with open(path, "w") as f:
        f.write(src)
    try:
        base = importlib.import_module(f"mercer.models.svm.{TMP_NAME}")
        X, y, _, _ = load_uci("kin40k", os.path.join(ROOT, "..", "shared", "data", "uci"))
        X = StandardScaler().fit_transform(X[:args.n])
        y = (y[:args.n] > np.median(y[:args.n])).astype(int)

        def base_solve(rows, diag, y, Cb, *, p=None, alpha0=None, rmap=None, nu=False, **kw):
            assert p is None and alpha0 is None and rmap is None and not nu  # C-SVC only
            return base.solve_smo(rows, diag, y, Cb, **kw)

        solvers = {"base": (base_solve, base), "current": (_smo.solve_smo, _smo)}
        loop = {k: [] for k in solvers}
        cpu = {k: [] for k in solvers}
        wall = {k: [] for k in solvers}
        fitted = {}
        for rep in range(args.repeat + 1):
            for name in (("base", "current") if rep % 2 else ("current", "base")):
                solve, mod = solvers[name]
                _dual.solve_smo = solve
                run = mod._jit("_run")
                spent = [0.0]

                def timed(*a, run=run, spent=spent):
                    t = time.process_time()
                    code = run(*a)
                    spent[0] += time.process_time() - t
                    return code

                timed.py_func = run.py_func  # LazyJit hands it out as compiled
                mod._run = timed
                try:
                    c, t = time.process_time(), time.perf_counter()
                    fitted[name] = KernelSVC().fit(X, y)
                    dc, dt = time.process_time() - c, time.perf_counter() - t
                finally:
                    mod._run = run
                if rep:
                    loop[name].append(spent[0])
                    cpu[name].append(dc)
                    wall[name].append(dt)
        _dual.solve_smo = _smo.solve_smo
    finally:
        os.remove(path)
    a, b = fitted["base"], fitted["current"]
    print(f"kin40k n={args.n} (d = 8, classes by the median), KernelSVC() RBF, {args.repeat} warm fits each, "
          f"alternating; base {args.base}; load {os.getloadavg()}")
    print(f"iterations base / current: {a.n_iter_.tolist()} / {b.n_iter_.tolist()}; same support_: "
          f"{np.array_equal(a.support_, b.support_)}; max |dual_coef_ difference|: "
          f"{np.abs(a.dual_coef_ - b.dual_coef_).max():.3g}")
    for what, d in (("compiled loop CPU", loop), ("fit CPU", cpu), ("fit wall", wall)):
        print(f"{what}: current / base = {np.median(d['current']) / np.median(d['base']):.3f} (medians), "
              f"{min(d['current']) / min(d['base']):.3f} (best); base {np.round(d['base'], 3).tolist()}, "
              f"current {np.round(d['current'], 3).tolist()}")


if __name__ == "__main__":
    sys.exit(main())
