"""Import layering, checked with import-linter: the contracts are in ``pyproject.toml``
(``[tool.importlinter]``: the layers of DESIGN.md, model families apart, no cycles, private modules
and private names kept inside their package; the last one is ``tools/importlinter_contracts.py``).

By hand: ``.venv/bin/lint-imports`` in the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"
CONTRACTS_MODULE = ROOT / "tools" / "importlinter_contracts.py"

_LINK = re.compile(r"(\S+) -> (\S+)")


def lint_imports(cwd: Path, config: Path) -> tuple[int, str]:
    """Run import-linter (exit status, report) on the ``mercer`` package found first from ``cwd``, in
    a fresh process, so that the package and the custom contract come from ``cwd`` when there."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))")
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=300)
    return result.returncode, result.stdout + result.stderr


def broken_contracts(report: str) -> dict[str, str]:
    """The report of each broken contract, by contract name."""
    lines = report.partition("Broken contracts")[2].splitlines()
    found: dict[str, list[str]] = {}
    name = None
    for line, below in zip(lines, lines[1:] + [""]):
        if line.strip() and set(below.strip()) == {"-"} and len(below.strip()) == len(line.strip()):
            name = line.strip()
            found[name] = []
        elif name is not None and set(line.strip()) != {"-"}:
            found[name].append(line)
    return {name: "\n".join(text) for name, text in found.items()}


def violations(text: str) -> list[list[str]]:
    """The violations in a contract's report, each as its import links ("a -> b": one for a direct
    import, several for an indirect chain)."""
    entries: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("- "):  # a violation starts; an indented line continues its chain
            entries.append([])
        elif not line.startswith(" "):
            continue
        m = _LINK.search(stripped.removeprefix("- ").removeprefix("& "))
        if m is not None and entries:
            entries[-1].append(f"{m.group(1)} -> {m.group(2)}")
    return [e for e in entries if e]


def test_import_contracts_hold():
    status, report = lint_imports(ROOT, CONFIG)
    assert status == 0, ("import-linter: imports that break the contracts of pyproject.toml "
                         "[tool.importlinter]:\n" + report)


# -- the check itself: a copy of the package with wrong imports must fail, naming the contract ----
INJECTED = {
    # a low layer importing an estimator (and so a cycle)
    "linalg/_cg.py": "from mercer.models import KernelRidge  # injected\n",
    # one family reaching into another family's private module
    "models/svm/_svc.py": "from ..ridge._exact import KernelRidge as _ExactRidge  # injected\n",
    # the same through the root package, which re-exports every estimator
    "kernels/_checks.py": "from .. import KernelRidge  # injected\n",
    # a private name from another package
    "approx/_sketch.py": "from ..linalg import _injected_private  # injected\n",
}
# A new module with imports the contracts allow: private names of its own package, of models._base
# (shared by the families) and of the top-level internals.
ALLOWED = ("from ._svc import _injected_same_package\n"
           "from .._base import _injected_shared_by_families\n"
           "from ..._validation import _NAMED\n"
           "from ... import _random\n")


@pytest.fixture(scope="module")
def broken_copy(tmp_path_factory) -> dict[str, str]:
    """The broken contracts of a copy of the package with the INJECTED imports."""
    tmp = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "src" / "mercer", tmp / "mercer", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "tools").mkdir()
    shutil.copy(CONTRACTS_MODULE, tmp / "tools" / CONTRACTS_MODULE.name)
    for rel, line in INJECTED.items():
        with open(tmp / "mercer" / rel, "a", encoding="utf-8") as fh:
            fh.write("\n" + line)
    (tmp / "mercer" / "models" / "svm" / "_allowed.py").write_text(ALLOWED, encoding="utf-8")
    status, report = lint_imports(tmp, CONFIG)
    assert status != 0, report
    return broken_contracts(report)


@pytest.mark.parametrize("contract, link", [
    ("layers (DESIGN.md)", "mercer.linalg._cg -> mercer.models"),
    ("layers (DESIGN.md)", "mercer.kernels._checks -> mercer"),
    ("no cycles", ".linalg -> .models"),
    ("model families", "mercer.models.svm._svc -> mercer.models.ridge._exact"),
    ("private modules", "mercer.models.svm._svc -> mercer.models.ridge._exact"),
    ("private names", "mercer.approx._sketch -> mercer.linalg._injected_private"),
])
def test_check_fails_on_wrong_import(broken_copy, contract, link):
    names = [name for name in broken_copy if name.startswith(contract)]
    assert names, f"contract {contract!r} kept; broken: {sorted(broken_copy)}"
    assert any(link in entry for entry in violations(broken_copy[names[0]])), broken_copy[names[0]]


def test_check_allows_own_and_shared_internals(broken_copy):
    for text in broken_copy.values():
        assert "mercer.models.svm._allowed ->" not in text, text


def test_execution_core_rules_hold():
    """What the execution core keeps out of the estimators (tools/code_metrics.py): no operator type
    test and no byte arithmetic in models/, no block-size constant outside linalg/."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("code_metrics", ROOT / "tools" / "code_metrics.py")
    metrics = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metrics)
    type_tests, arithmetic, constants = metrics.core_violations()
    assert type_tests == [], f"operator type tests in models/: {type_tests}"
    assert arithmetic == [], f"byte arithmetic in models/: {arithmetic} (ask mercer.linalg's ExecutionPlan)"
    assert constants == [], f"block-size constants outside linalg/: {constants} (put them in linalg/_plan.py)"
