"""The backward pass of ``kernel_statistics`` on sparse rows: the closed form for ``RBF`` with one
gamma (``_SparseRBFGradient``: the tile and ``dL/dgamma`` from the block's squared distances, one
sparse product per block) against autograd through the sparse kernel's own code on the same blocks,
in one process (issue 29).

Random CSR rows (``--n`` x ``--d``, ``--nnz`` stored entries a row), ``M`` centres among them, one
torch thread; the CPU time of ``loss.backward()`` for ``loss = sum(sin(gram)) + sum(rhs)``, both
ways alternately, ``--repeat`` times (the first of each includes compilation); the two gradients
must agree (their relative difference is printed).

Run: ``.venv/bin/python benchmarks/experiments/sparse_rbf_backward.py --n 20000 --d 50000 --nnz 60 --m 300``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp
import torch

import mercer.linalg._hyperstats as hs
from mercer._sparse import as_sparse_rows
from mercer.kernels import RBF, LearnableKernel
from mercer.linalg import kernel_statistics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--d", type=int, default=50000)
    p.add_argument("--nnz", type=int, default=60)
    p.add_argument("--m", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    X = sp.random(a.n, a.d, density=a.nnz / a.d, format="csr", random_state=0, dtype=np.float64)
    Xs = as_sparse_rows(X, dtype=torch.float64)
    Z = Xs[:: max(1, a.n // a.m)][: a.m].clone()
    lk = LearnableKernel(RBF(gamma=0.5), a.d)
    Y = torch.randn(a.n, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def backward():
        theta = torch.tensor(lk.theta0, requires_grad=True)
        st = kernel_statistics(lk.at, theta, Z, Xs, Y)
        loss = st.gram.sin().sum() + st.rhs.sum()
        t0 = time.process_time()
        loss.backward()
        return time.process_time() - t0, theta.grad.clone()

    closed_form = hs._SparseRBFGradient.handles
    times: dict[str, list[float]] = {"closed form": [], "autograd": []}
    grads = {}
    try:
        for _ in range(a.repeat):
            for name in times:
                hs._SparseRBFGradient.handles = closed_form if name == "closed form" else staticmethod(lambda k: False)
                t, grads[name] = backward()
                times[name].append(t)
    finally:
        hs._SparseRBFGradient.handles = closed_form
    for name, ts in times.items():
        print(f"{name:12s} backward CPU s: " + " ".join(f"{t:.3f}" for t in ts))
    best = {name: min(ts[1:] or ts) for name, ts in times.items()}
    rel = float(((grads["closed form"] - grads["autograd"]).abs() / grads["autograd"].abs()).max())
    print(f"closed form / autograd (best after the first): {best['closed form'] / best['autograd']:.2f}; "
          f"gradients' relative difference {rel:.1e}")


if __name__ == "__main__":
    main()
