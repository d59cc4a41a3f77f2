"""Run scikit-learn's own unit tests with mercer's estimators swapped in.

How the swap works
------------------
Each suite names a test file of the *installed* scikit-learn and the classes to swap, e.g.
``sklearn.svm.SVC -> mercer.KernelSVC``. Nothing of scikit-learn is copied into this
repository: at run time the file is read from ``site-packages``, its import statements are
located with :mod:`ast`, and right after each statement that binds a swapped name a binding is
appended *on the same line*, so line numbers in tracebacks are those of the installed file::

    from sklearn.kernel_ridge import KernelRidge; KernelRidge = <mercer.KernelRidge>
    from sklearn import base, svm; svm = <svm, with SVC -> mercer.KernelSVC>

A module imported whole (``from sklearn import svm``, then ``svm.SVC(...)``) is replaced by a
read-only proxy of the module that answers the swapped names and delegates everything else; the
real ``sklearn.svm`` is never patched, so scikit-learn's own internals are untouched. Because the
binding follows the import immediately, decorators such as ``@pytest.mark.parametrize("Est",
[svm.SVC, svm.SVR])`` already see mercer's class. The rewritten file goes to a temporary
directory and runs in a child ``pytest`` with scikit-learn's conftest loaded as a plugin (its
``global_random_seed`` and ``global_dtype`` fixtures, seed 42 as in scikit-learn's default run)
and this module loaded as a second plugin, single-threaded. Not handled (no suite needs it): a
swapped class reached as ``sklearn.svm.SVC`` after a bare ``import sklearn``.

What is counted
---------------
Only tests that *build a mercer estimator* count, as in issue 12: while a test runs (setup,
call, teardown), the ``__init__`` of each swapped mercer class is wrapped to record that it ran
(a ``clone`` counts); a test handed a ready-made mercer instance (a parameter, a fixture) counts
too. A test that built nothing of mercer's (it only exercises scikit-learn's ``MiniBatchKMeans``,
a helper function, ...) is left out. Tests that provably cannot reach a swapped class (a look at
the names the file uses: see ``unswapped_tests``) are not even run, which saves most of
``test_k_means.py``'s time and changes no count. Pytest's verdict decides: a counted test fails
if any of its phases failed; one that scikit-learn marks ``xfail`` and that fails the way it
expects (or passes) counts as passed, as in scikit-learn's own run; skips are left out of the
count and reported apart.

The outcome is compared with ``expected_failures.toml`` (next to this file) by
``tests/test_sklearn_suite.py``: a failure not listed, or a listed failure that now passes (or
no longer builds a mercer estimator), fails the run, so the list stays true.

Command line: the table; ``--failures`` the failures grouped by message, with the failing line of
the test file; ``--toml`` stubs for the failures not yet listed (fill in category and reason) and
the entries to delete; ``--durations`` the slowest tests::

    .venv/bin/python tests/sklearn_suite/harness.py [suite ...] [--failures] [--toml] [--durations]
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import types
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXPECTED_FILE = HERE / "expected_failures.toml"
_OUT_ENV = "MERCER_SKLEARN_SUITE_OUT"
_SWAPS_ENV = "MERCER_SKLEARN_SUITE_SWAPS"
_SKIP_ENV = "MERCER_SKLEARN_SUITE_SKIP"
#: Reason categories allowed in expected_failures.toml.
CATEGORIES = {
    "private": "reads a private attribute of scikit-learn's class",
    "wording": "compares scikit-learn's message wording",
    "deliberate": "behaviour mercer documents as deliberately different",
    "todo": "not yet implemented (names the issue)",
}


@dataclass(frozen=True)
class Suite:
    """One scikit-learn test file and the classes swapped in it."""

    path: str  # relative to the installed sklearn package
    swaps: dict  # "sklearn.module.Name" -> "mercer.module.Name"


SUITES = {
    "kernel_ridge": Suite("tests/test_kernel_ridge.py",
                          {"sklearn.kernel_ridge.KernelRidge": "mercer.KernelRidge"}),
    "kernel_pca": Suite("decomposition/tests/test_kernel_pca.py",
                        {"sklearn.decomposition.KernelPCA": "mercer.KernelPCA"}),
    "kernel_approximation": Suite("tests/test_kernel_approximation.py", {
        "sklearn.kernel_approximation.Nystroem": "mercer.approx.Nystroem",
        "sklearn.kernel_approximation.RBFSampler": "mercer.approx.RandomFourierFeatures"}),
    "svm": Suite("svm/tests/test_svm.py", {"sklearn.svm.SVC": "mercer.KernelSVC", "sklearn.svm.SVR": "mercer.KernelSVR",
                                           "sklearn.svm.NuSVC": "mercer.NuSVC", "sklearn.svm.NuSVR": "mercer.NuSVR",
                                           "sklearn.svm.OneClassSVM": "mercer.OneClassSVM"}),
    "svm_sparse": Suite("svm/tests/test_sparse.py", {  # the SVR/nu/one-class cases (SVC's: sparse input, issue 29)
        "sklearn.svm.SVR": "mercer.KernelSVR", "sklearn.svm.NuSVC": "mercer.NuSVC", "sklearn.svm.NuSVR": "mercer.NuSVR",
        "sklearn.svm.OneClassSVM": "mercer.OneClassSVM"}),
    "gpr": Suite("gaussian_process/tests/test_gpr.py", {
        "sklearn.gaussian_process.GaussianProcessRegressor": "mercer.GaussianProcessRegressor"}),
    "k_means": Suite("cluster/tests/test_k_means.py", {"sklearn.cluster.KMeans": "mercer.KMeans"}),
}


def sklearn_dir() -> Path:
    """The installed scikit-learn package directory (found without importing it)."""
    return Path(sysconfig.get_paths()["purelib"]) / "sklearn"


# ---------------------------------------------------------------- source rewriting (parent side)

def _binding(full: str, bind: str, swaps: dict) -> str | None:
    """Code that rebinds ``bind`` (imported as ``full``) to its swapped version, if any."""
    hook = "__import__('sklearn_suite.harness', fromlist=['_'])"
    if full in swaps:
        return f"{bind} = {hook}.swapped({full!r})"
    if any(key.startswith(full + ".") for key in swaps):
        return f"{bind} = {hook}.proxy({bind}, {full!r})"
    return None


def _rebindings(tree: ast.Module, swaps: dict) -> list:
    """``(import node, [(bound name, rebinding code)])`` for each import that binds a swapped name
    (``from sklearn.x import Name [as N]``, ``from sklearn import x``, ``import sklearn.x as x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            pairs = [(f"{node.module}.{a.name}", a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            pairs = [(a.name, a.asname) for a in node.names if a.asname]
        else:
            continue
        code = [(bind, c) for full, bind in pairs if (c := _binding(full, bind, swaps))]
        if code:
            found.append((node, code))
    return found


def rewrite(source: str, swaps: dict) -> str:
    """Append, on the line of each import that binds a swapped name, the rebinding to mercer's."""
    lines = source.splitlines(keepends=True)
    edits = [(node.end_lineno - 1, node.end_col_offset, "; " + "; ".join(c for _, c in code))
             for node, code in _rebindings(ast.parse(source), swaps)]
    for row, col, text in sorted(edits, reverse=True):
        line = lines[row].encode()  # ast columns are UTF-8 byte offsets
        lines[row] = (line[:col] + text.encode() + line[col:]).decode()
    return "".join(lines)


def _names(node: ast.AST) -> set:
    """Every name a statement mentions: identifiers, and strings (fixture names in usefixtures)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)  # a test's argument may be a fixture of this file
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.update(re.split(r"[\s,]+", n.value))
    return out


def _defined(node: ast.stmt) -> set:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _is_parametrize(decorator: ast.expr) -> bool:
    func = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(func, ast.Attribute) and func.attr == "parametrize"


def unswapped_tests(source: str, swaps: dict) -> dict:
    """Tests that cannot reach a swapped class, to deselect (a time saving only: they would build
    nothing of mercer's, so the count is the same).

    ``"never"``: top-level tests that mention none of the swapped classes' bound names, nor
    (transitively) a module-level function, fixture, class or variable that does.
    ``"by_params"``: tests that reach one only through their ``parametrize`` values; their cases
    whose parameters hold no swapped class, instance or function are deselected (the
    ``MiniBatchKMeans`` half of ``[KMeans, MiniBatchKMeans]``).
    """
    tree = ast.parse(source)
    tainted = {bind for _, code in _rebindings(tree, swaps) for bind, _ in code}
    while True:
        grown = set(tainted)
        for node in tree.body:
            if _names(node) & tainted:
                grown |= _defined(node)
        if grown == tainted:
            break
        tainted = grown
    tests = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
             and n.name.lower().startswith("test")]
    by_params = []
    for node in tests:
        if isinstance(node, ast.FunctionDef) and node.name in tainted:
            rest = [d for d in node.decorator_list if not _is_parametrize(d)] + node.body + [node.args]
            if not set().union(*map(_names, rest)) & tainted:
                by_params.append(node.name)
    return {"never": [n.name for n in tests if n.name not in tainted], "by_params": by_params}


def run_suite(name: str, extra_args: tuple = ()) -> dict:
    """Run one suite in a child pytest; return ``{test id: record}`` (see ``_Recorder``)."""
    suite = SUITES[name]
    source = (sklearn_dir() / suite.path).read_text()
    with tempfile.TemporaryDirectory(prefix=f"sklearn_suite_{name}_") as tmp:
        test_file = Path(tmp) / Path(suite.path).name
        test_file.write_text(rewrite(source, suite.swaps))
        (Path(tmp) / "pytest.ini").write_text("[pytest]\n")
        out = Path(tmp) / "results.json"
        env = {k: v for k, v in os.environ.items() if k != "SKLEARN_TESTS_GLOBAL_RANDOM_SEED"}
        # one thread: scikit-learn's OpenMP loops and torch's crawl when a shared machine is busy
        env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
        env.update({_OUT_ENV: str(out), _SWAPS_ENV: json.dumps(suite.swaps),
                    _SKIP_ENV: json.dumps(unswapped_tests(source, suite.swaps)),
                    "PYTHONPATH": os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])})
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sklearn.conftest",
               "-p", "sklearn_suite.harness", "-c", str(Path(tmp) / "pytest.ini"), "--rootdir", tmp,
               "-o", "console_output_style=classic", "--tb=short", "--no-header", *extra_args,
               str(test_file)]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        if proc.returncode not in (0, 1) or not out.exists():  # 0: all passed, 1: some failed
            raise RuntimeError(f"suite {name!r} did not run (pytest exit {proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


# ------------------------------------------------------------- swapping and tracking (child side)

_BUILT: list = []  # set to [True] when a swapped mercer class is instantiated during a test
_CLASSES: dict = {}  # "sklearn.x.Name" -> tracked mercer class


def _track(cls: type) -> type:
    """Wrap ``cls.__init__`` (signature kept, for get_params) to record instantiation."""
    init = cls.__init__
    if getattr(init, "_sklearn_suite_tracked", False):
        return cls

    @functools.wraps(init)
    def tracked_init(self, *args, **kwargs):
        _BUILT.append(True)
        init(self, *args, **kwargs)

    tracked_init._sklearn_suite_tracked = True
    cls.__init__ = tracked_init
    return cls


def swapped(full: str) -> type:
    """Mercer's class standing in for scikit-learn's ``full`` (tracked)."""
    if full not in _CLASSES:
        target = json.loads(os.environ[_SWAPS_ENV])[full]
        module, _, name = target.rpartition(".")
        _CLASSES[full] = _track(getattr(importlib.import_module(module), name))
    return _CLASSES[full]


class _ModuleProxy(types.ModuleType):
    """A stand-in for a scikit-learn module whose swapped names answer mercer's classes."""

    def __init__(self, module: types.ModuleType, overrides: dict):
        super().__init__(module.__name__, module.__doc__)
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, attr):
        overrides = object.__getattribute__(self, "_overrides")
        if attr in overrides:
            return overrides[attr]
        return getattr(object.__getattribute__(self, "_module"), attr)


def proxy(module: types.ModuleType, full: str) -> types.ModuleType:
    """``module`` (imported as ``full``) with the swapped classes it holds replaced."""
    swaps = json.loads(os.environ[_SWAPS_ENV])
    overrides = {key[len(full) + 1:]: swapped(key) for key in swaps
                 if key.startswith(full + ".") and "." not in key[len(full) + 1:]}
    return _ModuleProxy(module, overrides) if overrides else module


class _Recorder:
    """Records per test: outcome, whether a mercer estimator was built, first failure line."""

    def __init__(self):
        self.results = {}

    def _args_hold_mercer(self, item) -> bool:
        """A ready-made mercer estimator among the test's parameters or fixture values."""
        classes = tuple(_CLASSES.values())
        args = getattr(item, "funcargs", {}).values()
        return bool(classes) and any(isinstance(v, classes) for v in args)

    def pytest_collection_modifyitems(self, config, items):
        skip = json.loads(os.environ.get(_SKIP_ENV, '{"never": [], "by_params": []}'))
        keep = [i for i in items if not self._unswapped(i, skip)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep

    def _unswapped(self, item, skip: dict) -> bool:
        """True for a test case that cannot reach a swapped class (see ``unswapped_tests``)."""
        name = item.cls.__name__ if item.cls else item.originalname
        if name in skip["never"]:
            return True
        if name not in skip["by_params"]:
            return False
        classes = tuple(_CLASSES.values())
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        return not any((isinstance(v, type) and issubclass(v, classes))
                       or isinstance(v, classes + (types.FunctionType,)) for v in params)

    def pytest_runtest_logstart(self, nodeid, location):
        _BUILT.clear()

    def pytest_runtest_call(self, item):
        if self._args_hold_mercer(item):
            _BUILT.append(True)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.excinfo is not None:  # the last line of the test file on the failure's traceback
            lines = [e.lineno + 1 for e in call.excinfo.traceback if str(e.path) == str(item.path)]
            report.sklearn_suite_line = lines[-1] if lines else None
        return report

    def pytest_runtest_logreport(self, report):
        key = report.nodeid.split("::", 1)[-1]
        rec = self.results.setdefault(key, {"outcome": "passed", "built": False, "message": "", "line": None,
                                            "seconds": 0.0})
        rec["built"] = rec["built"] or bool(_BUILT)
        rec["seconds"] = round(rec["seconds"] + report.duration, 3)
        if report.failed and rec["outcome"] != "failed":
            rec["outcome"] = "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            rec["message"] = (crash.message if crash else str(report.longrepr)).splitlines()[0][:300]
            rec["line"] = getattr(report, "sklearn_suite_line", None)
        elif report.skipped and rec["outcome"] == "passed":
            rec["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"

    def pytest_sessionfinish(self, session):
        Path(os.environ[_OUT_ENV]).write_text(json.dumps(self.results, indent=1))


def pytest_configure(config):
    """Child side: register the recorder when run by ``run_suite``."""
    if os.environ.get(_OUT_ENV):
        config.pluginmanager.register(_Recorder(), "sklearn_suite_recorder")


# ----------------------------------------------------------------------------- checking / report

def load_expected() -> dict:
    """``{suite: {test id: {"category": ..., "reason": ...}}}`` from expected_failures.toml."""
    data = tomllib.loads(EXPECTED_FILE.read_text())
    for suite, entries in data.items():
        if suite not in SUITES:
            raise ValueError(f"{EXPECTED_FILE.name}: unknown suite {suite!r}")
        for test, entry in entries.items():
            if entry.get("category") not in CATEGORIES or not entry.get("reason"):
                raise ValueError(f"{EXPECTED_FILE.name}: [{suite}] {test!r} needs a category "
                                 f"in {sorted(CATEGORIES)} and a reason")
    return data


def compare(results: dict, expected: dict) -> dict:
    """Counts and discrepancies of one suite's results against its expected failures."""
    built = {k: r for k, r in results.items() if r["built"]}
    failed = {k for k, r in built.items() if r["outcome"] == "failed"}
    ran = {k for k, r in built.items() if r["outcome"] != "skipped"}
    return {
        "passed": len(ran - failed), "built": len(ran), "skipped": len(built) - len(ran),
        "unexpected_failures": sorted(failed - set(expected)),
        "unexpected_passes": sorted(k for k in expected if k in ran - failed),
        "stale": sorted(k for k in expected if k not in ran),
    }


def table(rows: dict) -> str:
    """Markdown table: suite file, passed / tests that build a mercer estimator."""
    out = ["| scikit-learn test file | passed / tests that build a mercer estimator |", "|---|---|"]
    for name, c in rows.items():
        swaps = ", ".join(f"{k.rsplit('.', 1)[1]} -> {v.rsplit('.', 1)[1]}"
                          for k, v in SUITES[name].swaps.items())
        out.append(f"| {SUITES[name].path} ({swaps}) | {c['passed']} / {c['built']} |")
    total = {k: sum(c[k] for c in rows.values()) for k in ("passed", "built")}
    out.append(f"| total | {total['passed']} / {total['built']} |")
    return "\n".join(out)


def _normalise(message: str) -> str:
    """A failure message with its numbers blurred, to group similar failures."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", message)[:160]


def _print_failures(results: dict) -> None:
    """The failures of one suite grouped by message: count, message, tests (with the failing line)."""
    groups = defaultdict(list)
    for k, r in results.items():
        if r["built"] and r["outcome"] == "failed":
            groups[_normalise(r["message"])].append(f"{k.split('[')[0]}:{r['line']}")
    for msg, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(tests):4d}  {msg}\n        {dict(Counter(tests))}")


def _print_toml(name: str, counts: dict) -> None:
    """Stubs to paste into expected_failures.toml (category and reason to fill in), and the
    entries to delete."""
    for k in counts["unexpected_failures"]:
        print(f'{json.dumps(k)} = {{ category = "?", reason = "?" }}  # [{name}]')
    for k in counts["unexpected_passes"] + counts["stale"]:
        print(f"# [{name}] remove {json.dumps(k)}")


def main(argv: list) -> int:
    """``harness.py [suite ...] [--failures] [--toml] [--durations]``: run, print the table."""
    names = [a for a in argv if not a.startswith("--")] or list(SUITES)
    expected = load_expected()
    rows, status = {}, 0
    for name in names:
        results = run_suite(name)
        rows[name] = c = compare(results, expected.get(name, {}))
        status |= bool(c["unexpected_failures"] or c["unexpected_passes"] or c["stale"])
        seconds = sum(r["seconds"] for r in results.values())
        print(f"{name}: {c['passed']} / {c['built']} ({seconds:.0f} s in tests; skipped {c['skipped']}; "
              f"not listed: {len(c['unexpected_failures'])}, listed but passing: "
              f"{len(c['unexpected_passes'])}, stale: {len(c['stale'])})", flush=True)
        if "--failures" in argv:
            _print_failures(results)
        if "--toml" in argv:
            _print_toml(name, c)
        if "--durations" in argv:
            for k, r in sorted(results.items(), key=lambda kv: -kv[1]["seconds"])[:10]:
                print(f"  {r['seconds']:7.2f} s  {k}")
    print(table(rows))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
