"""Benchmark: polynomial sketches, sketched kernel ridge regression, approximate kernel PCA.

Three parts, each measuring mercer and its reference side by side in one process and one run:

1. Kernel approximation error of the polynomial kernel ``(gamma <x, y> + 1)^p`` (``p = 2`` and
   ``3``, ``gamma = 1/d``) on a 1,000-point sample of the training split: max and mean
   ``|k_m(x, y) - k(x, y)|`` over all 1,000 x 1,000 pairs for mercer's ``TensorSketch`` and
   ``RandomMaclaurin`` and scikit-learn's ``PolynomialCountSketch`` (the same construction as
   TensorSketch; torch's CPU generator and numpy's RandomState are both MT19937 and draw the
   same hashes from the same seed, so sklearn gets seeds ``1000 + s`` here), as ``m`` grows; the mean over ``--seeds`` seeds, the fitted slope of
   log(mean error) against log(m) (theory: -1/2), and the transform time.
2. ``SketchedKernelRidge`` (Gaussian, Hadamard and subsampling sketches, ``m`` in a few values)
   against exact kernel ridge regression (mercer's ``KernelRidge`` and scikit-learn's), RBF kernel,
   the same ``gamma = 1/d`` and ``alpha``: fit time, test RMSE, ratio to the exact RMSE.
3. ``ApproximateKernelPCA`` (Nyström with M uniform landmarks; random Fourier features with m
   frequencies) against exact ``KernelPCA`` (mercer, Lanczos) and scikit-learn's ``KernelPCA``
   (arpack), 10 components, RBF: fit time and the largest relative eigenvalue error.

Data: UCI ``kin40k`` (d = 8; ``--dataset``), split 0, from ``--uci-dir`` / ``$MERCER_UCI_DIR``
(absent: skipped), X and y
standardised with the training split's statistics. Timings are single runs in one process
(torch with all cores), on a machine shared with other work: the load average is recorded with
every row, compare ratios within a row group, not absolute seconds.

Run (from the repository root)::

    .venv/bin/python benchmarks/suites/sketch.py --quick      # n = 1,500 ridge / PCA, m up to 256, 2 seeds
    .venv/bin/python benchmarks/suites/sketch.py              # n = 8,000, m up to 4,096

Results: ``benchmarks/results/sketch/latest.{json,md}`` (``quick.*`` with ``--quick``). Every row is
relative to scikit-learn's exact model (``--refs`` must keep sklearn).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (SkipSuite, Timer, git_state, load_average, machine_info, markdown_table,  # noqa: E402
                     parse_suite_args, suite_parser, uci_dir, write_results)

log = logging.getLogger("sketch")


def load(dataset: str):
    from mercer.datasets import load_uci

    Xtr, ytr, Xte, yte = load_uci(dataset, uci_dir(), split=0)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    ym, ys = ytr.mean(), ytr.std() or 1.0
    return (Xtr - mu) / sd, (ytr - ym) / ys, (Xte - mu) / sd, (yte - ym) / ys


def loadavg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# -- 1. kernel approximation error -----------------------------------------------------------------
def approximation_error(X, degrees, ms, seeds):
    from sklearn.kernel_approximation import PolynomialCountSketch

    from mercer.approx._sketch import RandomMaclaurin, TensorSketch
    from mercer.kernels import Polynomial

    d = X.shape[1]
    gamma = 1.0 / d
    methods = {
        "mercer TensorSketch": lambda p, m, s: TensorSketch(p, gamma, 1.0, m, random_state=s),
        "mercer RandomMaclaurin": lambda p, m, s: RandomMaclaurin(p, gamma, 1.0, m, random_state=s),
        "sklearn PolynomialCountSketch": lambda p, m, s: PolynomialCountSketch(degree=p, gamma=gamma, coef0=1.0,
                                                                                n_components=m, random_state=1000 + s),
    }
    rows, slopes = [], []
    for p in degrees:
        K = Polynomial(degree=p, gamma=gamma, coef0=1.0)(torch.as_tensor(X)).numpy()
        for name, make in methods.items():
            means = []
            for m in ms:
                mean_err, max_err, secs = [], [], []
                for s in range(seeds):
                    t = make(p, m, s).fit(X)
                    with Timer() as tm:
                        Z = t.transform(X)
                    E = np.abs(Z @ Z.T - K)
                    mean_err.append(E.mean())
                    max_err.append(E.max())
                    secs.append(tm.seconds)
                means.append(np.mean(mean_err))
                rows.append({"degree": p, "method": name, "m": m, "mean |k_m - k|": float(np.mean(mean_err)),
                             "max |k_m - k|": float(np.mean(max_err)), "mean |k|": float(np.abs(K).mean()),
                             "transform s": float(np.median(secs)), "load": loadavg()})
            slope = float(np.polyfit(np.log(ms), np.log(means), 1)[0])
            slopes.append({"degree": p, "method": name, "slope of log mean error vs log m": slope})
            log.info("degree %d %s: mean errors %s, slope %.3f", p, name, np.round(means, 4), slope)
    return rows, slopes


# -- 2. sketched kernel ridge -------------------------------------------------------------------------
def sketched_ridge(Xtr, ytr, Xte, yte, ms, alpha):
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

    from mercer.models.ridge import KernelRidge
    from mercer.models.ridge import SketchedKernelRidge

    gamma = 1.0 / Xtr.shape[1]
    rmse = lambda p: float(np.sqrt(np.mean((p - yte) ** 2)))  # noqa: E731
    rows = []
    with Timer() as t:
        sk = SkKernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(Xtr, ytr)
    sk_time, sk_rmse = t.seconds, rmse(sk.predict(Xte))
    rows.append({"model": "sklearn KernelRidge (exact)", "m": len(Xtr), "fit s": sk_time, "test RMSE": sk_rmse,
                 "RMSE / exact": 1.0, "time / sklearn exact": 1.0, "load": loadavg()})
    del sk
    with Timer() as t:
        ex = KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(Xtr, ytr)
    ex_rmse = rmse(ex.predict(Xte))
    rows.append({"model": "mercer KernelRidge (exact)", "m": len(Xtr), "fit s": t.seconds, "test RMSE": ex_rmse,
                 "RMSE / exact": ex_rmse / sk_rmse, "time / sklearn exact": t.seconds / sk_time, "load": loadavg()})
    del ex
    for sketch in ("gaussian", "hadamard", "subsample"):
        for m in ms:
            with Timer() as t:
                model = SketchedKernelRidge(alpha=alpha, gamma=gamma, n_components=m, sketch=sketch,
                                            random_state=0).fit(Xtr, ytr)
            r = rmse(model.predict(Xte))
            rows.append({"model": f"mercer SketchedKernelRidge ({sketch})", "m": m, "fit s": t.seconds,
                         "test RMSE": r, "RMSE / exact": r / sk_rmse, "time / sklearn exact": t.seconds / sk_time,
                         "load": loadavg()})
            log.info("sketch %s m=%d: %.2f s, RMSE %.4f (exact %.4f)", sketch, m, t.seconds, r, sk_rmse)
    return rows


# -- 3. approximate kernel PCA ----------------------------------------------------------------------
def approx_pca(X, n_features, k=10):
    from sklearn.decomposition import KernelPCA as SkKernelPCA

    from mercer.models.decomposition import ApproximateKernelPCA
    from mercer.models.decomposition import KernelPCA

    gamma = 1.0 / X.shape[1]
    rows = []
    with Timer() as t:
        sk = SkKernelPCA(k, kernel="rbf", gamma=gamma, eigen_solver="arpack", random_state=0).fit(X)
    ref, sk_time = sk.eigenvalues_, t.seconds
    del sk
    rows.append({"model": "sklearn KernelPCA (arpack, exact)", "features": len(X), "fit s": sk_time,
                 "max rel eigenvalue error": 0.0, "time / sklearn": 1.0, "load": loadavg()})
    with Timer() as t:
        ex = KernelPCA(k, kernel="rbf", gamma=gamma, eigen_solver="lanczos", random_state=0).fit(X)
    rows.append({"model": "mercer KernelPCA (lanczos, exact)", "features": len(X), "fit s": t.seconds,
                 "max rel eigenvalue error": float(np.abs(ex.eigenvalues_ - ref).max() / ref[0]),
                 "time / sklearn": t.seconds / sk_time, "load": loadavg()})
    del ex
    for approximation in ("nystroem", "rff"):
        for M in n_features:
            with Timer() as t:
                model = ApproximateKernelPCA(k, gamma=gamma, approximation=approximation, n_features=M,
                                             random_state=0).fit(X)
            err = float(np.abs(model.eigenvalues_ - ref).max() / ref[0])
            rows.append({"model": f"mercer ApproximateKernelPCA ({approximation})",
                         "features": model.feature_map_.n_features_out_, "fit s": t.seconds,
                         "max rel eigenvalue error": err, "time / sklearn": t.seconds / sk_time, "load": loadavg()})
            log.info("%s M=%d: %.2f s, eig error %.4f", approximation, M, t.seconds, err)
    return rows


def main(argv=None):
    ap = suite_parser("sketch", __doc__.split("\n\n")[0], refs=("sklearn",), refs_required=True, data=("uci",),
                      quick="n = 1,500, m up to 256, 2 seeds (about a minute)")
    ap.add_argument("--dataset", default="kin40k")
    ap.add_argument("--alpha", type=float, default=1e-2)
    ap.add_argument("--seeds", type=int, default=None, help="seeds of the approximation error (default 3; --quick 2)")
    args = parse_suite_args(ap, argv)
    args.seeds = args.seeds or (2 if args.quick else 3)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    if uci_dir() is None or not (uci_dir() / args.dataset).is_dir():
        raise SkipSuite(f"sketch: UCI {args.dataset} not found (set MERCER_UCI_DIR or --uci-dir)")

    n_ridge = 1500 if args.quick else 8000
    ms_sketch = [64, 256] if args.quick else [64, 256, 1024, 4096]
    ms_ridge = [100, 400] if args.quick else [200, 800, 2000]
    n_pca = 1500 if args.quick else 8000
    feats_pca = [100, 400] if args.quick else [200, 800]

    Xtr, ytr, Xte, yte = load(args.dataset)
    sample = np.random.default_rng(0).choice(len(Xtr), 1000, replace=False)
    result = {"machine": machine_info(), "code": git_state(), "load_start": load_average(),
              "dataset": f"UCI {args.dataset}, split 0, standardised; d = {Xtr.shape[1]}",
              "settings": {"quick": args.quick, "alpha": args.alpha, "gamma": 1.0 / Xtr.shape[1],
                           "seeds": args.seeds, "n_ridge": n_ridge, "n_test": len(Xte), "n_pca": n_pca}}
    err_rows, slopes = approximation_error(Xtr[sample], [2, 3], ms_sketch, args.seeds)
    ridge_rows = sketched_ridge(Xtr[:n_ridge], ytr[:n_ridge], Xte, yte, ms_ridge, args.alpha)
    pca_rows = approx_pca(Xtr[:n_pca], feats_pca)
    result.update(approximation=err_rows, slopes=slopes, ridge=ridge_rows, pca=pca_rows, load_end=load_average())

    md = [result["machine"], "", f"code: {result['code']}; load {result['load_start']} -> "
          f"{result['load_end']}", "", result["dataset"], "",
          f"## Kernel approximation error (1,000-point sample, gamma = 1/d, coef0 = 1, mean of {args.seeds} seeds)",
          "", markdown_table(err_rows), "", markdown_table(slopes), "",
          f"## Sketched kernel ridge (RBF, n = {n_ridge:,}, {len(Xte):,} test rows, alpha = {args.alpha})", "",
          markdown_table(ridge_rows), "", f"## Approximate kernel PCA (RBF, n = {n_pca:,}, 10 components)", "",
          markdown_table(pca_rows), ""]
    print("\n".join(md))
    write_results(args, result, "\n".join(md), title="Sketches: polynomial sketches, sketched ridge, approximate PCA")


if __name__ == "__main__":
    main()
