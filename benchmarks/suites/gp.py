"""Gaussian processes, kernel hyperparameter learning and multiple kernel learning.

Part 1, UCI regression (split 0 of ``--uci-dir`` / ``$MERCER_UCI_DIR``; absent: skipped; inputs and targets standardised with
the training statistics; RMSE and NLPD in standardised target units). Every model uses an
isotropic RBF kernel with an output scale and learns its hyperparameters on the training set:

* mercer ``GaussianProcessRegressor`` (exact; L-BFGS on the log marginal likelihood), on a
  random subsample of ``--n-exact`` training rows (the exact GP is O(n^3));
* scikit-learn ``GaussianProcessRegressor`` (``C * RBF + WhiteKernel``), same subsample;
* mercer ``SparseGPRegressor`` (SGPR, ``--inducing`` k-means inducing points, learned), on up to
  ``--n-sparse`` training rows;
* mercer ``KernelRidgeCV`` (gamma and alpha learned on the closed-form LOO error), same
  subsample as the exact GP (no predictive variance: no NLPD);
* scikit-learn ``GridSearchCV`` over ``KernelRidge(kernel="rbf")``'s gamma (9 values) and alpha
  (5 values), 5-fold (3-fold with ``--quick``), same subsample.

NLPD is the mean negative log density of the test targets under N(mean, std^2 + noise).

Part 2, MKL: synthetic data whose signal lives in two feature groups with scales 1 and 20;
ALIGNF over RBF kernels on each group (``Columns``) against the best single RBF kernel (gamma
and alpha tuned on a validation split) and the best single base kernel; learned weights printed.

Timings are wall clock in one process, one torch / BLAS thread for everyone (the machine is
shared: compare ratios, not absolute times); the load average is recorded.

    python benchmarks/suites/gp.py --quick

Results: ``benchmarks/results/gp/latest.{json,md}`` (``quick.*`` with ``--quick``); ``mercer/sklearn``:
mercer's exact GP's fit time over scikit-learn's, KernelRidgeCV's over GridSearchCV's (same rows).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (Timer, git_state, machine_info, markdown_table, parse_suite_args, require_uci,  # noqa: E402
                     suite_parser, thread_limits, uci_dir, write_results)

log = logging.getLogger("gp")


def nlpd(y, mean, var):
    var = np.maximum(var, 1e-12)
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def rmse(y, mean):
    return float(np.sqrt(np.mean((y - mean) ** 2)))


def load(name, n_test_max, rng):
    from mercer.datasets import load_uci

    Xtr, ytr, Xte, yte = load_uci(name, uci_dir(), split=0)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    ym, ys = ytr.mean(), ytr.std()
    ytr, yte = (ytr - ym) / ys, (yte - ym) / ys
    if len(yte) > n_test_max:
        idx = rng.choice(len(yte), n_test_max, replace=False)
        Xte, yte = Xte[idx], yte[idx]
    return Xtr, ytr, Xte, yte


def uci_rows(name, args):
    from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
    from sklearn.gaussian_process.kernels import RBF as SkRBF
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    from mercer.kernels import RBF
    from mercer.models.gp import GaussianProcessRegressor, SparseGPRegressor
    from mercer.models.ridge import KernelRidgeCV

    rng = np.random.default_rng(0)
    Xtr, ytr, Xte, yte = load(name, args.n_test, rng)
    n, d = Xtr.shape
    sub = rng.choice(n, min(n, args.n_exact), replace=False)
    Xs, ys = Xtr[sub], ytr[sub]
    sub2 = rng.choice(n, min(n, args.n_sparse), replace=False)
    Xsp, ysp = Xtr[sub2], ytr[sub2]
    rows = []
    init = 1.0 * RBF(sigma=math.sqrt(d))  # length scale sqrt(d) on standardised inputs

    def row(model, n_fit, seconds, mean, var=None, extra=""):
        r = {"data": name, "model": model, "n_train": n_fit, "d": d, "n_test": len(yte), "rmse": rmse(yte, mean),
             "nlpd": nlpd(yte, mean, var) if var is not None else "n/a", "fit_s": seconds, "notes": extra}
        log.info("%s", r)
        rows.append(r)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Timer() as t:
            gp = GaussianProcessRegressor(init, noise=0.1, max_iter=args.max_iter, random_state=0).fit(Xs, ys)
        m, s = gp.predict(Xte, return_std=True)
        row("mercer GP (exact)", len(ys), t.seconds, m, s**2 + gp.noise_,
            f"LML {gp.log_marginal_likelihood_value_:.1f}; {gp.kernel_!r}, noise {gp.noise_:.3g}")
        if len(ys) <= args.n_sklearn and "sklearn" in args.refs:
            with Timer() as t:
                sk = SkGPR(ConstantKernel(1.0) * SkRBF(math.sqrt(d)) + WhiteKernel(0.1), alpha=1e-10,
                           random_state=0).fit(Xs, ys)
            m2, s2 = sk.predict(Xte, return_std=True)  # WhiteKernel: std includes the noise
            row("sklearn GPR (exact)", len(ys), t.seconds, m2, s2**2,
                f"LML {sk.log_marginal_likelihood_value_:.1f}; {sk.kernel_}")
        with Timer() as t:
            sg = SparseGPRegressor(n_inducing=args.inducing, kernel=init, noise=0.1, max_iter=args.max_iter,
                                   random_state=0).fit(Xsp, ysp)
        m3, s3 = sg.predict(Xte, return_std=True)
        row(f"mercer SGPR (M={args.inducing})", len(ysp), t.seconds, m3, s3**2 + sg.noise_,
            f"ELBO {sg.log_marginal_likelihood_value_:.1f}; noise {sg.noise_:.3g}")
        with Timer() as t:
            kr = KernelRidgeCV(kernel=RBF(gamma=1.0 / (2 * d)), alpha=0.1, max_iter=args.max_iter, random_state=0).fit(Xs, ys)
        row("mercer KernelRidgeCV (LOO)", len(ys), t.seconds, kr.predict(Xte), None,
            f"gamma {kr.kernel_.gamma:.3g}, alpha {kr.alpha_:.3g}, {kr.n_evals_} LOO evaluations (~1 fit each)")
        if args.grid and "sklearn" in args.refs:
            from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
            from sklearn.model_selection import GridSearchCV, KFold

            grid = {"gamma": np.logspace(-4, 0, 9), "alpha": np.logspace(-3, 1, 5)}
            with Timer() as t:
                gs = GridSearchCV(SkKernelRidge(kernel="rbf"), grid, cv=KFold(args.folds, shuffle=True, random_state=0),
                                  scoring="neg_mean_squared_error").fit(Xs, ys)
            row("sklearn GridSearchCV KernelRidge", len(ys), t.seconds, gs.predict(Xte), None,
                f"gamma {gs.best_params_['gamma']:.3g}, alpha {gs.best_params_['alpha']:.3g}, 9x5 grid x {args.folds} "
                f"folds = {9 * 5 * args.folds + 1} fits")
    return rows


def two_groups(n, seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, 3))
    B = 20.0 * rng.normal(size=(n, 3))
    y = np.sin(2 * A[:, 0]) + np.cos(A[:, 1]) + np.sin(B[:, 0] / 10) * (B[:, 1] / 20) + 0.1 * rng.normal(size=n)
    return np.hstack([A, B]), y


def mkl_rows(args):
    from mercer.kernels import RBF
    from mercer.kernels._columns import Columns
    from mercer.models.mkl import MKLClassifier, MKLRegressor
    from mercer.models.ridge import KernelRidge, KernelRidgeClassifier

    n_train, n_val, n_test = args.mkl_n, args.mkl_n // 2, args.mkl_n // 2
    X, y = two_groups(n_train + n_val + n_test, seed=1)
    Xtr, ytr = X[:n_train], y[:n_train]
    Xva, yva = X[n_train:n_train + n_val], y[n_train:n_train + n_val]
    Xte, yte = X[n_train + n_val:], y[n_train + n_val:]
    gA, gB = (0.1, 1.0, 10.0), (2.5e-4, 2.5e-3, 2.5e-2)
    base = [Columns(RBF(gamma=g), [0, 1, 2]) for g in gA] + [Columns(RBF(gamma=g), [3, 4, 5]) for g in gB]
    names = [f"A:rbf({g:g})" for g in gA] + [f"B:rbf({g:g})" for g in gB]
    alphas = (0.01, 0.1, 1.0)
    mse = lambda m, X_, y_: float(np.mean((m.predict(X_) - y_) ** 2))  # noqa: E731

    def tune(make):
        best = min(((mse(make(a).fit(Xtr, ytr), Xva, yva), a) for a in alphas))
        return best[1]

    rows = []
    with Timer() as t:
        a_mkl = tune(lambda a: MKLRegressor(base, alpha=a))
        mkl = MKLRegressor(base, alpha=a_mkl).fit(Xtr, ytr)
    rows.append({"model": "MKL ALIGNF (6 base kernels)", "test_mse": mse(mkl, Xte, yte), "alpha": a_mkl,
                 "fit_s": t.seconds})
    best_single = None
    with Timer() as t:
        for g in np.logspace(-4, 1, 11):
            for a in alphas:
                v = mse(KernelRidge(alpha=a, kernel=RBF(gamma=float(g))).fit(Xtr, ytr), Xva, yva)
                if best_single is None or v < best_single[0]:
                    best_single = (v, float(g), a)
    single = KernelRidge(alpha=best_single[2], kernel=RBF(gamma=best_single[1])).fit(Xtr, ytr)
    rows.append({"model": f"best single RBF on all features (gamma {best_single[1]:.3g})", "test_mse": mse(single, Xte, yte),
                 "alpha": best_single[2], "fit_s": t.seconds})
    best_base = None
    for k, nm in zip(base, names):
        for a in alphas:
            v = mse(KernelRidge(alpha=a, kernel=k).fit(Xtr, ytr), Xva, yva)
            if best_base is None or v < best_base[0]:
                best_base = (v, nm, k, a)
    bb = KernelRidge(alpha=best_base[3], kernel=best_base[2]).fit(Xtr, ytr)
    rows.append({"model": f"best single base kernel ({best_base[1]})", "test_mse": mse(bb, Xte, yte),
                 "alpha": best_base[3], "fit_s": float("nan")})
    with Timer() as t:
        a_ny = tune(lambda a: MKLRegressor(base, alpha=a, n_components=args.mkl_nystroem, random_state=0))
        ny = MKLRegressor(base, alpha=a_ny, n_components=args.mkl_nystroem, random_state=0).fit(Xtr, ytr)
    rows.append({"model": f"MKL ALIGNF, Nyström M={args.mkl_nystroem} per kernel", "test_mse": mse(ny, Xte, yte),
                 "alpha": a_ny, "fit_s": t.seconds})
    # classification: above/below the median, EasyMKL
    lab = lambda v: (v > np.median(ytr)).astype(int)  # noqa: E731
    with Timer() as t:
        clf = MKLClassifier(base, alpha=0.1).fit(Xtr, lab(ytr))
    singles = [KernelRidgeClassifier(alpha=0.1, kernel=RBF(gamma=float(g))).fit(Xtr, lab(ytr))
               for g in np.logspace(-4, 1, 11)]
    best_clf = max(singles, key=lambda m: m.score(Xva, lab(yva)))  # gamma chosen on the validation split
    weights = {"ALIGNF (regression)": dict(zip(names, np.round(mkl.weights_, 3).tolist())),
               "ALIGNF Nyström": dict(zip(names, np.round(ny.weights_, 3).tolist())),
               "EasyMKL (classification)": dict(zip(names, np.round(clf.weights_, 3).tolist()))}
    cls = {"easymkl_test_accuracy": clf.score(Xte, lab(yte)),
           "best_single_rbf_test_accuracy": best_clf.score(Xte, lab(yte)),
           "best_single_rbf_gamma": float(best_clf.kernel.gamma), "easymkl_fit_s": t.seconds}
    return rows, weights, cls


PAIRS = {"mercer GP (exact)": "sklearn GPR (exact)", "mercer KernelRidgeCV (LOO)": "sklearn GridSearchCV KernelRidge"}


def add_ratios(rows: list[dict]) -> None:
    for r in rows:
        peer = next((q for q in rows if q["data"] == r["data"] and q["model"] == PAIRS.get(r["model"])), None)
        if peer and peer["fit_s"] > 0:
            r["mercer/sklearn"] = r["fit_s"] / peer["fit_s"]


def main(argv=None):
    p = suite_parser("gp", __doc__, refs=("sklearn",), data=("uci",),
                     quick="one data set (elevators), 500 rows, SGPR on 2,000 rows, MKL on 500 (about a minute)")
    p.add_argument("--data", nargs="*", default=None)
    p.add_argument("--n-exact", type=int, default=None, help="training rows for the exact GP / sklearn / KRR")
    p.add_argument("--n-sklearn", type=int, default=5000, help="largest n on which scikit-learn's GPR is run")
    p.add_argument("--n-sparse", type=int, default=None, help="training rows for SGPR")
    p.add_argument("--inducing", type=int, default=None)
    p.add_argument("--n-test", type=int, default=2000)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--mkl-n", type=int, default=None)
    p.add_argument("--mkl-nystroem", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-grid", dest="grid", action="store_false", help="skip scikit-learn's GridSearchCV baseline")
    args = parse_suite_args(p, argv)
    q = args.quick
    args.data = args.data or (["elevators"] if q else ["pol", "elevators", "bike", "kin40k", "protein"])
    args.n_exact = args.n_exact or (500 if q else 1000)
    args.folds = 3 if q else 5
    args.n_sparse = args.n_sparse or (2000 if q else 10000)
    args.inducing = args.inducing or 128
    args.mkl_n = args.mkl_n or (500 if q else 2000)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    t0 = time.time()
    result = {"machine": machine_info(), "git": git_state(), "loadavg_start": os.getloadavg(), "args": vars(args)}
    rows = []
    uci = require_uci("the UCI part")
    with thread_limits(args.threads):
        for name in args.data if uci is not None else []:
            if not (uci / name / "data.csv.gz").is_file():
                log.warning("skipping %s: %s not found", name, uci / name)
                continue
            rows.extend(uci_rows(name, args))
        add_ratios(rows)
        mrows, weights, cls = mkl_rows(args)
    result.update(uci=rows, mkl=mrows, mkl_weights=weights, mkl_classification=cls,
                  loadavg_end=os.getloadavg(), total_s=time.time() - t0)
    md = ["## UCI regression (split 0, standardised targets)", "",
          markdown_table(rows, ["data", "model", "n_train", "d", "n_test", "rmse", "nlpd", "fit_s", "mercer/sklearn",
                                "notes"]) if rows else "(skipped: no UCI data)", "",
          "## MKL: signal in two feature groups with scales 1 and 20", "",
          markdown_table(mrows, ["model", "test_mse", "alpha", "fit_s"]), "", "Learned weights:", ""]
    for k, w in weights.items():
        md.append(f"- {k}: " + ", ".join(f"{n} {v:.3f}" for n, v in w.items()))
    md += ["", f"EasyMKL classification: {cls}", "",
           f"Machine: {result['machine']}; git {result['git']}; load {result['loadavg_start']} -> {result['loadavg_end']}; "
           f"total {result['total_s']:.0f} s"]
    print("\n".join(md))
    write_results(args, result, "\n".join(md), title="Gaussian processes, hyperparameter learning, MKL")


if __name__ == "__main__":
    main()
