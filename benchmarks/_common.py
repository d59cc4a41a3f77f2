"""Helpers shared by the benchmark scripts: timing, peak memory, isolation, tables, machine info.

Every benchmark measures mercer and its reference in the same run. Memory is measured as the
peak resident set size (RSS) of a fresh process per measurement (:func:`run_isolated`), because
``ru_maxrss`` only ever grows within a process.

Scripts live in ``suites/`` (mercer against its peers), ``probes/`` (the measurement behind one
constant of src/mercer), ``experiments/`` (one-off experiments behind a decision record in
docs/decisions/) and ``tools/``; each puts this folder on ``sys.path`` and imports
``from _common import ...``.

The suites share one command line (:func:`suite_parser`): ``--quick``, ``--out DIR`` (default
``benchmarks/results/<suite>/``: ``latest.json`` and ``latest.md``; ``--quick`` writes ``quick.*``,
``--tag T`` writes ``history/T.*``), ``--refs`` (which peers to run), and the data folders, from
arguments or environment variables (``MERCER_UCI_DIR``, ``MERCER_FASHION_MNIST_DIR``,
``FALKON_PYTHON``), never a machine's path: missing data or peers are skipped with a message.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import resource
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "Isolated", "Timer", "best_time", "current_rss_bytes", "peak_rss_bytes", "run_isolated", "thread_limits",
    "markdown_table", "machine_info", "load_average", "git_state", "write_json", "fmt_bytes", "RESULTS_DIR",
    "BENCH_DIR", "ROOT", "SkipSuite", "suite_parser", "parse_suite_args", "result_paths", "write_results", "previous_parts",
    "command_line", "uci_dir", "require_uci", "fashion_mnist_dir", "falkon_python", "synthetic", "skip",
]

#: This folder (benchmarks/) and the repository's root.
BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
#: Where benchmark scripts write their results: ``results/<suite>/latest.{json,md}``.
RESULTS_DIR = BENCH_DIR / "results"

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
def thread_limits(n: int):
    """``threadpoolctl.threadpool_limits(n)`` over the BLAS / OpenMP libraries, scipy's OpenBLAS among
    them: threadpoolctl limits only the libraries loaded when it is called, and scipy loads its own
    OpenBLAS (beside numpy's) with ``scipy.linalg`` / ``scipy.optimize``, which mercer and scikit-learn
    import on use. Left unlimited, its worker thread busy-waits beside a fit that calls it (L-BFGS-B)
    and its CPU seconds count twice (benchmarks/results/tune/history/blas-threads.md)."""
    import scipy.linalg  # noqa: F401
    import scipy.optimize  # noqa: F401
    from threadpoolctl import threadpool_limits

    return threadpool_limits(n)


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


#: Modules the fork server imports once, so that a child's start costs a fork, not torch's import; a
#: child's peak RSS includes them either way (``peak_rss_bytes`` counts imports).
_PRELOAD = ("numpy", "scipy.linalg", "torch", "sklearn.base", "mercer")


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
    if method == "forkserver":  # the server imports these once; each child forks from it (no import time per call)
        ctx.set_forkserver_preload(list(_PRELOAD))
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


# -- data ---------------------------------------------------------------------------------------
def synthetic(n: int, d: int, seed: int = 0):
    """The synthetic regression of the Nyström suites: X ~ N(0, I_d) in float32,
    y = sin(2 p1) + 0.5 cos(p2) p3 + 0.1 noise for three fixed random projections p (float64)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    w = np.random.default_rng(123).standard_normal((d, 3)) / math.sqrt(d)
    P = X @ w
    y = np.sin(2 * P[:, 0]) + 0.5 * np.cos(P[:, 1]) * P[:, 2] + 0.1 * rng.standard_normal(n)
    return X, y.astype(np.float64)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def uci_dir() -> Path | None:
    """The UCI regression sets' folder (``<dir>/<name>/data.csv.gz``): ``$MERCER_UCI_DIR``, or None.

    Suites' ``--uci-dir`` sets the variable, so that child processes see the same folder."""
    path = _env_path("MERCER_UCI_DIR")
    return path if path is not None and path.is_dir() else None


def require_uci(what: str = "this part") -> Path | None:
    """:func:`uci_dir`, or None after printing why ``what`` is skipped."""
    path = uci_dir()
    if path is None:
        skip(f"{what}: UCI data not found (set MERCER_UCI_DIR or --uci-dir to the folder of pol/, kin40k/, ...)")
    return path


def fashion_mnist_dir() -> str | None:
    """Fashion-MNIST's IDX folder: ``$MERCER_FASHION_MNIST_DIR``, else None (the loader's default, the
    Debian package ``dataset-fashion-mnist``)."""
    path = _env_path("MERCER_FASHION_MNIST_DIR")
    return str(path) if path is not None else None


def falkon_python() -> str | None:
    """An interpreter that can ``import falkon`` (``$FALKON_PYTHON``), else None (FALKON is skipped)."""
    path = os.environ.get("FALKON_PYTHON", "").strip()
    return path or None


def skip(message: str) -> None:
    """Say on stderr that something is skipped (missing data or peer): one line, no traceback."""
    print(f"skipped: {message}", file=sys.stderr, flush=True)


class SkipSuite(SystemExit):
    """Raised when a suite has nothing it can run (its data or peers are all missing): exit status 0."""

    def __init__(self, message: str):
        skip(message)
        super().__init__(0)


# -- the suites' command line --------------------------------------------------------------------
def _ref_list(choices: Sequence[str]):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
        if names in (("none",), ()):
            return ()
        if names == ("all",):
            return tuple(choices)
        unknown = [x for x in names if x not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown reference(s) {', '.join(unknown)}; choose from "
                                             f"{', '.join(choices)} (or all / none)")
        return names
    return parse


def suite_parser(suite: str, doc: str | None, *, refs: Sequence[str] = (), data: Sequence[str] = (),
                 quick: str = "a small run (seconds to a minute)", refs_required: bool = False,
                 **kwargs) -> argparse.ArgumentParser:
    """The command line every suite shares; the suite adds its own options to the parser returned.

    ``refs``: the peers the suite can run (``--refs a,b``; default all, ``none`` for mercer alone).
    ``data``: which data folders it reads: ``"uci"`` (``--uci-dir``, ``$MERCER_UCI_DIR``),
    ``"fashion"`` (``--fashion-mnist-dir``, ``$MERCER_FASHION_MNIST_DIR``); ``"falkon"`` in refs adds
    ``--falkon-python`` (``$FALKON_PYTHON``). ``refs_required``: every row is relative to the
    references (their error or time), so ``--refs`` cannot leave them out. Parse with
    :func:`parse_suite_args`.
    """
    p = argparse.ArgumentParser(prog=f"benchmarks/suites/{suite}.py", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    g = p.add_argument_group("common to every suite")
    g.add_argument("--quick", action="store_true", help=quick)
    g.add_argument("--out", type=Path, default=RESULTS_DIR / suite, metavar="DIR",
                   help=f"results folder (default benchmarks/results/{suite}/): latest.json and latest.md, "
                        "quick.* with --quick, history/TAG.* with --tag")
    g.add_argument("--tag", default="", help="write DIR/history/TAG.{json,md} instead (keeps latest)")
    g.add_argument("--refs", type=_ref_list(refs), default=tuple(refs), metavar="A,B",
                   help=f"references to run: {', '.join(refs) or 'none'} (default: all; 'none': mercer only)")
    if "uci" in data:
        g.add_argument("--uci-dir", type=Path, default=_env_path("MERCER_UCI_DIR"),
                       help="folder of the UCI sets (default $MERCER_UCI_DIR; absent: skipped)")
    if "fashion" in data:
        g.add_argument("--fashion-mnist-dir", default=fashion_mnist_dir(),
                       help="Fashion-MNIST IDX folder (default $MERCER_FASHION_MNIST_DIR, else the Debian "
                            "package dataset-fashion-mnist; absent: skipped)")
    if "falkon" in refs:
        g.add_argument("--falkon-python", default=falkon_python(),
                       help="interpreter with FALKON installed (default $FALKON_PYTHON; absent: skipped)")
    p.set_defaults(suite=suite)
    p.refs_required = tuple(refs) if refs_required else ()
    return p


def parse_suite_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse, then export the data folders as environment variables (child processes see them)."""
    args = parser.parse_args(argv)
    missing = [r for r in getattr(parser, "refs_required", ()) if r not in args.refs]
    if missing:
        parser.error(f"every row of this suite is relative to {', '.join(missing)}: --refs must include it")
    for attr, var in (("uci_dir", "MERCER_UCI_DIR"), ("fashion_mnist_dir", "MERCER_FASHION_MNIST_DIR"),
                      ("falkon_python", "FALKON_PYTHON")):
        value = getattr(args, attr, None)
        if value:
            os.environ[var] = str(value)
    return args


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran this script, from the repository root (as it can be pasted)."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    try:
        script_text = str(script.relative_to(ROOT))
    except ValueError:
        script_text = argv[0]
    return shlex.join(["python", script_text, *argv[1:]])


def result_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(json, md)`` paths of this run: ``latest``, ``quick`` (``--quick``) or ``history/TAG``."""
    out = Path(args.out)
    stem = out / "history" / args.tag if args.tag else out / ("quick" if args.quick else "latest")
    return stem.with_suffix(".json"), stem.with_suffix(".md")


def previous_parts(args: argparse.Namespace) -> dict:
    """The ``parts`` of this run's result file as it is now (a suite of several parts replaces the
    parts it runs and keeps the latest result of the others)."""
    json_path, _ = result_paths(args)
    try:
        return dict(json.loads(json_path.read_text()).get("parts", {}))
    except (OSError, ValueError):
        return {}


def write_results(args: argparse.Namespace, result: dict, markdown: str, *, title: str | None = None) -> Path:
    """Write the run's JSON and markdown (the command line at the top of both); return the md path."""
    json_path, md_path = result_paths(args)
    cmd = command_line()
    write_json(json_path, {"command": cmd, "suite": getattr(args, "suite", None), **result})
    head = f"# {title or args.suite}\n\nCommand (from the repository root): `{cmd}`\n\n"
    md_path.write_text(head + markdown.rstrip("\n") + "\n")
    print(f"results: {json_path} and {md_path.name}", file=sys.stderr)
    return md_path
