"""Every mercer estimator passes scikit-learn's estimator checks."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from mercer.approx import IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap, RandomFourierFeatures
from mercer.kernels import RBF, Laplacian, Linear
from mercer.models import (KernelPCA, KernelRidge, KernelRidgeClassifier, NystroemKernelRidge,
                           NystroemKernelRidgeClassifier, RandomFeatureRidge)

ESTIMATORS = [
    KernelRidge(),
    KernelRidge(kernel="rbf", solver="dual"),
    KernelRidge(kernel=0.5 * RBF() + Linear()),
    KernelRidgeClassifier(),
    KernelRidgeClassifier(kernel="rbf"),
    KernelPCA(n_components=2),
    KernelPCA(n_components=2, kernel="rbf", eigen_solver="randomized", random_state=0),
    PolynomialFeatureMap(),
    RandomFourierFeatures(n_components=8, random_state=0),
    RandomFourierFeatures(kernel=RBF() + Laplacian(), n_components=8, variant="phase", random_state=0),
    Nystroem(n_components=5, random_state=0),
    Nystroem(kernel="poly", n_components=5, landmarks="kmeans++", method="cholesky", random_state=0),
    LandmarkFeatures(n_components=5, random_state=0),
    IncompleteCholesky(n_components=5),
    IncompleteCholesky(n_components=5, rule="greedy", random_state=0),
    NystroemKernelRidge(random_state=0),
    NystroemKernelRidge(centers="leverage", dtype="float64", random_state=0),
    NystroemKernelRidgeClassifier(random_state=0),
    RandomFeatureRidge(n_components=20, random_state=0),
]

# Centres are sampled among the training rows, so repeating a row (instead of weighting it)
# changes which centres are drawn: the two fits are different Nyström models.
_SAMPLED_CENTRES = {
    "check_sample_weight_equivalence_on_dense_data": "centres are sampled among the rows",
    "check_sample_weight_equivalence_on_sparse_data": "centres are sampled among the rows",
}


# float32 tiles (the Nyström default): a GEMM's rounding depends on the batch shape, so
# predictions on a subset differ from the full batch at ~1e-7, the check's tolerance.
_FLOAT32 = {"check_methods_subset_invariance": "float32 tiles: batch-dependent rounding at 1e-7"}


def _expected_failures(estimator):
    if isinstance(estimator, (NystroemKernelRidge, NystroemKernelRidgeClassifier)):
        return {**_SAMPLED_CENTRES, **(_FLOAT32 if estimator.dtype == "float32" else {})}
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failures)
def test_sklearn_contract(estimator, check):
    check(estimator)
