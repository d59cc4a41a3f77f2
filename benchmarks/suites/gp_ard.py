"""Per-feature length scales (ARD) against one length scale, for the exact GP on the UCI sets.

Split 0 of each set in /work/shared/data/uci, inputs and targets standardised with the training
statistics (as ``bench_gp.py``), a random subsample of ``--n-exact`` training rows, up to
``--n-test`` test rows. Three models, in the same process one after the other:

* mercer ``GaussianProcessRegressor(1.0 * RBF(sigma=sqrt(d)))``: one length scale;
* mercer ``GaussianProcessRegressor(1.0 * RBF(sigma=[sqrt(d)] * d))``: one per feature (ARD);
* scikit-learn ``GaussianProcessRegressor(C * RBF([sqrt(d)] * d) + WhiteKernel)`` (ARD, reference).

Both mercer models learn the noise (start 0.1) and the output scale; L-BFGS-B, one start, up to
``--max-iter`` iterations. RMSE and NLPD (of the noisy test targets) in standardised units; fit
time is wall clock with one torch / BLAS thread (the machine may be shared: compare within a row).

    python benchmarks/bench_gp_ard.py --out benchmarks/results/gp_ard.json
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Timer, git_state, machine_info, markdown_table, write_json  # noqa: E402
from bench_gp import UCI, load, nlpd, rmse  # noqa: E402

SETS = ["pol", "elevators", "bike", "kin40k", "protein", "keggdirected", "keggundirected"]


def rows_for(name: str, args) -> list[dict]:
    from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
    from sklearn.gaussian_process.kernels import RBF as SkRBF
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    from mercer.kernels import RBF
    from mercer.models.gp import GaussianProcessRegressor

    rng = np.random.default_rng(0)
    Xtr, ytr, Xte, yte = load(name, args.n_test, rng)
    n, d = Xtr.shape
    sub = rng.choice(n, min(n, args.n_exact), replace=False)
    X, y = Xtr[sub], ytr[sub]
    s0 = math.sqrt(d)
    out = []
    models = [("mercer GP, one length scale", lambda: 1.0 * RBF(sigma=s0)),
              ("mercer GP, ARD", lambda: 1.0 * RBF(sigma=[s0] * d))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, kernel in models:
            with Timer() as t:
                gp = GaussianProcessRegressor(kernel(), noise=0.1, max_iter=args.max_iter, random_state=0).fit(X, y)
            m, s = gp.predict(Xte, return_std=True)
            out.append({"data": name, "d": d, "model": label, "rmse": rmse(yte, m), "nlpd": nlpd(yte, m, s**2 + gp.noise_),
                        "fit_s": t.seconds, "lml": gp.log_marginal_likelihood_value_, "n_iter": gp.n_iter_})
        if args.sklearn:
            with Timer() as t:
                sk = SkGPR(ConstantKernel(1.0) * SkRBF([s0] * d) + WhiteKernel(0.1), random_state=0).fit(X, y)
            m, s = sk.predict(Xte, return_std=True)
            out.append({"data": name, "d": d, "model": "scikit-learn GPR, ARD", "rmse": rmse(yte, m),
                        "nlpd": nlpd(yte, m, s**2), "fit_s": t.seconds, "lml": sk.log_marginal_likelihood_value_,
                        "n_iter": None})
    for r in out:
        print(f"{r['data']:>15} {r['model']:<30} RMSE {r['rmse']:.4f}  NLPD {r['nlpd']:7.3f}  LML {r['lml']:9.1f}  "
              f"fit {r['fit_s']:6.1f} s", flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=SETS)
    p.add_argument("--n-exact", type=int, default=1000)
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--max-iter", type=int, default=200)
    p.add_argument("--no-sklearn", dest="sklearn", action="store_false")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not UCI.exists():
        sys.exit(f"UCI data not found at {UCI}")
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    rows = []
    with threadpool_limits(1):
        for name in args.data:
            rows += rows_for(name, args)
    table = markdown_table(rows, ["data", "d", "model", "rmse", "nlpd", "lml", "fit_s"])
    print(table)
    if args.out:
        write_json(args.out, {"args": vars(args) | {"out": str(args.out)}, "machine": machine_info(),
                              "git": git_state(), "rows": rows})
        args.out.with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
