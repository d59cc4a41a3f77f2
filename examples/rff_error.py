"""
Random Fourier features and Nystroem: Gram error against m
==========================================================

Error of the Gram matrix approximations against the number of features m: random Fourier
features fall as 1/sqrt(m) (Rahimi and Recht), Nystroem much faster on data with a decaying spectrum."""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save

from mercer import plotting

X = np.random.default_rng(0).normal(size=(1000, 5))
fig, ax = plt.subplots(figsize=(5, 3.8), layout="constrained")
plotting.approximation_error(X, "rbf", (10, 20, 50, 100, 200, 500, 1000), gamma=0.1, ax=ax)
save(fig, output_path("rff_error.png"))
