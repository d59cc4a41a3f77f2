"""Fits that stream over samples: a :mod:`mercer.sources` source read as tensors, one block at a time.

:func:`tensor_blocks` is the loop every streamed ``fit`` runs over its data (blocks planned by the
caller with :func:`plan_rows`, iterated through :func:`row_blocks`: progress and Ctrl-C apply);
:func:`source_rows` reads selected rows (landmarks, seeds) the same way. A sparse source's blocks
(CSR matrices) arrive as :class:`~mercer._sparse.SparseRows`, never densified: what an in-memory
sparse ``X`` becomes, so the same code runs on either.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
import torch

from .._sparse import as_sparse_rows
from ..sources import RowSource
from ._blocking import row_blocks

__all__ = ["block_tensor", "source_rows", "tensor_blocks"]


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(str(dtype).removeprefix("torch."))


def _check_block(block, source: RowSource, where: str) -> None:
    if not np.isfinite(block.data if sp.issparse(block) else block).all():
        raise ValueError(f"X contains NaN or infinity (streamed rows {where} of {source!r}); mercer needs "
                         "finite inputs.")


def block_tensor(block, *, dtype: torch.dtype, device):
    """A block read from a source as the estimators' input: a tensor, or :class:`SparseRows` for a
    CSR block (the values converted to ``dtype``, on ``device``)."""
    if sp.issparse(block):
        return as_sparse_rows(block, dtype=dtype, device=device)
    return torch.from_numpy(np.ascontiguousarray(block)).to(device=device, dtype=dtype)


def tensor_blocks(source: RowSource, rows: int, *, dtype: torch.dtype, device, desc: str | None = None
                  ) -> Iterator[tuple[slice, torch.Tensor]]:
    """``(slice, block)`` for consecutive blocks of ``rows`` rows of ``source``, each a tensor of
    ``dtype`` on ``device`` (read in ``dtype``: the same values as the in-memory conversion of the
    same data); a ``ValueError`` names the rows holding a NaN or an infinity."""
    want = _numpy_dtype(dtype)
    src = source if source.dtype == want else source.astype(want)
    for r, block in src.iter_blocks(row_blocks(src.n_samples, rows, desc=desc)):
        _check_block(block, source, f"{r.start}:{r.stop}")
        yield r, block_tensor(block, dtype=dtype, device=device)


def source_rows(source: RowSource, index, *, dtype: torch.dtype, device):
    """Rows ``index`` (any order, repeats allowed) of ``source`` as a tensor of ``dtype`` on ``device``
    (:class:`SparseRows` for a sparse source)."""
    idx = index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index)
    want = _numpy_dtype(dtype)
    src = source if source.dtype == want else source.astype(want)
    block = src.take(idx)
    _check_block(block, source, f"at indices {np.unique(idx)[:8].tolist()}")
    return block_tensor(block, dtype=dtype, device=device)
