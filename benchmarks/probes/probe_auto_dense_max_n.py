"""Probe of ``AUTO_DENSE_MAX_N`` (mercer/linalg/_eig.py): mercer.linalg.top_eigenpairs against ARPACK
(scipy eigsh) on RBF Gram matrices, and dense LAPACK against Lanczos for small n (``method="auto"``'s
crossover). What was measured and decided: docs/decisions/0001-eigensolver-auto-dense-crossover.md.

    python benchmarks/probes/probe_auto_dense_max_n.py [--sizes 2000 5000 10000] [--repeats 3] [--threads 2]
    python benchmarks/probes/probe_auto_dense_max_n.py --quick     # n = 1000; crossover at 200, 500, 1000

Data: the UCI "pol" set from ``$MERCER_UCI_DIR`` (standardised, 26 inputs; absent: a synthetic
stand-in of the same dimension, and the output says so), RBF with
gamma = 1 / n_features (scikit-learn's default), Gram computed once per size; K_c = H K H is what
KernelPCA decomposes. For every size it prints the best of ``--repeats`` interleaved runs of:

* ARPACK: ``scipy.sparse.linalg.eigsh(K_c, k=10, which="LA", tol=0, v0=uniform(-1, 1))``, as
  scikit-learn's KernelPCA(eigen_solver="arpack") calls it (matvecs counted);
* mercer lanczos (default block k + 10 = 20, and block_size=1) and randomized on the dense
  tensor, and lanczos on a callable ``V -> K_c @ V``;
* dense LAPACK (``method="dense"``) up to n = 5000;
* for context, scikit-learn's KernelPCA(eigen_solver="arpack").fit (Gram + centring + ARPACK).

A second table times dense against lanczos for small n (the ``auto`` crossover). The machine's
load average is printed: on a shared 2-core machine the numbers move a lot with other processes.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, eigsh

from mercer.linalg import top_eigenpairs

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _common import uci_dir  # noqa: E402


def _data_file() -> pathlib.Path | None:
    root = uci_dir()
    return None if root is None else root / "pol" / "data.csv.gz"


def load(n: int) -> np.ndarray:
    data = _data_file()
    if data is not None and data.exists():
        X = np.loadtxt(data, delimiter=",")[:, :-1]
    else:  # synthetic stand-in with a similar dimension
        print("(UCI pol not found, MERCER_UCI_DIR unset or wrong: synthetic data)")
        rng = np.random.default_rng(0)
        X = rng.standard_normal((15000, 5)) @ rng.standard_normal((5, 26)) + 0.3 * rng.standard_normal((15000, 26))
    X = X[np.random.default_rng(0).choice(len(X), n, replace=False)]
    return (X - X.mean(0)) / np.maximum(X.std(0), 1e-12)


def rbf_gram(X: np.ndarray) -> torch.Tensor:
    Xt = torch.from_numpy(X)
    sq = (Xt * Xt).sum(1)
    D = (sq[:, None] + sq[None, :] - 2 * Xt @ Xt.T).clamp_min_(0)
    return torch.exp(D.mul_(-1.0 / X.shape[1]))


def centred(K: torch.Tensor) -> torch.Tensor:
    m = K.mean(0)
    return K - m[None, :] - m[:, None] + m.mean()


def arpack(Kc: np.ndarray, k: int):
    count = [0]

    def mv(x):
        count[0] += 1
        return Kc @ x

    n = Kc.shape[0]
    v0 = np.random.RandomState(0).uniform(-1, 1, n)
    w, V = eigsh(LinearOperator((n, n), matvec=mv, dtype=Kc.dtype), k=k, which="LA", tol=0, v0=v0)
    return w[::-1], V[:, ::-1], count[0]


def best_of(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 1000; the crossover at 200, 500, 1000")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="default 2000 5000 10000")
    ap.add_argument("--small", type=int, nargs="*", default=None, help="default 200 500 1000 2000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sklearn", action="store_true", help="also time sklearn KernelPCA(arpack).fit")
    args = ap.parse_args(argv)
    args.sizes = args.sizes or ([1000] if args.quick else [2000, 5000, 10000])
    args.small = args.small if args.small is not None else ([200, 500, 1000] if args.quick else [200, 500, 1000, 2000])
    if args.threads:
        import threadpoolctl
        torch.set_num_threads(args.threads)
        threadpoolctl.threadpool_limits(args.threads)
    k = 10
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()}")
    print(f"{'n':>6} {'method':<28} {'time (s)':>9} {'products':>9} {'max rel dval':>13} {'min |cos|':>10}")
    for n in args.sizes:
        X = load(n)
        Kc = centred(rbf_gram(X))
        Kc_np = Kc.numpy()
        reps = args.repeats if n <= 5000 else max(1, args.repeats - 1)
        t_ref, (w_ref, V_ref, mv) = best_of(lambda: arpack(Kc_np, k), reps)
        print(f"{n:>6} {'ARPACK eigsh (sklearn call)':<28} {t_ref:>9.3f} {mv:>9} {'-':>13} {'-':>10}", flush=True)
        cases = [("lanczos", Kc, {}), ("lanczos block_size=1", Kc, {"block_size": 1}),
                 ("randomized", Kc, {}), ("lanczos (callable A @ V)", lambda V: Kc @ V, {"n": n}),
                 ("lanczos block_size=1 (call.)", lambda V: Kc @ V, {"n": n, "block_size": 1})]
        if n <= 5000:
            cases.append(("dense", Kc, {}))
        for name, A, kw in cases:
            method = name.split()[0]
            r = reps if method != "dense" else 1
            t, res = best_of(lambda: top_eigenpairs(A, k, method=method, **kw), r)
            dval = np.max(np.abs(res.values.numpy() - w_ref) / np.abs(w_ref))
            cos = np.min(np.abs(np.sum(res.vectors.numpy() * V_ref, axis=0)))
            print(f"{n:>6} {name:<28} {t:>9.3f} {res.iterations:>9} {dval:>13.1e} {cos:>10.8f}   "
                  f"({t / t_ref:.2f}x ARPACK)", flush=True)
        if args.sklearn:
            from sklearn.decomposition import KernelPCA
            t, _ = best_of(lambda: KernelPCA(k, kernel="rbf", eigen_solver="arpack", random_state=0).fit(X), 1)
            print(f"{n:>6} {'sklearn KernelPCA(arpack).fit':<28} {t:>9.3f}", flush=True)
        del Kc, Kc_np
    print("\nauto crossover (k = 10): dense LAPACK vs lanczos")
    for n in args.small:
        Kc = centred(rbf_gram(load(n)))
        row = []
        for method, kw in (("dense", {}), ("lanczos", {}), ("lanczos b=1", {"block_size": 1}), ("randomized", {})):
            t, _ = best_of(lambda: top_eigenpairs(Kc, k, method=method.split()[0], **kw), args.repeats)
            row.append(f"{method} {t * 1e3:8.1f} ms")
        print(f"{n:>6}  " + "   ".join(row), flush=True)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
