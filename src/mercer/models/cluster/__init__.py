"""Clustering: k-means, kernel k-means and kernel agglomerative clustering.

* :class:`KMeans` -- Lloyd's algorithm in input space (over :mod:`mercer.kmeans`).
* :class:`KernelKMeans` -- the same iterations in the feature space of a kernel, exact (kernel
  evaluations only) or on Nyström / random Fourier features.
* :class:`KernelAgglomerative` -- SciPy's linkage on feature-space distances; :func:`plot_dendrogram`.
"""

from ._agglomerative import KernelAgglomerative, plot_dendrogram
from ._kernel_kmeans import KernelKMeans
from ._kmeans import KMeans

__all__ = ["KMeans", "KernelAgglomerative", "KernelKMeans", "plot_dendrogram"]
