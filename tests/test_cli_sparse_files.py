"""Sparse data files through the ``mercer`` command (issue 29): a scipy ``.npz`` with its target in a
``.npy`` file, and Parquet in the sparse layout (``indices`` / ``values`` list columns, the target a
column). ``fit``, ``predict`` and ``evaluate`` give the figures of the same model fitted in Python on
the CSR matrix; a file larger than a quarter of the budget is streamed to a model that streams its
fit, block by block, as the sources stream it in Python.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from mercer import sources
from mercer.cli._data import is_sparse_input
from mercer.cli._prep import final_estimator
from mercer.io import load
from mercer.kernels import RBF
from mercer.models import KernelRidge, KernelSVC, NystroemKernelRidge

from conftest import cli_number, cli_ok, cli_run, text_like_rows

N, D, N_TRAIN = 240, 400, 180


@pytest.fixture(scope="module")
def problem():
    """Text-like rows (3% stored), three classes told apart by a few columns, and a smooth target."""
    X, codes = text_like_rows(N, D, density=0.03, spacing=7)
    y = np.asarray(X[:, :60].sum(1)).ravel() + np.sin(3 * X[:, 7].toarray().ravel())
    labels = np.array(["sea", "food", "space"])[codes]
    return X, y, labels


def _write(kind: str, folder, X, target, name: str):
    """``X`` and its target as the CLI reads them: ``(--data, --target)``."""
    if kind == "npz":
        sp.save_npz(folder / f"{name}.npz", X)
        np.save(folder / f"{name}_y.npy", target)
        return folder / f"{name}.npz", folder / f"{name}_y.npy"
    sources.write_sparse_parquet(folder / f"{name}.parquet", X, target, target="target", row_group_size=50)
    return folder / f"{name}.parquet", "target"


def _reference(model: str):
    """What ``mercer fit --model <model> --no-tune`` builds for sparse rows, written by hand: the rows
    passed through as they are, a regression target centred and scaled."""
    if model == "svc":
        est = KernelSVC(kernel=RBF(), C=1.0, random_state=0)
    else:
        est = TransformedTargetRegressor(NystroemKernelRidge(kernel=RBF(), alpha=1.0, n_centers="auto", random_state=0,
                                                             dtype="float32"), transformer=StandardScaler())
    return Pipeline([("prep", FunctionTransformer(accept_sparse=True)), ("model", est)])


@pytest.mark.parametrize("kind", ["npz", "parquet"])
@pytest.mark.parametrize("model", ["nystroem-ridge", "svc"])
def test_fit_predict_evaluate_match_python(kind, model, problem, tmp_path, capsys):
    X, y, labels = problem
    classifier = model == "svc"
    target = labels if classifier else y
    Xtr, ytr, Xte, yte = X[:N_TRAIN], target[:N_TRAIN], X[N_TRAIN:], target[N_TRAIN:]
    data, tgt = _write(kind, tmp_path, Xtr, ytr, "train")
    test, test_tgt = _write(kind, tmp_path, Xte, yte, "test")
    assert is_sparse_input(str(data))
    ref = _reference(model)

    # fit: the rows as they are, the held-out score of the same split
    out, _ = cli_ok(["fit", "--data", data, "--target", tgt, "--model", model, "--no-tune", "--out",
                     tmp_path / "m.mercer"], capsys)
    assert f"sparse rows ({Xtr.nnz} stored entries in {N_TRAIN} x {D}) used as they are" in out
    assert ("target centred and scaled" in out) != classifier and "streamed" not in out
    metric = "accuracy" if classifier else r"R\^2"
    Xa, Xb, ya, yb = train_test_split(Xtr, ytr, test_size=0.2, random_state=0, stratify=ytr if classifier else None)
    assert cli_number(rf"held-out {metric}: (-?[0-9.]+)", out) == round(clone(ref).fit(Xa, ya).score(Xb, yb), 4)
    ref.fit(Xtr, ytr)
    fitted = load(tmp_path / "m.mercer")
    rows = getattr(final_estimator(fitted), "support_vectors_" if classifier else "centers_")
    assert sp.issparse(rows) or type(rows).__name__ == "SparseRows"  # a model of sparse rows keeps them sparse

    # predict: the test file streamed to the saved model, the reference's predictions and score
    out, _ = cli_ok(["predict", "--model", tmp_path / "m.mercer", "--data", test, "--target", test_tgt, "--out",
                     tmp_path / "pred.csv"], capsys)
    got = pd.read_csv(tmp_path / "pred.csv")["prediction"].to_numpy()
    expected = ref.predict(Xte)
    if classifier:
        np.testing.assert_array_equal(got.astype(str), expected.astype(str))
        assert cli_number(r"accuracy against '[^']+': ([0-9.]+)", out) == round(float(np.mean(expected == yte)), 4)
        assert np.mean(expected == yte) > 0.6  # learnable: far above the 1/3 of a guess
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)  # float32 tiles, other blocks
        assert cli_number(r"R\^2 against '[^']+': (-?[0-9.]+)", out) == pytest.approx(ref.score(Xte, yte), abs=1e-4)

    # evaluate: 3-fold cross-validation on the reference's folds
    out, _ = cli_ok(["evaluate", "--data", data, "--target", tgt, "--model", model, "--cv", "3"], capsys)
    row = next(line for line in out.splitlines() if line.strip().startswith("accuracy" if classifier else "R^2"))
    folds = (StratifiedKFold if classifier else KFold)(n_splits=3, shuffle=True, random_state=0)
    assert float(row.split()[1]) == round(cross_val_score(clone(ref), Xtr, ytr, cv=folds).mean(), 4)


@pytest.mark.parametrize("kind", ["npz", "parquet"])
def test_large_file_streams_to_a_streaming_model(kind, problem, tmp_path, capsys):
    """Rows above a quarter of the budget stay on disk: the model (no pipeline) is the one the source
    gives in Python, and predict streams the test file to it."""
    X, y, _ = problem
    data, tgt = _write(kind, tmp_path, X[:N_TRAIN], y[:N_TRAIN], "train")
    test, _ = _write(kind, tmp_path, X[N_TRAIN:], y[N_TRAIN:], "test")
    budget = 64 << 10
    source = sources.as_source(str(data)) if kind == "npz" else sources.read_parquet(data, target="target")[0]
    assert source.bytes_per_row * source.n_samples > budget // 4
    out, _ = cli_ok(["fit", "--data", data, "--target", tgt, "--model", "nystroem-ridge", "--centers", "30", "--dtype",
                     "float64", "--memory-budget", "64KiB", "--out", tmp_path / "m.mercer"], capsys)
    assert "streamed from disk block by block, used as they are" in out and "held-out score: skipped" in out
    fitted = load(tmp_path / "m.mercer")
    assert isinstance(fitted, NystroemKernelRidge)
    ref = NystroemKernelRidge(kernel=RBF(), alpha=1.0, n_centers=30, random_state=0, dtype="float64",
                              memory_budget=budget).fit(source, y[:N_TRAIN])
    cli_ok(["predict", "--model", tmp_path / "m.mercer", "--data", test, "--out", tmp_path / "pred.csv"], capsys)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "pred.csv")["prediction"], ref.predict(X[N_TRAIN:]),
                               rtol=0, atol=1e-8)
    np.testing.assert_allclose(fitted.predict(X[N_TRAIN:]), ref.predict(X[N_TRAIN:]), rtol=0, atol=1e-10)


def test_evaluate_reads_a_large_file_into_memory(problem, tmp_path, capsys):
    """Cross-validation folds are subsets of the rows: ``evaluate`` reads a file that ``fit`` would
    stream (sparse, or a dense Parquet folder) into memory instead of failing on the source."""
    X, y, _ = problem
    data, tgt = _write("npz", tmp_path, X[:N_TRAIN], y[:N_TRAIN], "train")
    argv = ["--target", tgt, "--model", "nystroem-ridge", "--centers", "20", "--memory-budget", "64KiB"]
    out, _ = cli_ok(["fit", "--data", data, *argv, "--out", tmp_path / "m.mercer"], capsys)
    assert "streamed from disk" in out
    out, _ = cli_ok(["evaluate", "--data", data, *argv, "--cv", "3"], capsys)
    assert "streamed" not in out and f"sparse rows ({X[:N_TRAIN].nnz} stored entries" in out
    (tmp_path / "pq").mkdir()
    pd.DataFrame(X[:N_TRAIN, :5].toarray(), columns=list("abcde")).assign(y=y[:N_TRAIN]).to_parquet(
        tmp_path / "pq" / "part-0.parquet")
    out, _ = cli_ok(["evaluate", "--data", tmp_path / "pq", "--target", "y", "--model", "nystroem-ridge", "--cv", "3"],
                    capsys)
    assert "5 numeric column(s) standardised" in out


def test_targets_rows_without_one_and_errors(problem, tmp_path, capsys):
    X, y, _ = problem
    Xs, ys = X[:60], y[:60].copy()
    ys[[3, 17]] = np.nan
    data, tgt = _write("npz", tmp_path, Xs, ys, "t")
    out, _ = cli_ok(["fit", "--data", data, "--target", tgt, "--model", "ridge", "--no-tune", "--holdout", "0",
                     "--out", tmp_path / "m.mercer"], capsys)
    assert "dropped 2 row(s) without a target" in out and "58 rows" in out
    keep = ~np.isnan(ys)
    ref = Pipeline([("prep", FunctionTransformer(accept_sparse=True)), ("model", TransformedTargetRegressor(
        KernelRidge(kernel=RBF(), alpha=1.0), transformer=StandardScaler()))]).fit(Xs[keep], ys[keep])
    np.testing.assert_allclose(load(tmp_path / "m.mercer").predict(Xs), ref.predict(Xs), rtol=1e-9, atol=1e-9)

    def refused(argv, message):
        code, _, err = cli_run(["fit", "--model", "ridge", "--out", tmp_path / "e.mercer", *argv], capsys)
        assert code == 2 and message in err, err

    # a .npz holds no target column: --target is a .npy file of one value per row
    refused(["--data", data, "--target", "y"], "holds no target column; give --target as a .npy file of its 60 targets")
    np.save(tmp_path / "short.npy", ys[:50])
    refused(["--data", data, "--target", tmp_path / "short.npy"], "expected 60 values (one per row of t.npz)")
    refused(["--data", data, "--target", tmp_path / "none.npy"], "target file not found")
    refused(["--data", data, "--target", tgt, "--text", "a"], "--text: ")
    refused(["--data", data, "--target", tgt, "--drop", "a"], "without named columns")
    sp.save_npz(tmp_path / "csc.npz", Xs.tocsc())
    refused(["--data", tmp_path / "csc.npz", "--target", tgt], "save X.tocsr() instead")
    # Parquet in the sparse layout: other columns are named (a forgotten --target), --drop leaves them out
    pq = tmp_path / "p.parquet"
    sources.write_sparse_parquet(pq, Xs, y[:60], target="other")
    refused(["--data", pq, "--target", "indices"], "a column of the sparse layout, not a target")
    refused(["--data", pq], "needs --target")
    code, out, err = cli_run(["fit", "--data", pq, "--model", "kpca", "--out", tmp_path / "k.mercer"], capsys)
    assert code == 2 and "other columns 'other'" in err and "--drop" in err
    code, out, err = cli_run(["fit", "--data", pq, "--model", "kpca", "--drop", "other", "--out",
                              tmp_path / "k.mercer"], capsys)
    assert code == 0 and f"sparse rows ({Xs.nnz} stored entries in 60 x {D})" in out, err
    # a model fit on a named table cannot read unnamed sparse rows
    pd.DataFrame(Xs[:, :3].toarray(), columns=["a", "b", "c"]).assign(y=y[:60]).to_csv(tmp_path / "t.csv", index=False)
    cli_ok(["fit", "--data", tmp_path / "t.csv", "--target", "y", "--model", "ridge", "--no-tune", "--holdout", "0",
            "--out", tmp_path / "table.mercer"], capsys)
    code, _, err = cli_run(["predict", "--model", tmp_path / "table.mercer", "--data", data], capsys)
    assert code == 2 and "the model was fit on named columns (a table)" in err
    assert not is_sparse_input(str(tmp_path / "t.csv"))


@pytest.mark.slow
def test_default_tuning_and_tune_command_on_sparse_rows(problem, tmp_path, capsys):
    """The default tuning, ``mercer tune`` (leave-one-out and successive halving) learn on the CSR rows."""
    X, y, _ = problem
    data, tgt = _write("parquet", tmp_path, X[:N_TRAIN], y[:N_TRAIN], "train")
    fit = ["fit", "--data", data, "--target", tgt, "--model", "ridge", "--out", tmp_path / "m.mercer"]
    tuned, _ = cli_ok(fit, capsys)
    given, _ = cli_ok(fit + ["--no-tune"], capsys)
    assert "tuned: " in tuned and "not tuned" in given
    held, base = (cli_number(r"held-out R\^2: (-?[0-9.]+)", tuned), cli_number(r"baseline \(mean\): (-?[0-9.]+)", tuned))
    assert held > max(base, cli_number(r"held-out R\^2: (-?[0-9.]+)", given)) + 0.1  # 0.17 against -0.15 and -0.03
    out, _ = cli_ok(["tune", "--data", data, "--target", tgt, "--model", "ridge", "--out", tmp_path / "t.mercer"],
                    capsys)
    assert "closed-form leave-one-out" in out
    assert sp.issparse(final_estimator(load(tmp_path / "t.mercer")).X_fit_) or \
        type(final_estimator(load(tmp_path / "t.mercer")).X_fit_).__name__ == "SparseRows"
    out, _ = cli_ok(["tune", "--data", data, "--target", tgt, "--model", "nystroem-ridge", "--search", "halving", "--cv", "3"],
                    capsys)
    assert "successive halving over" in out
