"""
Nyström kernel ridge: accuracy against the number of centres
============================================================

:class:`mercer.NystroemKernelRidgeClassifier` restricts the model to ``M`` centres drawn from the
data and solves the ``M x M`` system (directly at small ``M``, by FALKON-preconditioned conjugate
gradient at large ``M``). On the digits, a few hundred centres reach the exact
:class:`mercer.KernelRidgeClassifier`'s held-out accuracy, with memory ``O(n d + M^2)``
instead of ``O(n^2)``.
"""

import matplotlib.pyplot as plt
from _common import output_path, save
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import mercer

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16, y, random_state=0)
params = dict(alpha=1e-2, kernel="rbf", gamma=0.05)

exact = mercer.KernelRidgeClassifier(**params).fit(X_train, y_train).score(X_test, y_test)
sizes = [10, 20, 40, 80, 160, 320, 640]
scores = [mercer.NystroemKernelRidgeClassifier(n_centers=m, random_state=0, **params)
          .fit(X_train, y_train).score(X_test, y_test) for m in sizes]
for m, s in zip(sizes, scores):
    print(f"M = {m:4d}: accuracy {s:.3f}")

fig, ax = plt.subplots(figsize=(5, 3.8), layout="constrained")
ax.semilogx(sizes, scores, "o-", label="NystroemKernelRidgeClassifier")
ax.axhline(exact, color="gray", ls="--", label=f"exact KernelRidgeClassifier ({exact:.3f})")
ax.set_xlabel("number of centres M"), ax.set_ylabel("held-out accuracy")
ax.set_title(f"digits, n = {len(X_train)}")
ax.legend(loc="lower right")
save(fig, output_path("nystroem_digits.png"))
