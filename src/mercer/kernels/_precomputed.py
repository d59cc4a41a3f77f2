"""A user-supplied Gram matrix."""

from __future__ import annotations

import torch

from .._sparse import is_sparse
from ._base import Kernel

__all__ = ["Precomputed"]


class Precomputed(Kernel):
    """Kernel whose "inputs" are rows of a precomputed Gram matrix (scikit-learn's ``"precomputed"``).

    ``k(K_rows, X_train)`` returns ``K_rows`` itself: at fit time ``X`` is the ``(n, n)`` training
    Gram, at predict time the ``(n_test, n_train)`` cross-Gram. It cannot be combined with other
    kernels.
    """

    is_precomputed = True
    _sparse_refusal = "its inputs are rows of a dense Gram matrix"
    SHORTHANDS = ("precomputed",)

    def scratch(self, n_features: int) -> float:
        return 0.0

    def diag(self, X) -> torch.Tensor:
        X = X if isinstance(X, torch.Tensor) else torch.tensor(X)
        return self._paired(X, X)

    def _check_pair(self, X1, X2):
        if X1.shape[1] != X2.shape[0]:
            raise ValueError(
                f"Precomputed kernel: rows have {X1.shape[1]} columns but there are {X2.shape[0]} "
                "training samples; pass the (n_samples, n_train) cross-Gram matrix."
            )

    def block(self, X, Z, rows, cols):
        if is_sparse(X) or is_sparse(Z):
            self.check_sparse()
        return X[rows, cols].clone()

    def _pairwise(self, X1, X2):
        return X1.clone()

    def _paired(self, X1, X2):
        if X1.shape[0] != X1.shape[1]:
            raise ValueError(f"the diagonal of a precomputed kernel needs a square Gram; got shape {tuple(X1.shape)}.")
        return torch.diagonal(X1).clone()
