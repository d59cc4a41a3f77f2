"""Two versions of mercer side by side: the same workloads, each in fresh processes, alternating
old and new, on real data. For refactors that must not change speed.

    git worktree add ../mercer_old <commit>            # the version to compare with (outside the repo)
    .venv/bin/python benchmarks/tools/bench_versions.py --old ../mercer_old/src [--repeats 3] [--cases a,b]

Data: the UCI sets in ``$MERCER_UCI_DIR``. Results so far: ``benchmarks/results/versions/*.md``.

Each measurement is one fresh process: ``cold`` is process start (imports, numba's cache load,
first-call costs) to the end of the first fit+predict, as a CLI user meets it; ``warm`` is a second
fit+predict in the same process. Default threads. Printed: medians and new/old ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _common import ROOT, load_average, markdown_table, uci_dir  # noqa: E402

NEW_SRC = ROOT / "src"
DATA = uci_dir()

#: name -> (data, code run twice; ``X, y, Xt`` are the training and test inputs)
CASES = {
    "KernelRidge kin40k 3k": ("kin40k:3000", "m.KernelRidge(alpha=1.0, kernel='rbf', gamma=0.1).fit(X, y).predict(Xt)"),
    "KernelRidge pol 3k": ("pol:3000", "m.KernelRidge(alpha=1.0, kernel='rbf', gamma=0.05).fit(X, y).predict(Xt)"),
    "Nystroem ridge protein 40k M=2000": ("protein:40000", "m.NystroemKernelRidge(alpha=1e-6 * len(X), kernel='rbf', "
                                         "gamma=0.1, n_centers=2000, random_state=0).fit(X, y).predict(Xt)"),
    "Nystroem ridge keggu 60k M=1000": ("keggundirected:60000", "m.NystroemKernelRidge(alpha=1e-6 * len(X), kernel='rbf', "
                                        "gamma=0.05, n_centers=1000, random_state=0).fit(X, y).predict(Xt)"),
    "RFF ridge elevators": ("elevators:15000", "m.RandomFeatureRidge(alpha=1.0, kernel='rbf', gamma=0.05, "
                            "n_components=1000, random_state=0).fit(X, y).predict(Xt)"),
    "KernelSVC kin40k 10k": ("kin40k:10000", "m.KernelSVC(C=1.0, kernel='rbf', gamma=0.1).fit(X, y > np.median(y)).predict(Xt)"),
    "KMeans protein k=50": ("protein:45000", "m.KMeans(n_clusters=50, n_init=1, random_state=0).fit(X).predict(Xt)"),
    "KernelKMeans bike 3k": ("bike:3000", "m.KernelKMeans(n_clusters=8, kernel='rbf', gamma=0.05, random_state=0).fit(X).predict(Xt)"),
    "KernelPCA pol 2k": ("pol:2000", "m.KernelPCA(10, kernel='rbf', gamma=0.05, eigen_solver='arpack').fit(X).transform(Xt)"),
    "ApproxKernelPCA keggd 40k": ("keggdirected:40000", "m.ApproximateKernelPCA(10, kernel='rbf', gamma=0.05, n_features=1000, "
                                  "random_state=0).fit(X).transform(Xt)"),
    "GP elevators 800": ("elevators:800", "m.GaussianProcessRegressor(kernel=mk.RBF(0.1), max_iter=30).fit(X, y).predict(Xt)"),
    "kNN bike 10k": ("bike:10000", "m.KernelKNeighborsClassifier(n_neighbors=5, kernel='rbf', gamma=0.05)"
                     ".fit(X, (y > np.median(y))).predict(Xt)"),
    "Perceptron kin40k 5k": ("kin40k:5000", "m.KernelPerceptron(kernel='rbf', gamma=0.1, random_state=0)"
                             ".fit(X, y > np.median(y)).predict(Xt)"),
}

CHILD = r"""
import time, json, sys
t0 = time.perf_counter()
import numpy as np
import mercer as m
import mercer.kernels as mk
from mercer.datasets import load_uci
t_imp = time.perf_counter()
name, n = {data!r}.split(":")
X, y, Xt, _ = load_uci(name, {root!r}, split=0)
X, y, Xt = X[:int(n)], y[:int(n)], Xt[:2000]
mu, sd = X.mean(0), X.std(0) + 1e-12
X, Xt = (X - mu) / sd, (Xt - mu) / sd
y = (y - y.mean()) / (y.std() + 1e-12)
t_data = time.perf_counter()
{code}
t1 = time.perf_counter()
{code}
t2 = time.perf_counter()
print(json.dumps({{"cold": (t_imp - t0) + (t1 - t_data), "warm": t2 - t1}}))
"""


def run(src: pathlib.Path, data: str, code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", CHILD.format(data=data, code=code, root=str(DATA))],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{data}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # cold: imports + first fit/predict, not the CSV


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, type=pathlib.Path, help="src/ folder of the version to compare with")
    ap.add_argument("--new", default=NEW_SRC, type=pathlib.Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    args = ap.parse_args()
    if DATA is None:
        sys.exit("needs the UCI sets: set MERCER_UCI_DIR")
    wanted = [c for c in CASES if not args.cases or any(s in c for s in args.cases.split(","))]
    rows = []
    print(f"load average at start: {load_average()}", flush=True)
    for case in wanted:
        data, code = CASES[case]
        res = {"old": [], "new": []}
        for r in range(args.repeats):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for side in order:
                res[side].append(run(args.old if side == "old" else args.new, data, code))
        med = {s: {k: statistics.median(x[k] for x in res[s]) for k in ("cold", "warm")} for s in res}
        o, w = med["old"], med["new"]
        rows.append({"case": case, "old cold s": f"{o['cold']:.2f}", "new cold s": f"{w['cold']:.2f}",
                     "cold new/old": f"{w['cold'] / o['cold']:.2f}", "old warm s": f"{o['warm']:.2f}",
                     "new warm s": f"{w['warm']:.2f}", "warm new/old": f"{w['warm'] / o['warm']:.2f}"})
        print(" | ".join(rows[-1].values()), flush=True)
    print()
    print(markdown_table(rows))
    print(f"\nload average at end: {load_average()}; {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
