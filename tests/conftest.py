"""Shared fixtures: read-only data (any in-place write to user data fails the test)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

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
def breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    return readonly(StandardScaler().fit_transform(X), y)


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
