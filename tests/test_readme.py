"""The README is the front page: short, and every results file it cites exists (no Sphinx needed)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines: move detail into docs/"


def test_readme_cites_existing_results():
    text = README.read_text(encoding="utf-8")
    cited = set(re.findall(r"benchmarks/results/[\w./-]*\w", text))
    assert cited, "the README's headline table names its results file"
    missing = sorted(p for p in cited if not (ROOT / p).exists())
    assert not missing, f"README.md cites results that do not exist: {missing}"


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:|#", t)]
    missing = sorted(t for t in links if not (ROOT / t.split("#")[0]).exists())
    assert not missing, f"README.md links to files that do not exist: {missing}"
