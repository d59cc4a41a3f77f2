"""The benchmarks' layout (benchmarks/results/README.md): suites share one command line, no script
carries a machine's path, and every probe or decision record that src/mercer cites exists.

Nothing is benchmarked here: each suite's ``main`` is called with ``parse_suite_args`` replaced by
one that parses the arguments and stops.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SUITES = sorted(p for p in (BENCH / "suites").glob("*.py") if not p.name.startswith("_"))
MACHINE_PATHS = re.compile(r"/(work|tmp|home|root)/")


def test_the_folders():
    assert {p.name for p in BENCH.iterdir() if p.is_dir()} >= {"suites", "probes", "experiments", "tools", "results"}
    assert not list(BENCH.glob("bench_*.py")) or [p.name for p in BENCH.glob("bench_*.py")] == ["bench_versions.py"]
    assert len(SUITES) >= 10
    for probe in (BENCH / "probes").glob("*.py"):
        assert probe.name.startswith("probe_"), probe
    assert (BENCH / "results" / "README.md").is_file() and (BENCH / "results" / "MOVED.md").is_file()


def test_no_suite_shadows_an_installed_module():
    """A suite runs with its folder first on ``sys.path``: a suite named like an installed module
    (``sparse.py``) is what ``import sparse`` then finds (Dask's array module failed so)."""
    path = [p for p in sys.path if Path(p or ".").resolve() != (BENCH / "suites").resolve()]
    optional = {"sparse", "cupy", "cupyx", "cudf", "xarray", "zarr", "h5py", "tiledb", "numbagg", "bottleneck"}
    shadowing = [p.stem for p in SUITES if importlib.machinery.PathFinder.find_spec(p.stem, path) is not None
                 or p.stem in sys.builtin_module_names or p.stem in sys.stdlib_module_names
                 or p.stem in optional]  # what our dependencies try to import when present (Dask: sparse, cupy)
    assert not shadowing, shadowing


def test_no_machine_paths():
    """No absolute path of one machine in a script or its results' pages (results' JSON records where a
    run happened, and is left as measured)."""
    offenders = []
    for path in sorted(BENCH.rglob("*")):
        if path.suffix not in (".py", ".md") or "results" in path.relative_to(BENCH).parts:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if MACHINE_PATHS.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_results_layout():
    results = BENCH / "results"
    for suite in SUITES:
        folder = results / suite.stem
        if folder.is_dir():
            assert not [p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(("latest", "quick"))], \
                f"{folder}: only latest.*, quick.* and history/ belong here"
    assert not [p.name for p in results.iterdir() if p.is_file() and p.suffix in (".json", ".log", ".png")], \
        "results belong in results/<suite>/"


class _Parsed(Exception):
    def __init__(self, args):
        self.args_ = args


def _load(path: Path):
    name = f"_bench_suite_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def suite_path(monkeypatch):
    """A suite must find its helpers itself (it is run as a script): sys.path is only restored after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for var in ("MERCER_UCI_DIR", "MERCER_FASHION_MNIST_DIR", "FALKON_PYTHON"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_suite_command_line(path, suite_path, monkeypatch, capsys):
    sys.path.insert(0, str(path.parent))  # as for a script: its own folder, nothing else
    module = _load(path)
    _common = sys.modules["_common"]
    assert getattr(module, "parse_suite_args", None) is _common.parse_suite_args, \
        f"{path.name} must parse its command line with _common.parse_suite_args"

    def parse_only(parser, argv=None):
        raise _Parsed(_common.parse_suite_args(parser, argv))

    monkeypatch.setattr(module, "parse_suite_args", parse_only)
    monkeypatch.setattr(sys, "argv", [str(path)])
    with pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code == 0
    help_text = capsys.readouterr().out
    for option in ("--quick", "--out", "--refs", "--tag"):
        assert option in help_text, f"{path.name} --help lacks {option}"

    with pytest.raises(_Parsed) as parsed:
        module.main(["--quick"])
    args = parsed.value.args_
    assert args.quick and args.suite == path.stem
    assert Path(args.out) == BENCH / "results" / path.stem
    json_path, md_path = _common.result_paths(args)
    assert (json_path.name, md_path.name) == ("quick.json", "quick.md")


def test_result_paths(tmp_path, suite_path):
    sys.path.insert(0, str(BENCH))
    import _common

    p = _common.suite_parser("toy", "a toy suite", refs=("sklearn", "falkon"), data=("uci",))
    args = _common.parse_suite_args(p, ["--out", str(tmp_path), "--refs", "sklearn"])
    assert args.refs == ("sklearn",) and args.uci_dir is None and args.falkon_python is None
    assert _common.result_paths(args) == (tmp_path / "latest.json", tmp_path / "latest.md")
    args = _common.parse_suite_args(p, ["--out", str(tmp_path), "--tag", "t1", "--refs", "none"])
    assert args.refs == () and _common.result_paths(args)[0] == tmp_path / "history" / "t1.json"
    md = _common.write_results(args, {"rows": [{"a": 1}]}, "| a |\n|---|\n| 1 |", title="Toy")
    text = md.read_text()
    assert text.startswith("# Toy\n") and "Command (from the repository root): `python " in text
    with pytest.raises(SystemExit):
        _common.parse_suite_args(p, ["--refs", "nope"])
    strict = _common.suite_parser("toy", None, refs=("sklearn",), refs_required=True)
    with pytest.raises(SystemExit):
        _common.parse_suite_args(strict, ["--refs", "none"])


def test_cited_probes_and_records_exist():
    """Every benchmark script and decision record named in src/mercer exists (constants cite them)."""
    cited = set()
    pattern = re.compile(r"(benchmarks/[\w/]+\.py|docs/decisions/[\w.-]+\.md)")
    for path in (ROOT / "src" / "mercer").rglob("*.py"):
        cited.update(pattern.findall(path.read_text()))
    assert any(c.startswith("benchmarks/probes/") for c in cited)
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, f"cited in src/mercer but absent: {missing}"
