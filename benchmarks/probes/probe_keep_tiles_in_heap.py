"""Probe of ``mercer.distributed._operator._keep_tiles_in_heap`` (its mallopt thresholds, 2 and 8 x
``DIRECT_TILE_BYTES``): glibc's allocator and the tiled products, ``K^T K v`` in a fresh process per setting.

Dask's nannies start their workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also freezes glibc's
mmap threshold at 128 KiB, so every tile is mapped afresh and faulted in page by page; the engine's
workers undo that (``mercer.distributed._operator._keep_tiles_in_heap``). This prints the product's
time (first and second call) under: glibc's defaults, the nanny's variable, and the variable with the
engine's settings applied.

    python benchmarks/probes/probe_keep_tiles_in_heap.py --n 1000000 --M 10000
    python benchmarks/probes/probe_keep_tiles_in_heap.py --quick     # n = 100,000, M = 2,000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = r"""
import sys, time
sys.path.insert(0, {bench!r})  # benchmarks/ (_common)
if {keep}:
    from mercer.distributed._operator import _keep_tiles_in_heap
    _keep_tiles_in_heap()
import numpy as np, torch, mercer
from _common import synthetic
from mercer.linalg import KernelOperator
X, _ = synthetic({n}, 28, seed=0)
op = KernelOperator(mercer.kernels.RBF(gamma=1 / 56), torch.from_numpy(X), torch.from_numpy(X[:{M}].copy()),
                    memory_budget=1 << 30, max_tile_bytes=32 << 20)
v = torch.randn({M}, 1, dtype=torch.float64)
for i in range(2):
    t = time.perf_counter(); op.kt_k_v(v, out_dtype=torch.float64); print(f"{{time.perf_counter() - t:.2f}}", end=" ")
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 100,000, M = 2,000")
    ap.add_argument("--n", type=int, default=None, help="rows (default 1,000,000)")
    ap.add_argument("--M", type=int, default=None, help="centres (default 10,000)")
    args = ap.parse_args(argv)
    args.n = args.n or (100_000 if args.quick else 1_000_000)
    args.M = args.M or (2_000 if args.quick else 10_000)
    bench = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"K^T K v, n={args.n}, M={args.M}, d=28, float32 tiles of 32 MiB, torch's default threads; "
          f"seconds, first and second call; load {os.getloadavg()[0]:.2f}")
    for name, env_extra, keep in [("glibc defaults", {}, False),
                                  ("MALLOC_TRIM_THRESHOLD_=65536 (Dask's nanny)", {"MALLOC_TRIM_THRESHOLD_": "65536"}, False),
                                  ("the same + the engine's mallopt settings", {"MALLOC_TRIM_THRESHOLD_": "65536"}, True)]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        env.update(env_extra)
        out = subprocess.run([sys.executable, "-c", CHILD.format(bench=bench, keep=keep, n=args.n, M=args.M)],
                             env=env, capture_output=True, text=True, check=True).stdout
        print(f"{name:48s} {out}")


if __name__ == "__main__":
    main()
