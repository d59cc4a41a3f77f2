"""Ridge regression on random Fourier features: the primal side of the seeds' N-vs-D choice.

With D = 2m features ``z(x)``, the model is ``f(x) = z(x)^T w`` with
``w = (Z^T W Z + alpha I)^{-1} Z^T W y``: O(n D^2) time, O(D^2) memory. ``Z^T W Z`` and ``Z^T W y``
are accumulated over row blocks (float64 sums of float32 or float64 blocks), so the n x D feature
matrix is never stored. As m grows, the model tends to exact kernel ridge regression with the same
``alpha`` (and ``fit_intercept``). With ``fit_intercept=True`` (default) ``Z`` and ``y`` are centred by
their weighted means and ``f(x) = z(x)^T w + b`` with the unpenalised ``b = mean(y) - mean(z)^T w``.
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output
from ..._validation import Interval, Options, check_params
from ...approx import RandomFourierFeatures, check_finite
from ...linalg import MAX_TILE_BYTES, MemoryBudgetError, format_bytes, jittered_cholesky, plan_rows, row_blocks, tensor_blocks
from ...sources import RowSource
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin
from ._exact import NormalEquations, _check_alpha, add_intercept, intercept_output

__all__ = ["RandomFeatureRidge"]


class RandomFeatureRidge(MultiOutputMixin, RegressorMixin, KernelEstimatorMixin, BaseEstimator):
    """Ridge regression on random Fourier features of a stationary kernel.

    ``fit`` streams data that is not in memory (:mod:`mercer.sources`), one row block at a time,
    in O(D^2 + block) memory.

    Parameters
    ----------
    alpha : float or array of shape (n_targets,), default=1.0
        As in :class:`mercer.KernelRidge` (the same ``alpha`` gives the same model as m grows).
    kernel : str or Kernel, default="rbf"
        Any stationary kernel (see :class:`mercer.approx.RandomFourierFeatures`).
    gamma, kernel_params : for a string ``kernel``.
    n_components : int, default=500
        Random frequencies m (2m features with ``variant="cossin"``).
    variant, orthogonal : see :class:`mercer.approx.RandomFourierFeatures`.
    fit_intercept : bool, default=True
        Fit an unpenalised offset (features and targets centred by their weighted means), as
        scikit-learn's ``make_pipeline(RBFSampler(...), Ridge(alpha))``.
    random_state, device, dtype, memory_budget : as elsewhere in mercer.

    Attributes
    ----------
    features_ : RandomFourierFeatures
        The fitted feature map.
    coef_ : tensor of shape (D,) or (D, n_targets)
    intercept_ : float or ndarray of shape (n_targets,)
        0.0 when ``fit_intercept=False``.
    fit_time_ : float
    """

    _parameter_constraints: dict = {
        **{k: KERNEL_CONSTRAINTS[k] for k in ("kernel", "gamma", "kernel_params")},
        **COMPUTE_CONSTRAINTS,
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "variant": [Options("cossin", "phase")],
        "orthogonal": ["boolean"],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
    }
    _saved_private = ("_y_1d",)  # private state that mercer.io saves
    _streams_fit = True  # fit reads a streamed X (mercer.sources) block by block

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, kernel_params=None, n_components=500,
                 variant="cossin", orthogonal=False, fit_intercept=True, random_state=None, device=None,
                 dtype=None, memory_budget=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.kernel = kernel
        self.gamma = gamma
        self.kernel_params = kernel_params
        self.n_components = n_components
        self.variant = variant
        self.orthogonal = orthogonal
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _rows(self, n: int, D: int, d: int, itemsize: int) -> int:
        """Rows per block: a block holds its input row, its features and their weighted copy
        (``d + 2 D`` per row), within a quarter of the budget and 128 MiB."""
        return plan_rows(n, (d + 2 * D) * itemsize, budget=self._plan.share("feature rows"), max_bytes=MAX_TILE_BYTES,
                         what=f"{type(self).__name__}'s block of random features")

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d): an array, or streamed data (:mod:`mercer.sources`: a ``.npy`` /
        Parquet path, a memmap, a Dask collection), whose row blocks are read one at a time: the
        normal equations are sums over blocks, so the fit equals the in-memory one."""
        owner = type(self).__name__
        t0 = time.perf_counter()
        check_params(self)
        X = self._validate_X(X, reset=True)
        source = X if isinstance(X, RowSource) else None
        y = self._validate_y(y, X.shape[0])
        sw = self._sample_weight(sample_weight, X, X.shape[0])
        Y = y.reshape(len(y), -1)
        alphas = _check_alpha(self.alpha, Y.shape[1], owner)
        self._setup_compute(X)
        Xt = None if source is not None else self._tensor(X)
        rff = RandomFourierFeatures(self.kernel, int(self.n_components), variant=self.variant,
                                    orthogonal=self.orthogonal, gamma=self.gamma, kernel_params=self.kernel_params,
                                    random_state=self.random_state, device=self._device, dtype=self._dtype)
        rff.fit(Xt[:1] if source is None else torch.zeros(1, source.n_features, dtype=self._dtype))
        rff.n_features_in_ = X.shape[1]
        D = rff.n_features_out_
        need = 2 * D * D * 8
        if need > self._budget:
            raise MemoryBudgetError(f"{owner}: {D} features need {format_bytes(need)} for the D x D normal "
                                    f"matrix, more than the memory budget of {format_bytes(self._budget)}; lower "
                                    "n_components.")
        eq = NormalEquations(D, Y.shape[1], dtype=torch.float64, device=self._device, centre=self.fit_intercept)
        Yt = torch.as_tensor(Y, dtype=torch.float64, device=self._device)
        w = None if sw is None else torch.as_tensor(sw, dtype=torch.float64, device=self._device)
        n, desc = X.shape[0], "random-feature normal equations"
        br = self._rows(n, D, X.shape[1], torch.finfo(self._dtype).bits // 8)
        blocks = ((r, Xt[r]) for r in row_blocks(n, br, desc=desc)) if source is None else \
            tensor_blocks(source, br, dtype=self._dtype, device=self._device, desc=desc)
        for r, Xb in blocks:
            eq.add(rff._features(Xb), Yt[r], None if w is None else w[r])
        G, b = eq.system()
        check_finite([G, b], owner, "the normal equations' entries", X=Xt, kernel=rff.kernel_, y=Yt,
                     dtype=self._dtype)
        coef = torch.empty(D, Y.shape[1], dtype=torch.float64, device=self._device)
        for j, a in enumerate(alphas):
            A = G.clone()
            A.diagonal().add_(float(a))
            coef[:, j] = jittered_cholesky(A, owner=owner).solve(b[:, j])
        intercept = eq.intercept(coef)
        # predict computes in self._dtype: coefficients or intercepts it cannot hold (|y| ~ 1e300 in
        # float32) would be infinite predictions
        check_finite([coef.to(self._dtype), torch.from_numpy(intercept).to(self._dtype)], owner,
                     f"the coefficients in {str(self._dtype).replace('torch.', '')}", X=Xt, kernel=rff.kernel_, y=Yt,
                     dtype=self._dtype)
        self.features_ = rff
        self.kernel_ = rff.kernel_
        self.coef_ = coef[:, 0] if y.ndim == 1 else coef
        self._y_1d = y.ndim == 1
        self.intercept_ = intercept_output(intercept, self._y_1d)
        self.fit_time_ = time.perf_counter() - t0
        return self

    def predict(self, X):
        check_is_fitted(self, "coef_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        coef = self.coef_ if self.coef_.ndim == 2 else self.coef_[:, None]
        coef = coef.to(device=Xt.device, dtype=Xt.dtype)
        n = Xt.shape[0]
        if n:
            br = self._rows(n, coef.shape[0], Xt.shape[1], Xt.element_size())
            out = torch.cat([self.features_._features(Xt[r]) @ coef for r in row_blocks(n, br, desc="predict")])
        else:
            out = torch.zeros(0, coef.shape[1], dtype=Xt.dtype, device=Xt.device)
        out = add_intercept(out, self.intercept_)
        if self._y_1d:
            out = out[:, 0]
        return as_output(out, X)

    def _after_load(self) -> None:
        """After :func:`mercer.io.load`: a model saved before ``fit_intercept`` existed has none."""
        super()._after_load()
        if not hasattr(self, "intercept_"):
            self.intercept_ = 0.0
            self.fit_intercept = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
