"""
Kernel PCA of the digits
========================

The first two components of linear PCA and of RBF kernel PCA (:class:`mercer.KernelPCA`) on
scikit-learn's 8 x 8 digits, coloured by the digit. Kernel PCA diagonalises the centred Gram
matrix; with a local kernel (a larger ``gamma``) its leading components pull apart digits that
overlap in the linear projection, the zeros first.
"""

import matplotlib.pyplot as plt
from _common import output_path, save
from sklearn.datasets import load_digits

import mercer

X, y = load_digits(return_X_y=True)
X = X / 16

fig, axes = plt.subplots(1, 2, figsize=(7, 3.2), layout="constrained")
for ax, (name, model) in zip(axes, {
        "linear PCA (KernelPCA, linear kernel)": mercer.KernelPCA(2, kernel="linear"),
        "RBF kernel PCA (gamma = 0.3)": mercer.KernelPCA(2, kernel="rbf", gamma=0.3)}.items()):
    Z = model.fit_transform(X)
    points = ax.scatter(Z[:, 0], Z[:, 1], c=y, cmap="tab10", s=3, linewidths=0)
    ax.set_title(name, fontsize=10)
    ax.set_xticks([]), ax.set_yticks([])
fig.colorbar(points, ax=axes, label="digit", ticks=range(10))
save(fig, output_path("kpca_digits.png"))
