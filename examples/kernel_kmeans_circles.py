"""
k-means against kernel k-means on two circles
=============================================

k-means cannot separate two concentric circles; kernel k-means with an RBF kernel can (with a
few restarts: one seeding often ends in a local minimum that cuts both rings in half)."""

import matplotlib.pyplot as plt
from _common import output_path, save
from sklearn.datasets import make_circles
from sklearn.metrics import adjusted_rand_score

import mercer
from mercer import plotting

X, y = make_circles(400, factor=0.35, noise=0.05, random_state=0)
models = {"k-means": mercer.KMeans(n_clusters=2, random_state=0),
          "kernel k-means (RBF)": mercer.KernelKMeans(n_clusters=2, kernel="rbf", gamma=5.0, n_init=10,
                                                    random_state=0)}

fig, axes = plt.subplots(1, 2, figsize=(8, 3.8), layout="constrained")
for ax, (name, model) in zip(axes, models.items()):
    plotting.clusters(model.fit(X), X, ax=ax)
    ax.set_title(f"{name}: ARI {round(adjusted_rand_score(y, model.labels_), 2) + 0.0:.2f}")
    ax.set_aspect("equal")
save(fig, output_path("kernel_kmeans_circles.png"))
