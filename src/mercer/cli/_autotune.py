"""What ``mercer fit`` does before fitting, unless ``--no-tune``: the kernel's hyperparameters and
the regularisation chosen on the training rows.

Candidates, each learned on 80 % of (at most ``TUNE_MAX_ROWS`` of) the preprocessed training rows
(a CSR matrix stays sparse: one-hot and TF-IDF columns) and scored on the other 20 % with a model of
the kind being fit:

* ``given``: the kernel and regularisation as given (the defaults: ``gamma = 1 / n_features``);
* ``given, gamma = 1 / (d var)``: for the default RBF kernel, scikit-learn's ``gamma='scale'`` (``d``
  features, ``var`` the variance of all entries of the preprocessed rows) when it is more than twice
  or less than half of ``1 / d``: sparse rows (TF-IDF rows of norm 1, a wide one-hot) have entries
  far smaller than standardised columns, and ``1 / d`` makes their kernel nearly constant
  (``svc``: with each ``C`` of the grid);
* ``learned``: the kernel's hyperparameters and ``alpha`` learned by
  :class:`~mercer.models.NystroemKernelRidgeCV` (generalised cross-validation from blocked
  statistics: O(n M^2) per step, no n x n matrix) on the standardised target, or on the centred
  +-1 codes of the classes;
* ``learned per feature``: the same with one length scale per feature (ARD), for an RBF kernel with
  at most ``ARD_MAX_FEATURES`` features.

The best validation score wins (``given`` on ties, so tuning never makes the validation score worse).
``svc`` then picks ``C`` from a grid on the same split. The winner's values go into the estimator
(``alpha`` rescaled to the number of rows it is fit on: the ridge objectives are unnormalised sums),
and the line that ``mercer fit`` prints says what was chosen and why.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.base import clone

from ..kernels import RBF, Kernel
from ._data import CLIError
from ._prep import final_estimator

__all__ = ["Tuned", "TUNE_MAX_ROWS", "apply", "skip_reason", "tune"]

#: Rows the hyperparameters are learned on (a random subset of larger tables): each step of the
#: learning costs O(rows x M^2), M = 5 sqrt(rows).
TUNE_MAX_ROWS = 20_000
#: Rows the candidates' SVC models are fit on to be scored (an SVC fit grows as rows^2).
SVC_MAX_ROWS = 5_000
#: One length scale per feature is a candidate up to this many features (one unknown each).
ARD_MAX_FEATURES = 100
C_GRID = (0.1, 1.0, 10.0, 100.0)


@dataclass
class Tuned:
    """The chosen values: ``kernel``, ``alpha`` (per row of the rows it was learned on, times that
    count: see :func:`apply`) or ``C``, and the line to print."""

    kernel: Kernel
    reg: str  # "alpha" or "C"
    value: float
    rows: int | None  # rows the values were learned on (alpha is rescaled from them); None: as given
    line: str


def skip_reason(args, prep) -> str | None:
    """Why ``mercer fit`` does not tune (None: it does)."""
    if args.model == "kpca":
        return "kpca has no target to tune against"
    if getattr(args, "no_tune", False):
        return "--no-tune"
    if args.alpha is not None or args.C is not None:
        return f"{'--alpha' if args.alpha is not None else '--C'} given"
    if any(ch in args.kernel for ch in ":=(+*"):
        return f"--kernel {args.kernel!r} sets its own parameters"
    if prep.table.streamed:
        return "the data are streamed from disk (tune on a sample with 'mercer tune')"
    return None


def _targets(y, classifier: bool) -> np.ndarray:
    if classifier:
        from sklearn.preprocessing import LabelBinarizer

        T = LabelBinarizer(pos_label=1, neg_label=-1).fit_transform(np.asarray(y).astype(str)).astype(np.float64)
        return T - T.mean(axis=0)
    y = np.asarray(y, dtype=np.float64)
    return (y - y.mean()) / (y.std() or 1.0)


def _as_rows(Z):
    """The preprocessed rows in float64: a CSR matrix stays sparse (one-hot, TF-IDF), never made dense."""
    import scipy.sparse as sp

    if sp.issparse(Z):
        return sp.csr_matrix(Z, dtype=np.float64)
    return np.ascontiguousarray(Z, dtype=np.float64)


def _scaled_rbf(kernel: Kernel, Z):
    """The default RBF kernel with scikit-learn's ``gamma='scale'`` (1 / (d var Z)), or None when the
    kernel is not the default RBF or that gamma is within a factor 2 of ``1 / d``."""
    if type(kernel) is not RBF or kernel.gamma is not None:
        return None
    n, d = Z.shape
    if hasattr(Z, "multiply"):  # sparse: from the stored entries, never made dense
        mean, sq = Z.sum() / (n * d), Z.multiply(Z).sum() / (n * d)
    else:
        mean, sq = Z.mean(), np.mean(np.square(Z))
    var = float(sq - mean * mean)
    if not var > 0 or 0.5 <= 1.0 / var <= 2.0:
        return None
    return RBF(gamma=1.0 / (d * var))


def _given_alpha(est) -> float:
    return float(getattr(est, "alpha", 1.0))


def _candidate_kernels(kernel: Kernel, p: int) -> list[tuple[str, Kernel]]:
    out = [("learned", kernel)]
    if type(kernel) is RBF and np.ndim(kernel.gamma) == 0 and p <= ARD_MAX_FEATURES:
        g = 1.0 / p if kernel.gamma is None else float(kernel.gamma)
        out.append(("learned per feature", RBF(gamma=[g] * p)))
    return out


def _scorer(est, classifier: bool):
    """Fit a copy of the model kind on (A, ya) with (kernel, reg value) and score it on (V, yv)."""
    from ..models import NystroemKernelRidge, NystroemKernelRidgeClassifier

    def score(kernel, reg: str, value: float, A, ya, V, yv) -> float:
        if reg == "C":
            model = clone(est).set_params(kernel=kernel, C=value)
        elif A.shape[0] > 3_000:  # an exact solve on the split would cost more than the learning
            cls = NystroemKernelRidgeClassifier if classifier else NystroemKernelRidge
            model = cls(kernel=kernel, alpha=value, random_state=0, device=est.device, memory_budget=est.memory_budget)
        else:
            model = clone(est).set_params(kernel=kernel, alpha=value)
        with warnings.catch_warnings():  # a candidate's warnings are not about the model being fit
            warnings.simplefilter("ignore")
            model.fit(A, ya)
            return float(model.score(V, yv))

    return score


def tune(model, X, y, args, *, classifier: bool) -> Tuned:
    """Choose the kernel and regularisation of ``model`` (the unfitted pipeline) on ``(X, y)``."""
    from ..models import NystroemKernelRidgeCV

    t0 = time.perf_counter()
    est = final_estimator(model)
    y = np.asarray(y)
    rng = np.random.RandomState(args.seed)
    n = len(y)
    rows = np.sort(rng.choice(n, TUNE_MAX_ROWS, replace=False)) if n > TUNE_MAX_ROWS else np.arange(n)
    Xs = X.iloc[rows] if hasattr(X, "iloc") else X[rows]
    steps = getattr(model, "named_steps", None)  # None: --preprocess none, the numeric columns as they are
    Z = _as_rows(clone(steps["prep"]).fit_transform(Xs) if steps is not None else Xs)
    if Z.shape[0] < 10:
        raise CLIError(f"tuning needs at least 10 rows; the table has {Z.shape[0]} (use --no-tune).")
    ys = y[rows]
    T = _targets(ys, classifier)
    perm = rng.permutation(len(rows))
    cut = max(len(rows) - max(len(rows) // 5, 2), 2)
    a, v = np.sort(perm[:cut]), np.sort(perm[cut:])
    labels = ys if classifier else T  # what the scored models are fit on (the pipeline standardises y too)
    score = _scorer(est, classifier)
    kernel0 = est.kernel if isinstance(est.kernel, Kernel) else RBF()
    reg = "C" if hasattr(est, "C") else "alpha"
    p = Z.shape[1]

    fit_rows = a if reg == "alpha" else a[:SVC_MAX_ROWS]
    results = []  # (score, name, kernel, value)
    value0 = float(est.C) if reg == "C" else _given_alpha(est)
    results.append((score(kernel0, reg, value0, Z[fit_rows], labels[fit_rows], Z[v], labels[v]), "given", kernel0,
                    value0))
    scaled = _scaled_rbf(kernel0, Z)
    if scaled is not None:  # the given regularisation (svc: each C), scikit-learn's default gamma
        for value in (C_GRID if reg == "C" else (value0,)):
            results.append((score(scaled, reg, value, Z[fit_rows], labels[fit_rows], Z[v], labels[v]),
                            f"given, gamma = 1/(d var){f', C = {value:g}' if reg == 'C' else ''}", scaled, value))
    for name, start in _candidate_kernels(kernel0, p):
        cv = NystroemKernelRidgeCV(kernel=start, alpha=1.0, random_state=args.seed, device=args.device,
                                   memory_budget=args.memory_budget)
        try:
            with warnings.catch_warnings():  # a learning stopped by max_iter (or ill-conditioned on the way) is
                warnings.simplefilter("ignore")  # still scored on the validation rows
                cv.fit(Z[a], T[a])
        except (ValueError, RuntimeError) as exc:  # a learning failure leaves the given values
            results.append((-np.inf, f"{name} (failed: {exc})", start, value0))
            continue
        if reg == "alpha":
            results.append((score(cv.kernel_, reg, cv.alpha_ * len(fit_rows) / len(a), Z[fit_rows], labels[fit_rows],
                                  Z[v], labels[v]), name, cv.kernel_, cv.alpha_ * len(fit_rows) / len(a)))
        else:
            for C in C_GRID:
                results.append((score(cv.kernel_, reg, C, Z[fit_rows], labels[fit_rows], Z[v], labels[v]),
                                f"{name}, C = {C:g}", cv.kernel_, C))
    best = max(results, key=lambda r: r[0])  # the first of equals: "given" wins ties
    metric = "accuracy" if classifier else "R^2"
    shown = "; ".join(f"{name} {s:.4f}" for s, name, _, _ in results if np.isfinite(s))
    learned = not best[1].startswith("given")  # alpha learned on fit_rows: rescaled to the rows of the final fit
    per = f" for {len(fit_rows)} rows" if reg == "alpha" and learned else ""
    line = (f"tuned: {best[1]}: kernel {best[2]!r}, {reg} {best[3]:.4g}{per} (validation {metric} on {len(v)} of "
            f"{len(rows)} rows: {shown}; {time.perf_counter() - t0:.1f} s; --no-tune to skip)")
    return Tuned(best[2], reg, best[3], len(fit_rows) if learned else None, line)


def apply(model, tuned: Tuned, n_rows: int):
    """A copy of ``model`` with the tuned values, ``alpha`` rescaled to ``n_rows`` training rows."""
    model = clone(model)
    if not hasattr(model, "named_steps"):  # --preprocess none: the estimator itself
        step = ""
    else:
        step = "model__regressor__" if "regressor" in model.named_steps["model"].get_params(deep=False) else "model__"
    value = tuned.value * n_rows / tuned.rows if tuned.reg == "alpha" and tuned.rows else tuned.value
    return model.set_params(**{f"{step}kernel": tuned.kernel, f"{step}{tuned.reg}": value})
