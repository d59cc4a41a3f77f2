"""Nearest neighbours in the feature space of a kernel: k-NN and radius-NN, classifier and regressor.

The feature-space distance is :math:`d(x, z)^2 = k(x, x) + k(z, z) - 2 k(x, z)` (tiny negative values
from round-off are clamped to 0). Queries are processed in blocks of rows and training samples in
blocks of columns, both sized from the memory budget: each tile of ``K(X_query, X_train)`` is turned
into distances, reduced to its ``k`` smallest per row (``torch.topk``) or to the entries within the
radius, and merged with the running result -- no ``n_query x n_train`` matrix beyond one tile.

With the linear kernel the distance is Euclidean and the estimators reproduce scikit-learn's
``KNeighbors*`` / ``RadiusNeighbors*`` (brute force). Ties: among samples at exactly the same
distance the one with the lower training index comes first, and is the one kept when the tie falls
on the ``k``-th place (scikit-learn's brute-force heap behaves the same way). For the RBF (and any
isotropic stationary) kernel the distance is a monotone function of the Euclidean one, so the
neighbours are the Euclidean ones and only distance weights differ; the Laplacian kernel gives L1
neighbours.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..._backend import as_output, to_numpy
from ..._sparse import plan_features
from ..._validation import Interval, Options, check_at_most, check_param, check_params, is_torch
from ...linalg import DISTANCE_TILE_BYTES, MemoryBudgetError, format_bytes, plan_blocks, plan_rows, row_blocks
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin, labels_like

__all__ = [
    "KernelKNeighborsClassifier",
    "KernelKNeighborsRegressor",
    "KernelRadiusNeighborsClassifier",
    "KernelRadiusNeighborsRegressor",
]


_N_NEIGHBORS = [Interval(Integral, 1, None, closed="left")]
_RADIUS = [Interval(Real, 0, math.inf, closed="left")]
#: Parameters shared by the four estimators.
_NEIGHBORS_CONSTRAINTS: dict = {
    **KERNEL_CONSTRAINTS,
    **COMPUTE_CONSTRAINTS,
    "weights": [Options("uniform", "distance"), "callable"],
}


def _get_weights(dist: np.ndarray, weights):
    """scikit-learn's rule: None for uniform; 1/d for "distance" (rows holding a zero distance give
    weight 1 to those neighbours and 0 to the others); a callable maps the distance array."""
    if weights == "uniform":
        return None
    if weights == "distance":
        if dist.dtype is np.dtype(object):
            return np.array([_get_weights(d[None, :], "distance")[0] if len(d) else d for d in dist], dtype=object)
        with np.errstate(divide="ignore"):
            w = 1.0 / dist
        inf_mask = np.isinf(w)
        inf_row = np.any(inf_mask, axis=1)
        w[inf_row] = inf_mask[inf_row]
        return w
    return weights(dist)


class _NeighborsBase(KernelEstimatorMixin, BaseEstimator):
    """Fitting and blocked neighbour search shared by the four estimators."""

    _classifier = False
    _saved_private = ("_y",)  # private state that mercer.io saves

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: the memory budget and ``k(x, x)`` of the training points."""
        super()._after_load()
        self._diag_fit = self.kernel_.diag(self.X_fit_)

    def _fit(self, X, y):
        check_params(self)
        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} does not support kernel='precomputed': the distances need k(x, x) at the "
                             "queries; pass the kernel itself (a name or a mercer Kernel).")
        if y is None:
            raise ValueError(f"{owner} requires y to be passed, but the target y is None.")
        y = to_numpy(y) if is_torch(y) else np.asarray(y)
        if y.shape[0] != Xv.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: [{Xv.shape[0]}, {y.shape[0]}]")
        if self._classifier:
            if y.ndim == 2 and y.shape[1] == 1:
                y = column_or_1d(y, warn=True)
            if y.ndim != 1:
                raise ValueError(f"{owner} supports 1-D class labels only; got y of shape {y.shape}.")
            check_classification_targets(y)
            self.classes_, self._y = np.unique(y, return_inverse=True)
        else:
            y = self._validate_y(y, Xv.shape[0])
            self._y = y
        self.X_fit_ = self._tensor(Xv)
        self._diag_fit = self.kernel_.diag(self.X_fit_)
        self.n_samples_fit_ = int(Xv.shape[0])
        return self

    def _queries(self, X):
        check_is_fitted(self, "X_fit_")
        if X is None:
            return self.X_fit_, True
        Xv = self._validate_X(X, reset=False)
        return self._tensor(Xv), False

    def _query_plan(self, nq, width):
        d = self.X_fit_.shape[1]
        plan = plan_blocks(nq, self.n_samples_fit_, plan_features(self.X_fit_), itemsize=self.X_fit_.element_size(), budget=self._budget,
                           scratch=self.kernel_.scratch(d) + 1.0, n_rhs=max(1, width), max_tile_bytes=DISTANCE_TILE_BYTES)
        return plan.row_block, plan.col_block

    def _dist2(self, Q, q_diag, cols):
        # in place in the kernel's tile: a second tile-sized block per tile, freed and reallocated
        # tile after tile, stayed resident in glibc's heap (k-NN at 64 MiB: 95 MiB, now 68)
        K = self.kernel_(Q, self.X_fit_[cols])
        return K.mul_(-2.0).add_(q_diag[:, None]).add_(self._diag_fit[None, cols]).clamp_min_(0.0)

    # -- k nearest -------------------------------------------------------------------------------
    def _kneighbors_tensor(self, Q, k):
        """(dist2, index) of the ``k`` nearest training samples, by (distance, index), shape (nq, k)."""
        nq, n = Q.shape[0], self.n_samples_fit_
        rows, cols = self._query_plan(nq, 2 * k)
        q_diag = self.kernel_.diag(Q)
        out_d = torch.empty(nq, k, dtype=Q.dtype, device=Q.device)
        out_i = torch.empty(nq, k, dtype=torch.long, device=Q.device)
        for r in row_blocks(nq, rows, desc="nearest neighbours"):
            best_d = best_i = None
            for c in row_blocks(n, cols):  # training samples, in blocks of columns
                D = self._dist2(Q[r], q_diag[r], c)
                kk = min(k, D.shape[1])
                vals, idx = _smallest(D, kk)
                del D  # the next block's distances are planned to replace these, not to join them
                idx = idx + c.start
                if best_d is None:
                    best_d, best_i = vals, idx
                else:
                    best_d, best_i = _merge(torch.cat([best_d, vals], 1), torch.cat([best_i, idx], 1), k)
            out_d[r], out_i[r] = best_d, best_i
        return out_d, out_i

    def _check_k(self, n_neighbors, query_is_train):
        """``n_neighbors`` (the parameter or ``kneighbors``'s argument) checked against the training
        set; a query on the training set excludes each sample itself, so it leaves one fewer."""
        owner = type(self).__name__
        check_param(owner, "n_neighbors", n_neighbors, _N_NEIGHBORS)
        n = self.n_samples_fit_
        if query_is_train:
            check_at_most(owner, "n_neighbors", n_neighbors, n - 1, "n_samples - 1")
        else:
            check_at_most(owner, "n_neighbors", n_neighbors, n, "n_samples")
        return int(n_neighbors)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Indices of (and feature-space distances to) the ``n_neighbors`` nearest training samples.

        ``X=None`` queries the training set, each sample excluding itself (as scikit-learn).
        Returns ``(dist, ind)`` of shape (n_queries, n_neighbors), or ``ind`` alone.
        """
        Q, query_is_train = self._queries(X)
        k = self._check_k(self.n_neighbors if n_neighbors is None else n_neighbors, query_is_train)
        d2, ind = self._kneighbors_tensor(Q, k + int(query_is_train))
        if query_is_train:
            own = torch.arange(Q.shape[0], device=Q.device)[:, None]
            mask = ind != own
            dup = mask.all(1)  # duplicates outnumber the neighbours: drop the first instead
            mask[dup, 0] = False
            d2 = d2[mask].reshape(Q.shape[0], k)
            ind = ind[mask].reshape(Q.shape[0], k)
        ind = as_output(ind, X if X is not None else np.empty(0))
        if not return_distance:
            return ind
        return as_output(d2.sqrt_(), X if X is not None else np.empty(0)), ind

    # -- radius ----------------------------------------------------------------------------------
    def _check_radius(self, radius):
        check_param(type(self).__name__, "radius", radius, _RADIUS)
        return float(radius)

    #: Size in bytes of one neighbour of a radius query in its lists: a float64 distance and an index.
    _NEIGHBOUR_SIZE = np.dtype(np.float64).itemsize + np.dtype(np.intp).itemsize

    def _radius_plan(self, nq):
        """(query rows, training columns) of a radius search. The neighbour lists of a block of queries
        take the plan's ``"neighbour lists"`` share, sized for their worst case (every training sample
        within the radius); the distance tiles, and what is cut from them, the rest."""
        n, d, item = self.n_samples_fit_, self.X_fit_.shape[1], self.X_fit_.element_size()
        lists = self._plan.share("neighbour lists")
        # twice: a block's per-tile pieces and their concatenation are both held while it is gathered
        rows = plan_rows(nq, 2 * n * self._NEIGHBOUR_SIZE, budget=lists, max_bytes=None,
                         what=f"{type(self).__name__}: the neighbour lists of one query")
        # besides the distances: the mask, and the distances and (int64) indices within the radius
        cut = 1.0 + (1 + torch.empty(0, dtype=torch.long).element_size()) / item
        plan = plan_blocks(nq, n, d, itemsize=item, budget=self._plan.holding(lists).budget,
                           scratch=max(self.kernel_.scratch(d) + 1.0, cut + 1.0), n_rhs=2,
                           max_tile_bytes=DISTANCE_TILE_BYTES)
        return min(rows, plan.row_block), plan.col_block

    def _within(self, Q, q_diag, r2, cols):
        """Per query of the block ``Q``: lists of the distances and indices of the training samples
        at squared distance ``<= r2``, one array per block of training columns that has any."""
        nb = Q.shape[0]
        parts_d, parts_i = [[] for _ in range(nb)], [[] for _ in range(nb)]
        for c in row_blocks(self.n_samples_fit_, cols):  # training samples, in blocks of columns
            D = self._dist2(Q, q_diag, c)
            hit = D <= r2
            counts = to_numpy(hit.sum(1))
            if not counts.any():
                del D, hit
                continue
            vals = D[hit].sqrt_()  # row by row, columns ascending
            del D  # the next block's distances are planned to replace these, not to join them
            idx = torch.arange(c.start, c.stop, device=Q.device).expand(nb, -1)[hit]
            del hit
            vals, idx = np.asarray(to_numpy(vals), dtype=np.float64), to_numpy(idx)
            splits = np.cumsum(counts)[:-1]
            for q, (dv, iv) in enumerate(zip(np.split(vals, splits), np.split(idx, splits))):
                if len(iv):
                    parts_d[q].append(dv)
                    parts_i[q].append(iv)
        return parts_d, parts_i

    def _radius_blocks(self, Q, query_is_train, r, sort_results=False):
        """The neighbours within ``radius`` block by block of queries: ``(rows, dist, ind)`` with the
        object arrays of the block's queries (:meth:`radius_neighbors` for one block), so that a
        prediction holds the lists of one block at a time."""
        nq = Q.shape[0]
        rows, cols = self._radius_plan(nq)
        q_diag = self.kernel_.diag(Q)
        for rs in row_blocks(nq, rows, desc="radius neighbours"):
            parts_d, parts_i = self._within(Q[rs], q_diag[rs], r * r, cols)
            nb = rs.stop - rs.start
            dist, ind = np.empty(nb, dtype=object), np.empty(nb, dtype=object)
            for q in range(nb):
                dq = np.concatenate(parts_d[q]) if parts_d[q] else np.zeros(0)
                iq = np.concatenate(parts_i[q]) if parts_i[q] else np.zeros(0, dtype=np.intp)
                parts_d[q] = parts_i[q] = None
                if query_is_train:
                    keep = iq != rs.start + q
                    dq, iq = dq[keep], iq[keep]
                if sort_results:
                    order = np.lexsort((iq, dq))
                    dq, iq = dq[order], iq[order]
                dist[q], ind[q] = dq, iq.astype(np.intp, copy=False)
            yield rs, dist, ind

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """Training samples within ``radius`` (feature-space distance ``<= radius``) of each query.

        Returns object arrays of per-query arrays, as scikit-learn: ``(dist, ind)`` or ``ind``.
        Neighbours are in index order, or by increasing distance (ties by index) with ``sort_results``.
        ``X=None`` queries the training set, each sample excluding itself. The lists returned are
        held within the plan's ``"neighbour lists"`` share: more is a :class:`MemoryBudgetError`
        (``predict`` needs no such lists: it holds one block of queries' at a time).
        """
        Q, query_is_train = self._queries(X)
        r = self._check_radius(self.radius if radius is None else radius)
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        nq = Q.shape[0]
        cap = plan_rows(max(nq, 1) * self.n_samples_fit_, self._NEIGHBOUR_SIZE,
                        budget=self._plan.share("neighbour lists"), max_bytes=None)
        dist = np.empty(nq, dtype=object)
        ind = np.empty(nq, dtype=object)
        held = 0
        for rs, d_b, i_b in self._radius_blocks(Q, query_is_train, r, sort_results):
            held += sum(len(i) for i in i_b)
            if held > cap:
                raise MemoryBudgetError(
                    f"{type(self).__name__}.radius_neighbors: the neighbours of the first {rs.stop:,} of {nq:,} "
                    f"queries are already {held:,}, more than the {cap:,} whose lists fit the memory budget of "
                    f"{format_bytes(self._budget)}. Query fewer rows at a time, use a smaller radius, or raise "
                    "memory_budget (predict holds one block of queries' neighbours at a time).")
            dist[rs], ind[rs] = d_b, i_b
        return (dist, ind) if return_distance else ind

    def _radius_votes(self, X):
        """What a radius prediction reads: the number of queries, and an iterator over blocks of
        queries of ``(rows, weights, ind)`` (``weights`` None when uniform)."""
        Q, query_is_train = self._queries(X)
        r = self._check_radius(self.radius)
        blocks = ((rs, None if self.weights == "uniform" else _get_weights(dist, self.weights), ind)
                  for rs, dist, ind in self._radius_blocks(Q, query_is_train, r))
        return Q.shape[0], blocks

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _smallest(D, k):
    """The ``k`` smallest entries of each row with ties broken by column index (lowest first)."""
    vals, idx = torch.topk(D, k, dim=1, largest=False, sorted=True)
    if k == D.shape[1]:
        return _merge(vals, idx, k)
    # a tie straddling the k-th place: topk may keep any of the tied columns; redo those rows stably
    tied = (D <= vals[:, -1:]).sum(1) > k
    if bool(tied.any()):
        rows = torch.nonzero(tied)[:, 0]
        sv, si = torch.sort(D[rows], dim=1, stable=True)
        vals[rows], idx[rows] = sv[:, :k], si[:, :k]
    return _merge(vals, idx, k)


def _merge(vals, idx, k):
    """Keep the ``k`` best (distance, index) pairs of each row, sorted by distance then index."""
    order = torch.argsort(idx, dim=1)
    vals, idx = vals.gather(1, order), idx.gather(1, order)
    order = torch.argsort(vals, dim=1, stable=True)[:, :k]
    return vals.gather(1, order), idx.gather(1, order)


# -- k-NN estimators --------------------------------------------------------------------------------
class _KNeighborsMixin:
    def _neighbour_weights(self, X):
        if self.weights == "uniform":
            return None, self.kneighbors(X, return_distance=False)
        dist, ind = self.kneighbors(X)
        return _get_weights(np.asarray(to_numpy(dist) if is_torch(dist) else dist, dtype=np.float64), self.weights), ind


class KernelKNeighborsClassifier(_KNeighborsMixin, ClassifierMixin, _NeighborsBase):
    """k-nearest-neighbours vote with feature-space distances :math:`k(x,x) + k(z,z) - 2k(x,z)`.

    Parameters
    ----------
    n_neighbors : int, default=5
    weights : {"uniform", "distance"} or callable, default="uniform"
        "distance" weighs neighbours by ``1 / d`` (a zero distance takes all the weight), as scikit-learn.
    kernel, gamma, degree, coef0, kernel_params :
        As in :class:`mercer.models.KernelRidge` (default "linear": Euclidean neighbours).
    device, dtype, memory_budget : as usual.

    Attributes
    ----------
    classes_ : ndarray, X_fit_ : tensor, kernel_ : Kernel, n_samples_fit_ : int
    """

    _classifier = True

    _parameter_constraints: dict = {**_NEIGHBORS_CONSTRAINTS, "n_neighbors": _N_NEIGHBORS}

    def __init__(self, n_neighbors=5, *, weights="uniform", kernel="linear", gamma=None, degree=3, coef0=1,
                 kernel_params=None, device=None, dtype=None, memory_budget=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        self._fit(X, y)
        self._check_k(self.n_neighbors, False)
        return self

    def _votes(self, X):
        weights, ind = self._neighbour_weights(X)
        ind = to_numpy(ind) if is_torch(ind) else ind
        if weights is not None and np.any(np.all(weights == 0, axis=1)):
            raise ValueError("All neighbors of some sample is getting zero weights. Please modify 'weights' to "
                             "avoid this case if you are using a user-defined function.")
        labels = self._y[ind]
        votes = np.zeros((ind.shape[0], len(self.classes_)))
        w = np.ones(ind.shape) if weights is None else weights
        rows = np.arange(ind.shape[0])
        for j in range(ind.shape[1]):
            votes[rows, labels[:, j]] += w[:, j]
        return votes

    def predict_proba(self, X):
        """Share of the (weighted) neighbour votes of each class, shape (n, n_classes)."""
        votes = self._votes(X)
        norm = votes.sum(1, keepdims=True)
        norm[norm == 0] = 1.0
        return votes / norm

    def predict(self, X):
        """Class with the most (weighted) neighbour votes; ties go to the first class in ``classes_``."""
        votes = self._votes(X)
        return labels_like(self.classes_[np.argmax(votes, axis=1)], X)


class KernelKNeighborsRegressor(_KNeighborsMixin, MultiOutputMixin, RegressorMixin, _NeighborsBase):
    """k-nearest-neighbours regression (weighted mean of the neighbours' targets) with feature-space
    distances. Parameters as :class:`KernelKNeighborsClassifier`; ``y`` may be (n,) or (n, t)."""

    _parameter_constraints: dict = {**_NEIGHBORS_CONSTRAINTS, "n_neighbors": _N_NEIGHBORS}

    def __init__(self, n_neighbors=5, *, weights="uniform", kernel="linear", gamma=None, degree=3, coef0=1,
                 kernel_params=None, device=None, dtype=None, memory_budget=None):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        self._fit(X, y)
        self._check_k(self.n_neighbors, False)
        return self

    def predict(self, X):
        weights, ind = self._neighbour_weights(X)
        ind = to_numpy(ind) if is_torch(ind) else ind
        Y = self._y[ind]  # (n, k) or (n, k, t)
        if weights is None:
            out = Y.mean(axis=1)
        else:
            w = weights if Y.ndim == 2 else weights[:, :, None]
            with np.errstate(invalid="ignore", divide="ignore"):
                out = (Y * w).sum(axis=1) / weights.sum(axis=1).reshape((-1,) + (1,) * (Y.ndim - 2))
        return torch.as_tensor(out, device=X.device) if is_torch(X) else out


# -- radius estimators ------------------------------------------------------------------------------
class KernelRadiusNeighborsClassifier(ClassifierMixin, _NeighborsBase):
    """Vote of the training samples within feature-space distance ``radius``.

    Parameters
    ----------
    radius : float, default=1.0
    weights : {"uniform", "distance"} or callable, default="uniform"
    outlier_label : None, "most_frequent" or a label, default=None
        Label given to queries without any neighbour within the radius. ``None`` raises a
        ``ValueError`` naming those queries (as scikit-learn); "most_frequent" uses the most
        frequent training class. A label outside ``classes_`` gets an all-zero probability row.
    kernel, gamma, degree, coef0, kernel_params, device, dtype, memory_budget :
        As in :class:`KernelKNeighborsClassifier`.

    Attributes
    ----------
    classes_ : ndarray, outlier_label_ : label or None, X_fit_ : tensor
    """

    _classifier = True

    # outlier_label: any single label, checked against the classes in fit
    _parameter_constraints: dict = {**_NEIGHBORS_CONSTRAINTS, "radius": _RADIUS}

    def __init__(self, radius=1.0, *, weights="uniform", outlier_label=None, kernel="linear", gamma=None,
                 degree=3, coef0=1, kernel_params=None, device=None, dtype=None, memory_budget=None):
        self.radius = radius
        self.weights = weights
        self.outlier_label = outlier_label
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        self._fit(X, y)
        ol = self.outlier_label
        if ol is None:
            self.outlier_label_ = None
        elif isinstance(ol, str) and ol == "most_frequent":
            self.outlier_label_ = self.classes_[np.argmax(np.bincount(self._y))]
        else:
            if not np.isscalar(ol):
                raise ValueError(f"The 'outlier_label' parameter of {type(self).__name__} must be None, "
                                 f"'most_frequent' or a single label. Got {ol!r} instead.")
            if isinstance(ol, (str, bytes)) != (self.classes_.dtype.kind in "USO" and
                                                isinstance(self.classes_[0], (str, bytes))):
                raise TypeError(f"The dtype of outlier_label {ol!r} is inconsistent with classes {self.classes_}.")
            self.outlier_label_ = ol
        return self

    def predict_proba(self, X):
        """Share of the (weighted) votes of the neighbours within the radius; outliers get a one-hot
        row for ``outlier_label_`` (zeros when it is not a training class)."""
        nq, blocks = self._radius_votes(X)
        proba, outliers = np.zeros((nq, len(self.classes_))), np.zeros(nq, dtype=bool)
        for rs, w, ind in blocks:
            for q, iq in enumerate(ind):
                if len(iq):
                    wq = np.ones(len(iq)) if w is None else np.asarray(w[q], dtype=np.float64)
                    proba[rs.start + q] = np.bincount(self._y[iq], weights=wq, minlength=len(self.classes_))
                else:
                    outliers[rs.start + q] = True
        if outliers.any() and self.outlier_label_ is None:
            raise ValueError(f"No neighbors found for test samples {np.flatnonzero(outliers)!r}, you can try using "
                             "larger radius, giving a label for outliers, or considering removing them from your "
                             "dataset.")
        if outliers.any():
            hit = np.flatnonzero(self.classes_ == self.outlier_label_)
            if hit.size:
                proba[outliers, hit[0]] = 1.0
            else:
                warnings.warn("Outlier label {} is not in training classes. All class probabilities of outliers "
                              "will be assigned with 0.".format(self.outlier_label_), stacklevel=2)
        norm = proba.sum(1, keepdims=True)
        norm[norm == 0] = 1.0
        return proba / norm

    def predict(self, X):
        proba = self.predict_proba(X)
        labels = self.classes_[np.argmax(proba, axis=1)]
        empty = proba.sum(1) == 0  # outliers whose label is not a training class
        if empty.any():
            labels = labels.astype(object) if not isinstance(self.outlier_label_, type(labels[0])) else labels
            labels[empty] = self.outlier_label_
        return labels_like(labels, X)


class KernelRadiusNeighborsRegressor(MultiOutputMixin, RegressorMixin, _NeighborsBase):
    """Mean target of the training samples within feature-space distance ``radius``.

    Queries without a neighbour get NaN, with a warning (as scikit-learn). Parameters as
    :class:`KernelRadiusNeighborsClassifier` without ``outlier_label``.
    """

    _parameter_constraints: dict = {**_NEIGHBORS_CONSTRAINTS, "radius": _RADIUS}

    def __init__(self, radius=1.0, *, weights="uniform", kernel="linear", gamma=None, degree=3, coef0=1,
                 kernel_params=None, device=None, dtype=None, memory_budget=None):
        self.radius = radius
        self.weights = weights
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        self._fit(X, y)
        return self

    def predict(self, X):
        nq, blocks = self._radius_votes(X)
        Y = self._y
        out, empty = np.full((nq,) + Y.shape[1:], np.nan), np.zeros(nq, dtype=bool)
        for rs, w, ind in blocks:
            for q, iq in enumerate(ind):
                if not len(iq):
                    empty[rs.start + q] = True
                elif w is None:
                    out[rs.start + q] = Y[iq].mean(axis=0)
                else:
                    out[rs.start + q] = np.average(Y[iq], axis=0, weights=np.asarray(w[q], dtype=np.float64))
        if empty.any():
            warnings.warn("One or more samples have no neighbors within specified radius; predicting NaN.",
                          stacklevel=2)
        return torch.as_tensor(out, device=X.device) if is_torch(X) else out
