"""``mercer demo``: mercer and scikit-learn side by side on data that scikit-learn ships.

Each mercer model is set against the scikit-learn estimator that computes the same thing, so the
scores must agree and the fit times can be compared, and, for the classifiers, against SVC as a
familiar different model for context. Hyperparameters were fixed beforehand by 3-fold
cross-validation on the training split (not tuned on the test split, not tuned here).

Each library's fits run in a worker process of its own (:func:`fit_cell`, the unit that
``benchmarks/suites/ridge_pca.py`` times too): in one process, scikit-learn's OpenBLAS threads and
torch's OpenMP threads wait for work by spinning, each on the cores the other needs, and the
demo once printed scikit-learn's KernelRidge at 4.08 s against mercer's 0.072 s on 1,347 digits.
Alone in its process scikit-learn can still stall the same way: numpy and scipy each carry an
OpenBLAS with its own threads (KernelRidge's distances in one, its solve in the other), and on a
busy 2-core machine its fit on those digits took 3.8 s with their default threads, 0.25 s with one.
mercer's multi-threaded fits stall the same way on such a machine (a thread waits for its
descheduled sibling at every barrier). So each library's fits are timed with its default threads
and with one thread (torch's for mercer, the BLAS libraries' for scikit-learn), and the faster is
shown (and said).
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor

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

__all__ = ["CELLS", "fit_cell", "run_demo"]

SEED = 0
DIGITS_CLF = dict(alpha=0.1, gamma=0.1)
DIGITS_KPCA = dict(gamma=0.05, n_components=10)
CANCER_CLF = dict(alpha=0.1, gamma=0.01)
QUICK_DIGITS = 300
#: Timed fits of each model (the best is printed), after one untimed warm-up fit.
REPEAT = 3
#: The demo's cells: what each fits and on which data.
CELLS = ("digits classifier", "digits kernel PCA", "breast cancer classifier")


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


def _cell_data(cell: str, quick: bool):
    if cell.startswith("breast cancer"):
        X, y = load_breast_cancer(return_X_y=True)
    else:
        X, y = load_digits(return_X_y=True)
        X = X / 16.0
        if quick:
            X, _, y, _ = train_test_split(X, y, train_size=QUICK_DIGITS, stratify=y, random_state=SEED)
    if cell.endswith("PCA"):
        Xtr, Xte = train_test_split(X, test_size=0.25, random_state=SEED)
        return Xtr, Xte, None, None
    return train_test_split(X, y, test_size=0.25, stratify=y, random_state=SEED)


def _classifier(cell: str, library: str, device, dtype):
    params = CANCER_CLF if cell.startswith("breast cancer") else DIGITS_CLF
    alpha, gamma = params["alpha"], params["gamma"]
    if library == "mercer":
        est = KernelRidgeClassifier(alpha=alpha, kernel="rbf", gamma=gamma, device=device, dtype=dtype)
    elif library == "sklearn":
        est = _SklearnRidgeCodes(alpha, gamma)
    else:
        est = SVC(kernel="rbf", gamma=gamma, C=1.0)
    return make_pipeline(StandardScaler(), est) if cell.startswith("breast cancer") else est


def _best_of(fit, repeat: int, library: str):
    """``(model, best seconds, threads note)``: each library with its default threads and with one
    (torch's for mercer, the BLAS libraries' for scikit-learn), the faster of the two."""
    def timed():
        times = []
        for _ in range(repeat):
            model, seconds = _timed(fit)
            times.append(seconds)
        return model, min(times)

    model, seconds = timed()
    if library == "mercer":
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            model1, seconds1 = timed()
        finally:
            torch.set_num_threads(before)
        return (model1, seconds1, "1 thread") if seconds1 < seconds else (model, seconds, "default threads")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        model1, seconds1 = timed()
    return (model1, seconds1, "1 BLAS thread") if seconds1 < seconds else (model, seconds, "default BLAS threads")


def fit_cell(cell: str, library: str, *, quick: bool = False, device=None, dtype=None, repeat: int = REPEAT) -> dict:
    """Fit one cell's model of one library (``"mercer"``, ``"sklearn"``, or ``"svc"``): one untimed
    warm-up fit on a few rows, then ``repeat`` timed fits with the library's default threads and
    ``repeat`` with one (torch's for mercer, the BLAS libraries' for scikit-learn); return the best
    time (``seconds``, and ``threads``: how it was run), the ``score`` (test accuracy; kernel PCA:
    the share of variance in the top components) and what the comparison with the other library
    needs."""
    Xtr, Xte, ytr, yte = _cell_data(cell, quick)
    if cell.endswith("PCA"):
        gamma, k = DIGITS_KPCA["gamma"], DIGITS_KPCA["n_components"]
        if library == "mercer":
            make = lambda k=k: KernelPCA(k, kernel="rbf", gamma=gamma, random_state=SEED,  # noqa: E731
                                         device=device, dtype=dtype)
        else:
            make = lambda k=k: SkKernelPCA(k, kernel="rbf", gamma=gamma, random_state=SEED)  # noqa: E731
        make(2).fit(Xtr[:30])  # warm-up: first-call costs are not part of the timing
        model, seconds, threads = _best_of(lambda: make().fit(Xtr), repeat, library)
        K = rbf_kernel(Xtr, gamma=gamma)
        trace = float(np.trace(K) - K.sum() / len(Xtr))  # variance in feature space, times n
        ev = np.asarray(model.eigenvalues_, dtype=np.float64)
        method = model.solver_info_["method"] if library == "mercer" else model.eigen_solver
        return {"seconds": seconds, "threads": threads, "score": float(ev.sum() / trace), "share": ev / trace,
                "eigenvalues": ev,
                "map": np.asarray(model.transform(Xte))[:, :2], "method": method, "n_train": len(Xtr),
                "n_test": len(Xte)}
    _classifier(cell, library, device, dtype).fit(Xtr[:40], ytr[:40])  # warm-up
    model, seconds, threads = _best_of(lambda: _classifier(cell, library, device, dtype).fit(Xtr, ytr), repeat, library)
    pred = np.asarray(model.predict(Xte))
    return {"seconds": seconds, "threads": threads, "score": float(np.mean(pred == yte)), "predict": pred,
            "decision": np.asarray(model.decision_function(Xte), dtype=np.float64)}


def _ready() -> bool:
    return True


class _Workers:
    """One worker process per library, so that each library's fits run with the cores to itself;
    in this process when worker processes cannot be started."""

    def __init__(self, libraries, **options):
        self.options, self.pools = options, {}
        try:
            ctx = multiprocessing.get_context("spawn")
            self.pools = {lib: ProcessPoolExecutor(max_workers=1, mp_context=ctx) for lib in libraries}
            started = [pool.submit(_ready) for pool in self.pools.values()]  # their imports overlap
            for future in started:
                future.result(timeout=300)
        except Exception:  # pragma: no cover - no worker processes here: time both in this process
            self.close()
            self.pools = {}

    @property
    def isolated(self) -> bool:
        return bool(self.pools)

    def fit(self, cell: str, library: str) -> dict:
        pool = self.pools.get("mercer" if library == "mercer" else "sklearn")  # SVC: scikit-learn's worker
        if pool is not None:
            return pool.submit(fit_cell, cell, library, **self.options).result()
        return fit_cell(cell, library, **self.options)

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(cancel_futures=True)


def _note(result: dict) -> str:
    return f" ({result['threads']})" if result.get("threads", "").startswith("1 ") else ""


def _classification(out, cell, workers, *, progress):
    quick = workers.options["quick"]
    Xtr, Xte, ytr, yte = _cell_data(cell, quick)
    X = np.concatenate([Xtr, Xte])
    name = "digits (pixels / 16)" if cell.startswith("digits") else "breast cancer"
    params = CANCER_CLF if cell.startswith("breast cancer") else DIGITS_CLF
    labels = {"mercer": "mercer KernelRidgeClassifier", "sklearn": "sklearn KernelRidge on ±1 codes (same model)",
              "svc": "sklearn SVC, C=1 (a different model)"}
    prep = "StandardScaler, then " if cell.startswith("breast cancer") else ""
    print(f"\n{name}: {X.shape[0]} samples x {X.shape[1]} features, {len(np.unique(ytr))} classes; "
          f"train {len(ytr)} / test {len(yte)} (stratified, seed {SEED})", file=out)
    print(f"  {prep}RBF kernel exp(-gamma ||x - y||^2), gamma={params['gamma']:g}; ridge alpha={params['alpha']:g}",
          file=out)
    res = {}
    with Progress(f"{name}: fitting {len(labels)} classifiers", enabled=progress):
        for lib in labels:
            res[lib] = workers.fit(cell, lib)
    _table(out, ["model", "test accuracy", "fit time"],
           [[labels[lib], f"{r['score']:.4f}", f"{r['seconds']:.3f} s" + _note(r)] for lib, r in res.items()])
    a, b = res["mercer"], res["sklearn"]
    same = int(np.sum(a["predict"] == b["predict"]))
    diff = float(np.max(np.abs(a["decision"] - b["decision"])))
    print(f"  mercer vs sklearn KernelRidge: {same}/{len(yte)} identical test predictions, "
          f"max |score difference| {diff:.1e}", file=out)


def _kpca(out, cell, workers, *, progress):
    gamma, k = DIGITS_KPCA["gamma"], DIGITS_KPCA["n_components"]
    with Progress("digits: fitting 2 kernel PCAs", enabled=progress):
        ours, theirs = workers.fit(cell, "mercer"), workers.fit(cell, "sklearn")
    print(f"\ndigits KernelPCA: train {ours['n_train']} / test {ours['n_test']}; top {k} components of "
          f"RBF(gamma={gamma:g}), the first 2 kept as a 2-D map", file=out)
    rows = [[f"mercer KernelPCA ({ours['method']} eigensolver)", f"{ours['share'][:2].sum():.4f}",
             f"{ours['share'].sum():.4f}", f"{ours['seconds']:.3f} s" + _note(ours)],
            [f"sklearn KernelPCA (eigen_solver={theirs['method']!r})", f"{theirs['share'][:2].sum():.4f}",
             f"{theirs['share'].sum():.4f}", f"{theirs['seconds']:.3f} s" + _note(theirs)]]
    _table(out, ["model", "variance in top 2", f"in top {k}", "fit time"], rows)
    Z1, Z2 = ours["map"], theirs["map"]
    signs = np.sign(np.sum(Z1 * Z2, axis=0))
    diff = float(np.max(np.abs(Z1 - Z2 * signs)))
    rel = float(np.max(np.abs(ours["eigenvalues"] - theirs["eigenvalues"]) / theirs["eigenvalues"]))
    print(f"  variance shares are eigenvalues / trace of the centred training Gram; eigenvalues agree to "
          f"{rel:.1e} (relative)", file=out)
    print(f"  2-D maps of the test rows agree to {diff:.1e} (max |difference|, up to the sign of each axis)",
          file=out)


def run_demo(*, quick: bool = False, device=None, dtype=None, out=None, progress: bool = True) -> int:
    """Print mercer and scikit-learn side by side on digits and breast cancer."""
    out = out or sys.stdout
    dev = resolve_device(device)
    workers = _Workers(("mercer", "sklearn"), quick=quick, device=device, dtype=dtype)
    try:
        print(f"mercer {__version__} (torch {torch.__version__}, {dtype or 'float64'} on {dev}, "
              f"{torch.get_num_threads()} threads) vs scikit-learn {sklearn.__version__} (float64, CPU)", file=out)
        where = ("each library in a worker process of its own, so that neither's threads wait on the other's"
                 if workers.isolated else "both libraries in this process (worker processes could not start), "
                 "where scikit-learn's\nOpenBLAS threads can contend with torch's")
        print(f"Fit times are wall-clock, the best of {REPEAT} fits after a warm-up fit, {where};\n"
              "each library is timed with its default threads and with one (torch's; scikit-learn's BLAS), the\n"
              "faster shown: on a busy machine a thread waiting for its descheduled sibling stalls small fits;\n"
              "hyperparameters were fixed beforehand by 3-fold cross-validation on the training split.\n"
              "Measured with more repeats: benchmarks/suites/ridge_pca.py (the same cells) and the README.", file=out)
        if quick:
            print(f"--quick: digits subsampled to {QUICK_DIGITS} samples.", file=out)
        _classification(out, "digits classifier", workers, progress=progress)
        _kpca(out, "digits kernel PCA", workers, progress=progress)
        _classification(out, "breast cancer classifier", workers, progress=progress)
    finally:
        workers.close()
    return 0
