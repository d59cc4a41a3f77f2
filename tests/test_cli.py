"""The ``mercer`` command, run in-process: fit then predict on small files, and its errors."""

from __future__ import annotations

import runpy
import sys

import numpy as np
import pandas as pd
import pytest

from mercer import get_config
from mercer.io import load

from conftest import cli_run

_DEVICE = get_config().device or "cpu"  # MERCER_TEST_DEVICE sets it


@pytest.fixture(scope="module")
def files(tmp_path_factory, diabetes, digits):
    root = tmp_path_factory.mktemp("cli")
    X, y = diabetes
    reg = pd.DataFrame(X[:120], columns=[f"f{i}" for i in range(X.shape[1])])
    reg["target"] = y[:120]
    reg.to_csv(root / "reg.csv", index=False)
    reg.iloc[100:, ::-1].to_csv(root / "reg_test_reordered.csv", index=False)  # columns reversed
    Xd, yd = digits
    clf = pd.DataFrame(Xd[:150, :20], columns=[f"p{i}" for i in range(20)])
    clf.insert(0, "label", np.array(["zero", "one", "two"], dtype=object)[yd[:150] % 3])
    clf.to_parquet(root / "clf.parquet")
    np.save(root / "arr.npy", np.column_stack([Xd[:100, :10], yd[:100]]))
    np.savetxt(root / "noheader.csv", np.column_stack([yd[:60], Xd[:60, :5]]), delimiter=",")
    return root


def test_fit_predict_ridge_csv(files, tmp_path, capsys):
    model = tmp_path / "ridge.mercer"
    code, out, err = cli_run(["fit", "--data", files / "reg.csv", "--target", "target", "--model", "ridge",
                          "--kernel", "rbf:gamma=0.5+linear", "--alpha", "0.01", "--out", model], capsys)
    assert code == 0, err
    assert "reg.csv: 120 rows x 10 features (target: 'target')" in out
    assert "KernelRidge(alpha=0.01, kernel=(RBF(gamma=0.5) + Linear()))" in out
    assert "training R^2:" in out and "saved:" in out and model.is_file()
    preds = tmp_path / "pred.csv"
    code, out, err = cli_run(["predict", "--model", model, "--data", files / "reg_test_reordered.csv",
                          "--target", "target", "--out", preds], capsys)
    assert code == 0, err
    assert "R^2 against 'target'" in out
    got = pd.read_csv(preds)
    assert list(got.columns) == ["prediction"] and len(got) == 20
    frame = pd.read_csv(files / "reg.csv").iloc[100:].drop(columns="target")
    np.testing.assert_allclose(got["prediction"], load(model).predict(frame), rtol=1e-12)


def test_fit_predict_classifier_parquet(files, tmp_path, capsys):
    model = tmp_path / "clf.mercer"
    code, out, err = cli_run(["fit", "--data", files / "clf.parquet", "--target", "label", "--model",
                          "ridge-classifier", "--kernel", "rbf:gamma=0.1", "--dtype", "float32",
                          "--memory-budget", "64MiB", "--out", model], capsys)
    assert code == 0, err
    assert "classes: 3 (one, two, zero)" in out and f"float32 on {_DEVICE}" in out and "training accuracy:" in out
    code, out, err = cli_run(["predict", "--model", model, "--data", files / "clf.parquet", "--target", "label",
                          "--out", "-"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "prediction" and len(lines) == 151 and set(lines[1:]) <= {"zero", "one", "two"}
    assert "accuracy against 'label'" in err  # status goes to stderr when the CSV goes to stdout


def test_fit_predict_nystroem_models(files, tmp_path, capsys):
    model = tmp_path / "ny.mercer"
    code, out, err = cli_run(["fit", "--data", files / "reg.csv", "--target", "target", "--model", "nystroem-ridge",
                          "--kernel", "rbf:gamma=0.5", "--alpha", "0.1", "--centers", "40", "--out", model], capsys)
    assert code == 0, err
    assert "NystroemKernelRidge(alpha=0.1, kernel=RBF(gamma=0.5))" in out and f"float32 on {_DEVICE}" in out
    assert "centres: 40, conjugate gradient:" in out
    frame = pd.read_csv(files / "reg.csv").iloc[100:].drop(columns="target")
    code, out, err = cli_run(["predict", "--model", model, "--data", files / "reg_test_reordered.csv",
                          "--target", "target", "--out", tmp_path / "p.csv"], capsys)
    assert code == 0, err
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["prediction"], load(model).predict(frame),
                               rtol=1e-6)
    code, out, err = cli_run(["fit", "--data", files / "clf.parquet", "--target", "label", "--model",
                          "nystroem-classifier", "--kernel", "rbf:gamma=0.1", "--out", tmp_path / "c.mercer"], capsys)
    assert code == 0, err
    assert "classes: 3 (one, two, zero)" in out and "training accuracy:" in out
    code, out, err = cli_run(["fit", "--data", files / "reg.csv", "--target", "target", "--model", "ridge",
                          "--centers", "10", "--out", tmp_path / "x.mercer"], capsys)
    assert code == 2 and "--centers applies to the nystroem" in err


def test_fit_predict_kpca_npy(files, tmp_path, capsys):
    model = tmp_path / "kpca.mercer"
    code, out, err = cli_run(["fit", "--data", files / "arr.npy", "--target", "-1", "--model", "kpca",
                          "--n-components", "3", "--kernel", "rbf", "--out", model], capsys)
    assert code == 0, err
    assert "arr.npy: 100 rows x 10 features (target: 10)" in out and "explained variance" in out
    preds = tmp_path / "z.csv"
    code, out, err = cli_run(["predict", "--model", model, "--data", files / "arr.npy", "--target", "10",
                          "--out", preds], capsys)
    assert code == 0, err
    Z = pd.read_csv(preds)
    assert list(Z.columns) == ["kernelpca0", "kernelpca1", "kernelpca2"] and len(Z) == 100
    X = np.load(files / "arr.npy")[:, :10]
    np.testing.assert_allclose(Z.to_numpy(), load(model).transform(X), rtol=1e-12, atol=1e-14)


def test_no_header_csv_with_index_target(files, tmp_path, capsys):
    model = tmp_path / "m"
    code, out, err = cli_run(["fit", "--data", files / "noheader.csv", "--no-header", "--target", "0", "--model",
                          "ridge-classifier", "--kernel", "poly:degree=2", "--out", model], capsys)
    assert code == 0, err
    assert "60 rows x 5 features" in out and "primal solve" in out


def test_verbose_logs_with_timestamps(files, tmp_path, capsys):
    code, out, err = cli_run(["-v", "fit", "--data", files / "reg.csv", "--target", "target", "--model", "ridge",
                          "--out", tmp_path / "m"], capsys)
    assert code == 0
    assert "INFO mercer.models.ridge._exact: KernelRidge: dual solve on n=120" in err


@pytest.mark.parametrize("argv, message", [
    (["fit", "--data", "{root}/nope.csv", "--target", "y", "--model", "ridge", "--out", "{tmp}/m"],
     "data file not found"),
    (["fit", "--data", "{root}/reg.csv", "--target", "target", "--model", "ridge", "--kernel", "rbf:gamma=abc",
      "--out", "{tmp}/m"], "bad --kernel 'rbf:gamma=abc'"),
    (["fit", "--data", "{root}/reg.csv", "--target", "target", "--model", "ridge", "--kernel", "nosuch",
      "--out", "{tmp}/m"], "bad --kernel 'nosuch'"),
    (["fit", "--data", "{root}/reg.csv", "--target", "price", "--model", "ridge", "--out", "{tmp}/m"],
     "unknown column 'price'; columns are 'f0', 'f1'"),
    (["fit", "--data", "{root}/arr.npy", "--target", "11", "--model", "ridge", "--out", "{tmp}/m"],
     "column index 11 is out of range"),
    (["fit", "--data", "{root}/reg.csv", "--model", "ridge", "--out", "{tmp}/m"], "needs --target"),
    (["fit", "--data", "{root}/reg.csv", "--target", "target", "--model", "ridge", "--n-components", "2",
      "--out", "{tmp}/m"], "--n-components applies to kpca only"),
    (["fit", "--data", "{root}/clf.parquet", "--target", "p0", "--model", "ridge", "--preprocess", "none",
      "--out", "{tmp}/m"], "feature columns must be numeric; 'label'"),
    (["fit", "--data", "{root}/clf.parquet", "--target", "label", "--model", "ridge", "--out", "{tmp}/m"],
     "is not numeric; use a classifier model"),
    (["fit", "--data", "{tmp}/data.json", "--target", "0", "--model", "ridge", "--out", "{tmp}/m"],
     "unknown data format '.json'"),
    (["fit", "--data", "{root}/reg.csv", "--target", "target", "--model", "ridge", "--device", "tpu9",
      "--out", "{tmp}/m"], "device"),
    (["fit", "--data", "{root}/reg.csv", "--target", "target", "--model", "ridge", "--C", "2", "--out", "{tmp}/m"],
     "--C applies to svc, svr and nusvr only, not ridge"),
    (["fit", "--data", "{root}/reg.csv", "--target", "target", "--model", "svc", "--alpha", "2", "--out",
      "{tmp}/m"], "--alpha applies to the ridge models, not svc"),
    (["fit", "--data", "{root}", "--target", "target", "--model", "ridge", "--out", "{tmp}/m"], "is a directory"),
    (["predict", "--model", "{tmp}/missing.mercer", "--data", "{root}/reg.csv"], "model file not found"),
    (["predict", "--model", "{tmp}", "--data", "{root}/reg.csv"], "is a directory"),
    (["predict", "--model", "{root}/reg.csv", "--data", "{root}/reg.csv"], "not a mercer model file"),
])
def test_bad_inputs_exit_2_with_one_line(files, tmp_path, capsys, argv, message):
    (tmp_path / "data.json").write_text("{}")
    argv = [a.format(root=files, tmp=tmp_path) for a in argv]
    code, out, err = cli_run(argv, capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_predict_with_missing_columns(files, tmp_path, capsys):
    model = tmp_path / "m"
    assert cli_run(["fit", "--data", files / "reg.csv", "--target", "target", "--model", "ridge", "--out", model],
               capsys)[0] == 0
    code, out, err = cli_run(["predict", "--model", model, "--data", files / "clf.parquet", "--target", "label"],
                         capsys)
    assert code == 2 and "lacks: 'f0'" in err


def test_usage_errors_exit_2(capsys):
    code, out, err = cli_run(["fit", "--model", "ridge"], capsys)
    assert code == 2 and "the following arguments are required: --data" in err
    code, out, err = cli_run(["fit", "--data", "x.csv", "--model", "svm", "--out", "m"], capsys)
    assert code == 2 and "invalid choice: 'svm'" in err
    code, out, err = cli_run(["fit", "--data", "x.csv", "--model", "ridge", "--alpha", "-1", "--out", "m"], capsys)
    assert code == 2 and "expected a number >= 0" in err
    code, out, err = cli_run([], capsys)
    assert code == 2 and "usage: mercer" in err


def test_help_and_version(capsys):
    code, out, _ = cli_run(["--help"], capsys)
    assert code == 0 and "mercer fit --data" in out and "{demo,fit,predict}" not in out
    code, out, _ = cli_run(["fit", "--help"], capsys)
    assert code == 0 and "--n-components K" in out
    code, out, _ = cli_run(["--version"], capsys)
    assert code == 0 and out.startswith("mercer ")


def test_python_dash_m(monkeypatch, capsys):
    """``python -m mercer`` runs the same ``main`` (in-process: no second interpreter to start)."""
    monkeypatch.setattr(sys, "argv", ["mercer", "--version"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("mercer", run_name="__main__")
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("mercer ")


def test_demo_quick(capsys):
    code, out, err = cli_run(["demo", "--quick"], capsys)
    assert code == 0, err
    assert "digits (pixels / 16): 300 samples x 64 features" in out
    assert "breast cancer: 569 samples x 30 features" in out
    assert out.count("mercer KernelRidgeClassifier") == 2 and "sklearn SVC" in out
    assert "mercer KernelPCA" in out and "sklearn KernelPCA" in out
    # the same model computed by both libraries gives the same predictions
    for line in out.splitlines():
        if "identical test predictions" in line:
            same, total = line.split(":")[1].split()[0].split("/")
            assert same == total
            assert float(line.rsplit(" ", 1)[1]) < 1e-8, line  # and the same scores (it is the same model)


# -- preprocessing, evaluation, tuning ------------------------------------------------------------
@pytest.fixture(scope="module")
def messy(tmp_path_factory, diabetes):
    """A regression table as found in the wild: an index column, text, missing values, raw scales."""
    root = tmp_path_factory.mktemp("messy")
    X, y = diabetes
    rng = np.random.default_rng(1)
    df = pd.DataFrame(X[:150] * [1, 1, 100, 1000, 1, 1, 1, 1, 1, 1] + [0, 0, 0, 5000, 0, 0, 0, 0, 0, 0],
                      columns=[f"f{i}" for i in range(10)])
    df.insert(0, "Unnamed: 0", np.arange(150))
    df["city"] = rng.choice(["Oslo", "Lima", "Pune"], 150).astype(object)
    df["name"] = [f"person {i}" for i in range(150)]
    df.loc[rng.random(150) < 0.1, "f2"] = np.nan
    df.loc[rng.random(150) < 0.1, "city"] = None
    df["target"] = y[:150]
    df.iloc[:120].to_csv(root / "train.csv", index=False)
    df.iloc[120:].iloc[:, ::-1].to_csv(root / "test_reordered.csv", index=False)
    df.iloc[120:].drop(columns=["f3"]).to_csv(root / "test_missing_col.csv", index=False)
    return root


def test_fit_preprocesses_and_reports_in_one_line(messy, tmp_path, capsys):
    code, out, err = cli_run(["fit", "--data", messy / "train.csv", "--target", "target", "--model", "ridge",
                          "--out", tmp_path / "m"], capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("preprocessing: "))
    assert ("dropped index column 'Unnamed: 0'" in line and "'name'" in line and "10 numeric column(s) standardised"
            in line and "1 categorical column(s) one-hot encoded" in line and "'f2' (" in line
            and "'city' (" in line and "target centred and scaled" in line)
    assert "held-out R^2:" in out and "baseline (mean)" in out
    assert "training R^2:" in out and "(on the rows it was fit on: optimistic)" in out
    model = load(tmp_path / "m")
    steps = [type(s).__name__ for _, s in model.steps]
    assert steps == ["ColumnTransformer", "TransformedTargetRegressor"]
    assert list(model.feature_names_in_) == [f"f{i}" for i in range(10)] + ["city"]


def test_predict_matches_columns_by_name(messy, tmp_path, capsys):
    assert cli_run(["fit", "--data", messy / "train.csv", "--target", "target", "--model", "ridge", "--holdout", "0",
                "--out", tmp_path / "m"], capsys)[0] == 0
    code, out, err = cli_run(["predict", "--model", tmp_path / "m", "--data", messy / "test_reordered.csv", "--target",
                          "target", "--out", tmp_path / "p.csv"], capsys)
    assert code == 0, err
    frame = pd.read_csv(messy / "train.csv").iloc[:0]  # the training column order
    test = pd.read_csv(messy / "test_reordered.csv")[list(frame.columns)].drop(columns=["target", "Unnamed: 0", "name"])
    test["city"] = test["city"].astype(object).where(test["city"].notna(), np.nan)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["prediction"], load(tmp_path / "m").predict(test),
                               rtol=1e-12)
    code, out, err = cli_run(["predict", "--model", tmp_path / "m", "--data", messy / "test_missing_col.csv"], capsys)
    assert code == 2 and "lacks: 'f3'" in err


def test_preprocessing_options(messy, tmp_path, capsys):
    code, out, err = cli_run(["fit", "--data", messy / "train.csv", "--target", "target", "--model", "ridge",
                          "--drop", "city", "f0", "--categorical", "name", "--out", tmp_path / "m"], capsys)
    assert code == 0, err
    assert "dropped 'city', 'f0' (--drop)" in out and "1 categorical column(s)" in out  # 'name', kept
    code, out, err = cli_run(["fit", "--data", messy / "train.csv", "--target", "target", "--model", "ridge",
                          "--missing", "refuse", "--out", tmp_path / "m"], capsys)
    assert code == 2 and "missing values in 'f2' (" in err and "'city' (" in err
    code, out, err = cli_run(["fit", "--data", messy / "train.csv", "--target", "target", "--model", "ridge",
                          "--drop", "nope", "--out", tmp_path / "m"], capsys)
    assert code == 2 and "--drop: unknown column(s) 'nope'" in err
    code, out, err = cli_run(["fit", "--data", messy / "train.csv", "--target", "target", "--model", "ridge",
                          "--preprocess", "none", "--drop", "city", "--out", tmp_path / "m"], capsys)
    assert code == 2 and "need --preprocess auto" in err


@pytest.mark.parametrize("name, index", [("rownames", np.arange(1, 31)), ("id", np.arange(30)),
                                         ("Unnamed: 0", np.arange(30) * 3)])
def test_index_columns_detected(name, index):
    from mercer.cli._prep import plan_columns

    frame = pd.DataFrame({name: index, "x": np.arange(30) * 0.5, "count": np.arange(30)})
    plan = plan_columns(frame)
    assert plan.index == [name] and plan.numeric == ["x", "count"]  # "count" is 0..n-1 but not named like an index


def test_npy_model_refuses_named_csv(files, tmp_path, capsys):
    assert cli_run(["fit", "--data", files / "arr.npy", "--target", "-1", "--model", "ridge-classifier",
                "--out", tmp_path / "m"], capsys)[0] == 0
    code, _, err = cli_run(["predict", "--model", tmp_path / "m", "--data", files / "reg.csv"], capsys)
    assert code == 2 and "cannot be matched by name" in err


def test_evaluate_table_with_baseline(messy, capsys):
    code, out, err = cli_run(["evaluate", "--data", messy / "train.csv", "--target", "target", "--model", "ridge",
                          "--cv", "3"], capsys)
    assert code == 0, err
    assert "3-fold cross-validation (seed 0)" in out and "baseline (mean)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert set(rows) >= {"metric", "R^2", "RMSE", "MAE"}
    assert float(rows["R^2"][1]) > float(rows["R^2"][4]) and rows["R^2"][2] == "±"
    code, out, err = cli_run(["evaluate", "--data", messy / "train.csv", "--target", "target", "--model", "kpca"],
                         capsys)
    assert code == 2 and "kpca has none" in err


def test_evaluate_holdout_classifier(files, capsys):
    code, out, err = cli_run(["evaluate", "--data", files / "clf.parquet", "--target", "label", "--model",
                          "ridge-classifier", "--holdout", "0.3"], capsys)
    assert code == 0, err
    assert "one held-out split of 30%" in out and "baseline (majority class)" in out and "balanced accuracy" in out


@pytest.mark.slow
def test_tune_regression_loo(messy, tmp_path, capsys):
    code, out, err = cli_run(["tune", "--data", messy / "train.csv", "--target", "target", "--out", tmp_path / "t"],
                         capsys)
    assert code == 0, err
    assert "closed-form leave-one-out (KernelRidgeCV) on 120 rows" in out and "saved:" in out
    assert type(load(tmp_path / "t").steps[-1][1].regressor_).__name__ == "KernelRidgeCV"
    # the tuned model is applied by 'mercer predict' (it refused a KernelRidgeCV before)
    code, out, err = cli_run(["predict", "--model", tmp_path / "t", "--data", messy / "train.csv", "--out",
                          tmp_path / "p.csv"], capsys)
    assert code == 0, err
    assert (tmp_path / "p.csv").read_text().count("\n") == 121


@pytest.mark.slow
def test_tune_classifier_halving(files, capsys):
    code, out, err = cli_run(["tune", "--data", files / "clf.parquet", "--target", "label", "--model",
                          "ridge-classifier", "--cv", "3", "--search", "halving"], capsys)
    assert code == 0, err
    assert "successive halving over 30 candidates" in out and "best 3-fold score" in out


@pytest.mark.parametrize("model, data, target, searched", [("svr", "reg.csv", "target", "C"),
                                                          ("nusvr", "reg.csv", "target", "C"),
                                                          ("nusvc", "clf.parquet", "label", "nu")])
def test_tune_halving_searches_each_models_regularisation(files, capsys, model, data, target, searched):
    """The halving grid holds the parameter the model has (SVR / NuSVR: C; NuSVC: nu; an alpha grid
    failed on all three)."""
    code, out, err = cli_run(["tune", "--data", files / data, "--target", target, "--model", model, "--cv", "3",
                              "--search", "halving"], capsys)
    assert code == 0, err
    assert "successive halving over 24 candidates" in out and f"'{searched}':" in out


def test_tune_classifier_learns_by_default(files, tmp_path, capsys):
    code, out, err = cli_run(["tune", "--data", files / "clf.parquet", "--target", "label", "--model",
                          "ridge-classifier", "--out", tmp_path / "t"], capsys)
    assert code == 0, err
    assert "validation accuracy on" in out and "given " in out and "saved:" in out
    assert type(load(tmp_path / "t").steps[-1][1]).__name__ == "KernelRidgeClassifier"


def test_tune_grid_and_refusals(messy, capsys):
    from types import SimpleNamespace

    from mercer.cli._tune import _grid

    grid = _grid(SimpleNamespace(model="svc"), 20)
    assert [k.gamma for k in grid["model__kernel"]][3] == pytest.approx(1 / 20) and grid["model__C"][0] == 0.1
    assert set(_grid(SimpleNamespace(model="ridge"), 4)) == {"model__regressor__kernel",
                                                                   "model__regressor__alpha"}
    code, _, err = cli_run(["tune", "--data", messy / "train.csv", "--target", "target", "--model", "kpca"], capsys)
    assert code == 2 and "not kpca" in err
