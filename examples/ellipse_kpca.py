"""
An ellipse explained by quadratic kernel PCA
============================================

The ellipse x^2 + 4 y^2 = 1 is linear in the quadratic kernel's features (x^2, sqrt(2) xy, y^2).

Kernel PCA with the homogeneous quadratic kernel <x, y>^2 finds that two components explain
all of the variance (the third is zero: the points lie on the plane x^2 + 4 y^2 = 1 in feature space).
"""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save

import mercer
from mercer.datasets import make_ellipse

X = make_ellipse(200, random_state=0)
angle = np.arctan2(2 * X[:, 1], X[:, 0])
kpca = mercer.KernelPCA(n_components=3, kernel="poly", degree=2, gamma=1.0, coef0=0.0).fit(X)
Z = kpca.transform(X)

fig, (a, b, c) = plt.subplots(1, 3, figsize=(11, 3.4), layout="constrained")
a.scatter(X[:, 0], X[:, 1], c=angle, cmap="twilight", s=10)
a.set_aspect("equal"), a.set_title("$x^2 + 4y^2 = 1$")
b.scatter(Z[:, 0], Z[:, 1], c=angle, cmap="twilight", s=10)
b.set_xlabel("kernel PC 1"), b.set_ylabel("kernel PC 2"), b.set_title("quadratic kernel PCA embedding")
ratio = kpca.explained_variance_ratio_
c.bar(["PC 1", "PC 2", "PC 3"], ratio, color="tab:blue")
c.set_ylim(0, 1), c.set_title(f"explained variance (PC 3: {ratio[2]:.1e})")
save(fig, output_path("ellipse_kpca.png"))
