"""Preprocessing a table for ``mercer fit``, from scikit-learn's own parts.

Numeric columns are imputed (median) and standardised, categorical ones (text, or named with
``--categorical``) imputed (most frequent) and one-hot encoded, free-text columns named with
``--text`` turned into TF-IDF features (scikit-learn's ``TfidfVectorizer``, one per column), with a
``ColumnTransformer``; a regression target is centred and scaled with a
``TransformedTargetRegressor``. Index columns (``Unnamed: 0``, ``rownames``, a 0..n-1 or 1..n
integer column named like an index), columns named with ``--drop`` and other text columns with
nearly one value per row (names, free text) are left out. The result is one scikit-learn
``Pipeline`` that :mod:`mercer.io` saves without pickle.

The preprocessed rows are a CSR matrix, never made dense, when :func:`is_sparse_plan` says so: a
``--text`` column, or one-hot columns at least ``SPARSE_MIN_WIDTH`` wide in all with at most
``SPARSE_MAX_DENSITY`` of the encoded row stored (the categories are counted on the table the plan
is made from); otherwise a dense array, as before (a narrow one-hot costs less dense than as sparse
rows). Every model of the CLI takes sparse rows; one that does not gets the dense array, or for
``--text`` a clear error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ._data import CLIError

__all__ = ["SPARSE_MAX_DENSITY", "SPARSE_MIN_WIDTH", "ColumnPlan", "accepts_sparse", "as_categorical", "as_text",
           "build_pipeline", "categorical_columns", "describe_plan", "final_estimator", "is_sparse_plan", "missing_report",
           "plan_columns", "text_columns"]

#: One-hot columns are kept sparse from this many encoded columns on (all categorical columns together) ...
SPARSE_MIN_WIDTH = 100
#: ... when at most this fraction of an encoded row is stored (numeric columns and one 1 per
#: categorical column, over the numeric columns and the one-hot width)
SPARSE_MAX_DENSITY = 0.1

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
    text: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)
    categories: int = 0  # distinct values of the categorical columns together: the one-hot width

    @property
    def used(self) -> list:
        return self.numeric + self.categorical + self.text


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


def _split_names(names) -> list:
    """``--text a,b --text c`` -> ``['a', 'b', 'c']``."""
    return [part.strip() for name in names for part in str(name).split(",") if part.strip()]


def plan_columns(frame, *, drop=(), categorical=(), text=(), missing: str = "impute") -> ColumnPlan:
    """Sort the columns of ``frame`` (features only, target removed) into numeric, categorical,
    free text (``text``: comma-separated names allowed), index, dropped and identifier-like;
    ``missing="refuse"`` raises on missing values, naming the columns."""
    plan = ColumnPlan()
    plan.dropped = _check_names(frame, list(drop), "--drop")
    forced = _check_names(frame, list(categorical), "--categorical")
    plan.text = _check_names(frame, _split_names(text), "--text")
    for option, names in (("--categorical", forced), ("--drop", plan.dropped)):
        both = [c for c in plan.text if c in names]
        if both:
            raise CLIError(f"--text and {option} both name {', '.join(map(repr, both))}; give each column one role.")
    n = len(frame)
    for col in frame.columns:
        if col in plan.dropped or col in plan.text:
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
    plan.categories = int(sum(frame[c].nunique(dropna=True) for c in plan.categorical))
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


def as_text(frame, columns):
    """``frame`` with the free-text ``columns`` as Python strings, ``''`` where missing (what
    ``TfidfVectorizer`` reads: an empty text has no terms)."""
    if not columns:
        return frame
    frame = frame.copy()
    for col in columns:
        frame[col] = np.array(["" if _missing(v) else str(v) for v in frame[col].tolist()], dtype=object)
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


def text_columns(pipeline) -> list:
    """The columns that a pipeline built by :func:`build_pipeline` turns into TF-IDF features."""
    prep = getattr(pipeline, "named_steps", {}).get("prep")
    return [cols for name, _, cols in getattr(prep, "transformers_", ()) if name.startswith("text")]


def is_sparse_plan(plan: ColumnPlan) -> bool:
    """Whether the preprocessed rows are kept as a CSR matrix: a ``--text`` column, or one-hot columns
    at least ``SPARSE_MIN_WIDTH`` wide in all, of which a row stores at most ``SPARSE_MAX_DENSITY``."""
    if plan.text:
        return True
    width = len(plan.numeric) + plan.categories
    stored = len(plan.numeric) + len(plan.categorical)
    return plan.categories >= SPARSE_MIN_WIDTH and stored <= SPARSE_MAX_DENSITY * width


def accepts_sparse(estimator) -> bool:
    """Whether ``estimator`` fits and predicts from scipy sparse rows (its scikit-learn tags)."""
    try:
        return bool(estimator.__sklearn_tags__().input_tags.sparse)
    except AttributeError:
        return False


def final_estimator(model):
    """The mercer estimator at the end of a pipeline (inside a TransformedTargetRegressor)."""
    model = getattr(model, "steps", [[None, model]])[-1][1]
    return getattr(model, "regressor_", getattr(model, "regressor", model))


def build_pipeline(plan: ColumnPlan, model, *, scale_target: bool):
    """``Pipeline([("prep", ColumnTransformer), ("model", model)])``; a regressor is wrapped in a
    ``TransformedTargetRegressor`` that standardises the target when ``scale_target``. The
    ColumnTransformer's output is CSR when :func:`is_sparse_plan` and the model takes sparse rows
    (``sparse_threshold=1``: sparse whenever a part is), else dense (``sparse_threshold=0``)."""
    from sklearn.compose import ColumnTransformer, TransformedTargetRegressor  # on use: ~0.15 s to import
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    sparse = is_sparse_plan(plan)
    if sparse and not accepts_sparse(model):
        if plan.text:
            raise CLIError(f"--text makes sparse TF-IDF features, and {type(model).__name__} takes dense rows only; "
                           "use a model that takes sparse rows (svc, ridge-classifier, nystroem-classifier, ...).")
        sparse = False  # a wide one-hot made dense for a model that needs it
    parts = []
    if plan.numeric:
        parts.append(("numeric", Pipeline([("impute", SimpleImputer(strategy="median")),
                                           ("scale", StandardScaler())]), list(plan.numeric)))
    if plan.categorical:
        parts.append(("categorical", Pipeline([
            ("impute", SimpleImputer(strategy="most_frequent")),
            ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=sparse))]), list(plan.categorical)))
    for i, col in enumerate(plan.text):  # one vectorizer per column, given the column itself (1-D texts)
        parts.append((f"text{i}", TfidfVectorizer(), col))
    prep = ColumnTransformer(parts, remainder="drop", sparse_threshold=1.0 if sparse else 0.0,
                             verbose_feature_names_out=False)
    if scale_target:
        model = TransformedTargetRegressor(regressor=model, transformer=StandardScaler())
    return Pipeline([("prep", prep), ("model", model)])


def describe_plan(plan: ColumnPlan, *, scale_target: bool, imputed: bool, sparse: bool | None = None) -> str:
    """The one line that ``mercer fit`` prints about its preprocessing (``sparse``: whether the
    pipeline keeps the one-hot columns sparse; default :func:`is_sparse_plan`)."""
    parts = []
    if plan.index:
        parts.append(f"dropped index column {', '.join(map(repr, plan.index))}")
    if plan.dropped:
        parts.append(f"dropped {', '.join(map(repr, plan.dropped))} (--drop)")
    if plan.identifiers:
        parts.append(f"dropped text column(s) with a value per row {', '.join(map(repr, plan.identifiers))} "
                     "(--text makes TF-IDF features of free text; --categorical keeps them as categories)")
    if plan.numeric:
        parts.append(f"{len(plan.numeric)} numeric column(s) standardised")
    sparse = "sparse" if (is_sparse_plan(plan) if sparse is None else sparse) else "dense"
    if plan.categorical:
        parts.append(f"{len(plan.categorical)} categorical column(s) one-hot encoded ({plan.categories} "
                     f"{sparse} columns)")
    if plan.text:
        parts.append(f"text column(s) {', '.join(map(repr, plan.text))} as TF-IDF features (sparse)")
    imputed_cols = {c: k for c, k in plan.missing.items() if c not in plan.text}
    if imputed_cols and imputed:
        parts.append(f"missing values imputed (median / most frequent) in {missing_report(imputed_cols)}")
    empty = {c: k for c, k in plan.missing.items() if c in plan.text}
    if empty:
        parts.append(f"missing texts read as empty in {missing_report(empty)}")
    if scale_target:
        parts.append("target centred and scaled")
    return "; ".join(parts)
