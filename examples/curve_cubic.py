"""
A cubic curve ordered by one kernel principal component
=======================================================

Points on x = t, y = 2 t^2 + t^3 look 2-D but depend on t alone.

In the cubic kernel's features the curve lies on a plane (phi(x, y) = [y, x^2, x^3]), and the
first kernel principal component orders the points as t does (right: rank correlation ~ 1).
"""

import matplotlib.pyplot as plt
from _common import output_path, save
from scipy.stats import spearmanr

import mercer
from mercer.datasets import make_curve

X, t = make_curve(200, random_state=0)
kpca = mercer.KernelPCA(n_components=2, kernel="poly", degree=3, gamma=1.0, coef0=1.0).fit(X)
z = kpca.transform(X)[:, 0]

fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.4), layout="constrained")
points = a.scatter(X[:, 0], X[:, 1], c=t, cmap="viridis", s=10)
a.set_xlabel("x"), a.set_ylabel("y"), a.set_title("$x = t,\\ y = 2t^2 + t^3$")
fig.colorbar(points, ax=a, label="t")
b.scatter(t, z, c=t, cmap="viridis", s=10)
b.set_xlabel("t"), b.set_ylabel("kernel PC 1")
b.set_title(f"kernel PC 1 against t (rank corr. {abs(spearmanr(t, z).correlation):.3f})")
save(fig, output_path("curve_cubic.png"))
