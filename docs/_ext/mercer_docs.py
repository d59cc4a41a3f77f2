"""Pages of the documentation written at build time (imported by ``docs/conf.py``).

* ``api/index.rst``: the API reference, one autosummary per public module, listing the names in
  each module's ``__all__``; the estimators grouped by family from
  ``mercer.models._registry.ESTIMATORS`` (the one list of estimators).
* ``benchmarks/generated/``: one page per benchmark suite, from
  ``benchmarks/results/<suite>/latest.md`` (and ``benchmarks/results/README.md`` as the index when
  it exists); until that layout exists, one page per ``benchmarks/results/*.md``.

Both folders are ignored by git (``docs/.gitignore``): the repository holds the generator, never
its output.
"""

from __future__ import annotations

import importlib
import re
import shutil
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
RESULTS = ROOT / "benchmarks" / "results"

# ----------------------------------------------------------------------------------------- gallery

GALLERY_OUT = Path(tempfile.gettempdir()) / "mercer-docs-gallery-images"


def reset_argv(gallery_conf, script_vars):
    """sphinx-gallery runs each example with ``--out`` a scratch folder: the build never rewrites
    the tracked images in ``docs/images/`` (the gallery shows the figures it captures itself)."""
    GALLERY_OUT.mkdir(parents=True, exist_ok=True)
    return ["--out", str(GALLERY_OUT)]


# --------------------------------------------------------------------------------------------- API

_TRAILING = re.compile(r"(?<![\\\w`*])([A-Za-z]\w*)_(?=[\s,.;:)\]]|$)")
_LITERAL = re.compile(r"(``.*?``|`[^`]*`|:math:`[^`]*`)")


def escape_trailing_underscores(app, what, name, obj, options, lines):
    """``n_features_in_`` written bare in a numpydoc type or sentence is an RST reference: escape
    the underscore (outside literals) before numpydoc reads the docstring."""
    for i, line in enumerate(lines):
        parts = _LITERAL.split(line)
        lines[i] = "".join(p if j % 2 else _TRAILING.sub(r"\1\\_", p) for j, p in enumerate(parts))


def skip_borrowed_members(app, what, name, obj, skip, options):
    """Members that scikit-learn writes into every estimator (``set_fit_request`` and the other
    metadata-routing setters) or that come from its mixins (``score``) carry scikit-learn's
    docstrings and cross-references: they are documented there, not here."""
    if re.fullmatch(r"set_\w+_request", name):
        return True
    module = getattr(obj, "__module__", None) or ""
    if module.startswith("sklearn"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", escape_trailing_underscores, priority=100)
    app.connect("autodoc-skip-member", skip_borrowed_members)
    return {"parallel_read_safe": True}

FAMILY_TITLES = {
    "ridge": "Ridge regression and classification (exact, Nyström / FALKON, random features, sketches)",
    "svm": "Support vector machines",
    "linear": "Kernel perceptron and logistic regression",
    "decomposition": "Kernel PCA",
    "cluster": "Clustering",
    "neighbors": "Neighbours",
    "gp": "Gaussian processes",
    "mkl": "Multiple kernel learning",
}

MODULES = [
    ("mercer.kernels", "Kernels: the functions, their algebra and the Mercer check."),
    ("mercer.approx", "Feature maps and low-rank approximations (those that are estimators are listed above too)."),
    ("mercer.linalg", "The execution core: memory plans, blocked kernel operators, solvers."),
    ("mercer.sources", "Data read block by block: memmaps, ``.npy``, Parquet, Dask collections, sparse rows."),
    ("mercer.io", "Saving and loading models without pickle."),
    ("mercer.plotting", "Figures from fitted models and data (needs matplotlib: ``pip install mercer[plot]``)."),
]

TOP_LEVEL = ["config_context", "get_config", "set_config", "progress", "Config"]


def _heading(text: str, char: str) -> str:
    return f"{text}\n{char * len(text)}\n\n"


def _autosummary(module: str, names: list[str]) -> str:
    lines = [f".. currentmodule:: {module}\n", ".. autosummary::", "   :toctree: generated/", ""]
    lines += [f"   {name}" for name in names]
    return "\n".join(lines) + "\n\n"


def api_page() -> str:
    from mercer.models._registry import ESTIMATORS, FUNCTIONS

    text = [".. This file is written by docs/_ext/mercer_docs.py at build time: edit that instead.\n\n",
            ".. _api:\n\n", _heading("API reference", "=")]
    text.append("Every public name of mercer, with the docstring it carries (numpydoc). The estimators are "
                "listed from ``mercer.models._registry.ESTIMATORS``, the one list of estimators; each is "
                "importable from ``mercer`` and from ``mercer.models``.\n\n")
    text.append(_heading("Configuration (``mercer``)", "-"))
    text.append(_autosummary("mercer", TOP_LEVEL))
    text.append(_heading("Estimators (``mercer``, ``mercer.models``)", "-"))
    families: dict[str, list[str]] = {}
    for est in ESTIMATORS:
        if est.family is not None:
            families.setdefault(est.family, []).append(est.name)
    for name, family in FUNCTIONS.items():
        families.setdefault(family, []).append(name)
    for family in sorted(families, key=lambda f: list(FAMILY_TITLES).index(f) if f in FAMILY_TITLES else 99):
        text.append(_heading(FAMILY_TITLES.get(family, family), "~"))
        text.append(_autosummary("mercer", sorted(families[family])))
    for module, blurb in MODULES:
        mod = importlib.import_module(module)
        names = sorted(n for n in mod.__all__ if not n.startswith("_"))
        text.append(_heading(f"``{module}``", "-"))
        text.append(f".. automodule:: {module}\n   :no-members:\n   :no-index:\n\n{blurb}\n\n")
        text.append(_autosummary(module, names))
    return "".join(text)


# ------------------------------------------------------------------------------------- benchmarks

_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _clean_markdown(text: str, source: Path, out_dir: Path, shift_to: int = 2, pages: dict | None = None) -> str:
    """A results file as a page body: its headings start at level ``shift_to``; images beside it are
    copied next to the page; links to a rendered results file (``pages``: path -> page name) go to
    its page, links to other files become their repository paths in code."""

    def link(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"[a-z]+://", target) or target.startswith("#"):
            return m.group(0)
        path = (source.parent / target).resolve()
        if not bang and pages and path in pages:
            return f"[{label}]({pages[path]}.md)"
        if bang:
            if path.is_file():
                name = path.relative_to(RESULTS).as_posix().replace("/", "__") if RESULTS in path.parents else path.name
                shutil.copy2(path, out_dir / name)
                return f"![{label}]({name})"
            return f"(image `{target}` not present)"
        try:
            shown = path.relative_to(ROOT).as_posix()
        except ValueError:
            shown = target
        return f"{label} (`{shown}`)" if label and label != target and label != f"`{target}`" else f"`{shown}`"

    lines = text.splitlines()
    levels = [len(m.group(1)) for line in lines if (m := re.match(r"^(#{1,6})\s", line))]
    shift = shift_to - min(levels) if levels else 0
    out, fence = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})(\s.*)$", line)
        if m:
            line = "#" * min(6, len(m.group(1)) + shift) + m.group(2)
        elif not fence:
            line = _LINK.sub(link, line)
        out.append(line)
    return "\n".join(out) + "\n"


def _suites() -> list[tuple[str, Path]]:
    if not RESULTS.is_dir():
        return []
    return sorted((p.parent.relative_to(RESULTS).as_posix(), p) for p in RESULTS.glob("**/latest.md"))


def benchmark_pages() -> None:
    out = DOCS / "benchmarks" / "generated"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    suites = _suites()
    pages = {path.resolve(): suite.replace("/", "__") for suite, path in suites}
    index = ["% Written by docs/_ext/mercer_docs.py at build time from benchmarks/results/.\n",
             "# Results by suite\n"]
    readme = RESULTS / "README.md"
    if readme.is_file():
        index.append(_clean_markdown(readme.read_text(), readme, out, shift_to=2, pages=pages))
    if suites:
        index.append("\nOne page per suite, each rendered from `benchmarks/results/<suite>/latest.md` when the "
                     "documentation was built:\n")
        entries = []
        for suite, path in suites:
            slug = suite.replace("/", "__")
            body = _clean_markdown(path.read_text(), path, out, pages=pages)
            rel = path.relative_to(ROOT).as_posix()
            (out / f"{slug}.md").write_text(f"# Suite: {suite}\n\nRendered from `{rel}`.\n\n{body}")
            entries.append(slug)
    else:
        index.append("\nThe results files under `benchmarks/results/`, one page each, as the benchmark "
                     "scripts wrote them (each names the command that made it, or see "
                     "[earlier measurements](../history.md)):\n")
        entries = []
        for path in sorted(RESULTS.glob("*.md")):
            if path.name == "README.md":
                continue
            rel = path.relative_to(ROOT).as_posix()
            body = _clean_markdown(path.read_text(), path, out)
            (out / f"{path.stem}.md").write_text(f"# {path.stem}\n\nRendered from `{rel}`.\n\n{body}")
            entries.append(path.stem)
    index.append("\n```{toctree}\n:maxdepth: 1\n\n" + "\n".join(entries) + "\n```\n")
    (out / "index.md").write_text("\n".join(index))


def write_pages() -> None:
    api = DOCS / "api"
    api.mkdir(exist_ok=True)
    (api / "index.rst").write_text(api_page())
    benchmark_pages()
