"""
Kernel SVM and reduced-set SVMs on the digits
=============================================

:class:`mercer.KernelSVC` solves the SVM dual by SMO, as LIBSVM does (same support vectors and
accuracy). Prediction costs one kernel evaluation per support vector:
:meth:`mercer.ReducedSetSVC.from_svc` replaces them by a fraction of k-means centres with refitted
coefficients, without training again. Held-out accuracy against the number of vectors kept.
"""

import matplotlib.pyplot as plt
from _common import output_path, save
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

import mercer

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16, y, random_state=0)

svc = mercer.KernelSVC(C=10, kernel="rbf", gamma=0.05).fit(X_train, y_train)
libsvm = SVC(C=10, kernel="rbf", gamma=0.05).fit(X_train, y_train)
n_sv = len(svc.support_vectors_)
print(f"KernelSVC: {n_sv} support vectors, accuracy {svc.score(X_test, y_test):.3f}; "
      f"LIBSVM: {len(libsvm.support_vectors_)}, {libsvm.score(X_test, y_test):.3f}")

fractions = [0.02, 0.05, 0.1, 0.2, 0.5]
kept, accuracy = [], []
for f in fractions:
    small = mercer.ReducedSetSVC.from_svc(svc, f)
    kept.append(len(small.support_vectors_))
    accuracy.append(small.score(X_test, y_test))
    print(f"reduced set, {f:.0%} of the vectors ({kept[-1]}): accuracy {accuracy[-1]:.3f}")

fig, ax = plt.subplots(figsize=(5, 3.8), layout="constrained")
ax.semilogx(kept, accuracy, "o-", label="ReducedSetSVC.from_svc")
ax.semilogx([n_sv], [svc.score(X_test, y_test)], "s", color="black", label="exact KernelSVC")
ax.set_xlabel("vectors used at prediction"), ax.set_ylabel("held-out accuracy")
ax.set_title("digits, RBF kernel SVM")
ax.legend(loc="lower right")
save(fig, output_path("svm_digits.png"))
