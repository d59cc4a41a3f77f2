"""How long Ctrl-C takes to stop each long-running method (fit, predict, the CLI).

Each case runs a problem that takes several seconds; a timer thread sends SIGINT to the process at
a random time in ``[0.2, 0.2 + spread]`` seconds after the call starts, and the latency is the time
from the signal to the ``KeyboardInterrupt`` reaching the caller. After a fit the estimator must be
unfitted (``check_is_fitted`` raises). Between trials the probe waits for any abandoned LAPACK
worker thread (``mercer.linalg._factor._interruptible``) to finish, so that trials do not slow
each other. The latency counts from when the signal is due (a terminal's Ctrl-C needs no GIL;
the timer thread does). The CLI case runs ``mercer fit`` in a subprocess and times its exit after SIGINT (and
checks that no model file, partial or not, is left).

    python benchmarks/probes/probe_interrupt_latency.py [--trials 5] [--only svc,pca-dense]

Writes ``benchmarks/results/interrupt/latest.md`` (the command line at the top).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "interrupt" / "latest.md"


def _data(n, d, seed=0, classes=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float64)
    w = rng.normal(size=d)
    f = np.sin(X @ w) + 0.3 * rng.normal(size=n)
    return X, ((f > 0).astype(int) if classes else f)


def cases():
    """name -> (what, build): ``build()`` returns ``(call, estimator or None)``."""
    import mercer

    def fit(est, X, y=None):
        return (lambda: est.fit(X) if y is None else est.fit(X, y)), est

    def fitted(est, X, y=None):
        est.fit(X) if y is None else est.fit(X, y)
        return est

    return {
        "svc-inloop": ("KernelSVC.fit, RBF, d = 8 (SMO computes its rows in the compiled loop)",
                       lambda: fit(mercer.KernelSVC(C=10.0, kernel="rbf", gamma=0.125), *_data(12000, 8))),
        "svc-blocked": ("KernelSVC.fit, RBF, d = 64 (rows from torch in blocks)",
                        lambda: fit(mercer.KernelSVC(C=10.0, kernel="rbf", gamma=1 / 64), *_data(8000, 64))),
        "ridge-exact": ("KernelRidge.fit, exact Cholesky, n = 15,000",
                        lambda: fit(mercer.KernelRidge(alpha=1e-3, kernel="rbf", gamma=0.1), *_data(15000, 8, classes=False))),
        "nystroem-cg": ("NystroemKernelRidge.fit (CG), n = 100,000, M = 3,000",
                        lambda: fit(mercer.NystroemKernelRidge(alpha=1e-6, kernel="rbf", gamma=0.1, n_centers=3000, solver="cg"),
                                    *_data(100_000, 8, classes=False))),
        "pca-dense": ("KernelPCA.fit, eigen_solver='dense', n = 3,000",
                      lambda: fit(mercer.KernelPCA(n_components=10, kernel="rbf", gamma=0.1, eigen_solver="dense"),
                                  _data(3000, 8)[0])),
        "pca-lanczos": ("KernelPCA.fit, eigen_solver='arpack' (Lanczos), n = 12,000",
                        lambda: fit(mercer.KernelPCA(n_components=50, kernel="rbf", gamma=0.1, eigen_solver="arpack", tol=1e-10),
                                    _data(12000, 8)[0])),
        "logistic-exact": ("KernelLogisticRegression.fit, exact basis (dense eigh), n = 2,500",
                           lambda: fit(mercer.KernelLogisticRegression(C=1.0, kernel="rbf", gamma=0.1), *_data(2500, 8))),
        "nystroem-features": ("Nystroem.fit, 2,500 landmarks (dense eigh of K_MM)",
                              lambda: fit(mercer.Nystroem(n_components=2500, kernel="rbf", gamma=0.1), _data(5000, 8)[0])),
        "budget-svc": ("BudgetSVC.fit, 300 vectors, n = 40,000",
                       lambda: fit(mercer.BudgetSVC(n_vectors=300, C=1.0, kernel="rbf", gamma=0.1, max_iter=200), *_data(40000, 8))),
        "kmeans": ("KMeans.fit, n = 400,000, 64 clusters",
                   lambda: fit(mercer.KMeans(n_clusters=64, n_init=3, max_iter=300, tol=0), _data(400_000, 16)[0])),
        "kernel-kmeans": ("KernelKMeans.fit, n = 6,000",
                          lambda: fit(mercer.KernelKMeans(n_clusters=16, kernel="rbf", gamma=0.1, n_init=10, max_iter=300),
                                      _data(6000, 8)[0])),
        "agglomerative": ("KernelAgglomerative.fit, n = 8,000 (SciPy's linkage in a child process)",
                          lambda: fit(mercer.KernelAgglomerative(n_clusters=8, kernel="rbf", gamma=0.1, memory_budget=2**30),
                                      _data(8000, 8)[0])),
        "perceptron": ("KernelPerceptron.fit, n = 20,000",
                       lambda: fit(mercer.KernelPerceptron(kernel="rbf", gamma=0.5, max_iter=100, tol=None), *_data(20000, 8))),
        "mkl": ("MKLClassifier.fit, 3 kernels, n = 4,000",
                lambda: fit(mercer.MKLClassifier(kernels=["rbf", "laplacian", "linear"]),
                            *_data(4000, 8))),
        "gp-exact": ("GaussianProcessRegressor.fit (L-BFGS on the marginal likelihood), n = 2,500",
                     lambda: fit(mercer.GaussianProcessRegressor(n_restarts_optimizer=5), *_data(2500, 4, classes=False))),
        "gp-sparse": ("SparseGPRegressor.fit, 500 inducing points, n = 20,000",
                      lambda: fit(mercer.SparseGPRegressor(n_inducing=500, n_restarts_optimizer=3),
                                  *_data(20000, 4, classes=False))),
        "svc-predict": ("KernelSVC.predict, 1,000,000 rows",
                        lambda: ((lambda e=fitted(mercer.KernelSVC(C=10.0, kernel="rbf", gamma=0.125), *_data(3000, 8)),
                                  Xp=_data(1_000_000, 8, seed=1)[0]: (lambda: e.predict(Xp)))(), None)),
        "knn-predict": ("KernelKNeighborsClassifier.predict, 20,000 x 100,000",
                        lambda: ((lambda e=fitted(mercer.KernelKNeighborsClassifier(n_neighbors=5), *_data(100_000, 8)),
                                  Xp=_data(20_000, 8, seed=1)[0]: (lambda: e.predict(Xp)))(), None)),
    }


def _wait_for_workers(limit=120.0):
    t0 = time.perf_counter()
    while any(t.name.startswith("mercer ") and t.is_alive() for t in threading.enumerate()):
        if time.perf_counter() - t0 > limit:
            break
        time.sleep(0.05)


def trial_inprocess(build, delay):
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    call, est = build()
    sent = []
    # The latency counts from when the signal is due, not from when the timer thread got the GIL to
    # send it (a Ctrl-C from the terminal needs no GIL: a compiled loop holding it would otherwise
    # delay the timer too, and look instantaneous).
    due = time.perf_counter() + delay
    timer = threading.Timer(delay, lambda: (sent.append(due), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    try:
        call()
    except KeyboardInterrupt:
        caught = time.perf_counter()
    else:
        timer.cancel()
        timer.join()
        if sent:  # the signal arrived after the call returned: wait for it to be raised
            try:
                time.sleep(1.0)
            except KeyboardInterrupt:
                pass
        return None, None
    timer.join()
    unfitted = None
    if est is not None:  # no name_ attribute left (a GP, which predicts from its prior, passes check_is_fitted)
        unfitted = not [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]
        try:
            check_is_fitted(est)
            unfitted = unfitted and type(est).__sklearn_tags__(est).requires_fit is False
        except NotFittedError:
            pass
    return caught - sent[0], unfitted


def trial_cli(tmp: Path, delay):
    out = tmp / "m.mercer"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "mercer", "fit", "--data", str(tmp / "data.npy"), "--target", "-1",
                             "--model", "svc", "--preprocess", "none", "--holdout", "0", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("data:"):
            line = proc.stdout.readline()
        time.sleep(delay)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        done = time.perf_counter()
    finally:
        proc.kill()
        proc.communicate()
    if proc.returncode != 130:
        return None, None
    return done - sent, not out.exists() and not list(tmp.glob(".m.mercer*"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--spread", type=float, default=1.5, help="signal at 0.2 + U(0, spread) seconds")
    p.add_argument("--only", default="", help="comma-separated case names (default: all, and the CLI)")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import mercer

    for d in (8, 64):  # imports and numba's first compilation (cached) outside the timings
        mercer.KernelSVC().fit(*_data(300, d))

    rng = random.Random(0)
    table = cases()
    names = [s for s in args.only.split(",") if s] or [*table, "cli-fit-svc"]
    rows = []
    for name in names:
        lat, unf, early = [], [], 0
        if name == "cli-fit-svc":
            what = "`mercer fit --model svc`, n = 12,000, d = 8 (subprocess; exit status 130, no file)"
            with tempfile.TemporaryDirectory() as tmp:
                X, y = _data(12000, 8)
                np.save(Path(tmp) / "data.npy", np.column_stack([X, y]))
                for _ in range(args.trials):
                    t, ok = trial_cli(Path(tmp), 0.2 + rng.uniform(0, args.spread))
                    if t is None:
                        early += 1
                        continue
                    lat.append(t)
                    unf.append(ok)
        else:
            what, build = table[name]
            for _ in range(args.trials):
                try:
                    t, u = trial_inprocess(build, 0.2 + rng.uniform(0, args.spread))
                except Exception as exc:  # noqa: BLE001 -- a broken case is reported, the others still run
                    print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
                    t, u = None, None
                _wait_for_workers()
                if t is None:
                    early += 1
                    continue
                lat.append(t)
                unf.append(u)
        worst = max(lat) if lat else float("nan")
        row = (name, what, len(lat), early, worst, statistics.median(lat) if lat else float("nan"),
               "n/a" if not unf or unf[0] is None else ("yes" if all(unf) else "NO"))
        rows.append(row)
        print(f"{name:16s} worst {worst:6.3f} s  median {row[5]:6.3f} s  interrupted {len(lat)}/{args.trials}  "
              f"unfitted/no file: {row[6]}", flush=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# Ctrl-C latency",
        "",
        "```",
        "python " + " ".join([str(Path(sys.argv[0]).relative_to(ROOT)) if Path(sys.argv[0]).is_absolute()
                              and ROOT in Path(sys.argv[0]).parents else sys.argv[0], *(argv or sys.argv[1:])]),
        "```",
        "",
        f"Seconds from SIGINT (sent at 0.2 + U(0, {args.spread}) s into the call) to the KeyboardInterrupt "
        f"reaching the caller (CLI: to the process's exit), worst and median of the interrupted trials; "
        f"{os.cpu_count()} cores, load average {load:.1f} at the end. Goal: every worst under 1 s.",
        "",
        "| case | what runs | interrupted | finished first | worst (s) | median (s) | unfitted after (CLI: no file) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, what, k, early, worst, med, unf in rows:
        lines.append(f"| {name} | {what} | {k} | {early} | {worst:.3f} | {med:.3f} | {unf} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
