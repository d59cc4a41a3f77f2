"""Every mercer estimator passes scikit-learn's estimator checks."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from mercer.approx import PolynomialFeatureMap
from mercer.kernels import RBF, Linear
from mercer.models import KernelPCA, KernelRidge, KernelRidgeClassifier

ESTIMATORS = [
    KernelRidge(),
    KernelRidge(kernel="rbf", solver="dual"),
    KernelRidge(kernel=0.5 * RBF() + Linear()),
    KernelRidgeClassifier(),
    KernelRidgeClassifier(kernel="rbf"),
    KernelPCA(n_components=2),
    KernelPCA(n_components=2, kernel="rbf", eigen_solver="randomized", random_state=0),
    PolynomialFeatureMap(),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_contract(estimator, check):
    check(estimator)
