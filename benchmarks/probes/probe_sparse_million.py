"""Issue 29's demonstration: NystroemKernelRidge on a 1,000,000 x 1,000,000 sparse matrix (100
non-zeros per row) streamed from disk, within 8 GiB of peak RSS.

    python benchmarks/probes/probe_sparse_million.py [--n 1000000] [--d 1000000] [--per-row 100]
        [--centers 600] [--data DIR] [--budget-gib 5.5] [--fit-only]

The data: ``--topics`` topics, each with its own vocabulary of ``--vocab`` columns (the first
``topics x vocab`` columns); a row belongs to one topic and holds ``--per-row`` distinct columns,
80% from its topic's vocabulary and 20% anywhere among the ``d`` columns, values uniform in
[0.5, 1.5], rows L2-normalised (TF-IDF-like). The target is the topic's mean (standard normal per
topic) plus a sparse linear term ``x . w`` (``w`` normal on the topic columns, zero elsewhere) plus
noise of standard deviation 0.1: a model learns it only from the rows' columns.

The training matrix is written to ``DIR/train.npz`` in the format of ``scipy.sparse.save_npz``
(uncompressed, CSR: float64 values, int32 column indices; ``scipy.sparse.load_npz`` reads it) by
chunks of ``--chunk`` rows -- no dense array, and not the whole matrix, is ever held: each chunk is
generated from its own seed, once for the ``indices`` member and once for ``data`` (a zip file is
written one member at a time). The fit then runs in a fresh process (``--fit-only`` reuses the
file), reading the file through :class:`mercer.sources.SparseSource`; its peak RSS is that
process's ``ru_maxrss``. A held-out set of ``--n-test`` rows (generated in memory, CSR) gives R^2.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np
import scipy.sparse as sp


def chunk_rows(seed: int, rows: int, args, topic_means, w):
    """``(indices (rows, per_row) int32 sorted per row, values (rows, per_row) float64, y)`` of one chunk."""
    rng = np.random.default_rng([args.seed, seed])
    k = args.per_row
    in_topic = int(round(0.8 * k))
    topic = rng.integers(0, args.topics, rows)
    # distinct sorted columns: sorted draws with replacement from [0, m - j) plus 0, 1, ..., j - 1
    a = np.sort(rng.integers(0, args.vocab - in_topic + 1, (rows, in_topic)), axis=1) + np.arange(in_topic)
    a += (topic * args.vocab)[:, None]
    b = np.sort(rng.integers(0, args.d - (k - in_topic) + 1, (rows, k - in_topic)), axis=1) + np.arange(k - in_topic)
    cols = np.concatenate([a, b], axis=1)
    vals = rng.uniform(0.5, 1.5, (rows, k))
    order = np.argsort(cols, axis=1, kind="stable")
    cols, vals = np.take_along_axis(cols, order, 1), np.take_along_axis(vals, order, 1)
    dup = cols[:, 1:] == cols[:, :-1]  # a uniform column that hit a topic column: moved to the next free one
    while dup.any():
        cols[:, 1:][dup] = (cols[:, 1:][dup] + 1) % args.d
        order = np.argsort(cols, axis=1, kind="stable")
        cols, vals = np.take_along_axis(cols, order, 1), np.take_along_axis(vals, order, 1)
        dup = cols[:, 1:] == cols[:, :-1]
    vals /= np.sqrt((vals ** 2).sum(1, keepdims=True))
    lin = (vals * w[np.minimum(cols, w.size - 1)] * (cols < w.size)).sum(1)
    y = topic_means[topic] + lin + 0.1 * rng.standard_normal(rows)
    return cols.astype(np.int32), vals, y


def model(args):
    rng = np.random.default_rng([args.seed, 2**31])
    return rng.standard_normal(args.topics), rng.standard_normal(args.topics * args.vocab)


def write_npz(path: str, args) -> np.ndarray:
    """The training rows as an uncompressed scipy .npz, by chunks; returns y."""
    topic_means, w = model(args)
    n, k = args.n, args.per_row
    chunks = [(i, min(args.chunk, n - s)) for i, s in enumerate(range(0, n, args.chunk))]
    y = np.empty(n)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        def small(name, arr):
            with zf.open(name + ".npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)

        def big(name, dtype, count, part):
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                         "fortran_order": False, "shape": (count,)})
                pos = 0
                for i, rows in chunks:
                    cols, vals, yc = chunk_rows(i, rows, args, topic_means, w)
                    y[pos:pos + rows] = yc
                    pos += rows
                    f.write(np.ascontiguousarray(part(cols, vals), dtype=dtype).tobytes())

        big("indices", np.int32, n * k, lambda c, v: c)
        big("data", np.float64, n * k, lambda c, v: v)
        small("indptr", np.arange(0, n * k + 1, k, dtype=np.int64))
        small("format", np.array(b"csr"))
        small("shape", np.array([n, args.d], dtype=np.int64))
    return y


def test_set(args):
    topic_means, w = model(args)
    cols, vals, y = chunk_rows(10**6 + 7, args.n_test, args, topic_means, w)
    X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, cols.size + 1, args.per_row)),
                      shape=(args.n_test, args.d))
    return X, y


def fit(args) -> dict:
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)

    import mercer
    from mercer.sources import SparseSource

    torch.set_num_threads(args.threads)
    y = np.load(os.path.join(args.data, "y.npy"))
    X = SparseSource(os.path.join(args.data, "train.npz"))
    Xt, yt = test_set(args)
    est = mercer.NystroemKernelRidge(kernel=args.kernel, gamma=args.gamma, alpha=args.alpha, n_centers=args.centers,
                                     solver="cg", max_iter=args.max_iter, tol=args.tol, random_state=0,
                                     memory_budget=int(args.budget_gib * 2**30))
    t0 = time.perf_counter()
    est.fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = est.predict(Xt)
    pred_s = time.perf_counter() - t0
    r2 = 1 - ((pred - yt) ** 2).sum() / ((yt - yt.mean()) ** 2).sum()
    base = 1 - ((y.mean() - yt) ** 2).sum() / ((yt - yt.mean()) ** 2).sum()
    return {"n": X.n_samples, "d": X.n_features, "nnz": X.nnz, "M": args.centers, "kernel": args.kernel,
            "gamma": args.gamma, "alpha": args.alpha, "budget_gib": args.budget_gib, "threads": args.threads,
            "cg_iterations": int(np.max(est.n_iter_)), "residual": float(np.max(est.residual_)),
            "fit_s": round(fit_s, 1), "predict_s": round(pred_s, 2), "n_test": args.n_test,
            "test_r2": round(float(r2), 4), "test_r2_of_the_mean": round(float(base), 4),
            "centers_nnz": int(est.centers_.nnz), "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=1_000_000)
    p.add_argument("--per-row", type=int, default=100)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--vocab", type=int, default=500)
    p.add_argument("--n-test", type=int, default=10_000)
    p.add_argument("--chunk", type=int, default=20_000)
    p.add_argument("--centers", type=int, default=600)
    p.add_argument("--kernel", default="rbf")
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--max-iter", type=int, default=50)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--budget-gib", type=float, default=5.5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "sparse_million"),
                   help="folder of the data (default: sparse_million in the system's temporary folder)")
    p.add_argument("--fit-only", action="store_true", help="reuse DIR/train.npz")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(fit(args)), flush=True)
        return
    os.makedirs(args.data, exist_ok=True)
    path = os.path.join(args.data, "train.npz")
    if not args.fit_only:
        t0 = time.perf_counter()
        y = write_npz(path, args)
        np.save(os.path.join(args.data, "y.npy"), y)
        print(f"wrote {path}: {os.path.getsize(path) / 2**30:.2f} GiB in {time.perf_counter() - t0:.0f} s "
              f"(writer peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB)", flush=True)
    cmd = [sys.executable, __file__, "--child"] + sys.argv[1:]
    load0 = os.getloadavg()[0]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # the fit's log (CG iterations) on stderr
    if out.returncode:
        sys.exit(f"the fit failed (exit {out.returncode})")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["load_average_start_end"] = f"{load0:.1f} / {os.getloadavg()[0]:.1f} (2 cores)"
    for k, v in res.items():
        print(f"{k:>22}: {v}")


if __name__ == "__main__":
    main()
