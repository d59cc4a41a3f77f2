"""Blocked passes over the ``n x k`` squared distances between points and centres.

Squared distances are computed block by block as :math:`\\|x\\|^2 - 2 x^T c + \\|c\\|^2` (one GEMM
per block of rows), so no ``n x k x d`` intermediate is ever formed.
"""

from __future__ import annotations

import math

import torch

from .._sparse import is_sparse, plan_features
from ..linalg import KMEANS_TILE_BYTES, plan_blocks, row_blocks

__all__ = ["KMEANS_TILE_BYTES", "MIN_CLUSTERS_FOR_BOUNDS", "add_sparse_rows", "assign", "block_rows", "own_sq",
           "sq_distances", "top2"]

#: Below this many clusters Lloyd's assignment runs without Hamerly's bounds (they do not pay off)
#: in the torch passes and in the GEMM passes of :mod:`mercer.kmeans._fused`.
MIN_CLUSTERS_FOR_BOUNDS = 24



def _neg2_dot_plus(c_sq: torch.Tensor, Xs, Ct: torch.Tensor) -> torch.Tensor:
    """``c_sq - 2 Xs Ct`` (dense rows: one addmm; sparse rows: their product with the dense centres)."""
    if is_sparse(Xs):
        return (Xs @ Ct).mul_(-2.0).add_(c_sq)
    return torch.addmm(c_sq, Xs, Ct, alpha=-2.0)


def sparse_sq_to(Xs, C: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
    """``||x_i - c_{which_i}||^2`` for sparse rows ``Xs`` and dense centres ``C``: ``||c||^2`` plus
    ``(x_k - c_k)^2 - c_k^2`` over the stored entries (scikit-learn's sparse-dense distance; the
    centres' entries are read where the rows have theirs, no row of ``C`` is gathered)."""
    c = Xs.compact()
    r = c._row_ids()
    Cr = C[which[r], c.indices]
    terms = (c.data - Cr).square_().sub_(Cr.square())
    return (C * C).sum(1)[which].index_add_(0, r, terms)


def add_sparse_rows(sums: torch.Tensor, Xs, labels: torch.Tensor) -> torch.Tensor:
    """``sums[labels_i] += x_i`` for the sparse rows ``Xs`` (in place, returned): their stored
    entries added into the flat ``(k, d)`` sums at ``labels_i * d + column`` (the labels spread to the
    entries by one repeat of each row's count: two passes over the entries, not four)."""
    c = Xs.compact()
    lab = labels.repeat_interleave(c.indptr.diff(), output_size=c.nnz)
    sums.view(-1).index_add_(0, torch.add(c.indices, lab, alpha=sums.shape[1]), c.data)
    return sums


def block_rows(n: int, k: int, d: int, *, itemsize: int, budget: int) -> int:
    """Rows per block of a pass over the ``(n, k)`` distances of ``n`` points to ``k`` centres in
    ``d`` dimensions (for sparse rows, pass :func:`~mercer._sparse.plan_features`): the planner's
    tile, capped at :data:`KMEANS_TILE_BYTES`."""
    return plan_blocks(n, k, d, itemsize=itemsize, budget=budget, scratch=1.0, n_rhs=1,
                       max_tile_bytes=KMEANS_TILE_BYTES).row_block


def assign(X: torch.Tensor, x_sq: torch.Tensor, C: torch.Tensor, rows: int):
    """Labels (n,) of the closest centre (first index on ties) and the squared distances to it.

    ``x_sq`` holds the squared row norms of ``X``; ``rows`` is the block size (:func:`block_rows`).
    """
    n = X.shape[0]
    labels = torch.empty(n, dtype=torch.long, device=X.device)
    mind = torch.empty(n, dtype=X.dtype, device=X.device)
    c_sq = (C * C).sum(1)[None, :]
    Ct = C.T.contiguous()
    for s in row_blocks(n, rows, desc="k-means assignment"):
        D = _neg2_dot_plus(c_sq, X[s], Ct)
        m, lab = torch.min(D, dim=1)
        mind[s] = m.add_(x_sq[s])
        labels[s] = lab
    return labels, mind.clamp_min_(0.0)


def top2(X: torch.Tensor, x_sq: torch.Tensor, C: torch.Tensor, rows: int, second: bool = True):
    """Exact pass: labels (first index on ties) and the two smallest squared distances (the second
    only when ``second``; else it stays +inf)."""
    n, k = X.shape[0], C.shape[0]
    labels = torch.empty(n, dtype=torch.long, device=X.device)
    d1 = torch.empty(n, dtype=X.dtype, device=X.device)
    d2 = torch.full((n,), math.inf, dtype=X.dtype, device=X.device)
    c_sq = (C * C).sum(1)[None, :]
    Ct = C.T.contiguous()
    for s in row_blocks(n, rows, desc="k-means assignment"):
        D = _neg2_dot_plus(c_sq, X[s], Ct)
        m, lab = torch.min(D, dim=1)  # first index on ties, as scikit-learn
        labels[s], d1[s] = lab, m + x_sq[s]
        if second and k > 1:  # (torch.topk is several times slower than two min passes here)
            d2[s] = D.scatter_(1, lab[:, None], math.inf).min(dim=1).values + x_sq[s]
    return labels, d1.clamp_min_(0.0), d2.clamp_min_(0.0)


def own_sq(X: torch.Tensor, C: torch.Tensor, labels: torch.Tensor, rows: int) -> torch.Tensor:
    """Exact ``||x_i - c_{labels_i}||^2`` by subtraction (no cancellation), blocked."""
    out = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    for s in row_blocks(X.shape[0], rows, desc="k-means distances"):
        out[s] = sparse_sq_to(X[s], C, labels[s]) if is_sparse(X) else ((X[s] - C[labels[s]]) ** 2).sum(1)
    return out


def sq_distances(X: torch.Tensor, C: torch.Tensor, rows: int) -> torch.Tensor:
    """All squared distances ``(n, k)`` of the rows of ``X`` to the centres ``C``, clamped at 0.

    Entries within the round-off of the expansion (below ``64 eps (|x|^2 + |c|^2)``) are recomputed
    by subtraction, so a point at a centre is at distance exactly 0 there."""
    c_sq = (C * C).sum(1)[None, :]
    out = torch.empty(X.shape[0], C.shape[0], dtype=X.dtype, device=X.device)
    eps64 = 64 * torch.finfo(X.dtype).eps
    sparse = is_sparse(X)
    for s in row_blocks(X.shape[0], rows, desc="k-means distances"):
        x_sq = X[s].row_sq_norms()[:, None] if sparse else (X[s] * X[s]).sum(1)[:, None]
        D = _neg2_dot_plus(c_sq, X[s], C.T.contiguous()).add_(x_sq)
        i, j = torch.nonzero(D <= eps64 * (x_sq + c_sq), as_tuple=True)
        if i.numel():
            D[i, j] = sparse_sq_to(X[s][i], C, j) if sparse else ((X[s][i] - C[j]) ** 2).sum(1)
        out[s] = D
    return out.clamp_min_(0.0)
