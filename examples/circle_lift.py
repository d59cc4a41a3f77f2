"""
Lifting circle-separable data by a feature map
==============================================

Circle-separable data lifted by Phi_2(x) = (x1, x2, x1^2 + x2^2) become linearly separable.

The seeds' first picture: labels sign(0.6 - x1^2 - x2^2) cannot be split by a line in the plane,
but in the lifted space the plane z = 0.6 splits them; the quadratic kernel does the same
implicitly (left: its decision regions).
"""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save

import mercer
from mercer import plotting
from mercer.datasets import make_circle_separable

X, y = make_circle_separable(300, radius2=0.6, margin=0.05, random_state=0)
model = mercer.KernelSVC(kernel="poly", degree=2, coef0=1.0, C=10.0).fit(X, y)

fig = plt.figure(figsize=(9, 4), layout="constrained")
left = fig.add_subplot(1, 2, 1)
plotting.decision_regions(model, X, y, ax=left, resolution=120)
left.set_title(f"quadratic kernel SVC (accuracy {model.score(X, y):.2f})")
left.set_aspect("equal")

right = fig.add_subplot(1, 2, 2, projection="3d")
z = (X**2).sum(1)
right.scatter(X[:, 0], X[:, 1], z, c=np.where(y > 0, "tab:red", "tab:blue"), s=8)
g = np.linspace(-1, 1, 2)
gx, gy = np.meshgrid(g, g)
right.plot_surface(gx, gy, np.full_like(gx, 0.6), alpha=0.25, color="gray")
right.set_xlabel("$x_1$"), right.set_ylabel("$x_2$"), right.set_zlabel("$x_1^2 + x_2^2$")
right.set_title(r"lifted by $\Phi_2$: the plane $z = 0.6$ separates")
save(fig, output_path("circle_lift.png"))
