"""Kernel k-means: Lloyd's iterations in the feature space of a kernel, with kernel evaluations only.

The squared distance of :math:`\\phi(x)` to the mean of cluster :math:`C` is
:math:`k(x, x) - \\frac{2}{|C|} \\sum_{j \\in C} k(x, j) + \\frac{1}{|C|^2} \\sum_{i, j \\in C} k(i, j)`;
the middle term for all points is one blocked product ``K @ M`` with the (normalised) one-hot
membership ``M``. With ``approximation="nystroem"`` or ``"rff"`` it runs :class:`KMeans` on
explicit features instead (``O(n M)`` per iteration instead of ``O(n^2)``).

Empty clusters (a centre that wins no point during an iteration) are re-seeded, as in
scikit-learn, with the points farthest from their current centre.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import warnings
from numbers import Integral

import numpy as np
import torch
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator
from ..._sparse import plan_features
from ..._validation import Interval, Options, check_at_most, check_params
from ...approx import Nystroem, RandomFourierFeatures
from ...kmeans import seed_indices, warn_distinct
from ...linalg import KernelOperator, block_tensor, plan_blocks, row_blocks
from ...sources import RowSource
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin
from ._common import KMEANS_CONSTRAINTS, check_init, resolve_n_init, sample_weights
from ._kmeans import KMeans

__all__ = ["KernelKMeans"]

log = logging.getLogger(__name__)


class _FeatureSource(RowSource):
    """The features ``phi(X)`` of a fitted feature map over a streamed ``X``, computed block by block
    as they are read (never stored): what the approximate variant's :class:`KMeans` streams over."""

    def __init__(self, source: RowSource, feature_map, dtype: torch.dtype, device):
        self.source, self.feature_map, self.torch_dtype, self.device = source, feature_map, dtype, device
        self.n_samples, self.n_features = source.n_samples, int(feature_map.n_features_out_)
        self.dtype = np.dtype(str(dtype).removeprefix("torch."))

    def _features(self, block) -> np.ndarray:
        if not np.isfinite(block.data if sp.issparse(block) else block).all():
            raise ValueError(f"X contains NaN or infinity ({self.source!r}); mercer needs finite inputs.")
        Xb = block_tensor(block, dtype=self.torch_dtype, device=self.device)  # sparse rows of a sparse source
        F = torch.as_tensor(self.feature_map.transform(Xb), dtype=self.torch_dtype)
        return np.ascontiguousarray(F.cpu().numpy(), dtype=self.dtype)

    def _read(self, start, stop):
        return self._features(self.source.read(start, stop))

    def iter_blocks(self, slices):
        for r, block in self.source.iter_blocks(slices):
            yield r, self._features(block)

    def take(self, index):
        return self._features(self.source.take(index))


class KernelKMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel k-means: Lloyd's algorithm in the feature space of a kernel.

    Exact variant (``approximation=None``): the squared feature-space distance of a point to the
    mean of cluster :math:`C` (weights :math:`w`, :math:`W_C = \\sum_{j \\in C} w_j`) is

    .. math:: k(x, x) - \\frac{2}{W_C} \\sum_{j \\in C} w_j k(x, j)
              + \\frac{1}{W_C^2} \\sum_{i, j \\in C} w_i w_j k(i, j),

    and the middle term for all points is the blocked product ``K(X, X) @ M`` with the normalised
    membership matrix ``M`` (n, k); the last term is read off the same product. Each iteration is
    one pass over the Gram matrix, in tiles planned from ``memory_budget``; when the whole
    ``n x n`` Gram fits the budget it is computed once and reused by every iteration and restart.
    Seeding is k-means++ with feature-space distances ``k(x,x) + k(y,y) - 2 k(x,y)``.

    Approximate variant (``approximation="nystroem"`` or ``"rff"``): :class:`KMeans` on explicit
    features from :class:`mercer.approx.Nystroem` / :class:`mercer.approx.RandomFourierFeatures`
    with ``n_components`` features: ``O(n n_components)`` work per iteration instead of ``O(n^2)``.
    It streams data that is not in memory (:mod:`mercer.sources`): the features of each block are
    computed as it is read, and :class:`KMeans` streams over them (equal to the in-memory fit).

    Parameters
    ----------
    n_clusters : int, default=8
    kernel, gamma, degree, coef0, kernel_params :
        As in :class:`mercer.models.KernelRidge` (default kernel "rbf"). "precomputed" is not
        supported.
    n_init : "auto" or int, default="auto"
        Restarts (the lowest feature-space inertia wins). "auto": 10 for ``init="random"``, else 1.
    max_iter : int, default=300
    tol : float, default=1e-4
        Convergence when the summed squared shift of the feature-space centroids is at most ``tol``
        times the total feature-space variance per sample, or when labels stop changing.
    init : {"k-means++", "random"} or array of shape (n_clusters, n_features)
        An array gives input points whose images are the initial centres.
    approximation : {None, "nystroem", "rff"}, default=None
    n_components : int, default=100
        Features of the approximation.
    random_state, device, dtype, memory_budget : as usual.

    Attributes
    ----------
    labels_ : array (n_samples,)
    inertia_ : float
        Sum of (weighted) squared feature-space distances to the closest centroid (in the
        approximate feature space for the approximate variant).
    n_iter_ : int
    X_fit_ : tensor (n_samples, n_features)
        Training data (exact variant; the centroids are combinations of their images).
    centroid_weights_ : tensor (n_samples, n_clusters)
        Column ``c`` holds :math:`w_j / W_c` for the members of centroid ``c`` (exact variant).
    approximation_ : fitted transformer, ``kmeans_`` : fitted :class:`KMeans` (approximate variant).

    Notes
    -----
    Empty clusters are re-seeded with the points farthest (in feature space) from their centroid.
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        **KMEANS_CONSTRAINTS,
        "approximation": [Options("nystroem", "rff"), None],
        "n_components": [Interval(Integral, 1, None, closed="left")],
    }

    _saved_private = ("_centroid_sq",)  # private state that mercer.io saves

    @property
    def _streams_fit(self) -> bool:
        """The approximate variant streams a streamed ``X`` (the exact one reads it into memory)."""
        return self.approximation is not None

    def __init__(self, n_clusters=8, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 n_init="auto", max_iter=300, tol=1e-4, init="k-means++", approximation=None, n_components=100,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.n_clusters = n_clusters
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.approximation = approximation
        self.n_components = n_components
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit -------------------------------------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None):
        """Cluster ``X`` (n, d) in feature space."""
        check_params(self)
        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        n, d = Xv.shape
        check_at_most(owner, "n_clusters", self.n_clusters, n)
        k = int(self.n_clusters)
        init = check_init(owner, self.init, k, d)
        n_init = resolve_n_init(owner, self.n_init, init)
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} does not support kernel='precomputed': it needs kernel values at new "
                             "points for predict; pass the kernel itself (a name or a mercer Kernel).")
        t0 = time.perf_counter()
        if self.approximation is not None:
            self._fit_approx(Xv, X, sample_weight, init, n_init, k)
        else:
            self._fit_exact(Xv, X, sample_weight, init, n_init, k, float(self.tol))
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: n=%d, k=%d, inertia %.6g, %d iterations, %.2f s", owner, n, k, self.inertia_, self.n_iter_,
                 self.fit_time_)
        return self

    def _make_approximation(self):
        cls = Nystroem if self.approximation == "nystroem" else RandomFourierFeatures
        accepted = set(inspect.signature(cls.__init__).parameters)
        params = dict(kernel=self.kernel_, n_components=self.n_components, random_state=self.random_state,
                      device=self._device, dtype=self._dtype, memory_budget=self.memory_budget)
        return cls(**{key: v for key, v in params.items() if key in accepted})

    def _fit_approx(self, Xv, X, sample_weight, init, n_init, k):
        self.approximation_ = self._make_approximation()
        if isinstance(Xv, RowSource):  # streamed: features computed block by block, k-means streams over them
            self.approximation_.fit(Xv)
            F = _FeatureSource(Xv, self.approximation_, self._dtype, self._device)
        else:
            Xt = self._tensor(Xv)
            F = self.approximation_.fit_transform(Xt)
            F = torch.as_tensor(F, dtype=self._dtype, device=self._device)
        if not isinstance(init, str):
            init = torch.as_tensor(self.approximation_.transform(self._tensor(init)), dtype=self._dtype,
                                   device=self._device)
        self.kmeans_ = KMeans(k, init=init, n_init=n_init, max_iter=self.max_iter, tol=self.tol,
                              random_state=self.random_state, device=self._device,
                              dtype="float64" if self._dtype == torch.float64 else "float32",
                              memory_budget=self.memory_budget)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.kmeans_.fit(F, sample_weight=sample_weight)
        self.labels_ = as_output(torch.as_tensor(self.kmeans_.labels_), X)
        self.inertia_ = self.kmeans_.inertia_
        self.n_iter_ = self.kmeans_.n_iter_
        for attr in ("X_fit_", "centroid_weights_", "_centroid_sq"):
            self.__dict__.pop(attr, None)

    def _gram(self, Xt):
        """The dense Gram matrix when it fits half the budget, else None (blocked products)."""
        need = Xt.shape[0] ** 2 * Xt.element_size()
        if 2 * need <= self._budget:
            return KernelOperator(self.kernel_, Xt, memory_budget=self._budget).dense()
        return None

    def _gram_products(self, Xt, diag, k):
        """``KM(M) = K @ M`` (n, c) and ``cross(idx, s)``, the squared feature-space distances of the
        rows ``s`` to the points ``idx``: from the dense Gram when it fits, else blocked."""
        K = self._gram(Xt)
        op = None if K is not None else KernelOperator(self.kernel_, Xt, memory_budget=self._budget, n_rhs=k + 1)

        def KM(M):
            return K @ M if K is not None else op.matvec(M)

        def cross(idx, s):
            Kc = K[s][:, idx] if K is not None else self.kernel_(Xt[s], Xt[idx])
            return (diag[s, None] + diag[idx][None, :]).sub_(Kc, alpha=2.0)

        return KM, cross

    def _initial_distances(self, Xt, diag, init, k, cross, w, gen, rows):
        """Squared feature-space distances (n, k) to the initial centres: seeds drawn by the rule
        ``init``, or the images of the input points ``init``."""
        n = Xt.shape[0]
        if isinstance(init, str):
            idx = seed_indices(init, n, k, cross, gen, rows=rows, sample_weight=w)
            return torch.cat([cross(idx, s) for s in row_blocks(n, rows, desc="kernel k-means seeds")])
        C = self._tensor(init)
        Kc = torch.cat([self.kernel_(Xt[s], C) for s in row_blocks(n, rows, desc="kernel k-means seeds")])
        return (diag[:, None] + self.kernel_.diag(C)[None, :]).sub_(Kc, alpha=2.0)

    def _fit_exact(self, Xv, X, sample_weight, init, n_init, k, tol):
        owner = type(self).__name__
        Xt = self._tensor(Xv)
        n = Xt.shape[0]
        w = sample_weights(self, sample_weight, n, Xt.dtype, Xt.device)
        wv = torch.ones(n, dtype=Xt.dtype, device=Xt.device) if w is None else w
        diag = self.kernel_.diag(Xt)
        KM, cross = self._gram_products(Xt, diag, k)
        # total feature-space variance per unit weight: mean k(x,x) - ||weighted mean of phi||^2
        p = wv / wv.sum()
        mean_sq = float(p @ KM(p[:, None])[:, 0])
        self.total_variance_ = max(float(p @ diag) - mean_sq, 0.0)
        tol_abs = tol * self.total_variance_
        rows = plan_blocks(n, 8, plan_features(Xt), itemsize=Xt.element_size(), budget=self._budget,
                           scratch=self.kernel_.scratch(Xt.shape[1])).row_block
        gen = make_generator(self.random_state)  # CPU draws: the same seeds on every device
        best = None
        for run in range(n_init):
            D0 = self._initial_distances(Xt, diag, init, k, cross, w, gen, rows)
            labels = self._reseed(*torch.min(D0.clamp_min_(0.0), dim=1), k, wv)
            result = self._kernel_lloyd(KM, diag, labels, wv, k, tol_abs)
            log.debug("%s: run %d, inertia %.6g after %d iterations", owner, run, result[2], result[3])
            if best is None or result[2] < best[2]:
                best = result
        M, labels, inertia, n_iter, S = best
        warn_distinct(owner, labels, k)
        self.X_fit_ = Xt
        self.centroid_weights_ = M
        self._centroid_sq = S
        self.labels_ = as_output(labels, X)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        for attr in ("approximation_", "kmeans_"):
            self.__dict__.pop(attr, None)

    @staticmethod
    def _reseed(mind, labels, k, wv):
        """Give every empty cluster one of the points farthest from its centroid."""
        counts = torch.bincount(labels, weights=wv, minlength=k)
        empty = torch.nonzero(counts == 0)[:, 0]
        if empty.numel():
            labels = labels.clone()
            order = torch.argsort(mind.masked_fill(wv == 0, -1.0), descending=True, stable=True)
            taken = 0
            for e in empty.tolist():
                # never empty a cluster by moving its last member
                while taken < order.numel():
                    f = int(order[taken])
                    taken += 1
                    if counts[labels[f]] > wv[f] or wv[f] == 0:
                        break
                counts[labels[f]] -= wv[f]
                labels[f] = e
                counts[e] += wv[f]
        return labels

    @staticmethod
    def _membership(labels, wv, k):
        counts = torch.bincount(labels, weights=wv, minlength=k)
        M = torch.zeros(labels.shape[0], k, dtype=wv.dtype, device=wv.device)
        M[torch.arange(labels.shape[0], device=wv.device), labels] = wv / counts[labels].clamp_min(torch.finfo(wv.dtype).tiny)
        return M

    def _kernel_lloyd(self, KM, diag, labels, wv, k, tol_abs):
        M_prev = F_prev = S_prev = None
        it = 0
        mind = None
        for it in range(1, self.max_iter + 1):
            M = self._membership(labels, wv, k)
            F = KM(M)                                  # F[i, c] = sum_j M[j, c] k(i, j)
            S = (M * F).sum(0)                         # ||centroid_c||^2
            if M_prev is not None:
                shift = float((S + S_prev - 2.0 * (M * F_prev).sum(0)).clamp_min(0.0).sum())
            else:
                shift = math.inf
            D = (diag[:, None] - 2.0 * F).add_(S[None, :]).clamp_min_(0.0)
            mind, nearest = torch.min(D, dim=1)
            new = self._reseed(mind, nearest, k, wv)
            reseeded = new is not nearest
            if not reseeded and (torch.equal(new, labels) or shift <= tol_abs):
                labels = new
                break
            labels, M_prev, F_prev, S_prev = new, M, F, S
        if reseeded:  # stopped right after re-seeding: centroids become the means of the new clusters
            M = self._membership(labels, wv, k)
            F = KM(M)
            S = (M * F).sum(0)
            D = (diag[:, None] - 2.0 * F).add_(S[None, :]).clamp_min_(0.0)
        # the centroids are the means of the members used for the last assignment (M)
        mind = D.gather(1, labels[:, None])[:, 0]
        inertia = float(mind @ wv)
        return M, labels, inertia, it, S

    # -- inference -------------------------------------------------------------------------------
    def _distances(self, X):
        """Squared feature-space distances (n_queries, n_clusters) to the centroids."""
        check_is_fitted(self, "labels_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        if self.approximation is not None and hasattr(self, "kmeans_"):
            F = torch.as_tensor(self.approximation_.transform(Xt), dtype=self._dtype, device=self._device)
            return torch.as_tensor(self.kmeans_.transform(F), dtype=self._dtype, device=self._device) ** 2
        M = self.centroid_weights_
        op = KernelOperator(self.kernel_, Xt, self.X_fit_, memory_budget=self._budget, n_rhs=M.shape[1])
        D = (self.kernel_.diag(Xt)[:, None] - 2.0 * op.matvec(M)).add_(self._centroid_sq[None, :])
        return D.clamp_min_(0.0)

    def predict(self, X):
        """Index of the closest feature-space centroid."""
        return as_output(torch.argmin(self._distances(X), dim=1), X)

    def transform(self, X):
        """Feature-space distances (n, n_clusters) to the centroids."""
        return as_output(self._distances(X).sqrt_(), X)

    def fit_predict(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).labels_

    def fit_transform(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X, y=None):
        """Opposite of the feature-space distortion of ``X`` under the fitted centroids."""
        return -float(self._distances(X).min(dim=1).values.sum())

    @property
    def _n_features_out(self):
        return self.n_clusters

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
