"""k-means in input space: a scikit-learn estimator over :mod:`mercer.kmeans`.

:class:`KMeans` runs Lloyd's algorithm (the seeds' alternation of assignment and mean updates) on
torch tensors. Squared distances are computed block by block as
:math:`\\|x\\|^2 - 2 x^T c + \\|c\\|^2` (one GEMM per block of rows, blocks sized from the memory
budget), so no ``n x k x d`` intermediate is ever formed. ``inertia_`` is the seeds' distortion
:math:`J = \\sum_n \\|x_n - \\mu_{z_n}\\|^2 = \\|X - Z\\mu\\|_F^2`.
"""

from __future__ import annotations

import logging
import time
import warnings
from numbers import Integral

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, check_random_state, make_generator, row_sq_norms, to_numpy
from ..._sparse import plan_features
from ..._validation import Interval, Options, check_params
from ...kmeans import assign, block_rows, kmeans, kmeans_streamed, seed_indices, sq_distances
from ...linalg import default_memory_budget, source_to_memory
from ...sources import RowSource
from .._base import COMPUTE_CONSTRAINTS, KernelEstimatorMixin
from ._common import _INIT_RULES, KMEANS_CONSTRAINTS, _InitArray, check_init, resolve_n_init, sample_weights

__all__ = ["KMeans"]

log = logging.getLogger(__name__)


def _print(line: str) -> None:
    """``verbose`` output, as scikit-learn's KMeans prints it (to standard output, flushed)."""
    print(line, flush=True)  # noqa: T201 - the scikit-learn contract of verbose=1


class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, KernelEstimatorMixin, BaseEstimator):
    """k-means clustering by Lloyd's algorithm on torch tensors (scikit-learn's ``KMeans`` API).

    Minimises the distortion :math:`J = \\sum_n w_n \\|x_n - \\mu_{z_n}\\|^2` by alternating the
    assignment :math:`z_n = \\arg\\min_k \\|x_n - \\mu_k\\|^2` and the mean update. Distances are
    computed block by block (``||x||^2 - 2 x.c + ||c||^2``, one GEMM per block of rows sized from
    ``memory_budget``); the data are centred first, as scikit-learn does, for accuracy. On the CPU
    each iteration is one compiled pass over the data (bounds, distances, argmin and the cluster
    sums fused, on as many threads as the problem pays for: :mod:`mercer.kmeans`); numba compiles
    it on the first fit and caches it on disk.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "random"}, callable or array of shape (n_clusters, n_features), default="k-means++"
        "k-means++" is the greedy variant of scikit-learn (``2 + log(k)`` local trials per centre). A
        callable is called as in scikit-learn, ``init(X, n_clusters, random_state)`` (a
        ``numpy.random.RandomState``), once per run, and returns the initial centres.
    n_init : "auto" or int, default="auto"
        Restarts; the run with the lowest inertia is kept. "auto": 10 for ``init="random"``, else 1.
    max_iter : int, default=300
    tol : float, default=1e-4
        Convergence when the squared shift of the centres, summed, is at most ``tol`` times the mean
        per-feature variance of X (scikit-learn's rule), or when the labels stop changing.
    n_local_trials : int, optional
        Candidates tried per k-means++ centre; default ``2 + int(log(n_clusters))``.
    verbose : int, default=0
        When positive, print scikit-learn's progress lines ("Initialization complete", the inertia
        at each iteration, how the run converged) to standard output.
    random_state : int, RandomState or None
    copy_x : bool, default=True
        Accepted for scikit-learn compatibility: mercer never modifies ``X`` (the centred copy it
        computes on is its own), so ``False`` changes nothing.
    algorithm : {"lloyd", "elkan"}, default="lloyd"
        Both give the labels of plain Lloyd's algorithm (exactly); they differ in the work per
        iteration. "lloyd" skips, from :data:`~mercer.kmeans.MIN_CLUSTERS_FOR_BOUNDS` clusters on
        (on the CPU from fewer where that was measured to pay), the distance computations that
        triangle-inequality bounds prove unnecessary; "elkan" uses
        those bounds at every ``n_clusters``. The bounds are Hamerly's (one lower bound per point,
        O(n) memory) rather than Elkan's k lower bounds (O(n k) memory): see
        :func:`mercer.kmeans.lloyd`.
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
    Streamed data (:mod:`mercer.sources`: a ``.npy`` / ``.npz`` / Parquet path, a memmap, a Dask
    collection, dense or sparse rows) is read block by block, and the fit equals the in-memory one
    (same seeds, labels and centres up to round-off): each Lloyd iteration is one pass over the
    data, and k-means++ stays exact at one pass per centre (``n_clusters`` passes per run;
    ``init="random"`` or an array reads only the seeds). Sparse rows are never densified: their
    blocks are planned from the stored entries, the distances are sparse x dense products, and only
    the ``(n_clusters, n_features)`` centres are dense. A callable ``init`` takes the data in
    memory: they are read whole, if they fit ``memory_budget``. See
    :func:`mercer.kmeans.kmeans_streamed`.

    Empty clusters are re-seeded with the points farthest from their current centre (scikit-learn's
    rule). When X has fewer distinct points than ``n_clusters`` a ``ConvergenceWarning`` is issued.
    The algorithm itself is :func:`mercer.kmeans.kmeans`.
    """

    _parameter_constraints: dict = {
        **KMEANS_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_local_trials": [Interval(Integral, 1, None, closed="left"), None],
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
        "copy_x": ["boolean"],
        "algorithm": [Options("lloyd", "elkan")],
        "init": [_INIT_RULES, _InitArray(), "callable"],
    }

    _saved_private = ("_centers",)  # private state that mercer.io saves
    _streams_fit = True  # fit reads a streamed X (mercer.sources) block by block

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300, tol=1e-4, verbose=0,
                 random_state=None, copy_x=True, algorithm="lloyd", n_local_trials=None, device=None, dtype=None,
                 memory_budget=None):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.copy_x = copy_x
        self.algorithm = algorithm
        self.n_local_trials = n_local_trials
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit -------------------------------------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None):
        """Cluster ``X`` (n, d); ``sample_weight`` (n,) weighs the distortion and the means."""
        check_params(self)
        owner = type(self).__name__
        Xv = self._validate_X(X, reset=True)
        if isinstance(Xv, RowSource) and callable(self.init):  # init(X, ...) takes the data in memory
            Xv = self._source_in_memory(Xv)
            Xv = self._validate_X(Xv, reset=True) if sp.issparse(Xv) else Xv
        n, d = Xv.shape
        if self.n_clusters > n:  # mercer's wording, then scikit-learn's (users and its tests search for it)
            raise ValueError(f"The 'n_clusters' parameter of {owner} must be at most n_samples = {n}. Got "
                             f"{self.n_clusters} instead: n_samples={n} should be >= n_clusters={self.n_clusters}.")
        init = check_init(owner, self.init, self.n_clusters, d)
        n_init = self._n_init = resolve_n_init(owner, self.n_init, init)
        if self.algorithm == "elkan" and self.n_clusters == 1:
            warnings.warn("algorithm='elkan' doesn't make sense for a single cluster. Using 'lloyd' instead.",
                          RuntimeWarning, stacklevel=2)
        self._setup_compute(Xv)
        t0 = time.perf_counter()
        if isinstance(Xv, RowSource):
            w = sample_weights(self, sample_weight, n, self._dtype, self._device)
            result = self._run_streamed(Xv, init, n_init, w)
        else:
            Xt, owned = self._fit_tensor(Xv)
            w = sample_weights(self, sample_weight, n, Xt.dtype, Xt.device)
            result = self._run(Xv, Xt, init, n_init, w, owned)
        self._centers = result.centers
        self.cluster_centers_ = as_output(self._centers, X)
        self.labels_ = as_output(result.labels, X)
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: n=%d, k=%d, inertia %.6g, %d iterations, %.2f s", owner, n, self.n_clusters, self.inertia_,
                 self.n_iter_, self.fit_time_)
        return self

    def _source_in_memory(self, source) -> np.ndarray:
        """A streamed ``X`` read whole (when it fits the budget), checked as in-memory data are."""
        X = source_to_memory(source, type(self).__name__, memory_budget=self.memory_budget)
        if not np.isfinite(X.data if sp.issparse(X) else X).all():
            raise ValueError(f"Input X contains NaN or infinity ({source!r}).")
        return X

    def _run_streamed(self, source, init, n_init: int, w):
        """The k-means runs over streamed data (:func:`mercer.kmeans.kmeans_streamed`): one pass
        per Lloyd iteration, exact k-means++ in one pass per centre."""
        if not isinstance(init, str):
            init = torch.tensor(np.array(init), dtype=self._dtype, device=self._device)
        return kmeans_streamed(source, int(self.n_clusters), memory_budget=self._budget, dtype=self._dtype,
                               device=self._device, init=init, n_init=n_init, max_iter=self.max_iter,
                               tol=float(self.tol), sample_weight=w, n_local_trials=self.n_local_trials,
                               generator=make_generator(self.random_state), owner=type(self).__name__,
                               report=_print if self.verbose else None)

    def _fit_tensor(self, Xv):
        """``(tensor, owned)``: ``Xv`` itself, read-only, where it is a CPU numpy array of the fit's
        dtype (the k-means driver then writes its centred copy in one pass), else a copy that the
        fit owns (``owned``: it may be centred in place)."""
        if isinstance(Xv, np.ndarray) and self._device.type == "cpu" and min(Xv.strides) >= 0 \
                and Xv.dtype == np.dtype(str(self._dtype).removeprefix("torch.")):  # (torch takes no negative strides)
            with warnings.catch_warnings():  # (a read-only array: kmeans() never writes to X it does not own)
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(Xv), False
        return self._tensor(Xv), True

    def _run(self, Xv, Xt, init, n_init: int, w, owned: bool = True):
        """The k-means runs; a callable ``init`` is called once per run (the best run is kept)."""
        owner = type(self).__name__
        kw = dict(max_iter=self.max_iter, tol=float(self.tol), sample_weight=w, n_local_trials=self.n_local_trials,
                  generator=make_generator(self.random_state),  # CPU draws: the same seeds on every device
                  memory_budget=self._budget, owner=owner, bounds=True if self.algorithm == "elkan" else None,
                  report=_print if self.verbose else None)
        if owned and not callable(init):  # one call: it may centre its own copy of X (to_tensor's) in place
            kw["overwrite_x"] = True
        if isinstance(init, str):
            return kmeans(Xt, int(self.n_clusters), init=init, n_init=n_init, **kw)
        rs = check_random_state(self.random_state)
        best = None
        for _ in range(n_init if callable(init) else 1):
            C0 = check_init(owner, init(Xv, self.n_clusters, random_state=rs) if callable(init) else init,
                            self.n_clusters, Xt.shape[1])
            res = kmeans(Xt, int(self.n_clusters), init=torch.tensor(np.array(C0), dtype=Xt.dtype, device=Xt.device),
                         n_init=1, **kw)
            best = res if best is None or res.inertia < best.inertia else best
        return best

    def _init_centroids(self, X, x_squared_norms, init, random_state, sample_weight, init_size=None,
                        n_centroids=None):
        """scikit-learn's private seeding method, with its signature (its tests call it): the
        ``n_centroids`` (default ``n_clusters``) initial centres (numpy, (n_centroids, n_features))
        of ``init`` ("k-means++", "random", a callable ``init(X, n_centroids, random_state=...)`` or
        an array) on ``X`` weighted by ``sample_weight``, drawn with ``random_state`` (a RandomState),
        from ``init_size`` rows picked at random when given. ``fit`` seeds the same way."""
        owner = type(self).__name__
        X = to_numpy(X) if isinstance(X, torch.Tensor) else X
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
        k = self.n_clusters if n_centroids is None else int(n_centroids)
        w = np.asarray(sample_weight, dtype=np.float64)
        sq = np.asarray(x_squared_norms, dtype=np.float64)
        if init_size is not None and init_size < X.shape[0]:
            rows = random_state.randint(0, X.shape[0], init_size)
            X, w, sq = X[rows], w[rows], sq[rows]
        if isinstance(init, str):
            Xt, wt, sqt = (torch.tensor(a) for a in (X, w, sq))  # copies: X may be read-only

            def dist(idx, s):
                return torch.addmm(sqt[s, None] + sqt[idx][None, :], Xt[s], Xt[idx].T, alpha=-2.0)

            trials = 2 + int(np.log(k)) if self.n_local_trials is None else self.n_local_trials
            rows = block_rows(X.shape[0], trials, X.shape[1], itemsize=8,
                              budget=default_memory_budget(None, self.memory_budget))
            idx = seed_indices(init, X.shape[0], k, dist, make_generator(random_state), rows=rows,
                               sample_weight=wt, n_local_trials=self.n_local_trials)
            return X[to_numpy(idx)].copy()
        centers = init(X, k, random_state=random_state) if callable(init) else init
        return check_init(owner, centers, k, X.shape[1]).copy()

    def fit_predict(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).labels_

    # -- inference -------------------------------------------------------------------------------
    def _query(self, X):
        """``X`` as a tensor, and the rows per block of its distances to the centres."""
        check_is_fitted(self, "_centers")
        Xt = self._tensor(self._validate_X(X, reset=False))
        return Xt, block_rows(Xt.shape[0], self._centers.shape[0], plan_features(Xt), itemsize=Xt.element_size(),
                              budget=self._budget)

    def _assign_new(self, X):
        Xt, rows = self._query(X)
        return assign(Xt, row_sq_norms(Xt), self._centers, rows)

    def predict(self, X):
        """Index of the closest centre for each row of ``X``."""
        labels, _ = self._assign_new(X)
        return as_output(labels, X)

    def transform(self, X):
        """Euclidean distances (n, n_clusters) to every centre."""
        Xt, rows = self._query(X)
        return as_output(sq_distances(Xt, self._centers, rows).sqrt_(), X)

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
