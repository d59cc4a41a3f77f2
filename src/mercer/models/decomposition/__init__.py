"""Kernel PCA, exact and approximate (Nyström or random features)."""

from ._approximate import ApproximateKernelPCA
from ._kernel_pca import KernelPCA

__all__ = ["ApproximateKernelPCA", "KernelPCA"]
