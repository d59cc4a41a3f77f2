"""The options of every ``mercer`` command, declared with the standard library only.

``mercer --help``, ``mercer <command> --help`` and ``mercer --version`` build the whole parser from
this module, :mod:`._main` and the estimator registry (plain data), so they start without
importing numpy, torch, scikit-learn or numba (``tests/test_import_time.py`` checks it); the
modules that run a command import those when it runs.
"""

from __future__ import annotations

import argparse
import re

from ..models import ESTIMATORS

__all__ = ["KINDS", "MODELS", "add_compute_arguments", "add_data_arguments", "add_demo_arguments",
           "add_evaluate_arguments", "add_fit_arguments", "add_model_arguments", "add_plot_arguments",
           "add_predict_arguments", "add_tune_arguments", "fraction", "memory_size", "positive_float",
           "positive_int"]

#: ``--model`` of fit, evaluate and tune -> the estimator it builds: the registry's ``cli`` names
#: (``mercer.models`` is plain data until an estimator is looked up: nothing heavy is imported)
MODELS = {entry.cli: entry.name for entry in ESTIMATORS if entry.cli is not None}

#: ``mercer plot KIND``: kind -> (needs --model, needs --target, what it draws)
KINDS = {
    "regions": (True, True, "decision regions of a saved classifier (2 features, or a kernel-PCA projection)"),
    "embedding": (False, False, "2-D kernel-PCA embedding of the data, coloured by --target"),
    "predicted": (True, True, "predictions of a saved regressor against the true --target"),
    "learning-curve": (True, True, "training and cross-validated error against n, refitting the saved model"),
    "approximation": (False, False, "Gram-matrix error of random Fourier features and Nystroem against m"),
    "clusters": (False, False, "kernel k-means clusters (--clusters K) of the data"),
}

_KERNEL_HELP = ("kernel spec 'name[:key=value,...]', '+' for sums, e.g. 'rbf:gamma=0.1', "
                "'poly:degree=3,coef0=1', 'rbf:sigma=2+linear' (default: %(default)s; names: linear, "
                "poly, quadratic, rbf, laplacian, matern, sigmoid, intersection, histogram)")


# -- value types ----------------------------------------------------------------------------------
def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def fraction(text: str) -> float:
    value = positive_float(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return value


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}


def memory_size(text: str) -> int:
    """Bytes from ``512MiB``, ``2GB``, ``1.5TiB``, ... (KB/MB/GB/TB powers of 1000, KiB/... of 1024)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size such as 512MiB, 2GiB or 1TB, got {text!r}")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


# -- options shared by fit, evaluate and tune -----------------------------------------------------
def add_data_arguments(p, *, target_help: str) -> None:
    p.add_argument("--data", required=True, metavar="FILE",
                   help="training data: .csv, .tsv, .npy or .parquet; sparse rows: .npz (scipy.sparse.save_npz) or "
                        "Parquet in mercer's sparse layout (columns 'indices' and 'values')")
    p.add_argument("--target", metavar="COL", help=target_help)
    p.add_argument("--no-header", action="store_true", help="the CSV file has no header row")
    p.add_argument("--drop", nargs="+", default=[], metavar="COL", help="columns to leave out")
    p.add_argument("--categorical", nargs="+", default=[], metavar="COL",
                   help="columns to one-hot encode even if numeric (text columns are, by default)")
    p.add_argument("--text", action="extend", nargs="+", default=[], metavar="COL",
                   help="free-text columns to turn into TF-IDF features (scikit-learn's TfidfVectorizer, saved in "
                        "the model; sparse rows); repeatable or comma-separated (without it a text column with "
                        "nearly one value per row is dropped as an identifier)")
    p.add_argument("--missing", choices=("impute", "refuse"), default="impute",
                   help="missing feature values: impute (median / most frequent) or refuse, naming the columns "
                        "(default %(default)s)")
    p.add_argument("--preprocess", choices=("auto", "none"), default="auto",
                   help="auto: standardise numeric columns, one-hot encode categorical ones, centre and scale a "
                        "regression target; none: use the numeric columns as they are (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data splits and random choices (default 0)")


def add_compute_arguments(p) -> None:
    p.add_argument("--dtype", choices=("float32", "float64"), default=None, help="compute precision")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default cpu)")
    p.add_argument("--memory-budget", type=memory_size, default=None, metavar="SIZE",
                   help="memory for kernel matrices, e.g. 2GiB or 1TB (default: half the free memory)")


def add_model_arguments(p, *, model_required: bool = True) -> None:
    add_data_arguments(p, target_help="target column: a name or a 0-based index (negative counts from the end); "
                                      "for .npz data, a .npy file of one target per row; required except for kpca")
    p.add_argument("--model", required=model_required, choices=sorted(MODELS), help="estimator to fit")
    p.add_argument("--kernel", default="rbf", metavar="SPEC", help=_KERNEL_HELP)
    p.add_argument("--alpha", type=positive_float, default=None,
                   help="regularisation of ridge models, as in scikit-learn (default 1.0)")
    p.add_argument("--C", type=positive_float, default=None, dest="C",
                   help="inverse regularisation of svc, as in scikit-learn (default 1.0)")
    p.add_argument("--n-components", type=positive_int, default=None, metavar="K",
                   help="components kept by kpca (default 2)")
    p.add_argument("--centers", type=positive_int, default=None, metavar="M",
                   help="Nyström models: number of centres (default min(n, max(100, 5 sqrt(n))))")
    add_compute_arguments(p)


# -- one function per command ---------------------------------------------------------------------
def add_fit_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--no-tune", action="store_true",
                   help="fit with the kernel and regularisation as given (default: unless --alpha, --C or a "
                        "kernel with parameters is given, they are chosen on the training rows first: the "
                        "kernel's hyperparameters learned by generalised cross-validation, scored on a "
                        "validation split against the given values)")
    p.add_argument("--holdout", type=fraction, default=0.2, metavar="FRACTION",
                   help="fraction of rows held out to report a test score before the final fit on all rows "
                        "(0: none; default %(default)s)")
    p.add_argument("--out", required=True, metavar="MODEL", help="where to save the fitted model")


def add_evaluate_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--cv", type=positive_int, default=5, metavar="K", help="number of folds (default %(default)s)")
    p.add_argument("--holdout", type=fraction, default=None, metavar="FRACTION",
                   help="one held-out split of this fraction of the rows instead of k-fold cross-validation")


def add_tune_arguments(p) -> None:
    add_model_arguments(p, model_required=False)
    p.set_defaults(model="ridge")
    p.add_argument("--cv", type=positive_int, default=5, metavar="K", help="folds of the search (default %(default)s)")
    p.add_argument("--loo-max-n", type=positive_int, default=3000, metavar="N",
                   help="largest n for the closed-form leave-one-out of ridge regression (default %(default)s)")
    p.add_argument("--search", choices=("learn", "halving"), default="learn",
                   help="learn: the kernel's hyperparameters learned by gradient (exact leave-one-out for ridge "
                        "regression up to --loo-max-n rows, else what 'mercer fit' does: generalised cross-"
                        "validation from blocked statistics, scored on a validation split); halving: successive "
                        "halving over a gamma x alpha (or C) grid of full fits (default %(default)s)")
    p.add_argument("--out", default=None, metavar="MODEL", help="save the tuned model here")


def add_predict_arguments(p) -> None:
    p.add_argument("--model", required=True, metavar="MODEL", help="a file written by 'mercer fit'")
    p.add_argument("--data", required=True, metavar="FILE",
                   help=".csv, .tsv, .npy or .parquet; sparse rows: .npz or the sparse Parquet layout")
    p.add_argument("--target", metavar="COL",
                   help="a target column to drop before predicting (and to score against); for .npz data, a .npy "
                        "file of the targets")
    p.add_argument("--device", default=None, help="where to compute (default cpu)")
    p.add_argument("--no-header", action="store_true", help="the CSV file has no header row")
    p.add_argument("--out", default="-", metavar="FILE.csv", help="output CSV (default '-': standard output)")


def add_demo_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help="subsample the data (a few seconds in all)")
    p.add_argument("--device", default=None, help="device for mercer (cpu, cuda, ...; default cpu)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="precision for mercer (default: follows the data, float64)")


def add_plot_arguments(p) -> None:
    p.add_argument("kind", choices=sorted(KINDS), help="; ".join(f"{k}: {v[2]}" for k, v in KINDS.items()))
    p.add_argument("--data", required=True, metavar="FILE", help="data: .csv, .tsv, .npy or .parquet; sparse rows: "
                   ".npz or the sparse Parquet layout")
    p.add_argument("--target", metavar="COL", help="target / label column (a name or a 0-based index); for .npz "
                   "data, a .npy file of one target per row")
    p.add_argument("--model", metavar="MODEL",
                   help="a file written by 'mercer fit' (regions, predicted, learning-curve)")
    p.add_argument("--kernel", default="rbf", metavar="SPEC", help="kernel for embedding, approximation and "
                   "clusters (default: %(default)s)")
    p.add_argument("--clusters", type=positive_int, default=3, metavar="K", help="clusters (default: %(default)s)")
    p.add_argument("--max-rows", type=positive_int, default=2000, metavar="N",
                   help="random subsample drawn above this many rows (default: %(default)s)")
    p.add_argument("--no-header", action="store_true", help="the CSV file has no header row")
    p.add_argument("--out", required=True, metavar="FILE.png", help="image to write")
