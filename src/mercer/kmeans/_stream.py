"""k-means of data read block by block from a :mod:`mercer.sources` source (not held in memory).

The same algorithm as :func:`mercer.kmeans.kmeans`, pass by pass, so that the result equals the
in-memory one on the same data (the same seeds, labels and centres up to round-off in the sums):

* the data are centred by their mean (one pass) and the tolerance is scaled by their mean
  per-feature variance (one pass), as in memory;
* **k-means++ is exact** (scikit-learn's greedy variant, the same draws as in memory): each new
  centre costs one pass over the data (the candidates' potentials; the distances to the centre
  chosen are kept from it), so seeding ``k`` centres reads the data ``k`` times -- about as many
  as ``k`` Lloyd iterations. ``init="random"`` and given centres read only the seeds' rows;
* each Lloyd iteration is one pass: the assignment of a block and its contribution to the
  cluster sums (no Hamerly bounds: they hold O(n) state and give the same labels); an empty
  cluster (rare) costs one more pass, to find the points farthest from their centre;
* a final pass gives the labels and the inertia.

Sparse sources (CSR blocks, read as :class:`~mercer._sparse.SparseRows`) take the same passes
without centring (centred rows would be dense), as the in-memory sparse fit and scikit-learn do:
the distances are ``||x||^2 - 2 x.c + ||c||^2`` by sparse x dense products (sparse x sparse for the
k-means++ candidates, which are rows of the data), the exact distance to a point's own centre by
:func:`~mercer.kmeans._passes.sparse_sq_to`, the cluster sums by adding the stored entries into
their rows; the blocks are planned from the stored entries (:func:`~mercer._sparse.plan_features`),
the centres are dense ``(k, d)``.

Memory: the centres, one block, and the O(n) labels (an output), closest distances and the
candidates' distances (seeding, ``n x (2 + log k)``).
"""

from __future__ import annotations

import dataclasses
import logging
import math

import torch

from .. import _random as _rnd
from .._backend import row_sq_norms
from .._progress import task
from .._sparse import is_sparse, plan_features
from ..linalg import ExecutionPlan, plan_rows, source_rows, tensor_blocks
from ._lloyd import KMeansResult, warn_distinct
from ._passes import _neg2_dot_plus, add_sparse_rows, block_rows, sparse_sq_to
from ._seeding import seed_indices

__all__ = ["kmeans_streamed"]

log = logging.getLogger(__name__)


class _CentredBlocks:
    """Passes over the centred rows of a source: ``(rows, Xc, |Xc|^2)`` per block. A sparse source's
    rows are not centred (``mean`` is zero): its blocks are :class:`~mercer._sparse.SparseRows`."""

    def __init__(self, source, mean, rows: int, dtype, device):
        self.source, self.mean, self.rows, self.dtype, self.device = source, mean, rows, dtype, device
        self.n = source.n_samples
        self.sparse = bool(source.sparse)

    def passes(self, desc: str):
        for r, Xb in tensor_blocks(self.source, self.rows, dtype=self.dtype, device=self.device, desc=desc):
            Xc = Xb if self.sparse else Xb.sub_(self.mean)
            yield r, Xc, row_sq_norms(Xc)

    def take(self, idx):
        """Rows ``idx``, centred (sparse rows for a sparse source)."""
        rows = source_rows(self.source, idx, dtype=self.dtype, device=self.device)
        return rows if self.sparse else rows - self.mean

    def take_dense(self, idx) -> torch.Tensor:
        """Rows ``idx``, centred, as a dense tensor (``len(idx) x d``: seeds, re-seeded centres)."""
        rows = self.take(idx)
        return rows.to_dense() if self.sparse else rows


def _moments(source, rows: int, dtype, device):
    """The mean (in ``dtype``) and the mean per-feature variance of the centred data (float64).
    A sparse source: a zero mean (its rows are not centred) and the variance of the in-memory sparse
    fit, ``(sum |x|^2 - |1^T X|^2 / n) / (n d)`` in one pass."""
    n = source.n_samples
    total = torch.zeros(source.n_features, dtype=torch.float64, device=device)
    if source.sparse:
        sq = torch.zeros((), dtype=torch.float64, device=device)
        for _, Xb in tensor_blocks(source, rows, dtype=dtype, device=device, desc="k-means: moments"):
            total += Xb.col_sums().to(torch.float64)
            sq += Xb.row_sq_norms().sum(dtype=torch.float64)
        var = (sq - (total ** 2).sum() / n) / (n * source.n_features)
        return torch.zeros(source.n_features, dtype=dtype, device=device), float(var)
    for _, Xb in tensor_blocks(source, rows, dtype=dtype, device=device, desc="k-means: mean"):
        total += Xb.sum(0, dtype=torch.float64)
    mean = (total / n).to(dtype)
    s1 = torch.zeros_like(total)
    s2 = torch.zeros_like(total)
    for _, Xb in tensor_blocks(source, rows, dtype=dtype, device=device, desc="k-means: variance"):
        Xc = (Xb - mean).to(torch.float64)
        s1 += Xc.sum(0)
        s2 += (Xc * Xc).sum(0)
    var = s2 / n - (s1 / n) ** 2
    return mean, float(var.clamp_min(0.0).mean())


def _dist(Xc, x_sq, C, c_sq):
    """``(rows, len(C))`` squared distances, as the in-memory oracle computes them (sparse rows
    against sparse candidate rows: their sparse products)."""
    if is_sparse(Xc):
        return Xc.dot_block(C).mul_(-2.0).add_(x_sq[:, None]).add_(c_sq[None, :])
    return torch.addmm(x_sq[:, None] + c_sq[None, :], Xc, C.T, alpha=-2.0)


def _own_sq(Xc, C, lab):
    """``||x_i - c_{lab_i}||^2`` of a block, by subtraction (sparse rows: over their stored entries)."""
    return sparse_sq_to(Xc, C, lab) if is_sparse(Xc) else ((Xc - C[lab]) ** 2).sum(1)


def _add_sums(sums, Xc, lab, ws):
    """``sums[lab_i] += w_i x_i`` for the rows of a block (sparse rows: their stored entries)."""
    if is_sparse(Xc):
        add_sparse_rows(sums, Xc if ws is None else Xc.scale_rows(ws), lab)
    else:
        sums.index_put_((lab,), Xc if ws is None else Xc * ws[:, None], accumulate=True)


def _plusplus(data: _CentredBlocks, k: int, generator, w, n_local_trials):
    """Greedy k-means++ with the draws of :func:`mercer.kmeans.kmeans_plusplus`, one pass per centre."""
    n = data.n
    trials = 2 + int(math.log(k)) if n_local_trials is None else n_local_trials

    def closest_to(C):
        c_sq = row_sq_norms(C)
        return torch.cat([_dist(Xc, xs, C, c_sq) for _, Xc, xs in data.passes("k-means++")]).clamp_min_(0.0)

    first = _rnd.categorical(generator, torch.ones(n, dtype=torch.float64) if w is None else w)
    closest = closest_to(data.take(first.reshape(1)))[:, 0]
    device = closest.device
    centers = [int(first)]
    trial = torch.empty((n, trials), dtype=closest.dtype, device=device)  # closest, with each candidate
    for _ in range(1, k):
        weighted = closest if w is None else closest * w
        cum = torch.cumsum(weighted.to(torch.float64), 0)
        r = _rnd.rand(generator, (trials,), device=device) * cum[-1]
        cand = torch.searchsorted(cum, r).clamp_(max=n - 1)
        C = data.take(cand)
        c_sq = row_sq_norms(C)
        pots = torch.zeros(trials, dtype=torch.float64, device=device)
        for s, Xc, xs in data.passes("k-means++"):
            D = torch.minimum(_dist(Xc, xs, C, c_sq).clamp_min_(0.0), closest[s, None], out=trial[s])
            pots += (D.sum(0) if w is None else w[s] @ D).to(torch.float64)
        best = int(torch.argmin(pots))
        centers.append(int(cand[best]))
        closest = trial[:, best].clone()  # the chosen candidate's column: one pass per seed
    return torch.as_tensor(centers, dtype=torch.long)


def _farthest(data: _CentredBlocks, C, labels, count: int):
    """Indices of the ``count`` points farthest from their centre (a pass: running top-``count``)."""
    vals = idx = None
    for s, Xc, _ in data.passes("k-means: empty clusters"):
        d = _own_sq(Xc, C, labels[s])
        top = torch.topk(d, min(count, d.numel()))
        v, i = top.values, top.indices + s.start
        vals, idx = (v, i) if vals is None else (torch.cat([vals, v]), torch.cat([idx, i]))
        keep = torch.topk(vals, min(count, vals.numel())).indices
        vals, idx = vals[keep], idx[keep]
    return idx[torch.argsort(vals, descending=True, stable=True)]


def _lloyd_pass(data: _CentredBlocks, C, labels, w, report):
    """One assignment pass: new labels (in place), cluster sums and weights, whether any label
    changed, and the inertia of the old centres (only for ``report``)."""
    k = C.shape[0]
    sums = torch.zeros_like(C)
    counts = torch.zeros(k, dtype=torch.float64, device=C.device)
    c_sq = (C * C).sum(1)[None, :]
    Ct = C.T.contiguous()
    changed, inertia = False, 0.0
    for s, Xc, _ in data.passes("Lloyd (k-means)"):
        lab = torch.min(_neg2_dot_plus(c_sq, Xc, Ct), dim=1).indices
        changed = changed or not torch.equal(lab, labels[s])
        labels[s] = lab
        ws = None if w is None else w[s]
        if report is not None:
            mind = _own_sq(Xc, C, lab)
            inertia += float(mind.sum() if ws is None else (mind * ws).sum())
        _add_sums(sums, Xc, lab, ws)
        counts += torch.bincount(lab, weights=ws, minlength=k).to(torch.float64)
    return sums, counts.to(C.dtype), changed, inertia


def _update(data, C, labels, sums, counts, w):
    """The new centres; an empty cluster takes a point farthest from its centre (as in memory)."""
    empty = torch.nonzero(counts == 0)[:, 0]
    if empty.numel():
        far = _farthest(data, C, labels, empty.numel())
        rows = data.take_dense(far)
        for j, (e, f) in enumerate(zip(empty.tolist(), far.tolist())):
            wf = 1.0 if w is None else w[f]
            sums[labels[f]] -= rows[j] * wf
            counts[labels[f]] -= wf
            sums[e] = rows[j] * wf
            counts[e] = wf
    return torch.where((counts > 0)[:, None], sums / counts.clamp_min(torch.finfo(C.dtype).tiny)[:, None], C)


def _lloyd(data: _CentredBlocks, C, *, w, max_iter: int, tol: float, report) -> KMeansResult:
    labels = torch.full((data.n,), -1, dtype=torch.long, device=C.device)
    strict, it = False, 0
    bar = task("Lloyd (k-means)", total=max_iter, unit="it")
    for it in range(1, max_iter + 1):
        sums, counts, changed, inertia = _lloyd_pass(data, C, labels, w, report)
        if report is not None:
            report(f"Iteration {it - 1}, inertia {inertia}.")
        C_new = _update(data, C, labels, sums, counts, w)
        shift = float(((C_new - C) ** 2).sum())
        C = C_new
        bar.update(it, shift=shift)
        if it > 1 and not changed:
            strict = True
            if report is not None:
                report(f"Converged at iteration {it - 1}: strict convergence.")
            break
        if shift <= tol:
            if report is not None:
                report(f"Converged at iteration {it - 1}: center shift {shift} within tolerance {tol}.")
            break
    bar.close()
    c_sq = (C * C).sum(1)[None, :]
    Ct = C.T.contiguous()
    inertia = 0.0
    for s, Xc, _ in data.passes("k-means: labels"):
        lab = torch.min(_neg2_dot_plus(c_sq, Xc, Ct), dim=1).indices
        labels[s] = lab
        mind = _own_sq(Xc, C, lab)
        inertia += float(mind.sum() if w is None else (mind * w[s]).sum())
    return KMeansResult(C, labels, inertia, it, strict)


def kmeans_streamed(source, n_clusters: int, *, memory_budget: int, dtype: torch.dtype, device,
                    init="k-means++", n_init: int = 1, max_iter: int = 300, tol: float = 1e-4,
                    sample_weight: torch.Tensor | None = None, n_local_trials: int | None = None,
                    generator: torch.Generator | None = None, owner: str = "kmeans", report=None) -> KMeansResult:
    """:func:`mercer.kmeans.kmeans` of the rows of a :class:`~mercer.sources.RowSource`, read block
    by block (see the module docstring for the passes). ``init``: a rule or the initial centres (a
    tensor (k, d) of ``dtype`` on ``device``); the other parameters as in :func:`~mercer.kmeans.kmeans`."""
    n, d, k = source.n_samples, source.n_features, n_clusters
    item = torch.finfo(dtype).bits // 8
    trials = 2 + int(math.log(k)) if n_local_trials is None else n_local_trials
    dp = plan_features(source)  # a sparse source: the stored entries of an average row, not d
    plan, fixed = ExecutionPlan.resolve(memory_budget), 2 * k * d * item
    if source.sparse:  # the dense (k, d) centres and their sums are held throughout; the blocks share the rest
        plan = plan.holding(fixed, what=f"{owner}: k-means on sparse rows keeps its {k} centres dense ({k} x {d}, "
                                        "with their running sums); that",
                            remedy="Use fewer clusters or a larger memory_budget; for Nystrom centres, "
                                   "centers='kmeans++' or 'uniform' keep them as sparse rows of X.")
        fixed = 0
    # a block holds the read rows, their centred copy and temporaries (3 d), its distances (k or trials)
    rows = min(block_rows(n, max(k, trials), dp, itemsize=item, budget=plan.budget),
               plan_rows(n, (3 * dp + max(k, trials) + 4) * item, budget=plan.share("streamed rows"),
                         fixed_bytes=fixed, what=f"{owner}'s block of streamed rows"))
    mean, variance = _moments(source, rows, dtype, device)
    data = _CentredBlocks(source, mean, rows, dtype, device)
    tol_abs = variance * tol if tol else 0.0
    best = None
    for run in range(n_init):
        if isinstance(init, str):
            idx = _plusplus(data, k, generator, sample_weight, n_local_trials) if init == "k-means++" else \
                seed_indices(init, n, k, None, generator, rows=rows, sample_weight=sample_weight)
            C0 = data.take_dense(idx)
        else:
            C0 = init - mean
        if report is not None:
            report("Initialization complete")
        result = _lloyd(data, C0, w=sample_weight, max_iter=max_iter, tol=tol_abs, report=report)
        log.debug("%s: run %d, inertia %.6g after %d iterations", owner, run, result.inertia, result.n_iter)
        if best is None or result.inertia < best.inertia:
            best = result
    warn_distinct(owner, best.labels, k)
    return dataclasses.replace(best, centers=best.centers + mean)
