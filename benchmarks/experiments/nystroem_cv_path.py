"""How the test RMSE of NystroemKernelRidgeCV moves along its optimiser's path (issue 25: would
fewer objective evaluations do?).

One fit as ``benchmarks/suites/tune.py`` makes it (ARD RBF from ``gamma = 1 / (2 d)``, ``alpha =
1e-3 n``, M uniform centres learned, GCV, L-BFGS), on split 0 of a UCI set (``--uci-dir`` or
``$MERCER_UCI_DIR``), inputs and targets standardised; every evaluation's kernel hyperparameters,
centres and ``alpha`` are recorded (by wrapping the module's ``kernel_statistics`` and objective),
then a :class:`~mercer.models.ridge.NystroemKernelRidge` with the values of chosen evaluations is
fitted on all training rows and its test RMSE printed with the objective there and the best so far.
One torch and BLAS thread.

Run: ``.venv/bin/python benchmarks/experiments/nystroem_cv_path.py --data pol --max-iter 50``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suites"))  # gp.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # _common.py


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="pol")
    p.add_argument("--centers", type=int, default=200)
    p.add_argument("--max-iter", type=int, default=50)
    p.add_argument("--uci-dir", default=None, help="folder of the UCI sets (default $MERCER_UCI_DIR)")
    p.add_argument("--at", type=int, nargs="+", default=[0, 2, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60])
    args = p.parse_args(argv)
    if args.uci_dir:
        import os

        os.environ["MERCER_UCI_DIR"] = args.uci_dir
    from threadpoolctl import threadpool_limits

    import mercer.models.ridge._nystroem_cv as cv
    from gp import load, rmse
    from mercer.kernels import RBF, LearnableKernel
    from mercer.models.ridge import NystroemKernelRidge, NystroemKernelRidgeCV

    torch.set_num_threads(1)
    Xtr, ytr, Xte, yte = load(args.data, 5000, np.random.default_rng(0))
    n, d = Xtr.shape
    start = RBF(gamma=[1.0 / (2 * d)] * d)
    seen, statistics, gcv = [], cv.kernel_statistics, cv._OBJECTIVES["gcv"]

    def recording_statistics(kernel_at, theta, Z, *a, **k):
        seen.append({"theta": theta.detach().clone(), "Z": Z.detach().clone()})
        return statistics(kernel_at, theta, Z, *a, **k)

    def recording_gcv(stats, K_mm, alpha, **k):
        value = gcv(stats, K_mm, alpha, **k)
        seen[-1].update(alpha=float(alpha), f=float(value))
        return value

    cv.kernel_statistics, cv._OBJECTIVES["gcv"] = recording_statistics, recording_gcv
    try:
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c0 = time.process_time()
            model = NystroemKernelRidgeCV(kernel=start, alpha=1e-3 * n, n_centers=args.centers, learn_centers=True,
                                          max_iter=args.max_iter, random_state=0).fit(Xtr, ytr)
            cpu = time.process_time() - c0
    finally:
        cv.kernel_statistics, cv._OBJECTIVES["gcv"] = statistics, gcv
    print(f"{args.data}: n = {n}, d = {d}, M = {args.centers}: {model.n_evals_} evaluations, CPU {cpu:.1f} s, "
          f"test RMSE {rmse(yte, model.predict(Xte)):.4f}")
    lk = LearnableKernel(start, d, model.hyperparameter_bounds)
    best = math.inf
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, r in enumerate(seen):
            best = min(best, r.get("f", math.inf))
            if i in args.at or i == len(seen) - 1:
                fit = NystroemKernelRidge(alpha=r["alpha"], kernel=lk.build(r["theta"].numpy()), centers=r["Z"].numpy(),
                                          random_state=0).fit(Xtr, ytr)
                print(f"evaluation {i:3d}: GCV {r['f']:.5g} (best so far {best:.5g}), alpha / n {r['alpha'] / n:.3g}, "
                      f"test RMSE {rmse(yte, fit.predict(Xte)):.4f}", flush=True)


if __name__ == "__main__":
    main()
