"""``mercer fit`` tunes by default: on real tables with text columns and missing values (scikit-learn's
diabetes, and UCI sets when ``../shared/data/uci`` is there), its held-out score with its defaults is
at least that of the scikit-learn pipeline a practitioner writes by hand (impute, scale, one-hot;
``KernelRidge(kernel="rbf", gamma=1/p, alpha=0.1)`` on the standardised target), on the same split."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn import datasets
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.impute import SimpleImputer
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from mercer.cli import main
from test_cli_tables import _messy

UCI = Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"
UCI_SETS = ("pol", "elevators", "bike", "kin40k", "protein", "keggdirected")
ROWS = 1_500  # of each UCI set (a random subset, fixed seed)


def _table(name: str) -> pd.DataFrame:
    if name == "diabetes":
        diab = datasets.load_diabetes(as_frame=True, scaled=False)
        X, y = diab.data.assign(sex=diab.data["sex"].map({1.0: "F", 2.0: "M"})), diab.target.to_numpy()
    else:
        if not (UCI / name / "data.csv.gz").exists():
            pytest.skip(f"UCI set {name} not found under {UCI}")
        from mercer.datasets import load_uci

        Xa, ya = load_uci(name, UCI)[:2]
        rows = np.random.default_rng(0).choice(len(Xa), ROWS, replace=False)
        X, y = pd.DataFrame(Xa[rows], columns=[f"x{i}" for i in range(Xa.shape[1])]), ya[rows]
    return _messy(X, y, seed=len(name), index="rownames")


def _sklearn_held_out(df: pd.DataFrame) -> float:
    """The hand-written pipeline's R^2 on the split ``mercer fit`` holds out (20 %, seed 0)."""
    X, y = df.drop(columns=["y", "rownames"]), df["y"].to_numpy()
    text = [c for c in X.columns if X[c].dtype.kind not in "biuf"]
    numeric = [c for c in X.columns if c not in text]
    X = X.copy()
    for c in text:
        X[c] = X[c].astype(object).where(X[c].notna(), np.nan)
    prep = ColumnTransformer([
        ("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
        ("categorical", make_pipeline(SimpleImputer(strategy="most_frequent"),
                                      OneHotEncoder(handle_unknown="ignore", sparse_output=False)), text)])
    Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.2, random_state=0)
    p = prep.fit(Xa).transform(Xa[:1]).shape[1]
    model = Pipeline([("prep", prep), ("model", TransformedTargetRegressor(
        KernelRidge(kernel="rbf", gamma=1.0 / p, alpha=0.1), transformer=StandardScaler()))])
    return float(model.fit(Xa, ya).score(Xb, yb))


def _fit(csv: Path, out: Path, capsys, *extra) -> str:
    code = main(["fit", "--data", str(csv), "--target", "y", "--model", "ridge", "--out", str(out), *extra])
    text, err = capsys.readouterr()
    assert code == 0, err
    return text


def _held(text: str) -> float:
    m = re.search(r"held-out R\^2: (-?[0-9.]+)", text)
    assert m, text
    return float(m.group(1))


def _check(name: str, tmp_path, capsys) -> None:
    df = _table(name)
    df.to_csv(tmp_path / "t.csv", index=False)
    text = _fit(tmp_path / "t.csv", tmp_path / "m.mercer", capsys)
    assert "tuned on them" in text and re.search(r"^tuned: ", text, re.M), text
    ours, theirs = _held(text), _sklearn_held_out(df)
    assert ours >= theirs - 1e-3, (name, ours, theirs, text)


def test_fit_tunes_by_default_diabetes(tmp_path, capsys):
    _check("diabetes", tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", UCI_SETS)
def test_fit_tunes_by_default_uci(name, tmp_path, capsys):
    _check(name, tmp_path, capsys)


def test_no_tune_and_given_values_skip_tuning(tmp_path, capsys):
    _table("diabetes").to_csv(tmp_path / "t.csv", index=False)
    for extra, reason in [(["--no-tune"], "--no-tune"), (["--alpha", "0.5"], "--alpha given"),
                          (["--kernel", "rbf:gamma=0.1"], "sets its own parameters")]:
        text = _fit(tmp_path / "t.csv", tmp_path / "m.mercer", capsys, *extra)
        assert f"not tuned: " in text and reason in text, text
        assert "tuned on them" not in text


def test_tuned_values_reach_the_saved_model(tmp_path, capsys):
    from mercer.io import load

    _table("diabetes").to_csv(tmp_path / "t.csv", index=False)
    text = _fit(tmp_path / "t.csv", tmp_path / "m.mercer", capsys, "--holdout", "0")
    line = next(ln for ln in text.splitlines() if ln.startswith("tuned: "))
    est = load(tmp_path / "m.mercer").named_steps["model"].regressor_
    assert repr(est.kernel) in line or line.startswith("tuned: given")
