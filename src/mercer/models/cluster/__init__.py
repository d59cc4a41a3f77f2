"""Clustering: k-means, kernel k-means and kernel agglomerative clustering.

* :class:`KMeans` -- Lloyd's algorithm in input space (over :mod:`mercer.kmeans`).
* :class:`KernelKMeans` -- the same iterations in the feature space of a kernel, exact (kernel
  evaluations only) or on Nyström / random Fourier features.
* :class:`KernelAgglomerative` -- SciPy's linkage on feature-space distances; :func:`plot_dendrogram`.

Each name is imported from its module on first use (PEP 562), as in :mod:`mercer.models`: ``KMeans``
does not import the kernel and Nyström code that the other two need.
"""

from typing import TYPE_CHECKING

#: public name -> the module that defines it
_ORIGIN = {"KMeans": "_kmeans", "KernelAgglomerative": "_agglomerative", "KernelKMeans": "_kernel_kmeans",
           "plot_dendrogram": "_agglomerative"}

if TYPE_CHECKING:
    from ._agglomerative import KernelAgglomerative, plot_dendrogram
    from ._kernel_kmeans import KernelKMeans
    from ._kmeans import KMeans


def __getattr__(name: str):
    if name in _ORIGIN:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_ORIGIN[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_ORIGIN))


__all__ = ["KMeans", "KernelAgglomerative", "KernelKMeans", "plot_dendrogram"]
