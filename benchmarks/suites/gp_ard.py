"""Per-feature length scales (ARD) against one length scale, for the exact GP on the UCI sets.

Split 0 of each set in ``--uci-dir`` / ``$MERCER_UCI_DIR`` (absent: skipped), inputs and targets standardised with the training
statistics (as ``bench_gp.py``), a random subsample of ``--n-exact`` training rows, up to
``--n-test`` test rows. Three models, in the same process one after the other:

* mercer ``GaussianProcessRegressor(1.0 * RBF(sigma=sqrt(d)))``: one length scale;
* mercer ``GaussianProcessRegressor(1.0 * RBF(sigma=[sqrt(d)] * d))``: one per feature (ARD);
* scikit-learn ``GaussianProcessRegressor(C * RBF([sqrt(d)] * d) + WhiteKernel)`` (ARD, reference).

Both mercer models learn the noise (start 0.1) and the output scale; L-BFGS-B, one start, up to
``--max-iter`` iterations. RMSE and NLPD (of the noisy test targets) in standardised units; fit
time is wall clock with one torch / BLAS thread (the machine may be shared: compare within a row).

    python benchmarks/suites/gp_ard.py            # results/gp_ard/latest.{json,md}
    python benchmarks/suites/gp_ard.py --quick    # elevators only, 300 rows

``mercer/sklearn``: each mercer model's fit time over scikit-learn's ARD GP's on the same rows.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gp.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # _common.py
from _common import (SkipSuite, Timer, git_state, machine_info, markdown_table, parse_suite_args,  # noqa: E402
                     require_uci, suite_parser, thread_limits, write_results)
from gp import load, nlpd, rmse  # noqa: E402

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
        if args.sklearn and "sklearn" in args.refs:
            with Timer() as t:
                sk = SkGPR(ConstantKernel(1.0) * SkRBF([s0] * d) + WhiteKernel(0.1), random_state=0).fit(X, y)
            m, s = sk.predict(Xte, return_std=True)
            out.append({"data": name, "d": d, "model": "scikit-learn GPR, ARD", "rmse": rmse(yte, m),
                        "nlpd": nlpd(yte, m, s**2), "fit_s": t.seconds, "lml": sk.log_marginal_likelihood_value_,
                        "n_iter": None})
    ref = next((r for r in out if r["model"].startswith("scikit-learn")), None)
    for r in out:
        if ref is not None and r is not ref:
            r["mercer/sklearn"] = r["fit_s"] / ref["fit_s"]
    for r in out:
        print(f"{r['data']:>15} {r['model']:<30} RMSE {r['rmse']:.4f}  NLPD {r['nlpd']:7.3f}  LML {r['lml']:9.1f}  "
              f"fit {r['fit_s']:6.1f} s", flush=True)
    return out


def main(argv=None):
    p = suite_parser("gp_ard", __doc__.splitlines()[0], refs=("sklearn",), data=("uci",),
                     quick="elevators only, 300 training rows, 50 iterations")
    p.add_argument("--data", nargs="+", default=None, help=f"UCI sets (default {' '.join(SETS)})")
    p.add_argument("--n-exact", type=int, default=None, help="training rows (default 1000; --quick 300)")
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--max-iter", type=int, default=None, help="L-BFGS iterations (default 200; --quick 50)")
    p.add_argument("--no-sklearn", dest="sklearn", action="store_false", help="= --refs none")
    args = parse_suite_args(p, argv)
    args.data = args.data or (["elevators"] if args.quick else SETS)
    args.n_exact = args.n_exact or (300 if args.quick else 1000)
    args.max_iter = args.max_iter or (50 if args.quick else 200)
    if require_uci("gp_ard") is None:
        raise SkipSuite("gp_ard: nothing to run without the UCI data")
    torch.set_num_threads(1)
    rows = []
    with thread_limits(1):
        for name in args.data:
            rows += rows_for(name, args)
    table = markdown_table(rows, ["data", "d", "model", "rmse", "nlpd", "lml", "fit_s", "mercer/sklearn"])
    print(table)
    write_results(args, {"args": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info(),
                         "git": git_state(), "rows": rows},
                  f"Machine: {machine_info()}; git {git_state()}\n\n{table}",
                  title="Gaussian process: per-feature length scales (ARD) vs one")


if __name__ == "__main__":
    main()
