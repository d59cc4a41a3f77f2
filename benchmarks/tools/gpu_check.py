"""``make gpu-check``: everything a machine with a CUDA GPU should confirm, in one run of at most
``--budget-s`` seconds (default 480, 8 minutes), with one report.

Steps, each a subprocess with its share of the time left (a step that runs over is recorded as such
and the next one runs):

1. **setup** -- nothing when ``torch`` sees a CUDA device and mercer, pytest and scikit-learn import;
   else ``pip install $MERCER_GPU_TORCH`` (default ``torch``: PyPI's build, CUDA included) and
   ``pip install -e .[test]`` into this Python.
2. **gpu tests** -- every test that needs a GPU: marked ``gpu`` or skipped without CUDA (the plugin
   benchmarks/tools/_gpu_select.py selects them; slow ones included).
3. **benchmark** -- ``benchmarks/suites/gpu.py --check``: exact ridge, Nystroem, SVC, k-means, KPCA
   and GP in float32 and float64 on the GPU and on the CPU, each GPU row with its relative difference
   from the CPU's and the dtype's tolerance; then Nystroem on the GPU alone up to 10^7 rows of
   synthetic 28-feature data with M = 10^4.
4. **suite on cuda** -- ``MERCER_TEST_DEVICE=cuda pytest`` on the files whose estimators have CUDA
   paths (tests/conftest.py: the GPU becomes mercer's default device), in the time left.

The report: ``benchmarks/results/gpu/latest.{md,json}`` (the command line at the top; every step's
status, time and the tail of its output; the benchmark's table). Exit status 0 when every step passed.

``--dry-run`` checks this script end to end on a CPU: no install, ``device="cpu"`` everywhere, tiny
sizes, the same steps and report (written as ``quick.{md,json}``); tests/test_gpu_check.py runs it.

    make gpu-check            # on the GPU machine (python benchmarks/tools/gpu_check.py)
    make gpu-check DRY=1      # here, ~1 minute
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu"
#: Seconds each step may take at most (besides the overall budget): setup, the GPU-marked tests, the
#: benchmark, the suite with the GPU as default device (last: it takes what is left). Sized from the H200 runs of gpu.py (~4 min
#: with scikit-learn) and the suite's files on 2 CPU cores (~2-5 min each, far less on 16 cores + GPU).
STEP_LIMITS = {"setup": 150, "gpu tests": 90, "benchmark": 270, "suite on cuda": 240}
#: Test files of mercer's estimators with CUDA paths, run with the GPU as default device.
CUDA_SUITE = ["tests/test_ridge.py", "tests/test_approx.py", "tests/test_gp.py", "tests/test_svm.py",
              "tests/test_kmeans.py", "tests/test_pca.py", "tests/test_linalg.py", "tests/test_preconditioner.py",
              "tests/test_conditioning.py"]
#: Seconds left for writing the report.
_RESERVE_S = 5
_TAIL = 3000


def _run(name: str, cmd: list[str], limit: float, env: dict | None = None) -> dict:
    """One step: ``cmd`` in the repository root, at most ``limit`` seconds."""
    t0 = time.perf_counter()
    shown = ["python" if c == sys.executable else "<tmp>" if c.startswith(tempfile.gettempdir()) else c for c in cmd]
    step = {"step": name, "command": shlex.join(shown)}
    print(f"== {name}: {step['command']} (limit {limit:.0f} s)", flush=True)
    if limit <= 1:
        return {**step, "status": "not run (no time left)", "seconds": 0.0, "tail": ""}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                              timeout=limit)
        out, status = proc.stdout + proc.stderr, "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out += (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        status = f"timed out after {limit:.0f} s"
    step.update(status=status, seconds=round(time.perf_counter() - t0, 1), tail=out[-_TAIL:])
    print(out[-_TAIL:], flush=True)
    print(f"== {name}: {status} in {step['seconds']} s", flush=True)
    return step


_PROBE = ("import torch, sklearn, pytest, mercer; "
          "print(int(torch.cuda.is_available()), torch.__version__, "
          "torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')")


def _probe(python: str) -> tuple[bool, str]:
    proc = subprocess.run([python, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        return False, (proc.stderr.strip().splitlines() or ["import failed"])[-1]
    ok, *rest = proc.stdout.split(maxsplit=1)
    return ok == "1", " ".join(rest).strip()


def setup(python: str, limit: float) -> dict:
    """Install what is missing (step 1); never in the dry run."""
    t0 = time.perf_counter()
    ok, what = _probe(python)
    if ok:
        return {"step": "setup", "command": "(nothing to install)", "status": "passed", "seconds": 0.0,
                "tail": f"CUDA device and packages present: {what}"}
    torch_spec = os.environ.get("MERCER_GPU_TORCH", "torch")
    cmd = [python, "-m", "pip", "install", "-q", torch_spec]
    a = _run("setup (torch)", cmd, limit)
    b = _run("setup (mercer[test])", [python, "-m", "pip", "install", "-q", "-e", ".[test]"],
             limit - (time.perf_counter() - t0))
    ok, what = _probe(python)
    return {"step": "setup", "command": f"{a['command']} && {b['command']}",
            "status": "passed" if ok else f"failed: no CUDA device or packages after install ({what})",
            "seconds": round(time.perf_counter() - t0, 1), "tail": (a["tail"] + b["tail"])[-_TAIL:]}


def _markdown(report: dict) -> str:
    lines = [f"# make gpu-check{' (dry run on the CPU)' if report['dry_run'] else ''}", "",
             f"Command (from the repository root): `{report['command']}`", "",
             f"Machine: {report['machine']}", "",
             f"Result: **{'passed' if report['passed'] else 'FAILED'}** in {report['seconds']} s "
             f"(budget {report['budget_s']} s)", "",
             "| step | status | seconds | command |", "|---|---|---|---|"]
    lines += [f"| {s['step']} | {s['status']} | {s['seconds']} | `{s['command']}` |" for s in report["steps"]]
    for s in report["steps"]:
        if s["tail"].strip():
            lines += ["", f"## {s['step']}: end of its output", "", "```", s["tail"].rstrip(), "```"]
    if report.get("benchmark_md"):
        lines += ["", "## Benchmark (benchmarks/suites/gpu.py --check)", "", report["benchmark_md"].rstrip()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/tools/gpu_check.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="on this CPU: no install, device cpu, tiny sizes")
    ap.add_argument("--budget-s", type=float, default=480.0, help="the whole run's time limit (default 480)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="report folder (default benchmarks/results/gpu)")
    ap.add_argument("--python", default=sys.executable, help="the Python to install into and test with")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    dry, py = args.dry_run, args.python
    device = "cpu" if dry else "cuda"

    def left(step: str) -> float:  # (the dry run only checks the script: the budget alone bounds its steps)
        return min(math.inf if dry else STEP_LIMITS[step], args.budget_s - _RESERVE_S - (time.perf_counter() - t_start))

    steps = []
    if not dry:
        steps.append(setup(py, left("setup")))
    pytest = [py, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    # the tests that need a GPU (benchmarks/tools/_gpu_select.py); in the dry run the same command on
    # two files, where they are skipped
    gpu_tests = pytest + ["-p", "_gpu_select", "-m", "gpu or not gpu", "-rs"]
    gpu_tests += ["tests/test_preconditioner.py"] if dry else ["tests/"]
    suite = pytest + (["tests/test_conditioning.py", "-k", "kernel_matrix"] if dry else CUDA_SUITE)
    steps.append(_run("gpu tests", gpu_tests, left("gpu tests"),
                      env={"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                        os.environ.get("PYTHONPATH")]))}))
    with tempfile.TemporaryDirectory() as tmp:
        limit = left("benchmark")  # gpu.py stops its cases 20 s before: the table is always written
        bench = [py, "benchmarks/suites/gpu.py", "--check", "--refs", "none", "--device", device, "--out", tmp,
                 "--case-limit", "30" if dry else "90", "--budget-s", f"{max(limit - 20, 1):.0f}"]
        steps.append(_run("benchmark", bench + (["--tiny"] if dry else []), limit))
        md_path, json_path = Path(tmp) / "latest.md", Path(tmp) / "latest.json"
        bench_md = md_path.read_text() if md_path.is_file() else ""
        bench_json = json.loads(json_path.read_text()) if json_path.is_file() else None
    steps.append(_run("suite on cuda", suite, left("suite on cuda"), env={"MERCER_TEST_DEVICE": device}))
    if bench_md.startswith("# "):  # its title and command line are this report's
        bench_md = bench_md.split("\n\n", 2)[-1]
    passed = all(s["status"] == "passed" for s in steps)
    cmd = "make gpu-check" + (" DRY=1" if dry else "") if os.environ.get("MAKELEVEL") else \
        shlex.join(["python", "benchmarks/tools/gpu_check.py", *(sys.argv[1:] if argv is None else argv)])
    report = {"command": cmd, "dry_run": dry, "passed": passed, "budget_s": args.budget_s,
              "seconds": round(time.perf_counter() - t_start, 1),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "device": device,
                          "platform": platform.platform()},
              "steps": steps, "benchmark": bench_json, "benchmark_md": bench_md}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "quick" if dry else "latest"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (args.out / f"{stem}.md").write_text(_markdown(report))
    print(f"gpu-check: {'passed' if passed else 'FAILED'} in {report['seconds']} s; report: "
          f"{args.out / f'{stem}.md'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
