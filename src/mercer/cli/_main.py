"""``mercer`` command line: argparse -> estimators. No maths here."""

from __future__ import annotations

import argparse
import csv
import logging
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.base import is_classifier

from .. import __version__
from ..io import load, save
from ..kernels import parse_kernel_spec
from ..models import KernelPCA, KernelRidge, KernelRidgeClassifier, NystroemKernelRidge, NystroemKernelRidgeClassifier
from ._data import CLIError, read_table
from ._progress import Progress

__all__ = ["build_parser", "main"]

log = logging.getLogger("mercer")

MODELS = {"ridge": "KernelRidge", "ridge-classifier": "KernelRidgeClassifier", "kpca": "KernelPCA",
          "nystroem-ridge": "NystroemKernelRidge", "nystroem-classifier": "NystroemKernelRidgeClassifier"}
_REGRESSORS = ("ridge", "nystroem-ridge")
_CLASSIFIERS = ("ridge-classifier", "nystroem-classifier")

_DESCRIPTION = """\
mercer: kernel methods with the scikit-learn API, computed with PyTorch.

  mercer demo                       compare with scikit-learn on data it ships
  mercer fit --data train.csv --target y --model ridge --kernel 'rbf:gamma=0.1' --out m.mercer
  mercer predict --model m.mercer --data test.csv --out predictions.csv
"""

_KERNEL_HELP = ("kernel spec 'name[:key=value,...]', '+' for sums, e.g. 'rbf:gamma=0.1', "
                "'poly:degree=3,coef0=1', 'rbf:sigma=2+linear' (default: %(default)s; names: linear, "
                "poly, quadratic, rbf, laplacian, matern, sigmoid, intersection, histogram)")


# -- parser ---------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so that ``main`` returns a status and never kills its caller."""

    def error(self, message):
        raise _UsageError(self, message)


class _UsageError(Exception):
    def __init__(self, parser, message):
        super().__init__(message)
        self.parser = parser


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30}


def _bytes(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size such as 512MiB or 2GiB, got {text!r}")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


def _add_common(parser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else False
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help="log progress at INFO level, with timestamps")
    parser.add_argument("-q", "--quiet", action="store_true", default=default, help="no progress output on stderr")
    parser.add_argument("--debug", action="store_true", default=default, help="show the full traceback of errors")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mercer", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mercer {__version__}")
    _add_common(parser, False)
    # the same options after the command name (`mercer fit -v ...`); SUPPRESS keeps the top-level value
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = sub.add_parser("demo", parents=[common],
                          help="mercer and scikit-learn side by side on digits and breast cancer",
                          description="Fit mercer and scikit-learn on data shipped with scikit-learn and "
                                      "print scores and fit times side by side.")
    demo.add_argument("--quick", action="store_true", help="subsample the data (a few seconds in all)")
    demo.add_argument("--device", default=None, help="device for mercer (cpu, cuda, ...; default cpu)")
    demo.add_argument("--dtype", choices=("float32", "float64"), default=None,
                      help="precision for mercer (default: follows the data, float64)")

    fit = sub.add_parser("fit", parents=[common], help="fit a model on a data file and save it",
                         description="Fit a kernel model on a table and save it (no pickle: see mercer.io).")
    fit.add_argument("--data", required=True, metavar="FILE", help="training data: .csv, .tsv, .npy or .parquet")
    fit.add_argument("--target", metavar="COL", help="target column: a name or a 0-based index (negative "
                     "counts from the end); required for the ridge models, dropped for kpca")
    fit.add_argument("--model", required=True, choices=sorted(MODELS), help="estimator to fit")
    fit.add_argument("--kernel", default="rbf", metavar="SPEC", help=_KERNEL_HELP)
    fit.add_argument("--alpha", type=_positive_float, default=None,
                     help="regularisation of ridge models, as in scikit-learn (default 1.0)")
    fit.add_argument("--n-components", type=_positive_int, default=None, metavar="K",
                     help="components kept by kpca (default 2)")
    fit.add_argument("--centers", type=_positive_int, default=None, metavar="M",
                     help="Nyström models: number of centres (default min(n, max(100, 5 sqrt(n))))")
    fit.add_argument("--dtype", choices=("float32", "float64"), default=None, help="compute precision")
    fit.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default cpu)")
    fit.add_argument("--memory-budget", type=_bytes, default=None, metavar="SIZE",
                     help="memory for kernel matrices, e.g. 2GiB (default: half the free memory)")
    fit.add_argument("--no-header", action="store_true", help="the CSV file has no header row")
    fit.add_argument("--out", required=True, metavar="MODEL", help="where to save the fitted model")

    pred = sub.add_parser("predict", parents=[common], help="apply a saved model to a data file",
                          description="Predict (ridge models) or embed (kpca) the rows of a table.")
    pred.add_argument("--model", required=True, metavar="MODEL", help="a file written by 'mercer fit'")
    pred.add_argument("--data", required=True, metavar="FILE", help=".csv, .tsv, .npy or .parquet")
    pred.add_argument("--target", metavar="COL",
                      help="a target column to drop before predicting (and to score against)")
    pred.add_argument("--device", default=None, help="where to compute (default cpu)")
    pred.add_argument("--no-header", action="store_true", help="the CSV file has no header row")
    pred.add_argument("--out", default="-", metavar="FILE.csv",
                      help="output CSV (default '-': standard output)")
    return parser


# -- helpers --------------------------------------------------------------------------------------
def _describe_table(table) -> str:
    n, d = table.shape
    text = f"{table.path.name}: {n} rows x {d} features"
    if table.target_name is not None:
        text += f" (target: {table.target_name!r})"
    return text


def _size(path: Path) -> str:
    size = path.stat().st_size
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"  # pragma: no cover


def _build_model(args):
    try:
        kernel = parse_kernel_spec(args.kernel)
    except (ValueError, TypeError) as exc:
        raise CLIError(f"bad --kernel {args.kernel!r}: {exc}") from exc
    common = dict(kernel=kernel, device=args.device, dtype=args.dtype, memory_budget=args.memory_budget)
    if args.model == "kpca":
        if args.alpha is not None:
            raise CLIError("--alpha applies to ridge models, not kpca.")
        return KernelPCA(n_components=args.n_components or 2, **common)
    if args.n_components is not None:
        raise CLIError("--n-components applies to kpca only.")
    alpha = 1.0 if args.alpha is None else args.alpha
    if args.model.startswith("nystroem"):
        cls = NystroemKernelRidge if args.model == "nystroem-ridge" else NystroemKernelRidgeClassifier
        if args.dtype is None:
            common["dtype"] = "float32"
        return cls(alpha=alpha, n_centers=args.centers or "auto", random_state=0, **common)
    if args.centers is not None:
        raise CLIError("--centers applies to the nystroem-ridge and nystroem-classifier models only.")
    cls = KernelRidge if args.model == "ridge" else KernelRidgeClassifier
    return cls(alpha=alpha, **common)


def _score_line(model, X, y) -> str:
    name = type(model).__name__
    if name == "KernelPCA":
        ratio = float(model.explained_variance_ratio_.sum())
        return (f"explained variance: {ratio:.4f} of the feature-space variance in "
                f"{len(model.eigenvalues_)} components ({model.solver_info_['method']} eigensolver)")
    metric = "accuracy" if is_classifier(model) else "R^2"
    return f"{metric}: {model.score(X, y):.4f}"


# -- commands -------------------------------------------------------------------------------------
def _cmd_fit(args, out, progress: bool) -> int:
    if args.model != "kpca" and args.target is None:
        raise CLIError(f"--model {args.model} needs --target (the column to predict).")
    model = _build_model(args)
    out_path = Path(args.out)
    if not out_path.parent.is_dir():
        raise CLIError(f"--out {args.out}: folder {out_path.parent} does not exist.")
    with Progress(f"reading {args.data}", enabled=progress):
        table = read_table(args.data, args.target, header=not args.no_header)
    y = table.y
    if args.model in _REGRESSORS and y is not None:
        if y.dtype.kind not in "biuf":
            raise CLIError(f"target column {table.target_name!r} is not numeric; use a classifier model "
                           "for class labels.")
        y = y.astype(np.float64)
    print(f"data: {_describe_table(table)}", file=out)
    with Progress(f"fitting {type(model).__name__} on {table.shape[0]} x {table.shape[1]}", enabled=progress) as p:
        if args.model == "kpca":
            model.fit(table.X)
        else:
            model.fit(table.X, y)
    solver = f", {model.solver_} solve" if hasattr(model, "solver_") else ""
    print(f"model: {type(model).__name__}(alpha={model.alpha:g}, kernel={model.kernel_!r})"
          if args.model != "kpca" else f"model: KernelPCA(n_components={model.n_components}, kernel={model.kernel_!r})",
          file=out)
    dtype, device = getattr(model, "_dtype", None), getattr(model, "_device", None)
    if dtype is not None:
        print(f"compute: {str(dtype).removeprefix('torch.')} on {device}{solver}", file=out)
    if hasattr(model, "n_centers_"):
        print(f"centres: {model.n_centers_}, conjugate gradient: {int(model.n_iter_.max())} iterations, "
              f"relative residual {float(model.residual_.max()):.1e}", file=out)
    if args.model in _CLASSIFIERS:
        print(f"classes: {len(model.classes_)} ({', '.join(map(str, model.classes_[:10]))}"
              f"{', ...' if len(model.classes_) > 10 else ''})", file=out)
    print(f"fit time: {p.elapsed:.2f} s", file=out)
    with Progress("scoring on the training data", enabled=progress):
        line = _score_line(model, table.X, y)
    print(f"training {line}", file=out)
    with Progress(f"saving {out_path}", enabled=progress):
        save(model, out_path)
    print(f"saved: {out_path} ({_size(out_path)})", file=out)
    return 0


def _align_columns(model, table):
    """Reorder a DataFrame's columns to the model's training names (when it has them)."""
    names = getattr(model, "feature_names_in_", None)
    X = table.X
    if names is None or not hasattr(X, "columns"):
        return X
    missing = [n for n in names if n not in X.columns]
    if missing:
        shown = ", ".join(map(repr, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise CLIError(f"{table.path}: the model was fit on columns that this file lacks: {shown}.")
    return X[list(names)]


def _write_csv(path: str, header: list[str], rows) -> None:
    fh = sys.stdout if path == "-" else open(path, "w", newline="")
    try:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    finally:
        if fh is not sys.stdout:
            fh.close()


def _cmd_predict(args, out, progress: bool) -> int:
    model_path = Path(args.model)
    if not model_path.is_file():
        raise CLIError(f"model file not found: {model_path}")
    model = load(model_path, device=args.device)
    name = type(model).__name__
    if name not in MODELS.values():
        raise CLIError(f"{model_path} holds a {name}; 'mercer predict' applies ridge and kpca models.")
    with Progress(f"reading {args.data}", enabled=progress):
        table = read_table(args.data, args.target, header=not args.no_header)
    X = _align_columns(model, table)
    info = sys.stderr if args.out == "-" else out
    print(f"model: {name} from {model_path}", file=info)
    print(f"data: {_describe_table(table)}", file=info)
    with Progress(f"{'transforming' if name == 'KernelPCA' else 'predicting'} {table.shape[0]} rows",
                  enabled=progress) as p:
        if name == "KernelPCA":
            Z = np.asarray(model.transform(X))
            header = [str(c) for c in model.get_feature_names_out()]
            rows = Z.tolist()
        else:
            pred = np.asarray(model.predict(X))
            header, rows = ["prediction"], ([v] for v in pred.tolist())
    if name != "KernelPCA" and table.y is not None:
        y = table.y if is_classifier(model) else table.y.astype(np.float64)
        if is_classifier(model):
            print(f"accuracy against {table.target_name!r}: {float(np.mean(pred == y)):.4f}", file=info)
        else:
            from sklearn.metrics import r2_score  # on use: sklearn.metrics adds ~60 ms to every command

            print(f"R^2 against {table.target_name!r}: {r2_score(y, pred):.4f}", file=info)
    _write_csv(args.out, header, rows)
    where = "standard output" if args.out == "-" else args.out
    print(f"wrote {table.shape[0]} rows to {where} ({p.elapsed:.2f} s)", file=info)
    return 0


def _cmd_demo(args, out, progress: bool) -> int:
    from ._demo import run_demo  # imported on use: the demo's scikit-learn references cost ~0.15 s at start-up

    return run_demo(quick=args.quick, device=args.device, dtype=args.dtype, out=out, progress=progress)


_COMMANDS = {"fit": _cmd_fit, "predict": _cmd_predict, "demo": _cmd_demo}


# -- entry point ----------------------------------------------------------------------------------
def _one_line(exc: BaseException) -> str:
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"
    return " ".join(str(text).split()) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the ``mercer`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    User errors (missing file, bad kernel spec, unknown column, ...) print one line on stderr and
    return 2; ``--debug`` shows the traceback instead.
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
    progress = not (args.quiet or args.verbose)
    t0 = time.perf_counter()
    try:
        return _COMMANDS[args.command](args, sys.stdout, progress)
    except (CLIError, ValueError, KeyError, OSError, MemoryError, ImportError) as exc:
        if args.debug or os.environ.get("MERCER_DEBUG"):
            raise
        print(f"mercer {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mercer {args.command}: interrupted after {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 130
    finally:
        if handler is not None:
            log.removeHandler(handler)
            log.setLevel(old_level)
