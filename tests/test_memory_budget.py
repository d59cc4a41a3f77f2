"""The memory budget honoured, measured (``benchmarks/probes/probe_memory_budget.py``).

Each cell runs an estimator's fit and predict (transform) in a fresh process under a budget, on
data whose dense n x n kernel does not fit it, and checks the child's peak RSS against
``baseline + input bytes + 1.2 x budget``, or a ``MemoryBudgetError`` that names a remedy -- never
an allocator's ``MemoryError``, a kill or a crash. The probe runs as its own process (Linux keeps
``ru_maxrss`` across ``exec``: children of this pytest process would inherit its RSS).

The default suite runs a few estimators at 64 MiB (one of each way through the budget: blocked
kernel products, a refusal, row blocks of features, a Nyström solve); ``-m slow`` runs the matrix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "benchmarks" / "probes" / "probe_memory_budget.py"

#: one estimator per way a call spends its budget (at 64 MiB each runs in seconds), and the k-NN and
#: radius searches once measured over it (a second tile per tile; the neighbour lists of every query)
QUICK = ("KernelRidge", "GaussianProcessRegressor", "NystroemKernelRidge", "KernelPCA", "Nystroem",
         "KernelKNeighborsClassifier", "KernelRadiusNeighborsRegressor")


def _probe(tmp_path, *args, timeout):
    out = tmp_path / "cells.jsonl"
    proc = subprocess.run([sys.executable, str(PROBE), "--out", "none", "--json", str(out), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    cells = [c for c in lines if "estimator" in c]  # the first line is the probe's command
    assert cells, f"the probe wrote nothing (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return cells


def _check(cells):
    bad = []
    for c in cells:
        # a fresh child whose ru_maxrss is its own: the probe's parent imports neither numpy nor torch
        assert c.get("start", 0) < 200 * 2**20, c
        if c["status"] in ("ok", "MemoryBudgetError", "timeout"):
            continue
        detail = (f"peak {(c['peak'] - c['baseline']) >> 20} MiB over its baseline, allowed "
                  f"{(c['input_bytes'] + 1.2 * c['budget']) / 2**20:.0f} MiB" if c["status"] == "OVER"
                  else c.get("message", ""))
        bad.append(f"{c['estimator']} at {c['budget'] >> 20} MiB: {c['status']}: {detail}")
    assert not bad, "\n".join(bad)


def test_budget_holds_at_64_mib(tmp_path):
    cells = _probe(tmp_path, "--budgets-mib", "64", "--estimators", ",".join(QUICK), "--timeout", "120",
                   "--jobs", "2", "--fail-on-timeout", timeout=600)
    assert {c["estimator"] for c in cells} == set(QUICK)
    assert not [c for c in cells if c["status"] == "timeout"], cells
    _check(cells)
    gp = next(c for c in cells if c["estimator"] == "GaussianProcessRegressor")
    assert gp["status"] == "MemoryBudgetError" and "memory_budget" in gp["message"]


@pytest.mark.slow
def test_budget_holds_for_every_estimator(tmp_path):
    cells = _probe(tmp_path, "--budgets-mib", "64,256,2048", "--timeout", "300", "--jobs", "2", timeout=3 * 3600)
    _check(cells)
