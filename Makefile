# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of PyTorch (a file on disk in our environment); override for a CUDA machine.
TORCH  ?= torch==2.13.0

.PHONY: setup demo test test-slow test-all test-sklearn bench bench-quick docs docs-screenshots clean

$(BIN)/.installed: pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	touch $@

setup: $(BIN)/.installed

demo: setup
	$(BIN)/mercer demo

test: setup
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

test-all: setup
	$(BIN)/python -m pytest -q -m "slow or not slow"

# scikit-learn's own test files with mercer's estimators swapped in (tests/sklearn_suite/).
test-sklearn: setup
	$(BIN)/python -m pytest -q -m sklearn_suite tests/test_sklearn_suite.py

# Benchmarks: benchmarks/results/README.md says which suite answers which question; each writes
# benchmarks/results/<suite>/latest.{json,md} (quick.* with --quick). Data folders come from the
# environment: MERCER_UCI_DIR (default: shared/data/uci inside or next to this checkout, when there),
# MERCER_FASHION_MNIST_DIR (default: the Debian package), FALKON_PYTHON (default: FALKON skipped).
MERCER_UCI_DIR ?= $(firstword $(wildcard $(CURDIR)/shared/data/uci $(abspath $(CURDIR)/../shared/data/uci)))
export MERCER_UCI_DIR
#: every suite, in its quick mode (seconds to a minute each; under 10 minutes in all on 2 cores)
QUICK_SUITES := startup ridge_pca nystroem svm cluster gp gp_ard tune sketch sparse_text linear stream dask_cluster shapes gpu
#: the main suites, in their default mode (hours on 2 cores)
MAIN_SUITES := ridge_pca nystroem svm cluster gp tune sketch sparse_text startup

bench-quick: setup
	@start=$$(date +%s); failed=""; \
	for s in $(QUICK_SUITES); do \
	  echo "== benchmarks/suites/$$s.py --quick"; t=$$(date +%s); \
	  $(BIN)/python benchmarks/suites/$$s.py --quick || failed="$$failed $$s"; \
	  echo "== $$s: $$(( $$(date +%s) - t )) s"; \
	done; \
	echo "bench-quick: $$(( $$(date +%s) - start )) s in all"; \
	if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

bench: setup
	@failed=""; for s in $(MAIN_SUITES); do \
	  echo "== benchmarks/suites/$$s.py"; $(BIN)/python benchmarks/suites/$$s.py || failed="$$failed $$s"; \
	done; if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

# The documentation site (docs/, Sphinx), warnings as errors: the user guide's code blocks run
# (sphinx.ext.doctest, gallery not executed), then the HTML into docs/_build/html with the gallery's
# examples executed (MERCER_DOCS_PLOT=0 make docs: shown without running them).
SPHINX := $(abspath $(BIN))/python -m sphinx
$(BIN)/.docs-installed: $(BIN)/.installed
	$(BIN)/pip install -q -e ".[docs]"
	touch $@

docs: setup $(BIN)/.docs-installed
	cd docs && MERCER_DOCS_PLOT=0 $(SPHINX) -b doctest -W --keep-going -d _build/doctrees . _build/doctest
	cd docs && $(SPHINX) -b html -W --keep-going -j auto -d _build/doctrees . _build/html

# Screenshots of three built pages into docs/screenshots/, with Debian's chromium (installed when
# missing) on a build that reads MathJax 3 from a local copy (npm's mathjax package): offline pages.
CHROMIUM ?= chromium
MATHJAX_DIR := $(CURDIR)/docs/_build/mathjax
MATHJAX  := $(MATHJAX_DIR)/package/es5/tex-mml-chtml.js
SHOTS    := $(CURDIR)/docs/_build/screenshots
SHOT      = $(CHROMIUM) --headless --no-sandbox --hide-scrollbars --allow-file-access-from-files \
	--virtual-time-budget=10000 --window-size=1280,1600
docs-screenshots: setup $(BIN)/.docs-installed
	command -v $(CHROMIUM) >/dev/null && command -v npm >/dev/null || \
	  (apt-get update && apt-get install -y chromium npm)
	test -f $(MATHJAX) || (mkdir -p $(MATHJAX_DIR) && cd $(MATHJAX_DIR) && npm pack mathjax@3 --silent && tar xzf mathjax-3*.tgz)
	cd docs && MERCER_DOCS_MATHJAX="file://$(MATHJAX)" $(SPHINX) -b html -q -d _build/doctrees-screenshots . $(SHOTS)
	mkdir -p docs/screenshots
	$(SHOT) --screenshot=$(CURDIR)/docs/screenshots/getting_started.png file://$(SHOTS)/getting_started.html
	$(SHOT) --screenshot=$(CURDIR)/docs/screenshots/user_guide_nystroem.png file://$(SHOTS)/user_guide/nystroem.html
	$(SHOT) --screenshot=$(CURDIR)/docs/screenshots/gallery_nystroem_digits.png file://$(SHOTS)/auto_examples/nystroem_digits.html

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache docs/_build

# Everything a CUDA machine should confirm, in at most 8 minutes, one report in
# benchmarks/results/gpu/latest.md (benchmarks/tools/gpu_check.py: installs what is missing, the tests
# that need a GPU, the suite with the GPU as default device, CPU-vs-GPU agreement and Nystroem up to
# 10^7 rows). DRY=1: the same script end to end on this CPU, tiny sizes, no install (quick.md).
.PHONY: gpu-check
GPU_PYTHON = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu-check:
	$(GPU_PYTHON) benchmarks/tools/gpu_check.py $(if $(DRY),--dry-run)
