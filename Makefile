# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of PyTorch (a file on disk in our environment); override for a CUDA machine.
TORCH  ?= torch==2.13.0

.PHONY: setup demo test test-slow test-all test-sklearn bench clean

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

bench: setup
	$(BIN)/python benchmarks/bench_ridge_pca.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
