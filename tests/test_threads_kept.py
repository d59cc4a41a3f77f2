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
