"""Lloyd's iterations with Hamerly's bounds, empty-cluster re-seeding, and the k-means driver.

``inertia`` is the seeds' distortion :math:`J = \\sum_n w_n \\|x_n - \\mu_{z_n}\\|^2 = \\|X - Z\\mu\\|_F^2`.
Empty clusters (a centre that wins no point during an iteration) are re-seeded, as in
scikit-learn, with the points farthest from their current centre.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings

import torch
from sklearn.exceptions import ConvergenceWarning

from .._backend import row_sq_norms
from .._progress import task
from .._sparse import is_sparse, plan_features
from ..linalg import MemoryBudgetError, format_bytes
from ._fused import centre, lloyd_fused
from ._passes import MIN_CLUSTERS_FOR_BOUNDS, add_sparse_rows, block_rows, own_sq, top2
from ._seeding import seed_indices

__all__ = ["MIN_CLUSTERS_FOR_BOUNDS", "KMeansResult", "kmeans", "lloyd", "warn_distinct"]

log = logging.getLogger(__name__)



@dataclasses.dataclass(frozen=True)
class KMeansResult:
    """What a k-means run found.

    Attributes
    ----------
    centers : tensor (k, d)
    labels : long tensor (n,)
        Closest centre of each point (first index on ties).
    inertia : float
        Sum of (weighted) squared distances of the points to their closest centre.
    n_iter : int
        Lloyd iterations run.
    converged_labels : bool
        The run stopped because the labels no longer changed (rather than on ``tol`` or ``max_iter``).
    """

    centers: torch.Tensor
    labels: torch.Tensor
    inertia: float
    n_iter: int
    converged_labels: bool


def warn_distinct(owner: str, labels: torch.Tensor, k: int) -> None:
    """``ConvergenceWarning`` when fewer than ``k`` distinct labels were found (duplicate points)."""
    found = int((torch.bincount(labels, minlength=k) > 0).sum())  # (torch.unique sorts)
    if found < k:
        warnings.warn(f"{owner}: Number of distinct clusters ({found}) found smaller than n_clusters ({k}). "
                      "Possibly due to duplicate points in X.", ConvergenceWarning, stacklevel=4)


# -- Lloyd's steps ---------------------------------------------------------------------------------
def _bounded_assignment(X, x_sq, C, labels, u, l, rows):
    """Assignment step for the centres ``C`` that recomputes only the points whose bounds do not
    prove their label unchanged; updates ``u`` and ``l`` in place, returns ``(labels, u, l)``."""
    n = X.shape[0]
    margin = math.sqrt(64 * torch.finfo(X.dtype).eps * float(x_sq.max() + (C * C).sum(1).max()))
    cc = torch.cdist(C, C)
    cc.fill_diagonal_(math.inf)
    thr = torch.maximum(l, cc.min(1).values[labels] / 2) - margin
    idx = torch.nonzero(u > thr)[:, 0]
    if idx.numel() > n // 2:  # most points may move: one plain pass is cheaper
        labels, d1, d2 = top2(X, x_sq, C, rows)
        u, l = d1.sqrt_(), d2.sqrt_()
        idx = idx[:0]
    if idx.numel():
        u[idx] = own_sq(X[idx], C, labels[idx], rows).sqrt_()
        idx = idx[u[idx] > thr[idx]]
    if idx.numel():
        lab_i, d1_i, d2_i = top2(X[idx], x_sq[idx], C, rows)
        labels = labels.clone()
        labels[idx], u[idx], l[idx] = lab_i, d1_i.sqrt_(), d2_i.sqrt_()
    return labels, u, l


def _update_centres(X, Xw, C, labels, w, rows):
    """Means of the clusters (weighted by ``w``); an empty cluster takes one of the points farthest
    from their centre (scikit-learn's rule), which leaves its old cluster."""
    k = C.shape[0]
    if is_sparse(Xw):  # the stored entries added into their cluster's row of the sums
        sums = add_sparse_rows(torch.zeros_like(C), Xw, labels)
    else:
        sums = torch.zeros_like(C).index_put_((labels,), Xw, accumulate=True)
    counts = torch.bincount(labels, weights=w, minlength=k).to(X.dtype)
    empty = torch.nonzero(counts == 0)[:, 0]
    if empty.numel():
        far = torch.topk(own_sq(X, C, labels, rows), empty.numel()).indices
        for e, f in zip(empty.tolist(), far.tolist()):
            wf = 1.0 if w is None else w[f]
            xf = X[f].to_dense()[0] if is_sparse(X) else X[f]
            sums[labels[f]] -= xf * wf
            counts[labels[f]] -= wf
            sums[e] = xf * wf
            counts[e] = wf
    return torch.where((counts > 0)[:, None], sums / counts.clamp_min(torch.finfo(X.dtype).tiny)[:, None], C)


def _move_bounds(delta, labels, u, l, bounds):
    """After the centres moved by ``delta`` (k,): ``u += delta[own]``, ``l -= max other delta``."""
    if bounds:
        top = torch.topk(delta, 2).values
        l.sub_(torch.where(delta[labels] == top[0], top[1], top[0]))
    u.add_(delta[labels])


def _silent(line: str) -> None:
    """The ``report`` that says nothing."""


def _report_iteration(report, it, X, C, labels, w, rows) -> None:
    """``report("Iteration i, inertia J.")`` (scikit-learn's verbose line; one extra distance pass)."""
    if report is not None:
        mind = own_sq(X, C, labels, rows)
        report(f"Iteration {it - 1}, inertia {float(mind.sum() if w is None else (mind * w).sum())}.")


def lloyd(X: torch.Tensor, x_sq: torch.Tensor, centers: torch.Tensor, *, rows: int,
          sample_weight: torch.Tensor | None = None, max_iter: int = 300, tol: float = 0.0,
          bounds: bool | None = None, report=None, fused: bool | None = None) -> KMeansResult:
    """Lloyd's iterations from ``centers`` (k, d); assignments skip the points that Hamerly's
    bounds prove unchanged.

    ``u`` bounds from above the distance to the assigned centre, ``l`` from below the distance
    to every other centre; after the centres move by ``delta``, ``u += delta[own]`` and
    ``l -= max(delta)``. A point with ``u < max(l, s/2)`` (``s``: distance from its centre to
    the nearest other centre) keeps its label, so only the others are recomputed, exactly --
    the labels are those of plain Lloyd, at a fraction of the cost once few points move.
    With fewer than :data:`MIN_CLUSTERS_FOR_BOUNDS` centres every step is a plain blocked pass
    (``bounds=None``; True or False forces the choice; the compiled passes use the bounds from
    fewer clusters, see :func:`mercer.kmeans._fused.lloyd_fused`). ``report`` (a callable taking a line, e.g.
    ``print``) receives scikit-learn's verbose lines: the inertia per iteration and how the run stopped.

    Stops when the labels no longer change, when the summed squared shift of the centres is at
    most ``tol`` (absolute), or after ``max_iter`` iterations. ``x_sq`` holds the squared row norms
    of ``X``; ``rows`` is the block size (:func:`~mercer.kmeans.block_rows`).

    On the CPU (float32 or float64, no ``report``) each iteration is one compiled pass over the
    points (:func:`mercer.kmeans._fused.lloyd_fused`: bounds, distances, argmin and cluster sums
    fused, no ``n x k`` block); ``fused=False`` forces the torch passes, which run everywhere.
    """
    if fused is None:  # (sparse rows: the torch passes, on their sparse products)
        fused = _compiled(X, report)
    if fused:
        C, labels, inertia, it, strict = lloyd_fused(X, x_sq, centers, rows=rows, sample_weight=sample_weight,
                                                     max_iter=max_iter, tol=tol, bounds=bounds)
        return KMeansResult(C, labels, inertia, it, strict)
    w, C = sample_weight, centers
    # with few centres a plain pass costs little more than checking the bounds
    bounds = C.shape[0] >= MIN_CLUSTERS_FOR_BOUNDS if bounds is None else bool(bounds and C.shape[0] > 1)
    labels, d1, d2 = top2(X, x_sq, C, rows, second=bounds)
    u, l = d1.sqrt(), d2.sqrt()
    labels_old = None
    strict = False
    it = 0
    Xw = X if w is None else X.scale_rows(w) if is_sparse(X) else X * w[:, None]
    bar = task("Lloyd (k-means)", total=max_iter, unit="it")
    for it in range(1, max_iter + 1):
        if it > 1 and not bounds:
            labels = top2(X, x_sq, C, rows, second=False)[0]
        elif it > 1:
            labels, u, l = _bounded_assignment(X, x_sq, C, labels, u, l, rows)
        _report_iteration(report, it, X, C, labels, w, rows)
        C_new = _update_centres(X, Xw, C, labels, w, rows)
        delta = ((C_new - C) ** 2).sum(1)
        shift = float(delta.sum())
        C = C_new
        _move_bounds(delta.sqrt_(), labels, u, l, bounds)
        bar.update(it, shift=shift)
        if labels_old is not None and torch.equal(labels, labels_old):
            strict = True
            if report is not None:
                report(f"Converged at iteration {it - 1}: strict convergence.")
            break
        if shift <= tol:
            if report is not None:
                report(f"Converged at iteration {it - 1}: center shift {shift} within tolerance {tol}.")
            break
        labels_old = labels
    bar.close()
    labels = top2(X, x_sq, C, rows, second=False)[0]
    mind = own_sq(X, C, labels, rows)
    inertia = float(mind.sum() if w is None else (mind * w).sum())
    return KMeansResult(C, labels, inertia, it, strict)


# -- the driver ------------------------------------------------------------------------------------
def _compiled(X, report) -> bool:
    """Whether :func:`lloyd` runs the compiled passes on ``X`` (dense float rows in CPU memory, no
    ``report``); the data are then centred by compiled passes too (:func:`mercer.kmeans._fused.centre`)."""
    return X.device.type == "cpu" and X.dtype in (torch.float32, torch.float64) and report is None \
        and not is_sparse(X) and X.layout == torch.strided


def _centred(X: torch.Tensor, overwrite: bool, compiled: bool):
    """``(mean, X - mean, squared row norms)``; ``X`` itself centred when ``overwrite``."""
    if compiled:  # two reads of X (any strides), the centred rows written in C order
        mean, Xc, x_sq = centre(X.detach().numpy(), in_place=overwrite)
        return torch.from_numpy(mean), torch.from_numpy(Xc), torch.from_numpy(x_sq)
    mean = X.mean(0)
    Xc = X.sub_(mean) if overwrite else X - mean
    return mean, Xc, row_sq_norms(Xc)


def kmeans(X: torch.Tensor, n_clusters: int, *, memory_budget: int, init="k-means++", n_init: int = 1,
           max_iter: int = 300, tol: float = 1e-4, sample_weight: torch.Tensor | None = None,
           n_local_trials: int | None = None, generator: torch.Generator | None = None,
           owner: str = "kmeans", bounds: bool | None = None, report=None, overwrite_x: bool = False) -> KMeansResult:
    """k-means of the rows of ``X`` (n, d): ``n_init`` seedings, Lloyd's iterations from each, the
    run with the lowest inertia kept: a :class:`KMeansResult`, centres in the original coordinates.

    The data are centred first (distances are invariant, round-off is smaller), except sparse rows
    (:class:`~mercer._sparse.SparseRows`, as scikit-learn: centring would make them dense), whose
    centres are dense ``(k, d)``. Distances are computed in blocks of rows planned from
    ``memory_budget`` (bytes).

    Parameters
    ----------
    X : tensor (n, d)
    n_clusters, memory_budget : int
        ``k <= n`` clusters; bytes the distance blocks may use.
    init : {"k-means++", "random"} or tensor (k, d)
        Seeding rule (drawn with ``generator``), or the initial centres (same dtype and device as X).
    n_init, max_iter : int
        Runs (the one with the lowest inertia is kept); Lloyd iterations per run.
    bounds, report :
        As in :func:`lloyd` (``report`` also gets "Initialization complete" after each seeding).
    tol : float
        Convergence when the summed squared shift of the centres is at most ``tol`` times the mean
        per-feature variance of X (scikit-learn's rule), or when the labels stop changing.
    sample_weight : tensor (n,), optional
    n_local_trials : int, optional
        Candidates per k-means++ seed; default ``2 + int(log(k))``.
    generator : torch.Generator, optional
        CPU generator of the seeding draws (needed when ``init`` is a rule).
    owner : str
        Named in the ``ConvergenceWarning`` issued when fewer than k distinct clusters were found.
    overwrite_x : bool
        ``X`` may be centred in place (a copy the caller owns): saves an ``n x d`` copy.
    """
    (n, d), k, report = X.shape, n_clusters, report or _silent
    sparse = is_sparse(X)
    if sparse:
        mean = torch.zeros(d, dtype=X.dtype, device=X.device)
        Xc = X
        x_sq = X.row_sq_norms()
        # the mean per-feature variance (scikit-learn's, of the uncentred sparse rows)
        var = (x_sq.sum(dtype=torch.float64) - (X.col_sums().to(torch.float64) ** 2).sum() / n) / (n * d)
        tol_abs = float(var) * tol if tol else 0.0
    else:
        mean, Xc, x_sq = _centred(X, overwrite_x, _compiled(X, None if report is _silent else report))
        # mean per-feature variance: the mean squared norm of the centred rows over d (X.var(0) is slow)
        tol_abs = float(x_sq.sum(dtype=torch.float64)) / (n * d) * tol if tol else 0.0
    if sparse:  # the centres of sparse rows are dense: k x d, held with their running sums
        need = 2 * k * d * Xc.element_size()
        if need > int(memory_budget):
            raise MemoryBudgetError(
                f"{owner}: k-means on sparse rows keeps its {k} centres dense ({k} x {d}, about {format_bytes(need)} with "
                f"their running sums), more than the memory budget of {format_bytes(int(memory_budget))}. Use fewer "
                "clusters or a larger memory_budget; for Nystrom centres, centers='kmeans++' or 'uniform' keep them "
                "as sparse rows of X.")
    dp = plan_features(Xc)  # sparse rows: blocks from the non-zeros (the centres are dense: k d)
    rows = block_rows(n, k, dp, itemsize=Xc.element_size(), budget=memory_budget)
    trials = 2 + int(math.log(k)) if n_local_trials is None else n_local_trials
    seed_rows = block_rows(n, trials, dp, itemsize=Xc.element_size(), budget=memory_budget)

    def dist(idx, s):
        if sparse:
            return Xc[s].dot_block(Xc[idx]).mul_(-2.0).add_(x_sq[s, None]).add_(x_sq[idx][None, :])
        return torch.addmm(x_sq[s, None] + x_sq[idx][None, :], Xc[s], Xc[idx].T, alpha=-2.0)

    best = None
    for run in range(n_init):
        if isinstance(init, str):
            C0 = Xc[seed_indices(init, n, k, dist, generator, rows=seed_rows, sample_weight=sample_weight,
                                 n_local_trials=n_local_trials)].clone()
            C0 = C0.to_dense() if sparse else C0
        else:  # given centres; sparse rows (seeds drawn from sparse data) become the dense centres they start
            C0 = (init.to_dense() if is_sparse(init) else init) - mean
        report("Initialization complete")
        result = lloyd(Xc, x_sq, C0, rows=rows, sample_weight=sample_weight, max_iter=max_iter, tol=tol_abs,
                       bounds=bounds, report=None if report is _silent else report)
        log.debug("%s: run %d, inertia %.6g after %d iterations", owner, run, result.inertia, result.n_iter)
        if best is None or result.inertia < best.inertia:
            best = result
    warn_distinct(owner, best.labels, k)
    return dataclasses.replace(best, centers=best.centers + mean)
