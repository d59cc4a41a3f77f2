"""Start-up without timing: what a fresh interpreter imports for ``mercer --help`` and ``import
mercer``, and that the public names imported on first use (PEP 562) are the real ones.

``mercer --help`` (and ``mercer <command> --help``, ``mercer --version``) must not import numpy,
torch, scikit-learn or numba; ``import mercer`` imports none of them either; loading every
estimator imports nothing heavy beyond torch and scikit-learn (numba waits for the first SVM
solve). Figures: ``benchmarks/bench_startup.py``.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

import mercer

#: what a command's help and the bare package must not import
HEAVY = ("numpy", "torch", "sklearn", "scipy", "numba", "pandas", "matplotlib", "dask")


def _loaded_after(code: str, *, before: str = "", top: bool = True) -> set[str]:
    """Top-level packages (``top=False``: modules) a fresh interpreter imports while it runs ``code``
    (after ``before``)."""
    name = "m.split('.')[0]" if top else "m"
    probe = (f"import sys, json\n{before}\nbase = set(sys.modules)\n"
             f"try:\n    exec({code!r})\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
             f"print('\\n' + json.dumps(sorted({{{name} for m in set(sys.modules) - base}})))\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return set(json.loads(res.stdout.splitlines()[-1]))


# -- the command ----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["fit", "--help"], ["evaluate", "--help"],
                                  ["tune", "--help"], ["predict", "--help"], ["plot", "--help"], ["demo", "--help"]])
def test_command_help_imports_nothing_heavy(argv):
    # as the console script runs it (``mercer = mercer.cli:console_main``)
    loaded = _loaded_after(f"import sys; sys.argv = ['mercer', *{argv!r}]\n"
                           "from mercer.cli import console_main\nconsole_main()")
    assert "mercer" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_python_m_mercer_help_imports_nothing_heavy():
    loaded = _loaded_after("import runpy, sys; sys.argv = ['mercer', '--help']\n"
                           "runpy.run_module('mercer', run_name='__main__', alter_sys=True)")
    assert "mercer" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_help_lists_every_command_with_its_options(capsys):
    from mercer.cli import COMMANDS, main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    for argv, option in [(["fit", "--help"], "--memory-budget"), (["tune", "--help"], "--loo-max-n"),
                         (["evaluate", "--help"], "--cv"), (["plot", "--help"], "learning-curve"),
                         (["predict", "--help"], "--no-header"), (["demo", "--help"], "--quick")]:
        assert main(argv) == 0 and option in capsys.readouterr().out, argv


# -- the package ----------------------------------------------------------------------------------
def test_import_mercer_imports_nothing_heavy():
    loaded = _loaded_after("import mercer; mercer.__version__")
    assert "mercer" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.slow  # two imports of torch and scikit-learn in a fresh interpreter
def test_estimators_import_nothing_heavy_beyond_torch_and_sklearn():
    reference = "import torch; import sklearn.base, sklearn.utils.validation"
    beyond = _loaded_after("from mercer import *; import mercer.io, mercer.kernels, mercer.linalg", before=reference)
    assert not beyond & {"numba", "matplotlib", "dask", "distributed", "pandas", "pyarrow"}, sorted(beyond)


def test_an_estimator_imports_its_family_only():
    loaded = _loaded_after("from mercer import KernelRidge", top=False)
    assert "mercer.models.ridge" in loaded
    others = {f"mercer.models.{f}" for f in ("cluster", "gp", "svm", "neighbors", "mkl", "linear", "decomposition")}
    assert not loaded & others, sorted(loaded & others)


def test_models_names_come_from_their_families():
    import mercer.models

    assert sorted(mercer.models.__all__) == sorted(mercer.models._ORIGIN)
    for name, family in mercer.models._ORIGIN.items():
        assert getattr(mercer.models, name) is getattr(sys.modules[f"mercer.models.{family}"], name), name
    assert mercer.models.svm is sys.modules["mercer.models.svm"]
    with pytest.raises(AttributeError, match="module 'mercer.models' has no attribute 'Nope'"):
        mercer.models.Nope


def test_lazy_names_are_the_submodules_objects():
    import mercer.approx
    import mercer.models

    assert list(mercer._MODELS) == list(mercer.models.__all__)
    for name in mercer.__all__:
        obj = getattr(mercer, name)
        origin = mercer._ORIGIN.get(name)
        if origin is not None:
            assert obj is getattr(sys.modules[f"mercer.{origin}"], name), name
    assert mercer.KernelRidge is mercer.models.KernelRidge and mercer.Nystroem is mercer.approx.Nystroem
    assert mercer.config_context is mercer._config.config_context and callable(mercer.progress)
    for name in mercer._LAZY_SUBMODULES:  # e.g. mercer.io.save, mercer.sources.read_parquet
        assert getattr(mercer, name) is sys.modules[f"mercer.{name}"] and name not in mercer.__all__, name
    assert set(mercer.__all__) <= set(dir(mercer)) and {"io", "plotting", "sources"} <= set(dir(mercer))
    with pytest.raises(AttributeError, match="module 'mercer' has no attribute 'Nope'"):
        mercer.Nope


def test_star_import_and_pickle():
    namespace: dict = {}
    exec("from mercer import *", namespace)
    assert {"KernelRidge", "Nystroem", "config_context", "kernels", "__version__"} <= set(namespace)
    assert "io" not in namespace  # would shadow the standard library's io
    est = namespace["KernelRidge"](alpha=0.5, kernel="rbf")
    again = pickle.loads(pickle.dumps(est))
    assert type(again) is mercer.KernelRidge and again.get_params() == est.get_params()


def test_smo_loop_is_compiled_on_first_solve():
    import numba
    import numpy as np

    from mercer.models.svm import _smo

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    K = X @ X.T
    res = _smo.solve_smo(lambda i: K[i], np.diag(K).copy(), y, np.ones(30), cache_rows=30,
                         matvec=lambda r, c, v: K[np.ix_(r, c)] @ v)
    assert res.converged
    for name in ("_select", "_shrink", "_run"):  # numba's compiled loop, not the Python functions
        assert isinstance(getattr(_smo, name), numba.core.dispatcher.Dispatcher), name
    assert _smo._run.signatures
