"""Experiment behind docs/decisions/0003-nystroem-intercept.md. Test RMSE of Nyström kernel ridge with and without an intercept, against scikit-learn's
``make_pipeline(Nystroem(gamma, n_components=M), Ridge(alpha))``, on the seven UCI sets.

An accuracy comparison, not a timing. Per set (split ``--split`` of ``$MERCER_UCI_DIR``): the
inputs are standardised with the training set's mean and standard deviation (a user's
``StandardScaler``), the target is left as it is. Same kernel (RBF), ``gamma`` (default 1 / d,
scikit-learn's ``Nystroem`` default), ``alpha`` (default 1.0, ``Ridge``'s default) and ``M``.

``alpha`` means the same in both: ``Ridge`` on the Nyström features ``phi(x) = k(x, Z) K_MM^{-1/2}``
minimises ``||y - Phi w - b||^2 + alpha ||w||^2``; with ``w = K_MM^{1/2} beta`` this is
``||y - K_nM beta - b||^2 + alpha beta^T K_MM beta``, mercer's objective with the same ``alpha``
(no factor n). Columns:

* ``sklearn``: the pipeline (its centres: a random permutation's first ``M`` training rows);
* ``mercer, no intercept`` / ``mercer, intercept``: ``NystroemKernelRidge`` with the pipeline's
  centres (``centers=nystroem.components_``), ``fit_intercept=False`` / ``True``, float64 tiles and
  the direct solver (the exact minimiser of each);
* ``mercer, intercept, CG f32``: the same centres, ``fit_intercept=True``, ``solver="cg"`` with
  float32 tiles (the default tiles), and ``CG iterations``: its ``n_iter_`` against that of the same
  fit without intercept (mean over seeds);
* ``mercer default``: ``NystroemKernelRidge(alpha, gamma=gamma, centers=Z)`` (the pipeline's centres)
  and ``NystroemKernelRidge(alpha, gamma=gamma, n_centers=M, random_state=seed)`` (its own uniform
  centres), every other parameter at its default (float32 tiles, intercept; the solver "auto"
  picks: direct up to 1050 + 16.5 d centres, CG above).

RMSE is averaged over ``--seeds`` seeds (the centres' draw). Run:
``python benchmarks/experiments/intercept.py [--M 1000] [--seeds 3] [--sets pol,elevators]``.

``--small-alpha`` runs instead the case where the former rank-one centring made CG break down:
standardised protein, M = 2,000, alpha = 1e-6 n, gamma = 0.1, float32 tiles (CG), with and without
the intercept, one row per seed (test RMSE, CG iterations, final relative residual).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import markdown_table, uci_dir  # noqa: E402

SETS = ["pol", "elevators", "bike", "kin40k", "protein", "keggdirected", "keggundirected"]


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def one_set(name: str, args) -> dict:
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline

    from mercer.datasets import load_uci
    from mercer.models import NystroemKernelRidge

    Xtr, ytr, Xte, yte = load_uci(name, uci_dir(), split=args.split)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    gamma = args.gamma if args.gamma is not None else 1.0 / Xtr.shape[1]
    res = {k: [] for k in ("sklearn", "mercer, no intercept", "mercer, intercept", "mercer, intercept, CG f32",
                           "mercer default, same centres", "mercer default, own centres")}
    iters = {False: [], True: []}
    for seed in range(args.seeds):
        pipe = make_pipeline(Nystroem(gamma=gamma, n_components=args.M, random_state=seed), Ridge(alpha=args.alpha))
        res["sklearn"].append(rmse(pipe.fit(Xtr, ytr).predict(Xte), yte))
        Z = pipe[0].components_
        for fi, col in ((False, "mercer, no intercept"), (True, "mercer, intercept")):
            m = NystroemKernelRidge(alpha=args.alpha, gamma=gamma, centers=Z, fit_intercept=fi, dtype="float64",
                                    solver="direct")
            res[col].append(rmse(m.fit(Xtr, ytr).predict(Xte), yte))
        for fi in (False, True):
            m = NystroemKernelRidge(alpha=args.alpha, gamma=gamma, centers=Z, fit_intercept=fi, solver="cg")
            m.fit(Xtr, ytr)
            iters[fi].append(int(m.n_iter_[0]))
            if fi:
                res["mercer, intercept, CG f32"].append(rmse(m.predict(Xte), yte))
        m = NystroemKernelRidge(alpha=args.alpha, gamma=gamma, centers=Z)
        res["mercer default, same centres"].append(rmse(m.fit(Xtr, ytr).predict(Xte), yte))
        m = NystroemKernelRidge(alpha=args.alpha, gamma=gamma, n_centers=args.M, random_state=seed)
        res["mercer default, own centres"].append(rmse(m.fit(Xtr, ytr).predict(Xte), yte))
    row = {"set": name, "n_train": len(ytr), "d": Xtr.shape[1],
           "mean(y) / sd(y)": f"{ytr.mean():.3g} / {ytr.std():.3g}"}
    row.update({k: f"{np.mean(v):.4f}" for k, v in res.items()})
    row["CG iterations (no intercept / intercept)"] = f"{np.mean(iters[False]):.1f} / {np.mean(iters[True]):.1f}"
    return row


def small_alpha(args) -> list[dict]:
    import warnings

    from mercer.datasets import load_uci
    from mercer.models import NystroemKernelRidge

    Xtr, ytr, Xte, yte = load_uci("protein", uci_dir(), split=args.split)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    rows = []
    for seed in range(args.seeds):
        row = {"seed": seed}
        for fi in (False, True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                m = NystroemKernelRidge(alpha=1e-6 * len(ytr), gamma=0.1, n_centers=2000, random_state=seed,
                                        fit_intercept=fi).fit(Xtr, ytr)
            key = "intercept" if fi else "no intercept"
            row[f"{key}: RMSE"] = f"{rmse(m.predict(Xte), yte):.4f}"
            row[f"{key}: CG iterations"] = int(m.n_iter_[0])
            row[f"{key}: residual"] = f"{float(m.residual_[0]):.1e}" + (" (warned)" if caught else "")
        rows.append(row)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, default=1000)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=None, help="default: 1 / n_features")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--small-alpha", action="store_true", help="the protein case at alpha = 1e-6 n (see above)")
    args = p.parse_args(argv)
    if uci_dir() is None:
        print("skipped: UCI data not found (set MERCER_UCI_DIR)")
        return
    if args.small_alpha:
        print("Standardised protein, M = 2,000, alpha = 1e-6 n, gamma = 0.1, float32 tiles, CG\n")
        print(markdown_table(small_alpha(args)))
        return
    rows = [one_set(name, args) for name in args.sets.split(",")]
    print(f"Test RMSE, M = {args.M}, alpha = {args.alpha}, gamma = {args.gamma or '1/d'}, split {args.split}, "
          f"mean over {args.seeds} seeds\n")
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
