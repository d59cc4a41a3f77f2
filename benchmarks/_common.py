"""Helpers shared by the benchmark scripts: timing, peak memory, isolation, tables, machine info.

Every benchmark measures mercer and its reference in the same run. Memory is measured as the
peak resident set size (RSS) of a fresh process per measurement (:func:`run_isolated`), because
``ru_maxrss`` only ever grows within a process.

Import from a script in this folder with ``from _common import ...`` (the script's folder is
on ``sys.path`` when it is run as ``python benchmarks/<script>.py``).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "Isolated", "Timer", "best_time", "current_rss_bytes", "peak_rss_bytes", "run_isolated",
    "markdown_table", "machine_info", "load_average", "git_state", "write_json", "fmt_bytes", "RESULTS_DIR",
]

#: Where benchmark scripts write their JSON results.
RESULTS_DIR = Path(__file__).resolve().parent / "results"

log = logging.getLogger(__name__)


# -- timing ------------------------------------------------------------------------------------
class Timer:
    """Wall-clock timer: ``with Timer() as t: ...; t.seconds``."""

    def __enter__(self) -> "Timer":
        self.seconds = float("nan")
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0


def best_time(fn: Callable[[], Any], *, repeat: int = 5, warmup: int = 1) -> float:
    """Best wall time of ``repeat`` calls of ``fn()`` after ``warmup`` untimed calls, in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        with Timer() as t:
            fn()
        times.append(t.seconds)
    return min(times)


# -- memory ------------------------------------------------------------------------------------
def peak_rss_bytes() -> int:
    """Peak RSS of the current process so far, in bytes (``ru_maxrss`` is KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if platform.system() == "Darwin" else int(peak) * 1024


def current_rss_bytes() -> int:
    """Current RSS of this process in bytes (from ``/proc/self/statm``; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Isolated(NamedTuple):
    """What :func:`run_isolated` returns: unpacks as ``result, seconds, peak_rss_bytes``."""

    result: Any
    seconds: float
    peak_rss_bytes: int


def _exit_with(parent: int, every: float = 5.0) -> None:
    """End this process when ``parent`` is gone (a killed benchmark must not leave its worker running)."""
    def watch() -> None:
        while True:
            time.sleep(every)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _isolated_child(fn: Callable, args: tuple, kwargs: dict, log_level: int, parent: int) -> Isolated:
    _exit_with(parent)
    logging.basicConfig(level=log_level, format="%(asctime)s %(processName)s %(name)s: %(message)s")
    with Timer() as t:
        result = fn(*args, **kwargs)
    return Isolated(result, t.seconds, peak_rss_bytes())


def run_isolated(fn: Callable, *args, method: str = "forkserver", **kwargs) -> Isolated:
    """Run ``fn(*args, **kwargs)`` in a fresh process; return ``(result, seconds, peak_rss_bytes)``.

    ``seconds`` is the wall time of the call inside the child (process start-up and imports
    excluded); ``peak_rss_bytes`` is the child's peak RSS, imports included. ``fn`` and its
    arguments must be picklable (a module-level function). Exceptions are re-raised here.

    The default ``method="forkserver"`` matters: Linux keeps ``ru_maxrss`` across ``exec``, so
    a ``"spawn"`` child reports at least the parent's RSS at the time of the spawn. Children
    forked from the (small) fork server start from its RSS instead.
    """
    ctx = mp.get_context(method)
    with ctx.Pool(processes=1) as pool:
        out = pool.apply(_isolated_child, (fn, args, kwargs, logging.getLogger().getEffectiveLevel(), os.getpid()))
    return Isolated(*out)


# -- output ------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[dict], columns: Iterable[str] | None = None) -> str:
    """A GitHub markdown table from a list of dicts (columns: the given ones, else first-seen keys)."""
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    columns = list(columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, creating parent folders; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    return path


def fmt_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"  # pragma: no cover


# -- machine -----------------------------------------------------------------------------------
def _meminfo_total() -> int:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemTotal"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    """1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine_info() -> str:
    """One line: CPU model, cores usable, torch threads and CPU capability, RAM, versions."""
    import torch

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cap = torch.backends.cpu.get_cpu_capability()
    return (f"{_cpu_model()}, {usable} cores usable ({os.cpu_count()} online), "
            f"torch {torch.__version__} with {torch.get_num_threads()} threads ({cap}), "
            f"RAM {fmt_bytes(_meminfo_total())}, Python {platform.python_version()}")


def git_state(paths: Sequence[str] = ("src",)) -> str:
    """Commit of the measured code and any uncommitted changes under ``paths`` (timings depend on both)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        return out.stdout.rstrip("\n") if out.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD").strip() or "unknown commit"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", *paths).splitlines()]
    return f"{commit}" + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else " (clean)")
