"""
Kernel algebra on the wine data
===============================

Gram matrices of an RBF kernel, a linear kernel and their weighted sum on scikit-learn's wine data
(standardised, rows sorted by cultivar; every third wine drawn). The sum of two Mercer kernels is a Mercer kernel: its
feature map is the two maps side by side, and :func:`mercer.kernels.check_mercer` confirms that its
Gram matrix has no negative eigenvalue. The block structure shows how each kernel sees the three
classes.
"""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

from mercer.kernels import RBF, Linear, check_mercer

X, y = load_wine(return_X_y=True)
order = np.argsort(y, kind="stable")
X = StandardScaler().fit_transform(X)[order]
shown = X[::3]                      # every third wine, for a readable picture

kernels = {"RBF(gamma=0.05)": RBF(gamma=0.05), "Linear() / 13": Linear() * (1 / 13),
           "0.5 RBF + 0.5 Linear / 13": 0.5 * RBF(gamma=0.05) + 0.5 * Linear() * (1 / 13)}
fig, axes = plt.subplots(1, 3, figsize=(9, 3.0), layout="constrained")
for ax, (name, kernel) in zip(axes, kernels.items()):
    K = kernel(shown).numpy()
    image = ax.imshow(K, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_title(name, fontsize=10)
    ax.set_xticks([]), ax.set_yticks([])
    print(f"{name}: {check_mercer(kernel, X)}")
fig.colorbar(image, ax=axes, shrink=0.8)
save(fig, output_path("kernels_wine.png"))
