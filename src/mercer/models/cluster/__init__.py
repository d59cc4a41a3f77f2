"""Clustering: k-means, kernel k-means and kernel agglomerative clustering."""

from ._cluster import KernelAgglomerative, KernelKMeans, KMeans, plot_dendrogram

__all__ = ["KMeans", "KernelAgglomerative", "KernelKMeans", "plot_dendrogram"]
