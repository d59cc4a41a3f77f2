"""One objective + gradient evaluation of the SGPR bound through ``kernel_statistics`` of another
commit and of the current one, in one process (issue 25: what one evaluation costs at n = 15,000).

The ``_hyperstats`` module of ``--base`` (``git show <base>:src/mercer/linalg/_hyperstats.py``) is
loaded from a temporary file as ``mercer.linalg._hyperstats_base`` (its relative imports resolve
in the package; nothing is written into the source tree), and the bound of
``1.0 * RBF(gamma=[1 / (2 d)] * d)`` (ARD) with its gradient is evaluated alternately on both,
warm, one torch and BLAS thread, on ``N(0, 1)`` data: the CPU time (this process's, steadier than
wall time on a shared machine) of the forward pass (the statistics) and of the backward pass (the
bound and its gradient), medians over ``--repeat`` repetitions, with the inducing points fixed and
learned; the values and gradients of the two must agree (relative differences printed).

Run: ``.venv/bin/python benchmarks/experiments/hyperstats_before_after.py --base b29dddd --n 15000 --d 26 --m 200``
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import subprocess
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the commit to compare with")
    p.add_argument("--n", type=int, default=15000)
    p.add_argument("--d", type=int, default=26)
    p.add_argument("--m", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    import mercer.linalg._hyperstats as current
    from mercer.kernels import RBF, LearnableKernel
    from mercer.models.gp._sparse import sgpr_bound_from_statistics

    source = subprocess.run(["git", "show", f"{args.base}:src/mercer/linalg/_hyperstats.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    try:
        spec = importlib.util.spec_from_file_location("mercer.linalg._hyperstats_base", f.name)
        base = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(base)
    finally:
        os.unlink(f.name)
    n, d, m = args.n, args.d, args.m
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(n, 1, generator=g, dtype=torch.float64)
    Z0 = X[:m].clone()
    lk = LearnableKernel(1.0 * RBF(gamma=[1.0 / (2 * d)] * d), d)

    def evaluate(mod, learn_z):
        theta = torch.tensor(np.append(lk.theta0, math.log(0.1)), requires_grad=True)
        Z = Z0.clone().requires_grad_(learn_z)
        c0 = time.process_time()
        st = mod.kernel_statistics(lk.at, theta[:-1], Z, X, Y)
        c1 = time.process_time()
        loss = -sgpr_bound_from_statistics(st, lk.at(theta[:-1])(Z), theta[-1].exp(), 1e-6)
        grads = torch.autograd.grad(loss, [theta, Z] if learn_z else [theta])
        c2 = time.process_time()
        return c1 - c0, c2 - c1, float(loss.detach()), grads

    with threadpool_limits(1):
        for learn_z in (False, True):
            times = {"base": [], "current": []}
            for rep in range(args.repeat + 1):
                order = (("base", base), ("current", current)) if rep % 2 else (("current", current), ("base", base))
                out = {name: evaluate(mod, learn_z) for name, mod in order}
                if rep:  # the first is a warm-up
                    for name in times:
                        times[name].append(out[name][:2])
            fb, bb = np.median(times["base"], axis=0)
            fc, bc = np.median(times["current"], axis=0)
            lb, lc = out["base"][2], out["current"][2]
            diffs = " ".join(f"{float((a - b).norm() / b.norm()):.1e}" for a, b in zip(out["current"][3], out["base"][3]))
            print(f"n={n} d={d} M={m} inducing points {'learned' if learn_z else 'fixed'}: CPU s base forward {fb:.3f} "
                  f"backward {bb:.3f} | current forward {fc:.3f} backward {bc:.3f} | base / current {(fb + bb) / (fc + bc):.2f}x"
                  f" | value rel. diff {abs(lb - lc) / abs(lb):.1e}, gradients {diffs}", flush=True)


if __name__ == "__main__":
    main()
