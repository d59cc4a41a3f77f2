"""
Multiple kernel learning on the wine data
=========================================

:class:`mercer.MKLClassifier` learns non-negative weights for a set of base kernels (EasyMKL), then
fits a kernel ridge classifier on their combination. Here one RBF kernel per feature
(``Columns(RBF(), [j])``): the weights rank the 13 chemical measurements by how much they help to
tell the three cultivars apart.
"""

import matplotlib.pyplot as plt
from _common import output_path, save
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import mercer
from mercer.kernels import RBF, Columns

data = load_wine()
X = StandardScaler().fit_transform(data.data)
X_train, X_test, y_train, y_test = train_test_split(X, data.target, random_state=0)

kernels = [Columns(RBF(gamma=0.5), [j]) for j in range(X.shape[1])]
mkl = mercer.MKLClassifier(kernels=kernels).fit(X_train, y_train)
print(f"held-out accuracy {mkl.score(X_test, y_test):.3f}")

fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
ax.barh(data.feature_names, mkl.weights_)
ax.invert_yaxis()
ax.set_xlabel("learned kernel weight")
ax.set_title(f"EasyMKL, one RBF kernel per feature (accuracy {mkl.score(X_test, y_test):.2f})", fontsize=10)
save(fig, output_path("mkl_wine.png"))
