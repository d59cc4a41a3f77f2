"""Landmark (centre) selection for Nyström methods.

Rules, from cheapest to most informed:

* ``"uniform"``: M distinct training points at random (what FALKON does). O(M).
* ``"kmeans++"``: D² sampling in input space (Arthur & Vassilvitskii 2007): spreads the centres
  over the data. O(n d M).
* ``"kmeans"``: k-means++ seeds refined by a few Lloyd iterations (Zhang & Kwok 2008); the
  centres are cluster means, not training points.
* ``"leverage"``: approximate ridge leverage scores (Alaoui & Mahoney 2015; Musco & Musco 2017):
  ``tau_i = [K (K + reg I)^{-1}]_ii`` estimated with a uniform pilot Nyström of M points, then M
  points drawn without replacement with probability proportional to ``tau``. Two passes over
  ``K(X, pilot)``.
* ``"greedy"``: sparse greedy matrix approximation (Smola & Schölkopf 2000), the pivots of
  :func:`~mercer.approx.pivoted_cholesky` with the trace-reduction rule. O(n M^2 + 59 n M) and
  an n x M factor in memory; for moderate n.
* an array of shape (M, n_features): the user's own landmarks.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from .. import _random as _rnd
from .._backend import num_threads
from .._sparse import as_sparse_rows, is_sparse_input
from .._validation import Options, check_at_most, check_param, describe, is_torch
from ..kernels import Kernel
from ..kmeans import d2_sampling, kmeans
from ..linalg import DENSE_SERIAL_MAX_N, default_memory_budget, jittered_cholesky, plan_rows, row_blocks, source_rows
from ..linalg import eigh as _eigh  # in a worker thread for large matrices: Ctrl-C is heard
from ..linalg import interruptible as _interruptible
from ..sources import RowSource
from ._cholesky import pivoted_cholesky
from ._finite import check_finite

__all__ = ["LANDMARKS_CONSTRAINTS", "LANDMARK_RULES", "select_landmarks"]

log = logging.getLogger(__name__)

LANDMARK_RULES = ("uniform", "kmeans++", "kmeans", "leverage", "greedy")


class _LandmarkArray:
    """Constraint (for :func:`mercer._validation.check_param`): landmarks given as an array, i.e.
    anything with a length or a shape but a string; its shape is checked by :func:`check_landmarks_param`."""

    def accepts(self, v) -> bool:
        # not a dict (a mapping of names), nor a numpy scalar (its shape is ())
        return not isinstance(v, (str, bytes, dict)) and (hasattr(v, "__len__") or len(getattr(v, "shape", ())) > 0)

    def __str__(self) -> str:
        return "an array-like of shape (n_landmarks, n_features)"


#: Allowed values of a ``landmarks`` (or ``centers``) parameter: a rule, or the landmarks themselves.
LANDMARKS_CONSTRAINTS = [Options(*LANDMARK_RULES), _LandmarkArray()]


def check_landmarks_param(landmarks, n_features: int | None, owner: str, name: str = "landmarks"):
    """Validate a landmark rule or array; returns the rule string, a float64 numpy array, or for
    sparse landmarks (scipy sparse, torch sparse, sparse rows: the centres of a model of sparse data)
    float64 :class:`~mercer._sparse.SparseRows` on the CPU (kept sparse by :func:`select_landmarks`).

    ``n_features`` (``None``: not checked) is the number of features of X, which the landmarks must have.
    """
    check_param(owner, name, landmarks, LANDMARKS_CONSTRAINTS)
    if isinstance(landmarks, str):
        return landmarks
    if is_sparse_input(landmarks):
        rows = as_sparse_rows(landmarks, dtype=torch.float64, device="cpu")
        if rows.shape[0] < 1:
            raise ValueError(f"The {name!r} parameter of {owner} must be an array of shape (n_landmarks, n_features) "
                             f"with n_landmarks >= 1. Got a sparse matrix of shape {tuple(rows.shape)} instead.")
        if n_features is not None and rows.shape[1] != n_features:
            raise ValueError(f"The {name!r} parameter of {owner} must have as many columns as X has features "
                             f"({n_features}). Got {rows.shape[1]} columns instead.")
        if not rows.all_finite():
            raise ValueError(f"The {name!r} parameter of {owner} must be finite. Got a sparse matrix containing NaN "
                             "or infinity instead.")
        return rows
    if is_torch(landmarks):
        arr = landmarks.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(landmarks, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"The {name!r} parameter of {owner} must be an array of numbers of shape (n_landmarks, "
                             f"n_features). Got {describe(landmarks)} instead.") from exc
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(f"The {name!r} parameter of {owner} must be an array of shape (n_landmarks, n_features) "
                         f"with n_landmarks >= 1. Got an array of shape {arr.shape} instead.")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"The {name!r} parameter of {owner} must have as many columns as X has features "
                         f"({n_features}). Got {arr.shape[1]} columns instead.")
    if not np.isfinite(arr).all():
        raise ValueError(f"The {name!r} parameter of {owner} must be finite. Got an array containing NaN or "
                         "infinity instead.")
    return arr


def _leverage_scores(kernel: Kernel, X: torch.Tensor, M: int, reg: float | None, generator: torch.Generator,
                     budget: int) -> torch.Tensor:
    """Approximate ridge leverage scores of every training point (float64, shape (n,))."""
    n = X.shape[0]
    # The pilot spans the space the scores are measured in: 3x the effective dimension that M
    # centres can resolve (~M / log M, as the automatic regularisation targets), at least 1,000
    # points. The cost is O(n s^2): with s = M, picking 5,656 centres of 20,000 points took 134 s
    # (uniform: 7 s).
    s = min(n, M, max(1000, int(3 * M / max(1.0, math.log(M)))))
    pilot = _rnd.randperm(generator, n, device=X.device)[:s]
    Z = X[pilot]
    K_ss = kernel(Z).to(torch.float64)
    evals, U = _eigh(K_ss)
    keep = evals > evals.max().clamp_min(0) * s * torch.finfo(torch.float64).eps
    N = U[:, keep] / evals[keep].sqrt()[None, :]  # Phi = K_ns N, Phi Phi^T = K_ns K_ss^+ K_sn
    r = int(keep.sum())
    # a row holds its s kernel entries (twice, and the kernel's scratch) and its r pilot features
    rows = plan_rows(n, s * X.element_size() * (2 + kernel.scratch(X.shape[1])) + 8 * r, budget=budget,
                     max_bytes=None, what="a block of pilot features")
    C = torch.zeros(r, r, dtype=torch.float64, device=X.device)
    for rs in row_blocks(n, rows, desc="leverage scores: pilot covariance"):
        Phi = kernel(X[rs], Z).to(torch.float64) @ N
        C.addmm_(Phi.T, Phi)
    sig, V = _eigh(C)
    sig = sig.clamp_min(0.0)
    if reg is None:  # effective dimension ~ M / log M, the sample size theory asks for
        target = max(1.0, M / max(1.0, math.log(M)))
        lo, hi = 1e-12 * float(sig.max().clamp_min(1e-300)), float(sig.max().clamp_min(1e-300))
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if float((sig / (sig + mid)).sum()) > target:
                lo = mid
            else:
                hi = mid
        reg = math.sqrt(lo * hi)
    W = V / (sig + reg).sqrt()[None, :]
    # tau_i = phi_i^T (Phi^T Phi + reg I)^{-1} phi_i, plus the part of k(x_i, x_i) outside the pilot's
    # span, (k_ii - ||phi_i||^2) / reg, which the pilot alone would miss.
    kd = kernel.diag(X).to(torch.float64)
    tau = torch.empty(n, dtype=torch.float64, device=X.device)
    for rs in row_blocks(n, rows, desc="leverage scores"):
        Phi = kernel(X[rs], Z).to(torch.float64) @ N
        P = Phi @ W
        tau[rs] = (P * P).sum(dim=1) + (kd[rs] - (Phi * Phi).sum(dim=1)).clamp_min(0.0) / reg
    return tau.clamp_min_(1e-300)


def select_landmarks(X, M: int, rule, *, kernel: Kernel, generator: torch.Generator,
                     memory_budget: int | None = None, reg: float | None = None, owner: str = "Nystroem",
                     dtype: torch.dtype | None = None, device=None):
    """Choose M landmarks from ``X`` (tensor, n x d, or a :class:`~mercer.sources.RowSource`, whose
    landmarks come out in ``dtype`` on ``device``). Returns ``(Z, indices)`` where ``indices``
    is a long tensor when the landmarks are training points and ``None`` otherwise."""
    n = X.shape[0]
    if isinstance(X, RowSource):  # streamed data: uniform draws (the same as in memory) or given centres
        return _select_from_source(X, M, rule, generator=generator, dtype=dtype, device=device, owner=owner)
    if not isinstance(rule, str):
        if is_sparse_input(rule):  # sparse centres stay sparse rows (copied: the caller's are not shared)
            return as_sparse_rows(rule, dtype=X.dtype, device=X.device).clone(), None
        Z = torch.tensor(np.asarray(rule), dtype=X.dtype, device=X.device)
        return Z, None
    check_at_most(owner, "n_components", M, n, "n_samples")  # landmarks are chosen among the samples
    budget = default_memory_budget(X.device, memory_budget)
    if rule == "uniform":
        idx = _rnd.randperm(generator, n, device=X.device)[:M]
    elif rule == "kmeans++":
        idx = d2_sampling(X, M, generator)
    elif rule == "kmeans":  # a few Lloyd iterations from D² seeds
        seeds = X[d2_sampling(X, M, generator)]
        return kmeans(X, M, init=seeds, max_iter=10, memory_budget=budget, owner=owner).centers, None
    elif rule == "leverage":
        tau = _leverage_scores(kernel, X, M, reg, generator, budget)
        idx = _rnd.sample_without_replacement(generator, tau, M)
    elif rule == "greedy":
        res = pivoted_cholesky(kernel, X, M, rule="greedy", generator=generator, memory_budget=budget, owner=owner)
        idx = res.pivots
        if idx.numel() < M:  # exact low rank reached: complete with uniform points
            free = torch.ones(n, dtype=torch.bool, device=X.device)
            free[idx] = False
            rest = free.nonzero().flatten()
            extra = rest[_rnd.randperm(generator, rest.numel(), device=X.device)[: M - idx.numel()]]
            idx = torch.cat([idx, extra])
    else:  # pragma: no cover - validated by check_landmarks_param
        raise ValueError(rule)
    idx = idx.sort().values
    return X[idx].clone(), idx


#: Landmark rules that need only the sample count (and so work on data read from disk).
STREAMED_RULES = ("uniform",)


def _select_from_source(source: RowSource, M: int, rule, *, generator, dtype, device, owner: str):
    """Landmarks of streamed data: an array as given, or ``M`` rows drawn uniformly (the same draw
    as for the same data in memory), read in one ordered pass."""
    dtype = dtype or torch.float64
    device = torch.device("cpu") if device is None else device
    if not isinstance(rule, str):
        if is_sparse_input(rule):
            return as_sparse_rows(rule, dtype=dtype, device=device), None
        return torch.tensor(np.asarray(rule), dtype=dtype, device=device), None
    if rule not in STREAMED_RULES:
        raise ValueError(
            f"{owner}: the landmark rule {rule!r} needs the training data in memory; for data streamed from "
            f"disk or Dask use centers='uniform' or an array of centres (e.g. chosen by rule {rule!r} on a "
            "sample of the data).")
    check_at_most(owner, "n_components", M, source.n_samples, "n_samples")
    idx = _rnd.randperm(generator, source.n_samples, device=torch.device("cpu"))[:M].sort().values
    Z = source_rows(source, idx, dtype=dtype, device=device)  # sparse rows from a sparse source
    return Z, idx.to(device)


def nystroem_normalization(kernel: Kernel, Z: torch.Tensor, method: str = "eig", owner: str = "Nystroem", *,
                           gram: torch.Tensor | None = None):
    """``N`` (M x M) with ``K(x, Z) N N^T K(Z, y) = K(x, Z) K_ZZ^+ K(Z, y)``, and the numerical rank.
    ``gram``: ``K_ZZ`` itself (a precomputed kernel), instead of ``kernel(Z)``.

    ``"eig"``: ``N = U diag(lambda^{-1/2}) U^T`` with eigenvalues below ``M * eps * lambda_max``
    dropped (a pseudo-inverse square root: stable for duplicate or nearly dependent landmarks).
    ``"cholesky"``: ``N = L^{-T}`` with ``L L^T = K_ZZ + jitter I`` (jitter added only if needed).
    Computed in float64 whatever the data's dtype.
    """
    K = kernel(Z.to(torch.float64)) if gram is None else gram.to(torch.float64)
    check_finite(K, owner, "the landmarks' kernel values", X=Z if gram is None else None, kernel=kernel)
    M = K.shape[0]
    # small dense factorisations on one thread: on a shared CPU a second thread costs more than it gives
    with num_threads(1 if K.device.type == "cpu" and M <= DENSE_SERIAL_MAX_N else None):
        return _normalization(K, M, method, owner)


def _normalization(K, M, method, owner):
    if method == "eig":
        evals, U = _eigh(K)
        floor = evals.max().clamp_min(0.0) * M * torch.finfo(torch.float64).eps
        keep = evals > floor
        if not bool(keep.any()):
            raise ValueError(f"{owner}: the landmarks' kernel matrix is zero; choose other landmarks.")
        inv_sqrt = torch.zeros_like(evals)
        inv_sqrt[keep] = evals[keep].rsqrt()
        W = U * inv_sqrt[None, :]  # the M^3 product in the worker thread too (M = 2,500: ~1 s on a loaded core)
        return _interruptible(lambda: W @ U.T, W, "normalisation product"), int(keep.sum())
    factor = jittered_cholesky(K, owner=owner)
    eye = torch.eye(M, dtype=torch.float64, device=K.device)
    Linv = torch.linalg.solve_triangular(factor.L.tril(), eye, upper=False)
    return Linv.T.contiguous(), M


__all__ += ["check_landmarks_param", "nystroem_normalization"]
