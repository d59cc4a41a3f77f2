"""Clustering in input space and in feature space: k-means, kernel k-means, kernel agglomerative.

* :class:`KMeans` runs Lloyd's algorithm (the seeds' alternation of assignment and mean updates)
  on torch tensors. Squared distances are computed block by block as
  :math:`\\|x\\|^2 - 2 x^T c + \\|c\\|^2` (one GEMM per block of rows, blocks sized from the memory
  budget), so no ``n x k x d`` intermediate is ever formed. ``inertia_`` is the seeds' distortion
  :math:`J = \\sum_n \\|x_n - \\mu_{z_n}\\|^2 = \\|X - Z\\mu\\|_F^2`.
* :class:`KernelKMeans` runs the same iterations in the feature space of a kernel, with only kernel
  evaluations: the squared distance of :math:`\\phi(x)` to the mean of cluster :math:`C` is
  :math:`k(x, x) - \\frac{2}{|C|} \\sum_{j \\in C} k(x, j) + \\frac{1}{|C|^2} \\sum_{i, j \\in C} k(i, j)`;
  the middle term for all points is one blocked product ``K @ M`` with the (normalised) one-hot
  membership ``M``. With ``approximation="nystroem"`` or ``"rff"`` it runs :class:`KMeans` on
  explicit features instead (``O(n M)`` per iteration instead of ``O(n^2)``).
* :class:`KernelAgglomerative` builds a hierarchy with SciPy's linkage on feature-space distances.

Empty clusters (a centre that wins no point during an iteration) are re-seeded, as in
scikit-learn, with the points farthest from their current centre.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ... import _random as _rnd
from ..._backend import as_output, make_generator, row_sq_norms, to_numpy
from ..._validation import describe, is_torch
from ...linalg import KernelOperator, MemoryBudgetError, format_bytes, plan_blocks
from .._base import KernelEstimatorMixin

__all__ = ["KMeans", "KernelKMeans", "KernelAgglomerative", "plot_dendrogram"]

log = logging.getLogger(__name__)

#: Largest block of squared distances computed at once by k-means (GEMM outputs this size stay in
#: cache-friendly territory; larger ones only cost memory).
_KMEANS_TILE_BYTES = 4 * 2**20
#: Below this many clusters Lloyd's assignment runs without Hamerly's bounds (they do not pay off).
_MIN_CLUSTERS_FOR_BOUNDS = 24


# -- parameter checks ---------------------------------------------------------------------------
def _check_int(owner, name, value, low, *, allow_none=False):
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"The '{name}' parameter of {owner} must be an int in the range [{low}, inf)"
                         f"{' or None' if allow_none else ''}. Got {describe(value)} instead.")
    return int(value)


def _check_tol(owner, tol):
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not tol >= 0 or not math.isfinite(tol):
        raise ValueError(f"The 'tol' parameter of {owner} must be a float in the range [0, inf). Got {describe(tol)} instead.")
    return float(tol)


def _check_n_clusters(owner, n_clusters, n_samples):
    k = _check_int(owner, "n_clusters", n_clusters, 1)
    if k > n_samples:
        raise ValueError(f"n_samples={n_samples} should be >= n_clusters={k} ({owner}): cannot form more "
                         "clusters than there are samples.")
    return k


def _resolve_n_init(owner, n_init, init_is_array, init):
    if isinstance(n_init, str) and n_init == "auto":
        return 10 if (isinstance(init, str) and init == "random") else 1
    n = _check_int(owner, "n_init", n_init, 1) if not isinstance(n_init, str) else None
    if n is None:
        raise ValueError(f"The 'n_init' parameter of {owner} must be 'auto' or an int in the range [1, inf). Got {n_init!r} instead.")
    if init_is_array and n != 1:
        warnings.warn(f"Explicit initial center position passed: performing only one init in {owner} "
                      f"instead of n_init={n}.", RuntimeWarning, stacklevel=3)
        return 1
    return n


def _weights(est, sample_weight, n, dtype, device):
    sw = est._sample_weight(sample_weight, None, n)
    if sw is None:
        return None
    if not np.any(sw > 0):
        raise ValueError(f"{type(est).__name__}: sample_weight sums to zero; at least one sample needs a positive weight.")
    return torch.tensor(np.array(sw), dtype=dtype, device=device)


def _warn_distinct(owner, labels, k):
    found = int(torch.unique(labels).numel())
    if found < k:
        warnings.warn(f"Number of distinct clusters ({found}) found smaller than n_clusters ({k}) in {owner}. "
                      "Possibly due to duplicate points in X.", ConvergenceWarning, stacklevel=3)


# -- k-means++ over any squared-distance oracle ----------------------------------------------------
def _kmeans_plusplus(n, k, dist, w, gen, n_local_trials, rows):
    """Greedy k-means++ (Arthur & Vassilvitskii; scikit-learn's variant with local trials).

    ``dist(idx, sl)`` returns the ``(len(sl), len(idx))`` squared distances between the points of
    the row slice ``sl`` and the points ``idx``. ``w`` is ``None`` or the sample weights (n,).
    Returns the indices (k,) of the chosen seeds.
    """
    if n_local_trials is None:
        n_local_trials = 2 + int(math.log(k))
    slices = [slice(i, min(i + rows, n)) for i in range(0, n, rows)]

    def closest_to(idx):
        return torch.cat([dist(idx, s) for s in slices]).clamp_min_(0.0)

    # The draws are made on the CPU (same seeds on every device); the distances live on the data's.
    # Every pick is an inverse-CDF draw over the (weighted) masses, so integer sample weights give
    # exactly the seeds of the repeated rows.
    first = _rnd.categorical(gen, torch.ones(n, dtype=torch.float64) if w is None else w)
    closest = closest_to(first)[:, 0]
    device = closest.device
    centers = [int(first)]
    for _ in range(1, k):
        weighted = closest if w is None else closest * w
        cum = torch.cumsum(weighted.to(torch.float64), 0)
        pot = cum[-1]
        r = _rnd.rand(gen, (n_local_trials,), device=device) * pot
        cand = torch.searchsorted(cum, r).clamp_(max=n - 1)
        pots = torch.zeros(n_local_trials, dtype=torch.float64, device=device)
        for s in slices:
            D = torch.minimum(dist(cand, s).clamp_min_(0.0), closest[s, None])
            pots += (D.sum(0) if w is None else w[s] @ D).to(torch.float64)
        best = cand[int(torch.argmin(pots))]
        centers.append(int(best))
        closest = torch.minimum(closest, closest_to(best.reshape(1))[:, 0])
    return torch.as_tensor(centers, dtype=torch.long, device=device)


def _init_indices(init, n, k, dist, w, gen, n_local_trials, rows):
    if init == "k-means++":
        return _kmeans_plusplus(n, k, dist, w, gen, n_local_trials, rows)
    return _rnd.randperm(gen, n)[:k]


def _check_init(owner, init, k, d):
    """``init`` is 'k-means++', 'random' or an array of shape (k, d); returns it validated."""
    if isinstance(init, str):
        if init not in ("k-means++", "random"):
            raise ValueError(f"The 'init' parameter of {owner} must be 'k-means++', 'random' or an array of shape "
                             f"(n_clusters, n_features). Got {init!r} instead.")
        return init
    if callable(init):
        raise ValueError(f"The 'init' parameter of {owner} must be 'k-means++', 'random' or an array; callables "
                         "are not supported.")
    arr = to_numpy(init) if is_torch(init) else np.asarray(init, dtype=np.float64)
    if arr.ndim != 2 or arr.shape != (k, d):
        raise ValueError(f"The shape of the initial centers {arr.shape} does not match the number of clusters "
                         f"{k} and features {d}: init must have shape (n_clusters, n_features) = ({k}, {d}) ({owner}).")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"init of {owner} contains NaN or infinity.")
    return arr


# == KMeans ========================================================================================
class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, KernelEstimatorMixin, BaseEstimator):
    """k-means clustering by Lloyd's algorithm on torch tensors (scikit-learn's ``KMeans`` API).

    Minimises the distortion :math:`J = \\sum_n w_n \\|x_n - \\mu_{z_n}\\|^2` by alternating the
    assignment :math:`z_n = \\arg\\min_k \\|x_n - \\mu_k\\|^2` and the mean update. Distances are
    computed block by block (``||x||^2 - 2 x.c + ||c||^2``, one GEMM per block of rows sized from
    ``memory_budget``); the data are centred first, as scikit-learn does, for accuracy.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "random"} or array of shape (n_clusters, n_features), default="k-means++"
        "k-means++" is the greedy variant of scikit-learn (``2 + log(k)`` local trials per centre).
    n_init : "auto" or int, default="auto"
        Restarts; the run with the lowest inertia is kept. "auto": 10 for ``init="random"``, else 1.
    max_iter : int, default=300
    tol : float, default=1e-4
        Convergence when the squared shift of the centres, summed, is at most ``tol`` times the mean
        per-feature variance of X (scikit-learn's rule), or when the labels stop changing.
    n_local_trials : int, optional
        Candidates tried per k-means++ centre; default ``2 + int(log(n_clusters))``.
    random_state : int, RandomState or None
    device, dtype, memory_budget : as in :class:`mercer.models.KernelRidge`.

    Attributes
    ----------
    cluster_centers_ : array of shape (n_clusters, n_features) (numpy for numpy input, tensor for tensor input)
    labels_ : array of shape (n_samples,)
    inertia_ : float
        Sum of (weighted) squared distances of the samples to their closest centre.
    n_iter_ : int
        Lloyd iterations of the kept run.

    Notes
    -----
    Empty clusters are re-seeded with the points farthest from their current centre (scikit-learn's
    rule). When X has fewer distinct points than ``n_clusters`` a ``ConvergenceWarning`` is issued.
    """

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300, tol=1e-4,
                 n_local_trials=None, random_state=None, device=None, dtype=None, memory_budget=None):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.n_local_trials = n_local_trials
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- blocked building blocks ----------------------------------------------------------------
    def _rows(self, n, k, d, itemsize):
        plan = plan_blocks(n, k, d, itemsize=itemsize, budget=self._budget, scratch=1.0, n_rhs=1,
                           max_tile_bytes=_KMEANS_TILE_BYTES)
        return plan.row_block if plan.full_width else max(1, min(n, plan.row_block))

    def _assign(self, X, x_sq, C, rows, *, w=None, sums=None):
        """Labels and squared distances to the closest centre; accumulates per-cluster sums."""
        n = X.shape[0]
        labels = torch.empty(n, dtype=torch.long, device=X.device)
        mind = torch.empty(n, dtype=X.dtype, device=X.device)
        c_sq = (C * C).sum(1)[None, :]
        Ct = C.T.contiguous()
        for i in range(0, n, rows):
            s = slice(i, min(i + rows, n))
            D = torch.addmm(c_sq, X[s], Ct, alpha=-2.0)
            m, lab = torch.min(D, dim=1)
            mind[s] = m.add_(x_sq[s])
            labels[s] = lab
            if sums is not None:  # index_put_ accumulates far faster than index_add_ on CPU
                sums.index_put_((lab,), X[s] if w is None else X[s] * w[s, None], accumulate=True)
        return labels, mind.clamp_min_(0.0)

    def _top2(self, X, x_sq, C, rows, second=True):
        """Exact pass: labels (first index on ties) and the two smallest squared distances
        (the second only when ``second``; else it stays +inf)."""
        n, k = X.shape[0], C.shape[0]
        labels = torch.empty(n, dtype=torch.long, device=X.device)
        d1 = torch.empty(n, dtype=X.dtype, device=X.device)
        d2 = torch.full((n,), math.inf, dtype=X.dtype, device=X.device)
        c_sq = (C * C).sum(1)[None, :]
        Ct = C.T.contiguous()
        for i in range(0, n, rows):
            s = slice(i, min(i + rows, n))
            D = torch.addmm(c_sq, X[s], Ct, alpha=-2.0)
            m, lab = torch.min(D, dim=1)  # first index on ties, as scikit-learn
            labels[s], d1[s] = lab, m + x_sq[s]
            if second and k > 1:  # (torch.topk is several times slower than two min passes here)
                d2[s] = D.scatter_(1, lab[:, None], math.inf).min(dim=1).values + x_sq[s]
        return labels, d1.clamp_min_(0.0), d2.clamp_min_(0.0)

    @staticmethod
    def _own_sq(X, C, labels, rows):
        """Exact ``||x_i - c_{labels_i}||^2`` by subtraction (no cancellation), blocked."""
        out = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
        for i in range(0, X.shape[0], rows):
            s = slice(i, min(i + rows, X.shape[0]))
            out[s] = ((X[s] - C[labels[s]]) ** 2).sum(1)
        return out

    def _lloyd(self, X, x_sq, C, w, tol, rows):
        """Lloyd's iterations; assignments skip the points that Hamerly's bounds prove unchanged.

        ``u`` bounds from above the distance to the assigned centre, ``l`` from below the distance
        to every other centre; after the centres move by ``delta``, ``u += delta[own]`` and
        ``l -= max(delta)``. A point with ``u < max(l, s/2)`` (``s``: distance from its centre to
        the nearest other centre) keeps its label, so only the others are recomputed, exactly --
        the labels are those of plain Lloyd, at a fraction of the cost once few points move.
        With fewer than ``_MIN_CLUSTERS_FOR_BOUNDS`` centres every step is a plain blocked pass.
        """
        n, k = X.shape[0], C.shape[0]
        eps = torch.finfo(X.dtype).eps
        # with few centres a plain pass costs little more than checking the bounds
        bounds = k >= _MIN_CLUSTERS_FOR_BOUNDS
        labels, d1, d2 = self._top2(X, x_sq, C, rows, second=bounds)
        u, l = d1.sqrt(), d2.sqrt()
        labels_old = None
        strict = False
        it = 0
        Xw = X if w is None else X * w[:, None]
        for it in range(1, self.max_iter + 1):
            if it > 1 and not bounds:
                labels = self._top2(X, x_sq, C, rows, second=False)[0]
            elif it > 1:  # bounded assignment step for the current centres C
                margin = math.sqrt(64 * eps * float(x_sq.max() + (C * C).sum(1).max()))
                cc = torch.cdist(C, C)
                cc.fill_diagonal_(math.inf)
                thr = torch.maximum(l, cc.min(1).values[labels] / 2) - margin
                idx = torch.nonzero(u > thr)[:, 0]
                if idx.numel() > n // 2:  # most points may move: one plain pass is cheaper
                    labels, d1, d2 = self._top2(X, x_sq, C, rows)
                    u, l = d1.sqrt_(), d2.sqrt_()
                    idx = idx[:0]
                if idx.numel():
                    u[idx] = self._own_sq(X[idx], C, labels[idx], rows).sqrt_()
                    idx = idx[u[idx] > thr[idx]]
                if idx.numel():
                    lab_i, d1_i, d2_i = self._top2(X[idx], x_sq[idx], C, rows)
                    labels = labels.clone()
                    labels[idx], u[idx], l[idx] = lab_i, d1_i.sqrt_(), d2_i.sqrt_()
            # update step
            sums = torch.zeros_like(C).index_put_((labels,), Xw, accumulate=True)
            counts = torch.bincount(labels, weights=w, minlength=k).to(X.dtype)
            empty = torch.nonzero(counts == 0)[:, 0]
            if empty.numel():
                # scikit-learn's rule: move each empty centre onto one of the farthest points.
                far = torch.topk(self._own_sq(X, C, labels, rows), empty.numel()).indices
                for e, f in zip(empty.tolist(), far.tolist()):
                    wf = 1.0 if w is None else w[f]
                    sums[labels[f]] -= X[f] * wf
                    counts[labels[f]] -= wf
                    sums[e] = X[f] * wf
                    counts[e] = wf
            C_new = torch.where((counts > 0)[:, None], sums / counts.clamp_min(torch.finfo(X.dtype).tiny)[:, None], C)
            delta = ((C_new - C) ** 2).sum(1)
            shift = float(delta.sum())
            delta.sqrt_()
            C = C_new
            if bounds:
                top = torch.topk(delta, 2).values
                far_other = torch.where(delta[labels] == top[0], top[1], top[0])
                l.sub_(far_other)
            u.add_(delta[labels])
            if labels_old is not None and torch.equal(labels, labels_old):
                strict = True
                break
            if shift <= tol:
                break
            labels_old = labels
        labels = self._top2(X, x_sq, C, rows, second=False)[0]
        mind = self._own_sq(X, C, labels, rows)
        inertia = float(mind.sum() if w is None else (mind * w).sum())
        return C, labels, inertia, it, strict

    # -- fit -------------------------------------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None):
        """Cluster ``X`` (n, d); ``sample_weight`` (n,) weighs the distortion and the means."""
        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        n, d = Xv.shape
        k = _check_n_clusters(owner, self.n_clusters, n)
        _check_int(owner, "max_iter", self.max_iter, 1)
        tol = _check_tol(owner, self.tol)
        _check_int(owner, "n_local_trials", self.n_local_trials, 1, allow_none=True)
        init = _check_init(owner, self.init, k, d)
        n_init = _resolve_n_init(owner, self.n_init, not isinstance(init, str), self.init)
        self._setup_compute(Xv)
        Xt = self._tensor(Xv)
        w = _weights(self, sample_weight, n, Xt.dtype, Xt.device)
        mean = Xt.mean(0)
        Xt = Xt - mean  # centred copy: distances are invariant, round-off is smaller
        x_sq = row_sq_norms(Xt)
        tol_abs = float(Xt.var(0, unbiased=False).mean()) * tol if tol else 0.0
        rows = self._rows(n, k, d, Xt.element_size())
        gen = make_generator(self.random_state)  # CPU draws: the same seeds on every device

        def dist(idx, s):
            return torch.addmm(x_sq[s, None] + x_sq[idx][None, :], Xt[s], Xt[idx].T, alpha=-2.0)

        seed_rows = self._rows(n, 2 + int(math.log(k)) if self.n_local_trials is None else self.n_local_trials, d,
                               Xt.element_size())
        t0 = time.perf_counter()
        best = None
        for run in range(n_init):
            if isinstance(init, str):
                C0 = Xt[_init_indices(init, n, k, dist, w, gen, self.n_local_trials, seed_rows)].clone()
            else:
                C0 = torch.tensor(np.array(init), dtype=Xt.dtype, device=Xt.device) - mean
            C, labels, inertia, n_iter, strict = self._lloyd(Xt, x_sq, C0, w, tol_abs, rows)
            log.debug("%s: run %d, inertia %.6g after %d iterations", owner, run, inertia, n_iter)
            if best is None or inertia < best[2]:
                best = (C, labels, inertia, n_iter, strict)
        C, labels, inertia, n_iter, strict = best
        _warn_distinct(owner, labels, k)
        self._centers = C + mean
        self.cluster_centers_ = as_output(self._centers, X)
        self.labels_ = as_output(labels, X)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: n=%d, k=%d, inertia %.6g, %d iterations, %.2f s", owner, n, k, inertia, n_iter, self.fit_time_)
        return self

    def fit_predict(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).labels_

    # -- inference -------------------------------------------------------------------------------
    def _query(self, X):
        check_is_fitted(self, "_centers")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        return Xt

    def _assign_new(self, X):
        Xt = self._query(X)
        rows = self._rows(Xt.shape[0], self._centers.shape[0], Xt.shape[1], Xt.element_size())
        return self._assign(Xt, row_sq_norms(Xt), self._centers, rows)

    def predict(self, X):
        """Index of the closest centre for each row of ``X``."""
        labels, _ = self._assign_new(X)
        return as_output(labels, X)

    def transform(self, X):
        """Euclidean distances (n, n_clusters) to every centre."""
        Xt = self._query(X)
        C = self._centers
        rows = self._rows(Xt.shape[0], C.shape[0], Xt.shape[1], Xt.element_size())
        c_sq = (C * C).sum(1)[None, :]
        out = torch.empty(Xt.shape[0], C.shape[0], dtype=Xt.dtype, device=Xt.device)
        for i in range(0, Xt.shape[0], rows):
            s = slice(i, i + rows)
            out[s] = torch.addmm(c_sq, Xt[s], C.T, alpha=-2.0).add_((Xt[s] * Xt[s]).sum(1)[:, None])
        return as_output(out.clamp_min_(0.0).sqrt_(), X)

    def fit_transform(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the (weighted) distortion of ``X`` under the fitted centres."""
        _, mind = self._assign_new(X)
        if sample_weight is not None:
            sw = self._sample_weight(sample_weight, None, mind.shape[0])
            return -float((mind * torch.tensor(np.asarray(sw), dtype=mind.dtype, device=mind.device)).sum())
        return -float(mind.sum())

    @property
    def _n_features_out(self):
        return self._centers.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


# == KernelKMeans ==================================================================================
_APPROXIMATIONS = (None, "nystroem", "rff")


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
        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        n, d = Xv.shape
        k = _check_n_clusters(owner, self.n_clusters, n)
        _check_int(owner, "max_iter", self.max_iter, 1)
        tol = _check_tol(owner, self.tol)
        init = _check_init(owner, self.init, k, d)
        n_init = _resolve_n_init(owner, self.n_init, not isinstance(init, str), self.init)
        if self.approximation not in _APPROXIMATIONS:
            raise ValueError(f"The 'approximation' parameter of {owner} must be None, 'nystroem' or 'rff'. "
                             f"Got {self.approximation!r} instead.")
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} does not support kernel='precomputed': it needs kernel values at new "
                             "points for predict; pass the kernel itself (a name or a mercer Kernel).")
        t0 = time.perf_counter()
        if self.approximation is not None:
            self._fit_approx(Xv, X, sample_weight, init, n_init, k)
        else:
            self._fit_exact(Xv, X, sample_weight, init, n_init, k, tol)
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: n=%d, k=%d, inertia %.6g, %d iterations, %.2f s", owner, n, k, self.inertia_, self.n_iter_,
                 self.fit_time_)
        return self

    def _make_approximation(self):
        owner = type(self).__name__
        _check_int(owner, "n_components", self.n_components, 1)
        try:
            from ...approx import Nystroem, RandomFourierFeatures
        except ImportError as exc:  # pragma: no cover - depends on the approx module's progress
            raise ImportError(f"{owner}(approximation={self.approximation!r}) needs mercer.approx.Nystroem and "
                              "RandomFourierFeatures, which this installation lacks.") from exc
        cls = Nystroem if self.approximation == "nystroem" else RandomFourierFeatures
        accepted = set(inspect.signature(cls.__init__).parameters)
        params = dict(kernel=self.kernel_, n_components=self.n_components, random_state=self.random_state,
                      device=self._device, dtype=self._dtype, memory_budget=self.memory_budget)
        return cls(**{key: v for key, v in params.items() if key in accepted})

    def _fit_approx(self, Xv, X, sample_weight, init, n_init, k):
        self.approximation_ = self._make_approximation()
        Xt = self._tensor(Xv)
        F = self.approximation_.fit_transform(Xt)
        F = torch.as_tensor(F, dtype=self._dtype, device=self._device)
        if not isinstance(init, str):
            init = torch.as_tensor(self.approximation_.transform(self._tensor(init)), dtype=self._dtype,
                                   device=self._device)
        self.kmeans_ = KMeans(k, init=init, n_init=n_init, max_iter=self.max_iter, tol=self.tol,
                              random_state=self.random_state, device=self._device, dtype=self._dtype,
                              memory_budget=self.memory_budget)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.kmeans_.fit(F, sample_weight=sample_weight)
        self.labels_ = as_output(self.kmeans_.labels_, X)
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

    def _fit_exact(self, Xv, X, sample_weight, init, n_init, k, tol):
        owner = type(self).__name__
        Xt = self._tensor(Xv)
        n = Xt.shape[0]
        w = _weights(self, sample_weight, n, Xt.dtype, Xt.device)
        wv = torch.ones(n, dtype=Xt.dtype, device=Xt.device) if w is None else w
        diag = self.kernel_.diag(Xt)
        K = self._gram(Xt)
        op = None if K is not None else KernelOperator(self.kernel_, Xt, memory_budget=self._budget, n_rhs=k + 1)

        def KM(M):
            return K @ M if K is not None else op.matvec(M)

        # total feature-space variance per unit weight: mean k(x,x) - ||weighted mean of phi||^2
        p = wv / wv.sum()
        mean_sq = float(p @ KM(p[:, None])[:, 0])
        self.total_variance_ = max(float(p @ diag) - mean_sq, 0.0)
        tol_abs = tol * self.total_variance_

        def cross(idx, s):
            Kc = K[s][:, idx] if K is not None else self.kernel_(Xt[s], Xt[idx])
            return (diag[s, None] + diag[idx][None, :]).sub_(Kc, alpha=2.0)

        plan = plan_blocks(n, 8, Xt.shape[1], itemsize=Xt.element_size(), budget=self._budget,
                           scratch=self.kernel_.scratch(Xt.shape[1]))
        rows = plan.row_block
        gen = make_generator(self.random_state)  # CPU draws: the same seeds on every device
        best = None
        for run in range(n_init):
            if isinstance(init, str):
                idx = _init_indices(init, n, k, cross, w, gen, None, rows)
                D0 = torch.cat([cross(idx, slice(i, i + rows)) for i in range(0, n, rows)])
            else:
                C = self._tensor(init)
                Kc = torch.cat([self.kernel_(Xt[i:i + rows], C) for i in range(0, n, rows)])
                D0 = (diag[:, None] + self.kernel_.diag(C)[None, :]).sub_(Kc, alpha=2.0)
            labels = self._reseed(*torch.min(D0.clamp_min_(0.0), dim=1), k, wv)
            result = self._kernel_lloyd(KM, diag, labels, wv, k, tol_abs)
            log.debug("%s: run %d, inertia %.6g after %d iterations", owner, run, result[2], result[3])
            if best is None or result[2] < best[2]:
                best = result
        M, labels, inertia, n_iter, S = best
        _warn_distinct(owner, labels, k)
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


# == KernelAgglomerative ===========================================================================
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

    def _condensed(self, Xt):
        n = Xt.shape[0]
        m = n * (n - 1) // 2
        need = m * 8
        if need > self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the {m} condensed pairwise distances of {n} samples need "
                f"{format_bytes(need)}, more than the memory budget of {format_bytes(self._budget)}. Raise "
                "memory_budget, subsample, or use KernelKMeans(approximation='nystroem') for large n.")
        out = np.empty(m, dtype=np.float64)
        diag = self.kernel_.diag(Xt)
        plan = plan_blocks(n, n, Xt.shape[1], itemsize=Xt.element_size(), budget=max(self._budget - need, 1),
                           scratch=self.kernel_.scratch(Xt.shape[1]))
        rows = plan.row_block if plan.full_width else max(1, plan.row_block)
        for i in range(0, n - 1, rows):
            s = slice(i, min(i + rows, n - 1))
            # only columns right of the block's first row are ever read
            K = self.kernel_(Xt[s], Xt[i + 1:])
            D = (diag[s, None] + diag[None, i + 1:]).sub_(K, alpha=2.0).clamp_min_(0.0).sqrt_()
            D = D.to(torch.float64).cpu().numpy()
            for r in range(s.start, s.stop):
                start = r * n - r * (r + 1) // 2
                out[start:start + n - 1 - r] = D[r - i, r - i:]
        return out

    def fit(self, X, y=None):
        from scipy.cluster import hierarchy

        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        n = Xv.shape[0]
        if self.linkage not in _LINKAGES:
            raise ValueError(f"The 'linkage' parameter of {owner} must be a str among {list(_LINKAGES)}. "
                             f"Got {self.linkage!r} instead.")
        if (self.n_clusters is None) == (self.distance_threshold is None):
            raise ValueError(f"{owner}: exactly one of n_clusters and distance_threshold has to be set, and the "
                             f"other needs to be None (got n_clusters={self.n_clusters!r}, "
                             f"distance_threshold={self.distance_threshold!r}).")
        if self.n_clusters is not None:
            _check_n_clusters(owner, self.n_clusters, n)
        elif (not isinstance(self.distance_threshold, numbers.Real) or isinstance(self.distance_threshold, bool)
              or not self.distance_threshold >= 0):
            raise ValueError(f"The 'distance_threshold' parameter of {owner} must be a float in the range [0, inf) "
                             f"or None. Got {describe(self.distance_threshold)} instead.")
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} does not support kernel='precomputed'; pass the kernel itself.")
        if n < 2:
            self.children_ = np.zeros((0, 2), dtype=np.intp)
            self.distances_ = np.zeros(0)
            self.counts_ = np.zeros(0, dtype=np.intp)
        else:
            Z = hierarchy.linkage(self._condensed(self._tensor(Xv)), method=self.linkage)
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
    from scipy.cluster import hierarchy

    check_is_fitted(model, "children_")
    if ax is None and not kwargs.get("no_plot", False):
        import matplotlib.pyplot as plt

        ax = plt.gca()
    Z = np.column_stack([model.children_, model.distances_, model.counts_]).astype(np.float64)
    return hierarchy.dendrogram(Z, ax=ax, **kwargs)
