"""Functions of a module that numba compiles together, on first use (``import mercer`` never
imports numba: its import costs ~0.15 s, and most calls never need it).

Used by the SMO loop (:mod:`mercer.models.svm._smo`) and k-means' fused passes
(:mod:`mercer.kmeans._fused`)::

    _jit = LazyJit(globals())

    @_jit.mark(fastmath={"contract"})
    def _helper(x): ...

    @_jit.mark
    def _run(x):
        return _helper(x)

    _jit("_run")(x)   # imports numba, turns every marked function into a dispatcher, runs it
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["LazyJit", "numba_threads"]


class LazyJit:
    """The marked functions of one module (``namespace``: its ``globals()``), compiled on first use.

    The first :meth:`__call__` imports numba and replaces every marked function in the module's
    namespace by ``njit(cache=True, nogil=True, **options)`` of it, so that compiled functions find
    each other as dispatchers when numba compiles them; the machine code comes from numba's on-disk
    cache when it is there. Thread-safe.
    """

    def __init__(self, namespace: dict):
        self._namespace = namespace
        self._options: dict[str, dict] = {}
        self._lock = threading.Lock()

    def mark(self, fn: Callable | None = None, **options):
        """Marks ``fn`` for compilation, with numba ``options`` (e.g. ``fastmath``) when used as
        ``@mark(...)``; returns it unchanged."""
        if fn is None:
            return lambda f: self.mark(f, **options)
        self._options[fn.__name__] = options
        return fn

    def __call__(self, name: str) -> Callable:
        """The dispatcher of the marked function ``name`` (compiling the module's functions first)."""
        ns = self._namespace
        if not hasattr(ns[name], "py_func"):
            with self._lock:
                if not hasattr(ns[name], "py_func"):
                    from numba import njit

                    if any(options.get("parallel") for options in self._options.values()):
                        numba_threads()  # the pool started here, torch's thread count kept
                    for fn, options in self._options.items():
                        if not hasattr(ns[fn], "py_func"):
                            ns[fn] = njit(cache=True, nogil=True, **options)(ns[fn])
        return ns[name]


def numba_threads() -> int:
    """numba's thread count, its thread pool started (once per process) with torch's thread count
    kept: numba's OpenMP layer sets the shared OpenMP runtime's team size to every core when it
    starts, which left a user's ``torch.set_num_threads(1)`` at 2 after the first fit that asked."""
    import numba
    import torch

    threads = torch.get_num_threads()
    try:
        return int(numba.get_num_threads())
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
