"""One measurement of ``cluster.py`` in a fresh interpreter: k-means or k-NN, cold or warm.

    python benchmarks/suites/_cluster_child.py SPEC.json

``SPEC.json``: ``job`` ("kmeans" or "knn"), ``mode`` ("cold": one library, one fit; "warm": the
libraries of ``libs`` in turn, an untimed fit each, then ``reps`` rounds), ``libs`` (mercer,
sklearn, onedal), ``data`` (an ``.npz``: ``X`` and ``init`` for k-means, ``Xtr``, ``ytr``, ``Xte``
for k-NN), ``k`` (clusters or neighbours), ``weights`` (k-NN), ``max_iter``, ``threads`` (None:
each library's default). Prints one JSON line: per library the times, and the inertia and
iterations (k-means) or the test predictions (k-NN).

This file imports only the standard library and numpy at the top, so that it runs under any
interpreter (oneDAL lives in its own virtual environment); each library is imported inside the
timed region of a cold run, as a user meets it: ``cold_s`` runs from the first line of this file to
the end of the fit (k-NN: fit and predict), imports and JIT compilation included, minus the time
spent loading the data (``load_s``). Warm times are the best of ``reps`` calls, the libraries
interleaved round by round, so that a busy spell of a shared machine hits each of them.
"""

import time

T0 = time.perf_counter()  # the first statement: cold time counts from here (imports included)

import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402


def _limit_threads(threads) -> None:
    if not threads:
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=int(threads))
    try:
        import torch

        torch.set_num_threads(int(threads))
    except ImportError:
        pass


def _kmeans_class(lib, threads):
    if lib == "mercer":
        from mercer.models.cluster import KMeans
    elif lib == "sklearn":
        from sklearn.cluster import KMeans
    else:
        from sklearnex.cluster import KMeans

        if threads:
            import daal4py

            daal4py.daalinit(int(threads))
    return KMeans


def _knn_class(lib, threads):
    if lib == "mercer":
        from mercer.models.neighbors import KernelKNeighborsClassifier

        return lambda k, weights: KernelKNeighborsClassifier(k, weights=weights, kernel="linear")
    if lib == "sklearn":
        from sklearn.neighbors import KNeighborsClassifier
    else:
        from sklearnex.neighbors import KNeighborsClassifier

        if threads:
            import daal4py

            daal4py.daalinit(int(threads))
    return lambda k, weights: KNeighborsClassifier(k, weights=weights)


def _kmeans_job(lib, spec, D):
    """``run()`` -> (fit seconds, summary): one fit from the given initial centres, n_init=1."""
    KMeans = _kmeans_class(lib, spec.get("threads"))
    k, max_iter = int(spec["k"]), int(spec.get("max_iter", 300))

    def run():
        t = time.perf_counter()
        m = KMeans(k, init=D["init"], n_init=1, max_iter=max_iter).fit(D["X"])
        return time.perf_counter() - t, {"inertia": float(m.inertia_), "n_iter": int(m.n_iter_)}

    return run


def _knn_job(lib, spec, D):
    """``run()`` -> (seconds of fit + predict, summary): the test predictions."""
    make = _knn_class(lib, spec.get("threads"))

    def run():
        t = time.perf_counter()
        pred = np.asarray(make(int(spec["k"]), spec.get("weights", "uniform")).fit(D["Xtr"], D["ytr"]).predict(D["Xte"]))
        return time.perf_counter() - t, {"pred": pred.astype(np.int64).tolist()}

    return run


def main(path: str) -> None:
    with open(path) as f:
        spec = json.load(f)
    t_load = time.perf_counter()
    with np.load(spec["data"]) as z:
        D = {name: z[name] for name in z.files}
    load_s = time.perf_counter() - t_load
    _limit_threads(spec.get("threads"))
    job = _kmeans_job if spec["job"] == "kmeans" else _knn_job
    out = {}
    if spec["mode"] == "cold":
        (lib,) = spec["libs"]
        _, summary = job(lib, spec, D)()
        out[lib] = {"cold_s": time.perf_counter() - T0 - load_s, "load_s": load_s, **summary}
    else:
        runs = {lib: job(lib, spec, D) for lib in spec["libs"]}
        for lib, run in runs.items():  # untimed: the first call's one-off costs (JIT, thread pools)
            run()
        times = {lib: [] for lib in runs}
        for _ in range(int(spec.get("reps", 3))):
            for lib, run in runs.items():
                t, summary = run()
                times[lib].append(t)
                out[lib] = summary
        for lib in runs:
            out[lib].update(warm_s=min(times[lib]), warm_all_s=times[lib])
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
