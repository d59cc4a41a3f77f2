"""Reduced-set support vector classifier, :class:`ReducedSetSVC`: an exact :class:`KernelSVC`
post-processed (Burges & Schölkopf 1996) into few support vectors.

The support vectors are clustered (k-means in input space, or kernel k-means in feature space),
the centres become the new support vectors, and the coefficients are refitted by least squares
on the decision values (or by projection in the RKHS). ``ReducedSetSVC.from_svc(svc, n_vectors)``
builds one from a fitted :class:`KernelSVC` (this module imports ``_svc``, never the reverse).
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ..._backend import make_generator, to_numpy
from ..._validation import Interval, Options, check_params
from ...kmeans import kmeans
from ...linalg import (DIRECT_TILE_BYTES, KernelOperator, MemoryBudgetError, falkon_solve_bytes, format_bytes,
                       jittered_cholesky)
from ._common import AT_LEAST_ONE
from ._svc import KernelSVC

__all__ = ["ReducedSetSVC"]


def _n_target(n_vectors, n_sv: int) -> int:
    """Vectors to keep: ``n_vectors`` (at most ``n_sv``), or that fraction of ``n_sv`` (at least one)."""
    if isinstance(n_vectors, Integral):
        return int(min(n_vectors, n_sv))
    return max(1, int(round(n_vectors * n_sv)))


class ReducedSetSVC(KernelSVC):
    """A kernel SVM with few vectors, obtained by post-processing an exact :class:`KernelSVC`.

    ``fit`` trains a :class:`KernelSVC` with the given parameters, then
    (Burges & Schölkopf 1996) clusters its support vectors class by class into ``n_vectors``
    groups (the number per class proportional to its support vectors) and uses the centres
    :math:`z_1..z_K` as the new support vectors:

    * ``method="kmeans"``: k-means in input space; the centres are the cluster means;
    * ``method="kernel_kmeans"``: kernel k-means in feature space (initialised by input-space
      k-means); each centre is the cluster member nearest to its feature-space mean (a pre-image).

    The coefficients :math:`\\Gamma` (K, n_machines) and intercepts are then refitted:

    * ``refit="decision"``: least squares on the decision values at the original support vectors,
      :math:`\\min \\|K(S, Z)\\Gamma - F(S)\\|^2` with :math:`F(S) = K(S, S) W` (intercepts kept);
    * ``refit="feature"``: projection of each machine's normal vector onto span(k(., z)) in the
      RKHS, :math:`K_{ZZ}\\Gamma = K_{ZS} W` (intercepts kept).

    Parameters: ``n_vectors`` (int, or fraction in (0, 1) of the support vectors; each class with
    support vectors keeps at least one vector), ``method``,
    ``refit``, and every :class:`KernelSVC` parameter (``approximation`` excepted).

    Attributes
    ----------
    support_vectors_ : tensor (K, n_features)
    dual_coef_ : ndarray (n_machines, K) raw coefficients (LIBSVM orientation, see ``intercept_``)
    intercept_ : ndarray (n_machines,)
    n_support_original_ : int, support vectors of the exact machine
    classes_, kernel_
    """

    def __init__(self, n_vectors=0.1, *, method="kmeans", refit="decision", C=1.0, kernel="rbf", gamma="scale",
                 degree=3, coef0=0.0, kernel_params=None, tol=1e-3, cache_size=None, shrinking=True,
                 class_weight=None, decision_function_shape="ovr", multiclass="ovo", max_iter=-1,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.n_vectors = n_vectors
        self.method = method
        self.refit = refit
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.tol = tol
        self.cache_size = cache_size
        self.shrinking = shrinking
        self.class_weight = class_weight
        self.decision_function_shape = decision_function_shape
        self.multiclass = multiclass
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    probability = False
    break_ties = False
    approximation = None
    n_components = 500
    _libsvm_dual_layout = False  # dual_coef_ holds the raw (n_machines, K) coefficients: no _dual_coef_
    _sparse_refusal = ("it learns its reduced vectors' coordinates in input space (dense points). Use KernelSVC "
                       "(sparse support vectors), or pass X.toarray() if n_samples x n_features values fit in memory.")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False  # it refuses sparse X by name (_sparse_refusal)
        return tags

    _parameter_constraints: dict = {
        **{k: v for k, v in KernelSVC._parameter_constraints.items()
           if k not in ("probability", "approximation", "n_components", "break_ties")},
        "n_vectors": [AT_LEAST_ONE, Interval(Real, 0, 1, closed="neither")],
        "method": [Options("kmeans", "kernel_kmeans")],
        "refit": [Options("decision", "feature")],
    }

    def fit(self, X, y, sample_weight=None):
        """Fit an exact :class:`KernelSVC` on ``(X, y)``, then reduce it to ``n_vectors`` vectors."""
        check_params(self)
        self._check_sparse_fit(X)
        params = {k: getattr(self, k) for k in KernelSVC._get_param_names() if k in self._get_param_names()}
        svc = KernelSVC(**params).fit(X, y, sample_weight=sample_weight)
        self._reduce_from(svc)
        return self

    @classmethod
    def from_svc(cls, svc: KernelSVC, n_vectors=0.1, *, method="kmeans", refit="decision", random_state=None):
        """A :class:`ReducedSetSVC` with ``n_vectors`` vectors (an int, or a fraction in (0, 1) of
        the support vectors) approximating the fitted exact :class:`KernelSVC` ``svc``, without
        training it again: its other parameters are ``svc``'s.

        >>> red = ReducedSetSVC.from_svc(KernelSVC(C=10).fit(X, y), 0.1)  # 10% of the support vectors
        """
        if not isinstance(svc, KernelSVC):
            raise TypeError(f"{cls.__name__}.from_svc needs a fitted KernelSVC; got {type(svc).__name__}.")
        check_is_fitted(svc, "classes_")
        params = {k: v for k, v in svc.get_params(deep=False).items() if k in cls._get_param_names()}
        red = cls(n_vectors=n_vectors, method=method, refit=refit, **{**params, "random_state": random_state})
        check_params(red)
        red._check_sparse_fit(svc._sv)
        return red._reduce_from(svc)

    def _reduce_from(self, svc: KernelSVC):
        owner = type(self).__name__
        if svc.kernel_.is_precomputed:
            raise ValueError(f"{owner}: a precomputed kernel has no input space to place new support vectors in.")
        if getattr(svc, "approximation_", None) is not None:
            raise ValueError(f"{owner}: only an exact KernelSVC (approximation=None) can be reduced.")
        t0 = time.perf_counter()
        for attr in ("classes_", "kernel_", "_mode", "_pairs", "_device", "_dtype", "n_features_in_",
                     "shape_fit_", "class_weight_", "n_iter_", "fit_status_"):
            if hasattr(svc, attr):
                setattr(self, attr, getattr(svc, attr))
        if hasattr(svc, "feature_names_in_"):
            self.feature_names_in_ = svc.feature_names_in_
        S, W, b = svc._sv, svc._machine_W(), svc._b
        n_sv = S.shape[0]
        self.n_support_original_ = n_sv
        cls = np.repeat(np.arange(len(svc.classes_)), svc.n_support_)
        Z = self._centres(S, cls, _n_target(self.n_vectors, n_sv))
        self._W = self._refit(S, W, Z)
        self._b = b.clone()
        self._sv = Z
        self.support_vectors_ = Z
        self.n_support_ = np.array([int((self._centre_class == c).sum()) for c in range(len(self.classes_))], dtype=np.int32)
        self.dual_coef_ = to_numpy(self._W.T).copy()
        self.intercept_ = to_numpy(self._b).copy()
        self.reduce_time_ = time.perf_counter() - t0
        self.approximation_ = None
        return self

    def _refit(self, S: torch.Tensor, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        """Coefficients of the vectors ``Z`` (K, n_machines) replacing ``S`` with ``W`` (intercepts kept).

        Both refits are a least-squares problem ``min ||B G - F||^2 + lam ||G||^2`` with a tiny ridge
        ``lam`` (stable when ``B`` is numerically rank deficient; the intercepts are kept, as refitting
        them too would be underdetermined when K approaches the number of support vectors):
        ``B = K(S, Z)``, ``F = K(S, S) W`` for ``"decision"``; ``B = K(Z, Z)``, ``F = K(Z, S) W`` for
        ``"feature"``. It is solved by its normal equations ``(B^T B + lam I) G = B^T F``: the K x K
        float64 matrices are held from the plan, ``B`` and ``F`` are computed by tiles and never held.
        """
        K, m = Z.shape[0], W.shape[1]  # at least one vector per class with support vectors
        owner = type(self).__name__
        plan = self._plan.holding(
            falkon_solve_bytes(K, m, direct=True), what=f"{owner}: refitting the coefficients of {K} vectors "
            "(K x K float64 matrices)", remedy="Use fewer n_vectors, or raise memory_budget.")
        R, Y = (S, S) if self.refit == "decision" else (Z, S)
        F = KernelOperator(self.kernel_, R, Y, memory_budget=plan, n_rhs=m).matvec(W)
        B = KernelOperator(self.kernel_, R, Z, memory_budget=plan, n_rhs=m, max_tile_bytes=DIRECT_TILE_BYTES)
        H, rhs = B.kt_k_rmatvec(F, out_dtype=torch.float64)
        del F
        scale = float(H.diagonal().sum()) / K if self.refit == "decision" else \
            float(self.kernel_.diag(Z).to(torch.float64).mean())
        if not scale > 0:  # a kernel that is zero on the vectors: no coefficient helps
            return W.new_zeros(K, m)
        H.diagonal().add_(1e-10 * scale)
        return jittered_cholesky(H, owner=owner).solve(rhs).to(S.dtype)

    def _centres(self, S: torch.Tensor, cls: np.ndarray, K: int) -> torch.Tensor:
        counts = np.bincount(cls, minlength=len(self.classes_))
        present = np.flatnonzero(counts)
        share = np.maximum(1, np.floor(K * counts[present] / counts.sum()).astype(int))
        while share.sum() > K and share.max() > 1:
            share[share.argmax()] -= 1
        rem = K - share.sum()
        for c in np.argsort(-counts[present])[:max(0, rem)]:
            share[c] += 1
        share = np.minimum(share, counts[present])
        Sn = to_numpy(S).astype(np.float64)
        seed = self.random_state if isinstance(self.random_state, (int, np.integer)) else 0

        centres, owner = [], []
        for c, m in zip(present, share):
            pts = Sn[cls == c]
            if m >= len(pts):
                cen = pts
            else:
                km = kmeans(torch.from_numpy(pts), int(m), init="k-means++", n_init=3, generator=make_generator(seed),
                            memory_budget=self._budget, owner=type(self).__name__)
                cen = to_numpy(km.centers)
                if self.method == "kernel_kmeans":
                    cen = self._kernel_kmeans(pts, to_numpy(km.labels), int(m))
            centres.append(cen)
            owner.append(np.full(len(cen), c))
        self._centre_class = np.concatenate(owner)
        return torch.as_tensor(np.concatenate(centres), dtype=S.dtype, device=S.device)

    def _kernel_kmeans(self, pts: np.ndarray, labels: np.ndarray, m: int, n_iter: int = 20) -> np.ndarray:
        n = len(pts)
        if n * n * 8 > self._budget:
            raise MemoryBudgetError(f"{type(self).__name__}: kernel k-means on {n} support vectors of one class needs "
                                    f"the {n} x {n} Gram matrix ({format_bytes(n * n * 8)}), more than the memory budget of "
                                    f"{format_bytes(self._budget)}; use method='kmeans'.")
        P = torch.as_tensor(pts, dtype=torch.float64)
        Kp = to_numpy(self.kernel_(P, P))
        d = np.diag(Kp)
        for _ in range(n_iter):
            H = np.zeros((n, m))
            H[np.arange(n), labels] = 1
            size = np.maximum(H.sum(axis=0), 1)
            KH = Kp @ H / size
            within = np.einsum("ic,ic->c", H, KH) / size
            dist = d[:, None] - 2 * KH + within[None, :]
            dist[:, H.sum(axis=0) == 0] = np.inf
            new = dist.argmin(axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
        medoids = [np.flatnonzero(labels == c)[dist[labels == c, c].argmin()] for c in range(m) if (labels == c).any()]
        return pts[medoids]
