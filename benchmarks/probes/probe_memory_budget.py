"""Probe of the memory budget (``ExecutionPlan``, mercer/linalg/_plan.py): is it honoured, measured?

Every estimator of ``mercer.models._registry.ESTIMATORS`` (its first registry example's parameters)
fits and predicts (``transform`` for a transformer, ``predict`` or ``fit_predict`` for a clusterer)
in a fresh process per (estimator, budget), under ``mercer.config_context(memory_budget=B)`` and its
own ``memory_budget=B`` where it has one, on data whose dense n x n float64 kernel does not fit the
budget: ``n = 1000 * ceil(1.25 * sqrt(B / 8) / 1000)`` rows (4,000 at 64 MiB, 8,000 at 256 MiB,
21,000 at 2 GiB), ``d = 8`` features, float64, and as many rows to predict.

The child measures its peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``) after the imports and the
data (the *baseline*) and at the end, and the verdict is

* ``ok``: peak <= baseline + input bytes + 1.2 x budget (the *allowance*; input bytes: the training
  and prediction arrays, which a call may copy once);
* ``MemoryBudgetError``: the call refused, and its message names a remedy (``memory_budget``,
  fewer / smaller / ``Use ...``);
* ``OVER``: peak over the allowance; ``allocator``: a ``MemoryError`` that is not a
  ``MemoryBudgetError`` (numpy's or torch's); ``crash``: the child died (a signal, a non-zero
  exit without a result); ``killed``: the harness stopped a child whose RSS passed
  ``--kill-factor`` x its allowance (this machine is shared); ``timeout``; ``error``: another exception.

Linux keeps ``ru_maxrss`` across ``exec`` (a child exec'd from a large process reports at least
that process's RSS), so the parent of the children imports neither numpy nor torch: run this
script as its own process (``tests/test_memory_budget.py`` does), never import it from one that
holds torch. Each child's ``ru_maxrss`` at its start is recorded (``start``) to show it.

Run (from the repository root)::

    .venv/bin/python benchmarks/probes/probe_memory_budget.py                      # full matrix
    .venv/bin/python benchmarks/probes/probe_memory_budget.py --budgets-mib 64 --estimators KernelRidge,KernelSVC
    .venv/bin/python benchmarks/probes/probe_memory_budget.py --json -             # one JSON result per line

Results: ``benchmarks/results/budget/latest.md`` (the command line at the top; estimator x budget ->
peak RSS over the call's baseline / allowance) and ``latest.json``; ``--out`` elsewhere. Exit status
1 when any cell fails (``OVER``, ``allocator``, ``crash``, ``killed``, ``error``, a
``MemoryBudgetError`` without a remedy); a timeout is reported, not failed (``--fail-on-timeout``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import RESULTS_DIR, command_line, fmt_bytes, markdown_table, write_json  # noqa: E402

MiB = 2**20
D = 8
#: the allowance: baseline + input bytes + SLACK x budget
SLACK = 1.2
#: rows of the warm-up fit before the baseline
WARMUP = 200
DEFAULT_BUDGETS_MIB = (64, 256, 2048)
#: what a MemoryBudgetError's message says to be a remedy
REMEDY = re.compile(r"memory_budget|\b(use|fewer|smaller|reduce|lower|raise|increase|pass|set)\b", re.I)
FAILURES = ("OVER", "allocator", "crash", "killed", "error", "no remedy")


def rows_for(budget: int) -> int:
    """Rows whose dense n x n float64 kernel is over 1.5 x ``budget`` (rounded up to thousands)."""
    return 1000 * math.ceil(1.25 * math.sqrt(budget / 8) / 1000)


def allowance(result: dict) -> int:
    return int(result["baseline"] + result["input_bytes"] + SLACK * result["budget"])


# -- the child: one estimator at one budget ---------------------------------------------------------
def _maxrss() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def child(name: str, budget: int, n: int, seed: int = 0) -> dict:
    """Fit and predict ``name`` at ``budget`` in this process; the measurements as a dict."""
    start = _maxrss()
    import warnings

    import numpy as np
    import sklearn.base

    import mercer
    from mercer.linalg import MemoryBudgetError
    from mercer.models._registry import CLASSIFIER, CLUSTERER, ESTIMATORS, REGRESSOR, TRANSFORMER

    spec = next(e for e in ESTIMATORS if e.name == name)
    cls = spec.load()
    est = cls(**spec.examples[0].kwargs())
    if "memory_budget" in est.get_params():
        est.set_params(memory_budget=budget)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    X_test = rng.standard_normal((n, D))
    f = np.sin(X @ rng.standard_normal(D) / math.sqrt(D) * 2)
    if spec.kind == CLASSIFIER:
        y = (f > 0).astype(np.int64)
    elif spec.kind == REGRESSOR:
        y = f + 0.1 * rng.standard_normal(n)
    else:
        y = None
    input_bytes = X.nbytes + X_test.nbytes + (0 if y is None else y.nbytes)

    def fit_predict(est, X, X_test, y, out):
        if spec.kind == CLUSTERER and not hasattr(est, "predict"):
            return est.fit_predict(X)
        est.fit(X) if y is None else est.fit(X, y)
        out["fit_s"], out["stage"] = time.perf_counter() - t0, "predict"
        return est.transform(X_test) if spec.kind == TRANSFORMER else est.predict(X_test)

    # the warm-up: the same calls on WARMUP rows import what the estimator imports on first use and
    # start torch's thread pools, so that the baseline holds the code and only the data scales
    t0 = time.perf_counter()
    with mercer.config_context(memory_budget=budget), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fit_predict(sklearn.base.clone(est), X[:WARMUP], X_test[:WARMUP], None if y is None else y[:WARMUP], {})
        except Exception:  # noqa: BLE001 -- the measured call says what fails
            pass
    baseline = _maxrss()
    out = {"estimator": name, "kind": spec.kind, "budget": budget, "n": n, "d": D, "start": start,
           "baseline": baseline, "rss_before": _rss(os.getpid()), "input_bytes": input_bytes, "status": "ok",
           "message": "", "stage": "fit"}
    t0 = time.perf_counter()
    try:
        with mercer.config_context(memory_budget=budget), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_predict(est, X, X_test, y, out)
            out["stage"] = "done"
    except MemoryBudgetError as e:
        out["status"], out["message"] = "MemoryBudgetError", str(e)
    except MemoryError as e:
        out["status"], out["message"] = "allocator", f"{type(e).__module__}.{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 -- reported, one cell of the table
        out["status"], out["message"] = "error", f"{type(e).__name__}: {e}"[:500]
    out["seconds"] = time.perf_counter() - t0
    out["peak"] = _maxrss()
    return out


# -- the parent: one fresh process per cell ---------------------------------------------------------
def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def run_cell(name: str, kind: str, budget: int, n: int, *, timeout: float, kill_factor: float,
             python: str = sys.executable) -> dict:
    """Run :func:`child` in a fresh process, watching its RSS; the verdict added."""
    cmd = [python, str(Path(__file__).resolve()), "--child", name, str(budget), str(n)]
    cap = int(kill_factor * (3 * 2**30 + 2 * n * D * 8 + SLACK * budget))  # allowance's order with a large baseline
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        seen, verdict = 0, ""
        while proc.poll() is None:
            seen = max(seen, _rss(proc.pid))
            if seen > cap:
                proc.kill()
                verdict = "killed"
            elif time.perf_counter() - t0 > timeout:
                proc.kill()
                verdict = "timeout"
            time.sleep(0.05)
        stdout, stderr = proc.communicate()
    result = {"estimator": name, "kind": kind, "budget": budget, "n": n, "d": D, "watched_rss": seen}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if verdict:
        result.update(status=verdict, message=f"{verdict} after {time.perf_counter() - t0:.0f} s, RSS {fmt_bytes(seen)}")
    elif proc.returncode != 0 or not lines:
        result.update(status="crash", message=f"exit status {proc.returncode}: {stderr.strip()[-400:]}")
    else:
        result.update(json.loads(lines[-1]))
        if result["status"] == "ok" and result["peak"] > allowance(result):
            result["status"] = "OVER"
        elif result["status"] == "MemoryBudgetError" and not REMEDY.search(result["message"]):
            result["status"] = "no remedy"
    result["wall_s"] = time.perf_counter() - t0
    return result


def remedy(message: str) -> str:
    """The part of a MemoryBudgetError's message after its diagnosis (what to do), shortened."""
    parts = re.split(r"(?<=[.;])\s+", message.strip())
    tail = [p for p in parts if REMEDY.search(p)]
    text = " ".join(tail[-2:]) if tail else message
    return text if len(text) <= 160 else text[:157] + "..."


def cell(result: dict) -> str:
    status = result["status"]
    if status in ("ok", "OVER"):
        used = result["peak"] - result["baseline"]
        over = allowance(result) - result["baseline"]
        text = f"{fmt_bytes(used)} / {fmt_bytes(over)}"
        return text if status == "ok" else f"**OVER** {text} (at {result.get('stage')})"
    if status == "MemoryBudgetError":
        return f"MemoryBudgetError: {remedy(result['message'])}"
    return f"**{status}**: {result.get('message', '')[:200]}"


def report(results: list[dict], budgets: list[int], cmd: str) -> str:
    by = {(r["estimator"], r["budget"]): r for r in results}
    names = list(dict.fromkeys(r["estimator"] for r in results))
    kinds = {r["estimator"]: r["kind"] for r in results}
    lines = ["# The memory budget, measured", "",
             f"Command (from the repository root): `{cmd}`", "",
             "Each cell: one fresh process fits and predicts (transforms) under that budget "
             f"(`memory_budget=` and `config_context`) on n x {D} float64 rows whose dense n x n kernel is over "
             "the budget, and as many rows to predict. `peak - baseline / allowance`: the peak RSS "
             "(`ru_maxrss`) over the RSS after imports and data, against the allowance "
             f"`input bytes + {SLACK} x budget`. A `MemoryBudgetError` shows its remedy. "
             "Produced by `benchmarks/probes/probe_memory_budget.py`.", "",
             "| budget | n |", "|---|---|"]
    lines += [f"| {fmt_bytes(b)} | {rows_for(b):,} |" for b in budgets]
    for kind in ("regressor", "classifier", "transformer", "clusterer"):
        rows = []
        for name in names:
            if kinds[name] != kind:
                continue
            row = {"estimator": name}
            for b in budgets:
                r = by.get((name, b))
                row[fmt_bytes(b)] = cell(r) if r else "not run"
            rows.append(row)
        if rows:
            lines += ["", f"## {kind}s", "", markdown_table(rows)]
    bad = [r for r in results if r["status"] in FAILURES]
    timeouts = [r for r in results if r["status"] == "timeout"]
    lines += ["", f"{len(results)} runs: {len(bad)} failed"
              + (f" ({', '.join(sorted({r['estimator'] + ' @ ' + fmt_bytes(r['budget']) for r in bad}))})" if bad else "")
              + (f", {len(timeouts)} timed out" if timeouts else "") + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", nargs=3, metavar=("NAME", "BUDGET", "N"), help=argparse.SUPPRESS)
    p.add_argument("--budgets-mib", default=",".join(map(str, DEFAULT_BUDGETS_MIB)),
                   help="budgets in MiB (default %(default)s)")
    p.add_argument("--estimators", default="", help="comma-separated names (default: every estimator)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per run (default %(default)s)")
    p.add_argument("--kill-factor", type=float, default=2.0,
                   help="stop a child whose RSS passes this multiple of a generous allowance (default %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "budget",
                   help="results folder (default benchmarks/results/budget/); 'none': no files")
    p.add_argument("--json", default="", metavar="PATH", help="also write each result as a JSON line here ('-': stdout)")
    p.add_argument("--jobs", type=int, default=1, help="children run at once (default %(default)s; each is measured alone)")
    p.add_argument("--report", nargs="+", type=Path, metavar="JSONL",
                   help="run nothing: write the report from the JSON lines of earlier runs (--json), later lines "
                        "replacing earlier ones for the same cell; their commands go to the top")
    p.add_argument("--fail-on-timeout", action="store_true")
    args = p.parse_args(argv)
    if args.child:
        name, budget, n = args.child
        print(json.dumps(child(name, int(budget), int(n))), flush=True)
        return 0

    from mercer.models._registry import ESTIMATORS  # stdlib only: the parent stays small

    budgets = [int(float(b) * MiB) for b in args.budgets_mib.split(",") if b.strip()]
    if args.report:
        cells, cmds = {}, []
        for path in args.report:
            for line in path.read_text().splitlines():
                r = json.loads(line)
                if "command" in r:
                    cmds.append(r["command"])
                else:
                    cells[(r["estimator"], r["budget"])] = r
        order = {e.name: i for i, e in enumerate(ESTIMATORS)}
        results = sorted(cells.values(), key=lambda r: (order.get(r["estimator"], 99), r["budget"]))
        budgets = sorted({r["budget"] for r in results})
        cmd = "`, then `".join([*dict.fromkeys(cmds), command_line(argv and [sys.argv[0], *argv])])
        return _write(args, results, budgets, cmd)
    wanted = [s.strip() for s in args.estimators.split(",") if s.strip()]
    known = {e.name: e for e in ESTIMATORS}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        p.error(f"unknown estimator(s) {unknown}; choose from {sorted(known)}")
    specs = [known[w] for w in wanted] if wanted else list(ESTIMATORS)
    jsonl = sys.stdout if args.json == "-" else open(args.json, "w") if args.json else None  # noqa: SIM115
    if jsonl not in (None, sys.stdout):
        print(json.dumps({"command": command_line(argv and [sys.argv[0], *argv])}), file=jsonl, flush=True)
    cells = [(spec, b) for spec in specs for b in budgets]

    def one(job):
        spec, b = job
        r = run_cell(spec.name, spec.kind, b, rows_for(b), timeout=args.timeout, kill_factor=args.kill_factor)
        print(f"{spec.name:32s} {fmt_bytes(b):>10s} {r['status']:18s} {cell(r)[:110]}  ({r['wall_s']:.1f} s)",
              file=sys.stderr, flush=True)
        if jsonl:
            print(json.dumps(r), file=jsonl, flush=True)
        return r

    try:
        with ThreadPoolExecutor(max(args.jobs, 1)) as pool:  # threads wait on the children
            results = list(pool.map(one, cells))
    finally:
        if jsonl not in (None, sys.stdout):
            jsonl.close()
    return _write(args, results, budgets, command_line(argv and [sys.argv[0], *argv]))


def _write(args, results, budgets, cmd) -> int:
    md = report(results, budgets, cmd)
    if str(args.out) != "none":
        write_json(args.out / "latest.json", results)
        (args.out / "latest.md").write_text(md)
    if args.json != "-":
        print(md)
    failed = [r for r in results if r["status"] in FAILURES or (args.fail_on_timeout and r["status"] == "timeout")]
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
