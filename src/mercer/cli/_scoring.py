"""Scores for the CLI: metrics, held-out splits and baselines, shared by ``mercer fit`` (its held-out
line) and ``mercer evaluate``."""

from __future__ import annotations

import numpy as np
from sklearn.base import clone, is_classifier

from ._data import CLIError
from ._progress import Progress

__all__ = ["baseline", "held_out", "metrics", "split", "stratify"]


def metrics(classifier: bool) -> dict:
    """Metric name -> scorer (scikit-learn names), in display order."""
    if classifier:
        return {"accuracy": "accuracy", "balanced accuracy": "balanced_accuracy", "macro F1": "f1_macro"}
    return {"R^2": "r2", "RMSE": "neg_root_mean_squared_error", "MAE": "neg_mean_absolute_error"}


def stratify(y, classifier: bool):
    if not classifier:
        return None
    _, counts = np.unique(np.asarray(y).astype(str), return_counts=True)
    return y if counts.min() >= 2 else None


def split(X, y, fraction_: float, seed: int, classifier: bool):
    """Train/test split (stratified for classes with at least two rows each)."""
    from sklearn.model_selection import train_test_split  # on use: ~0.06 s to import

    try:
        return train_test_split(X, y, test_size=fraction_, random_state=seed, stratify=stratify(y, classifier))
    except ValueError as exc:
        raise CLIError(f"cannot hold out {fraction_:g} of {len(y)} rows: {exc}") from exc


def baseline(classifier: bool):
    from sklearn.dummy import DummyClassifier, DummyRegressor

    return DummyClassifier(strategy="most_frequent") if classifier else DummyRegressor(strategy="mean")


def held_out(prep, args, progress: bool, tuner=None):
    """Fit a copy on ``1 - holdout`` of the rows and score it on the rest: the line ``mercer fit``
    prints before its final fit on every row. ``tuner(model, X, y)``, when given, chooses the
    hyperparameters on those rows first (the held-out rows take no part in the choice); returns
    ``(line, what the tuner returned or None)``."""
    classifier = is_classifier(prep.model)
    Xa, Xb, ya, yb = split(prep.X, prep.y, args.holdout, args.seed, classifier)
    model, tuned = clone(prep.model), None
    if tuner is not None:
        from ._autotune import apply

        with Progress(f"tuning on {len(ya)} rows", enabled=progress):
            tuned = tuner(model, Xa, ya)
        model = apply(model, tuned, len(ya))
    with Progress(f"fitting on {len(ya)} rows to score on {len(yb)} held-out rows", enabled=progress):
        model.fit(Xa, ya)
        score = model.score(Xb, yb)
    base = baseline(classifier).fit(Xa, ya).score(Xb, yb)
    metric = "accuracy" if classifier else "R^2"
    what = "majority class" if classifier else "mean"
    tuned_note = ", tuned on them" if tuned is not None else ""
    return (f"held-out {metric}: {score:.4f} on {len(yb)} rows ({args.holdout:.0%}, seed {args.seed}) "
            f"of a model fit on the other {len(ya)}{tuned_note}; baseline ({what}): {base:.4f}"), tuned
