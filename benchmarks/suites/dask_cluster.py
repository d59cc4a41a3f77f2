"""The Dask engine's overhead: NystroemKernelRidge's CG iteration on a LocalCluster vs in-process.

The synthetic regression of the Nyström suite (X ~ N(0, I_28) float32), RBF gamma = 1/(2 d),
alpha = 1e-6 n, M uniform centres, float32 tiles, ``--max-iter`` CG iterations (tol = 0, so every
fit runs them all). Two measurements, each run once:

* one fit in this process (torch with every core) and one on a ``LocalCluster`` of ``--workers``
  single-threaded workers (X a Dask array of ``--partitions`` row chunks, generated into the workers'
  memory with ``persist`` before the fit, as X is in memory for the in-process fit): time per CG
  iteration (from the solver's INFO log records), iterations, fit time;
* the bare product ``K^T K v`` (the CG iteration's work), ``--reps`` times each way: median time,
  and the bytes one distributed product moves (v scattered to every worker, partial products,
  result to the client: :attr:`mercer.distributed.DaskKernelOperator.comm_bytes`).

    python benchmarks/suites/dask_cluster.py --n 200000 --M 2000 --workers 2
    python benchmarks/suites/dask_cluster.py --quick      # n = 20,000, M = 500, 3 iterations

The ratio printed is distributed / in-process time (the engine's overhead on the same cores): the
peer of a Dask fit is the same fit in one process. Results: ``benchmarks/results/dask_cluster/latest.{json,md}``.
"""

from __future__ import annotations

from pathlib import Path
import sys
import logging
import math
import os
import statistics
import time
import warnings

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (machine_info, markdown_table, parse_suite_args, suite_parser,  # noqa: E402
                     synthetic, write_results)  # the same generator, drawn per file / partition

D = 28


class _IterationTimes(logging.Handler):
    """Wall-clock times of the solver's "CG iteration" log records."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.times: list[float] = []

    def emit(self, record):
        if record.getMessage().startswith("CG iteration"):
            self.times.append(record.created)

    def per_iteration(self) -> float:
        t = self.times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else float("nan")


class _Spent:
    """Wall time spent inside chosen methods during a fit (patched in, removed after): the CG
    iteration itemised into the operator's product, the preconditioner's triangular solves and the
    rest (CG's vector updates, Python)."""

    def __init__(self, targets):
        self.targets, self._saved = targets, []
        self.seconds = {n: 0.0 for n, _, _ in targets}
        self.calls = {n: 0 for n, _, _ in targets}

    def __enter__(self):
        for name, cls, attr in self.targets:
            fn = getattr(cls, attr)
            self._saved.append((cls, attr, fn))
            setattr(cls, attr, self._timed(name, fn))
        return self

    def _timed(self, name, fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
        return wrapper

    def __exit__(self, *exc):
        for cls, attr, fn in self._saved:
            setattr(cls, attr, fn)


def _spent_targets():
    from mercer.distributed import DaskKernelOperator
    from mercer.linalg import FalkonPreconditioner, KernelOperator

    return [("product", KernelOperator, "kt_k_v"), ("product", DaskKernelOperator, "kt_k_v"),
            *[("solves", FalkonPreconditioner, f) for f in ("_solve_T", "_solve_Tt", "_solve_A", "_solve_At")]]


def timed_fit(model, X, y):
    handler = _IterationTimes()
    lg = logging.getLogger("mercer.models.ridge._nystroem")
    lg.addHandler(handler)
    old = lg.level
    lg.setLevel(logging.INFO)
    try:
        with _Spent(_spent_targets()) as spent:
            model.fit(X, y)
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old)
    it = int(model.n_iter_.max())
    # Per iteration: one product and 4 triangular solves; the solves also run twice for the right-hand
    # side and twice for the solution, so theirs is 4 x the mean time of a solve.
    per_it = {"product": spent.seconds["product"] / it,
              "solves": 4 * spent.seconds["solves"] / max(spent.calls["solves"], 1)}
    return handler.per_iteration(), it, model.fit_time_, model, per_it


def _timed_part(block, kernel, Z, v, budget):
    """One partition's task, timed inside the worker (its compute, without scheduling or transfers)."""
    from mercer.distributed._operator import _part_kt_k_v

    t0 = time.perf_counter()
    _part_kt_k_v(block, kernel, Z, v, None, budget, None)
    return time.perf_counter() - t0


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = suite_parser("dask_cluster", __doc__.split("\n")[0], quick="n = 20,000, M = 500, 3 CG iterations, 1 rep")
    ap.add_argument("--n", type=int, default=None, help="rows (default 200,000; --quick 20,000)")
    ap.add_argument("--M", type=int, default=None, help="centres (default 2,000; --quick 500)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=None, help="row chunks (default 4 per worker)")
    ap.add_argument("--max-iter", type=int, default=None, help="CG iterations (default 10; --quick 3)")
    ap.add_argument("--reps", type=int, default=None, help="products timed each way (default 3; --quick 1)")
    args = parse_suite_args(ap, argv)
    q = args.quick
    args.n, args.M = args.n or (20_000 if q else 200_000), args.M or (500 if q else 2_000)
    args.max_iter, args.reps = args.max_iter or (3 if q else 10), args.reps or (1 if q else 3)
    try:
        import distributed  # noqa: F401
    except ImportError as exc:
        from _common import SkipSuite

        raise SkipSuite(f"dask: the distributed package is not installed ({exc})")
    warnings.filterwarnings("ignore", message=".*conjugate gradient stopped")  # tol=0: by design

    import dask.array as da
    import distributed
    import torch

    import mercer
    from mercer.distributed import DaskKernelOperator
    from mercer.linalg import KernelOperator

    # The same glibc settings in this process as the engine applies in its workers (mercer.distributed
    # ._operator._keep_tiles_in_heap): without them the in-process side's tiles may be mapped afresh
    # and its two threads serialise on page faults (its 2-thread product took 7.9 s in one run and
    # 15.7 s in the next, one thread 14.3-14.8 s), and the ratio would flatter the cluster.
    from mercer.distributed._operator import _keep_tiles_in_heap

    _keep_tiles_in_heap()
    n, M = args.n, args.M
    parts = args.partitions or 4 * args.workers
    chunk = math.ceil(n / parts)
    sizes = [min(chunk, n - i) for i in range(0, n, chunk)]
    # Each partition generated where it lives (the graph holds a seed, not the data); the same
    # partitions, generated here, are the in-process data.
    local_parts = [synthetic(m, D, seed=i) for i, m in enumerate(sizes)]
    X = np.concatenate([p[0] for p in local_parts])
    y = np.concatenate([p[1] for p in local_parts])
    del local_parts
    params = dict(n_centers=M, gamma=1 / (2 * D), alpha=1e-6 * n, solver="cg", tol=0.0, max_iter=args.max_iter,
                  dtype="float32", random_state=0)
    print(f"n={n} d={D} M={M} float32, {args.max_iter} CG iterations; load: {os.getloadavg()}", flush=True)

    it_local, n_local, fit_local, model, spent_local = timed_fit(mercer.NystroemKernelRidge(**params), X, y)
    Z, kernel = model.centers_, model.kernel_
    v = torch.randn(M, 1, dtype=torch.float64)
    local = KernelOperator(kernel, torch.from_numpy(X), Z, memory_budget=1 << 30, max_tile_bytes=32 << 20)
    local.kt_k_v(v, out_dtype=torch.float64)  # untimed, as the cluster's first product below
    t_local = median_time(lambda: local.kt_k_v(v, out_dtype=torch.float64), args.reps)

    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, host="127.0.0.1",
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    client.run(__import__, "mercer")
    startup = time.perf_counter() - t0
    try:
        import dask

        gen = [dask.delayed(synthetic, nout=2)(m, D, seed=i) for i, m in enumerate(sizes)]
        Xd = da.concatenate([da.from_delayed(g[0], (m, D), np.float32) for g, m in zip(gen, sizes)])
        yd = da.concatenate([da.from_delayed(g[1], (m,), np.float64) for g, m in zip(gen, sizes)])
        # In the cluster's memory first, as X is in this process's for the in-process fit (a user's
        # data read once with persist()); otherwise every pass of the fit's set-up regenerates it.
        t0 = time.perf_counter()
        Xd, yd = client.persist([Xd, yd])
        distributed.wait([Xd, yd])
        persist_s = time.perf_counter() - t0
        it_dask, n_dask, fit_dask, dmodel, spent_dask = timed_fit(mercer.NystroemKernelRidge(**params), Xd, yd)
        op = DaskKernelOperator(kernel, Xd, Z, client=client, memory_budget=1 << 30)
        with distributed.get_task_stream(client=client) as ts:
            op.kt_k_v(v)  # partitions in place
        ran = [t["worker"] for t in ts.data if str(t["key"]).startswith("_part_kt_k_v")]
        print(f"product tasks per worker: {sorted(ran.count(w) for w in set(ran))}", flush=True)
        t_dask = median_time(lambda: op.kt_k_v(v, out_dtype=torch.float64), args.reps)
        comm = op.comm_bytes
        # Where the overhead goes: each partition's task timed on its worker, against the same
        # partitions' products in this process on one thread (the work a single-threaded worker does).
        v_np = v.numpy().astype(np.float32)
        task_s = []
        for _ in range(args.reps):
            futs = [client.submit(_timed_part, x, op._kernel_f, op._Z_f, v_np, op.budget, pure=False)
                    for x in op._parts]
            task_s.append(sum(client.gather(futs)))
        task_s = statistics.median(task_s)
        Zn = Z.numpy()
        with mercer._backend.num_threads(1):
            one_s = median_time(lambda: [_timed_part(X[i:i + m], kernel, Zn, v_np, op.budget)
                                         for i, m in zip(np.cumsum([0, *sizes[:-1]]), sizes)], args.reps)
        diff = float(np.abs(dmodel.predict(X[:1000]) - model.predict(X[:1000])).max())
    finally:
        client.close()
        cluster.close()

    lines = []

    def say(text):
        print(text)
        lines.append(text)

    say(f"LocalCluster start-up: {startup:.1f} s ({args.workers} workers x 1 thread, {parts} partitions); "
          f"X and y generated into the workers' memory (persist): {persist_s:.1f} s, not in the fit's time")
    say(f"{'':24s}{'in-process':>14s}{'dask':>14s}{'ratio':>8s}")
    say(f"{'fit: s / CG iteration':24s}{it_local:14.3f}{it_dask:14.3f}{it_dask / it_local:8.2f}")
    for k in ("product", "solves"):
        say(f"{'  of which ' + k:24s}{spent_local[k]:14.3f}{spent_dask[k]:14.3f}"
              f"{spent_dask[k] / max(spent_local[k], 1e-9):8.2f}")
    rest_l, rest_d = (it - sum(sp.values()) for it, sp in ((it_local, spent_local), (it_dask, spent_dask)))
    say(f"{'  the rest':24s}{rest_l:14.3f}{rest_d:14.3f}")
    say(f"{'fit: iterations':24s}{n_local:14d}{n_dask:14d}")
    say(f"{'fit: total s':24s}{fit_local:14.1f}{fit_dask:14.1f}{fit_dask / fit_local:8.2f}")
    say(f"{'K^T K v: s (median)':24s}{t_local:14.3f}{t_dask:14.3f}{t_dask / t_local:8.2f}")
    say(f"partition products, summed: on the workers {task_s:.3f} s, here on one thread {one_s:.3f} s "
          f"(ratio {task_s / one_s:.2f}); dask product wall x workers / task sum: "
          f"{t_dask * args.workers / task_s:.2f} (1.0 = no scheduling or transfer cost)")
    say(f"in-process product on all threads vs one thread: {t_local:.3f} s vs {one_s:.3f} s "
          f"(speed-up {one_s / t_local:.2f} on {torch.get_num_threads()} threads)")
    say(f"bytes per iteration (dask): {comm:,} (v scattered to {args.workers} workers: "
          f"{M * 4 * args.workers:,}; partials and result: {comm - M * 4 * args.workers:,})")
    say(f"max |prediction difference| dask vs in-process (1,000 points; float32 tiles and a CG cut at "
          f"--max-iter are rounding-sensitive: tile shapes alone move it): {diff:.2e}")
    say(f"load after: {os.getloadavg()}")
    rows = [{"measure": "fit: s / CG iteration", "in-process": it_local, "dask": it_dask, "dask/in-process": it_dask / it_local},
            {"measure": "fit: total s", "in-process": fit_local, "dask": fit_dask, "dask/in-process": fit_dask / fit_local},
            {"measure": "K^T K v: s (median)", "in-process": t_local, "dask": t_dask, "dask/in-process": t_dask / t_local}]
    write_results(args, {"machine": machine_info(), "n": n, "M": M, "workers": args.workers, "partitions": parts,
                         "rows": rows, "comm_bytes": comm, "startup_s": startup, "persist_s": persist_s,
                         "report": lines},
                  f"Machine: {machine_info()}; n = {n:,}, d = {D}, M = {M:,}, {args.workers} workers x 1 thread, "
                  f"{parts} partitions\n\n{markdown_table(rows)}\n\n```\n" + "\n".join(lines) + "\n```",
                  title="The Dask engine's overhead: NystroemKernelRidge on a LocalCluster vs in-process")


if __name__ == "__main__":
    main()
