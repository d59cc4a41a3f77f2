"""A user's torch thread count survives mercer's numba loops: numba's OpenMP layer, started by the
first parallel loop (the SMO's banded kernel rows), sets the shared OpenMP runtime's team size to
every core; mercer starts it keeping torch's setting (mercer._jit.numba_threads)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize("solver", ["smo", pytest.param("batched", marks=pytest.mark.slow)])
def test_a_fit_keeps_the_users_torch_threads(solver):
    code = textwrap.dedent(f"""
        import numpy as np, torch
        torch.set_num_threads(1)
        from mercer import KernelSVC
        from mercer.models.svm import _dual
        _dual.SOLVER = {solver!r}
        X = np.random.default_rng(0).normal(size=(300, 5))
        KernelSVC().fit(X, (X[:, 0] > 0).astype(int))
        print(torch.get_num_threads())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "1"


def test_an_optimiser_runs_its_evaluations_on_one_blas_thread():
    """SciPy's L-BFGS-B bookkeeping calls numpy's and scipy's OpenBLAS between the torch evaluations;
    their worker threads would busy-wait beside torch's (mercer._threads, rule 3): inside
    ``optimize`` every BLAS library has one thread, and the caller's setting is back after."""
    import numpy as np
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    from mercer.models._hyperopt import optimize

    def blas_threads():
        return sorted({lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"})

    seen = []

    def loss(t):
        seen.append(blas_threads())
        return ((t - 1.0) ** 2).sum()

    with threadpool_limits(2, user_api="blas"):
        assert blas_threads() == [2]
        best, runs = optimize(loss, np.zeros(3), np.array([[-5.0, 5.0]] * 3), method="lbfgs", max_iter=20,
                              n_restarts=1, rng=np.random.RandomState(0), dtype=torch.float64)
        assert blas_threads() == [2]
    assert seen and all(s == [1] for s in seen)
    np.testing.assert_allclose(best.theta, 1.0, atol=1e-6)
