"""Speed over data shapes (issue 13): mercer / reference time ratios, cold and warm, d x n grid.

Grid: d in {2, 4, 8, 16, 32, 128, 784} x n in {5k, 20k, 100k} training rows (real data wherever a
set has the rows, synthetic otherwise: see ``_shapes.py``), estimators

========  ===========================================================  ====================
name      mercer vs reference                                           target (cold, warm)
========  ===========================================================  ====================
svc       KernelSVC(C=1, RBF, gamma="scale") float64 vs LIBSVM (SVC)    1.0, 0.7
svc32     the same in float32 vs the same LIBSVM run                    0.5, 0.5
kmeans    KMeans(k=50, same initial centres, n_init=1) vs scikit-learn  1.0, 1.0
krr       KernelRidge(RBF gamma=1/d, alpha=1) float64 vs scikit-learn   0.5, 0.5 (n <= 20k)
kpca      KernelPCA(10, RBF gamma=1/d) vs scikit-learn's arpack         0.2, 0.2 (n <= 20k)
nkr       NystroemKernelRidge vs FALKON (same M, precision, lambda)     0.5, 0.5
          and vs scikit-learn's Nystroem + Ridge (float64)              report only
========  ===========================================================  ====================

nkr: gamma = 1/d, alpha = 1e-6 n (FALKON's penalty lambda = alpha / n = 1e-6: checked against the
closed form on a tiny problem at the start of every run that has FALKON), M = 1,000 for n <= 20k and
5,000 above, the same M centres for all three (the rows scikit-learn's ``Nystroem(random_state=0)``
draws, given to mercer and FALKON as arrays), so that test errors compare one model; mercer and
scikit-learn with their defaults otherwise (intercept fitted), FALKON with its defaults (20 CG
iterations). FALKON fits no intercept: where that costs it accuracy (KEGG: test RMSE 0.31 against
0.17 at n = 2,000, though the targets are centred) the models differ, so a FALKON cell counts as
equal when mercer's test RMSE is at most FALKON's + 0.5 %; mercer without intercept gives FALKON's
error there (0.3076 both).

Every fit runs in a fresh process (``_shapes_child.py``). Cold: from the child's first line, imports
and JIT compilation included, through the first fit, less the time spent loading the ``.npy`` files
(numba's on-disk cache is primed by one untimed run of every child on a small set before the grid,
as after a user's first call: ``--no-prime`` skips it);
warm: the best of ``--reps`` further fits in the same child (with ``--warm-s S``: of more while the refits so
far took less than S seconds, 20 at most, for both sides alike); predict: one warm call on the test rows.
Within a cell mercer and its references run one after the other (order reversed from cell to cell),
so every ratio is taken in one run; the load average before and after each cell, each child's peak
RSS and the result-equality metrics are recorded with it.

Usage::

    python benchmarks/suites/shapes.py --quick                          # smoke run, a few minutes
    python benchmarks/suites/shapes.py --estimators kmeans svc --d 8 --n 5000
    python benchmarks/suites/shapes.py                                  # the full grid (8-10 h), or split:
    python benchmarks/suites/shapes.py --estimators svc svc32 kmeans
    python benchmarks/suites/shapes.py --estimators krr kpca --n 5000 20000 --timeout 1500
    python benchmarks/suites/shapes.py --estimators nkr
    python benchmarks/suites/shapes.py --plot-only                      # tables and heat maps from JSON

scikit-learn's exact KernelRidge takes ~440 s per fit at n = 20k here: with the default 600 s
limit its warm refits are not started (no warm ratio), hence ``--timeout 1500`` above. Real sets
for d = 32, 128, 784 need Fashion-MNIST (``--fashion-mnist-dir`` / ``$MERCER_FASHION_MNIST_DIR``, else
``apt-get install dataset-fashion-mnist``), for d = 2, 4, 8, 16 the UCI sets (``--uci-dir`` /
``$MERCER_UCI_DIR``); otherwise those cells are synthetic and say so. FALKON's cells need an
interpreter that imports falkon (``--falkon-python`` / ``$FALKON_PYTHON``); without one they are
skipped. ``--refs`` chooses the peers (sklearn: LIBSVM, scikit-learn; falkon).

Cells merge into ``benchmarks/results/shapes/latest.json`` (``--out DIR``; ``--quick``: quick.json,
``--tag T``: history/T.json) keyed by estimator, d, n and variant, so a grid can be split over
several invocations. Heat maps: ``latest_<estimator>.png``; tables: ``latest.md`` (and printed).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import (command_line, git_state, load_average, machine_info, markdown_table,  # noqa: E402
                     parse_suite_args, result_paths, suite_parser, write_json)
from _shapes import CACHE, UCI_ROOT, available_bytes, estimated_bytes, prepare, release_sources  # noqa: E402

log = logging.getLogger("shapes")

CHILD = Path(__file__).resolve().parent / "_shapes_child.py"
REFS: tuple[str, ...] = ("sklearn", "falkon")
ESTIMATORS = ("svc", "svc32", "kmeans", "krr", "kpca", "nkr")
D_GRID = (2, 4, 8, 16, 32, 128, 784)
N_GRID = (5000, 20000, 100000)
QUICK_D, QUICK_N = (8,), (2000,)
EXACT_MAX_N = 20000  # krr, kpca: n x n Gram matrices
LAMBDA = 1e-6  # nkr: FALKON's penalty; alpha = LAMBDA * n
EQUAL_RMSE, EQUAL_ACC, EQUAL_SV, EQUAL_EIG, EQUAL_INERTIA = 0.005, 0.005, 0.01, 1e-6, 1e-6

#: (estimator, variant) -> (cold target, warm target), None: report only
TARGETS = {("svc", "float64"): (1.0, 0.7), ("svc32", "float32"): (0.5, 0.5), ("kmeans", "float64"): (1.0, 1.0),
           ("krr", "float64"): (0.5, 0.5), ("kpca", "float64"): (0.2, 0.2),
           ("nkr", "float32 vs FALKON"): (0.5, 0.5), ("nkr", "float64 vs FALKON"): (0.5, 0.5),
           ("nkr", "float64 vs sklearn"): None}
TITLES = {"svc": "KernelSVC float64 / LIBSVM", "svc32": "KernelSVC float32 / LIBSVM",
          "kmeans": "KMeans / scikit-learn KMeans (k = 50, same initial centres)",
          "krr": "KernelRidge / scikit-learn KernelRidge", "kpca": "KernelPCA top-10 / scikit-learn arpack",
          "nkr": "NystroemKernelRidge / FALKON and scikit-learn Nystroem + Ridge"}
REF_NAMES = {"libsvm": "LIBSVM (sklearn.svm.SVC)", "sklearn": "scikit-learn", "falkon32": "FALKON float32",
             "falkon64": "FALKON float64", "sk_nystroem": "sklearn Nystroem + Ridge (float64)"}


# -- plan -------------------------------------------------------------------------------------------
def n_centres(n: int, quick: bool) -> int:
    return min(200 if quick else (1000 if n <= 20000 else 5000), n // 2)


def cell_plan(group: str, ests, d: int, n: int, M: int):
    """Children (name -> (impl, child estimator, params)) and entries (est, variant, mercer child,
    reference child) of one cell."""
    children, entries = {}, []
    if group == "svc":
        p = dict(C=1.0, gamma="scale", tol=1e-3)
        if "svc" in ests:
            children["mercer64"] = ("mercer", "svc", {**p, "dtype": "float64"})
            entries.append(("svc", "float64", "mercer64", "libsvm"))
        children["libsvm"] = ("sklearn", "svc", p)
        if "svc32" in ests:
            children["mercer32"] = ("mercer", "svc", {**p, "dtype": "float32"})
            entries.append(("svc32", "float32", "mercer32", "libsvm"))
    elif group == "kmeans":
        p = dict(k=50, max_iter=300, tol=1e-4)
        children = {"mercer": ("mercer", "kmeans", p), "sklearn": ("sklearn", "kmeans", p)}
        entries = [("kmeans", "float64", "mercer", "sklearn")]
    elif group in ("krr", "kpca"):
        p = dict(alpha=1.0, gamma=1.0 / d) if group == "krr" else dict(n_components=10, gamma=1.0 / d)
        children = {"mercer": ("mercer", group, p), "sklearn": ("sklearn", group, p)}
        entries = [(group, "float64", "mercer", "sklearn")]
    elif group == "nkr":
        p = dict(alpha=LAMBDA * n, gamma=1.0 / d, M=M)
        children = {"mercer32": ("mercer", "nkr", {**p, "dtype": "float32"}),
                    "falkon32": ("falkon", "nkr", {**p, "dtype": "float32"}),
                    "mercer64": ("mercer", "nkr", {**p, "dtype": "float64"}),
                    "falkon64": ("falkon", "nkr", {**p, "dtype": "float64"}),
                    "sk_nystroem": ("sklearn", "nkr", {**p, "dtype": "float64"})}
        entries = [("nkr", "float32 vs FALKON", "mercer32", "falkon32"),
                   ("nkr", "float64 vs FALKON", "mercer64", "falkon64"),
                   ("nkr", "float64 vs sklearn", "mercer64", "sk_nystroem")]
    return children, entries


def static_skip(est: str, impl: str, d: int, n: int, M: int, falkon_why: str | None) -> str | None:
    """Why a child is not run (None: run it)."""
    if est in ("krr", "kpca") and n > EXACT_MAX_N:
        return f"exact method: the {n:,} x {n:,} float64 Gram matrix alone is {n * n * 8 / 2**30:.0f} GiB (run to 20k)"
    if est == "svc" and impl == "sklearn" and n >= 100000 and d >= 784:
        return ("LIBSVM at 100k x 784 takes far past the time limit (Fashion-MNIST 60k: ~25 min for mercer + "
                "LIBSVM on this machine)")
    if impl == "falkon" and falkon_why:
        return falkon_why
    if impl in ("sklearn", "falkon") and impl not in REFS:
        return "not in --refs"
    need, avail = estimated_bytes(est, impl, n, d, M), available_bytes()
    if avail and need > 0.85 * avail:
        return f"needs ~{need / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB available"
    return None


# -- children ---------------------------------------------------------------------------------------
def run_child(python: str, est: str, impl: str, params: dict, data: str | None, reps: int, timeout: float,
              workdir: Path, warm_s: float = 0.0) -> tuple[dict, np.ndarray | None]:
    """Run one child; returns its result (with ``status``: ok, timeout or error) and its test predictions."""
    out = Path(tempfile.mkdtemp(prefix=f"{est}_{impl}_", dir=workdir))
    spec = dict(est=est, impl=impl, params=params, data=data, reps=reps, deadline_s=max(1.0, timeout - 5), out=str(out),
                warm_s=warm_s)
    (out / "spec.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    with open(out / "log.txt", "w") as logf:
        proc = subprocess.Popen([python, str(CHILD), str(out / "spec.json")], stdout=logf, stderr=subprocess.STDOUT,
                                cwd=out, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
            status = "ok" if rc == 0 else "error"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group (start_new_session)
            rc = proc.wait()
            status = "timeout"
    res = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    res.update(status=status, rc=rc, wall_s=time.perf_counter() - t0, python=python)
    if status == "error":
        res["error"] = (out / "log.txt").read_text()[-1500:]
        log.warning("%s %s failed:\n%s", impl, est, res["error"])
    pred = np.load(out / "pred.npy") if (out / "pred.npy").exists() else None
    shutil.rmtree(out, ignore_errors=True)
    return res, pred


def falkon_status(python: str, workdir: Path) -> tuple[str | None, dict | None]:
    """(why FALKON cells are skipped or None, the penalty-convention check)."""
    if "falkon" not in REFS:
        return "not in --refs", None
    if not python:
        return "no FALKON interpreter (set FALKON_PYTHON or --falkon-python)", None
    if not Path(python).exists():
        return f"FALKON interpreter {python} absent", None
    try:
        r = subprocess.run([python, "-c", "import falkon"], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "import falkon timed out", None
    if r.returncode != 0:
        return f"import falkon failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}", None
    res, _ = run_child(python, "falkon_check", "falkon", {}, None, 0, 300, workdir)
    check = res.get("check")
    if check is None:
        return f"FALKON check failed: {res.get('error', res.get('status'))[-300:]}", None
    ok = check["rel_pred_diff_alpha_eq_lambda_n"] < 1e-4 < check["rel_pred_diff_alpha_eq_lambda"] and \
        check["kernel_max_abs_err"] < 1e-10
    check["convention_confirmed"] = bool(ok)
    log.info("FALKON penalty check: %s", check)
    if not ok:
        return f"FALKON penalty/kernel convention not confirmed: {check}", check
    return None, check


# -- comparisons ------------------------------------------------------------------------------------
def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else float("inf")


def compare(est: str, m: dict, r: dict, pm, pr, at_least: bool = False) -> tuple[dict, bool]:
    """Result-equality metrics of mercer (m) against the reference (r), and whether they pass
    (``at_least``: a test error at most the reference's (1 + 0.5 %), for a reference that fits
    another model: FALKON has no intercept)."""
    if est in ("svc", "svc32"):
        q = dict(n_sv=[m["n_sv"], r["n_sv"]], n_sv_rel_diff=_rel(m["n_sv"], r["n_sv"]),
                 accuracy=[m["accuracy"], r["accuracy"]], accuracy_diff=abs(m["accuracy"] - r["accuracy"]))
        if pm is not None and pr is not None:
            q["test_prediction_agreement"] = float(np.mean(pm == pr))
        return q, q["n_sv_rel_diff"] <= EQUAL_SV and q["accuracy_diff"] <= EQUAL_ACC
    if est == "kmeans":
        q = dict(inertia=[m["inertia"], r["inertia"]], inertia_rel_diff=_rel(m["inertia"], r["inertia"]),
                 n_iter=[m["n_iter"], r["n_iter"]])
        if pm is not None and pr is not None:
            q["test_label_agreement"] = float(np.mean(pm == pr))
        return q, q["inertia_rel_diff"] <= EQUAL_INERTIA
    if est == "kpca":
        em, er = np.asarray(m["eigenvalues"]), np.asarray(r["eigenvalues"])
        q = dict(eigenvalues_rel_diff=float(np.max(np.abs(em - er) / np.abs(er))), top_eigenvalue=float(er[0]))
        return q, q["eigenvalues_rel_diff"] <= EQUAL_EIG
    q = dict(rmse=[m["rmse"], r["rmse"]], rmse_rel_diff=_rel(m["rmse"], r["rmse"]))  # krr, nkr
    if pm is not None and pr is not None:
        q["prediction_rel_diff"] = float(np.linalg.norm(pm.ravel() - pr.ravel()) / np.linalg.norm(pr.ravel()))
    if est == "nkr":
        q.update(mercer_solver=m.get("solver"), mercer_iterations=m.get("n_iter"))
        if "same_centres" in r:  # scikit-learn drew the centres that mercer and FALKON were given
            q["same_centres"] = r["same_centres"]
    if at_least:
        q["criterion"] = "mercer's test RMSE <= reference's x 1.005"
        return q, m["rmse"] <= r["rmse"] * (1 + EQUAL_RMSE)
    return q, q["rmse_rel_diff"] <= EQUAL_RMSE


def make_entry(est, variant, d, n, meta, m, r, pm, pr, ref_name, timeout) -> dict:
    e = dict(estimator=est, variant=variant, d=d, n=n, data=meta.get("data"), data_note=meta.get("note", ""),
             reference=REF_NAMES.get(ref_name, ref_name), target=TARGETS.get((est, variant)), mercer=m, ref=r)
    if m.get("status") == "skipped" or r.get("status") == "skipped":
        e.update(status="skipped", reason=r.get("reason") or m.get("reason"))
        return e
    ok_m, ok_r = "cold_s" in m, "cold_s" in r
    if ok_m and ok_r:
        e["ratio_cold"] = m["cold_s"] / r["cold_s"]
        if "warm_s" in m and "warm_s" in r:
            e["ratio_warm"] = m["warm_s"] / r["warm_s"]
            e["ratio_warm_cpu"] = min(m["warm_fits_cpu_s"]) / min(r["warm_fits_cpu_s"])
        if "predict_s" in m and "predict_s" in r:
            e["ratio_predict"] = m["predict_s"] / r["predict_s"]
        e["equality"], e["equal"] = compare(est, m, r, pm, pr, at_least=ref_name.startswith("falkon"))
    statuses = (m.get("status"), r.get("status"))
    if "error" in statuses:
        e["status"] = "error"
        e["reason"] = (m if m.get("status") == "error" else r).get("error", "")[-300:]
    elif "timeout" in statuses:
        e["status"] = "timeout"
        who = "mercer" if m.get("status") == "timeout" else "reference"
        e["reason"] = f"{who} past the {timeout:.0f} s limit" + ("" if ok_m and ok_r else " before its first fit ended")
        if ok_m and not ok_r and who == "reference":  # the reference ran longer than the limit: an upper bound
            e["ratio_cold_max"] = m["cold_s"] / timeout
            e["ratio_warm_max"] = m.get("warm_s", m["cold_s"]) / timeout
        elif ok_r and not ok_m and who == "mercer":  # mercer ran longer than the limit: a lower bound
            e["ratio_cold_min"] = timeout / r["cold_s"]
            e["ratio_warm_min"] = timeout / r.get("warm_s", r["cold_s"])
    else:
        e["status"] = "ok" if ok_m and ok_r else "error"
    return e


# -- the run ----------------------------------------------------------------------------------------
def run_cell(group, ests, d, n, meta, args, falkon_why, workdir, flip) -> list[dict]:
    M = n_centres(n, args.quick)
    children, entries = cell_plan(group, ests, d, n, M)
    skip = {name: static_skip(est, impl, d, n, M, falkon_why) for name, (impl, est, _) in children.items()}
    # a mercer child runs only when one of its references runs
    for name in children:
        if children[name][0] == "mercer" and skip[name] is None:
            refs = [ref for _, _, mc, ref in entries if mc == name]
            if all(skip[ref] for ref in refs):
                skip[name] = skip[refs[0]]
    order = list(children)[::-1] if flip else list(children)
    load_before = load_average()
    results, preds = {}, {}
    for name in order:
        impl, est, params = children[name]
        if skip[name]:
            results[name], preds[name] = {"status": "skipped", "reason": skip[name]}, None
            continue
        python = args.falkon_python if impl == "falkon" else sys.executable
        log.info("cell %s d=%d n=%d: %s (%s) ...", group, d, n, name, impl)
        results[name], preds[name] = run_child(python, est, impl, params, meta["folder"], args.reps, args.timeout,
                                               workdir, args.warm_s)
        r = results[name]
        log.info("  %s: %s cold %.2f s, warm %s s, peak %.2f GiB", name, r["status"], r.get("cold_s", float("nan")),
                 r.get("warm_s", "-"), r.get("peak_rss_bytes", 0) / 2**30)
    load_after = load_average()
    code = git_state()  # per cell: the measured code may change during a long run
    out = []
    for est, variant, mc, ref in entries:
        e = make_entry(est, variant, d, n, meta, results[mc], results[ref], preds[mc], preds[ref], ref, args.timeout)
        e.update(load_before=load_before, load_after=load_after, order=[o for o in order if not skip[o]],
                 when=time.strftime("%Y-%m-%d %H:%M:%S"), git=code, M=M if group == "nkr" else None)
        out.append(e)
        log.info("=> %s %s d=%d n=%d: %s cold %s warm %s equal %s", est, variant, d, n, e["status"],
                 _fmt(e.get("ratio_cold")), _fmt(e.get("ratio_warm")), e.get("equal"))
    return out


def prime(groups, ests, args, falkon_why, workdir, n: int = 600) -> dict:
    """Run every child of the run once, untimed, on a small set: numba's on-disk cache then holds the
    compiled loops (as after a user's first call) and the libraries' files are in the page cache, so
    the first measured cell pays what every later one pays."""
    d = args.d[0]
    meta = prepare(d, n, uci_root=args.uci_root, fmnist_root=args.fmnist_root)
    release_sources()
    done = {}
    for group in groups:
        children, _ = cell_plan(group, ests, d, n, n_centres(n, args.quick))
        for name, (impl, est, params) in children.items():
            if impl == "falkon" and falkon_why:
                continue
            python = args.falkon_python if impl == "falkon" else sys.executable
            res, _ = run_child(python, est, impl, params, meta["folder"], 0, 300, workdir)
            done[f"{group}/{name}"] = res["status"]
    log.info("primed (d=%d, n=%d, untimed): %s", d, n, done)
    return done


def key(e: dict) -> str:
    return f"{e['estimator']}|{e['d']}|{e['n']}|{e['variant']}"


def load_results(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"runs": [], "cells": {}}


def run(args) -> None:
    out_path = Path(args.out)
    ests = list(dict.fromkeys(args.estimators))
    groups = list(dict.fromkeys("svc" if e in ("svc", "svc32") else e for e in ests))
    CACHE.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run_", dir=CACHE))
    run_info = dict(started=time.strftime("%Y-%m-%d %H:%M:%S"), argv=sys.argv[1:], command=command_line(), machine=machine_info(),
                    git=git_state(), load_start=load_average(), reps=args.reps, timeout_s=args.timeout,
                    warm_s=args.warm_s)
    falkon_why, check = (None, None)
    if "nkr" in groups:
        falkon_why, check = falkon_status(args.falkon_python, workdir)
        run_info.update(falkon_python=args.falkon_python, falkon_skipped=falkon_why, falkon_penalty_check=check)
        if falkon_why:
            log.warning("FALKON cells skipped: %s", falkon_why)
    # every data set first (d outer: each real source is read once), then the cells
    metas = {}
    for d in args.d:
        for n in args.n:
            metas[d, n] = prepare(d, n, uci_root=args.uci_root, fmnist_root=args.fmnist_root)
    release_sources()  # the children load the .npy files; the parent need not hold the sets
    if not args.no_prime:
        run_info["primed"] = prime(groups, ests, args, falkon_why, workdir)
    flip = False
    try:
        for n in args.n:
            for d in args.d:
                for group in groups:
                    entries = run_cell(group, ests, d, n, metas[d, n], args, falkon_why, workdir, flip)
                    flip = not flip
                    res = load_results(out_path)  # merge (another invocation may have written meanwhile)
                    for e in entries:
                        res["cells"][key(e)] = e
                    write_json(out_path, res)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        res = load_results(out_path)
        run_info.update(ended=time.strftime("%Y-%m-%d %H:%M:%S"), load_end=load_average())
        res["runs"].append(run_info)
        write_json(out_path, res)


# -- output -----------------------------------------------------------------------------------------
def _fmt(x, digits=2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}" if x < 10 else f"{x:.1f}"


def _short(data: str | None) -> str:
    if not data:
        return ""
    return (data.replace("fashion-mnist", "FMNIST").replace("keggdirected", "kegg").replace("synthetic", "synth"))


def _cell_text(e: dict | None, which: str) -> str:
    """Text of one table cell: the ratio, or why there is none."""
    if e is None:
        return ""
    r = e.get(f"ratio_{which}")
    if r is not None:
        return _fmt(r) + ("" if e.get("equal", True) else " ≠")
    if e.get(f"ratio_{which}_max") is not None:
        return f"< {_fmt(e[f'ratio_{which}_max'])}"
    if e.get(f"ratio_{which}_min") is not None:
        return f"> {_fmt(e[f'ratio_{which}_min'])}"
    return {"skipped": "skip", "timeout": "timeout", "error": "error"}.get(e.get("status"), "-")


def _floor_text(e: dict | None) -> str:
    """(mercer cold - mercer warm) / reference cold of a cell with both times, else empty."""
    m, r = (e or {}).get("mercer", {}), (e or {}).get("ref", {})
    if not all(k in m for k in ("cold_s", "warm_s")) or "cold_s" not in r:
        return ""
    return _fmt((m["cold_s"] - m["warm_s"]) / r["cold_s"])


def variants(cells: dict) -> list[tuple[str, str]]:
    seen = {(e["estimator"], e["variant"]) for e in cells.values()}
    return [v for v in TARGETS if v in seen] + sorted(seen - set(TARGETS))


def tables(res: dict) -> str:
    cells = res["cells"]
    lines = []
    for est, variant in variants(cells):
        mine = {(e["d"], e["n"]): e for e in cells.values() if (e["estimator"], e["variant"]) == (est, variant)}
        ds, ns = sorted({d for d, _ in mine}), sorted({n for _, n in mine})
        tgt = TARGETS.get((est, variant))
        first = next(iter(mine.values()))
        head = f"### {est} ({variant}): mercer / {first['reference']}, cold / warm"
        head += f" (target: cold <= {tgt[0]}, warm <= {tgt[1]})" if tgt else " (report only)"
        rows = [{"n \\ d": f"{n:,}", **{str(d): (f"{_cell_text(mine.get((d, n)), 'cold')} / "
                                                  f"{_cell_text(mine.get((d, n)), 'warm')}"
                                                  if (d, n) in mine else "") for d in ds}} for n in ns]
        lines += [head, "", markdown_table(rows), ""]
        if tgt:
            floor = [{"n \\ d": f"{n:,}", **{str(d): _floor_text(mine.get((d, n))) for d in ds}} for n in ns]
            lines += [f"cold floor of {est} ({variant}): (mercer cold - mercer warm) / reference cold, the cold "
                      f"ratio a fit of no time would give (imports, numba's cache load, first-call costs); "
                      f"above {tgt[0]} no faster fit meets the cold target", "", markdown_table(floor), ""]
    lines += ["≠: results differ beyond the equality threshold (see the details); < x (> x): the reference "
              "(mercer) passed the time limit, a bound; skip / timeout / error: see the reason in the details.", ""]
    data = {(e["d"], e["n"]): e["data"] + (f" ({e['data_note'].split(' (')[0]})" if e.get("data_note") else "")
            for e in cells.values()}
    ds, ns = sorted({d for d, _ in data}), sorted({n for _, n in data})
    lines += ["### Data of each cell", "", markdown_table([{"n \\ d": f"{n:,}", **{str(d): data.get((d, n), "")
                                                                                   for d in ds}} for n in ns]), ""]
    lines += ["### Details", ""]
    for est, variant in variants(cells):
        rows = []
        for e in sorted((e for e in cells.values() if (e["estimator"], e["variant"]) == (est, variant)),
                        key=lambda e: (e["n"], e["d"])):
            m, r = e.get("mercer", {}), e.get("ref", {})
            q = e.get("equality", {})
            eq = "; ".join(f"{k} {_eqfmt(v)}" for k, v in q.items())
            rows.append({"d": e["d"], "n": e["n"], "data": _short(e["data"]), "status": e["status"],
                         "mercer cold / warm (s)": f"{_fmt(m.get('cold_s'))} / {_fmt(m.get('warm_s'))}",
                         "ref cold / warm (s)": f"{_fmt(r.get('cold_s'))} / {_fmt(r.get('warm_s'))}",
                         "ratio cold / warm / warm CPU / predict":
                             " / ".join(_fmt(e.get(f"ratio_{w}")) for w in ("cold", "warm", "warm_cpu", "predict")),
                         "peak RSS mercer / ref (GiB)": f"{_fmt(m.get('peak_rss_bytes', 0) / 2**30)} / "
                                                        f"{_fmt(r.get('peak_rss_bytes', 0) / 2**30)}",
                         "equality": (("equal: " if e.get("equal") else "NOT equal: ") + eq) if q else
                         e.get("reason", "")[:160],
                         "load before / after": f"{e.get('load_before', '')} / {e.get('load_after', '')}"})
        lines += [f"#### {est} ({variant})", "", markdown_table(rows), ""]
    runs = res.get("runs", [])
    if runs:
        lines += ["### Runs", ""] + [f"- {r.get('started')} -> {r.get('ended', '?')}: `{' '.join(r.get('argv', []))}`, "
                                     f"load {r.get('load_start')} -> {r.get('load_end', '?')}, git {r.get('git')}; "
                                     f"{r.get('machine')}" for r in runs]
        checks = [r["falkon_penalty_check"] for r in runs if r.get("falkon_penalty_check")]
        if checks:
            lines += ["", f"FALKON penalty check (last run): {checks[-1]}"]
    return "\n".join(lines) + "\n"


def _eqfmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list):
        return "/".join(_eqfmt(x) for x in v)
    return str(v)


def heat_maps(res: dict, stem: Path) -> list[Path]:
    """One PNG per estimator: rows its variants, columns cold | warm; d on x, n on y."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap, TwoSlopeNorm

    cmap = ListedColormap(np.vstack([plt.get_cmap("Greens")(np.linspace(0.6, 0.15, 128)),
                                     plt.get_cmap("Reds")(np.linspace(0.15, 0.6, 128))]))
    cmap.set_bad("lightgrey")
    lim = math.log(4.0)
    norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
    cells = res["cells"]
    paths = []
    for est in dict.fromkeys(v[0] for v in variants(cells)):
        vs = [v for v in variants(cells) if v[0] == est]
        mine = [e for e in cells.values() if e["estimator"] == est]
        ds, ns = sorted({e["d"] for e in mine}), sorted({e["n"] for e in mine})
        size = (max(10.0, 2.0 * len(ds) + 2.5), max(3.0, (0.9 * len(ns) + 1.2) * len(vs) + 0.6))
        fig, axes = plt.subplots(len(vs), 2, figsize=size, squeeze=False)
        for row, (_, variant) in enumerate(vs):
            tgt = TARGETS.get((est, variant)) or (1.0, 1.0)
            grid = {(e["d"], e["n"]): e for e in mine if e["variant"] == variant}
            for col, which in enumerate(("cold", "warm")):
                ax = axes[row, col]
                Z = np.full((len(ns), len(ds)), np.nan)
                for (d, n), e in grid.items():
                    r = e.get(f"ratio_{which}", e.get(f"ratio_{which}_max", e.get(f"ratio_{which}_min")))
                    if r is not None:
                        Z[ns.index(n), ds.index(d)] = math.log(r / tgt[col]) - 1e-9  # at the target: green
                ax.imshow(np.ma.masked_invalid(Z), cmap=cmap, norm=norm, aspect="auto")
                for (d, n), e in grid.items():
                    txt = _cell_text(e, which) + "\n" + _short(e.get("data")).replace(" PCA-", "\nPCA-")
                    ax.text(ds.index(d), ns.index(n), txt, ha="center", va="center", fontsize=7)
                ax.set_xticks(range(len(ds)), [str(d) for d in ds])
                ax.set_yticks(range(len(ns)), [f"{n:,}" for n in ns])
                ax.set_xlabel("d (features)")
                ax.set_ylabel("n (training rows)")
                tt = f"target <= {tgt[col]}" if TARGETS.get((est, variant)) else "report only (colour: vs 1.0)"
                ax.set_title(f"{variant}: {which} ({tt})", fontsize=9)
        fig.suptitle(f"{TITLES.get(est, est)}: time ratio mercer / reference (green: at or under target)",
                     fontsize=10)
        fig.tight_layout()
        path = stem.with_name(f"{stem.name}_{est}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def render(out_path: Path) -> None:
    res = load_results(out_path)
    if not res["cells"]:
        print(f"{out_path}: no cells yet")
        return
    stem = out_path.with_suffix("")
    pngs = heat_maps(res, stem)
    commands = "\n".join(f"- `{r['command']}`" for r in res["runs"] if r.get("command"))
    md = (f"# Speed over data shapes: mercer / reference (`{out_path.name}`)\n\n"
          + (f"Commands (from the repository root) of the runs merged here:\n\n{commands}\n\n" if commands else "")
          + tables(res))
    md_path = stem.with_suffix(".md")
    md_path.write_text(md)
    print(md)
    print("wrote " + ", ".join(str(p) for p in [out_path, md_path, *pngs]))


def main(argv=None) -> None:
    global REFS
    p = suite_parser("shapes", __doc__.split("\n")[0], refs=("sklearn", "falkon"), data=("uci", "fashion"),
                     quick=f"n {QUICK_N}, d {QUICK_D}, M = 200, 1 warm fit")
    p.add_argument("--estimators", nargs="+", default=list(ESTIMATORS), choices=ESTIMATORS)
    p.add_argument("--d", type=int, nargs="+", default=None, help=f"feature counts (default {D_GRID})")
    p.add_argument("--n", type=int, nargs="+", default=None, help=f"training rows (default {N_GRID})")
    p.add_argument("--reps", type=int, default=None, help="warm fits after the cold one (default 2; --quick 1)")
    p.add_argument("--warm-s", type=float, default=0.0,
                   help="refit short fits until this many seconds of refits were spent (at most 20 refits, both "
                        "sides alike; default 0: --reps refits)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per child process, i.e. per implementation in a cell (default 600); warm refits "
                        "that would pass it are not started")
    p.add_argument("--no-prime", action="store_true",
                   help="skip the untimed first run of every child (numba's cache, page cache) before the grid")
    p.add_argument("--plot-only", action="store_true", help="only regenerate the tables and heat maps from --out")
    args = parse_suite_args(p, argv)
    REFS = args.refs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.uci_root = str(args.uci_dir) if args.uci_dir else None
    args.fmnist_root = args.fashion_mnist_dir
    args.out = str(result_paths(args)[0])
    args.d = args.d or list(QUICK_D if args.quick else D_GRID)
    args.n = args.n or list(QUICK_N if args.quick else N_GRID)
    args.reps = args.reps if args.reps is not None else (1 if args.quick else 2)
    if not args.plot_only:
        run(args)
    render(Path(args.out))


if __name__ == "__main__":
    main()
