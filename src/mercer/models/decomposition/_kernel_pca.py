"""Kernel principal component analysis (the seeds' algorithm, with out-of-sample transform).

1. Centre the Gram matrix in feature space: :math:`\\tilde G = H G H`, :math:`H = I - 11^T/n`
   (row and column means apart, as scikit-learn's ``KernelCenterer``, so that a non-symmetric
   precomputed Gram is centred correctly; its symmetric part is then decomposed).
2. Take its top-k eigenpairs :math:`(\\alpha^j, \\lambda_j)` (dense, power method with deflation,
   Lanczos or randomized subspace iteration), and check them as scikit-learn does: significant
   negative eigenvalues (a Gram that is not PSD) raise, round-off ones become 0. The Gram of a
   kernel on inputs (not ``precomputed``) is built once as its lower triangle (:class:`~mercer.linalg.SymmetricGram`:
   half the kernel evaluations, the column means summed while building), the iterative solvers
   multiply by :math:`\\tilde G` implicitly (:math:`G V` plus rank-one corrections) and start from
   the Nyström approximation of its top eigenvectors on a few hundred random columns.
3. Embed a point :math:`x` as :math:`z = \\Lambda^{-1/2} A^T \\tilde k_x`, with the test kernel
   vector centred consistently with the training Gram.
4. Optionally (``fit_inverse_transform``) learn pre-images by kernel ridge regression from the
   embedding back to input space (Bakir, Weston & Schoelkopf 2004, as scikit-learn):
   :math:`(K_Z + \\alpha I) D = X`, :math:`\\hat x(z) = D^T k_Z(z)`, with the same kernel on the
   embedding.

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
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, make_generator, num_threads
from ..._validation import Interval, Options, check_at_most, check_params
from ...approx import overflow_cause
from ...kernels import resolve_kernel
from ...linalg import (KernelOperator, MemoryBudgetError, SymmetricGram, auto_method, format_bytes, jittered_cholesky,
                       nystrom_start, plan_rows, row_blocks, top_eigenpairs)
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin

__all__ = ["KernelPCA"]

log = logging.getLogger(__name__)

#: Columns of the block solvers' blocks beyond ``k``. A product with the stored Gram costs about
#: the same for 10-16 columns and ~25 % more for 20 (one thread, n = 5,000 and 20,000), while
#: 16 columns need at most one block step more than 20: ``k + 6`` (16 for k = 10) is the fastest.
_BLOCK_EXTRA = 6

#: Landmarks of the Nyström start, per column of the block: ``10 * (k + 6)`` columns of the centred
#: Gram (160 for k = 10) cost ``O(n m^2)``, a fraction of one product with the n x n matrix, and
#: save 1-3 of the ~10 block Lanczos steps (all but one when the spectrum decays fast: RBF on
#: d = 2, n = 5,000 converges after one product).
_LANDMARKS_PER_COLUMN = 10

#: scikit-learn's ``_check_psd_eigenvalues`` thresholds, (float64, float32): a negative eigenvalue
#: below ``-ratio * max`` and ``-value`` is significant (the Gram is not PSD); a positive one below
#: ``small * max`` is round-off and becomes 0.
_NEG_RATIO = (1e-5, 5e-3)
_NEG_VALUE = (1e-10, 1e-6)
_SMALL_POS = (1e-12, 2e-7)


def check_psd_eigenvalues(values: torch.Tensor, owner: str) -> torch.Tensor:
    """Eigenvalues of a centred Gram checked as scikit-learn's KernelPCA checks them: raise when a
    negative one is significant, set round-off negative and tiny positive ones to 0."""
    if values.numel() == 0:
        return values
    single = values.dtype != torch.float64
    top, low = float(values.max()), float(values.min())
    tail = ("Either the matrix is not PSD, or there was an issue while computing the eigendecomposition "
            "of the matrix.")
    if top < 0:
        raise ValueError(f"{owner}: All eigenvalues are negative (maximum is {top:g}). {tail}")
    if low < -_NEG_RATIO[single] * top and low < -_NEG_VALUE[single]:
        raise ValueError(f"{owner}: There are significant negative eigenvalues ({-low / top:g} of the maximum "
                         f"positive). {tail} A precomputed Gram matrix must be positive semi-definite.")
    values = values.clamp_min(0.0)
    return torch.where(values < _SMALL_POS[single] * top, torch.zeros_like(values), values)


def _symmetrise_(K: torch.Tensor, budget: int) -> None:
    """``K <- (K + K^T) / 2`` in place, one block of rows (and the matching columns) at a time."""
    n = K.shape[0]
    rows = plan_rows(n, 3 * n * K.element_size(), budget=budget, what="symmetrising the Gram matrix")
    for blk in row_blocks(n, rows):
        S = (K[blk, :blk.stop] + K[:blk.stop, blk].mT) * 0.5
        K[blk, :blk.stop] = S
        K[:blk.stop, blk] = S.mT


class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel PCA with scikit-learn's ``KernelPCA`` parameters and embedding.

    Parameters
    ----------
    n_components : int, optional
        Number of components; ``None`` keeps all non-zero ones. Must be <= n_samples.
    kernel, gamma, degree, coef0, kernel_params :
        As in :class:`mercer.models.KernelRidge`. With ``kernel="precomputed"`` the Gram matrix
        must be positive semi-definite (significant negative eigenvalues raise, as scikit-learn);
        a non-symmetric one is centred as ``H K H`` and its symmetric part decomposed.
    alpha : float, default=1.0
        Ridge regularisation of the pre-image map (``fit_inverse_transform``).
    fit_inverse_transform : bool, default=False
        Learn the pre-image map for :meth:`inverse_transform`: kernel ridge regression, with the
        same kernel (and ``gamma_``), from the training embedding to the training data.
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
    gamma_ : float, ``gamma`` or, when it is None, ``1 / n_features`` (as scikit-learn)
    dual_coef_ : tensor of shape (n_samples, n_features), pre-image coefficients (``fit_inverse_transform``)
    X_transformed_fit_ : tensor of shape (n_samples, n_components), training embedding (``fit_inverse_transform``)
    solver_info_ : EigResult without its tensors (method, iterations, converged, residual)
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "fit_inverse_transform": ["boolean"],
        "eigen_solver": [Options("auto", "dense", "power", "lanczos", "randomized", "arpack")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "remove_zero_eig": ["boolean"],
        "random_state": ["random_state"],
    }

    _saved_private = ("_col_mean", "_all_mean", "_n_features_out")  # private state that mercer.io saves

    def __init__(self, n_components=None, *, kernel="linear", gamma=None, degree=3, coef0=1,
                 kernel_params=None, alpha=1.0, fit_inverse_transform=False, eigen_solver="auto", tol=0, max_iter=None, remove_zero_eig=False,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.alpha = alpha
        self.fit_inverse_transform = fit_inverse_transform
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
        if self.fit_inverse_transform and isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError(f"{type(self).__name__}: Cannot fit_inverse_transform with a precomputed kernel "
                             "(the pre-images need the input data).")
        Xv = self._validate_X(X, reset=True)
        n = Xv.shape[0]
        k = n if self.n_components is None else int(self.n_components)
        check_at_most(type(self).__name__, "n_components", k, n, "n_samples")
        self._setup_compute(Xv)
        self.kernel_ = self._resolve_kernel()
        self.gamma_ = 1.0 / Xv.shape[1] if self.gamma is None else self.gamma
        if self.kernel_.is_precomputed and Xv.shape[0] != Xv.shape[1]:
            raise ValueError(f"{type(self).__name__} with a precomputed kernel expects a square Gram matrix; got shape {Xv.shape}.")
        Xt = self._tensor(Xv)
        op = KernelOperator(self.kernel_, Xt, memory_budget=self._budget)
        method = "lanczos" if self.eigen_solver == "arpack" else self.eigen_solver
        fits = n * n * Xt.element_size() + op.plan.tile_bytes // 4 < self._budget
        gen = make_generator(self.random_state)  # CPU draws: the same start on every device
        opts = dict(method=method, tol=self.tol or None, max_iter=self.max_iter, generator=gen)
        t0 = time.perf_counter()
        try:
            if fits and not self.kernel_.is_precomputed:
                res, col_mean, all_mean, trace = self._gram_eigenpairs(Xt, k, method, opts)
            elif fits:
                res, col_mean, all_mean, trace = self._dense_eigenpairs(op.dense(), k, opts)
            else:
                res, col_mean, all_mean, trace = self._implicit_eigenpairs(op, Xt, k, method, opts)
        except ValueError as exc:  # the eigensolver's "A contains NaN or infinity": say why
            if "NaN or infinity" not in str(exc) or self.kernel_.is_precomputed:
                raise
            raise ValueError(f"{type(self).__name__}: the kernel matrix is not finite (NaN or infinity): "
                             f"{overflow_cause(X=Xt, kernel=self.kernel_)}.") from exc
        self._store(res, Xt, col_mean, all_mean, trace)
        if self.fit_inverse_transform:
            self._fit_inverse_transform(Xt)
        self.fit_time_ = time.perf_counter() - t0
        log.info("KernelPCA: %d components of n=%d by %s in %.2f s", k, n, res.method, self.fit_time_)

    def _gram_eigenpairs(self, Xt, k, method, opts):
        """Top eigenpairs of ``H K H`` from the Gram matrix built once as its lower triangle
        (:class:`SymmetricGram`: half the kernel evaluations, the row sums taken while building).
        The iterative solvers see ``H K H`` implicitly, ``K V`` plus rank-one corrections, from a
        Nyström start; ``"dense"`` centres the matrix in place. Returns the eigenpairs with the
        column means, the grand mean and ``trace(H K H)``."""
        n = Xt.shape[0]
        G = SymmetricGram(self.kernel_, Xt, memory_budget=self._budget)
        mean = G.row_sums / n
        all_mean = mean.mean()
        trace = float(G.diagonal().sum() - n * all_mean)
        if method == "dense" or (method == "auto" and auto_method(n, k) == "dense"):
            K = G.full_().sub_(mean[None, :]).sub_(mean[:, None]).add_(all_mean)
            return top_eigenpairs(K, k, **{**opts, "method": "dense"}), mean, all_mean, trace

        def centred(V):
            s = V.sum(dim=0, keepdim=True)
            return G.matvec(V) - mean[:, None] @ s - (mean @ V)[None, :] + all_mean * s

        # Everything but the products with G (which keep G's workers) is O(n (k + m)) work: one
        # thread, no barrier to wait at on a shared CPU.
        with num_threads(1 if Xt.device.type == "cpu" else None):
            block = min(n, k + _BLOCK_EXTRA)
            start = self._nystrom_start(Xt, mean, all_mean, block, opts["generator"])
            res = top_eigenpairs(centred, k, n=n, dtype=Xt.dtype, device=Xt.device, start=start,
                                 block_size=block if method != "power" else None,
                                 **{**opts, "method": "lanczos" if method == "auto" else method})
        return res, mean, all_mean, trace

    def _nystrom_start(self, Xt, mean, all_mean, block, gen):
        """Approximate top eigenvectors of ``H K H`` from ``m`` of its columns at random
        (:func:`nystrom_start`), for the block solvers' first block (``block`` columns); None
        (a random start) when the ``n x m`` columns would take more than a quarter of the budget."""
        n = Xt.shape[0]
        m = min(n, _LANDMARKS_PER_COLUMN * block)
        if 4 * n * m * Xt.element_size() > self._budget:
            return None
        idx = torch.randperm(n, generator=gen)[:m].to(Xt.device)
        C = KernelOperator(self.kernel_, Xt, Xt[idx], memory_budget=self._budget).dense()
        C.sub_(mean[:, None]).sub_(mean[idx][None, :]).add_(all_mean)
        return nystrom_start(C, idx, block)

    def _dense_eigenpairs(self, K, k, opts):
        """Top eigenpairs of ``H K H`` (in place in ``K``: row and column means apart, so that a
        non-symmetric precomputed ``K`` is centred as scikit-learn's KernelCenterer centres it);
        returns them with the column means, the grand mean and ``trace(H K H)``."""
        n = K.shape[0]
        col_mean, row_mean = K.mean(dim=0), K.mean(dim=1)
        all_mean = col_mean.mean()
        trace = float(torch.diagonal(K).sum() - n * all_mean)
        K.sub_(col_mean[None, :]).sub_(row_mean[:, None]).add_(all_mean)
        if self.kernel_.is_precomputed:  # a no-op on a symmetric K ((a + a) / 2 == a exactly)
            _symmetrise_(K, self._budget)
        return top_eigenpairs(K, k, **opts), col_mean, all_mean, trace

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
        row_mean = op.matvec(ones)
        # A precomputed Gram may be non-symmetric: decompose the symmetric part of H K H, which is
        # H ((K + K^T) / 2) H, centred with the mean of the row and column means.
        asym = self.kernel_.is_precomputed
        col_mean = op.rmatvec(ones) if asym else row_mean
        mean = (row_mean + col_mean) * 0.5 if asym else row_mean
        all_mean = col_mean.mean()
        trace = float(op.diag().sum() - n * all_mean)

        def centred(V):
            s = V.sum(dim=0, keepdim=True)
            KV = (op.matvec(V) + op.rmatvec(V)) * 0.5 if asym else op.matvec(V)
            return KV - mean[:, None] @ s - (mean @ V)[None, :] + all_mean * s

        block = min(n, k + _BLOCK_EXTRA)
        start = None if asym else self._nystrom_start(Xt, mean, all_mean, block, opts["generator"])
        res = top_eigenpairs(centred, k, n=n, dtype=Xt.dtype, device=Xt.device, start=start,
                             block_size=block if method != "power" else None,
                             **{**opts, "method": "lanczos" if method == "auto" else method})
        return res, col_mean, all_mean, trace

    def _store(self, res, Xt, col_mean, all_mean, trace):
        values = check_psd_eigenvalues(res.values, type(self).__name__)
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

    # -- pre-images ---------------------------------------------------------------------------
    def _inverse_kernel(self):
        """The kernel of the pre-image map: scikit-learn's, i.e. the named kernel with ``gamma_``
        (``1 / n_features`` of the input, not of the embedding), or the kernel object as given."""
        if isinstance(self.kernel, str):
            return resolve_kernel(self.kernel, gamma=self.gamma_, degree=self.degree, coef0=self.coef0,
                                  kernel_params=self.kernel_params, owner=type(self).__name__)
        return self.kernel_

    def _fit_inverse_transform(self, Xt):
        """Kernel ridge from the training embedding to the training data: ``(K_Z + alpha I) D = X``."""
        Z = self.eigenvectors_ * torch.sqrt(torch.as_tensor(self.eigenvalues_, dtype=self._dtype, device=self._device))
        kern = self._inverse_kernel()

        def gram():  # the lower triangle is all the Cholesky factorisation reads
            G = KernelOperator(kern, Z, memory_budget=self._budget).dense(lower_only=True)
            G.diagonal().add_(float(self.alpha))
            return G

        try:
            G = gram()
        except MemoryBudgetError as err:
            raise MemoryBudgetError(f"{type(self).__name__}: fit_inverse_transform solves an n x n kernel ridge "
                                    f"system on the embedding; {err} Raise memory_budget, or fit KernelPCA "
                                    "on a subsample.") from None
        factor = jittered_cholesky(G, rebuild=gram, owner=type(self).__name__)
        self.dual_coef_ = factor.solve(Xt)
        self.X_transformed_fit_ = Z

    def inverse_transform(self, X):
        """Pre-images of embedded points ``X`` (n, n_components): ``k_Z(X, Z_fit) @ dual_coef_``.

        Learned by kernel ridge regression (``fit_inverse_transform=True``). As in scikit-learn,
        the centred kernel has lost the mean of the feature-space data, so the reconstruction of
        a linear-kernel model does not restore the data's mean.
        """
        if not self.fit_inverse_transform:
            raise NotFittedError(f"The fit_inverse_transform parameter of {type(self).__name__} was not set to True "
                                 "when fitting, hence the inverse transform is not available.")
        check_is_fitted(self, "dual_coef_")
        Zt = self._tensor(X)
        k = self.X_transformed_fit_.shape[1]
        if Zt.ndim != 2 or Zt.shape[1] != k:
            raise ValueError(f"{type(self).__name__}.inverse_transform expects X of shape (n_samples, {k}) "
                             f"(n_components_); got shape {tuple(Zt.shape)}.")
        op = KernelOperator(self._inverse_kernel(), Zt, self.X_transformed_fit_, memory_budget=self._budget,
                            n_rhs=self.dual_coef_.shape[1])
        return as_output(op.matvec(self.dual_coef_), X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags
