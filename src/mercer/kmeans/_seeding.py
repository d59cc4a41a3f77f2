"""Seeding: k-means++ over any squared-distance oracle, uniform seeds, and plain D² sampling."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .. import _random as _rnd
from .._backend import row_sq_norms
from .._sparse import is_sparse
from ..linalg import row_blocks

__all__ = ["d2_sampling", "kmeans_plusplus", "seed_indices"]

#: ``dist(idx, sl)``: the ``(len(sl), len(idx))`` squared distances between the points of the row
#: slice ``sl`` and the points ``idx``.
DistanceOracle = Callable[[torch.Tensor, slice], torch.Tensor]


def kmeans_plusplus(n: int, k: int, dist: DistanceOracle, generator: torch.Generator, *, rows: int,
                    sample_weight: torch.Tensor | None = None, n_local_trials: int | None = None) -> torch.Tensor:
    """Greedy k-means++ (Arthur & Vassilvitskii; scikit-learn's variant with local trials).

    Parameters
    ----------
    n, k : int
        Points and seeds to choose.
    dist : callable
        ``dist(idx, sl)`` returns the ``(len(sl), len(idx))`` squared distances between the points
        of the row slice ``sl`` and the points ``idx`` (input space or a kernel's feature space).
    generator : torch.Generator
        CPU generator: the draws are the same on every device.
    rows : int
        Rows per block of the distance passes.
    sample_weight : tensor (n,), optional
    n_local_trials : int, optional
        Candidates tried per seed; default ``2 + int(log(k))``.

    Returns
    -------
    Long tensor (k,): the indices of the seeds, on the distances' device.
    """
    w = sample_weight
    if n_local_trials is None:
        n_local_trials = 2 + int(math.log(k))
    # more candidates than points draw nothing new: an (n, 2**32) buffer was the fit's end
    n_local_trials = min(int(n_local_trials), max(n, 1))

    def closest_to(idx):
        return torch.cat([dist(idx, s) for s in row_blocks(n, rows, desc="k-means++")]).clamp_min_(0.0)

    # The draws are made on the CPU (same seeds on every device); the distances live on the data's.
    # Every pick is an inverse-CDF draw over the (weighted) masses, so integer sample weights give
    # exactly the seeds of the repeated rows.
    first = _rnd.categorical(generator, torch.ones(n, dtype=torch.float64) if w is None else w)
    closest = closest_to(first)[:, 0]
    device = closest.device
    centers = [int(first)]
    trial = torch.empty((n, n_local_trials), dtype=closest.dtype, device=device)  # closest, with each candidate
    for _ in range(1, k):
        weighted = closest if w is None else closest * w
        cum = torch.cumsum(weighted.to(torch.float64), 0)
        r = _rnd.rand(generator, (n_local_trials,), device=device) * cum[-1]
        cand = torch.searchsorted(cum, r).clamp_(max=n - 1)
        pots = torch.zeros(n_local_trials, dtype=torch.float64, device=device)
        for s in row_blocks(n, rows, desc="k-means++"):
            D = torch.minimum(dist(cand, s).clamp_min_(0.0), closest[s, None], out=trial[s])
            pots += (D.sum(0) if w is None else w[s] @ D).to(torch.float64)
        best = int(torch.argmin(pots))
        centers.append(int(cand[best]))
        closest = trial[:, best].clone()  # one pass per seed: the chosen candidate's column is kept
    return torch.as_tensor(centers, dtype=torch.long, device=device)


def seed_indices(init: str, n: int, k: int, dist: DistanceOracle, generator: torch.Generator, *, rows: int,
                 sample_weight: torch.Tensor | None = None, n_local_trials: int | None = None) -> torch.Tensor:
    """Indices (k,) of the initial centres: ``init="k-means++"`` (:func:`kmeans_plusplus`) or
    ``"random"`` (k distinct points, drawn with probabilities proportional to ``sample_weight``
    as scikit-learn draws them, so a zero-weight point is never a seed; uniformly without weights,
    or when fewer than k points have a positive weight)."""
    if init == "k-means++":
        return kmeans_plusplus(n, k, dist, generator, rows=rows, sample_weight=sample_weight,
                               n_local_trials=n_local_trials)
    if sample_weight is not None and int((sample_weight > 0).sum()) >= k:
        return _rnd.sample_without_replacement(generator, sample_weight.clamp_min(0.0), k)
    return _rnd.randperm(generator, n)[:k]


def d2_sampling(X: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """Indices (k,) of ``k`` distinct rows of ``X`` by plain D² sampling (the original k-means++ of
    Arthur & Vassilvitskii 2007, without local trials): the first uniformly, each next one with
    probability proportional to its squared distance to the closest one chosen. When fewer than
    ``k`` rows are distinct the rest are unused rows drawn uniformly."""
    n = X.shape[0]
    idx = torch.empty(k, dtype=torch.long, device=X.device)
    first = int(_rnd.randint(generator, n, (1,)))
    idx[0] = first
    sq = row_sq_norms(X)

    def dots(p: int) -> torch.Tensor:  # <x_i, x_p> for every row
        return X.dot_block(X[p:p + 1])[:, 0] if is_sparse(X) else X @ X[p]

    d2 = (sq - 2.0 * dots(first) + sq[first]).clamp_min_(0.0)
    for j in range(1, k):
        total = float(d2.sum())
        if total <= 0.0:  # fewer distinct points than k: fill with unused points at random
            free = torch.ones(n, dtype=torch.bool, device=X.device)
            free[idx[:j]] = False
            rest = free.nonzero().flatten()
            perm = _rnd.randperm(generator, rest.numel(), device=X.device)[: k - j]
            idx[j:] = rest[perm]
            break
        p = int(_rnd.categorical(generator, d2))
        idx[j] = p
        torch.minimum(d2, (sq - 2.0 * dots(p) + sq[p]).clamp_min_(0.0), out=d2)
    return idx
