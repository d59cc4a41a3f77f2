"""Issue 25's demonstration: ARD length scales learned at 1,000,000 rows streamed from Parquet.

    python benchmarks/probes/probe_ard_million.py [--n 1000000] [--centers 100] [--max-iter 30]
        [--data DIR] [--fit-only] [--dask WORKERS]

The data: ``X ~ N(0, I_28)`` (float32 columns ``x0 .. x27``), of which the first 8 matter,

    y = sum_{j < 8} a_j sin(b_j x_j) + 0.3 x_0 x_1 + 0.1 noise,

with amplitudes ``a_j`` and frequencies ``b_j`` drawn once (``a`` in [0.5, 1.5], ``b`` in [0.5, 1.5]);
the other 20 columns are independent noise. The rows are written to ``DIR/train.parquet`` (``DIR``:
``ard_million`` in the system's temporary folder by default; row
groups of 131,072 rows, generated and written one at a time: the full matrix is never held) and
read back through :func:`mercer.sources.read_parquet` by a fresh process, which fits
:class:`mercer.NystroemKernelRidgeCV` with ``RBF(gamma=[1 / (2 d)] * d)`` (one length scale per
feature, ``alpha`` learned too, GCV, ``--centers`` uniform centres, L-BFGS for ``--max-iter``
iterations). The source is read block by block in every objective evaluation (two passes each).
With ``--dask WORKERS`` the same file is read by ``dask.dataframe.read_parquet`` on a LocalCluster
of that many single-threaded worker processes, and the same model is fitted on the Dask array with
the cluster's client in force (the blocked statistics run on the workers); ``--persist`` holds the
arrays in the workers' memory first, as a Dask user does with data that fits it (else each of the
objective's passes reads the Parquet file again, through dask.dataframe).

Printed (and returned as JSON on the last line): the 28 learned length scales ``1 / sqrt(2 gamma)``,
the margin ``min(irrelevant) / max(relevant)`` (above 1: every relevant scale is smaller than every
irrelevant one), the fit time, the number of evaluations, the process's peak RSS (``ru_maxrss``),
the load average before and after, and the RMSE on 20,000 held-out rows (generated in memory).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

D, RELEVANT, GROUP = 28, 8, 131_072


def coefficients(seed: int):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 1.5, RELEVANT), rng.uniform(0.5, 1.5, RELEVANT)


def rows(rng, n: int, a, b):
    X = rng.standard_normal((n, D)).astype(np.float32)
    Xr = X[:, :RELEVANT].astype(np.float64)
    y = (a * np.sin(b * Xr)).sum(1) + 0.3 * Xr[:, 0] * Xr[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def write(path: Path, n: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    a, b = coefficients(seed)
    names = [f"x{j}" for j in range(D)]
    schema = pa.schema([(name, pa.float32()) for name in names] + [("y", pa.float64())])
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema) as w:
        for i, start in enumerate(range(0, n, GROUP)):
            X, y = rows(np.random.default_rng([seed, i]), min(GROUP, n - start), a, b)
            w.write_table(pa.table({**{name: X[:, j] for j, name in enumerate(names)}, "y": y}, schema=schema))
    print(f"wrote {path}: {n} rows, {path.stat().st_size / 2**20:.0f} MiB", flush=True)


def fit(args) -> dict:
    import warnings

    import mercer
    from mercer.kernels import RBF
    from mercer.sources import read_parquet

    import contextlib

    load0 = os.getloadavg()
    path = str(Path(args.data) / "train.parquet")
    context = contextlib.nullcontext()
    if args.dask:
        import dask.dataframe as dd
        import distributed

        cluster = distributed.LocalCluster(n_workers=args.dask, threads_per_worker=1, host="127.0.0.1",
                                           dashboard_address=None)
        client = distributed.Client(cluster, set_as_default=False)
        context = client.as_current()
        with client.as_current():
            frame = dd.read_parquet(path)
            X = frame[[f"x{j}" for j in range(D)]].to_dask_array(lengths=True)
            y = frame["y"].to_dask_array(lengths=True)
            if args.persist:  # in the workers' memory (112 MB at 10^6 rows): not re-read from Parquet each pass
                X, y = client.persist(X), client.persist(y)
                distributed.wait(distributed.futures_of(X) + distributed.futures_of(y))
        n = int(X.shape[0])
    else:
        X, y = read_parquet(path, target="y")
        n = X.n_samples
    model = mercer.NystroemKernelRidgeCV(kernel=RBF(gamma=[1.0 / (2 * D)] * D), alpha=1e-3 * n,
                                         n_centers=args.centers, max_iter=args.max_iter, random_state=0)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, context:
        warnings.simplefilter("always")
        model.fit(X, y)
    fit_s = time.perf_counter() - t0
    a, b = coefficients(args.seed)
    Xte, yte = rows(np.random.default_rng([args.seed, 10**6]), 20_000, a, b)
    rmse = float(np.sqrt(np.mean((model.predict(Xte) - yte) ** 2)))
    gamma = np.asarray(model.kernel_.gamma, dtype=np.float64)
    scales = 1.0 / np.sqrt(2.0 * gamma)
    rel, irr = scales[:RELEVANT], scales[RELEVANT:]
    return {"n": int(n), "d": D, "dask_workers": args.dask, "persist": bool(args.persist), "centers": args.centers, "max_iter": args.max_iter,
            "length_scales": [round(float(s), 4) for s in scales],
            "max_relevant": float(rel.max()), "min_irrelevant": float(irr.min()),
            "margin": float(irr.min() / rel.max()), "separated": bool(irr.min() > rel.max()),
            "alpha": model.alpha_, "evaluations": int(model.n_evals_), "fit_s": round(fit_s, 1),
            "learning_s": round(model.learning_time_, 1), "peak_rss_gib": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "test_rmse": round(rmse, 4), "y_std": round(float(np.std(yte)), 4), "load_before": load0[0],
            "load_after": os.getloadavg()[0], "warnings": sorted({str(w.message)[:120] for w in caught})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--centers", type=int, default=100)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "ard_million"))
    p.add_argument("--fit-only", action="store_true", help="reuse DATA/train.parquet")
    p.add_argument("--dask", type=int, default=0, metavar="WORKERS",
                   help="fit on a Dask array read by dask.dataframe on a LocalCluster of WORKERS processes")
    p.add_argument("--persist", action="store_true", help="with --dask: the arrays persisted in the workers' memory")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(fit(args)), flush=True)
        return 0
    path = Path(args.data) / "train.parquet"
    if not args.fit_only or not path.exists():
        write(path, args.n, args.seed)
    cmd = [sys.executable, __file__, "--child", "--data", args.data, "--centers", str(args.centers),
           "--max-iter", str(args.max_iter), "--seed", str(args.seed), "--dask", str(args.dask)]
    cmd += ["--persist"] if args.persist else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()
    print("length scales (first 8 relevant):", " ".join(f"{s:.3g}" for s in r["length_scales"]))
    print(f"largest relevant {r['max_relevant']:.3g}, smallest irrelevant {r['min_irrelevant']:.3g}: margin "
          f"{r['margin']:.3g}x ({'separated' if r['separated'] else 'NOT separated'})")
    print(f"n = {r['n']}, M = {r['centers']}: fit {r['fit_s']} s ({r['evaluations']} evaluations, learning "
          f"{r['learning_s']} s), peak RSS {r['peak_rss_gib']} GiB, test RMSE {r['test_rmse']} (y std {r['y_std']}), "
          f"load {r['load_before']:.1f} -> {r['load_after']:.1f}")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
