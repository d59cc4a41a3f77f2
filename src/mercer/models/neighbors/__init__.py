"""Nearest neighbours under kernel-induced distances."""

from ._neighbors import (KernelKNeighborsClassifier, KernelKNeighborsRegressor, KernelRadiusNeighborsClassifier,
                         KernelRadiusNeighborsRegressor)

__all__ = ["KernelKNeighborsClassifier", "KernelKNeighborsRegressor", "KernelRadiusNeighborsClassifier",
           "KernelRadiusNeighborsRegressor"]
