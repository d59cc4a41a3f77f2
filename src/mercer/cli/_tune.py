"""``mercer tune``: the kernel's scale and the regularisation chosen for the user.

* regression with at most ``--loo-max-n`` rows: :class:`mercer.models.KernelRidgeCV`, which learns
  the kernel hyperparameters and ``alpha`` by gradient descent on the closed-form leave-one-out
  error (no refits);
* otherwise (classification, or more rows): what ``mercer fit`` does before its fit
  (:mod:`._autotune`: generalised cross-validation of a Nyström ridge model from blocked
  statistics, one scale and one per feature, scored against the given values on a validation split);
* with ``--search halving``: successive halving (scikit-learn's ``HalvingGridSearchCV``) over
  ``gamma`` and ``alpha`` (ridge models) or ``C`` (svc), the grid centred on ``1 / n_features`` of the
  preprocessed data, or on scikit-learn's ``gamma='scale'``, ``1 / (n_features var)``, when the
  variance of its entries is not within 2x of 1 (sparse rows such as TF-IDF: entries far smaller
  than standardised columns').

Progress (each fit of the search, with the best score so far) goes to stderr; the result is the
same pipeline as ``mercer fit`` would save, refit on every row. Options:
:func:`._arguments.add_tune_arguments`.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from sklearn.base import clone

from .. import models
from ..kernels import RBF
from ..models import KernelRidgeCV
from ._arguments import MODELS
from ._commands import CLASSIFIERS, REGRESSORS, check_out_path, final_estimator, prepare, save_atomically
from ._data import CLIError
from ._progress import Progress

__all__ = ["run"]


class _Tracker:
    """A scorer that counts the fits of a search and shows them, with the best score so far."""

    def __init__(self, scorer, stream, enabled: bool):
        self.scorer, self.stream, self.enabled = scorer, stream, enabled
        self.calls, self.best, self.t0 = 0, -np.inf, time.perf_counter()

    def __call__(self, estimator, X, y):
        score = self.scorer(estimator, X, y)
        self.calls += 1
        self.best = max(self.best, score)
        if self.enabled:
            self.stream.write(f"\rtune: {self.calls} fits scored, best fold score {self.best:.4f}, "
                              f"{time.perf_counter() - self.t0:.1f} s ")
            self.stream.flush()
        return score


def _grid(args, n_features: int, center: float | None = None) -> dict:
    """Successive-halving grid: gamma around ``center`` (default 1 / n_features), and the estimator's
    regularisation: C (the SVMs that have it) or alpha (ridge) over four or five decades, nu (NuSVC,
    which has neither) from 0.1 to 0.7."""
    step = "model__regressor__" if args.model in REGRESSORS else "model__"
    center = 1.0 / max(n_features, 1) if center is None else center
    grid = {f"{step}kernel": [RBF(gamma=g * center) for g in (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)]}
    params = getattr(models, MODELS[args.model])().get_params(deep=False)  # the names it has
    if "C" in params:
        grid[f"{step}C"] = [0.1, 1.0, 10.0, 100.0]
    elif "alpha" in params:
        grid[f"{step}alpha"] = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    elif "nu" in params:
        grid[f"{step}nu"] = [0.1, 0.3, 0.5, 0.7]
    return grid


def _halving(prep, args, progress: bool):
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401  (on use; it registers the class)
    from sklearn.metrics import get_scorer
    from sklearn.model_selection import HalvingGridSearchCV

    from ._autotune import _as_rows, _scaled_rbf

    Z = _as_rows(clone(prep.model.named_steps["prep"]).fit_transform(prep.X))  # CSR stays CSR
    scaled = _scaled_rbf(RBF(), Z)  # sparse rows: gamma around scikit-learn's 'scale', not 1 / d (see _autotune)
    scorer = get_scorer("accuracy" if args.model in CLASSIFIERS else "r2")
    tracker = _Tracker(scorer, sys.stderr, progress and sys.stderr.isatty())
    grid = _grid(args, Z.shape[1], None if scaled is None else scaled.gamma)
    # NuSVC's nu can be infeasible on the few rows of the first rounds (nu (n_i + n_j) / 2 <= min(n_i, n_j)
    # fails when a subsample's classes are unbalanced): such a candidate scores NaN in that round (a
    # warning), as scikit-learn's default; every other model raises its errors
    nu = any(k.endswith("__nu") for k in grid)
    search = HalvingGridSearchCV(prep.model, grid, cv=args.cv, scoring=tracker, factor=3, random_state=args.seed,
                                 refit=True, error_score=np.nan if nu else "raise")
    search.fit(prep.X, prep.y)
    if tracker.enabled:
        sys.stderr.write("\n")
    rounds = "".join(f"; {c} on {r} rows" for c, r in zip(search.n_candidates_, search.n_resources_))
    best = {k.rsplit("__", 1)[-1]: v for k, v in search.best_params_.items()}
    return search.best_estimator_, (f"successive halving over {search.n_candidates_[0]} candidates "
                                    f"({len(search.cv_results_['params'])} evaluations {rounds}); best {args.cv}-fold "
                                    f"score {search.best_score_:.4f} with {best}")


def _loo(prep, args, progress: bool):
    model = clone(prep.model)
    ttr = model.named_steps["model"]
    ttr.set_params(regressor=KernelRidgeCV(kernel=final_estimator(ttr).kernel, device=args.device,
                                           dtype=args.dtype, memory_budget=args.memory_budget))
    model.fit(prep.X, prep.y)
    est = final_estimator(model)
    return model, (f"closed-form leave-one-out (KernelRidgeCV) on {len(prep.y)} rows: kernel {est.kernel_!r}, "
                   f"alpha {float(np.ravel(est.alpha_)[0]):.4g}")


def _learned(prep, args, progress: bool):
    """What ``mercer fit`` does (:mod:`._autotune`), on every row, then the fit."""
    from . import _autotune

    args.no_tune, args.alpha, args.C = False, None, None
    tuned = _autotune.tune(prep.model, prep.X, prep.y, args, classifier=args.model in CLASSIFIERS)
    model = _autotune.apply(prep.model, tuned, len(prep.y))
    model.fit(prep.X, prep.y)
    return model, tuned.line.removeprefix("tuned: ")


def run(args, out, progress: bool) -> int:
    if args.model == "kpca":
        raise CLIError("'mercer tune' chooses the kernel of a ridge or svc model, not kpca.")
    if args.preprocess != "auto":
        raise CLIError("'mercer tune' works on the preprocessing pipeline; drop --preprocess none.")
    out_path = check_out_path(args.out) if args.out else None
    prep = prepare(args, progress)
    print(f"data: {prep.table.path.name}: {prep.X.shape[0]} rows (target: {prep.table.target_name!r})", file=out)
    print(f"preprocessing: {prep.summary}", file=out)
    loo = args.search == "learn" and args.model == "ridge" and len(prep.y) <= args.loo_max_n
    search = _loo if loo else _halving if args.search == "halving" else _learned
    with Progress("tuning", enabled=progress) as p:
        model, line = search(prep, args, progress)
    print(f"{line} ({p.elapsed:.1f} s)", file=out)
    if out_path is not None:
        save_atomically(model, out_path)
        print(f"saved: {out_path}", file=out)
    return 0
