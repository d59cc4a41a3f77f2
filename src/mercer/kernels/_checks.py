"""Mercer check on data: is the Gram matrix symmetric and positive semi-definite?"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ._base import Kernel

__all__ = ["MercerReport", "check_mercer"]


@dataclasses.dataclass(frozen=True)
class MercerReport:
    """What :func:`check_mercer` found on a sample of the data.

    Attributes
    ----------
    n_samples : int
        Rows used to form the Gram matrix.
    max_asymmetry : float
        ``max |K - K^T|``.
    min_eigenvalue, max_eigenvalue : float
        Extreme eigenvalues of the symmetrised Gram matrix.
    tol : float
        Eigenvalues above ``-tol`` count as zero (round-off).
    """

    n_samples: int
    max_asymmetry: float
    min_eigenvalue: float
    max_eigenvalue: float
    tol: float

    @property
    def is_symmetric(self) -> bool:
        return self.max_asymmetry <= self.tol

    @property
    def is_psd(self) -> bool:
        return self.min_eigenvalue >= -self.tol

    @property
    def is_mercer(self) -> bool:
        return self.is_symmetric and self.is_psd

    def __str__(self) -> str:
        verdict = "looks like a Mercer kernel" if self.is_mercer else "NOT a Mercer kernel on this data"
        return (f"{verdict}: n={self.n_samples}, max|K-K^T|={self.max_asymmetry:.3g}, "
                f"eigenvalues in [{self.min_eigenvalue:.6g}, {self.max_eigenvalue:.6g}] (tol {self.tol:.3g})")


def check_mercer(kernel: Kernel, X, *, max_samples: int = 2000, random_state=0, rtol: float | None = None) -> MercerReport:
    """Form the Gram matrix of ``kernel`` on (a sample of) ``X`` and report symmetry and its spectrum.

    Parameters
    ----------
    kernel : Kernel
    X : array-like or tensor of shape (n_samples, n_features)
    max_samples : int
        At most this many rows (drawn without replacement) are used: the check costs O(m^3).
    rtol : float, optional
        Relative tolerance for round-off; defaults to ``n * eps * max|eigenvalue|`` scaled by 10.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"check_mercer expects a mercer kernel; got {kernel!r}.")
    if not isinstance(X, torch.Tensor):
        X = torch.as_tensor(np.asarray(X, dtype=np.float64))
    n = X.shape[0]
    if n > max_samples:
        rng = np.random.default_rng(random_state)
        X = X[torch.as_tensor(np.sort(rng.choice(n, max_samples, replace=False)), device=X.device)]
    K = kernel(X).to(torch.float64)
    asym = float((K - K.T).abs().max()) if K.numel() else 0.0
    evals = torch.linalg.eigvalsh((K + K.T) / 2)
    top = float(evals.abs().max()) if evals.numel() else 0.0
    eps = torch.finfo(X.dtype if X.is_floating_point() else torch.float64).eps
    tol = (rtol if rtol is not None else 10 * K.shape[0] * eps) * max(top, 1.0)
    return MercerReport(int(K.shape[0]), asym, float(evals.min()), float(evals.max()), tol)
