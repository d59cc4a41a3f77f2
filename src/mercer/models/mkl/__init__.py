"""Multiple kernel learning: ALIGNF regression and EasyMKL classification."""

from ._mkl import MKLClassifier, MKLRegressor

__all__ = ["MKLClassifier", "MKLRegressor"]
