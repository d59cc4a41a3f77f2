"""A library call that holds the GIL, run in a child process so that Ctrl-C stops it.

:func:`~mercer.linalg.interruptible` keeps the calling thread responsive while a LAPACK call runs
in a worker thread, which works because torch's LAPACK releases the GIL. Compiled code that holds
it (SciPy's ``linkage``: its Cython loops never release it) blocks every Python thread, the signal
handler included, until it returns. :func:`call_in_process` runs such a call in a fresh Python
process on an array in shared memory (:class:`SharedArray`, which the caller fills in place: no
copy), polls it every :data:`~mercer.linalg._factor._POLL_S` seconds, and on Ctrl-C (or an exception
of an :func:`~mercer.linalg.observe_blocks` observer) kills it and re-raises at once.

The child imports only NumPy and the target's module (not mercer, nor torch): its start costs
~0.3 s, so a call runs in the process only from :data:`PROCESS_MIN_ELEMENTS` input entries.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import numpy as np

from .._progress import task
from ._blocking import _OBSERVER
from ._factor import _POLL_S

__all__ = ["PROCESS_MIN_ELEMENTS", "SharedArray", "call_in_process"]

#: Input entries from which :func:`call_in_process` starts a process (smaller calls run here): SciPy's
#: average linkage of n = 2,000 samples (2M condensed distances) takes ~0.4 s, about what a Python
#: process importing NumPy and SciPy takes to start (a loaded 2-core machine; linkage grows as n^2).
PROCESS_MIN_ELEMENTS = 2**21

_CHILD = """
import importlib, json, sys
import numpy as np
from multiprocessing import resource_tracker, shared_memory
name, shape, dtype, target, args = json.loads(sys.argv[1])
shm = shared_memory.SharedMemory(name=name)
resource_tracker.unregister(shm._name, "shared_memory")  # the parent owns (and unlinks) it
module, function = target.split(":")
out = getattr(importlib.import_module(module), function)(np.ndarray(shape, dtype, buffer=shm.buf), *args)
np.save(sys.stdout.buffer, np.asarray(out), allow_pickle=False)
"""


class SharedArray:
    """A NumPy array in shared memory (``array``) that :func:`call_in_process` hands to its child
    without a copy, or an ordinary array below :data:`PROCESS_MIN_ELEMENTS` entries. ``close()``
    (or the ``with`` block's end) frees it; the array must not be used after."""

    def __init__(self, shape, dtype=np.float64):
        self.shape, self.dtype = tuple(int(s) for s in np.atleast_1d(shape)), np.dtype(dtype)
        size = int(np.prod(self.shape))
        self.shm = None
        if size >= PROCESS_MIN_ELEMENTS:
            from multiprocessing import shared_memory

            self.shm = shared_memory.SharedMemory(create=True, size=max(size * self.dtype.itemsize, 1))
            self.array = np.ndarray(self.shape, self.dtype, buffer=self.shm.buf)
        else:
            self.array = np.empty(self.shape, self.dtype)

    def close(self) -> None:
        self.array = None
        if self.shm is not None:
            self.shm.close()
            self.shm.unlink()
            self.shm = None

    def __enter__(self) -> SharedArray:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def call_in_process(target: str, shared: SharedArray, *args, desc: str = "process") -> np.ndarray:
    """``module.function(shared.array, *args)`` (``target="module:function"``; JSON arguments; an
    array result), in a child process when ``shared`` is in shared memory, else here.

    While the child runs, this thread polls it: a Ctrl-C (``KeyboardInterrupt``) or an observer's
    exception (:func:`~mercer.linalg.observe_blocks`, called as ``observer(desc, 0, n)``) kills the
    child and propagates within a poll. A child that fails raises ``RuntimeError`` with its error.
    """
    if shared.shm is None:
        import importlib

        module, function = target.split(":")
        return np.asarray(getattr(importlib.import_module(module), function)(shared.array, *args))
    spec = json.dumps([shared.shm.name, list(shared.shape), shared.dtype.str, target, list(args)])
    observer, n = _OBSERVER.get(), int(np.prod(shared.shape))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with task(f"{desc} of {n} entries", unit="", level=logging.DEBUG) as bar:
            while True:
                try:
                    out, err = proc.communicate(timeout=_POLL_S)  # Ctrl-C is raised here
                    break
                except subprocess.TimeoutExpired:
                    if observer is not None:
                        observer(desc, 0, n)
                    bar.update(0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{desc}: the child process failed (exit status {proc.returncode}): "
                           f"{err.decode(errors='replace').strip()[-2000:]}")
    if observer is not None:
        observer(desc, n, n)
    return np.load(io.BytesIO(out), allow_pickle=False)
