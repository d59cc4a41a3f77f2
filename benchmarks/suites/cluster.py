"""Clustering and neighbours: mercer vs scikit-learn, measured side by side in the same run.

1. k-means: mercer ``KMeans`` vs ``sklearn.cluster.KMeans`` (Lloyd), same initial centres (k-means++
   from scikit-learn, drawn once), n_init=1, on Gaussian-mixture data with d=50: time, inertia,
   iterations, ratios. n = 100k and 1M (``--n-large`` shrinks the large case), k = 10, 100.
2. Kernel k-NN classifier vs ``KNeighborsClassifier`` on Fashion-MNIST (Debian package
   ``dataset-fashion-mnist``) when present, else on scikit-learn's digits (a documented substitute):
   time and accuracy for the linear kernel (= Euclidean) and the RBF kernel.
3. Kernel k-means (RBF, exact and Nyström) vs k-means: NMI and ARI against the true classes on a
   Fashion-MNIST subset, else digits.

Usage::

    python benchmarks/suites/cluster.py --quick      # small sizes, about a minute
    python benchmarks/suites/cluster.py              # full: n = 100k and 1M (use --n-large to shrink)
    python benchmarks/suites/cluster.py --threads 1  # same thread count on both sides (shared machines)

Fashion-MNIST: ``--fashion-mnist-dir`` / ``$MERCER_FASHION_MNIST_DIR`` (else the Debian package; else
digits). Writes ``benchmarks/results/cluster/latest.json`` and ``.md`` (``quick.*`` with ``--quick``). The machine may be shared: the load
average is recorded, and every comparison is a ratio taken in the same run.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import (fashion_mnist_dir, git_state, load_average, machine_info, markdown_table,  # noqa: E402
                     parse_suite_args, suite_parser, write_results)

REFS: tuple[str, ...] = ("sklearn",)

log = logging.getLogger("bench_cluster")


def _blobs(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    return centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_kmeans(ns, ks, d, max_iter):
    from sklearn.cluster import KMeans as SkKMeans
    from sklearn.cluster import kmeans_plusplus

    from mercer.models.cluster import KMeans

    rows = []
    for n in ns:
        X = _blobs(n, d, 100, seed=n)
        for k in ks:
            init, _ = kmeans_plusplus(X[:min(n, 200_000)], k, random_state=0)
            ours, t_ours = _timed(lambda: KMeans(k, init=init, n_init=1, max_iter=max_iter).fit(X))
            if "sklearn" not in REFS:
                rows.append(dict(n=n, d=d, k=k, mercer_s=t_ours, mercer_inertia=ours.inertia_,
                                 mercer_iter=ours.n_iter_, load=load_average()))
                continue
            ref, t_ref = _timed(lambda: SkKMeans(k, init=init, n_init=1, max_iter=max_iter).fit(X))
            rows.append(dict(n=n, d=d, k=k, mercer_s=t_ours, sklearn_s=t_ref, **{"mercer/sklearn": t_ours / t_ref},
                             speedup=t_ref / t_ours,
                             mercer_inertia=ours.inertia_, sklearn_inertia=ref.inertia_,
                             inertia_ratio=ours.inertia_ / ref.inertia_, mercer_iter=ours.n_iter_,
                             sklearn_iter=int(ref.n_iter_), load=load_average()))
            log.info("kmeans %s", rows[-1])
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
    p = suite_parser("cluster", __doc__.split("\n")[0], refs=("sklearn",), data=("fashion",),
                     quick="small sizes (about a minute)")
    p.add_argument("--n-large", type=int, default=1_000_000, help="size of the large k-means case")
    p.add_argument("--max-iter", type=int, default=100, help="Lloyd iterations cap (both libraries)")
    p.add_argument("--skip", nargs="*", default=(), choices=("kmeans", "knn", "kernel_kmeans"))
    p.add_argument("--threads", type=int, default=None,
                   help="threads for both torch and scikit-learn's OpenMP/BLAS (default: each library's own)")
    args = parse_suite_args(p, argv)
    REFS = args.refs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.threads:
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(args.threads)
        threadpool_limits(limits=args.threads)
    torch.manual_seed(0)
    ns = [20_000] if args.quick else [100_000, args.n_large]
    ks = [10] if args.quick else [10, 100]
    out = dict(machine=machine_info(), git=git_state(), load_start=load_average(),
               loadavg_start=list(os.getloadavg()), torch_threads=torch.get_num_threads(), threads_arg=args.threads, quick=args.quick,
               n_large=args.n_large, max_iter=args.max_iter)
    sections = []
    if "kmeans" not in args.skip:
        out["kmeans"] = bench_kmeans(ns, ks, 50, args.max_iter)
        sections.append(("k-means (Lloyd, same initial centres)", out["kmeans"]))
    if "knn" not in args.skip:
        out["knn"] = bench_knn(args.quick)
        sections.append(("kernel k-NN classifier (k=5)", out["knn"]))
    if "kernel_kmeans" not in args.skip:
        out["kernel_kmeans"] = bench_kernel_kmeans(args.quick)
        sections.append(("kernel k-means vs k-means (10 clusters)", out["kernel_kmeans"]))
    out["load_end"] = load_average()
    out["loadavg_end"] = list(os.getloadavg())
    md = [out["machine"], "", f"git {out['git']}; load {out['load_start']} -> {out['load_end']}", ""]
    for title, rows in sections:
        md += [f"## {title}", "", markdown_table(rows), ""]
    print("\n".join(md))
    write_results(args, out, "\n".join(md), title="Clustering and neighbours: mercer vs scikit-learn")


if __name__ == "__main__":
    main()
