"""Freed memory kept resident between and within calls (docs/decisions/0004-freed-memory-between-calls.md).

Each case runs in a fresh process: after a warm-up on 200 rows (the baseline, as
``benchmarks/probes/probe_memory_budget.py``), one fit and one predict on n = 4,000 x 8 float64 rows at
a 64 MiB budget; the peak RSS over the baseline after the fit and after the predict, and their
seconds. Variants: ``mercer`` (as it is), ``no release`` (a fit does not return its freed heap memory:
``linalg._plan._MALLOC_TRIM = None``), ``two tiles`` (the k-NN distances in a second tile, as before
0004), and each under glibc's fixed thresholds (``MALLOC_MMAP_THRESHOLD_=MALLOC_TRIM_THRESHOLD_=1 MiB``,
``+ env``). Then the cost of the release on small fits: 100 KernelRidge fits on 300 rows, with and
without it, best of 5, on a heap fragmented by 10,000 freed 8 KB blocks.

Run: ``.venv/bin/python benchmarks/experiments/freed_memory.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

N, D, BUDGET, WARMUP = 4000, 8, 64 * 2**20, 200
ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**20), "MALLOC_TRIM_THRESHOLD_": str(2**20)}


def child(estimator: str, variant: str) -> dict:
    import math
    import resource
    import time
    import warnings

    import numpy as np

    import mercer
    import mercer.linalg._plan as plan
    from mercer.models._registry import ESTIMATORS

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    if "no release" in variant:
        plan._MALLOC_TRIM = None
    if "two tiles" in variant:
        from mercer.models.neighbors import _neighbors

        def _dist2(self, Q, q_diag, cols):
            K = self.kernel_(Q, self.X_fit_[cols])
            return (q_diag[:, None] + self._diag_fit[None, cols]).sub_(K, alpha=2.0).clamp_min_(0.0)
        _neighbors._NeighborsBase._dist2 = _dist2
    cls = next(e for e in ESTIMATORS if e.name == estimator).load()
    rng = np.random.default_rng(0)
    X, X_test = rng.standard_normal((N, D)), rng.standard_normal((N, D))
    y = (np.sin(X @ rng.standard_normal(D) / math.sqrt(D) * 2) > 0).astype(np.int64)
    warnings.simplefilter("ignore")
    with mercer.config_context(memory_budget=BUDGET):
        cls(memory_budget=BUDGET).fit(X[:WARMUP], y[:WARMUP]).predict(X_test[:WARMUP])
        base = peak()
        t0 = time.perf_counter()
        est = cls(memory_budget=BUDGET).fit(X, y)
        t1 = time.perf_counter()
        after_fit = peak()
        est.predict(X_test)
        t2 = time.perf_counter()
    return {"estimator": estimator, "variant": variant, "fit_mib": (after_fit - base) / 2**20,
            "predict_mib": (peak() - base) / 2**20, "fit_s": t1 - t0, "predict_s": t2 - t1}


def small_fits() -> dict:
    import time
    import warnings

    import numpy as np

    import mercer.linalg._plan as plan
    from mercer.models.ridge import KernelRidge

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 8))
    y = X[:, 0]
    kept = [np.ones(1000) for _ in range(20_000)][::2]  # noqa: F841 -- a fragmented heap
    trim, best = plan._MALLOC_TRIM, {}
    for _ in range(5):
        for on in (False, True):
            plan._MALLOC_TRIM = trim if on else None
            t = time.perf_counter()
            for _ in range(100):
                KernelRidge(kernel="rbf").fit(X, y)
            key = "with release" if on else "without"
            best[key] = min(best.get(key, 1e9), (time.perf_counter() - t) / 100)
    return best


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3]) if sys.argv[2] != "small" else small_fits()))
        return
    rows = []
    for estimator, variants in (("KernelPerceptron", ("mercer", "no release")),
                                ("KernelKNeighborsClassifier", ("mercer", "two tiles"))):
        for variant in variants:
            for env in (False, True):
                name = variant + (" + env" if env else "")
                out = subprocess.run([sys.executable, __file__, "--child", estimator, name], capture_output=True,
                                     text=True, env={**os.environ, **(ENV if env else {})}, check=True).stdout
                r = json.loads(out.splitlines()[-1])
                rows.append(r)
                print(f"| {estimator} | {name} | {r['fit_mib']:.1f} | {r['predict_mib']:.1f} | "
                      f"{r['fit_s']:.2f} | {r['predict_s']:.2f} |", flush=True)
    out = subprocess.run([sys.executable, __file__, "--child", "small", "-"], capture_output=True, text=True,
                         check=True).stdout
    r = json.loads(out.splitlines()[-1])
    print(f"100 small KernelRidge fits: {r['without'] * 1e3:.2f} ms per fit without the release, "
          f"{r['with release'] * 1e3:.2f} ms with it (best of 5)")


if __name__ == "__main__":
    main()
