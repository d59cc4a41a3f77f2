"""A kernel on a subset of the input columns: ``k(x, y) = k0(x[cols], y[cols])``.

Multiple kernel learning combines kernels that each look at a different group of features (or at
a set encoding stored in some columns); :class:`Columns` makes any kernel one such base kernel.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from .._sparse import is_sparse
from ._base import Kernel, a_kernel
from ._params import Param

__all__ = ["Columns"]


def _inner_kernel(owner: str, name: str, value):
    value = a_kernel(owner, name, value)
    if value.is_precomputed:
        raise ValueError(f"{owner} cannot wrap a Precomputed kernel (its inputs are Gram rows, not features).")
    return value


def _columns(owner: str, name: str, value) -> tuple:
    """Distinct non-negative column indices (a slice with explicit bounds allowed), as a tuple."""
    if isinstance(value, slice):
        if value.stop is None or (value.start or 0) < 0 or value.stop < 0:
            raise ValueError(f"The {name!r} parameter of {owner} must have explicit non-negative bounds when it is "
                             f"a slice. Got {value!r} instead.")
        value = range(value.start or 0, value.stop, value.step or 1)
    try:
        cols = [int(c) for c in value]
        ok = all(isinstance(c, (numbers.Integral, np.integer)) and not isinstance(c, bool) for c in value)
    except (TypeError, ValueError):
        cols, ok = [], False
    if not ok or not cols or min(cols) < 0 or len(set(cols)) != len(cols):
        raise ValueError(
            f"The {name!r} parameter of {owner} must be a non-empty sequence of distinct "
            f"non-negative ints or a slice. Got {value!r} instead."
        )
    return tuple(cols)


class Columns(Kernel):
    r"""``k(x, y) = k_0(x_S, y_S)``: the kernel ``k_0`` on the columns ``S`` of the inputs.

    Parameters
    ----------
    kernel : Kernel
        The kernel applied to the selected columns (any mercer kernel, composites included).
    columns : sequence of int, or slice
        Column indices ``S`` (non-negative, no duplicates) or a slice with explicit bounds.

    The inputs must have more than ``max(S)`` columns. ``gamma=None`` in the inner kernel resolves
    to ``1 / |S|`` (the number of selected columns), as if the kernel saw only those columns.
    """

    PARAMS = (Param("kernel", check=_inner_kernel), Param("columns", check=_columns))

    @property
    def is_stationary(self) -> bool:  # type: ignore[override]
        return self.kernel.is_stationary

    @property
    def differentiable_inputs(self) -> bool:  # type: ignore[override]
        return self.kernel.differentiable_inputs

    @property
    def sparse_rows(self) -> bool:  # type: ignore[override]
        return self.kernel.sparse_rows

    def _sparse_refusal_of(self) -> str:
        return self.kernel._sparse_refusal_of()

    def _part_features(self, n_features: int) -> int:
        return len(self.columns)

    def scratch(self, n_features: int) -> float:
        return self.kernel.scratch(len(self.columns)) + 0.5

    def select(self, X: torch.Tensor) -> torch.Tensor:
        """The selected columns of ``X`` (a copy, on X's device)."""
        index = self.__dict__.get("_index")  # a memo, not a parameter
        if index is None or index.device != X.device:
            index = self._index = torch.as_tensor(self.columns, dtype=torch.long, device=X.device)
        return X.select_columns(index) if is_sparse(X) else X.index_select(1, index)

    def _check_pair(self, X1, X2):
        super()._check_pair(X1, X2)
        if X1.shape[1] <= max(self.columns):
            raise ValueError(
                f"{self!r}: the inputs have {X1.shape[1]} columns but column {max(self.columns)} was selected."
            )
        if type(self.kernel)._check_pair is not Kernel._check_pair:
            self.kernel._check_pair(self.select(X1), self.select(X2))

    def _pairwise(self, X1, X2):
        return self.kernel._pairwise(self.select(X1), self.select(X2))

    def _cached_pairwise(self, cache):
        return self.kernel._cached_pairwise(cache.columns(self.columns, self.select))

    def _paired(self, X1, X2):
        return self.kernel._paired(self.select(X1), self.select(X2))

    def sample_frequencies(self, n_features, n_components, *, generator, dtype=torch.float64, device="cpu"):
        """Frequencies of the inner kernel on the selected columns, zero on the others."""
        W = torch.zeros(n_features, n_components, dtype=dtype, device=device)
        inner = self.kernel.sample_frequencies(len(self.columns), n_components, generator=generator,
                                               dtype=dtype, device=device)
        W[list(self.columns)] = inner
        return W

    def __repr__(self) -> str:
        return f"Columns({self.kernel!r}, columns={list(self.columns)})"
