"""Kernels over sets and histograms.

Sets are encoded as indicator rows over a vocabulary (:func:`encode_sets`), so that
``|A ∩ B| = <1_A, 1_B>``: the intersection kernel is one GEMM on the encoded rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from .._sparse import is_sparse
from ._base import Kernel, inner_products, paired_inner

__all__ = ["Intersection", "HistogramIntersection", "encode_sets"]


def encode_sets(sets: Iterable, vocabulary: Sequence | None = None):
    """Encode Python sets (or strings, read as sets of characters) as sparse indicator rows.

    Parameters
    ----------
    sets : iterable of set, frozenset, list, tuple or str
        One collection per sample; a string is the set of its characters.
    vocabulary : sequence, optional
        Fixed list of elements (column order). Needed to encode new samples consistently with
        training samples; elements outside it are ignored. ``None`` builds it from ``sets``, sorted.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, len(vocabulary)), float64, entries 0/1
    vocabulary : list
    """
    rows = [set(s) for s in sets]
    if vocabulary is None:
        vocabulary = sorted(set().union(*rows), key=lambda v: (type(v).__name__, v)) if rows else []
    index = {v: j for j, v in enumerate(vocabulary)}
    indptr, indices = [0], []
    for s in rows:
        cols = sorted(index[v] for v in s if v in index)
        indices.extend(cols)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float64)
    X = sp.csr_matrix((data, np.asarray(indices, dtype=np.int64), np.asarray(indptr)),
                      shape=(len(rows), len(vocabulary)))
    return X, list(vocabulary)


class Intersection(Kernel):
    r"""Set intersection kernel :math:`k(A, B) = |A \cap B|` on 0/1 indicator rows.

    Rows must hold only 0 and 1 (see :func:`encode_sets`); anything else raises.
    """

    SHORTHANDS = ("intersection",)
    sparse_rows = True

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _check_pair(self, X1, X2):
        super()._check_pair(X1, X2)
        for X in (X1, X2):
            if not (X.is_binary() if is_sparse(X) else bool(((X == 0) | (X == 1)).all())):
                raise ValueError(
                    "Intersection kernel expects 0/1 indicator rows (use mercer.kernels.encode_sets); "
                    "got values other than 0 and 1."
                )

    def _pairwise(self, X1, X2):
        return inner_products(X1, X2)

    def _paired(self, X1, X2):
        return paired_inner(X1, X2)


class HistogramIntersection(Kernel):
    r"""Histogram intersection kernel :math:`k(a, b) = \sum_i \min(a_i, b_i)` for ``a, b >= 0``.

    Computed feature by feature into one output block (scratch: one extra block).
    """

    SHORTHANDS = ("histogram", "histogram_intersection")
    sparse_rows = True

    def scratch(self, n_features: int) -> float:
        return 1.0

    def _check_pair(self, X1, X2):
        super()._check_pair(X1, X2)
        if any(X.min_value() < 0 if is_sparse(X) else bool((X < 0).any()) for X in (X1, X2)):
            raise ValueError("HistogramIntersection expects non-negative histograms; got negative entries.")

    def _pairwise(self, X1, X2):
        if is_sparse(X1):  # a merge over the union of the supports (min(a, 0) = 0 elsewhere)
            return X1.merge_block(X2, "min")
        out = torch.zeros(X1.shape[0], X2.shape[0], dtype=X1.dtype, device=X1.device)
        tmp = torch.empty_like(out)
        for j in range(X1.shape[1]):
            torch.minimum(X1[:, j, None], X2[None, :, j], out=tmp)
            out.add_(tmp)
        return out

    def _paired(self, X1, X2):
        if is_sparse(X1):
            return X1.paired(X2, "min")
        return torch.minimum(X1, X2).sum(dim=1)
