"""Benchmark: exact KernelRidge and top-10 KernelPCA, mercer against scikit-learn, side by side.

What is measured, in one run (every measurement in a fresh process, so the peak RSS is its own):

1. Exact kernel ridge regression, RBF kernel: ``sklearn.kernel_ridge.KernelRidge`` against
   ``mercer.KernelRidge`` in float64 and with ``dtype="float32"``, same ``gamma`` and ``alpha``,
   at n_train = 2k, 5k, 10k, 20k. Fit time, predict time on the test set, test RMSE (and the
   relative RMSE difference to scikit-learn's: equal error is required), peak RSS.
2. Kernel PCA, 10 components, RBF kernel: mercer ``eigen_solver`` "auto", "randomized" and
   "lanczos" against scikit-learn's "arpack" and "randomized", at n = 2k, 5k, 10k. Fit time,
   ratio to scikit-learn arpack, the largest relative eigenvalue difference to arpack's
   eigenvalues, peak RSS.

Data: the UCI set ``kin40k`` (d = 8; ``--dataset protein`` for the other one), split 0, from
``--uci-dir`` / ``$MERCER_UCI_DIR``, X and y standardised with the statistics of the whole
training split, the first n_train training rows, and the first 5,000 rows of the split's test
set (kin40k's has 4,000, protein's 4,573: all of them). When the folder is absent, a synthetic
d = 24 regression set is used instead (the output says which).

Hyperparameters: ``gamma = 1 / (d * mean variance of X)`` (= 1/d after standardisation,
scikit-learn's "scale" heuristic); ``alpha = 1e-2`` by default (the best of 1e-3..1 for
scikit-learn at n = 2k on kin40k; ``--alpha``). Both are printed and saved.

Threads: ``torch.set_num_threads(cores)`` in every process; numpy's BLAS keeps its default.
Timings are the best of ``--repeat`` fits (default 3 for n <= 5,000, 1 above) inside the fresh
process, after imports; the machine's load average is recorded per row, because other work on
the machine skews timings.

Run (from the repository root)::

    .venv/bin/python benchmarks/suites/ridge_pca.py --quick            # n = 1,000 only, ~1 min
    .venv/bin/python benchmarks/suites/ridge_pca.py                    # full, ~19 min (2 cores, load 5-7)
    .venv/bin/python benchmarks/suites/ridge_pca.py --sizes 2000 5000 --skip-pca
    .venv/bin/python benchmarks/suites/ridge_pca.py --blas-threads 1   # numpy/scipy BLAS single-threaded

3. The cells of ``mercer demo`` (digits, the demo's split and hyperparameters): its kernel ridge
   classifier and kernel PCA, each library's fits in a fresh process of their own (best of 3), so
   that ``mercer demo``'s printed times can be checked against them (``--skip-demo`` skips them).

Every process start costs ~5-15 s of imports (not timed). The code measured is recorded (git
HEAD, uncommitted files under src/, and a fingerprint of src/mercer taken by each child before
its imports and after its last fit): a row measured while src/ was being edited is marked
CHANGED in the tables and a warning is printed.

Tables go to stdout, progress to stderr (logging), results to ``benchmarks/results/ridge_pca/``
(``latest.json`` and ``latest.md``; ``quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (ROOT, Timer, current_rss_bytes, load_average, machine_info,  # noqa: E402
                     markdown_table, parse_suite_args, run_isolated, suite_parser, uci_dir, write_results)

log = logging.getLogger("bench_ridge_pca")

RIDGE_SIZES = [2000, 5000, 10_000, 20_000]
PCA_SIZES = [2000, 5000, 10_000]
N_TEST = 5000
N_COMPONENTS = 10
DEFAULT_ALPHA = 1e-2
SYNTH_D = 24

RIDGE_VARIANTS = ("sklearn", "mercer64", "mercer32")
PCA_VARIANTS = ("sk_arpack", "sk_randomized", "mercer_auto", "mercer_randomized", "mercer_lanczos")

#: Targets this benchmark serves (ratios to scikit-learn's time).
TARGETS = {"ridge_fit_float64": 1.0, "ridge_fit_float32": 0.5, "pca_vs_arpack": 0.2, "pca_eig_rel": 1e-6}


def n_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# -- data --------------------------------------------------------------------------------------
def load_data(dataset: str, root: Path, n_train_max: int, n_test: int, seed: int):
    """Standardised ``(X_train, y_train, X_test, y_test, description, mean variance of X_train)``.

    Train rows: the first ``n_train_max``; the mean variance is the whole training split's."""
    if root is not None and (root / dataset / "data.csv.gz").is_file():
        from mercer.datasets import load_uci

        Xtr, ytr, Xte, yte = load_uci(dataset, root, split=0)
        desc = f"UCI {dataset} (split 0: {len(Xtr):,} train / {len(Xte):,} test rows, d = {Xtr.shape[1]})"
    else:
        log.warning("UCI %s not found (MERCER_UCI_DIR=%s): using a synthetic d=%d regression set instead",
                    dataset, root, SYNTH_D)
        rng = np.random.default_rng(seed)
        n = max(n_train_max, 1) + n_test
        X = rng.standard_normal((n, SYNTH_D))
        w = rng.standard_normal(SYNTH_D) / np.sqrt(SYNTH_D)
        y = np.sin(2 * X @ w) + 0.5 * np.cos(X[:, :4].sum(1)) + 0.1 * rng.standard_normal(n)
        Xtr, ytr, Xte, yte = X[n_test:], y[n_test:], X[:n_test], y[:n_test]
        desc = f"SYNTHETIC d = {SYNTH_D} regression (sin/cos of projections + 0.1 noise; UCI folder absent)"
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    ym, ys = ytr.mean(), ytr.std() or 1.0
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    ytr, yte = (ytr - ym) / ys, (yte - ym) / ys
    if len(Xtr) < n_train_max:
        raise SystemExit(f"{desc} has only {len(Xtr)} training rows; asked for {n_train_max}.")
    desc += f"; standardised with whole-train-split statistics; test rows used: {min(n_test, len(Xte)):,}"
    mean_var = float(Xtr.var(axis=0).mean())  # of the whole training split: gamma must not depend on --sizes
    return (np.ascontiguousarray(Xtr[:n_train_max]), np.ascontiguousarray(ytr[:n_train_max]),
            np.ascontiguousarray(Xte[:n_test]), np.ascontiguousarray(yte[:n_test]), desc, mean_var)


# -- source fingerprint ------------------------------------------------------------------------
SRC_DIR = ROOT / "src" / "mercer"


def mercer_dir() -> Path:
    """The folder ``import mercer`` loads from here (the snapshot or src/mercer), without importing it."""
    import importlib.util

    return Path(importlib.util.find_spec("mercer").origin).parent


def src_fingerprint(folder: Path | None = None) -> str:
    """Hash of (path, size, mtime) of every ``*.py`` under ``folder`` (default: the one mercer
    is imported from): changes when the code is edited.

    Children record it before importing mercer and after their last fit, so a row measured
    while someone edited the measured source is flagged instead of silently mixing code versions.
    """
    import hashlib

    folder = mercer_dir() if folder is None else folder
    h = hashlib.sha1()
    for f in sorted(folder.rglob("*.py")):
        st = f.stat()
        h.update(f"{f.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:12]


def snapshot_source() -> tuple[Path, str]:
    """Copy src/mercer to a temporary folder first on ``sys.path`` (children inherit it).

    The whole run then measures one version of the code even while others edit src/. Returns
    the folder and a hash of the copied files' contents.
    """
    import hashlib
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="mercer_bench_src_"))
    shutil.copytree(SRC_DIR, root / "mercer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    h = hashlib.sha1()
    for f in sorted((root / "mercer").rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    sys.path.insert(0, str(root))
    for name in [m for m in sys.modules if m == "mercer" or m.startswith("mercer.")]:
        del sys.modules[name]
    return root, h.hexdigest()[:12]


def git_state() -> str:
    """``HEAD`` commit and the files that differ from it under src/ (the code that was measured)."""
    import subprocess

    root = SRC_DIR.parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--short", "--", "src"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    dirty = [line.strip() for line in dirty if line.strip()]
    return f"{head}" + (f" + uncommitted: {', '.join(dirty)}" if dirty else " (clean src/)")


# -- children (module level: run in fresh processes) --------------------------------------------
_BLAS_LIMIT = None


def _setup_child(threads: int, blas_threads: int | None = None) -> None:
    import torch

    torch.set_num_threads(threads)
    if blas_threads is not None:  # limit the BLAS libraries at run time, once all are loaded
        import scipy.linalg  # noqa: F401  (scipy may carry its own OpenBLAS)
        from threadpoolctl import threadpool_limits

        global _BLAS_LIMIT
        _BLAS_LIMIT = threadpool_limits(blas_threads, user_api="blas")  # kept: limits last while referenced


def ridge_child(variant: str, X, y, Xte, yte, gamma: float, alpha: float, repeat: int, threads: int,
                blas_threads: int | None = None) -> dict:
    """Fit ``repeat`` times (best time), predict once; return times, RMSE, RSS after imports."""
    src_start = src_fingerprint()
    _setup_child(threads, blas_threads)
    import mercer

    src_file = mercer.__file__
    if variant == "sklearn":
        from sklearn.kernel_ridge import KernelRidge

        make = lambda: KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma)  # noqa: E731
    else:
        from mercer import KernelRidge

        dtype = "float32" if variant == "mercer32" else None
        make = lambda: KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma, dtype=dtype)  # noqa: E731
    base_rss = current_rss_bytes()
    fit_times, model = [], None
    for _ in range(repeat):
        model = None  # free the previous fit before the next one
        m = make()
        with Timer() as t:
            m.fit(X, y)
        fit_times.append(t.seconds)
        model = m
    with Timer() as t:
        pred = np.asarray(model.predict(Xte), dtype=np.float64)
    rmse = float(np.sqrt(np.mean((pred - yte) ** 2)))
    extra = {}
    if variant != "sklearn":
        extra = {"jitter": float(getattr(model, "jitter_", 0.0)), "solver": model.solver_}
    return {"fit_s": min(fit_times), "fit_all_s": fit_times, "predict_s": t.seconds, "rmse": rmse,
            "base_rss": base_rss, "src": [src_start, src_fingerprint()], "mercer_file": src_file, **extra}


def pca_child(variant: str, X, gamma: float, repeat: int, threads: int, seed: int,
              blas_threads: int | None = None) -> dict:
    """Fit ``repeat`` times (best time); return time, eigenvalues, solver info, RSS after imports."""
    src_start = src_fingerprint()
    _setup_child(threads, blas_threads)
    import mercer

    src_file = mercer.__file__
    if variant.startswith("sk_"):
        from sklearn.decomposition import KernelPCA

        solver = variant[3:]
        make = lambda: KernelPCA(N_COMPONENTS, kernel="rbf", gamma=gamma, eigen_solver=solver,  # noqa: E731
                                 random_state=seed)
    else:
        from mercer import KernelPCA

        solver = variant[len("mercer_"):]
        make = lambda: KernelPCA(N_COMPONENTS, kernel="rbf", gamma=gamma, eigen_solver=solver,  # noqa: E731
                                 random_state=seed)
    base_rss = current_rss_bytes()
    times, model = [], None
    for _ in range(repeat):
        model = None
        m = make()
        with Timer() as t:
            m.fit(X)
        times.append(t.seconds)
        model = m
    out = {"fit_s": min(times), "fit_all_s": times, "base_rss": base_rss, "src": [src_start, src_fingerprint()],
           "mercer_file": src_file, "eigenvalues": np.sort(np.asarray(model.eigenvalues_, dtype=np.float64))[::-1].tolist()}
    if not variant.startswith("sk_"):
        out["solver_info"] = dict(model.solver_info_)
    return out


# -- driver ------------------------------------------------------------------------------------
def _isolated(fn, *args) -> dict:
    """Run in a fresh process; the result dict gains ``peak_rss`` and ``load`` (or ``error``)."""
    load = load_average()
    try:
        res, _, peak = run_isolated(fn, *args)
    except Exception as exc:  # a failing variant must not lose the other rows
        log.exception("%s%s failed", fn.__name__, args[:1])
        return {"error": f"{type(exc).__name__}: {exc}", "load": load}
    res["peak_rss"] = peak
    res["load"] = load
    return res


def _repeat(n: int, args) -> int:
    return args.repeat if args.repeat is not None else (3 if n <= 5000 else 1)


def run_ridge(data, sizes, gamma, alpha, args) -> list[dict]:
    Xtr, ytr, Xte, yte = data[:4]
    rows = []
    for n in sizes:
        row = {"n": n}
        for v in RIDGE_VARIANTS:
            if v == "sklearn" and "sklearn" not in args.refs:
                row[v] = {"skipped": "not in --refs"}
                continue
            log.info("ridge n=%d %s ...", n, v)
            row[v] = _isolated(ridge_child, v, Xtr[:n], ytr[:n], Xte, yte, gamma, alpha,
                               _repeat(n, args), args.threads, args.blas_threads)
            log.info("ridge n=%d %s: %s", n, v, {k: row[v].get(k) for k in ("fit_s", "rmse", "peak_rss", "error")})
        rows.append(row)
    return rows


def run_pca(data, sizes, gamma, args) -> list[dict]:
    Xtr = data[0]
    rows = []
    for n in sizes:
        row = {"n": n}
        for v in PCA_VARIANTS:
            if v.startswith("sk_") and "sklearn" not in args.refs:
                row[v] = {"skipped": "not in --refs"}
                continue
            log.info("pca n=%d %s ...", n, v)
            row[v] = _isolated(pca_child, v, Xtr[:n], gamma, _repeat(n, args), args.threads, args.seed,
                                args.blas_threads)
            log.info("pca n=%d %s: %s", n, v, {k: row[v].get(k) for k in ("fit_s", "peak_rss", "error")})
        ref = row["sk_arpack"].get("eigenvalues")
        for v in PCA_VARIANTS:
            ev = row[v].get("eigenvalues")
            if ref is not None and ev is not None:
                r, e = np.asarray(ref), np.asarray(ev)
                row[v]["eig_rel_diff"] = float(np.max(np.abs(e - r) / np.abs(r)))
        rows.append(row)
    return rows


def demo_child(cell: str, library: str, threads: int, repeat: int) -> dict:
    """One library's fits of one cell of ``mercer demo``, alone in this process."""
    import torch

    torch.set_num_threads(threads)
    from mercer.cli._demo import fit_cell

    res = fit_cell(cell, library, repeat=repeat)
    return {"fit_s": res["seconds"], "score": res["score"], "threads": res.get("threads")}


def run_demo_cells(args) -> list[dict]:
    """The demo's cells, each library in fresh processes; mercer / scikit-learn ratios."""
    from mercer.cli._demo import CELLS

    libraries = ["mercer"] + (["sklearn"] if "sklearn" in args.refs else [])
    rows = []
    for cell in CELLS:
        row = {"cell": cell}
        for lib in libraries:
            log.info("demo cell %s, %s ...", cell, lib)
            row[lib] = _isolated(demo_child, cell, lib, args.threads, 3)
        rows.append(row)
    return rows


def demo_table(rows) -> str:
    t = [{"cell of mercer demo": r["cell"], "mercer fit (s)": _get(r["mercer"], "fit_s"),
          "sklearn fit (s)": _get(r.get("sklearn", {}), "fit_s"),
          "mercer/sklearn": _ratio(r["mercer"], r.get("sklearn", {})),
          "score mercer": _get(r["mercer"], "score"), "score sklearn": _get(r.get("sklearn", {}), "score"),
          "mercer run with": _get(r["mercer"], "threads"), "sklearn run with": _get(r.get("sklearn", {}), "threads")}
         for r in rows]
    return ("The cells of `mercer demo` (best of 3 fits after a warm-up, each library in its own fresh process; "
            "each library with its default threads and with one, the faster shown, as in the demo)\n\n"
            + markdown_table(t))


# -- tables ------------------------------------------------------------------------------------
def _get(res: dict, key: str):
    return res.get(key, "ERR" if "error" in res else "")


def _ratio(a: dict, b: dict, key: str = "fit_s"):
    if key in a and key in b and b[key] > 0:
        return a[key] / b[key]
    return "n/a"


def _src_note(row: dict, variants, run_src: str) -> str:
    """'same' when every variant ran the code of the run's start, else which ones did not."""
    odd = [v for v in variants if not v.startswith("sk") and "src" in row[v] and set(row[v]["src"]) != {run_src}]
    return "same" if not odd else "CHANGED: " + ", ".join(odd)


def _mib(res: dict):
    return f"{res['peak_rss'] / 2**20:.0f}" if "peak_rss" in res else "ERR"


def ridge_tables(rows, run_src: str) -> str:
    t1, t2 = [], []
    for row in rows:
        sk, m64, m32 = (row[v] for v in RIDGE_VARIANTS)
        t1.append({
            "n": row["n"],
            "fit sklearn (s)": _get(sk, "fit_s"), "fit m64 (s)": _get(m64, "fit_s"), "fit m32 (s)": _get(m32, "fit_s"),
            "m64/sk": _ratio(m64, sk), "m32/sk": _ratio(m32, sk),
            "pred sk (s)": _get(sk, "predict_s"), "pred m64 (s)": _get(m64, "predict_s"),
            "pred m32 (s)": _get(m32, "predict_s"),
            "load 1m": sk.get("load", "").split("/")[0],
            "src": _src_note(row, RIDGE_VARIANTS, run_src),
        })
        rel = {}
        for v, res in (("m64", m64), ("m32", m32)):
            rel[v] = abs(res["rmse"] - sk["rmse"]) / sk["rmse"] if "rmse" in res and "rmse" in sk else "n/a"
        t2.append({
            "n": row["n"],
            "RMSE sk": _get(sk, "rmse"), "RMSE m64": _get(m64, "rmse"), "RMSE m32": _get(m32, "rmse"),
            "|dRMSE| m64 rel": rel["m64"], "|dRMSE| m32 rel": rel["m32"],
            "peak RSS sk (MiB)": _mib(sk), "peak RSS m64 (MiB)": _mib(m64), "peak RSS m32 (MiB)": _mib(m32),
            "K (n^2 x 8 B, MiB)": f"{row['n'] ** 2 * 8 / 2**20:.0f}",
        })
    return ("Kernel ridge — fit and predict times (best of repeats; ratio < 1: mercer faster)\n\n"
            + markdown_table(t1) + "\n\nKernel ridge — test error and peak RSS (fresh process each)\n\n"
            + markdown_table(t2))


def pca_tables(rows, run_src: str) -> str:
    t1, t2 = [], []
    short = {"sk_arpack": "sk arpack", "sk_randomized": "sk rand", "mercer_auto": "m auto",
             "mercer_randomized": "m rand", "mercer_lanczos": "m lanczos"}
    for row in rows:
        ref = row["sk_arpack"]
        r1 = {"n": row["n"]}
        for v in PCA_VARIANTS:
            r1[f"{short[v]} (s)"] = _get(row[v], "fit_s")
        for v in PCA_VARIANTS[1:]:
            r1[f"{short[v]}/arpack"] = _ratio(row[v], ref)
        r1["load 1m"] = ref.get("load", "").split("/")[0]
        r1["src"] = _src_note(row, PCA_VARIANTS, run_src)
        t1.append(r1)
        r2 = {"n": row["n"]}
        for v in PCA_VARIANTS[1:]:
            r2[f"eig rel diff {short[v]}"] = _get(row[v], "eig_rel_diff")
        for v in PCA_VARIANTS:
            r2[f"RSS {short[v]} (MiB)"] = _mib(row[v])
        t2.append(r2)
    info = []
    for row in rows:
        for v in PCA_VARIANTS[2:]:
            si = row[v].get("solver_info")
            if si:
                info.append({"n": row["n"], "variant": v, **si})
    return (f"KernelPCA top-{N_COMPONENTS} — fit times (best of repeats; ratio to sklearn arpack)\n\n"
            + markdown_table(t1)
            + "\n\nKernelPCA — max_j |lambda_j - lambda_j(arpack)| / lambda_j(arpack), and peak RSS\n\n"
            + markdown_table(t2)
            + "\n\nmercer solver info\n\n" + markdown_table(info))


# -- main --------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = suite_parser("ridge_pca", __doc__.split("\n\n")[0], refs=("sklearn",), data=("uci",),
                     quick="n = 1,000 only, one fit per process (about a minute)")
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help=f"n_train values for both parts (default ridge {RIDGE_SIZES}, PCA {PCA_SIZES})")
    p.add_argument("--pca-sizes", type=int, nargs="+", default=None, help="n values for PCA (overrides --sizes)")
    p.add_argument("--skip-ridge", action="store_true")
    p.add_argument("--skip-pca", action="store_true")
    p.add_argument("--dataset", default="kin40k", help="UCI folder name (default kin40k; protein also fits)")
    p.add_argument("--skip-demo", action="store_true", help="skip the cells of mercer demo")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    p.add_argument("--gamma", type=float, default=None, help="default 1 / (d * mean variance of X_train)")
    p.add_argument("--repeat", type=int, default=None, help="fits per process (default 3 for n <= 5000, else 1)")
    p.add_argument("--threads", type=int, default=n_cores(), help="torch threads (default: usable cores)")
    p.add_argument("--blas-threads", type=int, default=None,
                   help="limit numpy/scipy BLAS threads in the children (threadpoolctl); default: untouched")
    p.add_argument("--no-snapshot", dest="snapshot", action="store_false",
                   help="measure the live src/ tree (default: a copy taken at the start, immune to edits)")
    p.add_argument("--seed", type=int, default=0)
    return parse_suite_args(p, argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(processName)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    live_start, git_start = src_fingerprint(SRC_DIR), git_state()
    snap = snapshot_source() if args.snapshot else None
    src_start = src_fingerprint()  # of the code measured: the snapshot, or the live tree
    if args.quick and args.repeat is None:
        args.repeat = 1
    ridge_sizes = [1000] if args.quick else (args.sizes or RIDGE_SIZES)
    pca_sizes = [1000] if args.quick else (args.pca_sizes or args.sizes or PCA_SIZES)
    need = max([1000] + ([] if args.skip_ridge else ridge_sizes) + ([] if args.skip_pca else pca_sizes))
    data = load_data(args.dataset, uci_dir(), need, N_TEST, args.seed)
    d = data[0].shape[1]
    gamma = args.gamma if args.gamma is not None else 1.0 / (d * data[5])
    load_start = load_average()
    print(f"machine: {machine_info()}")
    code = f"code: {git_start}; src fingerprint {live_start}"
    print(code + (f"; measured on a copy taken at the start, {snap[0]} (content hash {snap[1]})" if snap else
                  "; measured on the live src/ tree (--no-snapshot)"))
    print(f"numpy/scipy BLAS threads: {args.blas_threads or 'default (untouched)'}; torch threads: {args.threads}")
    print(f"data: {data[4]}")
    print(f"kernel rbf, gamma = {gamma:.6g} (1 / (d * mean var X_train), d = {d}), alpha = {args.alpha:g}")
    print(f"load average (1/5/15 min) at start: {load_start}")
    sys.stdout.flush()

    out = {"machine": machine_info(), "argv": sys.argv, "data": data[4], "d": d, "gamma": gamma,
           "alpha": args.alpha, "torch_threads": args.threads, "blas_threads": args.blas_threads,
           "load_start": load_start, "targets": TARGETS, "src_start": src_start, "live_src_start": live_start, "git_start": git_start,
           "snapshot": None if snap is None else {"path": str(snap[0]), "content_sha1": snap[1]}}
    tables = [f"Machine: {out['machine']}; code: {git_start}\n\nData: {data[4]}; RBF gamma = {gamma:.6g}, "
              f"alpha = {args.alpha:g}; torch threads {args.threads}; load at start {load_start}"]
    with Timer() as total:
        if not args.skip_demo:
            out["demo"] = run_demo_cells(args)
            tables.append(demo_table(out["demo"]))
            print("\n" + tables[-1] + "\n")
        if not args.skip_ridge:
            out["ridge"] = run_ridge(data, ridge_sizes, gamma, args.alpha, args)
            tables.append(ridge_tables(out["ridge"], src_start))
            print("\n" + tables[-1] + "\n")
            sys.stdout.flush()
        if not args.skip_pca:
            out["pca"] = run_pca(data, pca_sizes, gamma, args)
            tables.append(pca_tables(out["pca"], src_start))
            print("\n" + tables[-1] + "\n")
    out["load_end"] = load_average()
    out["total_s"] = total.seconds
    out["src_end"], out["live_src_end"], out["git_end"] = src_fingerprint(), src_fingerprint(SRC_DIR), git_state()
    if out["src_end"] != src_start:
        print(f"WARNING: the measured src/mercer was edited during the run (fingerprint {src_start} -> "
              f"{out['src_end']}; now {out['git_end']}): rows marked CHANGED ran other code than the rest; "
              "rerun them (the default snapshot mode avoids this).")
    elif out["live_src_end"] != live_start:
        print(f"note: src/ was edited during the run (now {out['git_end']}); the snapshot taken at the "
              "start was measured, so the tables describe the code at the start.")
    print(f"load average (1/5/15 min) at end: {out['load_end']}; total {total.seconds:.0f} s")
    if snap is not None:
        import shutil

        shutil.rmtree(snap[0], ignore_errors=True)
    write_results(args, out, "\n\n".join(tables), title="Exact kernel ridge and kernel PCA: mercer vs scikit-learn")


if __name__ == "__main__":
    main()
