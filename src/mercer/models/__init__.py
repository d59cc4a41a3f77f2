"""Estimators with the scikit-learn API."""

from .ridge import KernelRidge, KernelRidgeClassifier

__all__ = ["KernelRidge", "KernelRidgeClassifier"]
