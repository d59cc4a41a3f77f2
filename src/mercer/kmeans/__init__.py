"""Input-space k-means: plain tensor maths on points and centres, no estimator API.

A layer between :mod:`mercer.linalg` and :mod:`mercer.approx`: the landmark rules of the Nyström
methods seed with it and :class:`mercer.models.KMeans` is a thin estimator over it.

* :func:`kmeans` -- the whole algorithm: ``n_init`` seedings, Lloyd's iterations, the best run.
* :func:`kmeans_streamed` -- the same on data read block by block from a :mod:`mercer.sources` source.
* :func:`lloyd` -- Lloyd's iterations with Hamerly's bounds (exact labels, fewer distances); on
  the CPU one compiled pass per iteration (bounds, distances, argmin and the sums fused; numba,
  compiled on the first fit and cached).
* :func:`kmeans_plusplus` -- greedy k-means++ over any squared-distance oracle (input space or a
  kernel's feature space); :func:`seed_indices` adds uniform seeds; :func:`d2_sampling` is the
  original D² sampling without local trials.
* :func:`assign`, :func:`top2`, :func:`own_sq`, :func:`sq_distances` -- blocked passes over the
  ``n x k`` squared distances, in blocks of :func:`block_rows` rows.
"""

from ._lloyd import KMeansResult, kmeans, lloyd, warn_distinct
from ._passes import KMEANS_TILE_BYTES, MIN_CLUSTERS_FOR_BOUNDS, assign, block_rows, own_sq, sq_distances, top2
from ._seeding import d2_sampling, kmeans_plusplus, seed_indices
from ._stream import kmeans_streamed

__all__ = [
    "KMEANS_TILE_BYTES",
    "MIN_CLUSTERS_FOR_BOUNDS",
    "KMeansResult",
    "assign",
    "block_rows",
    "d2_sampling",
    "kmeans",
    "kmeans_plusplus",
    "kmeans_streamed",
    "lloyd",
    "own_sq",
    "seed_indices",
    "sq_distances",
    "top2",
    "warn_distinct",
]
