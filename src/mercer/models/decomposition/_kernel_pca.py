"""Kernel principal component analysis (the seeds' algorithm, with out-of-sample transform).

1. Centre the Gram matrix in feature space: :math:`\\tilde G = H G H`, :math:`H = I - 11^T/n`.
2. Take its top-k eigenpairs :math:`(\\alpha^j, \\lambda_j)` (dense, power method with deflation,
   Lanczos or randomized subspace iteration).
3. Embed a point :math:`x` as :math:`z = \\Lambda^{-1/2} A^T \\tilde k_x`, with the test kernel
   vector centred consistently with the training Gram.

When the Gram matrix does not fit the memory budget, the iterative solvers run on the implicit
centred operator through blocked kernel products (no n x n matrix is ever formed).
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator
from ..._validation import Interval, Options, check_at_most, check_params
from ...linalg import KernelOperator, MemoryBudgetError, format_bytes, top_eigenpairs
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin

__all__ = ["KernelPCA"]

log = logging.getLogger(__name__)


class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel PCA with scikit-learn's ``KernelPCA`` parameters and embedding.

    Parameters
    ----------
    n_components : int, optional
        Number of components; ``None`` keeps all non-zero ones. Must be <= n_samples.
    kernel, gamma, degree, coef0, kernel_params :
        As in :class:`mercer.models.KernelRidge`.
    eigen_solver : {"auto", "dense", "power", "lanczos", "randomized"}, default="auto"
        "power" is the seeds' power method with deflation ("peeling"); "arpack" is accepted as
        an alias of "lanczos" for drop-in use. "auto" picks dense for small problems or many
        components, an iterative solver otherwise.
    tol : float, default=0
        Relative tolerance of the iterative solvers; 0 means the solver's default.
    max_iter : int, optional
    remove_zero_eig : bool, default=False
        Drop components with zero eigenvalue (always done when ``n_components`` is None).
    random_state : int, RandomState or None
    device, dtype, memory_budget : as in :class:`mercer.models.KernelRidge`.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of the centred Gram matrix, descending (as scikit-learn's).
    eigenvectors_ : tensor of shape (n_samples, n_components)
    explained_variance_ : ndarray, ``eigenvalues_ / n_samples`` (variance along each component)
    explained_variance_ratio_ : ndarray, share of the total feature-space variance ``trace(H G H)``
    X_fit_ : tensor
    solver_info_ : EigResult without its tensors (method, iterations, converged, residual)
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "eigen_solver": [Options("auto", "dense", "power", "lanczos", "randomized", "arpack")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "remove_zero_eig": ["boolean"],
        "random_state": ["random_state"],
    }

    _saved_private = ("_col_mean", "_all_mean", "_n_features_out")  # private state that mercer.io saves

    def __init__(self, n_components=None, *, kernel="linear", gamma=None, degree=3, coef0=1,
                 kernel_params=None, eigen_solver="auto", tol=0, max_iter=None, remove_zero_eig=False,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.remove_zero_eig = remove_zero_eig
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit on ``X`` (n, d), or the (n, n) Gram with ``kernel="precomputed"``."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None, **params):
        """Embedding of the training data, ``eigenvectors_ * sqrt(eigenvalues_)``."""
        self._fit(X)
        out = self.eigenvectors_ * torch.sqrt(torch.as_tensor(self.eigenvalues_, dtype=self._dtype, device=self._device))
        return as_output(out, X)

    def _fit(self, X):
        check_params(self)
        Xv = self._validate_X(X, reset=True)
        n = Xv.shape[0]
        k = n if self.n_components is None else int(self.n_components)
        check_at_most(type(self).__name__, "n_components", k, n, "n_samples")
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        if self.kernel_.is_precomputed and Xv.shape[0] != Xv.shape[1]:
            raise ValueError(f"{type(self).__name__} with a precomputed kernel expects a square Gram matrix; got shape {Xv.shape}.")
        Xt = self._tensor(Xv)
        op = KernelOperator(self.kernel_, Xt, memory_budget=self._budget)
        method = "lanczos" if self.eigen_solver == "arpack" else self.eigen_solver
        fits = n * n * Xt.element_size() + op.plan.tile_bytes // 4 < self._budget
        gen = make_generator(self.random_state)  # CPU draws: the same start on every device
        opts = dict(method=method, tol=self.tol or None, max_iter=self.max_iter, generator=gen)
        t0 = time.perf_counter()
        if fits:
            K = op.dense()
            col_mean = K.mean(dim=0)
            all_mean = col_mean.mean()
            trace = float(torch.diagonal(K).sum() - n * all_mean)
            K.sub_(col_mean[None, :]).sub_(col_mean[:, None]).add_(all_mean)
            res = top_eigenpairs(K, k, **opts)
            del K
        else:
            res, col_mean, all_mean, trace = self._implicit_eigenpairs(op, Xt, k, method, opts)
        self.fit_time_ = time.perf_counter() - t0
        self._store(res, Xt, col_mean, all_mean, trace)
        log.info("KernelPCA: %d components of n=%d by %s in %.2f s", k, n, res.method, self.fit_time_)

    def _implicit_eigenpairs(self, op, Xt, k, method, opts):
        """Top eigenpairs of the centred Gram ``H K H`` through blocked kernel products (no n x n
        matrix); returns them with the centring terms and ``trace(H K H)``."""
        n = Xt.shape[0]
        if method == "dense":
            raise MemoryBudgetError(
                f"{type(self).__name__}: eigen_solver='dense' needs the {n} x {n} Gram matrix "
                f"({format_bytes(n * n * Xt.element_size())}), more than the memory budget of "
                f"{format_bytes(self._budget)}. Use eigen_solver='randomized' or 'lanczos' (blocked "
                "kernel products, no n x n matrix), or raise memory_budget."
            )
        ones = torch.full((n,), 1.0 / n, dtype=Xt.dtype, device=Xt.device)
        col_mean = op.matvec(ones)
        all_mean = col_mean.mean()
        trace = float(op.diag().sum() - n * all_mean)

        def centred(V):
            s = V.sum(dim=0, keepdim=True)
            return op.matvec(V) - col_mean[:, None] @ s - (col_mean @ V)[None, :] + all_mean * s

        res = top_eigenpairs(centred, k, n=n, dtype=Xt.dtype, device=Xt.device,
                             **{**opts, "method": "lanczos" if method == "auto" else method})
        return res, col_mean, all_mean, trace

    def _store(self, res, Xt, col_mean, all_mean, trace):
        values = res.values.clamp_min(0.0)
        vectors = res.vectors
        if self.remove_zero_eig or self.n_components is None:
            keep = values > values.max() * Xt.shape[0] * torch.finfo(values.dtype).eps if values.numel() else values > 0
            values, vectors = values[keep], vectors[:, keep]
        self.eigenvalues_ = values.cpu().numpy()
        self.eigenvectors_ = vectors
        self.explained_variance_ = self.eigenvalues_ / Xt.shape[0]
        self.explained_variance_ratio_ = self.eigenvalues_ / trace if trace > 0 else np.zeros_like(self.eigenvalues_)
        self.solver_info_ = {"method": res.method, "iterations": res.iterations,
                             "converged": res.converged, "residual": res.residual}
        self.X_fit_ = Xt
        self._col_mean = col_mean
        self._all_mean = all_mean
        self._n_features_out = len(self.eigenvalues_)

    # -- transform ----------------------------------------------------------------------------
    def transform(self, X):
        """``z = Lambda^{-1/2} A^T k~_x`` for each row, with the kernel vector centred like the Gram."""
        check_is_fitted(self, "eigenvectors_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        n_fit = self.X_fit_.shape[0]
        lam = torch.as_tensor(self.eigenvalues_, dtype=self._dtype, device=self._device)
        scale = torch.where(lam > 0, 1.0 / torch.sqrt(torch.where(lam > 0, lam, torch.ones_like(lam))), torch.zeros_like(lam))
        A = self.eigenvectors_ * scale[None, :]
        rhs = torch.cat([A, torch.full((n_fit, 1), 1.0 / n_fit, dtype=A.dtype, device=A.device)], dim=1)
        op = KernelOperator(self.kernel_, Xt, self.X_fit_, memory_budget=self._budget, n_rhs=rhs.shape[1])
        P = op.matvec(rhs)
        s = A.sum(dim=0)
        Z = P[:, :-1] - P[:, -1:] * s[None, :] - (self._col_mean @ A)[None, :] + self._all_mean * s[None, :]
        return as_output(Z, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags
