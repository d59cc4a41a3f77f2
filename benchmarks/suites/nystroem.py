"""Nyström kernel ridge and kernel approximations: approximation error, UCI regression, Fashion-MNIST,
the large-n Nyström solver and the number of centres -- mercer next to scikit-learn in the same run,
each fit in a fresh process.

    .venv/bin/python benchmarks/suites/nystroem.py --approx        # approximation error vs m (kin40k)
    .venv/bin/python benchmarks/suites/nystroem.py --uci           # 7 UCI sets, split 0
    .venv/bin/python benchmarks/suites/nystroem.py --fmnist        # Fashion-MNIST
    .venv/bin/python benchmarks/suites/nystroem.py --large         # n = 20k/100k (M = 5000), 1M (M = 10000)
    .venv/bin/python benchmarks/suites/nystroem.py --msweep        # centres needed to reach the exact RMSE
    add --quick for a small version of any of them (no part: all of them).

UCI data: ``--uci-dir`` / ``$MERCER_UCI_DIR``; Fashion-MNIST: ``--fashion-mnist-dir`` /
``$MERCER_FASHION_MNIST_DIR``; parts whose data is absent are skipped. Results:
``benchmarks/results/nystroem/latest.{json,md}``, one section per part: a run replaces the parts it
ran and keeps the others' latest results (``--quick``: ``quick.*``).
"""

from __future__ import annotations

import logging
import math
import time
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (command_line, fashion_mnist_dir, machine_info, markdown_table, parse_suite_args,  # noqa: E402
                     previous_parts, require_uci, run_isolated, suite_parser, synthetic, uci_dir, write_results)

SETS = ["pol", "elevators", "bike", "kin40k", "protein", "keggdirected", "keggundirected"]
log = logging.getLogger("nystroem")
REFS: tuple[str, ...] = ("sklearn",)


# -- data -----------------------------------------------------------------------------------------
def load_standardized(name: str):
    from mercer.datasets import load_uci

    Xtr, ytr, Xte, yte = load_uci(name, uci_dir(), split=0)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    ym, ys = ytr.mean(), ytr.std()
    return ((Xtr - mu) / sd, (ytr - ym) / ys, (Xte - mu) / sd, (yte - ym) / ys)


def rmse(p, y):
    return float(np.sqrt(np.mean((np.asarray(p, dtype=np.float64).ravel() - y) ** 2)))


# -- fits (module level: they run in fresh processes) -------------------------------------------
def fit_mercer_exact(X, y, Xte, yte, gamma, alpha):
    from mercer.models import KernelRidge

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    m = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(X, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "rmse": rmse(m.predict(Xte), yte)}


def fit_sklearn_exact(X, y, Xte, yte, gamma, alpha):
    from sklearn.kernel_ridge import KernelRidge

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    m = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(X, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "rmse": rmse(m.predict(Xte), yte)}


def fit_mercer_nystroem(X, y, Xte, yte, gamma, alpha, M, tol=1e-3, dtype="float32", seed=0, centers="uniform"):
    from mercer.models import NystroemKernelRidge

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    m = NystroemKernelRidge(alpha=alpha, kernel="rbf", gamma=gamma, n_centers=M, tol=tol, max_iter=200,
                            dtype=dtype, random_state=seed, centers=centers).fit(X, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "rmse": rmse(m.predict(Xte), yte), "iterations": int(m.n_iter_.max()),
            "residual": float(m.residual_.max()), "fit_s": m.fit_time_}


def fit_mercer_rff(X, y, Xte, yte, gamma, alpha, D, seed=0):
    from mercer.models import RandomFeatureRidge

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    m = RandomFeatureRidge(alpha=alpha, kernel="rbf", gamma=gamma, n_components=D // 2, dtype="float32",
                           random_state=seed).fit(X, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "rmse": rmse(m.predict(Xte), yte)}


def fit_sklearn_nystroem(X, y, Xte, yte, gamma, alpha, M, seed=0):
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    ny = Nystroem(kernel="rbf", gamma=gamma, n_components=M, random_state=seed)
    Z = ny.fit_transform(X)
    r = Ridge(alpha=alpha, fit_intercept=False, solver="cholesky").fit(Z, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "rmse": rmse(r.predict(ny.transform(Xte)), yte)}


def fit_mercer_classifier(X, y, Xte, yte, gamma, alpha, M, seed=0):
    from mercer.models import NystroemKernelRidgeClassifier

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    m = NystroemKernelRidgeClassifier(alpha=alpha, kernel="rbf", gamma=gamma, n_centers=M, tol=1e-4, max_iter=200,
                                      random_state=seed).fit(X, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "accuracy": float((m.predict(Xte) == yte).mean()), "iterations": int(m.n_iter_.max())}


def fit_sklearn_classifier(X, y, Xte, yte, gamma, alpha, M, seed=0):
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import RidgeClassifier

    t0 = time.perf_counter()  # after the imports: torch/numba imports are not the method's cost
    ny = Nystroem(kernel="rbf", gamma=gamma, n_components=M, random_state=seed)
    Z = ny.fit_transform(X)
    r = RidgeClassifier(alpha=alpha, solver="cholesky").fit(Z, y)
    return {"fit_predict_s": time.perf_counter() - t0,
            "accuracy": float((r.predict(ny.transform(Xte)) == yte).mean())}


def timed(label, fn, *args, **kwargs):
    if label.startswith("sklearn") and "sklearn" not in REFS:
        return {"method": label, "skipped": "not in --refs"}
    res, secs, peak = run_isolated(fn, *args, **kwargs)
    row = {"method": label, "time_s": secs, "peak_rss_GiB": peak / 2**30, **res}
    log.info("%s", row)
    return row


# -- parts ----------------------------------------------------------------------------------------
def part_approx(quick: bool):
    """Max and mean |k_m(x, y) - k(x, y)| on held-out pairs, as m grows."""
    import torch

    from mercer.approx import IncompleteCholesky, Nystroem, RandomFourierFeatures
    from mercer.kernels import RBF

    if require_uci("--approx (kin40k)") is None:
        return [], {"skipped": "UCI data absent (MERCER_UCI_DIR)"}
    Xtr, _, Xte, _ = load_standardized("kin40k")
    rng = np.random.default_rng(0)
    n_fit = 2000 if quick else 5000
    A = Xtr[rng.choice(len(Xtr), n_fit, replace=False)]
    B = Xte[:300 if quick else 1000]
    k = RBF(gamma=1.0 / (2 * A.shape[1]))
    K = k(B).numpy()
    ms = [16, 128] if quick else [16, 64, 256, 1024, 4096]
    seeds = 1 if quick else 3
    rows = []

    def err(Z):
        E = np.abs(Z @ Z.T - K)
        return float(E.max()), float(E.mean())

    rff_mean = []
    for m in ms:
        for name, est in [("RFF cos/sin (2m features)", lambda s: RandomFourierFeatures(k, m, random_state=s)),
                          ("RFF phase (m features)", lambda s: RandomFourierFeatures(k, m, variant="phase",
                                                                                      random_state=s)),
                          ("orthogonal RFF (2m)", lambda s: RandomFourierFeatures(k, m, orthogonal=True,
                                                                                   random_state=s))]:
            e = [err(est(s).fit(A).transform(B)) for s in range(seeds)]
            rows.append({"method": name, "m": m, "max_err": np.mean([a for a, _ in e]),
                         "mean_err": np.mean([b for _, b in e])})
            if name.startswith("RFF cos"):
                rff_mean.append(rows[-1]["mean_err"])
        if m <= 1024:
            for rule in ["uniform", "kmeans++", "kmeans", "leverage", "greedy"]:
                if rule == "greedy" and m > 256 and quick:
                    continue
                try:
                    Z = Nystroem(k, m, landmarks=rule, random_state=0).fit(A).transform(B)
                except ImportError as exc:  # the k-means rule needs mercer.models.cluster
                    log.warning("nystroem %s skipped: %s", rule, exc)
                    continue
                mx, mn = err(Z)
                rows.append({"method": f"Nystroem {rule}", "m": m, "max_err": mx, "mean_err": mn})
            ic = IncompleteCholesky(k, m).fit(A)
            mx, mn = err(ic.transform(B))
            rows.append({"method": "incomplete Cholesky", "m": m, "max_err": mx, "mean_err": mn})
    slope = float(np.polyfit(np.log(ms), np.log(rff_mean), 1)[0])
    del torch
    return rows, {"rff_mean_error_slope": slope, "n_fit": n_fit, "n_eval_points": len(B),
                  "kernel": repr(k), "data": "kin40k split 0, standardized"}


EXACT_N = 10_000
EXACT_20K = "kin40k"


def part_uci(quick: bool):
    rows = []
    sets = SETS[:1] if quick else SETS
    if require_uci("--uci") is None:
        return [], {"skipped": "UCI data absent (MERCER_UCI_DIR)"}
    for name in sets:
        Xtr, ytr, Xte, yte = load_standardized(name)
        Xtr32, Xte32 = Xtr.astype(np.float32), Xte.astype(np.float32)
        n_full = len(Xtr) if not quick else 5000
        exact_sizes = [min(len(Xtr), 2000 if quick else EXACT_N)]
        if not quick and name == EXACT_20K:
            exact_sizes.append(min(len(Xtr), 20_000))
        d = Xtr.shape[1]
        gamma = 1.0 / (2.0 * d)  # bandwidth sigma = sqrt(d) on standardized inputs
        for n, full in [(m, False) for m in exact_sizes] + [(n_full, True)]:
            X, y = Xtr[:n], ytr[:n]
            alpha = 1e-6 * n
            M = min(n, int(5 * math.sqrt(n)))
            base = {"data": name, "n": n, "d": d, "M": M, "gamma": gamma, "alpha": alpha}
            if not full:
                rows.append({**base, **timed("mercer KernelRidge (exact, f64)", fit_mercer_exact, X, y, Xte, yte,
                                             gamma, alpha)})
                rows.append({**base, **timed("sklearn KernelRidge (exact)", fit_sklearn_exact, X, y, Xte, yte,
                                             gamma, alpha)})
            rows.append({**base, **timed("mercer NystroemKernelRidge (f32)", fit_mercer_nystroem, Xtr32[:n], y,
                                         Xte32, yte, gamma, alpha, M)})
            rows.append({**base, **timed("sklearn Nystroem + Ridge", fit_sklearn_nystroem, X, y, Xte, yte, gamma,
                                         alpha, M)})
            if full:
                rows.append({**base, **timed("mercer RandomFeatureRidge (D = M, f32)", fit_mercer_rff, Xtr32[:n], y,
                                             Xte32, yte, gamma, alpha, M)})
    return rows, {"lambda": "alpha = 1e-6 * n (FALKON lambda = 1e-6)", "gamma": "1 / (2 d), standardized inputs",
                  "M": "5 sqrt(n)", "exact": f"first {EXACT_N} training rows (and 20,000 for {EXACT_20K})",
                  "nystroem tol": "1e-3 (default)"}


def part_fmnist(quick: bool):
    from mercer.datasets import load_fashion_mnist

    try:
        Xtr, ytr, Xte, yte = load_fashion_mnist(*[d for d in [fashion_mnist_dir()] if d])
    except (FileNotFoundError, OSError) as exc:
        print(f"skipped: --fmnist: Fashion-MNIST not found ({exc})", file=sys.stderr)
        return [], {"skipped": f"Fashion-MNIST not installed ({exc}); apt-get install dataset-fashion-mnist"}
    Xtr = (Xtr.reshape(len(Xtr), -1) / 255.0).astype(np.float32)
    Xte = (Xte.reshape(len(Xte), -1) / 255.0).astype(np.float32)
    if quick:
        Xtr, ytr = Xtr[:5000], ytr[:5000]
    gamma = 1.0 / (2 * 784 * float(Xtr.var()))
    rows = []
    for M in ([500] if quick else [1000, 5000]):
        alpha = 1e-6 * len(Xtr)
        base = {"n": len(Xtr), "M": M, "gamma": gamma, "alpha": alpha}
        rows.append({**base, **timed("mercer NystroemKernelRidgeClassifier (f32)", fit_mercer_classifier, Xtr, ytr,
                                     Xte, yte, gamma, alpha, M)})
        rows.append({**base, **timed("sklearn Nystroem + RidgeClassifier", fit_sklearn_classifier,
                                     Xtr.astype(np.float64), ytr, Xte.astype(np.float64), yte, gamma, alpha, M)})
    return rows, {"data": "Fashion-MNIST 60k/10k, pixels / 255"}


LARGE_CASES = "20000:5000:sk,100000:5000:sk,1000000:10000"
MSWEEP_SETS: list[str] = []
TOL = 1e-3


def part_large(quick: bool):
    d = 28
    spec = "5000:500:sk" if quick else LARGE_CASES
    cases = [(int(c.split(":")[0]), int(c.split(":")[1]), c.endswith(":sk")) for c in spec.split(",")]
    rows = []
    Xte, yte = synthetic(10_000, d, seed=99)
    for n, M, with_sklearn in cases:
        X, y = synthetic(n, d, seed=1)
        gamma = 1.0 / (2.0 * d)
        alpha = 1e-6 * n
        base = {"n": n, "d": d, "M": M}
        rows.append({**base, **timed(f"mercer NystroemKernelRidge (f32, tol {TOL:g})", fit_mercer_nystroem, X, y, Xte,
                                     yte, gamma, alpha, M, tol=TOL)})
        if with_sklearn:
            rows.append({**base, **timed("sklearn Nystroem + Ridge", fit_sklearn_nystroem, X.astype(np.float64), y,
                                         Xte.astype(np.float64), yte, gamma, alpha, M)})
        del X, y
    return rows, {"data": "synthetic: X ~ N(0, I_28), y = sin(2 p1) + 0.5 cos(p2) p3 + 0.1 noise",
                  "FALKON 0.9.0 anchor (issue 3, same machine kind, f64, d = 24)":
                  "n=20k M=5k 15 s; n=100k M=5k 61 s; n=1M M=5k 433 s"}


def part_msweep(quick: bool):
    """How many centres Nyström ridge needs to come within 1 % of the exact test RMSE (same n,
    gamma, alpha as --uci): M = c sqrt(n) for c = 5, 10, 20, 40, uniform and leverage centres."""
    sets = [("elevators", 2000)] if quick else [("pol", EXACT_N), ("elevators", EXACT_N), ("bike", EXACT_N),
                                                 ("kin40k", 20_000)]
    if MSWEEP_SETS:
        sets = [(name, n) for name, n in sets if name in MSWEEP_SETS]
    rows = []
    if require_uci("--msweep") is None:
        return [], {"skipped": "UCI data absent (MERCER_UCI_DIR)"}
    for name, n in sets:
        Xtr, ytr, Xte, yte = load_standardized(name)
        X, y = Xtr[:n], ytr[:n]
        n, d = X.shape
        gamma, alpha = 1.0 / (2.0 * d), 1e-6 * n
        exact = timed("mercer KernelRidge (exact, f64)", fit_mercer_exact, X, y, Xte, yte, gamma, alpha)
        rows.append({"data": name, "n": n, "M": n, "centers": "exact", "rmse": exact["rmse"], "ratio": 1.0,
                     "fit_predict_s": exact.get("fit_predict_s")})
        for c in ([5] if quick else [5, 10, 20, 40]):
            M = min(n // 2, int(c * math.sqrt(n)))
            for centers in ("uniform", "leverage"):
                r = timed(f"mercer NystroemKernelRidge ({centers})", fit_mercer_nystroem, X.astype(np.float32), y,
                          Xte.astype(np.float32), yte, gamma, alpha, M, centers=centers)
                rows.append({"data": name, "n": n, "M": M, "centers": centers, "rmse": r["rmse"],
                             "ratio": r["rmse"] / exact["rmse"], "fit_predict_s": r["fit_predict_s"], "iterations": r["iterations"]})
    return rows, {"setting": "split 0, standardised, RBF gamma = 1/(2d), alpha = 1e-6 n (as --uci)",
                  "ratio": "Nystroem test RMSE / exact KRR test RMSE at the same n"}


PARTS = {"approx": part_approx, "uci": part_uci, "fmnist": part_fmnist, "large": part_large, "msweep": part_msweep}


#: mercer's row -> the scikit-learn row it is compared with (same data, n and M)
PAIRS = {"mercer KernelRidge (exact, f64)": "sklearn KernelRidge (exact)",
         "mercer NystroemKernelRidgeClassifier (f32)": "sklearn Nystroem + RidgeClassifier",
         "mercer NystroemKernelRidge": "sklearn Nystroem + Ridge"}


def add_ratios(rows: list[dict]) -> None:
    """``mercer/sklearn``: a mercer row's time over its scikit-learn pair's in the same part."""
    def key(r):
        return (r.get("data"), r.get("n"), r.get("M"))

    for r in rows:
        ref = next((v for k, v in PAIRS.items() if r.get("method", "").startswith(k)), None)
        peer = next((q for q in rows if ref and q.get("method") == ref and key(q) == key(r)), None)
        a, b = r.get("fit_predict_s", r.get("time_s")), peer and peer.get("fit_predict_s", peer.get("time_s"))
        if a and b:
            r["mercer/sklearn"] = a / b


def part_markdown(part: str, out: dict) -> str:
    meta = {k: v for k, v in out.items() if k not in ("rows", "machine", "command")}
    table = markdown_table(out["rows"]) if out.get("rows") else "(no rows)"
    return (f"## {part}\n\nCommand: `{out.get('command', '')}`; machine: {out.get('machine', '')}\n\n"
            + "\n".join(f"- {k}: {v}" for k, v in meta.items()) + "\n\n" + table + "\n")


def main(argv=None):
    global LARGE_CASES, TOL, MSWEEP_SETS, REFS
    ap = suite_parser("nystroem", __doc__, refs=("sklearn",), data=("uci", "fashion"),
                      quick="small versions of the parts (about a minute in all on a quiet 2-core machine)")
    for p in PARTS:
        ap.add_argument(f"--{p}", action="store_true")
    ap.add_argument("--cases", default=LARGE_CASES, help="--large: n:M[:sk],... (sk: also time scikit-learn)")
    ap.add_argument("--tol", type=float, default=TOL, help="--large: CG tolerance of NystroemKernelRidge")
    ap.add_argument("--msweep-sets", nargs="*", default=[], help="--msweep: only these data sets")
    args = parse_suite_args(ap, argv)
    LARGE_CASES, TOL, MSWEEP_SETS, REFS = args.cases, args.tol, args.msweep_sets, args.refs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    chosen = [p for p in PARTS if getattr(args, p)] or list(PARTS)
    parts = previous_parts(args)  # keep the latest result of the parts not run now
    for part in chosen:
        load0 = os.getloadavg()
        rows, meta = PARTS[part](args.quick)
        add_ratios(rows)
        out = {"machine": machine_info(), "command": command_line(),
               "load_average_start": "/".join(f"{x:.2f}" for x in load0),
               "load_average_end": "/".join(f"{x:.2f}" for x in os.getloadavg()), **meta, "rows": rows}
        parts[part] = out
        print("\n" + part_markdown(part, out))
    ordered = {p: parts[p] for p in list(PARTS) + list(parts) if p in parts}
    write_results(args, {"parts": ordered}, "\n".join(part_markdown(p, o) for p, o in ordered.items()),
                  title="Nyström kernel ridge and kernel approximations: mercer vs scikit-learn")


if __name__ == "__main__":
    main()
