"""Pictures of fitted models and data, drawn with matplotlib (an optional dependency:
``pip install mercer[plot]``).

Every function draws on ``ax`` (default: a new figure's axes) and returns the Axes; none calls
``plt.show()``, so scripts save with ``ax.figure.savefig(...)`` and notebooks display as usual.

>>> from mercer import plotting                                  # doctest: +SKIP
>>> ax = plotting.decision_regions(model, X, y)                   # doctest: +SKIP
>>> ax.figure.savefig("regions.png")                              # doctest: +SKIP

Sparse ``X`` (scipy sparse matrices) is never densified, except rows of two features: the embedding
is the kernel PCA of the sparse rows, :func:`clusters` projects them on their first two principal
components (from sparse products), :func:`approximation_errors` computes the Gram matrix on them;
:func:`decision_regions` of more than two sparse features is refused (the grid's pre-images would
be dense rows).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone, is_classifier

from .approx import Nystroem, RandomFourierFeatures
from .models import KernelPCA

__all__ = ["approximation_errors", "approximation_error", "cg_convergence", "clusters", "decision_regions",
           "embedding", "learning_curve", "predicted_vs_true", "require_matplotlib"]

INSTALL_HINT = "pip install mercer[plot]"


def require_matplotlib():
    """``matplotlib.pyplot``, or an ImportError that says how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(f"mercer.plotting needs matplotlib, which is not installed: {INSTALL_HINT} "
                          "(or pip install matplotlib).") from exc
    return plt


def _axes(ax):
    if ax is not None:
        return ax
    plt = require_matplotlib()
    return plt.subplots(figsize=(5, 4), layout="constrained")[1]


def _name(est) -> str:
    """The model's class name, looking through a Pipeline and a TransformedTargetRegressor."""
    est = getattr(est, "steps", [[None, est]])[-1][1]
    est = getattr(est, "regressor", est)
    return type(est).__name__


def _array(X) -> np.ndarray:
    """``X`` as a numpy array (a tensor copied to the host); a scipy sparse matrix as CSR, as it is."""
    if sp.issparse(X):
        return sp.csr_matrix(X)
    X = X.detach().cpu().numpy() if hasattr(X, "detach") else X
    return np.asarray(X)


def _principal_plane(X):
    """``(Z, project)``: the rows of ``X`` on their first two principal components, and the map
    of other points (rows of ``X``'s width) onto that plane. Sparse ``X`` is never densified: the
    components come from ARPACK's truncated SVD of the centred rows as a linear operator
    (``X v - (mean . v)`` and ``X^T u - mean (1^T u)``: sparse products), so the memory is the
    rows themselves and a few vectors of length ``n`` and ``d``."""
    mean = np.asarray(X.mean(0), dtype=np.float64).ravel()
    if not sp.issparse(X):
        _, _, Vt = np.linalg.svd(X - mean, full_matrices=False)
        V = Vt[:2].T
        return (X - mean) @ V, (lambda A: (np.asarray(A, dtype=np.float64) - mean) @ V)
    from scipy.sparse.linalg import LinearOperator, svds

    n, d = X.shape

    def mv(v):
        v = np.asarray(v, dtype=np.float64).reshape(d, -1)
        return X @ v - mean @ v

    def rmv(u):
        u = np.asarray(u, dtype=np.float64).reshape(n, -1)
        return X.T @ u - np.outer(mean, u.sum(0))

    if min(n, d) <= 2:  # ARPACK needs k < min(n, d); two rows (or two features) are small dense
        return _principal_plane(X.toarray())
    op = LinearOperator((n, d), matvec=mv, rmatvec=rmv, matmat=mv, rmatmat=rmv, dtype=np.float64)
    _, s, Vt = svds(op, k=2, random_state=0)
    V = Vt[np.argsort(s)[::-1]].T  # (d, 2), the larger component first
    return mv(V), (lambda A: (A @ V if sp.issparse(A) else np.asarray(A, dtype=np.float64) @ V) - mean @ V)


def _grid(Z: np.ndarray, resolution: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``resolution x resolution`` grid over the bounding box of the 2-D points ``Z`` (5 % margin)."""
    lo, hi = Z.min(0), Z.max(0)
    pad = 0.05 * np.where(hi > lo, hi - lo, 1.0)
    xx, yy = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], resolution),
                         np.linspace(lo[1] - pad[1], hi[1] + pad[1], resolution))
    return xx, yy, np.column_stack([xx.ravel(), yy.ravel()])


def _like(X, G: np.ndarray):
    """Grid points in the container the estimator was given: a DataFrame with ``X``'s columns
    (a pipeline that selects columns by name), else the array."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return G
    import pandas as pd

    return pd.DataFrame(G, columns=columns)


def decision_regions(estimator, X, y=None, *, ax=None, resolution: int = 150, projection=None, cmap="coolwarm"):
    """Colour the plane by the class that a fitted classifier predicts, with the samples on top.

    For ``d > 2`` features the plane is a 2-D kernel-PCA projection of ``X``: ``projection``, a
    :class:`~mercer.KernelPCA` fitted with ``fit_inverse_transform=True`` (default: an RBF one
    fitted here), maps every grid point back to input space (its learned pre-image), where the
    classifier predicts. The regions are then those of the classifier on the pre-images: a view,
    not the exact decision surface.

    Parameters
    ----------
    estimator : fitted classifier (``predict``)
    X : array of shape (n, d)
    y : array of shape (n,), optional
        Colours of the samples (default: the predicted labels).
    """
    ax = _axes(ax)
    X_in, X = X, _array(X)
    if sp.issparse(X) and X.shape[1] > 2:
        raise ValueError(f"decision_regions needs dense X or sparse X of 2 features: the plane of {X.shape[1]} "
                         "sparse features would be drawn from dense pre-images; plot the embedding instead.")
    X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] < 2:
        raise ValueError(f"decision_regions needs X of shape (n, d) with d >= 2; got shape {X.shape}.")
    if X.shape[1] == 2:
        Z, back = X, (lambda G: G)
        ax.set_xlabel("$x_1$"), ax.set_ylabel("$x_2$")
    else:
        if projection is None:
            projection = KernelPCA(n_components=2, kernel="rbf", fit_inverse_transform=True).fit(X)
        Z, back = _array(projection.transform(X)), (lambda G: _array(projection.inverse_transform(G)))
        ax.set_xlabel("kernel PC 1"), ax.set_ylabel("kernel PC 2")
    xx, yy, G = _grid(Z, resolution)
    pred = _array(estimator.predict(_like(X_in, back(G))))
    classes = np.unique(np.concatenate([pred, _array(y) if y is not None else pred]))
    codes = np.searchsorted(classes, pred).reshape(xx.shape)
    levels = np.arange(len(classes) + 1) - 0.5
    ax.contourf(xx, yy, codes, levels=levels, cmap=cmap, alpha=0.3)
    if len(classes) > 1:
        ax.contour(xx, yy, codes, levels=levels[1:-1], colors="k", linewidths=0.8)
    labels = _array(y) if y is not None else _array(estimator.predict(X_in))
    ax.scatter(Z[:, 0], Z[:, 1], c=np.searchsorted(classes, labels), cmap=cmap, vmin=0,
               vmax=max(len(classes) - 1, 1), s=12, edgecolors="k", linewidths=0.3)
    ax.set_title(f"{_name(estimator)}: decision regions")
    return ax


def _colours(cmap, n: int):
    """``n`` colours from the colormap ``cmap`` (a name or a matplotlib colormap)."""
    import matplotlib

    cm = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
    return [cm(v) for v in (np.linspace(0, 1, n) if n > 1 else [0.5])]


def embedding(X, y=None, *, transformer=None, kernel="rbf", ax=None, cmap="viridis"):
    """Scatter the 2-D kernel-PCA embedding of ``X``, coloured by ``y``.

    ``transformer`` is a fitted 2-component transformer (default: ``KernelPCA(2, kernel=kernel)``
    fitted on ``X`` here).
    """
    ax = _axes(ax)
    if transformer is None:
        transformer = KernelPCA(n_components=2, kernel=kernel).fit(_array(X))
    Z = _array(transformer.transform(_array(X)))
    if Z.ndim != 2 or Z.shape[1] < 2:
        raise ValueError(f"embedding needs a transformer with 2 or more components; got output shape {Z.shape}.")
    labels = None if y is None else np.asarray(y).ravel()
    if labels is not None and not np.issubdtype(labels.dtype, np.number):  # text labels: a legend, not a colour bar
        classes = np.unique(labels.astype(str))
        colours = _colours(cmap, len(classes))
        for i, c in enumerate(classes):
            mask = labels.astype(str) == c
            ax.scatter(Z[mask, 0], Z[mask, 1], color=colours[i], s=12, label=str(c))
        ax.legend(title="label", fontsize="small")
    else:
        points = ax.scatter(Z[:, 0], Z[:, 1], c=None if labels is None else labels.astype(float), cmap=cmap, s=12)
        if labels is not None:
            ax.figure.colorbar(points, ax=ax, label="label")
    ax.set_xlabel("component 1"), ax.set_ylabel("component 2")
    ax.set_title(f"{type(transformer).__name__} embedding")
    return ax


def predicted_vs_true(estimator, X, y, *, ax=None):
    """Predictions of a fitted regressor against the true targets, with the diagonal and R²."""
    from sklearn.metrics import r2_score

    ax = _axes(ax)
    y = _array(y).ravel()
    pred = _array(estimator.predict(X)).ravel()
    ax.scatter(y, pred, s=10, alpha=0.7)
    lo, hi = float(min(y.min(), pred.min())), float(max(y.max(), pred.max()))
    ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
    ax.set_xlabel("true"), ax.set_ylabel("predicted")
    ax.set_title(f"{_name(estimator)}: R² = {r2_score(y, pred):.3f}")
    return ax


def learning_curve(estimator, X, y, *, train_sizes=np.linspace(0.1, 1.0, 6), cv=5, ax=None, random_state=0):
    """Training and cross-validated error against the number of training samples.

    The error is ``1 - accuracy`` for classifiers and the mean squared error for regressors
    (scikit-learn's :func:`~sklearn.model_selection.learning_curve`, mean ± one standard deviation).
    """
    from sklearn.model_selection import learning_curve as sk_learning_curve

    ax = _axes(ax)
    clf = is_classifier(estimator)
    X = X if hasattr(X, "columns") else _array(X)  # a DataFrame stays one (pipelines select columns by name)
    sizes, train, test = sk_learning_curve(clone(estimator), X, _array(y), train_sizes=train_sizes, cv=cv,
                                           scoring="accuracy" if clf else "neg_mean_squared_error",
                                           shuffle=True, random_state=random_state)
    err_train, err_test = (1 - train, 1 - test) if clf else (-train, -test)
    for err, label in ((err_train, "training"), (err_test, "cross-validation")):
        mean, std = err.mean(1), err.std(1)
        ax.plot(sizes, mean, "o-", label=label)
        ax.fill_between(sizes, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("training samples n"), ax.set_ylabel("error (1 - accuracy)" if clf else "mean squared error")
    ax.set_title(f"{_name(estimator)}: learning curve")
    ax.legend()
    return ax


def approximation_errors(X, kernel="rbf", n_components: Sequence[int] = (10, 20, 50, 100, 200), *,
                         methods: Sequence[str] = ("rff", "nystroem"), random_state=0, **kernel_args) -> dict:
    """Relative Frobenius error ``||K - Z Z^T||_F / ||K||_F`` of feature approximations of the Gram matrix.

    ``K`` is computed densely on ``X`` (keep ``n`` to a few thousand). ``methods``: ``"rff"``
    (random Fourier features, stationary kernels) and ``"nystroem"``; ``kernel_args`` (``gamma``,
    ...) go to both. Returns ``{method: ndarray of errors, one per entry of n_components}``.
    """
    X = _array(X)
    X = X.astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    makers = {"rff": RandomFourierFeatures, "nystroem": Nystroem}
    unknown = [m for m in methods if m not in makers]
    if unknown:
        raise ValueError(f"The 'methods' parameter of approximation_errors must be among {sorted(makers)}. "
                         f"Got {unknown!r} instead.")
    K = None
    out = {}
    for method in methods:
        errs = []
        for m in n_components:
            tr = makers[method](kernel=kernel, n_components=int(m), random_state=random_state, **kernel_args).fit(X)
            if K is None:
                K = _array(tr.kernel_(_tensor_like(X)))
            Z = _array(tr.transform(X))
            errs.append(np.linalg.norm(K - Z @ Z.T) / np.linalg.norm(K))
        out[method] = np.asarray(errs)
    return out


def _tensor_like(X: np.ndarray):
    """``X`` as the kernels take it: a tensor (a copy: X may be read-only), or sparse rows."""
    import torch

    if sp.issparse(X):
        from ._sparse import as_sparse_rows

        return as_sparse_rows(X, dtype=torch.float64)
    return torch.tensor(X)


def approximation_error(X, kernel="rbf", n_components: Sequence[int] = (10, 20, 50, 100, 200), *,
                        methods: Sequence[str] = ("rff", "nystroem"), random_state=0, ax=None, **kernel_args):
    """Plot :func:`approximation_errors` against the number of features ``m`` (log-log), with the
    ``1 / sqrt(m)`` rate of random features for reference."""
    ax = _axes(ax)
    errs = approximation_errors(X, kernel, n_components, methods=methods, random_state=random_state, **kernel_args)
    m = np.asarray(n_components, dtype=float)
    names = {"rff": "random Fourier features", "nystroem": "Nyström"}
    for method, e in errs.items():
        ax.loglog(m, e, "o-", label=names[method])
    if "rff" in errs:
        ax.loglog(m, errs["rff"][0] * np.sqrt(m[0] / m), "k:", linewidth=0.8, label=r"$\propto 1/\sqrt{m}$")
    ax.set_xlabel("features m"), ax.set_ylabel(r"$\|K - ZZ^T\|_F / \|K\|_F$")
    ax.set_title("Gram matrix approximation error")
    ax.legend()
    return ax


def cg_convergence(source, *, tol: float | None = None, ax=None, label=None):
    """Relative residual of conjugate gradient per iteration (log scale).

    ``source`` is a :class:`~mercer.linalg.CGResult`, a sequence of residuals, or a fitted
    estimator with a ``cg_history_`` attribute.
    """
    history = getattr(source, "history", None)
    if history is None:
        history = getattr(source, "cg_history_", None)
    if history is None and not hasattr(source, "get_params"):
        history = source
    if history is None:
        raise ValueError(f"cg_convergence: {type(source).__name__} has no 'cg_history_' (no CG history recorded); "
                         "pass the CGResult or a sequence of residuals.")
    h = np.asarray(history, dtype=float).ravel()
    ax = _axes(ax)
    ax.semilogy(np.arange(1, len(h) + 1), h, "o-", markersize=3, label=label)
    if tol is not None:
        ax.axhline(tol, color="k", linestyle=":", linewidth=0.8, label="tolerance")
    ax.set_xlabel("iteration"), ax.set_ylabel("relative residual")
    ax.set_title("conjugate gradient convergence")
    if label is not None or tol is not None:
        ax.legend()
    return ax


def clusters(estimator, X, *, ax=None, cmap="tab10"):
    """The samples coloured by the fitted clustering's ``labels_`` (or ``predict(X)``), with
    ``cluster_centers_`` when the estimator has them; ``d > 2`` is shown on the first two
    principal components (of sparse rows: by sparse products, never densified)."""
    ax = _axes(ax)
    X = _array(X)
    labels = _array(estimator.labels_) if hasattr(estimator, "labels_") else _array(estimator.predict(X))
    if len(labels) != X.shape[0]:
        labels = _array(estimator.predict(X))
    centres = getattr(estimator, "cluster_centers_", None)
    centres = None if centres is None else _array(centres)
    if X.shape[1] > 2:
        X, project = _principal_plane(X)
        centres = None if centres is None else project(centres)
    elif sp.issparse(X):  # two features
        X = X.toarray()
    ax.scatter(X[:, 0], X[:, 1], c=labels, cmap=cmap, s=12)
    if centres is not None:
        ax.scatter(centres[:, 0], centres[:, 1], marker="X", s=120, c="k", label="centres")
        ax.legend()
    ax.set_title(f"{_name(estimator)}: {len(np.unique(labels))} clusters")
    return ax
