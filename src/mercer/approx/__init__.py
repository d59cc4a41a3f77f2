"""Explicit finite feature maps (scikit-learn transformers)."""

from ._polynomial import PolynomialFeatureMap, explicit_feature_map, polynomial_feature_dim

__all__ = ["PolynomialFeatureMap", "explicit_feature_map", "polynomial_feature_dim"]
