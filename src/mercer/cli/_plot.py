"""``mercer plot KIND``: pictures of a data file or of a saved model, written to a PNG (or any
format matplotlib knows from the extension). Options: :func:`._arguments.add_plot_arguments`.

Sparse rows (a scipy ``.npz`` with ``--target`` a ``.npy`` file, or Parquet in the sparse layout)
are opened by :func:`._data.sparse_table`, as ``fit`` / ``predict`` open them: the file stays on
disk and only the ``--max-rows`` rows drawn are read, as one CSR matrix (never dense). The pictures
of more than two features project them as for dense data, from the sparse rows: kernel PCA for
``embedding``, the first two principal components (a truncated SVD by sparse products) for
``clusters``; ``regions`` needs pre-images in input space (dense rows), and draws sparse rows of two
features only."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone, is_classifier

from ..kernels import parse_kernel_spec
from ._arguments import KINDS
from ._data import CLIError, is_sparse_input, read_table, sparse_table

__all__ = ["run"]


def _subsample(X, y, max_rows: int):
    n = len(X)
    if n <= max_rows:
        return X, y
    idx = np.sort(np.random.default_rng(0).choice(n, max_rows, replace=False))
    take = (lambda a: a.iloc[idx]) if hasattr(X, "iloc") else (lambda a: a[idx])
    return take(X), (None if y is None else np.asarray(y)[idx])


def _sparse_sample(args, model):
    """``(X, y)``: the ``--max-rows`` rows drawn from a sparse file (as :func:`_subsample` draws
    them), read from the source on disk into one CSR matrix, and their targets."""
    from ._commands import _sparse_rows

    table = sparse_table(str(args.data), args.target, strict=False)  # the source: left on disk
    src = _sparse_rows(model, table) if model is not None else table.X
    n = src.n_samples
    idx = np.sort(np.random.default_rng(0).choice(n, args.max_rows, replace=False)) if n > args.max_rows else None
    try:
        X = src.to_numpy() if idx is None else src.take(idx)
    except ValueError as exc:
        raise CLIError(f"--data {args.data}: {exc}") from None
    if not np.isfinite(X.data).all():
        raise CLIError(f"--data {args.data}: the rows hold NaN or infinity; 'mercer plot {args.kind}' draws finite "
                       "values only.")
    y = table.y if table.y is None or idx is None else np.asarray(table.y)[idx]
    if args.kind == "regions" and X.shape[1] > 2:
        raise CLIError(f"'mercer plot regions' colours a plane of input points; --data {args.data} holds sparse rows "
                       f"of {X.shape[1]} features, whose points on a 2-D projection would be dense rows of "
                       f"{X.shape[1]} values. Draw 'mercer plot embedding --target ...' or 'predicted' instead.")
    return (X.toarray() if X.shape[1] <= 2 else X), y


def _numeric(X, kind: str):
    if sp.issparse(X):  # sparse rows: numeric and finite (checked when read)
        return X
    frame = X.select_dtypes("number") if hasattr(X, "select_dtypes") else None
    if frame is not None and frame.shape[1] < X.shape[1]:
        raise CLIError(f"'mercer plot {kind}' draws numeric columns only; this file has text columns "
                       f"({', '.join(map(str, X.columns.difference(frame.columns)[:5]))}).")
    A = np.asarray(X, dtype=np.float64)
    if np.isnan(A).any():
        raise CLIError(f"'mercer plot {kind}' cannot draw rows with missing values; drop or fill them first.")
    return A


def _draw(args, X, y, model):
    from .. import plotting

    kernel = parse_kernel_spec(args.kernel)
    if args.kind == "regions":
        if not is_classifier(model):
            raise CLIError("'mercer plot regions' needs a classifier model.")
        return plotting.decision_regions(model, X, y)
    if args.kind == "predicted":
        return plotting.predicted_vs_true(model, X, y)
    if args.kind == "learning-curve":
        return plotting.learning_curve(clone(model), X, y, cv=5)
    if args.kind == "embedding":
        from ..models import KernelPCA

        A = _numeric(X, args.kind)
        return plotting.embedding(A, y, transformer=KernelPCA(n_components=2, kernel=kernel).fit(A))
    if args.kind == "approximation":
        A = _numeric(X, args.kind)
        return plotting.approximation_error(A, kernel, [m for m in (10, 20, 50, 100, 200, 500) if m <= A.shape[0]])
    from ..models import KernelKMeans

    A = _numeric(X, args.kind)
    return plotting.clusters(KernelKMeans(n_clusters=args.clusters, kernel=kernel, random_state=0).fit(A), A)


def _save_figure(fig, path: Path) -> None:
    """Write to a temporary file next to ``path`` and rename it: no partial image on Ctrl-C (the
    file gets a new file's permissions, not mkstemp's 0600)."""
    from ._commands import _aside

    fd, tmp = _aside(path)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100, format=path.suffix.lstrip(".").lower() or "png")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def run(args, out, progress: bool) -> int:
    from .. import plotting
    from ._commands import _align_columns, _load_model, check_out_path

    needs_model, needs_target, _ = KINDS[args.kind]
    if needs_model and args.model is None:
        raise CLIError(f"'mercer plot {args.kind}' needs --model (a file written by 'mercer fit').")
    if needs_target and args.target is None:
        raise CLIError(f"'mercer plot {args.kind}' needs --target (the column to compare with).")
    out_path = check_out_path(args.out)
    plt = plotting.require_matplotlib()
    plt.switch_backend("Agg")  # files only: no window, no display needed
    model = _load_model(args.model, None)[0] if args.model else None
    if is_sparse_input(str(args.data)):
        X, y = _sparse_sample(args, model)
    else:
        table = read_table(args.data, args.target, header=not args.no_header, numeric_only=False)
        X = table.X if model is None else _align_columns(model, table)
        X, y = _subsample(X, table.y, args.max_rows)
    ax = _draw(args, X, y, model)
    _save_figure(ax.figure, out_path)
    plt.close(ax.figure)
    print(f"wrote {out_path} ({args.kind}, {X.shape[0]} rows)", file=out)
    return 0
