"""mercer on a CUDA GPU next to mercer on the same machine's CPU cores and scikit-learn, in one run.

Cases (synthetic data, the generators of nystroem.py / svm.py):

* exact ``KernelRidge`` (float64, RBF), n = 20k, d = 28 — against scikit-learn's KernelRidge;
* ``NystroemKernelRidge`` (float32 tiles, tol 1e-3), n = 100k with M = 5k on both devices, and
  n = 1M with M = 10k on the GPU (the 2-core CPU figure is in the README: 292 s at tol 1e-2);
* ``KernelSVC`` (RBF, C = 1), binary, d = 24, n = 20k — against scikit-learn's SVC (LIBSVM);
* ``KernelPCA`` (10 components, randomized), n = 20k.

Each case has a time limit (``--case-limit``, default 150 s); a case that runs over is recorded
as such. Run on a machine with a GPU::

    python benchmarks/suites/gpu.py                  # ~4 min on one H100 / H200
    python benchmarks/suites/gpu.py --quick --device cpu       # smoke test without a GPU

``--check`` runs instead the CPU-vs-GPU agreement cases of ``make gpu-check``
(benchmarks/tools/gpu_check.py): exact ridge, Nystroem, SVC, k-means, KPCA and GP in each of
``--dtypes`` on both devices, each row with its relative difference from the CPU's and the dtype's
tolerance (``ok``), then Nystroem on the GPU alone up to ``--max-rows`` rows (M = 10^4); ``--tiny``
(with ``--device cpu``: the dry run) shrinks every size to seconds.

Without a CUDA device (and ``--device cuda``, the default) the suite is skipped. Results:
``benchmarks/results/gpu/latest.{json,md}``; ``mercer/sklearn``: a row's time over scikit-learn's row
of the same case.
"""

from __future__ import annotations

import math
import os
import platform
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import SkipSuite, parse_suite_args, suite_parser, write_results  # noqa: E402


class CaseTimeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise CaseTimeout


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def regression_data(n: int, d: int, seed: int):
    """As _common.synthetic (another projection seed): X ~ N(0, I_d), y = sin(2 p1) + 0.5 cos(p2) p3 + 0.1 noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    P = X @ np.random.default_rng(7).standard_normal((d, 3)).astype(np.float32) / math.sqrt(d)
    y = np.sin(2 * P[:, 0]) + 0.5 * np.cos(P[:, 1]) * P[:, 2] + 0.1 * rng.standard_normal(n).astype(np.float32)
    return X, y.astype(np.float64)


def classification_data(n: int, n_test: int = 10_000):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n + n_test, n_features=24, n_informative=12, random_state=0, flip_y=0.05)
    return X[:n], y[:n], X[n:], y[n:]


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def run_case(name, device, fn, limit) -> dict:
    row = {"case": name, "device": device}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        t0 = time.perf_counter()
        row.update(fn())
        _sync(device if device != "sklearn" else "cpu")
        row["seconds"] = round(time.perf_counter() - t0, 3)
    except CaseTimeout:
        row["seconds"] = f"> {limit}"
    except Exception as exc:  # a failure is a result here: record it and go on
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.alarm(0)
    if device.startswith("cuda"):
        row["gpu_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.reset_peak_memory_stats()
    print(row, flush=True)
    return row


def main(argv=None) -> None:
    ap = suite_parser("gpu", __doc__.split("\n\n")[0], refs=("sklearn",), quick="small sizes (smoke test)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--case-limit", type=int, default=150)
    ap.add_argument("--skip", default="", help="comma-separated case prefixes to skip (ridge,nystroem,svc,kpca)")
    ap.add_argument("--check", action="store_true", help="the agreement cases of make gpu-check (see above)")
    ap.add_argument("--dtypes", default="float32,float64", help="--check: the dtypes to compare")
    ap.add_argument("--max-rows", type=int, default=10_000_000, help="--check: largest Nystroem fit on the GPU")
    ap.add_argument("--tiny", action="store_true", help="--check: tiny sizes (the dry run on a CPU)")
    ap.add_argument("--budget-s", type=float, default=math.inf,
                    help="--check: cases not started within this many seconds are recorded as skipped")
    args = parse_suite_args(ap, argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SkipSuite("gpu: no CUDA device here (--device cpu runs the CPU side alone)")
    if args.check:
        return check(args)
    import sklearn
    from sklearn.decomposition import KernelPCA as SkKernelPCA
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
    from sklearn.svm import SVC

    import mercer

    dev = args.device
    q = args.quick
    skip = tuple(s for s in args.skip.split(",") if s)
    if dev.startswith("cuda"):
        torch.zeros(1, device=dev)  # context creation outside the timings
        mercer.KernelRidge(kernel="rbf").fit(np.ones((4, 2)), np.ones(4))
    devices = [dev, "cpu"] if dev != "cpu" else ["cpu"]
    rows = []

    # exact kernel ridge, float64
    n, d = (2000, 28) if q else (20_000, 28)
    X, y = regression_data(n, d, 1)
    Xte, yte = regression_data(5000, d, 99)
    X64, Xte64 = X.astype(np.float64), Xte.astype(np.float64)
    g, a = 1.0 / (2 * d), 1e-6 * n
    if not any("ridge".startswith(s) for s in skip):
        for dv in devices:
            rows.append(run_case(f"KernelRidge exact f64 n={n}", dv, lambda dv=dv: {"rmse": rmse(
                mercer.KernelRidge(alpha=a, kernel="rbf", gamma=g, device=dv).fit(X64, y).predict(Xte64), yte)},
                args.case_limit))
        if "sklearn" in args.refs:
            rows.append(run_case(f"KernelRidge exact f64 n={n}", "sklearn", lambda: {"rmse": rmse(
                SkKernelRidge(alpha=a, kernel="rbf", gamma=g).fit(X64, y).predict(Xte64), yte)}, args.case_limit))

    # Nyström ridge
    if not any("nystroem".startswith(s) for s in skip):
        for n, M, devs in ([(20_000, 1000, devices)] if q else [(100_000, 5000, devices), (1_000_000, 10_000, [dev])]):
            X, y = regression_data(n, d, 1)
            g, a = 1.0 / (2 * d), 1e-6 * n
            for dv in devs:
                def fit(dv=dv, X=X, y=y, g=g, a=a, M=M):
                    m = mercer.NystroemKernelRidge(alpha=a, kernel="rbf", gamma=g, n_centers=M, random_state=0,
                                                   device=dv).fit(X, y)
                    return {"rmse": rmse(m.predict(Xte), yte), "cg_iter": int(np.max(m.n_iter_)), "solver": m.solver_}
                rows.append(run_case(f"NystroemKernelRidge f32 n={n} M={M}", dv, fit, args.case_limit))
            del X, y

    # SVC
    if not any("svc".startswith(s) for s in skip):
        n = 5000 if q else 20_000
        X, y, Xte_c, yte_c = classification_data(n)
        for dv in devices:
            def fit(dv=dv):
                m = mercer.KernelSVC(device=dv).fit(X, y)
                return {"accuracy": float((np.asarray(m.predict(Xte_c)) == yte_c).mean()), "n_sv": int(len(m.support_))}
            rows.append(run_case(f"KernelSVC n={n}", dv, fit, args.case_limit))

        def fit_sk():
            m = SVC().fit(X, y)
            return {"accuracy": float((m.predict(Xte_c) == yte_c).mean()), "n_sv": int(len(m.support_))}
        if "sklearn" in args.refs:
            rows.append(run_case(f"KernelSVC n={n}", "sklearn", fit_sk, args.case_limit))

    # kernel PCA
    if not any("kpca".startswith(s) for s in skip):
        n = 3000 if q else 20_000
        X, _ = regression_data(n, d, 3)
        X64 = X.astype(np.float64)
        for dv in devices:
            rows.append(run_case(f"KernelPCA 10 comp. n={n}", dv, lambda dv=dv: {"top_eigenvalue": float(
                mercer.KernelPCA(10, kernel="rbf", gamma=1 / (2 * d), eigen_solver="randomized", random_state=0,
                                 device=dv).fit(X64).eigenvalues_[0])}, args.case_limit))
        if n <= 10_000 and "sklearn" in args.refs:
            rows.append(run_case(f"KernelPCA 10 comp. n={n}", "sklearn", lambda: {"top_eigenvalue": float(
                SkKernelPCA(10, kernel="rbf", gamma=1 / (2 * d), eigen_solver="randomized", random_state=0)
                .fit(X64).eigenvalues_[0])}, args.case_limit))

    info = {"torch": torch.__version__, "sklearn": sklearn.__version__, "cpu_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    for r in rows:
        ref = next((q for q in rows if q["case"] == r["case"] and q["device"] == "sklearn"), None)
        if ref is not None and r is not ref and isinstance(r.get("seconds"), float) \
                and isinstance(ref.get("seconds"), float) and ref["seconds"] > 0:
            r["mercer/sklearn"] = round(r["seconds"] / ref["seconds"], 3)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    md = [f"Machine: {info}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    print("\n".join(md))
    write_results(args, {"machine": info, "rows": rows}, "\n".join(md), title="mercer on a GPU vs CPU and scikit-learn")


#: Agreement of a GPU result with the CPU's (relative difference; label cases: fraction of labels that
#: differ), per dtype. "direct": a Cholesky solve agrees to cond * eps of the dtype (kept modest here:
#: alpha = 1e-3 n, cond ~1e3). "loose": iterative solves to their stopping tolerance (Nystroem's CG,
#: randomized KPCA's eigenvalues), and the GP, whose K + 0.1 I has cond ~1e5 (in float32: ~1e-2).
CHECK_TOL = {
    "direct": {"float32": 1e-3, "float64": 1e-8},
    "loose": {"float32": 2e-2, "float64": 1e-5},
    "labels": {"float32": 5e-3, "float64": 5e-3},
}


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def check(args) -> None:
    """``--check``: the agreement cases (module docstring), written like the suite's other rows."""
    import mercer

    dev, tiny = args.device, args.tiny
    if dev.startswith("cuda"):
        torch.zeros(1, device=dev)
    dtypes = [t for t in args.dtypes.split(",") if t]
    d = 28
    sz = (lambda full, small: small if tiny else full)
    Xte, yte = regression_data(sz(5000, 200), d, 99)
    rows = []

    t_start = time.perf_counter()

    def limit() -> int:  # a case's alarm: its own limit, within what is left of --budget-s
        return int(max(1, min(args.case_limit, args.budget_s - (time.perf_counter() - t_start))))

    def over_budget(name, dtype) -> bool:
        if time.perf_counter() - t_start < args.budget_s:
            return False
        rows.append({"case": name, "device": dev, "dtype": dtype, "seconds": "skipped (--budget-s)"})
        return True

    def pair(name, kind, dtype, fit):
        """``fit(device) -> (metrics, values)`` on the device, then on the CPU; the values compared."""
        if over_budget(name, dtype):
            return
        values = []
        for dv in (dev, "cpu"):
            box = {}

            def run(dv=dv, box=box):
                metrics, box["values"] = fit(dv)
                return metrics
            row = run_case(name, dv, run, limit())
            row["dtype"] = dtype
            rows.append(row)
            values.append(box.get("values"))
        got, ref = values
        if got is None or ref is None:
            rows[-2]["ok"] = False
            return
        diff = float(np.mean(np.asarray(got) != np.asarray(ref))) if kind == "labels" else _rel(got, ref)
        tol = CHECK_TOL[kind][dtype]
        rows[-2].update({"vs_cpu": f"{diff:.1e}", "tol": tol, "ok": bool(diff <= tol)})

    for dtype in dtypes:
        npt = np.float32 if dtype == "float32" else np.float64
        n = sz(20_000, 300)
        X, y = regression_data(n, d, 1)
        g = 1.0 / (2 * d)
        pair(f"KernelRidge exact n={n}", "direct", dtype, lambda dv: (lambda m: ({"rmse": rmse(m.predict(Xte), yte)},
             m.predict(Xte)))(mercer.KernelRidge(alpha=1e-3 * n, kernel="rbf", gamma=g, device=dv, dtype=dtype)
                              .fit(X.astype(npt), y)))
        n, M = sz(50_000, 2000), sz(2000, 100)
        X, y = regression_data(n, d, 1)
        tol = 1e-4 if dtype == "float32" else 1e-8

        def nys(dv, X=X, y=y, n=n, M=M, tol=tol, dtype=dtype):
            m = mercer.NystroemKernelRidge(alpha=1e-3 * n, kernel="rbf", gamma=g, n_centers=M, random_state=0,
                                           solver="cg", tol=tol, max_iter=500, device=dv, dtype=dtype).fit(X, y)
            p = m.predict(Xte)
            return {"rmse": rmse(p, yte), "cg_iter": int(np.max(m.n_iter_))}, p
        pair(f"NystroemKernelRidge n={n} M={M}", "loose", dtype, nys)
        n = sz(20_000, 400)
        Xc, yc, Xtc, ytc = classification_data(n, sz(5000, 200))

        def svc(dv, Xc=Xc, yc=yc, Xtc=Xtc, ytc=ytc):
            m = mercer.KernelSVC(device=dv, dtype=dtype).fit(Xc, yc)
            p = np.asarray(m.predict(Xtc))
            return {"accuracy": float((p == ytc).mean()), "n_sv": int(len(m.support_))}, p
        pair(f"KernelSVC n={n}", "labels", dtype, svc)
        n = sz(200_000, 2000)
        Xk, _ = regression_data(n, d, 5)

        def kmeans(dv, Xk=Xk):
            m = mercer.KMeans(sz(100, 5), n_init=1, random_state=0, device=dv, dtype=dtype).fit(Xk)
            return {"inertia": float(m.inertia_), "n_iter": int(m.n_iter_)}, np.asarray(m.labels_)
        pair(f"KMeans n={n}", "labels", dtype, kmeans)
        n = sz(10_000, 300)
        Xp, _ = regression_data(n, d, 3)

        def kpca(dv, Xp=Xp):
            ev = mercer.KernelPCA(10, kernel="rbf", gamma=g, eigen_solver="dense" if tiny else "randomized",
                                  random_state=0, device=dv, dtype=dtype).fit(Xp.astype(npt)).eigenvalues_
            return {"top_eigenvalue": float(ev[0])}, np.asarray(ev)
        pair(f"KernelPCA 10 comp. n={n}", "loose", dtype, kpca)
        n = sz(10_000, 300)
        Xg, yg = regression_data(n, d, 4)

        def gp(dv, Xg=Xg, yg=yg):
            m = mercer.GaussianProcessRegressor(kernel="rbf", gamma=g, noise=0.1, optimizer=None, device=dv,
                                                dtype=dtype).fit(Xg.astype(npt), yg)
            p = np.asarray(m.predict(Xte.astype(npt)))
            return {"rmse": rmse(p, yte)}, p
        pair(f"GaussianProcessRegressor n={n}", "loose", dtype, gp)

    # Nystroem at scale, on the device alone (n x 28 float32 data: 1.1 GB at 10^7 rows)
    M = sz(10_000, 100)
    for n in [k for k in sz((1_000_000, 10_000_000), (2000, 5000)) if k <= args.max_rows]:
        X, y = regression_data(n, d, 1)
        for dtype in dtypes:
            def fit(X=X, y=y, n=n, dtype=dtype):
                m = mercer.NystroemKernelRidge(alpha=1e-6 * n, kernel="rbf", gamma=1.0 / (2 * d), n_centers=M,
                                               random_state=0, device=dev, dtype=dtype).fit(X, y)
                return {"rmse": rmse(m.predict(Xte), yte), "cg_iter": int(np.max(m.n_iter_)), "solver": m.solver_}
            if over_budget(f"NystroemKernelRidge n={n} M={M}", dtype):
                continue
            row = run_case(f"NystroemKernelRidge n={n} M={M}", dev, fit, limit())
            row["dtype"] = dtype
            rows.append(row)
        del X, y

    info = {"torch": torch.__version__, "cpu_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    failed = [f"{r['case']} {r['dtype']} on {r['device']}" for r in rows
              if r.get("ok") is False or "error" in r or str(r.get("seconds", "")).startswith(">")]
    front = ["case", "dtype", "device", "seconds", "vs_cpu", "tol", "ok"]
    cols = front + [k for k in dict.fromkeys(k for r in rows for k in r) if k not in front]
    md = [f"Machine: {info}", "", f"Agreement: {'all within tolerance' if not failed else 'FAILED: ' + '; '.join(failed)}",
          "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    print("\n".join(md))
    write_results(args, {"machine": info, "rows": rows, "failed": failed}, "\n".join(md),
                  title="mercer on a GPU: agreement with the CPU, and Nystroem at scale")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
