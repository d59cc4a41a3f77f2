"""Gaussian processes: exact regression and sparse (SGPR) regression."""

from ._gp import GaussianProcessRegressor, SparseGPRegressor

__all__ = ["GaussianProcessRegressor", "SparseGPRegressor"]
