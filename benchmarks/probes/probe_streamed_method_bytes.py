"""Probe of ``STREAMED_METHOD_BYTES`` (mercer/linalg/_plan.py): the largest input block that a streamed
``predict`` / ``transform`` (``mercer.linalg.map_rows``) reads and hands to the method at once.

Each block costs one read of the source (a Parquet record batch: a per-call cost whatever its size)
and one call of the method (its input checks, its plan, its kernel tiles): too small a cap pays these
per-block costs many times, too large one only holds more memory. The probe writes n x 8 float64 rows
(default n = 2,000,000: 122 MiB) as ``.npy`` and as Parquet, fits a ``NystroemKernelRidge``
(M = 200) on 20,000 of them, and times ``predict`` on each source with the cap at each of
``--caps-mib`` (map_rows' cap patched; the budget, 2 GiB, leaves the cap binding), best of
``--repeat``. One table: seconds per cap and source, and the ratio to the best cap of that source.

Run (from the repository root)::

    .venv/bin/python benchmarks/probes/probe_streamed_method_bytes.py            # ~2 min on 2 cores
    .venv/bin/python benchmarks/probes/probe_streamed_method_bytes.py --n 500000 --repeat 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--caps-mib", default="1,4,8,16,32,64")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import mercer
    from mercer.linalg import _stream
    from mercer.models.ridge import NystroemKernelRidge
    from mercer.sources import as_source, read_parquet

    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, 8))
    y = np.sin(X[:, 0])
    caps = [int(float(c) * 2**20) for c in args.caps_mib.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "X.npy", X)
        pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(8)}), Path(tmp) / "X.parquet")
        sources = {"npy": lambda: as_source(str(Path(tmp) / "X.npy")),
                   "parquet": lambda: read_parquet(str(Path(tmp) / "X.parquet"))[0]}
        model = NystroemKernelRidge(n_centers=200, random_state=0).fit(X[:20_000], y[:20_000])
        rows = []
        original = _stream.STREAMED_METHOD_BYTES
        try:
            with mercer.config_context(memory_budget=2 * 2**30):
                for name, make in sources.items():
                    model.predict(make())  # warm-up: imports, thread pools, the file in the page cache
                    for cap in caps:
                        _stream.STREAMED_METHOD_BYTES = cap
                        best = min(_timed(model.predict, make()) for _ in range(args.repeat))
                        rows.append((name, cap, best))
                        print(f"{name:8s} cap {cap / 2**20:6.1f} MiB  {best:7.2f} s", file=sys.stderr, flush=True)
        finally:
            _stream.STREAMED_METHOD_BYTES = original
    print(f"\nn = {args.n:,} x 8 float64, NystroemKernelRidge(n_centers=200).predict, best of {args.repeat}\n")
    print("| source | cap (MiB) | seconds | / best of the source |\n|---|---|---|---|")
    for name, cap, s in rows:
        best = min(t for n2, _, t in rows if n2 == name)
        print(f"| {name} | {cap / 2**20:g} | {s:.2f} | {s / best:.2f} |")
    return 0


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
