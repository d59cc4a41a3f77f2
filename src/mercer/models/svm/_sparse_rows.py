"""Kernel rows of sparse training rows for the SVM solvers, in one compiled loop.

The SMO asks for a few kernel rows at a time: the missing row and, while the cache has room, the
top violators. Through the kernel classes each call on sparse rows pays Python and torch dispatch
(the rows gathered into new sparse rows, a product block allocated, element-wise passes) that costs
more than the rows' arithmetic; where the row cache cannot hold every row, a fit makes a call for
nearly every iteration.

:class:`SparseKernelRows` holds a machine's rows by column (made once) and their squared norms.
A call computes ``K[idx, :]`` in one compiled loop: each row's inner products through the columns
it touches (in increasing column order, as :func:`mercer._sparse.dot_block_columns`), then the
kernel's function of the inner product and the norms, in the kernel classes' order of operations.
Linear, Polynomial (integer degree), Sigmoid, Cosine and RBF with one gamma are computed here.
Other kernels, ARD and non-integer degrees take the kernel classes' blocks (:func:`supports`).
tests/test_svm_sparse_rows.py checks the rows against the kernel classes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..._jit import LazyJit
from ..._sparse import SparseRows
from ...kernels import RBF, Cosine, Kernel, Linear, Polynomial, Sigmoid

__all__ = ["SparseKernelRows", "supports"]

_jit = LazyJit(globals())

#: The kernel's function of the inner product, by kernel class (the compiled loop's ``kind``).
_KINDS = {Linear: 0, Polynomial: 1, Sigmoid: 2, Cosine: 3, RBF: 4}


def _kind(kernel: Kernel) -> int | None:
    kind = _KINDS.get(type(kernel))
    if kind == 4 and kernel.is_ard:
        return None
    if kind == 1 and not isinstance(kernel.degree, int):
        return None  # a non-integer power checks its bases (an error on negative ones): the kernel's own path
    return kind


def supports(kernel: Kernel, X) -> bool:
    """Whether :class:`SparseKernelRows` computes ``kernel``'s rows of ``X`` (sparse rows on the CPU)."""
    return isinstance(X, SparseRows) and X.device.type == "cpu" and _kind(kernel) is not None


class SparseKernelRows:
    """``K[idx, :]`` of the rows ``X`` (:class:`~mercer._sparse.SparseRows` on the CPU) for ``kernel``
    (:func:`supports` must hold), as a numpy array of ``X``'s dtype."""

    def __init__(self, kernel: Kernel, X: SparseRows):
        self.kind = _kind(kernel)
        if self.kind is None or not isinstance(X, SparseRows):
            raise ValueError(f"SparseKernelRows: {kernel!r} on {type(X).__name__} is not supported (see supports()).")
        c = X.compact()
        self.parts = (c.indptr.numpy(), c.indices.numpy(), c.data.numpy(), *X.by_columns())
        self.n, self.dtype = X.shape[0], c.data.numpy().dtype
        d = X.shape[1]
        gamma = getattr(kernel, "gamma", None)  # None: 1 / n_features, as scikit-learn's kernels
        self.gamma = (1.0 / d if gamma is None else float(gamma)) if self.kind in (1, 2, 4) else 0.0
        self.coef0 = float(getattr(kernel, "coef0", 0.0)) if self.kind in (1, 2) else 0.0
        self.degree = int(kernel.degree) if self.kind == 1 else 1
        sq = X.row_sq_norms()
        if self.kind == 3:  # Cosine: 1 / |x|, 0 for a zero row (as the kernel's _inverse_norms)
            norms = sq.sqrt()
            sq = torch.where(norms > 0, 1.0 / norms, torch.zeros_like(norms))
        self.sq = np.ascontiguousarray(sq.numpy())

    def __call__(self, idx: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        if out is None:
            out = np.empty((len(idx), self.n), dtype=self.dtype)
        _jit("kernel_rows")(*self.parts, self.sq, idx, self.kind, self.gamma, self.coef0, self.degree, out)
        return out


# -- compiled (numba, on first use) ---------------------------------------------------------------
@_jit.mark(fastmath={"contract"})
def kernel_rows(ap, ai, av, colptr, crows, cvals, sq, idx, kind, gamma, coef0, degree, out):  # pragma: no cover
    """``out[r] = K[idx[r], :]``: inner products through the columns of row ``idx[r]`` (``colptr``,
    ``crows``, ``cvals``: the rows by column), then the kernel of ``kind`` (see ``_KINDS``)."""
    for r in range(idx.shape[0]):
        i = idx[r]
        row = out[r]
        row[:] = 0.0
        for p in range(ap[i], ap[i + 1]):
            k, v = ai[p], av[p]
            for q in range(colptr[k], colptr[k + 1]):
                row[crows[q]] += v * cvals[q]
        if kind == 1:
            for t in range(row.shape[0]):
                row[t] = (row[t] * gamma + coef0) ** degree
        elif kind == 2:
            for t in range(row.shape[0]):
                row[t] = math.tanh(row[t] * gamma + coef0)
        elif kind == 3:
            for t in range(row.shape[0]):
                row[t] = row[t] * sq[i] * sq[t]
        elif kind == 4:  # -g |x - y|^2 = 2g <x, y> - g |x|^2 - g |y|^2, at most 0 (as _scaled_sq_dist)
            for t in range(row.shape[0]):
                row[t] = math.exp(min(row[t] * (2.0 * gamma) - sq[i] * gamma - sq[t] * gamma, 0.0))
