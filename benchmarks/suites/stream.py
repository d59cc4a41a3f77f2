"""NystroemKernelRidge streamed from Parquet files on disk vs the same fit in memory.

The synthetic regression of ``bench_scaling.py`` (X ~ N(0, I_28) in float32, y = sin(2 p1) +
0.5 cos(p2) p3 + 0.1 noise), written once to ``--dir`` as Parquet files of 1,000,000 rows (row
groups of 131,072 rows, 28 float32 feature columns and the float64 target ``y``). Each fit runs in
a fresh process and reports its wall time (fit only; reading the files is part of it when
streamed), CG iterations, the process's peak RSS and the test RMSE on 10,000 held-out points.

    python benchmarks/bench_stream.py --write --n 10000000 --dir /tmp/mercer_stream
    python benchmarks/bench_stream.py --n 10000000 --M 10000 --dir /tmp/mercer_stream            # streamed
    python benchmarks/bench_stream.py --n 1000000 --M 10000 --dir /tmp/mercer_stream --memory   # in memory

``--n`` uses the first n rows (whole files). RBF gamma = 1/(2 d), alpha = 1e-6 n, uniform centres,
float32 tiles, ``--tol`` (default 1e-2) and ``--max-iter``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scaling import synthetic  # noqa: E402  (the same generator, drawn per file / partition)

D = 28
FILE_ROWS = 1_000_000
GROUP_ROWS = 131_072


def write(n: int, out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    names = [f"x{j}" for j in range(D)]
    for i in range(math.ceil(n / FILE_ROWS)):
        path = out / f"part-{i:04d}.parquet"
        if path.exists():
            continue
        X, y = synthetic(min(FILE_ROWS, n - i * FILE_ROWS), D, seed=1000 + i)
        table = pa.table({**{name: X[:, j] for j, name in enumerate(names)}, "y": y})
        pq.write_table(table, path, row_group_size=GROUP_ROWS)
        print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB)", flush=True)
    Xte, yte = synthetic(10_000, D, seed=99)
    np.save(out / "test_X.npy", Xte)
    np.save(out / "test_y.npy", yte)


def fit_one(args) -> dict:
    import mercer
    from mercer.sources import read_parquet

    files = sorted(Path(args.dir).glob("part-*.parquet"))[: math.ceil(args.n / FILE_ROWS)]
    X, y = read_parquet(files, target="y")
    n = X.n_samples
    if args.memory:
        X = X.to_numpy()
    Xte, yte = np.load(Path(args.dir) / "test_X.npy"), np.load(Path(args.dir) / "test_y.npy")
    model = mercer.NystroemKernelRidge(alpha=1e-6 * n, gamma=1.0 / (2 * D), n_centers=args.M, tol=args.tol,
                                       max_iter=args.max_iter, random_state=0, dtype="float32")
    t0 = time.perf_counter()
    with mercer.progress() if args.progress else _null():
        model.fit(X, y)
    fit_s = time.perf_counter() - t0
    pred = model.predict(Xte)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"n": n, "M": args.M, "mode": "in memory" if args.memory else "streamed from Parquet",
            "fit_s": round(fit_s, 1), "cg_iterations": int(np.max(model.n_iter_)), "tol": args.tol,
            "peak_rss_gib": round(rss / 2**30, 2), "test_rmse": round(float(np.sqrt(np.mean((pred - yte) ** 2))), 4),
            "load": os.getloadavg()[0]}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/tmp/mercer_stream")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--M", type=int, default=10_000)
    p.add_argument("--tol", type=float, default=1e-2)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--write", action="store_true", help="write the Parquet files (skips existing ones)")
    p.add_argument("--memory", action="store_true", help="read the files into memory, then fit")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.write:
        write(args.n, Path(args.dir))
        return 0
    if args.child:
        print(json.dumps(fit_one(args)), flush=True)
        return 0
    cmd = [sys.executable, __file__, "--child", *(argv if argv is not None else sys.argv[1:])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print(" | ".join(f"{k}={v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
