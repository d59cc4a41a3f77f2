"""Data and grid helpers of ``shapes.py``: one data set per feature count d, prepared once as
``.npy`` files that every child process of a cell loads (mercer and its references see the same
arrays).

Sources (real wherever a set has enough rows; standardised on the training split, PCA fitted on it):

====  ===================================================================================
d     source
====  ===================================================================================
784   Fashion-MNIST pixels in [0, 1] (one scale already: standardising would blow up the
      near-constant border pixels)
128   Fashion-MNIST, PCA to 128 components
32    Fashion-MNIST, PCA to 32 components
16    UCI keggdirected (20 columns, 43,945 training rows), PCA to 16 components
8     UCI kin40k (8 columns, 36,000 training rows)
4, 2  UCI protein (9 columns, 41,157 training rows), PCA to 4 / 2 components
else  synthetic
====  ===================================================================================

When n exceeds the real set's training rows (n = 100k everywhere), or the set is absent, the cell uses
``_common.synthetic`` (standard normal inputs, a smooth function of 3 projections plus noise),
labelled "synthetic". Targets: regression ``y`` standardised on the training rows (Fashion-MNIST:
the binary target below as +-1, standardised); binary classes ``y > median`` of the training
targets (Fashion-MNIST: label < 5). Test set: up to 2,000 held-out rows (synthetic: a second draw).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np

import tempfile

#: The UCI sets' folder ($MERCER_UCI_DIR; None: the d = 2, 4, 8, 16 cells are synthetic).
UCI_ROOT = os.environ.get("MERCER_UCI_DIR") or None
CACHE = Path(tempfile.gettempdir()) / "mercer_shapes"
#: bump when the preparation changes (cached folders of another version are not reused)
VERSION = 1
N_TEST = 2000
K_CLUSTERS = 50

#: d -> (source, PCA to d components?)
SOURCES = {784: ("fashion-mnist", False), 128: ("fashion-mnist", True), 32: ("fashion-mnist", True),
           16: ("keggdirected", True), 8: ("kin40k", False), 4: ("protein", True), 2: ("protein", True)}

log = logging.getLogger("shapes")


def _standardise(Xtr, Xte):
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    return (Xtr - mu) / sd, (Xte - mu) / sd


def _pca(Xtr, Xte, d):
    """Project on the top-d principal axes of the (centred) training rows."""
    mu = Xtr.mean(0)
    C = np.cov(Xtr - mu, rowvar=False)
    w, V = np.linalg.eigh(C)
    V = V[:, np.argsort(w)[::-1][:d]]
    V *= np.sign(V[np.abs(V).argmax(0), range(d)])  # a fixed sign per axis
    return (Xtr - mu) @ V, (Xte - mu) @ V


@functools.lru_cache(maxsize=1)
def _real_pool(source: str, d: int, pca: bool, uci_root: str, fmnist_root: str | None):
    """(Xtr, ytr, ctr, Xte, yte, cte) of a real source at d features, or a string saying why not."""
    if source == "fashion-mnist":
        from mercer.datasets import load_fashion_mnist

        try:
            Xtr, lab, Xte, labte = load_fashion_mnist(*([fmnist_root] if fmnist_root else []))
        except (FileNotFoundError, OSError, ValueError) as exc:
            return f"Fashion-MNIST absent ({str(exc).split(':')[0]}; apt-get install dataset-fashion-mnist)"
        Xtr, Xte = Xtr.reshape(len(Xtr), -1).astype(np.float64), Xte.reshape(len(Xte), -1).astype(np.float64)
        if pca:
            Xtr, Xte = _standardise(*_pca(Xtr, Xte, d))
        ctr, cte = (lab < 5).astype(np.int64), (labte < 5).astype(np.int64)
        ytr, yte = 2.0 * ctr - 1.0, 2.0 * cte - 1.0
    else:
        from mercer.datasets import load_uci

        if not uci_root or uci_root == "None":
            return f"UCI {source} absent (set MERCER_UCI_DIR or --uci-dir)"
        try:
            Xtr, ytr, Xte, yte = load_uci(source, uci_root, split=0)
        except (FileNotFoundError, OSError) as exc:
            return f"UCI {source} absent ({str(exc).split(';')[0]})"
        Xtr, Xte = _standardise(Xtr, Xte)
        if pca:
            Xtr, Xte = _standardise(*_pca(Xtr, Xte, d))
        med = np.median(ytr)
        ctr, cte = (ytr > med).astype(np.int64), (yte > med).astype(np.int64)
    if Xtr.shape[1] != d:
        return f"{source} has {Xtr.shape[1]} features, not {d}"
    ym, ys = ytr.mean(), ytr.std()
    return Xtr, (ytr - ym) / ys, ctr, Xte, (yte - ym) / ys, cte


def release_sources() -> None:
    """Drop the real set held in memory by :func:`prepare`."""
    _real_pool.cache_clear()


def _synthetic(n: int, d: int):
    from _common import synthetic

    Xtr, ytr = synthetic(n, d, seed=0)
    Xte, yte = synthetic(N_TEST, d, seed=1)
    Xtr, Xte = Xtr.astype(np.float64), Xte.astype(np.float64)
    med, ym, ys = np.median(ytr), ytr.mean(), ytr.std()
    return Xtr, (ytr - ym) / ys, (ytr > med).astype(np.int64), Xte, (yte - ym) / ys, (yte > med).astype(np.int64)


def prepare(d: int, n: int, *, uci_root=UCI_ROOT, fmnist_root=None, cache=CACHE, n_clusters=K_CLUSTERS) -> dict:
    """Write the (d, n) data set as ``.npy`` files (once; reused while the folder exists).

    Returns its description: ``folder``, ``data`` (label of the source), ``n``, ``d``, ``n_test``,
    ``note`` (why a real set was not used, if so). Files: Xtr, ytr (regression), ctr (binary classes),
    Xte, yte, cte, init (``n_clusters`` k-means++ centres drawn by scikit-learn from Xtr, seed 0).
    """
    source, pca = SOURCES.get(d, ("synthetic", False))
    pool, note = None, ""
    if source != "synthetic":
        pool = _real_pool(source, d, pca, str(uci_root), None if fmnist_root is None else str(fmnist_root))
        if isinstance(pool, str):
            pool, note = None, pool
        elif len(pool[0]) < n:
            note = f"{source} has {len(pool[0])} training rows < n"
            pool = None
    label = "synthetic" if pool is None else source + (f" PCA-{d}" if pca else "")
    tag = f"v{VERSION}_d{d}_n{n}_" + label.replace(" ", "_")
    folder = Path(cache) / tag
    meta_path = folder / "meta.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    if pool is None:
        Xtr, ytr, ctr, Xte, yte, cte = _synthetic(n, d)
    else:
        Xtr, ytr, ctr, Xte, yte, cte = pool
        rng = np.random.default_rng(0)
        tr = np.sort(rng.permutation(len(Xtr))[:n])
        te = np.sort(rng.permutation(len(Xte))[:N_TEST])
        Xtr, ytr, ctr, Xte, yte, cte = Xtr[tr], ytr[tr], ctr[tr], Xte[te], yte[te], cte[te]
    from sklearn.cluster import kmeans_plusplus

    init, _ = kmeans_plusplus(Xtr, min(n_clusters, n), random_state=0)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = dict(Xtr=Xtr, ytr=ytr, ctr=ctr, Xte=Xte, yte=yte, cte=cte, init=init)
    for name, arr in arrays.items():
        np.save(tmp / f"{name}.npy", np.ascontiguousarray(arr))
    meta = {"folder": str(folder), "data": label, "n": int(n), "d": int(d), "n_test": int(len(Xte)), "note": note,
            "class_balance": float(ctr.mean())}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    log.info("prepared %s", meta)
    return meta


# -- memory guard -----------------------------------------------------------------------------------
def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where unknown: no guard)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def estimated_bytes(est: str, impl: str, n: int, d: int, M: int) -> float:
    """A rough upper estimate of a fit's peak memory (the data, plus what the method holds)."""
    data = 3 * n * d * 8
    if est in ("krr", "kpca"):  # the n x n float64 Gram matrix, and copies
        return data + (3 if impl == "sklearn" else 2) * n * n * 8
    if est == "nkr":
        if impl == "sklearn":  # K_nM and the features Z (n x M float64), Ridge's Z^T Z
            return data + 2.5 * n * M * 8 + 2 * M * M * 8
        return data + 6 * M * M * 8 + 64 * 2**20 * 8
    return data + 2 * 2**30  # svc (kernel cache), kmeans
