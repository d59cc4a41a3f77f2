"""The ``mercer`` command behaves on damaged or hostile model files, closed pipes, odd paths and
sizes; the memory budget is resolved at each call; MKL refuses early."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pandas as pd
import pytest

import mercer
from mercer import config_context
from mercer.cli import COMMANDS, Command, main
from mercer.cli._main import memory_size
from mercer.io import load, save
from mercer.linalg import MemoryBudgetError, default_memory_budget
from mercer.models import ApproximateKernelPCA, KernelRidge, MKLClassifier, MKLRegressor

from conftest import cli_run


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust")
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"])
    df["y"] = df["a"] - 2 * df["b"]
    df.to_csv(root / "t.csv", index=False)
    return root


@pytest.fixture(scope="module")
def model_file(table):
    path = table / "m.mercer"
    assert main(["fit", "--data", str(table / "t.csv"), "--target", "y", "--model", "ridge", "--preprocess",
                 "none", "--holdout", "0", "--out", str(path), "-q"]) == 0
    return path


def _rewrite(src, dst, manifest=None, arrays=None):
    """Copy a model file, editing its manifest text and replacing arrays."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for entry in zin.namelist():
            data = zin.read(entry)
            if entry == "manifest.json" and manifest is not None:
                data = manifest(data.decode()).encode()
            if arrays and entry in arrays:
                import io

                buf = io.BytesIO()
                np.save(buf, arrays[entry])
                data = buf.getvalue()
            zout.writestr(entry, data)
    return dst


def _flip_bit(src, dst):
    raw = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        info = zf.getinfo("arr_0.npy") if "arr_0.npy" in zf.namelist() else zf.infolist()[-1]
    raw[info.header_offset + 30 + len(info.filename) + info.file_size // 2] ^= 0x10
    dst.write_bytes(bytes(raw))
    return dst


def _x_fit_entry(path) -> str:
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    return manifest["state"]["X_fit_"]["__tensor__"]


def _damaged(kind: str, src, tmp_path):
    dst = tmp_path / f"{kind}.mercer"
    if kind == "flipped-bit":
        return _flip_bit(src, dst)
    if kind == "deep-json":
        return _rewrite(src, dst, manifest=lambda t: t[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    if kind == "bad-sum":
        def bad_sum(text):
            m = json.loads(text)
            m["state"]["kernel_"] = {"__kernel__": {"type": "Sum", "params": {"kernels": 5}}}
            return json.dumps(m)
        return _rewrite(src, dst, manifest=bad_sum)
    if kind == "x-fit-shape":
        return _rewrite(src, dst, arrays={_x_fit_entry(src): np.zeros((7, 2))})
    if kind == "empty-manifest":
        return _rewrite(src, dst, manifest=lambda t: "")
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, message", [
    ("flipped-bit", "damaged or invalid model file (BadZipFile"),
    ("deep-json", "damaged or invalid model file (RecursionError"),
    ("bad-sum", "damaged or invalid model file (TypeError"),
    ("x-fit-shape", "mercer predict: error: "),  # found when applied: the operator names the mismatch
    ("empty-manifest", "damaged model file (manifest.json is empty)"),
])
def test_damaged_model_file_one_line_exit_2(kind, message, model_file, table, tmp_path, capsys):
    bad = _damaged(kind, model_file, tmp_path)
    code, out, err = cli_run(["predict", "--model", bad, "--data", table / "t.csv", "--target", "y", "--out",
                          tmp_path / "p.csv"], capsys)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_damaged_files_raise_value_error_from_load(model_file, tmp_path):
    for kind in ("flipped-bit", "deep-json", "bad-sum", "empty-manifest"):
        with pytest.raises(ValueError, match="damaged"):
            load(_damaged(kind, model_file, tmp_path))


class _ClosedPipe:
    """A stdout whose reader went away."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise ValueError("no file descriptor")


def test_broken_pipe_ends_quietly(model_file, table, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    code = main(["predict", "--model", str(model_file), "--data", str(table / "t.csv"), "-q"])
    err = capsys.readouterr().err
    assert code == 141 and "Broken pipe" not in err and "error" not in err


@pytest.mark.slow
def test_broken_pipe_in_a_shell(model_file, table):
    cmd = f"{sys.executable} -m mercer predict -q --model {model_file} --data {table / 't.csv'} | head -1"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert res.stdout == "prediction\n" and "Broken pipe" not in res.stderr and "error" not in res.stderr


@pytest.mark.parametrize("text, value", [("2TB", 2 * 10**12), ("1TiB", 2**40), ("1.5tib", int(1.5 * 2**40)),
                                         ("512MiB", 512 * 2**20), ("2GB", 2 * 10**9)])
def test_memory_sizes(text, value):
    assert memory_size(text) == value


def test_directory_as_data_and_out(table, tmp_path, capsys):
    code, _, err = cli_run(["fit", "--data", tmp_path, "--target", "y", "--model", "ridge", "--out", tmp_path / "m"],
                       capsys)
    assert code == 2 and "is a directory" in err
    code, _, err = cli_run(["fit", "--data", table / "t.csv", "--target", "y", "--model", "ridge", "--out", tmp_path],
                       capsys)
    assert code == 2 and f"--out {tmp_path} is a directory" in err


def test_out_checked_before_reading_and_fitting(tmp_path, capsys, monkeypatch):
    import mercer.cli._commands as commands

    def boom(*args, **kwargs):
        raise AssertionError("the data was read before --out was checked")

    monkeypatch.setattr(commands, "read_table", boom)
    code, _, err = cli_run(["fit", "--data", "big.csv", "--target", "y", "--model", "ridge", "--out",
                        tmp_path / "nope" / "m.mercer"], capsys)
    assert code == 2 and "folder" in err and "does not exist" in err


def test_no_partial_model_file_when_the_save_fails(table, tmp_path, capsys, monkeypatch):
    import mercer.cli._commands as commands

    def interrupted(model, path):
        open(path, "wb").write(b"PK partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "save", interrupted)
    code, _, err = cli_run(["fit", "--data", table / "t.csv", "--target", "y", "--model", "ridge", "--out",
                        tmp_path / "m.mercer"], capsys)
    assert code == 130 and list(tmp_path.iterdir()) == []


def test_warnings_print_one_line_each(monkeypatch, capsys):
    def noisy(args, out, progress):
        warnings.warn("first line\n   second line", UserWarning)
        return 0

    monkeypatch.setitem(COMMANDS, "noisy", Command("warn", "warn", lambda p: None, noisy))
    code, _, err = cli_run(["noisy"], capsys)
    assert code == 0 and err == "mercer: warning: UserWarning: first line second line\n"


def test_unexpected_exception_is_one_line_exit_1(monkeypatch, capsys):
    def buggy(args, out, progress):
        raise ZeroDivisionError("oops")

    monkeypatch.setitem(COMMANDS, "buggy", Command("bug", "bug", lambda p: None, buggy))
    code, _, err = cli_run(["buggy"], capsys)
    assert code == 1 and err.strip() == ("mercer buggy: internal error: ZeroDivisionError: oops "
                                         "(run with --debug for the traceback)")


@pytest.mark.slow  # a fresh interpreter: a few seconds
def test_import_mercer_exposes_io_in_a_fresh_interpreter():
    code = "import mercer, sys; assert 'mercer.io' not in sys.modules; print(mercer.io.save.__module__)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "mercer.io", res.stderr


def test_import_mercer_exposes_io():
    assert mercer.io is sys.modules["mercer.io"] and "io" in dir(mercer) and "io" not in mercer.__all__
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        mercer.nope


# -- memory budget: resolved at each call --------------------------------------------------------
def test_predict_honours_config_context(digits):
    X, y = digits
    model = KernelRidge(kernel="rbf", gamma=0.01).fit(X[:200], y[:200])
    assert model._budget == default_memory_budget(None)
    with config_context(memory_budget=123_456):
        assert model._budget == 123_456
        blocked = model.predict(X[200:300])  # the blocked path, within the context's small budget
    np.testing.assert_allclose(blocked, model.predict(X[200:300]), rtol=1e-10, atol=1e-10)
    assert KernelRidge(memory_budget=99_999).fit(X[:50], y[:50])._budget == 99_999  # the estimator's own wins


def test_loaded_model_gets_the_loading_machines_budget(digits, tmp_path):
    X, _ = digits
    with config_context(memory_budget=7 * 2**20):  # the "fitting machine"
        est = ApproximateKernelPCA(n_components=3, n_features=40, approximation="nystroem", random_state=0).fit(X[:200])
        assert est._budget == 7 * 2**20
    save(est, tmp_path / "a.mercer")
    assert "7340032" not in zipfile.ZipFile(tmp_path / "a.mercer").read("manifest.json").decode()
    with config_context(memory_budget=3 * 2**20):  # the "loading machine"
        loaded = load(tmp_path / "a.mercer")
        assert loaded._budget == 3 * 2**20
    np.testing.assert_allclose(loaded.transform(X[200:220]), est.transform(X[200:220]), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cls", [MKLRegressor, MKLClassifier])
def test_mkl_refuses_before_the_expensive_work(cls, monkeypatch):
    import mercer.models.mkl._mkl as mkl

    def never(*args, **kwargs):
        raise AssertionError("kernel statistics computed before the budget check")

    monkeypatch.setattr(mkl, "kernel_statistics", never)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 4))
    y = X[:, 0] if cls is MKLRegressor else (X[:, 0] > 0).astype(int)
    with pytest.raises(MemoryBudgetError, match=rf"{cls.__name__}: without n_components .* set n_components"):
        cls(memory_budget=32 * 2**20).fit(X, y)
