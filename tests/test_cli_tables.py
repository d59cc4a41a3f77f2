"""Five tables shipped with scikit-learn, made "real" (an index column, a text column, missing values),
through ``mercer fit --no-tune``, ``mercer evaluate`` and ``mercer predict``, against a scikit-learn
Pipeline with the same preprocessing and the same kernel model: held-out scores within 0.02 (what
``mercer fit`` reaches with its tuning on by default: ``tests/test_cli_autotune.py``).

The tables are scikit-learn's bundled sets (breast cancer, wine, iris, diabetes with its raw
``sex`` column as text, digits), written to CSV in a temporary folder; the text columns (a
category related to the target and a pure-noise one) and the missing values (5% of two numeric
columns) are added here, with a fixed seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.impute import SimpleImputer
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.svm import SVC

from conftest import cli_number, cli_ok


def _messy(frame: pd.DataFrame, target, seed: int, index: str) -> pd.DataFrame:
    """Add an index column, two text columns and missing values to a bundled table."""
    rng = np.random.default_rng(seed)
    n = len(frame)
    df = frame.copy()
    num = [c for c in df.columns if df[c].dtype.kind == "f"]
    for col in num[:2]:
        df.loc[rng.random(n) < 0.05, col] = np.nan
    codes = pd.factorize(pd.Series(target).astype(str))[0] if not np.issubdtype(np.asarray(target).dtype, np.floating) \
        else (np.asarray(target) > np.median(target)).astype(int)
    agree = rng.random(n) < 0.6  # a category that tells something about the target, with gaps
    grade = np.where(agree, np.array(["low", "mid", "high", "top"])[codes % 4], rng.choice(["low", "mid"], n))
    df["grade"] = pd.Series(grade, dtype=object).where(rng.random(n) > 0.05, None)
    df["batch"] = rng.choice(["north", "south", "east"], n)
    df.insert(0, index, np.arange(1, n + 1) if index == "rownames" else np.arange(n))
    df["y"] = target
    return df


def _tables():
    bc = datasets.load_breast_cancer(as_frame=True)
    wine = datasets.load_wine(as_frame=True)
    iris = datasets.load_iris(as_frame=True)
    diab = datasets.load_diabetes(as_frame=True, scaled=False)
    digits = datasets.load_digits(as_frame=True)
    dX = diab.data.assign(sex=diab.data["sex"].map({1.0: "F", 2.0: "M"}))
    gX = digits.data.iloc[:500, ::2].astype(float)  # every other pixel of 500 images
    return {
        "breast_cancer": (bc.data, np.array(["malignant", "benign"])[bc.target], "svc", "Unnamed: 0"),
        "wine": (wine.data, np.array(["barolo", "grignolino", "barbera"])[wine.target], "svc", "rownames"),
        "iris": (iris.data, np.array(iris.target_names)[iris.target], "svc", "Unnamed: 0"),
        "diabetes": (dX, diab.target.to_numpy(), "ridge", "rownames"),
        "digits": (gX, digits.target.to_numpy()[:500], "svc", "Unnamed: 0"),
    }


_TABLES = _tables()


def _reference(df: pd.DataFrame, model_kind: str):
    """The same preprocessing and kernel model, written with scikit-learn by hand."""
    X = df.drop(columns=["y", df.columns[0]])
    text = [c for c in X.columns if X[c].dtype == object or X[c].dtype.kind not in "biuf"]
    numeric = [c for c in X.columns if c not in text]
    prep = ColumnTransformer([
        ("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
        ("categorical", make_pipeline(SimpleImputer(strategy="most_frequent"),
                                      OneHotEncoder(handle_unknown="ignore", sparse_output=False)), text),
    ])
    if model_kind == "ridge":
        model = TransformedTargetRegressor(KernelRidge(kernel="rbf", alpha=1.0), transformer=StandardScaler())
    else:
        model = SVC(kernel="rbf", C=1.0, gamma="auto")  # gamma = 1 / n_features, as mercer's RBF()
    X = X.copy()
    for c in text:
        X[c] = X[c].astype(object).where(X[c].notna(), np.nan)
    return Pipeline([("prep", prep), ("model", model)]), X, df["y"].to_numpy()


@pytest.mark.parametrize("name", list(_TABLES))
def test_table_fit_evaluate_predict_match_sklearn(name, tmp_path, capsys):
    data, target, kind, index = _TABLES[name]
    df = _messy(data, target, seed=len(name), index=index)
    classifier = kind == "svc"
    train, test = train_test_split(df, test_size=0.25, random_state=0,
                                   stratify=df["y"] if classifier else None)
    train.to_csv(tmp_path / "train.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    ref, Xtr, ytr = _reference(train, kind)
    _, Xte, yte = _reference(test, kind)

    # fit: the preprocessing is reported in one line, and the held-out score matches scikit-learn's
    out, _ = cli_ok(["fit", "--data", tmp_path / "train.csv", "--target", "y", "--model", kind, "--no-tune",
                   "--out", tmp_path / "m.mercer"], capsys)
    assert "not tuned: --no-tune" in out
    assert f"dropped index column {index!r}" in out and "one-hot encoded" in out and "missing values imputed" in out
    metric = "accuracy" if classifier else r"R\^2"
    held = cli_number(rf"held-out {metric}: (-?[0-9.]+)", out)
    Xa, Xb, ya, yb = train_test_split(Xtr, ytr, test_size=0.2, random_state=0, stratify=ytr if classifier else None)
    assert abs(held - ref.fit(Xa, ya).score(Xb, yb)) <= 0.02

    # predict on the test file, columns reordered: the same score as scikit-learn's pipeline
    test.iloc[:, ::-1].to_csv(tmp_path / "test_reordered.csv", index=False)
    out, err = cli_ok(["predict", "--model", tmp_path / "m.mercer", "--data", tmp_path / "test_reordered.csv",
                     "--target", "y", "--out", tmp_path / "pred.csv"], capsys)
    ours = cli_number(r"(?:accuracy|R\^2) against 'y': (-?[0-9.]+)", out)
    theirs = ref.fit(Xtr, ytr).score(Xte, yte)
    assert abs(ours - theirs) <= 0.02, (ours, theirs)

    # evaluate: 5-fold cross-validation on the same folds
    out, _ = cli_ok(["evaluate", "--data", tmp_path / "train.csv", "--target", "y", "--model", kind], capsys)
    row = next(line for line in out.splitlines() if line.strip().startswith("accuracy" if classifier else "R^2"))
    cv_mean = float(row.split()[1])
    folds = (StratifiedKFold if classifier else KFold)(n_splits=5, shuffle=True, random_state=0)
    assert abs(cv_mean - cross_val_score(ref, Xtr, ytr, cv=folds).mean()) <= 0.02
    base = float(row.split()[-3])  # baseline mean +- std
    assert base < cv_mean
