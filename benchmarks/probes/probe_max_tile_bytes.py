"""Probe of ``MAX_TILE_BYTES`` (mercer/linalg/_blocking.py): the blocked kernel product ``K(X, X) @ v``
against this machine's GEMM rate, at the default tile cap and at the caps of ``--tile-caps-mib``
(default 32 and 256 MiB and none: either side of the constant's 128 MiB).

What is measured, in one run:

1. The float32 GEMM rate of torch on this machine (GFLOP/s, best of a few after a warm-up) for
   a kernel-tile shape ``(4096 x d) @ (d x 4096)``, the tile shape the planner picks for the
   large run, and a square ``2048^3`` product.
2. ``KernelOperator(RBF(gamma=1/d), X, memory_budget=B).matvec(v)`` with ``X`` of shape
   ``(n, d)``, ``d = 28``, float32, ``v`` of shape ``(n,)``, for a small ``n`` (100,000) and the
   large ``n`` (default 1,000,000): wall time of ``matvec``, the block plan, kernel entries per
   second, GFLOP/s counting ``2 d + 5`` flops per kernel entry (``2 d`` for the inner product,
   ``3`` for ``-2 <x, z> + |x|^2 + |z|^2`` and the scaling before ``exp``, ``2`` for the
   multiply-add with ``v``; ``exp`` and the clamp are not counted), the ratio of that rate to
   the measured GEMM rates, and the peak RSS of the process that ran it (each run gets a fresh
   process), next to the size of the data (``X``, ``v`` and the output).
   Correctness: 200 random output rows are compared with a float64 computation of those rows;
   the error is ``max_i |y_i - y_ref_i| / sum_j |K_ij v_j|`` (float32 round-off is ~1e-7).
3. At the small ``n``, the naive approach a user would write: scikit-learn's ``rbf_kernel`` on
   row chunks of numpy float32 data, each chunk ``@ v``; the table gives mercer's speed-up.

Run (from the repository root)::

    .venv/bin/python benchmarks/probes/probe_max_tile_bytes.py --quick       # n = 100,000 only, ~1 min
    .venv/bin/python benchmarks/probes/probe_max_tile_bytes.py               # adds n = 1,000,000 (long)
    .venv/bin/python benchmarks/probes/probe_max_tile_bytes.py --n 300000 --budget-gib 1

The tables go to stdout, progress to stderr (logging), results to
``benchmarks/results/probes/max_tile_bytes/`` (``latest.json``, or ``quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (RESULTS_DIR,  # noqa: E402 Timer, best_time, current_rss_bytes, fmt_bytes, git_state, load_average,
                     machine_info, markdown_table, peak_rss_bytes, run_isolated, write_json)

log = logging.getLogger("probe_max_tile_bytes")

D = 28
SMALL_N = 100_000
CHECK_ROWS = 200
NAIVE_CHUNK = 1024
FLOPS_NOTE = "2*d + 5 flops per kernel entry (2d inner product, 3 distance assembly and scaling, 2 multiply-add with v; exp not counted)"


def flops_per_entry(d: int) -> int:
    return 2 * d + 5


# -- data and reference ------------------------------------------------------------------------
def make_data(n: int, d: int, seed: int):
    """Standard normal ``X`` (n, d) and ``v`` (n,), float32, identical for every method."""
    import torch

    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float32)
    v = torch.randn(n, generator=g, dtype=torch.float32)
    return X, v


def reference_rows(X, v, gamma: float, idx, chunk: int = 65536):
    """Rows ``idx`` of ``K @ v`` and of ``|K| @ |v|`` in float64, column chunk by column chunk."""
    import torch

    Xi = X[idx].double()
    ni = (Xi * Xi).sum(1)
    ref = torch.zeros(len(idx), dtype=torch.float64)
    scale = torch.zeros_like(ref)
    for j in range(0, X.shape[0], chunk):
        Z = X[j:j + chunk].double()
        sq = (ni[:, None] + (Z * Z).sum(1)[None, :] - 2.0 * Xi @ Z.T).clamp_min_(0.0)
        K = torch.exp(-gamma * sq)
        vj = v[j:j + chunk].double()
        ref += K @ vj
        scale += K @ vj.abs()
    return ref, scale


def check_error(y, X, v, gamma: float, n_rows: int, seed: int) -> float:
    """Largest error over ``n_rows`` random rows, relative to ``sum_j |K_ij v_j|``."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    y = torch.as_tensor(y)
    idx = torch.randperm(y.shape[0], generator=g)[:n_rows]
    ref, scale = reference_rows(X, v, gamma, idx)
    y = y[idx].double()
    return float(((y - ref).abs() / scale).max())


def data_bytes(n: int, d: int) -> int:
    """``X``, ``v`` and the output, float32."""
    return 4 * (n * d + 2 * n)


# -- GEMM rate ---------------------------------------------------------------------------------
def gemm_gflops(m: int, k: int, n: int, repeat: int) -> float:
    """Best float32 ``(m x k) @ (k x n)`` rate in GFLOP/s, output preallocated."""
    import torch

    A, B = torch.randn(m, k), torch.randn(k, n)
    C = torch.empty(m, n)
    seconds = best_time(lambda: torch.mm(A, B, out=C), repeat=repeat, warmup=2)
    return 2.0 * m * k * n / seconds / 1e9


def planned(n: int, d: int, budget: int):
    """The plan ``KernelOperator`` makes for ``n`` points (on the meta device: no data)."""
    import torch

    from mercer.kernels import RBF
    from mercer.linalg import KernelOperator

    X = torch.empty(n, d, dtype=torch.float32, device="meta")
    return KernelOperator(RBF(gamma=1.0 / d), X, memory_budget=budget).plan


def gemm_rows(d: int, tile_plan) -> list[dict]:
    shapes = [("kernel tile 4096 x d x 4096", 4096, d, 4096, 10),
              (f"plan tile {tile_plan.row_block} x d x {tile_plan.col_block}",
               tile_plan.row_block, d, tile_plan.col_block, 3),
              ("square 2048^3", 2048, 2048, 2048, 5)]
    rows = []
    for name, m, k, n, repeat in shapes:
        rate = gemm_gflops(m, k, n, repeat)
        log.info("GEMM %s: %.1f GFLOP/s", name, rate)
        rows.append({"GEMM": name, "m": m, "k": k, "n": n, "GFLOP/s": rate})
    return rows


# -- the measured runs (each in its own process) -----------------------------------------------
def set_tile_cap(cap_mib: float | None) -> None:
    """Override the planner's default ``max_tile_bytes`` in this process (0: no cap; None: keep)."""
    from mercer.linalg import plan_blocks

    if cap_mib is None:
        return
    defaults = plan_blocks.__kwdefaults__ or {}
    if "max_tile_bytes" not in defaults:
        raise SystemExit("--tile-caps-mib: this mercer's plan_blocks has no max_tile_bytes parameter.")
    defaults["max_tile_bytes"] = None if cap_mib == 0 else int(cap_mib * 2**20)


def mercer_child(n: int, d: int, budget: int, seed: int, check_rows: int, cap_mib: float | None = None,
                 rows: int | None = None) -> dict:
    """One ``KernelOperator.matvec`` on fresh data; timings and RSS of this process.

    ``rows`` < n computes only ``K(X[:rows], X) @ v``: the same tiles as the full product
    (when ``rows`` is at least one row block), in ``rows / n`` of the time.
    """
    import torch  # noqa: F401

    from mercer.kernels import RBF
    from mercer.linalg import KernelOperator

    set_tile_cap(cap_mib)
    rss_runtime = current_rss_bytes()
    X, v = make_data(n, d, seed)
    rss_data = current_rss_bytes()
    kernel = RBF(gamma=1.0 / d)
    op = KernelOperator(kernel, X, memory_budget=budget) if not rows or rows >= n else \
        KernelOperator(kernel, X[:rows], X, memory_budget=budget)
    log.info("n=%d: %r, %d x %d tiles", n, op, op.plan.n_row_blocks, op.plan.n_col_blocks)
    with Timer() as t:
        y = op.matvec(v)
    peak = peak_rss_bytes()
    log.info("n=%d: matvec %.1f s, peak RSS %s; checking %d rows", n, t.seconds, fmt_bytes(peak), check_rows)
    p = op.plan
    return {"seconds": t.seconds, "peak_rss": peak, "rss_runtime": rss_runtime, "rss_with_data": rss_data,
            "plan": {"row_block": p.row_block, "col_block": p.col_block, "tile_bytes": p.tile_bytes,
                     "n_row_blocks": p.n_row_blocks, "n_col_blocks": p.n_col_blocks},
            "rows": op.shape[0], "max_rel_err": check_error(y, X, v, 1.0 / d, check_rows, seed)}


def naive_matvec(X, v, gamma: float, chunk: int):
    """What a user would write: scikit-learn's rbf_kernel on row chunks, then ``@ v`` (numpy)."""
    import numpy as np
    from sklearn.metrics.pairwise import rbf_kernel

    out = np.empty(X.shape[0], dtype=X.dtype)
    for i in range(0, X.shape[0], chunk):
        out[i:i + chunk] = rbf_kernel(X[i:i + chunk], X, gamma=gamma) @ v
    return out


def naive_child(n: int, d: int, seed: int, check_rows: int, chunk: int) -> dict:
    import sklearn.metrics.pairwise  # noqa: F401  (imports count as runtime, not data)
    import torch  # noqa: F401

    rss_runtime = current_rss_bytes()
    X, v = make_data(n, d, seed)
    rss_data = current_rss_bytes()
    with Timer() as t:
        y = naive_matvec(X.numpy(), v.numpy(), 1.0 / d, chunk)
    peak = peak_rss_bytes()
    log.info("n=%d: naive %.1f s, peak RSS %s", n, t.seconds, fmt_bytes(peak))
    return {"seconds": t.seconds, "peak_rss": peak, "rss_runtime": rss_runtime, "rss_with_data": rss_data,
            "chunk": chunk, "max_rel_err": check_error(y, X, v, 1.0 / d, check_rows, seed)}


# -- rows of the table -------------------------------------------------------------------------
def summarise(method: str, n: int, d: int, budget: int, res: dict, gemm: dict) -> tuple[dict, dict]:
    rows = res.get("rows", n)
    entries = float(rows) * n
    gflops = entries * flops_per_entry(d) / res["seconds"] / 1e9
    plan = res.get("plan")
    engine = res["peak_rss"] - res["rss_with_data"]
    row = {
        "method": method if rows == n else f"{method}, rows 0..{rows:,} only", "n": n, "time_s": res["seconds"],
        "time all rows (s)": res["seconds"] * n / rows,
        "plan": f"{plan['row_block']} x {plan['col_block']} ({plan['n_row_blocks']}x{plan['n_col_blocks']} tiles)"
        if plan else f"{res['chunk']}-row chunks",
        "entries/s": entries / res["seconds"], "GFLOP/s": gflops,
        "vs GEMM tile": gflops / gemm["kernel tile"], "vs GEMM square": gflops / gemm["square"],
        "data": fmt_bytes(data_bytes(n, d)), "runtime RSS": fmt_bytes(res["rss_runtime"]),
        "peak RSS": fmt_bytes(res["peak_rss"]), "peak - (runtime+data)": fmt_bytes(engine),
        "max rel err": res["max_rel_err"],
    }
    raw = dict(row, data_bytes=data_bytes(n, d), budget_bytes=budget, raw=res,
               within_data_plus_budget=res["peak_rss"] <= data_bytes(n, d) + budget,
               engine_within_budget=engine <= budget)
    return row, raw


def cap_label(cap_mib: float | None) -> str:
    if cap_mib is None:
        return "mercer KernelOperator"
    return "mercer, no tile cap" if cap_mib == 0 else f"mercer, tile cap {cap_mib:g} MiB"


def run_mercer(n: int, args, budget: int, gemm: dict, cap_mib: float | None = None,
               rows: int | None = None) -> tuple[dict, dict]:
    log.info("%s: K @ v, n=%d, rows %s, budget %s ...", cap_label(cap_mib), n, rows or "all", fmt_bytes(budget))
    res = run_isolated(mercer_child, n, D, budget, args.seed, args.check_rows, cap_mib, rows).result
    return summarise(cap_label(cap_mib), n, D, budget, res, gemm)


def run_naive(n: int, args, budget: int, gemm: dict) -> tuple[dict, dict]:
    log.info("naive sklearn rbf_kernel chunks, n=%d ...", n)
    res = run_isolated(naive_child, n, D, args.seed, args.check_rows, args.naive_chunk).result
    return summarise("naive sklearn rbf_kernel + @", n, D, budget, res, gemm)


# -- driver ------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="points of the large run (default 1,000,000)")
    p.add_argument("--quick", action="store_true", help=f"only n = {SMALL_N:,} (the sanity row and naive comparison)")
    p.add_argument("--budget-gib", type=float, default=2.0, help="KernelOperator memory_budget in GiB (default 2)")
    p.add_argument("--small-n", type=int, default=SMALL_N, help=f"points of the small run (default {SMALL_N:,})")
    p.add_argument("--tile-caps-mib", type=float, nargs="*", default=[32, 256, 0],
                   help="extra mercer rows (at each n) with the planner's max_tile_bytes set to each cap "
                        "(MiB; 0 = no cap, tiles limited by the budget only)")
    p.add_argument("--large-rows", type=int, default=0,
                   help="compute only this many rows of K @ v at the large n (same tiles; time scales by n/rows); "
                        "0 = all rows (default)")
    p.add_argument("--naive-chunk", type=int, default=NAIVE_CHUNK, help="rows per rbf_kernel call of the naive code")
    p.add_argument("--check-rows", type=int, default=CHECK_ROWS, help="output rows checked against float64")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None,
                   help="result file (default benchmarks/results/probes/max_tile_bytes/latest.json or quick.json)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(processName)s %(name)s: %(message)s")
    budget = int(args.budget_gib * 2**30)
    big_n = None if args.quick or args.n <= args.small_n else args.n
    path = args.json or RESULTS_DIR / "probes" / "max_tile_bytes" / ("quick.json" if args.quick else "latest.json")
    import mercer

    head = {"machine": machine_info(), "code": git_state(), "mercer_path": mercer.__file__,
            "command": " ".join(sys.argv), "load_average_start": load_average(), "d": D, "dtype": "float32",
            "kernel": f"RBF(gamma=1/{D})", "budget_bytes": budget, "flops_per_entry": FLOPS_NOTE}
    log.info("%(machine)s; load average %(load_average_start)s; code %(code)s; mercer from %(mercer_path)s", head)

    gemm_table = gemm_rows(D, planned(big_n or args.small_n, D, budget))
    gemm = {"kernel tile": gemm_table[0]["GFLOP/s"], "square": gemm_table[-1]["GFLOP/s"]}
    rows, raws = [], []

    def record(row_raw: tuple[dict, dict]) -> None:  # results so far go to disk after every run
        rows.append(row_raw[0])
        raws.append(row_raw[1])
        write_json(path, dict(head, gemm=gemm_table, matvec=raws, complete=False))

    record(run_mercer(args.small_n, args, budget, gemm))
    for cap in args.tile_caps_mib:
        record(run_mercer(args.small_n, args, budget, gemm, cap))
    record(run_naive(args.small_n, args, budget, gemm))
    speedup = rows[-1]["time_s"] / rows[0]["time_s"]
    if big_n:
        part = min(args.large_rows or big_n, big_n) / big_n
        estimate = rows[0]["time_s"] * (big_n / args.small_n) ** 2 * part
        log.info("n=%d: estimated %.0f s (%.1f min) from the n=%d run", big_n, estimate, estimate / 60, args.small_n)
        record(run_mercer(big_n, args, budget, gemm, rows=args.large_rows or None))
        raws[-1]["estimated_s"] = estimate
        for cap in args.tile_caps_mib:
            record(run_mercer(big_n, args, budget, gemm, cap, rows=args.large_rows or None))

    head["load_average_end"] = load_average()
    print(report(head, gemm_table, rows, speedup, args, budget))
    write_json(path, dict(head, gemm=gemm_table, matvec=raws, naive_over_mercer=speedup, complete=True))
    log.info("wrote %s", path)


def report(head: dict, gemm_table, rows, speedup, args, budget) -> str:
    return "\n".join([
        f"Machine: {head['machine']}; mercer at {head['code']}. Load average (1/5/15 min) at start "
        f"{head['load_average_start']}, at end {head['load_average_end']}.",
        "", "GEMM, torch float32:", "", markdown_table(gemm_table), "",
        f"K(X, X) @ v, RBF(gamma=1/{D}), d={D}, float32, memory_budget={fmt_bytes(budget)}; {FLOPS_NOTE}. "
        f"'vs GEMM' = GFLOP/s over the GEMM rate above. Error: max over {args.check_rows} rows of "
        "|y - y_ref| / sum_j |K_ij v_j|, y_ref in float64.", "",
        markdown_table(rows), "",
        f"At n={args.small_n:,}: naive / mercer (default plan) time = {speedup:.2f}x.",
    ])


if __name__ == "__main__":
    main()
