"""``mercer`` command line: argparse -> estimators. No maths here.

Each subcommand is one entry of :data:`COMMANDS` (its help, its arguments, its handler), so a
new command is one more entry. The options are declared in :mod:`._arguments` (standard library
only); the handlers live in their own modules, imported when their command runs, so that
``mercer --help`` starts without torch, scikit-learn or numba.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable

from .. import __version__  # the package imports its parts on use: this costs nothing
from .._progress import progress as progress_bars
from . import _arguments as arguments
from ._arguments import fraction, memory_size, positive_float, positive_int  # noqa: F401  (their former home)

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

log = logging.getLogger("mercer")

_DESCRIPTION = """\
mercer: kernel methods with the scikit-learn API, computed with PyTorch.

  mercer demo                       compare with scikit-learn on data it ships
  mercer fit --data train.csv --target y --model ridge --kernel 'rbf:gamma=0.1' --out m.mercer
  mercer evaluate --data train.csv --target y --model ridge          (5-fold CV next to a baseline)
  mercer tune --data train.csv --target y --out m.mercer              (kernel and alpha chosen for you)
  mercer predict --model m.mercer --data test.csv --out predictions.csv
"""


# -- parser ---------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so that ``main`` returns a status and never kills its caller."""

    def error(self, message):
        raise _UsageError(self, message)


class _UsageError(Exception):
    def __init__(self, parser, message):
        super().__init__(message)
        self.parser = parser


_bytes = memory_size  # the name before the commands moved to their own modules


def _add_common(parser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else False
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help="log progress at INFO level, with timestamps")
    parser.add_argument("-q", "--quiet", action="store_true", default=default, help="no progress output on stderr")
    parser.add_argument("--debug", action="store_true", default=default, help="show the full traceback of errors")


@dataclass(frozen=True)
class Command:
    """One subcommand: ``add_arguments(parser)`` declares its options, ``run(args, out, progress)``
    does the work and returns the exit status."""

    help: str
    description: str
    add_arguments: Callable
    run: Callable


def _lazy(module: str, name: str) -> Callable:
    """A function of ``mercer.cli.<module>`` imported when called: ``mercer --help`` stays fast
    (those modules import numpy, torch and scikit-learn)."""
    def call(*args):
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{module}"), name)(*args)
    return call


#: ``mercer <name>``: add a command with one more entry (options in ._arguments, handler imported on use)
COMMANDS: dict[str, Command] = {
    "demo": Command("mercer and scikit-learn side by side on digits and breast cancer",
                    "Fit mercer and scikit-learn on data shipped with scikit-learn and print scores and fit "
                    "times side by side.", arguments.add_demo_arguments, _lazy("_commands", "run_demo")),
    "fit": Command("fit a model on a data file and save it",
                   "Fit a kernel model on a table and save it (no pickle: see mercer.io). Numeric columns are "
                   "standardised, text columns one-hot encoded, missing values imputed and a regression target "
                   "centred and scaled, unless --preprocess none; a held-out score is printed.",
                   arguments.add_fit_arguments, _lazy("_commands", "run_fit")),
    "evaluate": Command("cross-validate a model and compare it with a baseline",
                        "k-fold cross-validation (or one held-out split) of the same model and preprocessing as "
                        "'mercer fit'; prints mean +- std of each metric next to a baseline (the mean, or the "
                        "majority class).", arguments.add_evaluate_arguments, _lazy("_evaluate", "run")),
    "tune": Command("choose the kernel and regularisation for you, then fit",
                    "Regression: closed-form leave-one-out (KernelRidgeCV) for n up to --loo-max-n, else "
                    "successive halving; classification: successive halving (HalvingGridSearchCV) over gamma "
                    "and alpha or C.", arguments.add_tune_arguments, _lazy("_tune", "run")),
    "predict": Command("apply a saved model to a data file",
                       "Predict (ridge and SVC models) or embed (kpca) the rows of a table; columns are matched "
                       "by name.", arguments.add_predict_arguments, _lazy("_commands", "run_predict")),
    "plot": Command("draw a data file or a saved model to an image",
                    "Decision regions, kernel-PCA embedding, predicted vs true, learning curve, kernel "
                    "approximation error or clusters, written to --out (needs matplotlib: pip install "
                    "mercer[plot]).", arguments.add_plot_arguments, _lazy("_plot", "run")),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mercer", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mercer {__version__}")
    _add_common(parser, False)
    # the same options after the command name (`mercer fit -v ...`); SUPPRESS keeps the top-level value
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        cmd.add_arguments(sub.add_parser(name, parents=[common], help=cmd.help, description=cmd.description))
    return parser


# -- entry point ----------------------------------------------------------------------------------
def _one_line(exc: BaseException) -> str:
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"
    return " ".join(str(text).split()) or type(exc).__name__


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line each (``mercer fit: warning: ConvergenceWarning: ...``), no source line."""
    text = " ".join(str(message).split())
    print(f"mercer: warning: {category.__name__}: {text}", file=sys.stderr)


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``mercer predict ... | head -1``): stop quietly, and keep
    Python from complaining when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor (tests)
        pass
    return 141  # 128 + SIGPIPE, as a process stopped by the signal


def _run(args, progress: bool) -> int:
    from ._data import CLIError  # here, not at the top: ._data imports numpy, which --help does not need

    t0 = time.perf_counter()
    try:
        with progress_bars(progress):  # bars with ETA for the long loops; silent off a terminal
            return COMMANDS[args.command].run(args, sys.stdout, progress)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except (CLIError, ValueError, KeyError, OSError, MemoryError, ImportError) as exc:
        if args.debug or os.environ.get("MERCER_DEBUG"):
            raise
        print(f"mercer {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mercer {args.command}: interrupted after {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not a bad input: still one line, and a way to see more
        if args.debug or os.environ.get("MERCER_DEBUG"):
            raise
        print(f"mercer {args.command}: internal error: {type(exc).__name__}: {_one_line(exc)} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return 1


def console_main() -> None:
    """The console entry point (``mercer``, ``python -m mercer``): :func:`main`, then exit. After
    Ctrl-C (status 130) the process leaves at once with ``os._exit``: an abandoned LAPACK call
    (see :mod:`mercer.linalg`) would otherwise keep the cores busy through the interpreter's
    shutdown (measured: 2.3 s to exit after the message, 0.1 s this way). Output and logs are
    flushed first; nothing else runs at exit in this command."""
    status = main()
    if status == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(130)
    sys.exit(status)


def main(argv: list[str] | None = None) -> int:
    """Run the ``mercer`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    User errors (missing file, bad kernel spec, unknown column, damaged model file, ...) print one
    line on stderr and return 2; ``--debug`` shows the traceback instead. Warnings print one line
    each; a closed output pipe ends quietly.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    handler = None
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        old_level = log.level
        log.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return _run(args, not (args.quiet or args.verbose))
    finally:
        if handler is not None:
            log.removeHandler(handler)
            log.setLevel(old_level)
