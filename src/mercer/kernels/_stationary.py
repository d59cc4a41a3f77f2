"""Stationary kernels ``k(x, y) = f(x - y)``: RBF/Gaussian, Laplacian, Matérn.

Each one also knows its spectral density (Bochner's theorem): ``sample_frequencies`` draws
``omega`` with ``E[cos(omega^T (x - y))] = k(x, y)``, which is what random Fourier features need.

Each scale may also be a vector, one value per feature (automatic relevance determination, ARD):
the inputs are then rescaled per feature once per block (RBF ``x * sqrt(gamma)``, Laplacian
``x * gamma``, Matérn ``x / length_scale``) and the formula with unit scale is applied; the
frequencies are drawn as for unit scale and rescaled per feature. A scalar scale takes the same
code as before (one type check more).
"""

from __future__ import annotations

import math
import weakref

import torch

from .._backend import row_sq_norms
from .._sparse import is_sparse
from ._base import Kernel, _fmt
from ._distances import exact_distances, l1_distances
from ._params import Param, _is_ard, _Scales, one_of, optional_scale, resolved_gamma, scale

__all__ = ["RBF", "Gaussian", "Laplacian", "Matern", "squared_distances"]


def squared_distances(X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
    """``||x - y||^2`` for every pair by the GEMM expansion, clamped at 0; one block of memory."""
    return _scaled_sq_dist(X1, X2, 1.0).neg_()


def _scaled_sq_dist(X1: torch.Tensor, X2: torch.Tensor, g) -> torch.Tensor:
    """``-g ||x - y||^2`` (clamped at 0 from above) as one GEMM on augmented rows,
    ``[2g x, -g |x|^2, 1] . [y, 1, -g |y|^2]``: the norms are added inside the product, so the block
    is written once by the GEMM and touched once more by the clamp (the expansion with separate
    norm additions makes two more passes over a block that is usually larger than the cache).

    A few rows against many stored points (prediction of small batches) take another route: the
    augmented copy of ``X2`` would cost more than the product itself, so the product is
    ``X1 @ X2.T`` on ``X2`` as it is and the norms of ``X2`` come from a small cache."""
    n1 = row_sq_norms(X1)[:, None]
    if is_sparse(X1):  # the same expansion on the sparse product block (no augmented copy)
        n2 = n1 if X2 is X1 else X2.row_sq_norms()[:, None]
        D = X1.dot_block(X2)
        D = D.mul_(2.0 * g) if isinstance(g, (int, float)) else D * (2.0 * g)
        return D.sub_(n1 * g).sub_(n2.T * g).clamp_max_(0.0)
    if X2 is not X1 and X1.shape[0] <= _SMALL_LEFT:
        n2 = _sq_norms_cached(X2)
        D = (X1 @ X2.T).mul_(2.0 * g) if isinstance(g, (int, float)) else (X1 @ X2.T) * (2.0 * g)
        return D.sub_(n1 * g).sub_(n2[None, :] * g).clamp_max_(0.0)
    A = torch.cat([X1 * (2.0 * g), n1.mul(-g), torch.ones_like(n1)], dim=1)
    n2 = n1 if X2 is X1 else row_sq_norms(X2)[:, None]
    B = torch.cat([X2, torch.ones_like(n2), n2.mul(-g)], dim=1)
    return (A @ B.T).clamp_max_(0.0)


# Small-batch latency: the squared norms of stored points (support vectors, training set, centres)
# are kept for a few tensors, keyed by the tensor object (held weakly: the entry goes with it) and
# its version counter (in-place edits invalidate). Tensors that need gradients and inference-mode
# calls are not cached. The norms are O(n) memory; recomputing them reads all of X2 once more.
_SMALL_LEFT = 64
_CACHE_ENTRIES = 8
_norm_cache: dict[int, tuple] = {}


def _row_block_of(X: torch.Tensor):
    """``(base, start)`` when ``X`` is a block of whole rows of a larger tensor ``base`` (what the
    block engine passes: ``Z[cols]``), else ``(X, 0)``."""
    base = X._base
    if base is None or base.ndim != 2 or X.ndim != 2 or base.shape[1] != X.shape[1] or base.stride() != X.stride() \
            or base.stride(1) != 1 or base.stride(0) <= 0:
        return X, 0
    offset = X.storage_offset() - base.storage_offset()
    if offset % base.stride(0):
        return X, 0
    return base, offset // base.stride(0)


def _sq_norms_cached(X2: torch.Tensor) -> torch.Tensor:
    if X2.requires_grad or torch.is_inference_mode_enabled():
        return row_sq_norms(X2)
    base, start = _row_block_of(X2)
    if base is not X2:  # a block of rows: the norms of the whole tensor, cached once, then sliced
        return _sq_norms_cached(base)[start:start + X2.shape[0]]
    key = id(X2)
    hit = _norm_cache.get(key)
    if hit is not None:
        ref, version, ptr, shape, n2 = hit
        if ref() is X2 and version == X2._version and ptr == X2.data_ptr() and shape == X2.shape:
            return n2
    n2 = row_sq_norms(X2)
    while len(_norm_cache) >= _CACHE_ENTRIES:
        _norm_cache.pop(next(iter(_norm_cache)), None)
    ref = weakref.ref(X2, lambda _r, k=key: _norm_cache.pop(k, None))
    _norm_cache[key] = (ref, X2._version, X2.data_ptr(), X2.shape, n2)
    return n2


# -- per-feature scales (ARD) --------------------------------------------------------------------
def _per_feature(kernel: Kernel, name: str, n_features: int, *, dtype, device) -> torch.Tensor:
    """The per-feature scale ``name`` of ``kernel`` as a tensor, after checking its length."""
    values = getattr(kernel, name)
    if len(values) != n_features:
        raise ValueError(f"The {name!r} parameter of {type(kernel).__name__} has {len(values)} values (one per "
                         f"feature) but the data have {n_features} features; they must match.")
    if isinstance(values, torch.Tensor):  # learnable: stays on the autograd graph
        return values.to(device=device, dtype=dtype)
    return torch.tensor(values, dtype=torch.float64).to(device=device, dtype=dtype)


def _scale_columns(X, s: torch.Tensor):
    """``X * s`` (one factor per feature) for dense or sparse rows."""
    return X.scale_columns(s) if is_sparse(X) else X * s


def _diff_sq(A, B) -> torch.Tensor:
    """``||a_i - b_i||^2`` per row, dense or sparse."""
    return A.paired(B, "sq") if is_sparse(A) else ((A - B) ** 2).sum(dim=1)


def _diff_norm(A, B) -> torch.Tensor:
    """``||a_i - b_i||`` per row, dense or sparse."""
    return A.paired(B, "sq").sqrt_() if is_sparse(A) else torch.linalg.vector_norm(A - B, dim=1)


def _diff_l1(A, B) -> torch.Tensor:
    return A.paired(B, "l1") if is_sparse(A) else (A - B).abs().sum(dim=1)


def _ard_sq_dist(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``-||a - b||^2`` of rescaled rows. They are fresh tensors, so a few rows against many take
    the direct product without the norm cache (which is for stored points)."""
    if B is A or A.shape[0] > _SMALL_LEFT or is_sparse(A):
        return _scaled_sq_dist(A, B, 1.0)
    return (A @ B.T).mul_(2.0).sub_(row_sq_norms(A)[:, None]).sub_(row_sq_norms(B)[None, :]).clamp_max_(0.0)


class _Stationary(Kernel):
    is_stationary = True
    differentiable_inputs = True
    sparse_rows = True

    @property
    def is_ard(self) -> bool:
        """True when the scale is given per feature (a vector)."""
        return any(_is_ard(getattr(self, p.name)) for p in type(self).PARAMS if p.per_feature)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v.short()}" if type(v) is _Scales else f"{k}={_fmt(v)}"
                         for k, v in self.hyperparameters.items())
        return f"{type(self).__name__}({args})"

    def _ard_factor(self, X: torch.Tensor) -> torch.Tensor:
        """Per-feature factor the inputs are multiplied by (unit scale after it)."""
        raise NotImplementedError  # pragma: no cover

    def _ard_inputs(self, X1: torch.Tensor, X2: torch.Tensor):
        """``X1`` and ``X2`` rescaled per feature (the same tensor twice when ``X2 is X1``)."""
        s = self._ard_factor(X1)
        A = _scale_columns(X1, s)
        return A, (A if X2 is X1 else _scale_columns(X2, s))

    def sample_frequencies(self, n_features: int, n_components: int, *, generator: torch.Generator,
                           dtype=torch.float64, device="cpu") -> torch.Tensor:
        """Draw ``(n_features, n_components)`` frequencies from the kernel's spectral density."""
        raise NotImplementedError  # pragma: no cover


class RBF(_Stationary):
    r"""Gaussian (RBF) kernel :math:`k(x, y) = \exp(-\gamma \|x - y\|^2)`, or with one
    :math:`\gamma_i` per feature (ARD) :math:`k(x, y) = \exp(-\sum_i \gamma_i (x_i - y_i)^2)`.

    Parameters
    ----------
    gamma : float > 0, array-like of shape (n_features,) or None
        ``None`` means ``1 / n_features`` (scikit-learn's default) unless ``sigma`` is given. A
        vector (list, array, 1-D tensor) gives one value per feature; its length is checked
        against the data's number of features at evaluation.
    sigma : float > 0, array-like of shape (n_features,) or None
        Bandwidth; ``gamma = 1 / (2 sigma^2)`` (per feature for a vector: scikit-learn's
        ``RBF(length_scale=sigma)``). Give ``gamma`` or ``sigma``, not both.

    ``sigma`` is an alias read into ``gamma``: :meth:`get_params` returns ``gamma`` (the value
    used) and ``sigma=None``, so ``RBF(**k.get_params())`` equals ``k``; ``set_params(sigma=s)``
    sets ``gamma = 1 / (2 s^2)`` and ``set_params(gamma=g)`` sets ``gamma``, so a search can
    run over either name (giving both at once raises, as in ``__init__``).

    Spectral density: :math:`\omega \sim \mathcal{N}(0, 2\gamma I)`
    (:math:`\omega_i \sim \mathcal{N}(0, 2\gamma_i)` per feature).
    """

    SHORTHANDS = ("rbf", "gaussian")
    PARAMS = (Param("gamma", None, optional_scale, learn="inverse_square", per_feature=True, sklearn="length_scale"),
              Param("sigma", None, optional_scale, alias=True))

    def __init__(self, gamma: float | None = None, sigma: float | None = None):
        owner = type(self).__name__
        gamma, sigma = self._validate("gamma", gamma), self._validate("sigma", sigma)
        if gamma is not None and sigma is not None:
            raise ValueError(f"The 'sigma' parameter of {owner} must be None when 'gamma' is given (give either "
                             f"'gamma' or 'sigma', not both). Got {sigma!r} instead (gamma={gamma!r}).")
        if isinstance(sigma, _Scales):
            self.gamma = _Scales(1.0 / (2.0 * s**2) for s in sigma)
        else:
            self.gamma = 1.0 / (2.0 * sigma**2) if sigma is not None else gamma

    def _merged_params(self, current: dict, changed: dict) -> dict:
        if changed.get("sigma") is not None and "gamma" not in changed:
            current = {**current, "gamma": None}  # the new sigma replaces the old gamma
        return {**current, **changed}

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _ard_factor(self, X):
        return _per_feature(self, "gamma", X.shape[1], dtype=torch.float64, device=X.device).sqrt().to(X.dtype)

    def _pairwise(self, X1, X2):
        if _is_ard(self.gamma):
            return _ard_sq_dist(*self._ard_inputs(X1, X2)).exp_()
        return _scaled_sq_dist(X1, X2, resolved_gamma(self.gamma, X1.shape[1])).exp_()

    def _cached_pairwise(self, cache):
        if _is_ard(self.gamma):
            return super()._cached_pairwise(cache)
        return torch.exp(cache.distances("sq") * -resolved_gamma(self.gamma, cache.X1.shape[1]))

    def _paired(self, X1, X2):
        if _is_ard(self.gamma):
            A, B = self._ard_inputs(X1, X2)
            return torch.exp(-_diff_sq(A, B))
        g = resolved_gamma(self.gamma, X1.shape[1])
        return torch.exp(-g * _diff_sq(X1, X2))

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        if _is_ard(self.gamma):  # N(0, 2 gamma_i) per feature: unit draws, rows rescaled
            g = _per_feature(self, "gamma", n_features, dtype=dtype, device=device)
            W = torch.randn(n_features, n_components, generator=generator, dtype=dtype, device=device)
            return W.mul_((2.0 * g).sqrt()[:, None])
        g = float(resolved_gamma(self.gamma, n_features))
        W = torch.randn(n_features, n_components, generator=generator, dtype=dtype, device=device)
        return W.mul_(math.sqrt(2.0 * g))


Gaussian = RBF


class Laplacian(_Stationary):
    r"""Laplacian kernel :math:`k(x, y) = \exp(-\gamma \|x - y\|_1)` (as scikit-learn's), or with
    one :math:`\gamma_i` per feature (ARD) :math:`k(x, y) = \exp(-\sum_i \gamma_i |x_i - y_i|)`.

    Parameters
    ----------
    gamma : float > 0, array-like of shape (n_features,) or None
        ``None`` means ``1 / n_features``. A vector (list, array, 1-D tensor) gives one value
        per feature; its length is checked against the data's at evaluation.

    Spectral density: a product of Cauchy(0, gamma) laws (Cauchy(0, gamma_i) per feature), one
    per coordinate.
    """

    SHORTHANDS = ("laplacian",)
    PARAMS = (Param("gamma", None, optional_scale, learn="inverse", per_feature=True),)

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _ard_factor(self, X):
        return _per_feature(self, "gamma", X.shape[1], dtype=X.dtype, device=X.device)

    def _pairwise(self, X1, X2):
        if _is_ard(self.gamma):
            A, B = self._ard_inputs(X1, X2)
            D = l1_distances(A, B)
            # cdist's backward reads its output: no in-place op on it when autograd records
            return torch.exp(-D) if D.requires_grad else D.neg_().exp_()
        g = resolved_gamma(self.gamma, X1.shape[1])
        D = l1_distances(X1, X2)
        return torch.exp(-g * D) if D.requires_grad else D.mul_(-g).exp_()

    def _cached_pairwise(self, cache):
        if _is_ard(self.gamma):
            return super()._cached_pairwise(cache)
        return torch.exp(cache.distances("l1") * -resolved_gamma(self.gamma, cache.X1.shape[1]))

    def _paired(self, X1, X2):
        if _is_ard(self.gamma):
            A, B = self._ard_inputs(X1, X2)
            return torch.exp(-_diff_l1(A, B))
        g = resolved_gamma(self.gamma, X1.shape[1])
        return torch.exp(-g * _diff_l1(X1, X2))

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        if _is_ard(self.gamma):  # Cauchy(0, gamma_i) per feature: unit draws, rows rescaled
            g = _per_feature(self, "gamma", n_features, dtype=dtype, device=device)
            U = torch.rand(n_features, n_components, generator=generator, dtype=dtype, device=device)
            return torch.tan(math.pi * (U - 0.5)).mul_(g[:, None])
        g = float(resolved_gamma(self.gamma, n_features))
        U = torch.rand(n_features, n_components, generator=generator, dtype=dtype, device=device)
        return torch.tan(math.pi * (U - 0.5)).mul_(g)


class Matern(_Stationary):
    r"""Matérn kernel with smoothness ``nu`` in {1/2, 3/2, 5/2} and ``length_scale`` l.

    With :math:`r = \|x - y\|_2 / l`, or with one :math:`l_i` per feature (ARD)
    :math:`r = \|(x - y) / l\|_2 = \sqrt{\sum_i (x_i - y_i)^2 / l_i^2}`:

    * nu = 1/2: :math:`\exp(-r)`
    * nu = 3/2: :math:`(1 + \sqrt{3} r) \exp(-\sqrt{3} r)`
    * nu = 5/2: :math:`(1 + \sqrt{5} r + 5 r^2 / 3) \exp(-\sqrt{5} r)`

    Parameters
    ----------
    nu : {0.5, 1.5, 2.5}, default 1.5
    length_scale : float > 0 or array-like of shape (n_features,), default 1.0
        A vector (list, array, 1-D tensor) gives one length scale per feature; its length is
        checked against the data's at evaluation.

    Matches ``sklearn.gaussian_process.kernels.Matern`` (anisotropic with a vector
    ``length_scale``). Spectral density: a multivariate Student-t with ``2 nu`` degrees of
    freedom and scale ``1 / l`` (``1 / l_i`` per feature).
    """

    SHORTHANDS = ("matern",)
    PARAMS = (Param("nu", 1.5, one_of(0.5, 1.5, 2.5), sklearn="nu"),
              Param("length_scale", 1.0, scale, learn="length", per_feature=True, sklearn="length_scale"))

    def _profile(self, r: torch.Tensor) -> torch.Tensor:
        grad = r.requires_grad  # then out of place (cdist's backward reads its output)
        if self.nu == 0.5:
            return torch.exp(-r) if grad else r.neg_().exp_()
        if self.nu == 1.5:
            r = r * math.sqrt(3.0) if grad else r.mul_(math.sqrt(3.0))
            return (1.0 + r) * torch.exp(-r)
        r = r * math.sqrt(5.0) if grad else r.mul_(math.sqrt(5.0))
        return (1.0 + r + r * r / 3.0) * torch.exp(-r)

    def _ard_inputs(self, X1, X2):
        # x / l (as scikit-learn), not x * (1 / l)
        ls = _per_feature(self, "length_scale", X1.shape[1], dtype=X1.dtype, device=X1.device)
        A = _scale_columns(X1, 1.0 / ls) if is_sparse(X1) else X1 / ls
        return A, (A if X2 is X1 else _scale_columns(X2, 1.0 / ls) if is_sparse(X2) else X2 / ls)

    def _pairwise(self, X1, X2):
        # Exact differences (not the GEMM expansion): sqrt amplifies cancellation near r = 0.
        if _is_ard(self.length_scale):
            A, B = self._ard_inputs(X1, X2)
            return self._profile(exact_distances(A, B))
        r = exact_distances(X1, X2)
        return self._profile(r / self.length_scale if r.requires_grad else r.div_(self.length_scale))

    def _cached_pairwise(self, cache):
        if _is_ard(self.length_scale):
            return super()._cached_pairwise(cache)
        return self._profile(cache.distances("l2") / self.length_scale)  # a new tensor: the cached one is not written

    def _paired(self, X1, X2):
        if _is_ard(self.length_scale):
            A, B = self._ard_inputs(X1, X2)
            return self._profile(_diff_norm(A, B))
        r = _diff_norm(X1, X2) / self.length_scale
        return self._profile(r)

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        ard = _is_ard(self.length_scale)
        ls = _per_feature(self, "length_scale", n_features, dtype=dtype, device=device)[:, None] if ard \
            else self.length_scale
        Z = torch.randn(n_features, n_components, generator=generator, dtype=dtype, device=device)
        dof = 2.0 * self.nu
        # u ~ chi-square(dof) = Gamma(dof / 2, scale 2)
        shape = torch.full((n_components,), dof / 2.0, dtype=dtype, device=device)
        u = torch._standard_gamma(shape, generator=generator) * 2.0
        return Z.div_(ls).mul_(torch.sqrt(dof / u)[None, :])
