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
    args = parse_suite_args(ap, argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SkipSuite("gpu: no CUDA device here (--device cpu runs the CPU side alone)")
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


if __name__ == "__main__":
    main()
