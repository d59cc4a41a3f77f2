"""Nyström features and the raw landmark map of seed 002.

With landmarks ``Z`` (M x d), the Nyström approximation of the kernel is
``k~(x, y) = k(x, Z) K_ZZ^+ k(Z, y)``, exact on the landmarks' span. The feature map
``phi(x) = k(x, Z) N`` with ``N N^T = K_ZZ^+`` makes it an inner product.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import as_output, make_generator, resolve_device, resolve_dtype, to_tensor
from .._validation import Interval, Options, check_array_like, check_at_most, check_params
from ..kernels import Kernel, resolve_kernel
from ..sources import RowSource
from ..linalg import MemoryBudgetError, StreamedMethodsMixin, default_memory_budget, format_bytes, source_to_memory
from ._cholesky import _cross
from ._finite import check_finite
from ._constraints import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, N_COMPONENTS
from ._landmarks import LANDMARKS_CONSTRAINTS, check_landmarks_param, nystroem_normalization, select_landmarks
from ._stream import fit_source

__all__ = ["LandmarkFeatures", "Nystroem"]

_METHODS = ("eig", "cholesky")


class _LandmarkBase(TransformerMixin, StreamedMethodsMixin, BaseEstimator):
    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_components": N_COMPONENTS,
        "landmarks": LANDMARKS_CONSTRAINTS,
        "random_state": ["random_state"],
    }

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: the memory budget, for the device the landmarks are on."""
        self._budget = default_memory_budget(self.landmarks_.device, self.memory_budget)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # densified block by block
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags

    def _check_precomputed(self, Xv, landmarks, owner: str) -> None:
        """With ``kernel="precomputed"`` ``X`` is the square Gram matrix of the training set and the
        landmarks are training points drawn uniformly (as scikit-learn's ``Nystroem``)."""
        if not (isinstance(landmarks, str) and landmarks == "uniform"):
            raise ValueError(f"{owner} with kernel='precomputed' draws its landmarks among the training points: "
                             f"landmarks must be 'uniform'. Got {landmarks!r} instead.")
        if Xv.shape[0] != Xv.shape[1]:
            raise ValueError(f"{owner} with kernel='precomputed' expects the square (n, n) Gram matrix of the "
                             f"training set in fit; got shape {tuple(Xv.shape)}.")

    def _fit_landmarks(self, X):
        owner = type(self).__name__
        check_params(self)
        plain = isinstance(self.kernel, str) and self.kernel == "precomputed" or (
            callable(self.kernel) and not isinstance(self.kernel, Kernel))
        if plain and any(p is not None for p in (self.gamma, self.coef0, self.degree)):
            raise ValueError(f"Don't pass gamma, coef0 or degree to {owner} if using a callable or precomputed "
                             "kernel: they are parameters of the kernels given by name.")
        # Streamed X (mercer.sources) stays on disk: landmarks drawn uniformly from it (the same rows
        # as in memory) or given; a precomputed Gram matrix is read into memory (if it fits).
        Xv = fit_source(self, X)
        if Xv is not None and isinstance(self.kernel, str) and self.kernel == "precomputed":
            Xv = source_to_memory(Xv, owner, memory_budget=self.memory_budget)
        elif Xv is None:
            Xv = check_array_like(self, X, reset=True, accept_sparse=True)
        landmarks = check_landmarks_param(self.landmarks, Xv.shape[1], owner)
        if isinstance(landmarks, str):  # landmarks are chosen among the training points
            check_at_most(owner, "n_components", self.n_components, Xv.shape[0], "n_samples")
        kernel = resolve_kernel(self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                                kernel_params=self.kernel_params, owner=owner)
        if kernel.is_precomputed:
            self._check_precomputed(Xv, landmarks, owner)
        device = resolve_device(self.device if not isinstance(Xv, torch.Tensor) else (self.device or Xv.device))
        dtype = resolve_dtype(self.dtype, Xv)
        budget = default_memory_budget(device, self.memory_budget)
        M = landmarks.shape[0] if not isinstance(landmarks, str) else int(self.n_components)
        need = 3 * M * M * 8
        if need > budget:
            raise MemoryBudgetError(
                f"{owner}: {M} landmarks need about {format_bytes(need)} for their M x M matrices, more than the "
                f"memory budget of {format_bytes(budget)}; use fewer landmarks (n_components).")
        Xt = Xv if isinstance(Xv, RowSource) else to_tensor(Xv, dtype=dtype, device=device)
        Z, idx = select_landmarks(Xt, M, landmarks, kernel=kernel, generator=make_generator(self.random_state),
                                  memory_budget=budget, reg=getattr(self, "reg", None), owner=owner, dtype=dtype,
                                  device=device)
        self.kernel_ = kernel
        self.landmarks_ = Z
        self.component_indices_ = None if idx is None else idx.cpu().numpy()
        self._budget = budget
        return Xt

    def _kernel_to_landmarks(self, X):
        check_is_fitted(self)
        Xv = check_array_like(self, X, reset=False, accept_sparse=True)
        dev = Xv.device if isinstance(Xv, torch.Tensor) else self.landmarks_.device
        Xt = to_tensor(Xv, dtype=self.landmarks_.dtype, device=dev)
        if self.kernel_.is_precomputed:  # X holds k(x, x_j) for the training points x_j: keep the landmarks' columns
            return Xt[:, torch.as_tensor(self.component_indices_, device=dev)].clone()
        K = _cross(self.kernel_, Xt, self.landmarks_.to(dev), self._budget)
        check_finite(K, type(self).__name__, "the kernel values to the landmarks", X=Xt, kernel=self.kernel_)
        return K


class Nystroem(_LandmarkBase):
    """Nyström feature map: ``transform(X) @ transform(Y).T = K(X, Z) K_ZZ^+ K(Z, Y) ~ k(X, Y)``.

    Parameters
    ----------
    kernel : str or Kernel, default="rbf"
        Any mercer kernel, including composites and set kernels, or ``"precomputed"``: then ``fit``
        takes the training set's (n, n) Gram matrix and ``transform`` the (n_new, n) kernel values
        to the training points (as scikit-learn's ``Nystroem``); the landmarks are drawn uniformly.
    n_components : int, default=100
        Number of landmarks M (ignored when ``landmarks`` is an array). Must not exceed n_samples.
    landmarks : {"uniform", "kmeans++", "kmeans", "leverage", "greedy"} or array, default="uniform"
        How to choose them (see :mod:`mercer.approx._landmarks`), or the landmarks themselves.
    method : {"eig", "cholesky"}, default="eig"
        ``K_ZZ^{-1/2}`` from an eigendecomposition with small eigenvalues dropped (robust to
        duplicate landmarks), or ``L^{-T}`` from a Cholesky factor with jitter (faster to build).
    reg : float or None
        Ridge parameter of the leverage scores (``landmarks="leverage"``); ``None`` picks it so the
        effective dimension is about ``M / log M``.
    gamma, degree, coef0, kernel_params : for a string ``kernel``, as in :class:`mercer.KernelRidge`.
    random_state, device, dtype, memory_budget : as elsewhere in mercer.

    Attributes
    ----------
    landmarks_ : tensor of shape (M, n_features_in_)
        The landmarks (with ``kernel="precomputed"``: their rows of the Gram matrix).
    component_indices_ : ndarray of shape (M,) or None
        Indices of the landmarks in the training set (``None`` for k-means centres or given arrays).
    normalization_ : tensor of shape (M, M)
    rank_ : int
        Numerical rank of ``K_ZZ`` (``"eig"``); fewer than M when landmarks are (nearly) dependent.
    kernel_ : Kernel
    """

    _parameter_constraints: dict = {
        **_LandmarkBase._parameter_constraints,
        "method": [Options(*_METHODS)],
        "reg": [Interval(Real, 0, None, closed="neither"), None],
    }

    def __init__(self, kernel="rbf", n_components=100, *, landmarks="uniform", method="eig", reg=None, gamma=None,
                 degree=None, coef0=None, kernel_params=None, random_state=None, device=None, dtype=None,
                 memory_budget=None):
        self.kernel = kernel
        self.n_components = n_components
        self.landmarks = landmarks
        self.method = method
        self.reg = reg
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y=None):
        self._fit_landmarks(X)  # checks the parameters first
        gram = None
        if self.kernel_.is_precomputed:  # landmarks_ are rows of the Gram matrix: K_ZZ is their landmark columns
            gram = self.landmarks_[:, torch.as_tensor(self.component_indices_, device=self.landmarks_.device)]
        N, rank = nystroem_normalization(self.kernel_, self.landmarks_, self.method, owner=type(self).__name__,
                                         gram=gram)
        self.normalization_ = N.to(self.landmarks_.dtype)
        self.rank_ = rank
        self.n_features_out_ = self.landmarks_.shape[0]
        return self

    def transform(self, X):
        K = self._kernel_to_landmarks(X)
        return as_output(K @ self.normalization_.to(K.device), X)

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self)
        return np.asarray([f"nystroem{i}" for i in range(self.n_features_out_)], dtype=object)


class LandmarkFeatures(_LandmarkBase):
    """The raw landmark map of seed 002: ``psi(x) = [k(z_1, x), ..., k(z_L, x)]``.

    Unlike :class:`Nystroem`, the features are not whitened, so ``psi(x)^T psi(y)`` is *not* an
    approximation of ``k(x, y)``; a linear model on them is a kernel model with the landmarks as
    its only support vectors (the seeds' "kernel features"). Parameters as :class:`Nystroem`.
    """

    def __init__(self, kernel="rbf", n_components=100, *, landmarks="uniform", gamma=None, degree=None, coef0=None,
                 kernel_params=None, random_state=None, device=None, dtype=None, memory_budget=None):
        self.kernel = kernel
        self.n_components = n_components
        self.landmarks = landmarks
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y=None):
        self._fit_landmarks(X)
        self.n_features_out_ = self.landmarks_.shape[0]
        return self

    def transform(self, X):
        return as_output(self._kernel_to_landmarks(X), X)

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self)
        return np.asarray([f"landmarkfeatures{i}" for i in range(self.n_features_out_)], dtype=object)
