"""Sparse rows through the ``mercer`` command: ``--text COLUMN`` (TF-IDF features in the saved
pipeline) and wide one-hot columns kept as CSR, against the same scikit-learn pipeline and mercer
estimator built in Python.

A small labelled text table made here always runs; Debian's fortunes (``/usr/share/games/fortunes``:
each file a category) run when installed (slow), skipped otherwise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.model_selection import StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from mercer.cli import main
from mercer.cli._data import CLIError
from mercer.cli._prep import build_pipeline, final_estimator, is_sparse_plan, plan_columns
from mercer.io import load
from mercer.kernels import RBF
from mercer.models import KernelRidge, KernelRidgeClassifier, KernelSVC, NystroemKernelRidgeClassifier

from conftest import cli_number, cli_ok

FORTUNES = Path("/usr/share/games/fortunes")

_TOPICS = {
    "space": "rocket orbit planet moon star launch comet telescope galaxy astronaut",
    "food": "bread cheese soup recipe oven garlic butter pasta sauce baker",
    "sea": "boat sail wave harbour anchor fish tide island captain storm",
}
_FILLER = "the a of and to in is it that was for on with as by at this from".split()


def _tiny_table(n: int, seed: int) -> pd.DataFrame:
    """``n`` short texts in three topics (topic words among common fillers, a fifth of them from
    another topic), a numeric column and a few missing texts."""
    rng = np.random.default_rng(seed)
    names = list(_TOPICS)
    label = np.array(names)[np.arange(n) % 3]
    texts = []
    for lab in label:
        own, other = _TOPICS[lab].split(), _TOPICS[names[rng.integers(3)]].split()
        words = [rng.choice(own if rng.random() < 0.8 else other) for _ in range(4)] + \
            list(rng.choice(_FILLER, 6))
        texts.append(" ".join(rng.permutation(words)))
    df = pd.DataFrame({"text": np.array(texts, dtype=object), "words": [len(t.split()) for t in texts],
                       "category": label})
    df.loc[rng.random(n) < 0.03, "text"] = None
    return df


def _fortunes_table(per_category: int = 60, categories: int = 6) -> pd.DataFrame:
    """The largest ``categories`` fortune files, ``per_category`` texts of each (a fixed sample)."""
    rows = []
    for f in sorted(FORTUNES.iterdir()):
        if not f.is_file() or f.suffix in (".dat", ".u8") or f.name.startswith("."):
            continue
        body = f.read_text(encoding="utf-8", errors="replace")
        items = [t.strip() for t in "\n".join("\x00" if line.strip() == "%" else line
                                              for line in body.splitlines()).split("\x00")]
        rows.append((f.name, [t for t in items if t]))
    rows = sorted(rows, key=lambda r: -len(r[1]))[:categories]
    rng = np.random.default_rng(0)
    texts, labels = [], []
    for name, items in rows:
        pick = rng.permutation(len(items))[:per_category]
        texts += [items[i] for i in pick]
        labels += [name] * len(pick)
    order = rng.permutation(len(texts))
    return pd.DataFrame({"text": np.array(texts, dtype=object)[order], "category": np.array(labels)[order]})


def _texts(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as the reference pipeline reads it: missing texts as empty ones."""
    return frame.assign(text=frame["text"].fillna("").astype(object))


def _reference(model: str, numeric: list[str]):
    """The pipeline ``mercer fit --text text --model <model> --no-tune`` builds, written by hand."""
    parts = [("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric)] if numeric else []
    prep = ColumnTransformer(parts + [("text0", TfidfVectorizer(), "text")], sparse_threshold=1.0)
    est = {"svc": KernelSVC(kernel=RBF(), C=1.0, random_state=0),
           "ridge-classifier": KernelRidgeClassifier(kernel=RBF(), alpha=1.0),
           "nystroem-classifier": NystroemKernelRidgeClassifier(kernel=RBF(), alpha=1.0, n_centers="auto",
                                                                random_state=0, dtype="float32")}[model]
    return Pipeline([("prep", prep), ("model", est)])


def _fitted_rows(est):
    """The training rows a fitted mercer model keeps: support vectors, centres or all rows."""
    for name in ("support_vectors_", "centers_", "X_fit_"):
        if hasattr(est, name):
            return getattr(est, name)
    raise AssertionError(type(est).__name__)


def _fit_predict_evaluate(train, test, model, tmp_path, capsys, numeric):
    """fit, predict and evaluate through the CLI; each figure equals the reference pipeline's."""
    train.to_csv(tmp_path / "t.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    path = tmp_path / f"{model}.mercer"
    out, _ = cli_ok(["fit", "--data", tmp_path / "t.csv", "--target", "category", "--text", "text", "--model", model,
                   "--no-tune", "--out", path], capsys)
    assert "text column(s) 'text' as TF-IDF features (sparse)" in out
    ref = _reference(model, numeric)
    Xtr, ytr = _texts(train).drop(columns="category"), train["category"].to_numpy()
    Xte, yte = _texts(test).drop(columns="category"), test["category"].to_numpy()

    # the held-out line: the same split, the same accuracy
    Xa, Xb, ya, yb = train_test_split(Xtr, ytr, test_size=0.2, random_state=0, stratify=ytr)
    assert cli_number(r"held-out accuracy: ([0-9.]+)", out) == round(clone(ref).fit(Xa, ya).score(Xb, yb), 4)

    # the saved pipeline: TF-IDF rows kept sparse into the mercer estimator
    loaded = load(path)
    assert sp.issparse(loaded.named_steps["prep"].transform(Xte))
    est = final_estimator(loaded)
    assert sp.issparse(_fitted_rows(est)) or type(_fitted_rows(est)).__name__ == "SparseRows"

    # predict on the test file: the reference's predictions and accuracy
    out, _ = cli_ok(["predict", "--model", path, "--data", tmp_path / "test.csv", "--target", "category",
                   "--out", tmp_path / "pred.csv"], capsys)
    ref.fit(Xtr, ytr)
    expected = ref.predict(Xte)
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "pred.csv")["prediction"].to_numpy().astype(str),
                                  expected.astype(str))
    assert cli_number(r"accuracy against 'category': ([0-9.]+)", out) == round(float(np.mean(expected == yte)), 4)

    # evaluate: 3-fold cross-validation on the reference's folds
    out, _ = cli_ok(["evaluate", "--data", tmp_path / "t.csv", "--target", "category", "--text", "text", "--model",
                   model, "--cv", "3"], capsys)
    row = next(line for line in out.splitlines() if line.strip().startswith("accuracy"))
    folds = StratifiedKFold(n_splits=3, shuffle=True, random_state=0)
    assert float(row.split()[1]) == round(cross_val_score(clone(ref), Xtr, ytr, cv=folds).mean(), 4)
    return float(np.mean(expected == yte))


@pytest.mark.parametrize("model", ["svc", "ridge-classifier", "nystroem-classifier"])
def test_text_column_fit_predict_evaluate_match_python(model, tmp_path, capsys):
    df = _tiny_table(120, seed=1)
    accuracy = _fit_predict_evaluate(df.iloc[:90], df.iloc[90:], model, tmp_path, capsys, numeric=["words"])
    assert accuracy > 0.6  # the topics are learnable: far above the 1/3 of a guess


@pytest.mark.slow
@pytest.mark.skipif(not FORTUNES.is_dir(), reason="Debian's fortunes are not installed")
@pytest.mark.parametrize("model", ["svc", "ridge-classifier", "nystroem-classifier"])
def test_fortunes_fit_predict_evaluate_match_python(model, tmp_path, capsys):
    df = _fortunes_table()
    train, test = train_test_split(df, test_size=0.25, random_state=0, stratify=df["category"])
    accuracy = _fit_predict_evaluate(train, test, model, tmp_path, capsys, numeric=[])
    assert accuracy > 1.5 / 6


@pytest.mark.slow
def test_text_with_tuning_and_tune_command(tmp_path, capsys):
    """The default tuning and ``mercer tune`` learn on the sparse TF-IDF rows (no dense copy)."""
    df = _tiny_table(90, seed=2)
    df.to_csv(tmp_path / "t.csv", index=False)
    out, _ = cli_ok(["fit", "--data", tmp_path / "t.csv", "--target", "category", "--text", "text", "--model",
                   "ridge-classifier", "--holdout", "0", "--out", tmp_path / "m.mercer"], capsys)
    assert "tuned: " in out and "training accuracy" in out
    out, _ = cli_ok(["tune", "--data", tmp_path / "t.csv", "--target", "category", "--text", "text", "--model",
                   "ridge-classifier", "--out", tmp_path / "tuned.mercer"], capsys)
    assert "saved:" in out
    model = load(tmp_path / "tuned.mercer")
    assert sp.issparse(model.named_steps["prep"].transform(_texts(df).drop(columns="category")))
    out, _ = cli_ok(["tune", "--data", tmp_path / "t.csv", "--target", "category", "--text", "text", "--model",
                   "svc", "--search", "halving", "--cv", "3"], capsys)
    assert "successive halving over 24 candidates" in out


def test_halving_grid_centred_on_scikit_learns_scale_for_sparse_rows():
    from types import SimpleNamespace

    from mercer.cli._tune import _grid

    kernels = _grid(SimpleNamespace(model="svc"), 5000, center=0.8)["model__kernel"]
    np.testing.assert_allclose([k.gamma for k in kernels], [0.024, 0.08, 0.24, 0.8, 2.4, 8.0])
    kernels = _grid(SimpleNamespace(model="svc"), 5000)["model__kernel"]  # default: around 1 / d
    assert kernels[3].gamma == pytest.approx(1 / 5000)


def test_text_option_forms_and_errors(tmp_path, capsys):
    df = _tiny_table(120, seed=3).assign(note=lambda d: d["text"].str.upper())
    plan = plan_columns(df.drop(columns="category"), text=["text,note"])
    assert plan.text == ["text", "note"] and plan.numeric == ["words"] and is_sparse_plan(plan)
    assert plan_columns(df.drop(columns="category"), text=["text", "note"]).text == ["text", "note"]
    # without --text, a text column with a value per row is dropped as an identifier (saying what keeps it)
    assert "text" in plan_columns(df.drop(columns="category")).identifiers
    with pytest.raises(CLIError, match=r"--text: unknown column\(s\) 'nope'"):
        plan_columns(df, text=["nope"])
    with pytest.raises(CLIError, match="--text and --categorical both name 'text'"):
        plan_columns(df, text=["text"], categorical=["text"])
    df.to_csv(tmp_path / "t.csv", index=False)
    code = main(["fit", "--data", str(tmp_path / "t.csv"), "--target", "category", "--text", "text",
                 "--preprocess", "none", "--model", "svc", "--out", str(tmp_path / "m.mercer")])
    assert code == 2 and "--text need --preprocess auto" in capsys.readouterr().err


def test_model_without_sparse_input():
    """A model that takes dense rows only: --text is refused, naming why; a wide one-hot goes dense."""
    from sklearn.ensemble import HistGradientBoostingClassifier  # its tags: no sparse input

    dense_only = HistGradientBoostingClassifier()
    assert not dense_only.__sklearn_tags__().input_tags.sparse
    df = _tiny_table(30, seed=4)
    with pytest.raises(CLIError, match="HistGradientBoostingClassifier takes dense rows only"):
        build_pipeline(plan_columns(df.drop(columns="category"), text=["text"]), dense_only, scale_target=False)
    wide = pd.DataFrame({"x": np.arange(300.0), "city": [f"c{i % 150}" for i in range(300)]})
    plan = plan_columns(wide)
    assert is_sparse_plan(plan)
    assert build_pipeline(plan, dense_only, scale_target=False).named_steps["prep"].sparse_threshold == 0
    assert build_pipeline(plan, KernelSVC(), scale_target=False).named_steps["prep"].sparse_threshold == 1


def _wide_table(n: int, seed: int) -> pd.DataFrame:
    """A regression table with a 150-level category (a sparse one-hot) and two numeric columns."""
    rng = np.random.default_rng(seed)
    city = rng.integers(0, 150, n)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    effect = rng.normal(size=150)
    return pd.DataFrame({"x1": x1, "x2": x2, "city": np.array([f"city{c:03d}" for c in city], dtype=object),
                         "y": np.sin(x1) + 0.5 * x2 + effect[city] + 0.1 * rng.normal(size=n)})


def test_wide_one_hot_stays_sparse_and_matches_dense(tmp_path, capsys):
    df = _wide_table(400, seed=5)
    plan = plan_columns(df.drop(columns="y"))
    assert plan.categories == df["city"].nunique() and is_sparse_plan(plan)
    narrow = df.assign(city=df["city"].str[:5])  # 1 level: the one-hot stays dense
    assert not is_sparse_plan(plan_columns(narrow.drop(columns="y")))
    train, test = df.iloc[:300], df.iloc[300:]
    train.to_csv(tmp_path / "t.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    out, _ = cli_ok(["fit", "--data", tmp_path / "t.csv", "--target", "y", "--model", "ridge", "--no-tune",
                   "--holdout", "0", "--out", tmp_path / "m.mercer"], capsys)
    assert f"1 categorical column(s) one-hot encoded ({train['city'].nunique()} sparse columns)" in out
    model = load(tmp_path / "m.mercer")
    Xte = test.drop(columns="y")
    assert sp.isspmatrix_csr(model.named_steps["prep"].transform(Xte))
    assert type(final_estimator(model).X_fit_).__name__ == "SparseRows"
    out, _ = cli_ok(["predict", "--model", tmp_path / "m.mercer", "--data", tmp_path / "test.csv", "--out",
                   tmp_path / "pred.csv"], capsys)
    # the same model on the dense one-hot, written by hand: the same predictions
    prep = ColumnTransformer([
        ("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), ["x1", "x2"]),
        ("categorical", make_pipeline(SimpleImputer(strategy="most_frequent"),
                                      OneHotEncoder(handle_unknown="ignore", sparse_output=False)), ["city"])])
    dense = Pipeline([("prep", prep), ("model", TransformedTargetRegressor(
        KernelRidge(kernel=RBF(), alpha=1.0), transformer=StandardScaler()))])
    dense.fit(train.drop(columns="y"), train["y"].to_numpy())
    np.testing.assert_allclose(pd.read_csv(tmp_path / "pred.csv")["prediction"], dense.predict(Xte),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_wide_one_hot_evaluate_and_tuning(tmp_path, capsys):
    """evaluate and the default tuning (the SVR's C grid included) on the sparse one-hot rows."""
    _wide_table(300, seed=5).to_csv(tmp_path / "t.csv", index=False)
    out, _ = cli_ok(["evaluate", "--data", tmp_path / "t.csv", "--target", "y", "--model", "nystroem-ridge",
                   "--cv", "3"], capsys)
    assert float(next(line for line in out.splitlines() if line.strip().startswith("R^2")).split()[1]) > 0.3
    out, _ = cli_ok(["fit", "--data", tmp_path / "t.csv", "--target", "y", "--model", "svr", "--holdout", "0",
                   "--out", tmp_path / "svr.mercer"], capsys)
    assert "tuned: " in out
    assert sp.issparse(final_estimator(load(tmp_path / "svr.mercer")).support_vectors_)


def test_tuning_scores_scikit_learns_scale_gamma_on_sparse_rows():
    """TF-IDF rows (norm 1: entries ~ 1/sqrt(d)) get scikit-learn's gamma='scale' as a candidate; the
    default 1 / d makes their RBF kernel nearly constant. Standardised columns do not (the same gamma)."""
    from mercer.cli._autotune import _scaled_rbf

    df = _tiny_table(60, seed=6)
    Z = TfidfVectorizer().fit_transform(_texts(df)["text"])
    d = Z.shape[1]
    var = Z.multiply(Z).mean() - Z.mean() ** 2  # what scikit-learn's SVC(gamma="scale") computes
    got = _scaled_rbf(RBF(), Z)
    assert got is not None and got.gamma == pytest.approx(1.0 / (d * var), rel=1e-12)
    assert _scaled_rbf(RBF(), Z.toarray()).gamma == pytest.approx(got.gamma, rel=1e-12)
    standardised = StandardScaler().fit_transform(np.random.default_rng(0).normal(size=(50, 4)))
    assert _scaled_rbf(RBF(), standardised) is None
    assert _scaled_rbf(RBF(gamma=0.5), Z) is None  # a gamma given by the user is kept
