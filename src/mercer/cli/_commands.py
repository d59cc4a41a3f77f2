"""``mercer fit``, ``mercer predict`` and ``mercer demo``, and what they share with ``mercer evaluate``
and ``mercer tune``: building the estimator, reading the data, saving the model. (Their options are
declared in :mod:`._arguments`.)"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from sklearn.base import is_classifier

from ..io import load, save
from ..kernels import parse_kernel_spec
from ..models import (KernelPCA, KernelRidge, KernelRidgeClassifier, KernelSVC, KernelSVR, NuSVC, NuSVR,
                      NystroemKernelRidge, NystroemKernelRidgeClassifier)
from . import _autotune
from ._arguments import MODELS
from ._data import CLIError, is_large_input, is_sparse_input, read_table, sparse_table, streamed_table
from ._prep import (as_categorical, as_text, build_pipeline, categorical_columns, describe_plan, final_estimator,
                    plan_columns, text_columns)
from ._progress import Progress

__all__ = ["MODELS", "Prepared", "build_estimator", "check_out_path", "final_estimator", "prepare", "run_demo",
           "run_fit", "run_predict", "score_line"]

#: what 'mercer predict' applies: the models 'fit' writes, and those 'tune' writes
APPLICABLE = frozenset(MODELS.values()) | {"KernelRidgeCV"}
REGRESSORS = ("ridge", "nystroem-ridge", "svr", "nusvr")
CLASSIFIERS = ("ridge-classifier", "nystroem-classifier", "svc", "nusvc")


# -- models ---------------------------------------------------------------------------------------
#: option -> (the models it applies to, how the error names them)
_MODEL_OPTIONS = {
    "--alpha": (("ridge", "ridge-classifier", "nystroem-ridge", "nystroem-classifier"), "the ridge models"),
    "--C": (("svc", "svr", "nusvr"), "svc, svr and nusvr only"),
    "--n-components": (("kpca",), "kpca only"),
    "--centers": (("nystroem-ridge", "nystroem-classifier"), "the nystroem-ridge and nystroem-classifier models only"),
}


def _check_model_options(args) -> None:
    given = {"--alpha": args.alpha, "--C": args.C, "--n-components": args.n_components, "--centers": args.centers}
    for option, value in given.items():
        models, names = _MODEL_OPTIONS[option]
        if value is not None and args.model not in models:
            raise CLIError(f"{option} applies to {names}, not {args.model}.")


def build_estimator(args):
    """The mercer estimator that ``--model``, ``--kernel`` and the model options describe."""
    try:
        kernel = parse_kernel_spec(args.kernel)
    except (ValueError, TypeError) as exc:
        raise CLIError(f"bad --kernel {args.kernel!r}: {exc}") from exc
    _check_model_options(args)
    common = dict(kernel=kernel, device=args.device, dtype=args.dtype, memory_budget=args.memory_budget)
    if args.model == "kpca":
        return KernelPCA(n_components=args.n_components or 2, **common)
    if args.model == "svc":
        return KernelSVC(C=1.0 if args.C is None else args.C, random_state=args.seed, **common)
    if args.model in ("svr", "nusvr"):
        return (KernelSVR if args.model == "svr" else NuSVR)(C=1.0 if args.C is None else args.C, **common)
    if args.model == "nusvc":
        return NuSVC(random_state=args.seed, **common)
    alpha = 1.0 if args.alpha is None else args.alpha
    if args.model.startswith("nystroem"):
        cls = NystroemKernelRidge if args.model == "nystroem-ridge" else NystroemKernelRidgeClassifier
        if args.dtype is None:
            common["dtype"] = "float32"
        return cls(alpha=alpha, n_centers=args.centers or "auto", random_state=args.seed, **common)
    cls = KernelRidge if args.model == "ridge" else KernelRidgeClassifier
    return cls(alpha=alpha, **common)


def check_out_path(path_text: str, what: str = "--out") -> Path:
    """Refuse an output path that cannot be written, before any long work."""
    path = Path(path_text)
    folder = path.parent
    if path.is_dir():
        raise CLIError(f"{what} {path_text} is a directory; give a file name.")
    if not folder.is_dir():
        raise CLIError(f"{what} {path_text}: folder {folder} does not exist.")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CLIError(f"{what} {path_text}: permission denied (cannot write there).")
    return path


def _aside(path: Path) -> tuple[int, str]:
    """A temporary file next to ``path`` (to be renamed onto it), with the permissions a new file
    gets (mkstemp's are 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return fd, tmp


def save_atomically(model, path: Path) -> None:
    """Write to a temporary file next to ``path`` and rename it: an interrupted or failed save
    leaves no partial model file."""
    fd, tmp = _aside(path)
    os.close(fd)
    try:
        save(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- data -----------------------------------------------------------------------------------------
class Prepared:
    """A table read for fitting, with the columns plan and the (unfitted) estimator or pipeline."""

    def __init__(self, table, X, y, model, estimator, summary: str):
        self.table, self.X, self.y, self.model, self.estimator, self.summary = table, X, y, model, estimator, summary


def _target(args, table):
    """The target as numbers for regressors; rows without a target are dropped (returned mask)."""
    y = table.y
    if y is None:
        return None, None
    import pandas as pd

    keep = ~pd.isna(pd.Series(y)).to_numpy()
    if args.model in REGRESSORS:
        if y.dtype.kind not in "biuf":
            raise CLIError(f"target column {table.target_name!r} is not numeric; use a classifier model "
                           "for class labels.")
        y = y.astype(np.float64)
    return y, keep


def _frame(X):
    """A DataFrame for the column plan. Without names (a ``.npy`` array, a CSV without header)
    columns are labelled by position, 0 to d - 1, as the fitted pipeline will select them."""
    if hasattr(X, "columns"):
        return X if all(isinstance(c, str) for c in X.columns) else X.set_axis(range(X.shape[1]), axis=1)
    import pandas as pd

    return pd.DataFrame(X)


def prepare(args, progress: bool) -> Prepared:
    """Read ``--data``, split off the target and build the estimator, with the preprocessing
    pipeline unless ``--preprocess none``."""
    if args.model != "kpca" and args.target is None:
        raise CLIError(f"--model {args.model} needs --target (the column to predict).")
    estimator = build_estimator(args)
    auto = args.preprocess == "auto"
    if not auto and (args.drop or args.categorical or args.text):
        raise CLIError("--drop, --categorical and --text need --preprocess auto.")
    if is_sparse_input(str(args.data)):
        return _prepare_sparse(args, estimator, progress)
    if _streams(estimator, args):
        return _prepare_streamed(args, estimator, progress)
    with Progress(f"reading {args.data}", enabled=progress):
        table = read_table(args.data, args.target, header=not args.no_header, numeric_only=not auto)
    y, keep = _target(args, table)
    X = table.X
    notes = []
    if keep is not None and not keep.all():
        notes.append(f"dropped {int((~keep).sum())} row(s) without a target")
        X, y = X[keep] if isinstance(X, np.ndarray) else X.loc[keep], y[keep]
    if not auto:
        _refuse_missing(X, table.path)
        return Prepared(table, X, y, estimator, estimator, "; ".join(notes) or "none (--preprocess none)")
    frame = _frame(X)
    plan = plan_columns(frame, drop=args.drop, categorical=args.categorical, text=args.text, missing=args.missing)
    scale_target = args.model in REGRESSORS
    model = build_pipeline(plan, estimator, scale_target=scale_target)
    frame = as_text(as_categorical(frame[plan.used], plan.categorical), plan.text)
    sparse = model.named_steps["prep"].sparse_threshold > 0
    summary = "; ".join(notes + [describe_plan(plan, scale_target=scale_target, imputed=True, sparse=sparse)])
    return Prepared(table, frame, y, model, estimator, summary)


def _streams(estimator, args) -> bool:
    """Whether ``--data`` stays on disk: ``mercer fit`` (evaluate's folds and tune's searches take
    subsets of the rows: in memory), the model fits from streamed data and the data are a folder
    or glob of Parquet files, or a file larger than a quarter of the memory budget."""
    if getattr(args, "command", "fit") != "fit" or getattr(type(estimator), "_streams_fit", False) is not True:
        return False
    from ..linalg import default_memory_budget

    return is_large_input(str(args.data), default_memory_budget(None, args.memory_budget))


def _prepare_streamed(args, estimator, progress: bool) -> Prepared:
    """The features left on disk (read block by block by the fit), the target read; no
    preprocessing pipeline (it would need the table in memory): the columns are used as they are."""
    if args.categorical or args.text:
        option = "--categorical" if args.categorical else "--text"
        raise CLIError(f"{option} needs the table in memory; {args.data} is streamed from disk (a folder or "
                       "glob of Parquet files, or a large file), whose feature columns must be numeric.")
    with Progress(f"opening {args.data}", enabled=progress):
        table = streamed_table(str(args.data), args.target, drop=args.drop)
    y, keep = _target(args, table)
    if keep is not None and not keep.all():
        raise CLIError(f"{args.data}: {int((~keep).sum())} row(s) have no target; rows cannot be dropped from data "
                       "streamed from disk: remove them when writing the files.")
    how = ("the numeric columns as they are (no standardisation: streamed data are not preprocessed)"
           if args.preprocess == "auto" else "(--preprocess none)")
    summary = f"none, data streamed from disk block by block; {how}"
    return Prepared(table, table.X, y, estimator, estimator, summary)


def _prepare_sparse(args, estimator, progress: bool) -> Prepared:
    """Sparse rows (``.npz``, or Parquet in the sparse layout) used as they are: streamed from disk
    under the rule of :func:`_streams`, else read into one CSR matrix by the source. With
    ``--preprocess auto``, a pipeline whose ``prep`` step passes the rows through (standardising
    columns would densify them; an imputer has nothing to fill) and which centres and scales a
    regression target, as for a table; streamed, the estimator alone."""
    if args.categorical or args.text:
        option = "--categorical" if args.categorical else "--text"
        raise CLIError(f"{option}: {args.data} holds sparse rows (.npz or the sparse Parquet layout), already "
                       "numeric features; there are no columns to encode.")
    stream = _streams(estimator, args)
    with Progress(f"{'opening' if stream else 'reading'} {args.data}", enabled=progress):
        table = sparse_table(str(args.data), args.target, drop=args.drop, stream=stream)
    y, keep = _target(args, table)
    X, notes = table.X, []
    if keep is not None and not keep.all():
        if stream:
            raise CLIError(f"{args.data}: {int((~keep).sum())} row(s) have no target; rows cannot be dropped from "
                           "data streamed from disk: remove them when writing the files.")
        notes.append(f"dropped {int((~keep).sum())} row(s) without a target")
        X, y = X[keep], y[keep]
    exact = not stream or table.path.suffix.lower() == ".npz"  # Parquet's metadata bound them from above
    rows = (f"sparse rows ({'' if exact else 'at most '}{table.X.nnz} stored entries in {table.shape[0]} x "
            f"{table.shape[1]})"
            f"{' streamed from disk block by block' if stream else ''}")
    if stream or args.preprocess != "auto":
        how = "used as they are" + ("" if args.preprocess == "auto" else " (--preprocess none)")
        return Prepared(table, X, y, estimator, estimator, "; ".join(notes + [f"none, {rows}, {how}"]))
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    scale_target = args.model in REGRESSORS
    model = TransformedTargetRegressor(regressor=estimator, transformer=StandardScaler()) if scale_target \
        else estimator
    model = Pipeline([("prep", FunctionTransformer(accept_sparse=True)), ("model", model)])
    summary = f"{rows} used as they are (columns not standardised: that would make them dense)"
    return Prepared(table, X, y, model, estimator,
                    "; ".join(notes + [summary] + (["target centred and scaled"] if scale_target else [])))


def _refuse_missing(X, path) -> None:
    if hasattr(X, "columns"):
        counts = X.isna().sum()
        bad = {c: int(k) for c, k in counts.items() if k}
    else:
        counts = np.isnan(X).sum(axis=0)
        bad = {i: int(k) for i, k in enumerate(counts) if k}
    if bad:
        from ._prep import missing_report

        raise CLIError(f"{path}: missing values in {missing_report(bad)}; use --preprocess auto to impute them.")


def _describe_table(table, rows: int | None = None) -> str:
    n, d = table.shape
    text = f"{table.path.name}: {n if rows is None else rows} rows x {d} features"
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


def score_line(model, X, y) -> str:
    est = final_estimator(model)
    if isinstance(est, KernelPCA):
        ratio = float(est.explained_variance_ratio_.sum())
        return (f"explained variance: {ratio:.4f} of the feature-space variance in "
                f"{len(est.eigenvalues_)} components ({est.solver_info_['method']} eigensolver)")
    metric = "accuracy" if is_classifier(model) else "R^2"
    return f"{metric}: {model.score(X, y):.4f}"


# -- fit ------------------------------------------------------------------------------------------
def _describe_model(est, out) -> None:
    if isinstance(est, KernelPCA):
        print(f"model: KernelPCA(n_components={est.n_components}, kernel={est.kernel_!r})", file=out)
    else:
        reg = f"C={est.C:g}" if hasattr(est, "C") else f"alpha={est.alpha:g}"
        print(f"model: {type(est).__name__}({reg}, kernel={getattr(est, 'kernel_', est.kernel)!r})", file=out)
    solver = f", {est.solver_} solve" if hasattr(est, "solver_") else ""
    dtype, device = getattr(est, "_dtype", None), getattr(est, "_device", None)
    if dtype is not None:
        print(f"compute: {str(dtype).removeprefix('torch.')} on {device}{solver}", file=out)
    if hasattr(est, "n_centers_"):
        print(f"centres: {est.n_centers_}, conjugate gradient: {int(est.n_iter_.max())} iterations, "
              f"relative residual {float(est.residual_.max()):.1e}", file=out)
    if hasattr(est, "classes_"):
        print(f"classes: {len(est.classes_)} ({', '.join(map(str, est.classes_[:10]))}"
              f"{', ...' if len(est.classes_) > 10 else ''})", file=out)


def run_fit(args, out, progress: bool) -> int:
    out_path = check_out_path(args.out)
    prep = prepare(args, progress)
    print(f"data: {_describe_table(prep.table, prep.X.shape[0])}", file=out)
    print(f"preprocessing: {prep.summary}", file=out)
    if args.holdout > 0 and args.model != "kpca" and prep.table.streamed:
        print("held-out score: skipped (the data are streamed from disk; score a separate test file with "
              "'mercer predict --target')", file=out)
    reason = _autotune.skip_reason(args, prep)
    tuner = None if reason is not None else \
        (lambda model, X, y: _autotune.tune(model, X, y, args, classifier=args.model in CLASSIFIERS))
    tuned = None
    if args.holdout > 0 and args.model != "kpca" and not prep.table.streamed:
        from ._scoring import held_out

        line, tuned = held_out(prep, args, progress, tuner=tuner)
        print(line, file=out)
    if tuner is not None and tuned is None:
        with Progress(f"tuning on {len(prep.y)} rows", enabled=progress):
            tuned = tuner(prep.model, prep.X, prep.y)
    if tuned is not None:
        print(tuned.line, file=out)
        prep.model = _autotune.apply(prep.model, tuned, len(prep.y))
        prep.estimator = final_estimator(prep.model)
    elif args.model != "kpca":
        print(f"not tuned: {reason}", file=out)
    name = type(prep.estimator).__name__
    with Progress(f"fitting {name} on {prep.X.shape[0]} rows", enabled=progress) as p:
        prep.model.fit(prep.X) if args.model == "kpca" else prep.model.fit(prep.X, prep.y)
    _describe_model(final_estimator(prep.model), out)
    print(f"fit time: {p.elapsed:.2f} s", file=out)
    with Progress("scoring on the training data", enabled=progress):
        line = score_line(prep.model, prep.X, prep.y)
    print(f"training {line}" + ("" if args.model == "kpca" else " (on the rows it was fit on: optimistic)"),
          file=out)
    with Progress(f"saving {out_path}", enabled=progress):
        save_atomically(prep.model, out_path)
    print(f"saved: {out_path} ({_size(out_path)})", file=out)
    return 0


# -- predict --------------------------------------------------------------------------------------
def _align_columns(model, table):
    """Reorder a DataFrame's columns to the model's training names (when it has them)."""
    names = getattr(model, "feature_names_in_", None)
    X = table.X
    named = hasattr(X, "columns") and all(isinstance(c, str) for c in X.columns)
    if names is None and named:
        raise CLIError(f"{table.path}: the model was fit on columns without names (.npy or --no-header), so "
                       "they cannot be matched by name; give the same kind of file, columns in the same order.")
    if names is None or not hasattr(X, "columns"):
        if names is not None:
            raise CLIError(f"{table.path}: the model was fit on named columns; give a file with a header "
                           "(CSV or Parquet), not an unnamed array.")
        return X.to_numpy() if hasattr(X, "columns") else X
    missing = [n for n in names if n not in X.columns]
    if missing:
        shown = ", ".join(map(repr, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise CLIError(f"{table.path}: the model was fit on columns that this file lacks: {shown}.")
    return as_text(as_categorical(X[list(names)], categorical_columns(model)), text_columns(model))


def _sparse_rows(model, table):
    """The rows of a sparse file, left on disk: the model reads them block by block. A model fit on
    named columns (a table) cannot be matched to them."""
    if getattr(model, "feature_names_in_", None) is not None:
        raise CLIError(f"{table.path}: the model was fit on named columns (a table); sparse rows (.npz or the sparse "
                       "Parquet layout) have none: give the same kind of file it was fit on.")
    return table.X


def _write_csv(path: str, header: list[str], rows) -> None:
    if path == "-":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return
    target = Path(path)
    fd, tmp = _aside(target)
    try:  # written aside and renamed: an interrupted run leaves no partial output file
        with os.fdopen(fd, "w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load_model(path_text: str, device):
    model_path = Path(path_text)
    if model_path.is_dir():
        raise CLIError(f"--model {model_path} is a directory; give a model file written by 'mercer fit'.")
    if not model_path.is_file():
        raise CLIError(f"model file not found: {model_path}")
    model = load(model_path, device=device)
    name = type(final_estimator(model)).__name__
    if name not in APPLICABLE:
        raise CLIError(f"{model_path} holds a {name}; 'mercer predict' applies {', '.join(sorted(APPLICABLE))}.")
    return model, name


def _apply(model, X, kpca: bool):
    """Predictions (or the embedding) and the CSV header; a model that cannot be applied to data of
    the right width comes from a damaged file."""
    try:
        if kpca:
            return np.asarray(model.transform(X)).tolist(), [str(c) for c in model.get_feature_names_out()]
        return np.asarray(model.predict(X)), ["prediction"]
    except (RuntimeError, IndexError, TypeError, AttributeError) as exc:
        raise CLIError(f"the model cannot be applied ({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); "
                       "the model file is damaged or inconsistent.") from exc


def run_predict(args, out, progress: bool) -> int:
    if args.out != "-":
        check_out_path(args.out)
    model, name = _load_model(args.model, args.device)
    sparse = is_sparse_input(str(args.data))
    with Progress(f"{'opening' if sparse else 'reading'} {args.data}", enabled=progress):
        table = sparse_table(str(args.data), args.target, strict=False) if sparse else \
            read_table(args.data, args.target, header=not args.no_header, numeric_only=False)
    X = _sparse_rows(model, table) if sparse else _align_columns(model, table)
    info = sys.stderr if args.out == "-" else out
    print(f"model: {name} from {args.model}", file=info)
    print(f"data: {_describe_table(table)}", file=info)
    kpca = name == "KernelPCA"
    with Progress(f"{'transforming' if kpca else 'predicting'} {table.shape[0]} rows", enabled=progress) as p:
        rows, header = _apply(model, X, kpca)
    if not kpca and table.y is not None:
        _report_score(model, rows, table, info)
    _write_csv(args.out, header, rows if kpca else ([v] for v in rows.tolist()))
    where = "standard output" if args.out == "-" else args.out
    print(f"wrote {table.shape[0]} rows to {where} ({p.elapsed:.2f} s)", file=info)
    return 0


def _report_score(model, pred, table, info) -> None:
    if is_classifier(model):
        print(f"accuracy against {table.target_name!r}: {float(np.mean(pred == table.y)):.4f}", file=info)
        return
    from sklearn.metrics import r2_score  # on use: sklearn.metrics adds ~60 ms to every command

    y = table.y.astype(np.float64)
    keep = ~np.isnan(y)
    print(f"R^2 against {table.target_name!r}: {r2_score(y[keep], pred[keep]):.4f}", file=info)


def run_demo(args, out, progress: bool) -> int:
    from ._demo import run_demo as demo  # imported on use: the demo's scikit-learn references cost ~0.15 s

    return demo(quick=args.quick, device=args.device, dtype=args.dtype, out=out, progress=progress)
