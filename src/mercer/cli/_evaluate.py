"""``mercer evaluate``: k-fold cross-validation or one held-out split, metrics next to a baseline
(options: :func:`._arguments.add_evaluate_arguments`)."""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from ._commands import CLASSIFIERS, prepare
from ._data import CLIError
from ._progress import Progress
from ._scoring import baseline, metrics, split, stratify

__all__ = ["run"]


def _scores(model, X, y, args, classifier: bool, progress: bool) -> dict:
    from sklearn.model_selection import KFold, StratifiedKFold, cross_validate

    scoring = metrics(classifier)
    if args.holdout is not None:
        Xa, Xb, ya, yb = split(X, y, args.holdout, args.seed, classifier)
        fitted = clone(model).fit(Xa, ya)
        from sklearn.metrics import get_scorer

        return {k: np.array([get_scorer(s)(fitted, Xb, yb)]) for k, s in scoring.items()}
    folds = (StratifiedKFold if stratify(y, classifier) is not None else KFold)(
        n_splits=args.cv, shuffle=True, random_state=args.seed)
    if args.cv < 2 or args.cv > len(y):
        raise CLIError(f"--cv {args.cv}: needs 2 <= K <= {len(y)} (the number of rows).")
    res = cross_validate(model, X, y, cv=folds, scoring=list(scoring.values()), error_score="raise")
    return {k: res[f"test_{s}"] for k, s in scoring.items()}


def _cell(values: np.ndarray, negate: bool) -> str:
    v = -values if negate else values
    return f"{v.mean():.4f}" if len(v) == 1 else f"{v.mean():.4f} ± {v.std():.4f}"


def run(args, out, progress: bool) -> int:
    if args.model == "kpca":
        raise CLIError("'mercer evaluate' scores predictions; kpca has none (use a ridge or svc model).")
    prep = prepare(args, progress)
    classifier = args.model in CLASSIFIERS
    how = (f"one held-out split of {args.holdout:.0%}" if args.holdout is not None
           else f"{args.cv}-fold cross-validation")
    print(f"data: {prep.table.path.name}: {prep.X.shape[0]} rows (target: {prep.table.target_name!r})", file=out)
    print(f"preprocessing: {prep.summary}", file=out)
    name = type(prep.estimator).__name__
    with Progress(f"{how} of {name}", enabled=progress) as p:
        ours = _scores(prep.model, prep.X, prep.y, args, classifier, progress)
        base = _scores(baseline(classifier), prep.X, prep.y, args, classifier, False)
    what = "majority class" if classifier else "mean"
    rows = [("metric", f"mercer {name}", f"baseline ({what})")]
    for key, scorer in metrics(classifier).items():
        neg = scorer.startswith("neg_")
        rows.append((key, _cell(ours[key], neg), _cell(base[key], neg)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"{how} (seed {args.seed}), {p.elapsed:.1f} s:", file=out)
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    return 0
