"""
Exact kernel ridge regression on the diabetes data
==================================================

:class:`mercer.KernelRidgeCV` chooses the RBF kernel's ``gamma`` and the ridge ``alpha`` by
descending the closed-form leave-one-out error, with no refits; :class:`mercer.KernelRidge` with
those values gives scikit-learn's ``KernelRidge`` predictions. Held-out predictions against the
true disease progression.
"""

import matplotlib.pyplot as plt
import numpy as np
from _common import output_path, save
from sklearn.datasets import load_diabetes
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import mercer

X, y = load_diabetes(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(StandardScaler().fit_transform(X), y, random_state=0)
mean, scale = y_train.mean(), y_train.std()

cv = mercer.KernelRidgeCV(kernel="rbf").fit(X_train, (y_train - mean) / scale)
gamma, alpha = cv.kernel_.gamma, cv.alpha_
print(f"leave-one-out choice: gamma = {gamma:.4g}, alpha = {alpha:.4g}")

ours = mercer.KernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(X_train, y_train - mean)
theirs = SkKernelRidge(alpha=alpha, kernel="rbf", gamma=gamma).fit(X_train, y_train - mean)
predicted = ours.predict(X_test) + mean
print("largest difference to scikit-learn:", np.abs(predicted - theirs.predict(X_test) - mean).max())

fig, ax = plt.subplots(figsize=(4.6, 4.2), layout="constrained")
ax.scatter(y_test, predicted, s=12)
ax.plot([y.min(), y.max()], [y.min(), y.max()], color="gray", lw=1)
r2 = 1 - ((y_test - predicted) ** 2).sum() / ((y_test - y_test.mean()) ** 2).sum()
ax.set_xlabel("true progression"), ax.set_ylabel("predicted")
ax.set_title(f"KernelRidge, held-out R$^2$ = {r2:.2f}")
save(fig, output_path("ridge_diabetes.png"))
