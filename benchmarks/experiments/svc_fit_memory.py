"""Where KernelSVC's fit memory goes on TF-IDF rows (issue 29: "peak memory at most twice the sparse
matrix plus the model"; ``benchmarks/results/sparse_text/latest.md`` measured ~250 MiB over the
pre-fit RSS for a 2.87 MiB matrix).

One process: the fortunes TF-IDF rows of ``benchmarks/suites/sparse_text.py`` (every category, or
``--quick``), one torch thread; a thread samples the RSS every 2 ms and records the main thread's
stack each time the RSS passes another 10 MiB over the start of the step. Steps: a 2-row fit (the
benchmark's warm-up: numba compiles its loops), a 600-row fit (the rest of the compilation), then two
full fits. Printed per step: the peak over the RSS at its start, the RSS left after it (the fitted
model still held), the RSS after ``malloc_trim(0)`` (freed heap handed back: what is left is live,
mostly the model), and the stacks.

Run: ``.venv/bin/python benchmarks/experiments/svc_fit_memory.py [--kernel cosine] [--quick]``
(full: a few minutes on 2 cores).

Measured (loaded 2-core machine, 11,411 x 27,209, 42 classes = 861 one-vs-one machines, cosine):
warm-up 2 rows +115.0 MiB (llvmlite / numba compilation, once per process); fit 1 +246.0 MiB peak,
82.6 MiB live after; fit 2 +241.9 MiB, 73.5 MiB live after. The stacks put the growth in
``models/svm/_svc.py``: one dense length-n float64 alpha array per machine (861 x 11,411 x 8 B =
75.0 MiB), ``np.stack`` of them (75.0 MiB more), and ``coef[order]``, the n_SV x n_machines matrix
the model keeps as ``_W`` (73.3 MiB). The kernel-row cache of a machine is at most its own samples
squared in float32 (largest pair 1,840 rows: 12.9 MiB).
Since then (73c4e40, 21c3b29, the row cache in its own mapping) a fresh process's fit peaks at
29.2 MiB (benchmarks/results/sparse_text/latest.md).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "suites"), str(HERE.parent)]
from _common import current_rss_bytes  # noqa: E402
from sparse_text import fortunes_dir, load_fortunes, tfidf  # noqa: E402

ROOT = str(HERE.parents[1])
STEP = 10 * 2**20


def _stack(thread_id: int) -> str:
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return "?"
    def where(f) -> str:
        name = os.path.relpath(f.filename, ROOT) if f.filename.startswith(ROOT) else os.path.basename(f.filename)
        return f"{name}:{f.lineno} {f.name}"

    return " <- ".join(where(f) for f in reversed(traceback.extract_stack(frame)[-5:]))


class _Sampler(threading.Thread):
    def __init__(self, base: int, main_id: int):
        super().__init__(daemon=True)
        self.base, self.peak, self.main_id, self.done, self.marks = base, base, main_id, False, []

    def run(self):
        mark = self.base + STEP
        while not self.done:
            rss = current_rss_bytes()
            if rss > self.peak:
                self.peak = rss
                if rss >= mark:
                    self.marks.append(((rss - self.base) / 2**20, _stack(self.main_id)))
                    mark = rss + STEP
            time.sleep(0.002)


def measure(label: str, fit):
    gc.collect()
    base = current_rss_bytes()
    sampler = _Sampler(base, threading.main_thread().ident)
    sampler.start()
    t0 = time.perf_counter()
    model = fit()  # kept until the RSS after the step is read: "after" counts the fitted model
    seconds = time.perf_counter() - t0
    sampler.done = True
    sampler.join()
    after = current_rss_bytes()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"{label}: peak over start {(sampler.peak - base) / 2**20:.1f} MiB, after {(after - base) / 2**20:.1f} MiB, "
          f"after malloc_trim {(current_rss_bytes() - base) / 2**20:.1f} MiB, {seconds:.1f} s", flush=True)
    for mib, where in sampler.marks:
        print(f"   +{mib:.0f} MiB at: {where}", flush=True)
    del model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", default="cosine", help="KernelSVC's kernel (default cosine)")
    p.add_argument("--quick", action="store_true", help="the benchmark's quick set (8 categories)")
    p.add_argument("--fortunes-dir", type=Path, default=None)
    args = p.parse_args()
    folder = fortunes_dir(args.fortunes_dir)
    if folder is None:
        sys.exit("fortunes not found (install Debian's 'fortunes' or pass --fortunes-dir)")
    Xtr, _, ytr, _ = tfidf(*load_fortunes(folder, quick=args.quick))
    nbytes = Xtr.data.nbytes + Xtr.indices.nbytes + Xtr.indptr.nbytes
    print(f"TF-IDF {Xtr.shape[0]} x {Xtr.shape[1]}, {nbytes / 2**20:.2f} MiB sparse, "
          f"{len(np.unique(ytr))} classes", flush=True)
    import torch

    torch.set_num_threads(1)
    import mercer

    two = [0, int(np.flatnonzero(ytr != ytr[0])[0])]
    measure("warm-up, 2 rows", lambda: mercer.KernelSVC(kernel="cosine").fit(Xtr[two], ytr[two]))
    measure("warm-up, 600 rows", lambda: mercer.KernelSVC(kernel=args.kernel).fit(Xtr[:600], ytr[:600]))
    for i in (1, 2):
        measure(f"fit {i}, all rows", lambda: mercer.KernelSVC(kernel=args.kernel, C=1.0).fit(Xtr, ytr))


if __name__ == "__main__":
    main()
