"""Benchmark: kernel perceptron and kernel logistic regression against scikit-learn's linear
models on lifted features (seed 001's "linear classifiers on lifted features"), side by side.

Data: ``digits`` (1,797 x 64, 10 classes, pixels / 16) and ``breast_cancer`` (569 x 30, 2
classes, standardised with the training statistics); a stratified 70/30 split (seed 0).
RBF kernel, ``gamma = 0.05`` (digits) and ``1 / 30`` (breast cancer).

Rows, one run: each library's rows in a fresh process of its own (scikit-learn's BLAS threads
and torch's contend when both run in one process):

* mercer ``KernelPerceptron``: plain (one-vs-rest), averaged, multinomial, and on a budget of
  100 support vectors (``budget_policy="smallest"``); ``max_iter`` epochs (default 20).
* scikit-learn ``Perceptron`` on ``RBFSampler`` random Fourier features (``D`` = 1000; 300 with
  ``--quick``), the same number of epochs (``tol=None``).
* mercer ``KernelLogisticRegression``: ``solver="newton"`` (exact) and ``solver="nystroem"``
  (``M`` = 300 landmarks).
* scikit-learn ``LogisticRegression`` (lbfgs) on ``Nystroem`` features: with ``M`` = 300 and the
  same ``random_state`` (the same model as mercer's Nyström solver), and with every training
  point as a landmark (the same model as mercer's exact solver). ``C`` = 10 (digits), 1 (breast
  cancer); ``tol=1e-6``, ``max_iter=5000`` for scikit-learn, ``tol=1e-6`` for mercer.

Fit time is the best of ``--repeat`` fits (default 3; 1 with ``--quick``). ``ratio`` is mercer's
fit time over the scikit-learn row it is paired with (``ref``). The load average is recorded
per row: other work on the machine skews timings.

Run (from the repository root)::

    .venv/bin/python benchmarks/suites/linear.py --quick     # under a minute
    .venv/bin/python benchmarks/suites/linear.py             # ~3-5 min

Results: ``benchmarks/results/linear/latest.{json,md}`` (``quick.*`` with ``--quick``).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import (Timer, load_average, machine_info, markdown_table, parse_suite_args, run_isolated,  # noqa: E402
                     suite_parser, write_results)

log = logging.getLogger("linear")


def load(name: str, *, quick: bool = False):
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if name == "digits":
        X, y = load_digits(return_X_y=True)
        X = X / 16.0
        gamma, C = 0.05, 10.0
    else:
        X, y = load_breast_cancer(return_X_y=True)
        gamma, C = 1.0 / 30, 1.0
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    if quick and name == "digits":  # --quick: the first 600 training rows (the exact solvers are O(n^2)-O(n^3))
        Xtr, ytr = Xtr[:600], ytr[:600]
    if name != "digits":
        sc = StandardScaler().fit(Xtr)
        Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
    return Xtr, Xte, ytr, yte, gamma, C


def timed(make, Xtr, ytr, repeat: int):
    best, model = np.inf, None
    for _ in range(repeat):
        model = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Timer() as t:
                model.fit(Xtr, ytr)
        best = min(best, t.seconds)
    return model, best


def _specs(dataset: str, n: int, gamma: float, C: float, *, quick: bool, epochs: int, n_landmarks: int):
    """(name, factory, reference name or None, info) of every row, in table order."""
    from sklearn.kernel_approximation import Nystroem, RBFSampler
    from sklearn.linear_model import LogisticRegression, Perceptron
    from sklearn.pipeline import make_pipeline

    from mercer.models.linear import KernelLogisticRegression, KernelPerceptron

    D = 300 if quick else 1000
    return [
        ("sklearn Perceptron on RBFSampler(D)", lambda: make_pipeline(
            RBFSampler(gamma=gamma, n_components=D, random_state=0),
            Perceptron(max_iter=epochs, tol=None, random_state=0)), None, f"D={D}"),
        ("KernelPerceptron", lambda: KernelPerceptron(gamma=gamma, max_iter=epochs, random_state=0),
         "sklearn Perceptron on RBFSampler(D)", ""),
        ("KernelPerceptron averaged", lambda: KernelPerceptron(gamma=gamma, max_iter=epochs, averaged=True, random_state=0),
         "sklearn Perceptron on RBFSampler(D)", ""),
        ("KernelPerceptron multinomial", lambda: KernelPerceptron(gamma=gamma, max_iter=epochs, multi_class="multinomial",
                                                                  random_state=0), "sklearn Perceptron on RBFSampler(D)", ""),
        ("KernelPerceptron budget=100", lambda: KernelPerceptron(gamma=gamma, max_iter=epochs, budget=100,
                                                                 budget_policy="smallest", random_state=0),
         "sklearn Perceptron on RBFSampler(D)", ""),
        ("sklearn LR on Nystroem(M)", lambda: make_pipeline(
            Nystroem(gamma=gamma, n_components=n_landmarks, random_state=0),
            LogisticRegression(C=C, tol=1e-6, max_iter=5000)), None, f"M={n_landmarks}"),
        ("KernelLogisticRegression nystroem", lambda: KernelLogisticRegression(
            C=C, gamma=gamma, solver="nystroem", n_components=n_landmarks, random_state=0),
         "sklearn LR on Nystroem(M)", f"M={n_landmarks}"),
        ("sklearn LR on Nystroem(n) (exact)", lambda: make_pipeline(
            Nystroem(gamma=gamma, n_components=n, random_state=0),
            LogisticRegression(C=C, tol=1e-6, max_iter=5000)), None, f"M={n}"),
        ("KernelLogisticRegression newton", lambda: KernelLogisticRegression(C=C, gamma=gamma, solver="newton"),
         "sklearn LR on Nystroem(n) (exact)", "exact"),
    ]


def _measure(dataset: str, library: str, *, quick: bool, repeat: int, epochs: int, n_landmarks: int, threads: int):
    """Fit every row of one library (``"sklearn"`` or ``"mercer"``) in this (fresh) process: each
    library gets a process of its own, because scikit-learn's BLAS threads and torch's contend when
    both run in one process (measured: KernelLogisticRegression nystroem on digits 1.4 s alone,
    22.8 s after scikit-learn's rows in the same process)."""
    import torch

    torch.set_num_threads(threads)
    Xtr, Xte, ytr, yte, gamma, C = load(dataset, quick=quick)
    out = {}
    for name, make, _, _ in _specs(dataset, len(Xtr), gamma, C, quick=quick, epochs=epochs, n_landmarks=n_landmarks):
        if name.startswith("sklearn") != (library == "sklearn"):
            continue
        log.info("%s: %s", dataset, name)
        model, seconds = timed(make, Xtr, ytr, repeat)
        r = {"seconds": seconds, "accuracy": float((model.predict(Xte) == yte).mean()), "load": load_average()}
        if hasattr(model, "support_"):
            r["n_sv"], r["epochs"] = len(model.support_), model.n_iter_
        if name.startswith("KernelLogistic"):
            r["newton_it"], r["cg_it"] = model.n_iter_, model.n_cg_iter_
        if "Nystroem" in name or name.startswith("KernelLogistic"):
            r["proba"] = np.asarray(model.predict_proba(Xte))
        out[name] = r
    return out


def run(dataset: str, *, quick: bool, repeat: int, epochs: int, n_landmarks: int, threads: int):
    kw = dict(quick=quick, repeat=repeat, epochs=epochs, n_landmarks=n_landmarks, threads=threads)
    got = {}
    for library in ("sklearn", "mercer"):
        got.update(run_isolated(_measure, dataset, library, **kw).result)
    Xtr, _, _, _, gamma, C = load(dataset, quick=quick)
    rows = []
    for name, _, ref, info in _specs(dataset, len(Xtr), gamma, C, quick=quick, epochs=epochs, n_landmarks=n_landmarks):
        r = got[name]
        row = dict(dataset=dataset, n_train=len(Xtr), model=name, info=info, accuracy=round(r["accuracy"], 4),
                   fit_s=round(r["seconds"], 3), ref=ref or "",
                   ratio=round(r["seconds"] / got[ref]["seconds"], 2) if ref else "", load=r["load"])
        for key in ("n_sv", "epochs", "newton_it", "cg_it"):
            if key in r:
                row[key] = r[key]
        if "proba" in r and ref:
            row["max_proba_diff_to_ref"] = float(np.abs(r["proba"] - got[ref]["proba"]).max())
        rows.append(row)
        print(f"{dataset:14s} {name:40s} acc {r['accuracy']:.4f}  fit {r['seconds']:7.3f} s  "
              f"{'ratio %.2f' % row['ratio'] if ref else ''}", flush=True)
    return rows


def main(argv=None):
    parser = suite_parser("linear", __doc__.split("\n\n")[0], refs=("sklearn",), refs_required=True,
                          quick="one repeat, D = 300 random features, 600 digits training rows (under a minute)")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--landmarks", type=int, default=300)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parse_suite_args(parser, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    repeat = args.repeat or (1 if args.quick else 3)
    print(machine_info())
    rows = []
    for dataset in ("digits", "breast_cancer"):
        rows += run(dataset, quick=args.quick, repeat=repeat, epochs=args.epochs, n_landmarks=args.landmarks,
                    threads=args.threads)
    cols = ["dataset", "n_train", "model", "info", "accuracy", "fit_s", "ratio", "ref", "n_sv", "epochs",
            "newton_it", "cg_it", "max_proba_diff_to_ref", "load"]
    table = markdown_table(rows, cols)
    print(table)
    write_results(args, dict(machine=machine_info(), args={k: str(v) for k, v in vars(args).items()}, repeat=repeat,
                             rows=rows, load_average_end=os.getloadavg()),
                  f"Machine: {machine_info()}\n\nratio: mercer's fit time / the paired scikit-learn row's (ref)\n\n{table}",
                  title="Linear classifiers on lifted features: mercer vs scikit-learn")


if __name__ == "__main__":
    main()
