"""Approximate kernel PCA: PCA on an explicit approximate feature map (seed 002).

With features :math:`\\Phi \\in \\mathbb{R}^{n \\times D}` whose inner products approximate the
kernel (Nyström: :math:`D = M` landmarks; random Fourier features: :math:`D = 2m` cos/sin
features of ``m`` frequencies), kernel PCA becomes ordinary PCA in :math:`\\mathbb{R}^D`:

1. centre the features, :math:`\\Phi_c = \\Phi - 1 \\mu^T` (``mean_`` = :math:`\\mu`);
2. accumulate the :math:`D \\times D` matrix :math:`\\Phi_c^T \\Phi_c` over row blocks
   (``n`` times the seeds' covariance :math:`\\hat\\Sigma_m`);
3. take its top eigenpairs :math:`(\\lambda_j, v_j)`, an :math:`O(D^3)` eigenproblem instead of
   the exact method's :math:`O(n^3)`. When ``D > n`` (and the features fit the budget at once)
   the ``n x n`` Gram :math:`\\Phi_c \\Phi_c^T` is decomposed instead, and
   :math:`v_j = \\Phi_c^T u_j / \\sqrt{\\lambda_j}`.

The nonzero eigenvalues of :math:`\\Phi_c^T \\Phi_c` are those of the centred approximate Gram
matrix :math:`\\Phi_c \\Phi_c^T`, so ``eigenvalues_`` is on the scale of
:class:`mercer.models.KernelPCA`'s (the centred Gram's), and the embedding
:math:`z(x) = V^T (\\phi(x) - \\mu)` equals exact kernel PCA's
:math:`\\Lambda^{-1/2} A^T \\tilde k_x` with the approximate kernel: Nyström with every training
point as a landmark reproduces exact kernel PCA (up to the sign of each component).
"""

from __future__ import annotations

import logging
import time
from numbers import Integral

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator
from ..._validation import Interval, Options, check_at_most, check_params
from ...approx import Nystroem, RandomFourierFeatures
from ...linalg import MemoryBudgetError, format_bytes, plan_rows, row_blocks, tensor_blocks, top_eigenpairs
from ...sources import RowSource
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin

__all__ = ["ApproximateKernelPCA"]

log = logging.getLogger(__name__)


class ApproximateKernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel PCA on Nyström or random Fourier features, with out-of-sample transform.

    Cost :math:`O(n D (d + D))` time (features and their covariance, in row blocks) and
    :math:`O(D^2)` memory beyond one block, instead of exact kernel PCA's :math:`O(n^2)`
    kernel evaluations. See the module docstring for the algorithm.

    ``fit`` streams data that is not in memory (:mod:`mercer.sources`): the feature map needs
    only the number of features (RFF) or uniformly drawn landmarks (Nyström, ``landmarks="uniform"``
    or an array), and the mean and covariance are sums over row blocks (two passes), so the fit
    equals the in-memory one. When all the features fit the budget at once, the data are read whole.

    Parameters
    ----------
    n_components : int, optional
        Number of components, ``<= min(n_samples, D)``; ``None`` keeps every component with a
        nonzero eigenvalue.
    kernel, gamma, degree, coef0, kernel_params :
        As in :class:`mercer.models.KernelPCA`. ``approximation="rff"`` needs a stationary
        kernel (RBF, Laplacian, Matérn and their sums/scalings).
    approximation : {"nystroem", "rff"}, default="nystroem"
        :class:`mercer.approx.Nystroem` (``D = n_features`` landmarks) or
        :class:`mercer.approx.RandomFourierFeatures` (``n_features`` frequencies, ``D = 2 n_features``
        cos/sin features).
    n_features : int, default=100
        Landmarks ``M`` (Nyström, ``<= n_samples``) or random frequencies ``m`` (RFF).
    landmarks : str or array, default="uniform"
        Landmark rule of :class:`mercer.approx.Nystroem` (``"uniform"``, ``"kmeans++"``, ``"kmeans"``,
        ``"leverage"``, ``"greedy"``) or the landmarks themselves; ignored by ``"rff"``.
    random_state : int, RandomState or None
    device, dtype, memory_budget :
        As in :class:`mercer.models.KernelPCA`; the budget must hold the ``D x D`` covariance
        (three times, for the eigensolver); features are computed in row blocks within the rest,
        in two passes (mean, then centred products) when they do not fit at once.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of :math:`\\Phi_c^T \\Phi_c`, descending: the centred (approximate) Gram's.
    eigenvectors_ : tensor of shape (D, n_components)
        Principal axes in feature space (:math:`V`); ``transform(x) = (phi(x) - mean_) @ V``.
    explained_variance_ : ndarray, ``eigenvalues_ / n_samples``
    explained_variance_ratio_ : ndarray, share of the total variance of the features
        (``trace`` of :math:`\\Phi_c^T \\Phi_c`).
    mean_ : tensor of shape (D,), mean of the training features.
    feature_map_ : fitted Nystroem or RandomFourierFeatures
    kernel_ : Kernel
    fit_time_ : float
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "approximation": [Options("nystroem", "rff")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "landmarks": [str, "array-like"],  # a rule name or the landmarks: checked by Nystroem
        "random_state": ["random_state"],
    }

    _saved_private = ("_n_features_out", "_rows")  # private state that mercer.io saves
    _streams_fit = True  # fit reads a streamed X (mercer.sources) block by block

    def __init__(self, n_components=None, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 approximation="nystroem", n_features=100, landmarks="uniform", random_state=None,
                 device=None, dtype=None, memory_budget=None):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.approximation = approximation
        self.n_features = n_features
        self.landmarks = landmarks
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- checks -------------------------------------------------------------------------------
    def _check_sizes(self, n: int) -> tuple[int | None, int]:
        """The bounds that depend on the data (the table is checked first); returns ``(k, D)``."""
        owner = type(self).__name__
        M = int(self.n_features)
        if self.approximation == "nystroem" and isinstance(self.landmarks, str):
            check_at_most(owner, "n_features", M, n, "n_samples")  # the landmarks are training points
        D = 2 * M if self.approximation == "rff" else (M if isinstance(self.landmarks, str)
                                                       else int(np.shape(self.landmarks)[0]))
        k = self.n_components
        if k is not None:
            check_at_most(owner, "n_components", k, min(n, D), "min(n_samples, feature dimension)")
            k = int(k)
        return k, D

    def _choose_route(self, n: int, D: int, item: int) -> tuple[bool, int]:
        """Whether to decompose the ``n x n`` Gram instead of the ``D x D`` covariance, and the
        bytes the decomposition holds (it must fit the budget)."""
        # More features than samples: the n x n Gram of the centred features has the same nonzero
        # eigenvalues and costs less (when the n x D features fit at once).
        gram = D > n and (n * D + 3 * n * n) * item < self._budget
        need = (n * D + 3 * n * n) * item if gram else 3 * D * D * item
        if need >= self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: {D} features need about {format_bytes(need)} for the D x D covariance "
                f"and its eigendecomposition, more than the memory budget of {format_bytes(self._budget)}. "
                "Use a smaller n_features or raise memory_budget."
            )
        return gram, need

    def _feature_map(self):
        common = dict(n_components=int(self.n_features), random_state=self._seed, device=self._device,
                      dtype=self._dtype)
        if self.approximation == "rff":
            return RandomFourierFeatures(kernel=self.kernel_, **common)
        return Nystroem(kernel=self.kernel_, landmarks=self.landmarks, memory_budget=self.memory_budget, **common)

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit on ``X`` of shape (n, d)."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None, **params):
        """Embedding of the training data (``(phi(X) - mean_) @ eigenvectors_``)."""
        Phi, Xt = self._fit(X)
        out = Phi @ self.eigenvectors_ if Phi is not None else self._project(Xt)
        return as_output(out, X)

    def _fit(self, X):
        owner = type(self).__name__
        check_params(self)
        Xv = self._validate_X(X, reset=True)
        n = Xv.shape[0]
        k, D = self._check_sizes(n)
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed:
            raise ValueError(f"{owner} needs a kernel on feature vectors, not kernel='precomputed'.")
        item = torch.finfo(self._dtype).bits // 8
        gram, need = self._choose_route(n, D, item)
        self._seed = int(make_generator(self.random_state).initial_seed())
        t0 = time.perf_counter()
        source = Xv if isinstance(Xv, RowSource) else None
        Xt = self._tensor(Xv) if source is None else source
        fmap = self._feature_map().fit(Xt)
        self.feature_map_ = fmap
        D = fmap.n_features_out_
        # a row of a block holds its features, its input and their temporaries (three of each),
        # next to the decomposition's ``need`` bytes
        self._rows = plan_rows(n, 3 * (D + Xt.shape[1] + 1) * item + 1, budget=self._budget, fixed_bytes=need,
                               max_bytes=None, what=f"a block of {owner} features")
        Phi = None
        if source is not None and (gram or self._rows >= n):  # streamed, but small: read whole (it fits)
            Xt = next(tensor_blocks(source, n, dtype=self._dtype, device=self._device))[1]
        if gram or self._rows >= n:              # all features at once: centre them exactly
            Phi = fmap.transform(Xt)
            mean = Phi.mean(dim=0)
            Phi -= mean
            cov = Phi @ Phi.T if gram else Phi.T @ Phi
        else:                                    # two passes over row blocks: mean, then centred products
            mean = sum(self._blocks(Xt, lambda F: F.sum(dim=0))) / n
            cov = torch.zeros(D, D, dtype=self._dtype, device=self._device)
            for F in self._blocks(Xt, lambda F: F - mean):
                cov.addmm_(F.T, F)
        self.mean_ = mean
        self._decompose(cov, Phi if gram else None, k, n, D)
        self.fit_time_ = time.perf_counter() - t0
        log.info("%s: %d components from %d %s features of n=%d in %.2f s", owner, self._n_features_out, D,
                 self.approximation, n, self.fit_time_)
        return Phi, Xt

    def _decompose(self, cov, Phi, k, n: int, D: int) -> None:
        """Eigenpairs of the centred covariance (or, with ``Phi``, of the centred Gram ``cov``)."""
        cov = (cov + cov.T) / 2
        trace = float(torch.diagonal(cov).sum())
        size = cov.shape[0]
        res = top_eigenpairs(cov, size if k is None else k, method="dense" if k is None else "auto",
                             generator=make_generator(self._seed))
        values, vectors = res.values.clamp_min(0.0), res.vectors
        if k is None:
            keep = values > values.max() * max(n, D) * torch.finfo(values.dtype).eps
            values, vectors = values[keep], vectors[:, keep]
        if Phi is not None:  # V = Phi_c^T U Lambda^{-1/2}: unit feature-space axes from the Gram's eigenvectors
            inv = torch.where(values > 0, values, torch.ones_like(values)).rsqrt() * (values > 0)
            vectors = (Phi.T @ vectors) * inv[None, :]
        self.eigenvalues_ = values.cpu().numpy()
        self.eigenvectors_ = vectors
        self.explained_variance_ = self.eigenvalues_ / n
        self.explained_variance_ratio_ = self.eigenvalues_ / trace if trace > 0 else np.zeros_like(self.eigenvalues_)
        self._n_features_out = len(self.eigenvalues_)

    def _row_blocks(self, Xt, desc: str):
        """``(rows, block)`` over ``Xt``, a tensor or a streamed source (read block by block)."""
        if isinstance(Xt, RowSource):
            return tensor_blocks(Xt, self._rows, dtype=self._dtype, device=self._device, desc=desc)
        return ((rs, Xt[rs]) for rs in row_blocks(Xt.shape[0], self._rows, desc=desc))

    def _blocks(self, Xt, fn):
        for _, Xb in self._row_blocks(Xt, "approximate kernel PCA features"):
            yield fn(self.feature_map_.transform(Xb))

    def _project(self, Xt):
        V = self.eigenvectors_
        out = torch.empty(Xt.shape[0], V.shape[1], dtype=self._dtype, device=self._device)
        for rs, Xb in self._row_blocks(Xt, "approximate kernel PCA projection"):
            out[rs] = (self.feature_map_.transform(Xb) - self.mean_) @ V
        return out

    # -- transform ----------------------------------------------------------------------------
    def transform(self, X):
        """``(phi(X) - mean_) @ eigenvectors_``, in row blocks."""
        check_is_fitted(self, "eigenvectors_")
        Xv = self._validate_X(X, reset=False)
        return as_output(self._project(self._tensor(Xv)), X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
