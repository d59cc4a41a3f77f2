"""Chi-squared kernels on histograms (non-negative features), as scikit-learn's.

Both are computed feature by feature into one output block (two scratch blocks: the numerator and
the denominator of the current feature), so memory stays ``O(n1 n2)`` whatever the number of bins.
"""

from __future__ import annotations

import torch

from .._sparse import is_sparse
from ._base import Kernel
from ._params import Param, positive

__all__ = ["AdditiveChi2", "Chi2"]


def _has_negative(X) -> bool:
    return X.min_value() < 0 if is_sparse(X) else bool((X < 0).any())


def _check_non_negative(owner: str, X1: torch.Tensor, X2: torch.Tensor) -> None:
    if _has_negative(X1) or _has_negative(X2):
        raise ValueError(f"{owner} expects non-negative features (histograms); got negative entries.")


def _neg_chi2_distance(X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
    r""":math:`-\sum_i (x_i - y_i)^2 / (x_i + y_i)` for every pair (terms with ``x_i + y_i = 0`` are 0);
    sparse rows: a merge over the union of the two supports (the other terms are 0)."""
    if is_sparse(X1):
        return X1.merge_block(X2, "chi2").neg_()
    out = torch.zeros(X1.shape[0], X2.shape[0], dtype=X1.dtype, device=X1.device)
    num, den = torch.empty_like(out), torch.empty_like(out)
    tiny = torch.finfo(X1.dtype).tiny  # x_i = y_i = 0: 0 / tiny = 0, as scikit-learn skips the term
    for j in range(X1.shape[1]):
        a, b = X1[:, j, None], X2[None, :, j]
        torch.sub(a, b, out=num).square_()
        torch.add(a, b, out=den).clamp_min_(tiny)
        out.sub_(num.div_(den))
    return out


def _neg_chi2_paired(X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
    if is_sparse(X1):
        return X1.paired(X2, "chi2").neg_()
    den = (X1 + X2).clamp_min_(torch.finfo(X1.dtype).tiny)
    return -((X1 - X2).square_().div_(den)).sum(dim=1)


class _HistogramKernel(Kernel):
    """What the chi-squared kernels share: non-negative inputs and two block-sized temporaries."""

    sparse_rows = True

    def scratch(self, n_features: int) -> float:
        return 2.0

    def _check_pair(self, X1, X2):
        super()._check_pair(X1, X2)
        _check_non_negative(type(self).__name__, X1, X2)


class AdditiveChi2(_HistogramKernel):
    r"""Additive chi-squared kernel :math:`k(x, y) = -\sum_i \frac{(x_i - y_i)^2}{x_i + y_i}`
    for histograms ``x, y >= 0`` (terms with ``x_i + y_i = 0`` count 0), as scikit-learn's
    ``additive_chi2_kernel``.

    Its values are <= 0 (0 on the diagonal): it is only *conditionally* positive semi-definite
    (``sum_ij c_i c_j k(x_i, x_j) >= 0`` when ``sum_i c_i = 0``), not a Mercer kernel;
    :func:`mercer.kernels.check_mercer` flags it. Use it where a conditionally PSD kernel is
    enough, or use :class:`Chi2` (``exp(gamma k)``), which is PSD. Negative inputs raise.
    """

    SHORTHANDS = ("additive_chi2",)

    def _pairwise(self, X1, X2):
        return _neg_chi2_distance(X1, X2)

    def _paired(self, X1, X2):
        return _neg_chi2_paired(X1, X2)


class Chi2(_HistogramKernel):
    r"""Exponential chi-squared kernel
    :math:`k(x, y) = \exp\left(-\gamma \sum_i \frac{(x_i - y_i)^2}{x_i + y_i}\right)`
    for histograms ``x, y >= 0`` (terms with ``x_i + y_i = 0`` count 0), as scikit-learn's
    ``chi2_kernel``. Positive semi-definite; values in ``(0, 1]``. Negative inputs raise.

    Parameters
    ----------
    gamma : float > 0, default 1.0
        Scale of the chi-squared distance (scikit-learn's default is 1, not ``1 / n_features``).
    """

    SHORTHANDS = ("chi2",)
    PARAMS = (Param("gamma", 1.0, positive, learn="length"),)

    def _pairwise(self, X1, X2):
        return _neg_chi2_distance(X1, X2).mul_(self.gamma).exp_()

    def _paired(self, X1, X2):
        return torch.exp(_neg_chi2_paired(X1, X2) * self.gamma)
