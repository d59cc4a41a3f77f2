"""``make gpu-check DRY=1`` (benchmarks/tools/gpu_check.py --dry-run): the GPU machine's script runs end to
end on this CPU -- its pytest steps, the benchmark's ``--check`` mode at tiny sizes, the report -- so
that it cannot rot between the runs on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path):
    # as run by hand (under `make test` MAKELEVEL is set, and the report would name `make gpu-check DRY=1`)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    proc = subprocess.run([sys.executable, "benchmarks/tools/gpu_check.py", "--dry-run", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "quick.json").read_text())
    assert report["dry_run"] and report["passed"]
    assert [s["step"] for s in report["steps"]] == ["gpu tests", "benchmark", "suite on cuda"]
    rows = report["benchmark"]["rows"]
    cases = {r["case"].split()[0] for r in rows}
    assert cases == {"KernelRidge", "NystroemKernelRidge", "KernelSVC", "KMeans", "KernelPCA", "GaussianProcessRegressor"}
    assert {r["dtype"] for r in rows} == {"float32", "float64"}
    assert all(r["ok"] for r in rows if "ok" in r) and sum("ok" in r for r in rows) == 12
    md = (tmp_path / "quick.md").read_text()
    assert "Command (from the repository root): `python benchmarks/tools/gpu_check.py --dry-run" in md
    assert "| benchmark | passed |" in md and "NystroemKernelRidge n=5000 M=100" in md
    assert not list(tmp_path.glob("latest.*"))  # a dry run never replaces the GPU's report
