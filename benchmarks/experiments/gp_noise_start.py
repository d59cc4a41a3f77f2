"""The GP's default noise start on the seven UCI sets: the previous start (1e-2) against "auto" (a
tenth of the normalised targets' variance), default kernel ("rbf", gamma = 1/d), normalize_y=True,
inputs standardised, targets as they are, 1,000 training rows and up to 3,000 test rows of split 0.

    MERCER_UCI_DIR=DIR python benchmarks/experiments/gp_noise_start.py

The experiment behind docs/decisions/0002-gp-default-noise-start.md. Prints test RMSE in units of the training targets' standard deviation, and the LML.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import uci_dir  # noqa: E402

SETS = ["pol", "elevators", "bike", "kin40k", "protein", "keggdirected", "keggundirected"]


def main(argv=None) -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    from mercer import GaussianProcessRegressor
    from mercer.datasets import load_uci

    UCI = uci_dir()
    if UCI is None:
        print("skipped: UCI data not found (set MERCER_UCI_DIR)")
        return
    warnings.simplefilter("ignore")
    for name in SETS:
        Xtr, ytr, Xte, yte = load_uci(name, UCI, split=0)
        rng = np.random.default_rng(0)
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd[sd == 0] = 1
        Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
        sub = rng.choice(len(ytr), 1000, replace=False)
        te = rng.choice(len(yte), min(3000, len(yte)), replace=False)
        row = [f"{name:>15}"]
        for noise in (1e-2, "auto"):
            gp = GaussianProcessRegressor(normalize_y=True, noise=noise, random_state=0).fit(Xtr[sub], ytr[sub])
            rmse = np.sqrt(np.mean((gp.predict(Xte[te]) - yte[te]) ** 2)) / ytr.std()
            row.append(f"noise={noise}: RMSE/sd {rmse:.4f}, LML {float(gp.log_marginal_likelihood_value_):.1f}")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
