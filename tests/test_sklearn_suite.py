"""scikit-learn's own test files, run with mercer's estimators swapped in (``make test-sklearn``).

The suites are marked ``sklearn_suite`` and deselected by the default run (minutes); how the swap
and the counting work is in ``tests/sklearn_suite/harness.py``. Each suite fails when a test that
builds a mercer estimator fails without being listed in ``tests/sklearn_suite/expected_failures.toml``,
or when a listed failure now passes (or no longer builds a mercer estimator): update the list in
the same change (``harness.py <suite> --toml`` prints the stubs). The unmarked tests below check
the harness itself and the list's format, in the default run.
"""

from __future__ import annotations

import ast

import pytest
from sklearn_suite.harness import SUITES, compare, load_expected, rewrite, run_suite, sklearn_dir, table

_ROWS: dict = {}
_SVM = {"sklearn.svm.SVC": "mercer.KernelSVC"}


class _TablePrinter:
    """Prints the table of the suites that ran at the end of the session."""

    def pytest_terminal_summary(self, terminalreporter):
        if _ROWS:
            terminalreporter.section("scikit-learn suites with mercer's estimators")
            terminalreporter.write_line(table({name: _ROWS[name] for name in SUITES if name in _ROWS}))


def test_expected_failures_file_is_valid():
    expected = load_expected()
    assert set(expected) <= set(SUITES)


@pytest.mark.parametrize("suite", list(SUITES))
def test_installed_scikit_learn_has_the_test_file(suite):
    assert (sklearn_dir() / SUITES[suite].path).is_file()


def test_rewrite_rebinds_on_the_import_line():
    source = ("import numpy as np\n"
              "from sklearn.svm import (\n    SVR,\n    SVC as Classifier,\n)  # noqa\n"
              "from sklearn import base, svm\n"
              "def f():\n    from sklearn.svm import SVC\n    return SVC\n")
    out = rewrite(source, _SVM)
    lines = out.splitlines()
    assert len(lines) == len(source.splitlines())  # line numbers of the installed file are kept
    assert lines[4] == ")" + "; Classifier = __import__('sklearn_suite.harness', fromlist=['_'])" \
        ".swapped('sklearn.svm.SVC')  # noqa"
    assert "svm = __import__('sklearn_suite.harness', fromlist=['_']).proxy(svm, 'sklearn.svm')" in lines[5]
    assert lines[7].startswith("    from sklearn.svm import SVC; SVC = ")
    assert "SVR =" not in out and "base =" not in out
    ast.parse(out)


def test_rewrite_of_every_suite_compiles_and_binds_each_swap():
    for suite in SUITES.values():
        source = (sklearn_dir() / suite.path).read_text()
        out = rewrite(source, suite.swaps)
        ast.parse(out)
        assert out.count("\n") == source.count("\n")
        assert out.count("sklearn_suite.harness") >= len(suite.swaps) or ".proxy(" in out


def test_compare_counts_and_discrepancies():
    results = {
        "a": {"built": True, "outcome": "passed"}, "b": {"built": True, "outcome": "failed"},
        "c": {"built": True, "outcome": "failed"}, "d": {"built": False, "outcome": "failed"},
        "e": {"built": True, "outcome": "xfailed"}, "f": {"built": True, "outcome": "skipped"},
    }
    c = compare(results, {"b": {}, "a": {}, "gone": {}})
    assert (c["passed"], c["built"], c["skipped"]) == (2, 4, 1)
    assert c["unexpected_failures"] == ["c"]
    assert c["unexpected_passes"] == ["a"]
    assert c["stale"] == ["gone"]


@pytest.mark.sklearn_suite
@pytest.mark.parametrize("suite", list(SUITES))
def test_sklearn_suite(suite, request):
    if not request.config.pluginmanager.has_plugin("sklearn_suite_table"):
        request.config.pluginmanager.register(_TablePrinter(), "sklearn_suite_table")
    counts = compare(run_suite(suite), load_expected().get(suite, {}))
    _ROWS[suite] = counts
    assert not counts["unexpected_failures"], (
        f"{suite}: failures not listed in expected_failures.toml: {counts['unexpected_failures']}")
    assert not counts["unexpected_passes"], (
        f"{suite}: listed as expected failures but pass now (remove them): {counts['unexpected_passes']}")
    assert not counts["stale"], (
        f"{suite}: listed but no longer run with a mercer estimator (remove them): {counts['stale']}")
