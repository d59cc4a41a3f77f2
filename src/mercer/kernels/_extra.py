"""More kernels, as scikit-learn defines them: Cosine (``cosine_similarity``), RationalQuadratic and
ExpSineSquared (its GP kernels, with their parameter names), and White (``WhiteKernel``)."""

from __future__ import annotations

import math

import torch

from .._sparse import is_sparse
from ._base import Kernel, inner_products, paired_inner
from ._distances import exact_distances
from ._params import Param, positive
from ._stationary import squared_distances

__all__ = ["Cosine", "ExpSineSquared", "RationalQuadratic", "White"]


def _inverse_norms(X: torch.Tensor) -> torch.Tensor:
    """``1 / ||x||`` per row, 0 for a zero row (scikit-learn's ``normalize`` leaves it at 0)."""
    norms = X.row_sq_norms().sqrt() if is_sparse(X) else torch.linalg.vector_norm(X, dim=1)
    return torch.where(norms > 0, 1.0 / norms, torch.zeros_like(norms))


class Cosine(Kernel):
    r"""Cosine similarity :math:`k(x, y) = \frac{\langle x, y \rangle}{\|x\| \|y\|}`, as
    scikit-learn's ``cosine_similarity``: a zero row is left at zero, so its similarity with
    everything, itself included, is 0 (the diagonal is 1 elsewhere). Positive semi-definite (the
    linear kernel on the normalised rows).
    """

    differentiable_inputs = True
    sparse_rows = True
    SHORTHANDS = ("cosine",)

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _pairwise(self, X1, X2):
        inv1 = _inverse_norms(X1)
        inv2 = inv1 if X2 is X1 else _inverse_norms(X2)
        return inner_products(X1, X2).mul_(inv1[:, None]).mul_(inv2[None, :])

    def _paired(self, X1, X2):
        return paired_inner(X1, X2) * _inverse_norms(X1) * _inverse_norms(X2)


class RationalQuadratic(Kernel):
    r"""Rational quadratic kernel
    :math:`k(x, y) = \left(1 + \frac{\|x - y\|^2}{2 \alpha l^2}\right)^{-\alpha}`, as
    ``sklearn.gaussian_process.kernels.RationalQuadratic``: a scale mixture of RBF kernels
    (it tends to the RBF kernel with ``gamma = 1 / (2 l^2)`` as ``alpha -> inf``).

    Parameters
    ----------
    length_scale : float > 0, default 1.0
        The length scale ``l``.
    alpha : float > 0, default 1.0
        The scale-mixture parameter.

    Spectral density: :math:`\omega \sim \mathcal{N}(0, \tau / l^2\, I)` with
    :math:`\tau \sim \mathrm{Gamma}(\alpha, \text{rate } \alpha)`.
    """

    is_stationary = True
    differentiable_inputs = True
    sparse_rows = True
    SHORTHANDS = ("rational_quadratic",)
    PARAMS = (Param("length_scale", 1.0, positive, learn="length", sklearn="length_scale"),
              Param("alpha", 1.0, positive, learn="length", sklearn="alpha"))

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _pairwise(self, X1, X2):
        D = squared_distances(X1, X2)
        return D.div_(2.0 * self.alpha * self.length_scale**2).add_(1.0).pow_(-self.alpha)

    def _cached_pairwise(self, cache):
        D = cache.distances("sq")  # exact differences; not written
        return (D / (2.0 * self.alpha * self.length_scale**2) + 1.0) ** (-self.alpha)

    def _paired(self, X1, X2):
        d2 = X1.paired(X2, "sq") if is_sparse(X1) else ((X1 - X2) ** 2).sum(dim=1)
        return (1.0 + d2 / (2.0 * self.alpha * self.length_scale**2)) ** (-self.alpha)

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        """Draw ``(n_features, n_components)`` frequencies from the spectral density."""
        alpha, ls = float(self.alpha), float(self.length_scale)
        shape = torch.full((n_components,), alpha, dtype=dtype, device=device)
        tau = torch._standard_gamma(shape, generator=generator) / alpha
        W = torch.randn(n_features, n_components, generator=generator, dtype=dtype, device=device)
        return W.mul_(torch.sqrt(tau)[None, :] / ls)


class ExpSineSquared(Kernel):
    r"""Periodic kernel :math:`k(x, y) = \exp\left(-\frac{2 \sin^2(\pi \|x - y\| / p)}{l^2}\right)`,
    as ``sklearn.gaussian_process.kernels.ExpSineSquared`` (``\|.\|`` the Euclidean norm).

    Parameters
    ----------
    length_scale : float > 0, default 1.0
        The length scale ``l``.
    periodicity : float > 0, default 1.0
        The period ``p``.

    Positive semi-definite on one feature; with several features the Euclidean distance inside
    the sine does not guarantee it (as in scikit-learn). Spectral density (one feature only):
    frequencies ``2 pi n / p`` with ``n`` the difference of two Poisson(``1 / (2 l^2)``) draws
    (from :math:`e^{z \cos t} = \sum_n I_n(z) e^{i n t}`).
    """

    is_stationary = True
    differentiable_inputs = True
    sparse_rows = True
    SHORTHANDS = ("exp_sine_squared", "periodic")
    PARAMS = (Param("length_scale", 1.0, positive, learn="length", sklearn="length_scale"),
              Param("periodicity", 1.0, positive, learn="length", sklearn="periodicity"))

    def _profile(self, r: torch.Tensor, shared: bool = False) -> torch.Tensor:
        if r.requires_grad or shared:  # out of place: cdist's backward reads its output, or r is cached
            return torch.exp(torch.sin(r * (math.pi / self.periodicity)).square() * (-2.0 / self.length_scale**2))
        return r.mul_(math.pi / self.periodicity).sin_().square_().mul_(-2.0 / self.length_scale**2).exp_()

    def _pairwise(self, X1, X2):
        # exact differences (not the GEMM expansion), as Matern: sqrt amplifies cancellation near 0
        return self._profile(exact_distances(X1, X2))

    def _cached_pairwise(self, cache):
        return self._profile(cache.distances("l2"), shared=True)

    def _paired(self, X1, X2):
        r = X1.paired(X2, "sq").sqrt_() if is_sparse(X1) else torch.linalg.vector_norm(X1 - X2, dim=1)
        return self._profile(r)

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        """Draw ``(1, n_components)`` frequencies; only defined for one feature."""
        if n_features != 1:
            raise ValueError(f"{self!r} has a spectral density on one feature only (its sine of the "
                             f"Euclidean distance is not PSD in general); got n_features = {n_features}.")
        rate = torch.full((2, n_components), 0.5 / float(self.length_scale) ** 2, dtype=dtype, device=device)
        n = torch.poisson(rate, generator=generator)
        return ((n[0] - n[1]) * (2.0 * math.pi / float(self.periodicity)))[None, :]


def _row_addresses(X: torch.Tensor) -> torch.Tensor:
    """Where each row of ``X`` starts in its storage (in elements): rows at the same address are
    the same input."""
    return X.storage_offset() + X.stride(0) * torch.arange(X.shape[0], device=X.device)


def _same_memory(X1: torch.Tensor, X2: torch.Tensor) -> bool:
    return X1 is X2 or (X1.device == X2.device and X1.dtype == X2.dtype and X1.shape[1:] == X2.shape[1:]
                        and X1.stride()[1:] == X2.stride()[1:] and X1.numel() > 0 and X2.numel() > 0
                        and X1.untyped_storage().data_ptr() == X2.untyped_storage().data_ptr())


class White(Kernel):
    r"""White noise kernel :math:`k(x_i, x_j) = \sigma^2 \, [i = j]`, as scikit-learn's
    ``WhiteKernel``: ``noise_level * I`` on ``k(X)`` and zero between different inputs.

    "The same input" means the same memory: ``k(X)``, ``k(X, X)`` with the same array or tensor,
    and the block engine's tiles ``block(X, X, rows, cols)`` (its own override: global row ``i``
    meets column ``j`` with ``i = j``, so a diagonal tile gets the noise on its diagonal and any
    other tile is 0); inside a sum or product the tiles are views of ``X``, and a row meets itself
    where the two views start at the same address. A copy of ``X`` (or a numpy array given twice
    to a composite, which converts each argument) is another input: its block is 0. A GP's
    cross-covariance ``k(X_test, X_train)`` is therefore 0, as in scikit-learn.

    Parameters
    ----------
    noise_level : float > 0, default 1.0
        The variance ``sigma^2`` added to the diagonal.

    Not stationary in mercer's sense: its value depends on which inputs are compared, not on
    ``x - y`` (and it has no spectral density to draw random features from).
    """

    SHORTHANDS = ("white",)
    _sparse_refusal = "it tells inputs apart by their memory, which sparse rows copied into tiles do not keep"
    PARAMS = (Param("noise_level", 1.0, positive, learn="length", sklearn="noise_level"),)

    def scratch(self, n_features: int) -> float:
        return 0.0

    def block(self, X, Z, rows, cols):
        if is_sparse(X) or is_sparse(Z):
            self.check_sparse()
        n1, n2 = len(range(*rows.indices(X.shape[0]))), len(range(*cols.indices(Z.shape[0])))
        if not _same_memory(X, Z):
            return torch.zeros(n1, n2, dtype=X.dtype, device=X.device)
        i = _row_addresses(X)[rows]
        j = _row_addresses(Z)[cols]
        return (i[:, None] == j[None, :]).to(X.dtype).mul_(self.noise_level)

    def _pairwise(self, X1, X2):
        if not _same_memory(X1, X2):
            return torch.zeros(X1.shape[0], X2.shape[0], dtype=X1.dtype, device=X1.device)
        same = _row_addresses(X1)[:, None] == _row_addresses(X2)[None, :]
        return same.to(X1.dtype).mul_(self.noise_level)

    def _paired(self, X1, X2):
        if not _same_memory(X1, X2):
            return torch.zeros(X1.shape[0], dtype=X1.dtype, device=X1.device)
        return (_row_addresses(X1) == _row_addresses(X2)).to(X1.dtype).mul_(self.noise_level)
