"""
Random Fourier features on the breast-cancer data
=================================================

:class:`mercer.approx.RandomFourierFeatures` draws ``m`` frequencies from the RBF kernel's
spectral density, so that ``z(x) . z(y)`` approximates ``k(x, y)`` with an error falling as
``1 / sqrt(m)``. A linear (ridge) classifier on those features approaches the exact kernel SVM as ``m``
grows (left, the mean of five draws), while the Gram-matrix error falls (right).
"""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import RidgeClassifier
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import mercer
from mercer.kernels import RBF

X, y = load_breast_cancer(return_X_y=True)
X = StandardScaler().fit_transform(X)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
kernel = RBF(gamma=1 / X.shape[1])

exact = mercer.KernelSVC(C=1.0, kernel=kernel).fit(X_train, y_train).score(X_test, y_test)
K = kernel(X_test).numpy()
sizes = [4, 8, 16, 32, 64, 128, 256, 512]
accuracy, error = [], []
for m in sizes:
    runs = []
    for seed in range(5):                  # the features are random: average five draws
        rff = mercer.RandomFourierFeatures(kernel, n_components=m, random_state=seed)
        model = make_pipeline(rff, RidgeClassifier(alpha=1.0)).fit(X_train, y_train)
        Z = model[0].transform(X_test)
        runs.append((model.score(X_test, y_test), np.abs(Z @ Z.T - K).mean()))
    accuracy.append(np.mean([r[0] for r in runs]))
    error.append(np.mean([r[1] for r in runs]))
    print(f"m = {m:3d}: accuracy {accuracy[-1]:.3f}, mean |Gram error| {error[-1]:.4f} (5 draws)")

fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
a.semilogx(sizes, accuracy, "o-", label="RFF + ridge classifier")
a.axhline(exact, color="gray", ls="--", label=f"exact KernelSVC ({exact:.3f})")
a.set_xlabel("frequencies m"), a.set_ylabel("held-out accuracy"), a.legend(loc="lower right")
b.loglog(sizes, error, "o-", label="mean |z(x).z(y) - k(x, y)|")
b.loglog(sizes, error[0] * np.sqrt(sizes[0] / np.array(sizes)), color="gray", ls="--", label="1 / sqrt(m)")
b.set_xlabel("frequencies m"), b.legend()
save(fig, output_path("random_features_breast_cancer.png"))
