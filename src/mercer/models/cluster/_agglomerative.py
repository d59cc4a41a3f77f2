"""Agglomerative clustering on feature-space distances, by SciPy's ``linkage``.

The distance of two points is the Euclidean distance of their images in the kernel's feature
space, :math:`d(x, y) = \\sqrt{k(x,x) + k(y,y) - 2 k(x,y)}`.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from ..._validation import Interval, Options, check_at_most, check_params
from ..._sparse import plan_features
from ...approx import check_finite
from ...linalg import MemoryBudgetError, SharedArray, call_in_process, format_bytes, plan_blocks, row_blocks
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin

__all__ = ["KernelAgglomerative", "plot_dendrogram"]

_LINKAGES = ("average", "complete", "single")


def _cut_tree(children, n_samples, n_clusters):
    """Labels of the ``n_clusters`` clusters left after ``n_samples - n_clusters`` merges, numbered by
    first appearance (so that equal partitions give equal label vectors)."""
    parent = np.arange(2 * n_samples - 1)
    for step in range(n_samples - n_clusters):
        a, b = children[step]
        parent[a] = parent[b] = n_samples + step

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    roots = np.array([root(i) for i in range(n_samples)])
    _, labels = np.unique(roots, return_inverse=True)
    return labels.astype(np.intp)


class KernelAgglomerative(ClusterMixin, KernelEstimatorMixin, BaseEstimator):
    """Agglomerative clustering on feature-space distances, by SciPy's ``linkage``.

    Distances :math:`d(x, y) = \\sqrt{k(x,x) + k(y,y) - 2 k(x,y)}` (the Euclidean distance in the
    kernel's feature space) are written, block by block, straight into SciPy's condensed vector
    (``n (n - 1) / 2`` entries); the linkage is then computed by
    :func:`scipy.cluster.hierarchy.linkage`. This is for moderate ``n``: the condensed distances
    must fit the memory budget, otherwise a :class:`~mercer.linalg.MemoryBudgetError` says how much
    memory is needed (use :class:`KernelKMeans` with ``approximation="nystroem"`` for large n).
    With the linear kernel the result is scikit-learn's ``AgglomerativeClustering`` (Euclidean).

    Parameters
    ----------
    n_clusters : int or None, default=2
        Number of clusters; ``None`` when ``distance_threshold`` is given.
    kernel, gamma, degree, coef0, kernel_params : as in :class:`KernelKMeans` (default "rbf").
    linkage : {"average", "complete", "single"}, default="average"
    distance_threshold : float, optional
        Cut the tree where merge distances reach this value (then ``n_clusters`` must be None).
    device, dtype, memory_budget : as usual.

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
    n_clusters_ : int
    children_ : ndarray (n_samples - 1, 2)
        As in scikit-learn: node ``n_samples + i`` is formed at step ``i`` by merging the two nodes.
    distances_ : ndarray (n_samples - 1,)
        Feature-space linkage distance of each merge.
    counts_ : ndarray (n_samples - 1,)
        Samples under each merged node.
    n_leaves_ : int
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_clusters": [Interval(Integral, 1, None, closed="left"), None],
        "linkage": [Options(*_LINKAGES)],
        "distance_threshold": [Interval(Real, 0, None, closed="left"), None],
    }

    def __init__(self, n_clusters=2, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 linkage="average", distance_threshold=None, device=None, dtype=None, memory_budget=None):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.linkage = linkage
        self.distance_threshold = distance_threshold
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _check_memory(self, n: int) -> None:
        m = n * (n - 1) // 2
        # the distances (float64) and SciPy's working copy of them (nn_chain's, for "average" and
        # "complete"; single linkage's MST keeps none; linkage's finiteness mask, m bytes, goes first)
        need = m * 8 * (1 if self.linkage == "single" else 2)
        if need > self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the {m} condensed pairwise distances of {n} samples and SciPy's linkage "
                f"need {format_bytes(need)}, more than the memory budget of {format_bytes(self._budget)}. Raise "
                "memory_budget, subsample, or use KernelKMeans(approximation='nystroem') for large n.")

    def _condensed(self, Xt, out):
        """Feature-space distances of all pairs into ``out``, in SciPy's condensed order (float64,
        n (n - 1) / 2; :meth:`_check_memory` has planned them)."""
        n = Xt.shape[0]
        m = n * (n - 1) // 2
        diag = self.kernel_.diag(Xt)
        rows = plan_blocks(n, n, plan_features(Xt), itemsize=Xt.element_size(), budget=self._plan.holding(m * 8).budget,
                           scratch=self.kernel_.scratch(Xt.shape[1])).row_block
        for s in row_blocks(n - 1, rows, desc="condensed distances"):
            i = s.start
            # only columns right of the block's first row are ever read
            K = self.kernel_(Xt[s], Xt[i + 1:])
            D = (diag[s, None] + diag[None, i + 1:]).sub_(K, alpha=2.0).clamp_min_(0.0).sqrt_()
            D = D.to(torch.float64).cpu().numpy()
            for r in range(s.start, s.stop):
                start = r * n - r * (r + 1) // 2
                out[start:start + n - 1 - r] = D[r - i, r - i:]
        # not SciPy's "The condensed distance matrix must contain only finite values": the cause
        check_finite(torch.from_numpy(out), type(self).__name__, "the pairwise feature-space distances", X=Xt,
                     kernel=self.kernel_)
        return out

    def _check_stop_rule(self, n):
        """Exactly one of n_clusters and distance_threshold; at most n_samples clusters."""
        owner = type(self).__name__
        if (self.n_clusters is None) == (self.distance_threshold is None):
            raise ValueError(f"{owner}: exactly one of n_clusters and distance_threshold has to be set, and the "
                             f"other needs to be None (got n_clusters={self.n_clusters!r}, "
                             f"distance_threshold={self.distance_threshold!r}).")
        if self.n_clusters is not None:
            check_at_most(owner, "n_clusters", self.n_clusters, n)

    def fit(self, X, y=None):
        check_params(self)
        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        n = Xv.shape[0]
        self._check_stop_rule(n)
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} does not support kernel='precomputed'; pass the kernel itself.")
        if n < 2:
            self.children_ = np.zeros((0, 2), dtype=np.intp)
            self.distances_ = np.zeros(0)
            self.counts_ = np.zeros(0, dtype=np.intp)
        else:
            # SciPy's linkage holds the GIL for its whole run: in a child process (on the distances in
            # shared memory) for large n, so that Ctrl-C stops it within a poll
            self._check_memory(n)
            with SharedArray(n * (n - 1) // 2) as dist:
                self._condensed(self._tensor(Xv), dist.array)
                Z = call_in_process("scipy.cluster.hierarchy:linkage", dist, self.linkage, desc="linkage")
            self.children_ = Z[:, :2].astype(np.intp)
            self.distances_ = Z[:, 2].copy()
            self.counts_ = Z[:, 3].astype(np.intp)
        self.n_leaves_ = n
        if self.distance_threshold is not None:
            self.n_clusters_ = int(np.count_nonzero(self.distances_ >= self.distance_threshold)) + 1
        else:
            self.n_clusters_ = int(self.n_clusters)
        self.labels_ = _cut_tree(self.children_, n, self.n_clusters_)
        return self

    def fit_predict(self, X, y=None):
        return self.fit(X).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def plot_dendrogram(model, ax=None, **kwargs):
    """Draw the dendrogram of a fitted :class:`KernelAgglomerative` with SciPy.

    Parameters
    ----------
    model : fitted KernelAgglomerative
    ax : matplotlib Axes, optional
        Default: the current axes (matplotlib is imported only here).
    **kwargs : passed to :func:`scipy.cluster.hierarchy.dendrogram` (``truncate_mode``, ``p``, ...).

    Returns
    -------
    dict, as returned by ``scipy.cluster.hierarchy.dendrogram``.
    """
    check_is_fitted(model, "children_")
    if ax is None and not kwargs.get("no_plot", False):
        try:
            import matplotlib.pyplot as plt  # optional dependency
        except ImportError as exc:
            raise ImportError("plot_dendrogram needs matplotlib to draw (pip install mercer[plot]); pass ax= or "
                              "no_plot=True to get the tree without it.") from exc
        ax = plt.gca()
    from scipy.cluster import hierarchy  # on use: adds ~15 ms to `import mercer`

    Z = np.column_stack([model.children_, model.distances_, model.counts_]).astype(np.float64)
    return hierarchy.dendrogram(Z, ax=ax, **kwargs)
