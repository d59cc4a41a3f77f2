"""Stationary kernels ``k(x, y) = f(x - y)``: RBF/Gaussian, Laplacian, Matérn.

Each one also knows its spectral density (Bochner's theorem): ``sample_frequencies`` draws
``omega`` with ``E[cos(omega^T (x - y))] = k(x, y)``, which is what random Fourier features need.
"""

from __future__ import annotations

import math
import weakref

import torch

from .._backend import row_sq_norms
from ._base import Kernel
from ._params import positive, resolved_gamma

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


class _Stationary(Kernel):
    is_stationary = True

    def sample_frequencies(self, n_features: int, n_components: int, *, generator: torch.Generator,
                           dtype=torch.float64, device="cpu") -> torch.Tensor:
        """Draw ``(n_features, n_components)`` frequencies from the kernel's spectral density."""
        raise NotImplementedError  # pragma: no cover


class RBF(_Stationary):
    r"""Gaussian (RBF) kernel :math:`k(x, y) = \exp(-\gamma \|x - y\|^2)`.

    Parameters
    ----------
    gamma : float > 0 or None
        ``None`` means ``1 / n_features`` (scikit-learn's default) unless ``sigma`` is given.
    sigma : float > 0 or None
        Bandwidth; ``gamma = 1 / (2 sigma^2)``. Give ``gamma`` or ``sigma``, not both.

    ``sigma`` is an alias read into ``gamma``: :meth:`get_params` returns ``gamma`` (the value
    used) and ``sigma=None``, so ``RBF(**k.get_params())`` equals ``k``; ``set_params(sigma=s)``
    sets ``gamma = 1 / (2 s^2)`` and ``set_params(gamma=g)`` sets ``gamma``, so a search can
    run over either name (giving both at once raises, as in ``__init__``).

    Spectral density: :math:`\omega \sim \mathcal{N}(0, 2\gamma I)`.
    """

    def __init__(self, gamma: float | None = None, sigma: float | None = None):
        owner = type(self).__name__
        gamma = positive(owner, "gamma", gamma, allow_none=True)
        sigma = positive(owner, "sigma", sigma, allow_none=True)
        if gamma is not None and sigma is not None:
            raise ValueError(f"The 'sigma' parameter of {owner} must be None when 'gamma' is given (give either "
                             f"'gamma' or 'sigma', not both). Got {sigma!r} instead (gamma={gamma!r}).")
        self.gamma = 1.0 / (2.0 * sigma**2) if sigma is not None else gamma

    def _shallow_params(self) -> dict:
        return {"gamma": self.gamma, "sigma": None}  # sigma was read into gamma

    def _merged_params(self, current: dict, changed: dict) -> dict:
        if changed.get("sigma") is not None and "gamma" not in changed:
            current = {**current, "gamma": None}  # the new sigma replaces the old gamma
        return {**current, **changed}

    @property
    def hyperparameters(self) -> dict:
        return {"gamma": self.gamma}

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _pairwise(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return _scaled_sq_dist(X1, X2, g).exp_()

    def _paired(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return torch.exp(-g * ((X1 - X2) ** 2).sum(dim=1))

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        g = float(resolved_gamma(self.gamma, n_features))
        W = torch.randn(n_features, n_components, generator=generator, dtype=dtype, device=device)
        return W.mul_(math.sqrt(2.0 * g))


Gaussian = RBF


class Laplacian(_Stationary):
    r"""Laplacian kernel :math:`k(x, y) = \exp(-\gamma \|x - y\|_1)` (as scikit-learn's).

    ``gamma=None`` means ``1 / n_features``. Spectral density: a product of Cauchy(0, gamma)
    laws, one per coordinate.
    """

    def __init__(self, gamma: float | None = None):
        self.gamma = positive(type(self).__name__, "gamma", gamma, allow_none=True)

    @property
    def hyperparameters(self) -> dict:
        return {"gamma": self.gamma}

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _pairwise(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return torch.cdist(X1, X2, p=1.0).mul_(-g).exp_()

    def _paired(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return torch.exp(-g * (X1 - X2).abs().sum(dim=1))

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        g = float(resolved_gamma(self.gamma, n_features))
        U = torch.rand(n_features, n_components, generator=generator, dtype=dtype, device=device)
        return torch.tan(math.pi * (U - 0.5)).mul_(g)


class Matern(_Stationary):
    r"""Matérn kernel with smoothness ``nu`` in {1/2, 3/2, 5/2} and ``length_scale`` l.

    With :math:`r = \|x - y\|_2 / l`:

    * nu = 1/2: :math:`\exp(-r)`
    * nu = 3/2: :math:`(1 + \sqrt{3} r) \exp(-\sqrt{3} r)`
    * nu = 5/2: :math:`(1 + \sqrt{5} r + 5 r^2 / 3) \exp(-\sqrt{5} r)`

    Matches ``sklearn.gaussian_process.kernels.Matern``. Spectral density: a multivariate
    Student-t with ``2 nu`` degrees of freedom and scale ``1 / l``.
    """

    _NUS = (0.5, 1.5, 2.5)

    def __init__(self, nu: float = 1.5, length_scale: float = 1.0):
        owner = type(self).__name__
        if nu not in self._NUS:
            raise ValueError(f"The 'nu' parameter of {owner} must be one of {self._NUS}. Got {nu!r} instead.")
        self.nu = float(nu)
        self.length_scale = positive(owner, "length_scale", length_scale)

    @property
    def hyperparameters(self) -> dict:
        return {"nu": self.nu, "length_scale": self.length_scale}

    def _profile(self, r: torch.Tensor) -> torch.Tensor:
        if self.nu == 0.5:
            return r.neg_().exp_()
        if self.nu == 1.5:
            r = r.mul_(math.sqrt(3.0))
            return (1.0 + r) * torch.exp(-r)
        r = r.mul_(math.sqrt(5.0))
        return (1.0 + r + r * r / 3.0) * torch.exp(-r)

    def _pairwise(self, X1, X2):
        # Exact differences (not the GEMM expansion): sqrt amplifies cancellation near r = 0.
        r = torch.cdist(X1, X2, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")
        return self._profile(r.div_(self.length_scale))

    def _paired(self, X1, X2):
        r = torch.linalg.vector_norm(X1 - X2, dim=1) / self.length_scale
        return self._profile(r)

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        Z = torch.randn(n_features, n_components, generator=generator, dtype=dtype, device=device)
        dof = 2.0 * self.nu
        # u ~ chi-square(dof) = Gamma(dof / 2, scale 2)
        shape = torch.full((n_components,), dof / 2.0, dtype=dtype, device=device)
        u = torch._standard_gamma(shape, generator=generator) * 2.0
        return Z.div_(self.length_scale).mul_(torch.sqrt(dof / u)[None, :])
