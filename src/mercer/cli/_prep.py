"""Preprocessing a table for ``mercer fit``, from scikit-learn's own parts.

Numeric columns are imputed (median) and standardised, categorical ones (text, or named with
``--categorical``) imputed (most frequent) and one-hot encoded, with a ``ColumnTransformer``; a
regression target is centred and scaled with a ``TransformedTargetRegressor``. Index columns
(``Unnamed: 0``, ``rownames``, a 0..n-1 or 1..n integer column named like an index), columns named
with ``--drop`` and text columns with nearly one value per row (names, free text) are left out.
The result is one scikit-learn ``Pipeline`` that :mod:`mercer.io` saves without pickle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ._data import CLIError

__all__ = ["ColumnPlan", "as_categorical", "build_pipeline", "categorical_columns", "describe_plan", "final_estimator",
           "missing_report", "plan_columns"]

_INDEX_ALWAYS = re.compile(r"Unnamed: \d+|rownames", re.IGNORECASE)
_INDEX_LIKE = re.compile(r"|index|idx|id|row|rows|row_?id|row_?num(ber)?|row_?names?|no\.?|#|obs", re.IGNORECASE)


@dataclass
class ColumnPlan:
    """What :func:`plan_columns` decided for each column of a table."""

    numeric: list = field(default_factory=list)
    categorical: list = field(default_factory=list)
    index: list = field(default_factory=list)
    dropped: list = field(default_factory=list)
    identifiers: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)

    @property
    def used(self) -> list:
        return self.numeric + self.categorical


def _is_index(name, values) -> bool:
    text = str(name).strip()
    if _INDEX_ALWAYS.fullmatch(text):
        return True
    if not _INDEX_LIKE.fullmatch(text) or values.dtype.kind not in "iu" or len(values) == 0:
        return False
    v = np.asarray(values)
    return bool(np.array_equal(v, np.arange(len(v))) or np.array_equal(v, np.arange(1, len(v) + 1)))


def _is_text(series) -> bool:
    return series.dtype.kind not in "biuf"


def _check_names(frame, names, option: str) -> list:
    cols = [str(c) for c in frame.columns]
    unknown = [n for n in names if n not in cols]
    if unknown:
        raise CLIError(f"{option}: unknown column(s) {', '.join(map(repr, unknown))}; columns are "
                       f"{', '.join(map(repr, cols[:12]))}{' ...' if len(cols) > 12 else ''}.")
    return [frame.columns[cols.index(n)] for n in names]


def plan_columns(frame, *, drop=(), categorical=(), missing: str = "impute") -> ColumnPlan:
    """Sort the columns of ``frame`` (features only, target removed) into numeric, categorical,
    index, dropped and identifier-like; ``missing="refuse"`` raises on missing values, naming the
    columns."""
    plan = ColumnPlan()
    plan.dropped = _check_names(frame, list(drop), "--drop")
    forced = _check_names(frame, list(categorical), "--categorical")
    n = len(frame)
    for col in frame.columns:
        if col in plan.dropped:
            continue
        s = frame[col]
        if col in forced:
            plan.categorical.append(col)
        elif _is_index(col, s.to_numpy()) and col not in forced:
            plan.index.append(col)
        elif _is_text(s):
            distinct = s.nunique(dropna=True)
            (plan.identifiers if distinct > max(50, 0.5 * n) else plan.categorical).append(col)
        else:
            plan.numeric.append(col)
    counts = frame[plan.used].isna().sum()
    plan.missing = {c: int(counts[c]) for c in plan.used if counts[c] > 0}
    if plan.missing and missing == "refuse":
        raise CLIError(f"missing values in {missing_report(plan.missing)}; use --missing impute, or fill them in.")
    if not plan.used:
        raise CLIError("no feature columns left after dropping index and --drop columns.")
    return plan


def missing_report(missing: dict, limit: int = 6) -> str:
    """``'a' (3), 'b' (1)`` for a {column: count of missing values} dict."""
    items = [f"{c!r} ({k})" for c, k in list(missing.items())[:limit]]
    return ", ".join(items) + (f", ... ({len(missing)} columns)" if len(missing) > limit else "")


def as_categorical(frame, columns):
    """``frame`` with ``columns`` as Python objects: text for every value, NaN where missing (so
    that a column read as numbers in one file and text in another encodes the same way)."""
    if not columns:
        return frame
    frame = frame.copy()
    for col in columns:
        s = frame[col]
        values = [np.nan if _missing(v) else _text(v) for v in s.tolist()]
        frame[col] = np.array(values, dtype=object)
    return frame


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _text(v) -> str:
    """A category as text; a whole float (``2.0``, read from a column with gaps) as ``'2'``."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def categorical_columns(pipeline) -> list:
    """The columns that a pipeline built by :func:`build_pipeline` one-hot encodes."""
    prep = getattr(pipeline, "named_steps", {}).get("prep")
    for name, _, cols in getattr(prep, "transformers_", ()):
        if name == "categorical":
            return list(cols)
    return []


def final_estimator(model):
    """The mercer estimator at the end of a pipeline (inside a TransformedTargetRegressor)."""
    model = getattr(model, "steps", [[None, model]])[-1][1]
    return getattr(model, "regressor_", getattr(model, "regressor", model))


def build_pipeline(plan: ColumnPlan, model, *, scale_target: bool):
    """``Pipeline([("prep", ColumnTransformer), ("model", model)])``; a regressor is wrapped in a
    ``TransformedTargetRegressor`` that standardises the target when ``scale_target``."""
    from sklearn.compose import ColumnTransformer, TransformedTargetRegressor  # on use: ~0.15 s to import
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    parts = []
    if plan.numeric:
        parts.append(("numeric", Pipeline([("impute", SimpleImputer(strategy="median")),
                                           ("scale", StandardScaler())]), list(plan.numeric)))
    if plan.categorical:
        parts.append(("categorical", Pipeline([
            ("impute", SimpleImputer(strategy="most_frequent")),
            ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=False))]), list(plan.categorical)))
    prep = ColumnTransformer(parts, remainder="drop", verbose_feature_names_out=False)
    if scale_target:
        model = TransformedTargetRegressor(regressor=model, transformer=StandardScaler())
    return Pipeline([("prep", prep), ("model", model)])


def describe_plan(plan: ColumnPlan, *, scale_target: bool, imputed: bool) -> str:
    """The one line that ``mercer fit`` prints about its preprocessing."""
    parts = []
    if plan.index:
        parts.append(f"dropped index column {', '.join(map(repr, plan.index))}")
    if plan.dropped:
        parts.append(f"dropped {', '.join(map(repr, plan.dropped))} (--drop)")
    if plan.identifiers:
        parts.append(f"dropped text column(s) with a value per row {', '.join(map(repr, plan.identifiers))} "
                     "(--categorical keeps them)")
    if plan.numeric:
        parts.append(f"{len(plan.numeric)} numeric column(s) standardised")
    if plan.categorical:
        parts.append(f"{len(plan.categorical)} categorical column(s) one-hot encoded")
    if plan.missing and imputed:
        parts.append(f"missing values imputed (median / most frequent) in {missing_report(plan.missing)}")
    if scale_target:
        parts.append("target centred and scaled")
    return "; ".join(parts)
