"""Gaussian processes: exact regression and sparse (SGPR) regression."""

from ._exact import GaussianProcessRegressor
from ._sparse import SparseGPRegressor

__all__ = ["GaussianProcessRegressor", "SparseGPRegressor"]
