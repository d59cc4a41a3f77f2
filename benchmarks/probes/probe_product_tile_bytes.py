"""Probe of ``PRODUCT_TILE_BYTES_PER_THREAD`` (mercer/linalg/_blocking.py) and ``DIRECT_TILE_BYTES``
(mercer/linalg/_plan.py): the tile size of the repeated product ``K^T K v`` (conjugate gradient's),
32 MiB tiles vs :func:`mercer.linalg.product_tile_bytes` (8 MiB of kernel values per thread, full width).

RBF (gamma = 1/d), the intercept's column shift applied to every tile as in NystroemKernelRidge,
synthetic X ~ N(0, I), the first M rows as centres; each product timed 3 times alternately, median.
One line per shape and thread count, the ratio product-rule / 32 MiB.

    python benchmarks/probes/probe_product_tile_bytes.py            # torch's default threads and 1 thread
    python benchmarks/probes/probe_product_tile_bytes.py --quick    # the first two shapes, one rep
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from mercer.kernels import RBF
from mercer.linalg import KernelOperator

SHAPES = [(100_000, 8, 5000, torch.float32), (100_000, 8, 5000, torch.float64), (100_000, 28, 10_000, torch.float32),
          (200_000, 28, 2000, torch.float32), (200_000, 4, 1000, torch.float64), (30_000, 784, 5000, torch.float32),
          (60_000, 784, 1000, torch.float32)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads(), 1])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="the first two shapes at n = 30,000, one rep")
    args = ap.parse_args(argv)
    shapes = [(30_000, d, M, dt) for _, d, M, dt in SHAPES[:2]] if args.quick else SHAPES
    if args.quick:
        args.reps = 1
    print(f"load {os.getloadavg()}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for n, d, M, dt in shapes:
            g = torch.Generator().manual_seed(0)
            X = torch.randn(n, d, generator=g, dtype=dt)
            Z, k, v = X[:M].clone(), RBF(gamma=1.0 / d), torch.randn(M, 1, generator=g, dtype=torch.float64)
            ops = {"32 MiB": KernelOperator(k, X, Z, memory_budget=1 << 31, max_tile_bytes=32 << 20),
                   "product": KernelOperator(k, X, Z, memory_budget=1 << 31, max_tile_bytes="product")}
            times: dict[str, list[float]] = {name: [] for name in ops}
            for op in ops.values():
                op.shift = torch.full((M,), 0.1, dtype=dt)
                op.kt_k_v(v, out_dtype=torch.float64)  # untimed first product
            for _ in range(args.reps):
                for name, op in ops.items():
                    t0 = time.perf_counter()
                    op.kt_k_v(v, out_dtype=torch.float64)
                    times[name].append(time.perf_counter() - t0)
            a, b = (statistics.median(times[name]) for name in ops)
            print(f"threads {threads}  n={n:>7,} d={d:<3} M={M:>6,} {str(dt)[6:]:7s}  32 MiB {a:6.3f} s ({ops['32 MiB'].plan.row_block} "
                  f"rows)  product {b:6.3f} s ({ops['product'].plan.row_block} rows)  ratio {b / a:.2f}", flush=True)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
