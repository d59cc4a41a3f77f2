"""NystroemKernelRidge streamed from Parquet files on disk vs the same fit in memory.

The synthetic regression of ``bench_scaling.py`` (X ~ N(0, I_28) in float32, y = sin(2 p1) +
0.5 cos(p2) p3 + 0.1 noise), written once to ``--dir`` as Parquet files of 1,000,000 rows (row
groups of 131,072 rows, 28 float32 feature columns and the float64 target ``y``). Each fit runs in
a fresh process and reports its wall time (fit only; reading the files is part of it when
streamed), CG iterations, the process's peak RSS and the test RMSE on 10,000 held-out points.

    python benchmarks/suites/stream.py --write --n 10000000 --dir DIR              # the files (22 s)
    python benchmarks/suites/stream.py --n 10000000 --M 10000 --dir DIR --modes streamed
    python benchmarks/suites/stream.py --n 1000000 --M 10000 --dir DIR                # both, and their ratio
    python benchmarks/suites/stream.py --quick                                        # n = 200,000, M = 1,000

``--n`` uses the first n rows (whole files; missing files are written first). ``--dir`` defaults to
``mercer_stream`` (``mercer_stream_quick`` with ``--quick``) in the system's temporary folder. RBF
gamma = 1/(2 d), alpha = 1e-6 n, uniform centres, float32 tiles, ``--tol`` (default 1e-2) and
``--max-iter``. Results: ``benchmarks/results/stream/latest.{json,md}``: one row per mode, and the
ratio streamed / in memory (the peer of a streamed fit is the same fit in memory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (machine_info, markdown_table, parse_suite_args, suite_parser,  # noqa: E402
                     synthetic, write_results)  # the same generator, drawn per file / partition

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
    p = suite_parser("stream", __doc__.splitlines()[0], quick="n = 200,000, M = 1,000 (under a minute)")
    p.add_argument("--dir", default=None, help="folder of the Parquet files (default: the temporary folder's "
                                               "mercer_stream, or mercer_stream_quick with --quick)")
    p.add_argument("--n", type=int, default=None, help="rows (default 1,000,000; --quick 200,000)")
    p.add_argument("--M", type=int, default=None, help="centres (default 10,000; --quick 1,000)")
    p.add_argument("--modes", default="streamed,memory", help="streamed, memory or both (default)")
    p.add_argument("--tol", type=float, default=1e-2)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--write", action="store_true", help="write the Parquet files (skips existing ones)")
    p.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)  # the child's mode
    p.add_argument("--progress", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parse_suite_args(p, argv)
    args.n = args.n or (200_000 if args.quick else 1_000_000)
    args.M = args.M or (1_000 if args.quick else 10_000)
    args.dir = args.dir or str(Path(tempfile.gettempdir()) / ("mercer_stream_quick" if args.quick else "mercer_stream"))
    if args.child:
        print(json.dumps(fit_one(args)), flush=True)
        return 0
    files = [Path(args.dir) / f"part-{i:04d}.parquet" for i in range(math.ceil(args.n / FILE_ROWS))]
    if args.write or not all(f.exists() for f in files) or not (Path(args.dir) / "test_y.npy").exists():
        write(args.n, Path(args.dir))
        if args.write:
            return 0
    rows = []
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        cmd = [sys.executable, __file__, "--child", "--dir", args.dir, "--n", str(args.n), "--M", str(args.M),
               "--tol", str(args.tol), "--max-iter", str(args.max_iter)] + (["--memory"] if mode == "memory" else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        rows.append(row)
    if len(rows) == 2 and rows[1]["fit_s"]:
        rows[0]["streamed/memory"] = rows[0]["fit_s"] / rows[1]["fit_s"]
    write_results(args, {"machine": machine_info(), "rows": rows},
                  f"Machine: {machine_info()}\n\n{markdown_table(rows)}",
                  title="NystroemKernelRidge streamed from Parquet vs in memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
