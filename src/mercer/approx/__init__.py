"""Explicit finite feature maps and kernel approximations (scikit-learn transformers).

* :class:`RandomFourierFeatures` -- Bochner sampling for stationary kernels (and their composites).
* :class:`Nystroem`, :class:`LandmarkFeatures` -- landmark maps; landmark rules in
  :func:`select_landmarks` (uniform, k-means++, k-means, ridge leverage scores, sparse greedy).
* :class:`IncompleteCholesky` -- pivoted incomplete Cholesky (Fine & Scheinberg; Smola & Schölkopf).
* :class:`PolynomialFeatureMap` -- the exact finite map of a polynomial kernel.
* :func:`check_finite` -- no silent NaN: an error naming why kernel values overflowed.
"""

from ._cholesky import IncompleteCholesky, PivotedCholeskyResult, pivoted_cholesky
from ._finite import check_finite, check_params_fit_dtype, overflow_cause
from ._landmarks import (LANDMARK_RULES, LANDMARKS_CONSTRAINTS, check_landmarks_param, nystroem_normalization,
                         select_landmarks)
from ._nystroem import LandmarkFeatures, Nystroem
from ._polynomial import PolynomialFeatureMap, explicit_feature_map, polynomial_feature_dim
from ._random_features import RandomFourierFeatures, spectral_sample
from ._sketch import RandomMaclaurin, TensorSketch

from ._stream import record_source

__all__ = [
    "record_source",
    "LANDMARKS_CONSTRAINTS",
    "LANDMARK_RULES",
    "IncompleteCholesky",
    "LandmarkFeatures",
    "Nystroem",
    "PivotedCholeskyResult",
    "PolynomialFeatureMap",
    "RandomFourierFeatures",
    "RandomMaclaurin",
    "TensorSketch",
    "check_finite",
    "check_landmarks_param",
    "check_params_fit_dtype",
    "explicit_feature_map",
    "nystroem_normalization",
    "overflow_cause",
    "pivoted_cholesky",
    "polynomial_feature_dim",
    "select_landmarks",
    "spectral_sample",
]
