"""``mercer demo``: mercer and scikit-learn side by side on data that scikit-learn ships.

Each mercer model is set against the scikit-learn estimator that computes the same thing, so the
scores must agree and the fit times can be compared, and, for the classifiers, against SVC as a
familiar different model for context. Hyperparameters were fixed beforehand by 3-fold
cross-validation on the training split (not tuned on the test split, not tuned here).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import sklearn
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import LabelBinarizer, StandardScaler
from sklearn.svm import SVC

from .. import __version__
from .._backend import resolve_device
from ..models import KernelPCA, KernelRidgeClassifier
from ._progress import Progress

__all__ = ["run_demo"]

SEED = 0
DIGITS_CLF = dict(alpha=0.1, gamma=0.1)
DIGITS_KPCA = dict(gamma=0.05, n_components=10)
CANCER_CLF = dict(alpha=0.1, gamma=0.01)
QUICK_DIGITS = 300


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _table(out, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        print("  " + "   ".join(cells), file=out)


class _SklearnRidgeCodes(ClassifierMixin, BaseEstimator):
    """scikit-learn's KernelRidge on ±1 one-vs-rest codes with an unpenalised intercept: the model
    that mercer's KernelRidgeClassifier fits, computed by scikit-learn. KernelRidge has no
    intercept, so it solves twice with ``A = K + alpha I``: ``u = A^{-1} (Y - mean Y)`` and
    ``v = A^{-1} 1``; then ``b = 1^T u / 1^T v`` and the dual coefficients are ``u - b v``."""

    def __init__(self, alpha=1.0, gamma=None):
        self.alpha = alpha
        self.gamma = gamma

    def fit(self, X, y):
        self.lb_ = LabelBinarizer(neg_label=-1, pos_label=1)
        Y = self.lb_.fit_transform(y).astype(np.float64)
        self.classes_ = self.lb_.classes_
        mean = Y.mean(axis=0)
        u = SkKernelRidge(alpha=self.alpha, kernel="rbf", gamma=self.gamma).fit(X, Y - mean).dual_coef_
        v = SkKernelRidge(alpha=self.alpha, kernel="rbf", gamma=self.gamma).fit(X, np.ones(len(X))).dual_coef_
        b = u.sum(axis=0) / v.sum()
        self.dual_coef_, self.offset_, self.X_fit_ = u - np.outer(v, b), mean + b, X
        return self

    def decision_function(self, X):
        from sklearn.metrics.pairwise import rbf_kernel

        s = rbf_kernel(X, self.X_fit_, gamma=self.gamma) @ self.dual_coef_ + self.offset_
        return s[:, 0] if s.shape[1] == 1 else s

    def predict(self, X):
        s = self.decision_function(X)
        return self.classes_[(s > 0).astype(int) if s.ndim == 1 else s.argmax(axis=1)]


def _classification(out, name, X, y, params, *, scale: bool, device, dtype, progress):
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=SEED)
    alpha, gamma = params["alpha"], params["gamma"]

    def wrap(est):
        return make_pipeline(StandardScaler(), est) if scale else est

    models = [
        ("mercer KernelRidgeClassifier", lambda: wrap(KernelRidgeClassifier(
            alpha=alpha, kernel="rbf", gamma=gamma, device=device, dtype=dtype))),
        ("sklearn KernelRidge on ±1 codes (same model)", lambda: wrap(_SklearnRidgeCodes(alpha, gamma))),
        ("sklearn SVC, C=1 (a different model)", lambda: wrap(SVC(kernel="rbf", gamma=gamma, C=1.0))),
    ]
    prep = "StandardScaler, then " if scale else ""
    print(f"\n{name}: {X.shape[0]} samples x {X.shape[1]} features, {len(np.unique(y))} classes; "
          f"train {len(ytr)} / test {len(yte)} (stratified, seed {SEED})", file=out)
    print(f"  {prep}RBF kernel exp(-gamma ||x - y||^2), gamma={gamma:g}; ridge alpha={alpha:g}", file=out)
    rows, fitted = [], {}
    with Progress(f"{name}: fitting {len(models)} classifiers", enabled=progress):
        for label, make in models:
            make().fit(Xtr[:40], ytr[:40])  # warm-up: first-call costs are not part of the timing
            model, seconds = _timed(lambda make=make: make().fit(Xtr, ytr))
            acc = float(np.mean(model.predict(Xte) == yte))
            fitted[label] = model
            rows.append([label, f"{acc:.4f}", f"{seconds:.3f} s"])
    _table(out, ["model", "test accuracy", "fit time"], rows)
    a, b = (fitted[models[0][0]], fitted[models[1][0]])
    same = int(np.sum(a.predict(Xte) == b.predict(Xte)))
    diff = float(np.max(np.abs(np.asarray(a.decision_function(Xte)) - b.decision_function(Xte))))
    print(f"  mercer vs sklearn KernelRidge: {same}/{len(yte)} identical test predictions, "
          f"max |score difference| {diff:.1e}", file=out)


def _kpca(out, X, params, *, device, dtype, progress):
    Xtr, Xte = train_test_split(X, test_size=0.25, random_state=SEED)
    gamma, k = params["gamma"], params["n_components"]
    n = len(Xtr)
    K = rbf_kernel(Xtr, gamma=gamma)
    trace = float(np.trace(K) - K.sum() / n)  # variance of the training set in feature space, times n
    print(f"\ndigits KernelPCA: train {n} / test {len(Xte)}; top {k} components of RBF(gamma={gamma:g}), "
          "the first 2 kept as a 2-D map", file=out)
    rows = []
    with Progress(f"digits: fitting 2 kernel PCAs on {n} samples", enabled=progress):
        KernelPCA(2, kernel="rbf", gamma=gamma, device=device, dtype=dtype).fit(Xtr[:30])  # warm-up
        SkKernelPCA(2, kernel="rbf", gamma=gamma).fit(Xtr[:30])
        ours, t_ours = _timed(lambda: KernelPCA(k, kernel="rbf", gamma=gamma, random_state=SEED,
                                                device=device, dtype=dtype).fit(Xtr))
        theirs, t_theirs = _timed(lambda: SkKernelPCA(k, kernel="rbf", gamma=gamma, random_state=SEED).fit(Xtr))
    ours_share = np.asarray(ours.eigenvalues_) / trace
    their_share = np.asarray(theirs.eigenvalues_) / trace
    rows.append([f"mercer KernelPCA ({ours.solver_info_['method']} eigensolver)",
                 f"{ours_share[:2].sum():.4f}", f"{ours_share.sum():.4f}", f"{t_ours:.3f} s"])
    rows.append([f"sklearn KernelPCA (eigen_solver={theirs.eigen_solver!r})",
                 f"{their_share[:2].sum():.4f}", f"{their_share.sum():.4f}", f"{t_theirs:.3f} s"])
    _table(out, ["model", "variance in top 2", f"in top {k}", "fit time"], rows)
    Z1 = np.asarray(ours.transform(Xte))[:, :2]
    Z2 = theirs.transform(Xte)[:, :2]
    signs = np.sign(np.sum(Z1 * Z2, axis=0))
    diff = float(np.max(np.abs(Z1 - Z2 * signs)))
    rel = float(np.max(np.abs(np.asarray(ours.eigenvalues_) - theirs.eigenvalues_) / theirs.eigenvalues_))
    print(f"  variance shares are eigenvalues / trace of the centred training Gram; eigenvalues agree to "
          f"{rel:.1e} (relative)", file=out)
    print(f"  2-D maps of the test rows agree to {diff:.1e} (max |difference|, up to the sign of each axis)",
          file=out)


def run_demo(*, quick: bool = False, device=None, dtype=None, out=None, progress: bool = True) -> int:
    """Print mercer and scikit-learn side by side on digits and breast cancer."""
    out = out or sys.stdout
    dev = resolve_device(device)
    print(f"mercer {__version__} (torch {torch.__version__}, {dtype or 'float64'} on {dev}, "
          f"{torch.get_num_threads()} threads) vs scikit-learn {sklearn.__version__} (float64, CPU)", file=out)
    print("Fit times are wall-clock, after one warm-up fit of each model; hyperparameters were fixed "
          "beforehand\nby 3-fold cross-validation on the training split. Both libraries run in this one "
          "process, where scikit-learn's\nOpenBLAS threads can contend with torch's: for isolated "
          "timings see benchmarks/ and the README.", file=out)
    if quick:
        print(f"--quick: digits subsampled to {QUICK_DIGITS} samples.", file=out)
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    if quick:
        X, _, y, _ = train_test_split(X, y, train_size=QUICK_DIGITS, stratify=y, random_state=SEED)
    _classification(out, "digits (pixels / 16)", X, y, DIGITS_CLF, scale=False, device=device, dtype=dtype,
                    progress=progress)
    _kpca(out, X, DIGITS_KPCA, device=device, dtype=dtype, progress=progress)
    Xc, yc = load_breast_cancer(return_X_y=True)
    _classification(out, "breast cancer", Xc, yc, CANCER_CLF, scale=True, device=device, dtype=dtype,
                    progress=progress)
    return 0
