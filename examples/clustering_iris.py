"""
k-means, kernel k-means and kernel k-NN on the iris data
========================================================

:class:`mercer.KMeans` clusters in the input space; :class:`mercer.KernelKMeans` runs Lloyd's
algorithm in an RBF kernel's feature space, where distances are
``k(x, x) + k(z, z) - 2 k(x, z)``. The clusters are drawn on the first two principal components,
with the adjusted Rand index against the species; a kernel k-NN classifier on the same distances
is cross-validated for comparison.
"""

import matplotlib.pyplot as plt
from _common import output_path, save
from sklearn.datasets import load_iris
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import cross_val_score
from sklearn.preprocessing import StandardScaler

import mercer

X, y = load_iris(return_X_y=True)
X = StandardScaler().fit_transform(X)
P = PCA(2).fit_transform(X)

models = {"KMeans": mercer.KMeans(3, n_init=10, random_state=0),
          "KernelKMeans (RBF, gamma = 0.5)": mercer.KernelKMeans(3, kernel="rbf", gamma=0.5, n_init=10,
                                                                 random_state=0)}
fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), layout="constrained")
axes[0].scatter(P[:, 0], P[:, 1], c=y, cmap="tab10", s=10)
axes[0].set_title("species")
for ax, (name, model) in zip(axes[1:], models.items()):
    labels = model.fit_predict(X)
    ax.scatter(P[:, 0], P[:, 1], c=labels, cmap="tab10", s=10)
    ax.set_title(f"{name}\nadjusted Rand index {adjusted_rand_score(y, labels):.2f}", fontsize=10)
for ax in axes:
    ax.set_xticks([]), ax.set_yticks([])

knn = mercer.KernelKNeighborsClassifier(n_neighbors=5, kernel="rbf", gamma=0.5)
print(f"kernel 5-NN, 5-fold accuracy: {cross_val_score(knn, X, y, cv=5).mean():.3f}")
save(fig, output_path("clustering_iris.png"))
