"""Sphinx configuration of mercer's documentation (``make docs``)."""

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent / "src"))

import mercer_docs  # noqa: E402  (the pages written at build time)

import mercer  # noqa: E402

mercer_docs.write_pages()

project = "mercer"
author = "the mercer developers"
copyright = "the mercer developers, BSD-3-Clause"
release = version = mercer.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "mercer_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "sg_execution_times.rst", "screenshots", "images", "**/sg_execution_times.rst",
                    "auto_examples/*.md", "auto_examples/*.ipynb"]
templates_path = ["_templates"]

# MyST: $...$ and $$...$$ maths, ::: fences, headings as link targets.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# The benchmark pages are results files rendered as they were written (their heading levels jump).
suppress_warnings = ["myst.header"]

autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()

# MathJax from its CDN by default; `make docs-screenshots` (offline) points this at a local copy.
if os.environ.get("MERCER_DOCS_MATHJAX"):
    mathjax_path = os.environ["MERCER_DOCS_MATHJAX"]

html_theme = "furo"
html_title = f"mercer {release}"
html_static_path = []

# The gallery: every script in examples/ (set MERCER_DOCS_PLOT=0 to show their code without running them).
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/[^_/][^/]*\.py$",
    "ignore_pattern": r"_common\.py",
    "plot_gallery": os.environ.get("MERCER_DOCS_PLOT", "1") != "0",
    "reset_argv": "mercer_docs.reset_argv",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
    "min_reported_time": 1,
    "show_memory": False,
    "image_srcset": [],
}

# The user guide's code blocks (testsetup / testcode / doctest) run in `make docs` (sphinx -b doctest).
doctest_global_setup = """
import warnings
import numpy as np
warnings.filterwarnings("ignore")
"""
trim_doctest_flags = True
# Only the guide's explicit testcode / doctest directives run: not the API docstrings' >>> examples.
doctest_test_doctest_blocks = ""
