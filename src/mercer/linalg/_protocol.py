"""What an estimator may ask of a kernel operator, whatever engine runs it.

:class:`ProductOperator` is the protocol of the blocked kernel matrix ``K = k(X, Z)`` (``n x m``,
``X`` the data, ``Z`` the centres) that a solver streams over: transposed products, the repeated
``K^T W K v`` of conjugate gradient, the Gram ``K^T W K``, one-pass statistics, a column shift for
an intercept, and per-sample arrays placed like ``X``'s rows. The in-memory and streamed
:class:`~mercer.linalg.KernelOperator` implements it, and so does every engine's operator
(:mod:`mercer.distributed`'s ``DaskKernelOperator``); ``tests/contracts.py::OperatorContract`` checks
each against the dense matrix. An estimator gets its operator from the engine the input chooses
(:func:`~mercer.linalg.engine_for`) and never tests its type.

:class:`~mercer.linalg.KernelOperator` offers more to the estimators that hold their data in one
process (``matvec``, ``rows``, ``diag``, ``dense``, ``tile``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

__all__ = ["ProductOperator"]


@runtime_checkable
class ProductOperator(Protocol):
    """The blocked kernel matrix ``K = k(X, Z)`` of shape ``(n, m)`` as a solver sees it.

    Vectors of length ``m`` (and the results) are tensors on the centres' device; per-sample arrays
    (length ``n``) are what :meth:`per_sample` returns (a tensor in process, a Dask array placed
    like ``X``'s partitions on a cluster). ``out_dtype`` is the dtype partial products are summed in
    (float64 for float32 tiles).
    """

    @property
    def shape(self) -> tuple[int, int]: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def shift(self) -> torch.Tensor | None:
        """``None`` or a length-m vector subtracted from every row (the operator is then
        ``K - 1 shift^T``), applied to each tile."""

    @shift.setter
    def shift(self, value: torch.Tensor | None) -> None: ...

    def per_sample(self, u):
        """``u`` (n,) or (n, t) placed and typed as the products take per-sample arrays."""

    def rmatvec(self, u, *, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``K^T u`` for a per-sample ``u``."""

    def kt_k_v(self, v, *, weights=None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``K^T diag(weights) K v`` for ``v`` of shape (m,) or (m, t)."""

    def kt_k(self, *, weights=None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``K^T diag(weights) K`` (m x m)."""

    def statistics(self, U, *, weights=None, n_w: float | None = None, centre: bool = False, gram: bool = True):
        """:class:`~mercer.linalg.Statistics`: ``K_c^T W K_c`` (when ``gram``), ``K_c^T U`` and the
        weighted column means (when ``centre``); the shift is left so that later products are
        those of ``K_c`` (when ``centre``) or of ``K``, to within the tiles' rounding."""
