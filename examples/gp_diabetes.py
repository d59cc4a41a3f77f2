"""
A Gaussian process on one feature of the diabetes data
======================================================

:class:`mercer.GaussianProcessRegressor` learns the kernel's length scale, its output scale and
the noise by maximising the log marginal likelihood (L-BFGS through autograd). Here disease
progression against body-mass index alone: the posterior mean with two standard deviations, which
widen where the data thin out.
"""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save
from sklearn.datasets import load_diabetes

import mercer
from mercer.kernels import RBF

data = load_diabetes(scaled=False)
x = data.data[:, [2]]          # body-mass index
y = data.target
gp = mercer.GaussianProcessRegressor(kernel=RBF(sigma=5.0), normalize_y=True).fit(x, y)
print("learned kernel:", gp.kernel_)

grid = np.linspace(x.min() - 3, x.max() + 3, 200)[:, None]
mean, std = gp.predict(grid, return_std=True)
fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
ax.scatter(x[:, 0], y, s=6, color="gray", label="patients")
ax.plot(grid[:, 0], mean, color="tab:blue", label="posterior mean")
ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, color="tab:blue", alpha=0.2, label="± 2 std")
ax.set_xlabel("body-mass index"), ax.set_ylabel("disease progression")
ax.legend(loc="upper left")
save(fig, output_path("gp_diabetes.png"))
