"""Shared fixtures: read-only data (any in-place write to user data fails the test)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

from mercer import sources  # noqa: E402  (after the thread count, as the suite always imported mercer)

#: ``MERCER_TEST_DEVICE=cuda pytest`` runs the whole suite with mercer's default device set to the
#: GPU (estimators whose ``device`` is None compute there; numpy in still gives numpy out), which
#: checks that every code path is device-agnostic. Unset: the configured default (CPU).
if os.environ.get("MERCER_TEST_DEVICE"):
    import mercer

    mercer.set_config(device=os.environ["MERCER_TEST_DEVICE"])

#: Real data outside the package; tests that need it skip cleanly when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def readonly(*arrays):
    """Return the arrays with their write flag cleared."""
    out = []
    for a in arrays:
        a = np.array(a, copy=True)
        a.flags.writeable = False
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


@pytest.fixture(scope="session")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return readonly(X / 16.0, y)


@pytest.fixture(scope="session")
def diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return readonly(X, y)


@pytest.fixture(scope="session")
def diabetes_scaled(diabetes):
    """The diabetes features times 5 (the default kernel scales suit them) and the target standardised."""
    X, y = diabetes
    return readonly(X * 5.0, (y - y.mean()) / y.std())


@pytest.fixture(scope="session")
def breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    return readonly(StandardScaler().fit_transform(X), y)


@pytest.fixture
def one_thread():
    """One torch and one BLAS/OpenMP thread for a test (small dense problems: two threads spin on a
    loaded 2-core machine). A module takes it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(old)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def ctrl_c_cli_fit(tmp_path, data: np.ndarray, *args: str, delay: float = 1.0):
    """``mercer fit`` on ``data`` (its target in the last column) with ``args``, writing
    ``tmp_path / "m.mercer"``, and a SIGINT ``delay`` seconds after it prints ``data:`` (just before its
    fit starts). Returns ``(exit status, stderr, seconds from the signal to the exit, output path)``."""
    import signal
    import subprocess
    import sys
    import time

    np.save(tmp_path / "data.npy", data)
    out = tmp_path / "m.mercer"
    proc = subprocess.Popen([sys.executable, "-m", "mercer", "fit", "--data", str(tmp_path / "data.npy"), "--target",
                             "-1", *args, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            # a shell's background job inherits SIGINT ignored, and Python then keeps it so
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()  # "data: ..." is printed just before the fit starts
        while line and not line.startswith("data:"):
            line = proc.stdout.readline()
        time.sleep(delay)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        latency = time.perf_counter() - sent
        _, err = proc.communicate()
    finally:
        proc.kill()
    return proc.returncode, err, latency, out


# -- the mercer command, run in-process --------------------------------------------------------------
def cli_run(argv, capsys, *, tune: bool = False):
    """``mercer.cli.main(argv)``; a ``fit`` that would tune gets ``--no-tune`` unless ``tune`` (for tests
    about reading, checking and saving; ``tests/test_cli_autotune.py`` is about tuning). Returns
    ``(exit status, stdout, stderr)``."""
    from mercer.cli import main

    argv = [str(a) for a in argv]
    if "fit" in argv[:2] and not tune and "--help" not in argv:
        argv.append("--no-tune")
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def cli_ok(argv, capsys):
    """``mercer.cli.main(argv)`` as given (tuning included), which must exit 0: ``(stdout, stderr)``."""
    from mercer.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def cli_number(pattern: str, text: str) -> float:
    """The number captured by ``pattern``'s first group in the command's output ``text``."""
    import re

    m = re.search(pattern, text)
    assert m, text
    return float(m.group(1))


# -- streamed data: files, a Dask cluster and the comparison with the fit in memory --------------------
def text_like_rows(n: int, d: int, *, density: float, spacing: int, seed: int = 0):
    """``(X, labels)``: ``n`` text-like rows as a canonical CSR matrix, ``density`` of the entries stored
    (uniform in [0.1, 1]) and 1.5 added in column ``spacing * label`` of each row, its label one of
    three: classes told apart by a few columns."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    X = sp.random(n, d, density=density, format="csr", random_state=rng, data_rvs=lambda k: rng.uniform(0.1, 1, k))
    X = sp.csr_matrix(X + sp.csr_matrix((np.full(n, 1.5), (np.arange(n), labels * spacing)), shape=(n, d)))
    X.sort_indices()
    return X, labels


class CountingSource(sources.RowSource):
    """A sparse source wrapping ``inner`` that records the rows of every read (a block, or the rows
    picked by ``take``): tests check with it that a fit streams."""

    sparse = True

    def __init__(self, inner):
        self.inner = inner
        self.n_samples, self.n_features, self.dtype = inner.n_samples, inner.n_features, inner.dtype
        self.reads: list[int] = []

    @property
    def nnz(self):
        return self.inner.nnz

    def _read(self, start, stop):
        self.reads.append(stop - start)
        return self.inner.read(start, stop)

    def take(self, index):
        self.reads.append(len(np.asarray(index)))
        return self.inner.take(index)


def write_parquet_parts(folder: Path, write, split: int) -> None:
    """``folder / "pq"``: two Parquet files with uneven row groups, rows ``[:split]`` in ``part-0``
    (groups of 70 rows) and ``[split:]`` in ``part-1`` (groups of 111); ``write(path, rows,
    row_group_size)`` writes the ``rows`` slice of the data to one file."""
    (folder / "pq").mkdir()
    write(folder / "pq" / "part-0.parquet", slice(0, split), 70)
    write(folder / "pq" / "part-1.parquet", slice(split, None), 111)


def applied(method, X) -> np.ndarray:
    """``method(X)`` as a numpy array (a Dask result computed)."""
    out = method(X)
    return np.asarray(out.compute() if hasattr(out, "compute") else out)


def assert_fit_matches(est, X_fit, X_ref, *, y=None, method: str = "predict", apply_to=(), atol: float,
                       **fit_kw):
    """Fit clones of ``est`` on ``X_fit`` (streamed) and on ``X_ref`` (the same data in memory): the same
    number of features, and ``method`` of the streamed fit applied to ``X_fit`` and to each of ``apply_to``
    equals that of the fit in memory applied to ``X_ref`` (``atol``, ``rtol=0``). Returns ``(ref, got)``."""
    from sklearn.base import clone

    ref = clone(est).fit(X_ref, y, **fit_kw)
    got = clone(est).fit(X_fit, y, **fit_kw)
    assert got.n_features_in_ == ref.n_features_in_
    expected = np.asarray(getattr(ref, method)(X_ref))
    for X in (X_fit, *apply_to):
        np.testing.assert_allclose(applied(getattr(got, method), X), expected, rtol=0, atol=atol)
    return ref, got


@pytest.fixture(scope="module")
def dask_client():
    """A LocalCluster of 2 single-threaded worker processes with mercer imported, for one module
    (start-up ~2-4 s); skips where dask or distributed is not installed."""
    pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None)
    cl = distributed.Client(cluster, set_as_default=False)
    cl.run(__import__, "mercer.distributed")  # the workers import torch and mercer once, here
    yield cl
    cl.close()
    cluster.close()


@pytest.fixture
def dask_in_force(dask_client):
    """The module's client (:func:`dask_client`) as the default one, for one test."""
    with dask_client.as_current():
        yield dask_client
