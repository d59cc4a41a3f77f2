"""The thread policy, in one place: how OpenMP threads wait, and how many threads a piece of work gets.

mercer computes with torch (OpenMP intra-op threads and its BLAS) and, in a few loops, numba. Two
rules decide how these use the cores; both come from measurements on a 2-core machine, quiet and
with one other busy process (README, "Threads").

1. **Waiting threads sleep** (:func:`apply_openmp_wait_policy`, run by ``import mercer`` before
   anything imports torch). By default GNU OpenMP spins a waiting thread for up to ~0.3 ms before
   it sleeps. When another process wants the cores, those spins take the time slices the working
   threads need, and every parallel region ends late: ``K^T K v`` on 20,000 x 500 took 0.40 s on
   two threads against 0.07 s on one (load 7); with ``OMP_WAIT_POLICY=PASSIVE`` 0.04 s on two.
   On a quiet machine the setting costs nothing measurable at mercer's sizes, because rule 2
   keeps the small regions, whose wake-up latency would show, on one thread.
   A user's own ``OMP_WAIT_POLICY`` is kept; a process that imported torch before mercer keeps
   its OpenMP settings (they are read once, when the runtime loads).

2. **Small work runs on one thread** (:func:`num_threads`, :func:`serial_if_small`): below a
   size where a second thread saves less than a barrier costs (bookkeeping of iterative solvers,
   M x M factorisations up to ``DENSE_SERIAL_MAX_N``, one-sample predictions, SMO iterations whose
   kernel rows are cheap), the work takes one thread; large products keep every core. Each call
   site names its size and limit; the limits and their measurements are documented where they
   are defined.

3. **An optimiser's own arithmetic runs on one BLAS thread** (:func:`serial_blas`). SciPy's L-BFGS-B
   calls the OpenBLAS that scipy loads (numpy loads another) on vectors of a few thousand
   parameters between the objective's torch evaluations. At the default threads each call wakes
   OpenBLAS's worker thread, which busy-waits after it and takes a core from torch's threads:
   the objective's products then wait for their second thread. Measured with
   NystroemKernelRidgeCV on the pol data set (``benchmarks/results/tune/history/blas-threads.md``).
   ``threadpoolctl`` limits the libraries loaded when the block starts; mercer imports
   ``scipy.optimize`` (and with it scipy's OpenBLAS) before any optimiser runs.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["apply_openmp_wait_policy", "num_threads", "serial_blas", "serial_if_small"]


def apply_openmp_wait_policy() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` for this process unless the user set it or an OpenMP runtime
    (torch's) is already loaded; returns whether it was set."""
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


@contextlib.contextmanager
def num_threads(n: int | None, *, blas: bool = False):
    """Run a block with ``n`` torch intra-op threads (``None``: leave as is), restoring the
    setting after; ``blas=True`` also limits the BLAS that numpy/scipy use (threadpoolctl).

    Why: on a CPU shared with other processes, every small multi-threaded op can wait a scheduler
    slice for its second thread (measured here: eigh of 80 x 80 from 0.6 ms to 110 ms, QR of
    5000 x 20 from 0.9 to 20 ms, one-sample SVM prediction from 0.5 to 20+ ms), while at these
    sizes a second thread saves little. Bookkeeping of iterative solvers and small problems run on
    one thread; the large products keep the caller's threads.
    """
    import torch

    old = torch.get_num_threads()
    if n is None or (n == old and not blas):
        yield
        return
    torch.set_num_threads(n)
    try:
        if blas:
            import threadpoolctl

            with threadpoolctl.threadpool_limits(n, user_api="blas"):
                yield
        else:
            yield
    finally:
        torch.set_num_threads(old)


def serial_if_small(device, work: float, limit: float, *, blas: bool = False):
    """:func:`num_threads` (1) for CPU work below ``limit`` (in the caller's unit: samples, kernel
    entries), a no-op otherwise or on accelerators."""
    import torch

    small = device.type == "cpu" and work <= limit and torch.get_num_threads() > 1
    return num_threads(1 if small else None, blas=blas and small)


@contextlib.contextmanager
def serial_blas():
    """Run a block with one thread in the BLAS libraries that numpy and scipy have loaded (rule 3),
    restoring their settings after; torch's threads are left as they are."""
    import threadpoolctl

    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield
