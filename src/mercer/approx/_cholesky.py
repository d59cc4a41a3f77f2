"""Pivoted incomplete Cholesky factorisation of a kernel matrix (Fine & Scheinberg 2001) and the
sparse greedy matrix approximation of Smola & Schölkopf (2000), which is the same recursion with
another pivot rule.

After r steps, ``G`` (n x r) satisfies ``K ~ G G^T`` with ``G = K[:, P] L^{-T}``, where ``P`` are the
pivots and ``L = G[P]`` is lower triangular; the residual ``K - G G^T`` is positive semi-definite
and its diagonal is tracked exactly, so the trace error is known at every step. A new point maps
to ``L^{-1} k(X_P, x)``: incomplete Cholesky is a Nyström method whose landmarks are chosen by the
factorisation.

Pivot rules:

* ``"diag"`` (Fine & Scheinberg): the largest residual diagonal, i.e. the point worst explained
  by the current landmarks. O(n r^2) time, one kernel column per step.
* ``"greedy"`` (Smola & Schölkopf): among ``n_candidates`` random points, the one whose addition
  reduces the residual trace most, ``||r_c||^2 / r_c[c]``. A random subset of 59 candidates
  contains one of the best 5 % with probability 0.95. ``n_candidates`` kernel columns per step.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import as_output, make_generator, resolve_device, resolve_dtype, to_tensor
from .._validation import Interval, Options, check_array_like, check_at_most, check_param, check_params
from ..kernels import Kernel, resolve_kernel
from ..linalg import (CROSS_SCRATCH_MIN_BYTES, FACTOR_COLUMN_MIN_BYTES, ExecutionPlan, MemoryBudgetError, StreamedMethodsMixin, default_memory_budget, format_bytes, plan_rows,
                      row_blocks, source_to_memory)
from ._constraints import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, N_COMPONENTS
from ._finite import check_finite
from ._stream import fit_source

__all__ = ["IncompleteCholesky", "PivotedCholeskyResult", "pivoted_cholesky"]

_RULES = ("diag", "greedy")


@dataclasses.dataclass
class PivotedCholeskyResult:
    """``G`` (n x r) with ``K ~ G G^T``; ``pivots`` (r,); ``residual_trace`` after each step (r,)."""

    G: torch.Tensor
    pivots: torch.Tensor
    residual_trace: torch.Tensor
    initial_trace: float


def _column(kernel: Kernel, X: torch.Tensor, idx: torch.Tensor, budget: int) -> torch.Tensor:
    """``K(X, X[idx])`` of shape (n, len(idx)), computed in row blocks within ``budget``."""
    n, c = X.shape[0], idx.numel()
    Z = X[idx]
    # a row holds its c kernel entries, their copy in the output and the kernel's scratch
    rows = plan_rows(n, max(1, c) * X.element_size() * (2.0 + kernel.scratch(X.shape[1])), budget=budget,
                     max_bytes=None, what="a block of kernel columns")
    if rows >= n:
        return kernel(X, Z)
    out = torch.empty(n, c, dtype=X.dtype, device=X.device)
    for rs in row_blocks(n, rows, desc="kernel columns"):
        out[rs] = kernel(X[rs], Z)
    return out


def _check_factor_fits(n: int, r_max: int, itemsize: int, budget: int, owner: str) -> int:
    """Bytes of the n x rank factor; raises :class:`MemoryBudgetError` when they exceed ``budget``."""
    need = n * r_max * itemsize
    if need > budget:
        raise MemoryBudgetError(
            f"{owner}: the n x rank factor ({n} x {r_max}) needs {format_bytes(need)}, more than the memory "
            f"budget of {format_bytes(budget)}; lower the rank, or use Nystroem (which keeps only the "
            "landmarks) for this many samples."
        )
    return need


def _initial_diagonal(kernel: Kernel, X: torch.Tensor, owner: str) -> torch.Tensor:
    """``k(x_i, x_i)`` in float64, checked non-negative (then clamped at 0 against round-off)."""
    diag = kernel.diag(X).to(torch.float64)
    if bool((diag < -1e-8 * diag.abs().max().clamp_min(1.0)).any()):
        raise ValueError(f"{owner}: the kernel has negative diagonal entries k(x, x) < 0; it is not positive "
                         "semi-definite, so a Cholesky factorisation does not exist.")
    return diag.clamp_min_(0.0)


def _greedy_pivot(kernel: Kernel, X: torch.Tensor, Gj: torch.Tensor, diag: torch.Tensor, taken: torch.Tensor,
                  n_candidates: int, generator, gen_cpu, budget: int) -> tuple[int, torch.Tensor]:
    """Smola & Schölkopf's rule: among ``n_candidates`` random free points, the one whose residual
    column ``r_c`` (of ``K - Gj Gj^T``) reduces the residual trace most, ``||r_c||^2 / r_c[c]``.
    Returns the pivot and its residual column."""
    free = (~taken).nonzero().flatten()
    c = min(int(n_candidates), free.numel())
    pick = torch.randperm(free.numel(), generator=gen_cpu)[:c].to(free.device) if gen_cpu is not None \
        else torch.randperm(free.numel(), device=free.device, generator=generator)[:c]
    cand = free[pick]
    cols = _column(kernel, X, cand, budget)
    if Gj.shape[1]:
        cols.sub_(Gj @ Gj[cand].T)
    d_c = diag[cand]
    gain = (cols.to(torch.float64) ** 2).sum(dim=0) / d_c.clamp_min(1e-300)
    gain[d_c <= 0] = -1.0
    best = int(torch.argmax(gain))
    return int(cand[best]), cols[:, best]


def _residual_column(kernel: Kernel, X: torch.Tensor, Gj: torch.Tensor, p: int, budget: int) -> torch.Tensor:
    """Column ``p`` of the residual ``K - Gj Gj^T``."""
    col = _column(kernel, X, torch.tensor([p], device=X.device), budget)[:, 0]
    return col - Gj @ Gj[p] if Gj.shape[1] else col


def _take_pivot(G: torch.Tensor, j: int, col: torch.Tensor, dp: float, p: int, diag: torch.Tensor,
                taken: torch.Tensor) -> None:
    """Write column ``j`` of the factor from pivot ``p``'s residual column and update the residual diagonal."""
    g = col / math.sqrt(dp)
    g[taken] = 0.0  # exact zeros on earlier pivots (rounding would leave ~eps there)
    # the residual column at its pivot is the residual diagonal there: sqrt(dp) exactly (a kernel
    # whose rounded k(x, x) is not its diag -- RBF at gamma=1e300 gives 0 -- left a singular factor)
    g[p] = math.sqrt(dp)
    G[:, j] = g
    diag.sub_(g.to(torch.float64) ** 2).clamp_min_(0.0)
    diag[p] = 0.0
    taken[p] = True


def pivoted_cholesky(kernel: Kernel, X: torch.Tensor, max_rank: int, *, tol: float = 0.0, rule: str = "diag",
                     n_candidates: int = 59, generator: torch.Generator | None = None,
                     memory_budget: int | None = None, owner: str = "IncompleteCholesky") -> PivotedCholeskyResult:
    """Pivoted incomplete Cholesky of ``K = kernel(X, X)`` without forming ``K``.

    Stops after ``max_rank`` pivots or when the residual trace falls to ``tol`` times the
    initial trace (or when the residual is exactly zero). The factor ``G`` is computed in
    ``X``'s dtype; the residual diagonal is tracked in float64.
    """
    check_param(owner, "rule", rule, [Options(*_RULES)])
    n = X.shape[0]
    r_max = min(int(max_rank), n)
    budget = default_memory_budget(X.device, memory_budget)
    need = _check_factor_fits(n, r_max, X.element_size(), budget, owner)
    G = torch.zeros(n, r_max, dtype=X.dtype, device=X.device)
    diag = _initial_diagonal(kernel, X, owner)
    trace0 = float(diag.sum())
    pivots: list[int] = []
    traces: list[float] = []
    taken = torch.zeros(n, dtype=torch.bool, device=X.device)
    gen_cpu = generator if generator is None or generator.device.type == "cpu" else None
    col_budget = ExecutionPlan(budget).holding(need, floor=FACTOR_COLUMN_MIN_BYTES).budget
    for j in range(r_max):
        if rule == "diag":
            p, col = int(torch.argmax(diag)), None
        else:
            p, col = _greedy_pivot(kernel, X, G[:, :j], diag, taken, n_candidates, generator, gen_cpu, col_budget)
        dp = float(diag[p])
        if dp <= max(tol * trace0, 0.0) or dp <= 1e-14 * max(trace0 / max(n, 1), 1e-300):
            break
        if col is None:
            col = _residual_column(kernel, X, G[:, :j], p, col_budget)
        _take_pivot(G, j, col, dp, p, diag, taken)
        pivots.append(p)
        traces.append(float(diag.sum()))
        if traces[-1] <= tol * trace0:
            break
    r = len(pivots)
    return PivotedCholeskyResult(G[:, :r].clone() if r < r_max else G,
                                 torch.tensor(pivots, dtype=torch.long, device=X.device),
                                 torch.tensor(traces, dtype=torch.float64), trace0)


class IncompleteCholesky(TransformerMixin, StreamedMethodsMixin, BaseEstimator):
    """Pivoted incomplete Cholesky features: ``transform(X) @ transform(Z).T ~ k(X, Z)``.

    Parameters
    ----------
    kernel : str or Kernel, default="rbf"
    n_components : int, default=100
        Maximum rank r (number of pivots).
    tol : float, default=1e-6
        Stop early once the residual trace ``tr(K - G G^T)`` is below ``tol * tr(K)``.
    rule : {"diag", "greedy"}, default="diag"
        Pivot rule: largest residual diagonal (Fine & Scheinberg) or the sparse greedy matrix
        approximation's best trace reduction among ``n_candidates`` random points (Smola &
        Schölkopf).
    n_candidates : int, default=59
    gamma, degree, coef0, kernel_params : for a string ``kernel``, as in :class:`mercer.KernelRidge`.
    random_state, device, dtype, memory_budget : as elsewhere in mercer.

    Attributes
    ----------
    pivots_ : ndarray of shape (n_components_,)
        Indices of the chosen training points.
    landmarks_ : tensor of shape (n_components_, n_features_in_)
    factor_ : tensor of shape (n_components_, n_components_)
        Lower-triangular ``L`` with ``L L^T = K(landmarks, landmarks)``.
    n_components_ : int
        Rank actually reached (smaller than ``n_components`` when ``tol`` stopped it).
    residual_trace_ : ndarray of shape (n_components_,)
        ``tr(K - G G^T)`` after each pivot; ``initial_trace_`` is ``tr(K)``.
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "n_components": N_COMPONENTS,
        "tol": [Interval(Real, 0, 1, closed="left")],
        "rule": [Options(*_RULES)],
        "n_candidates": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # densified block by block
        return tags

    def __init__(self, kernel="rbf", n_components=100, *, tol=1e-6, rule="diag", n_candidates=59, gamma=None,
                 degree=None, coef0=None, kernel_params=None, random_state=None, device=None, dtype=None,
                 memory_budget=None):
        self.kernel = kernel
        self.n_components = n_components
        self.tol = tol
        self.rule = rule
        self.n_candidates = n_candidates
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def _fit(self, X):
        owner = type(self).__name__
        check_params(self)
        source = fit_source(self, X)
        if source is not None:  # the n x M factor is held whole: the data are read into memory (if they fit)
            Xv = source_to_memory(source, owner, memory_budget=self.memory_budget)
            if not np.isfinite(Xv.data if sp.issparse(Xv) else Xv).all():  # a sparse source's CSR
                raise ValueError(f"Input X contains NaN or infinity ({source!r}); {owner} needs finite inputs.")
        else:
            Xv = check_array_like(self, X, reset=True, accept_sparse=True)
        # the rank of an n x n kernel matrix is at most n
        check_at_most(owner, "n_components", self.n_components, Xv.shape[0], "n_samples")
        kernel = resolve_kernel(self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                                kernel_params=self.kernel_params, owner=owner)
        if kernel.is_precomputed:
            raise ValueError(f"{owner} needs a kernel on feature vectors, not a precomputed Gram matrix.")
        device = resolve_device(self.device if not isinstance(Xv, torch.Tensor) else (self.device or Xv.device))
        Xt = to_tensor(Xv, dtype=resolve_dtype(self.dtype, Xv), device=device)
        res = pivoted_cholesky(kernel, Xt, int(self.n_components), tol=float(self.tol), rule=self.rule,
                               n_candidates=int(self.n_candidates), generator=make_generator(self.random_state),
                               memory_budget=self.memory_budget, owner=owner)
        check_finite(res.G, owner, "the factor's values", X=Xt, kernel=kernel)
        self.kernel_ = kernel
        self.pivots_ = res.pivots.cpu().numpy()
        self.landmarks_ = Xt[res.pivots].clone()
        self.factor_ = res.G[res.pivots].tril().clone()
        self.n_components_ = int(res.pivots.numel())
        self.residual_trace_ = res.residual_trace.numpy()
        self.initial_trace_ = res.initial_trace
        return res.G

    def fit(self, X, y=None):
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """The factor ``G`` itself (no second pass over the data)."""
        return as_output(self._fit(X), X)

    def transform(self, X):
        check_is_fitted(self)
        Xv = check_array_like(self, X, reset=False, accept_sparse=True)
        Xt = to_tensor(Xv, dtype=self.landmarks_.dtype,
                       device=Xv.device if isinstance(Xv, torch.Tensor) else self.landmarks_.device)
        Z, L = self.landmarks_.to(Xt.device), self.factor_.to(Xt.device)
        budget = default_memory_budget(Xt.device, self.memory_budget)
        K = _cross(self.kernel_, Xt, Z, budget)
        check_finite(K, type(self).__name__, "the kernel values to the landmarks", X=Xt, kernel=self.kernel_)
        return as_output(torch.linalg.solve_triangular(L, K.T, upper=False).T, X)

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self)
        return np.asarray([f"incompletecholesky{i}" for i in range(self.n_components_)], dtype=object)


def _cross(kernel: Kernel, X: torch.Tensor, Z: torch.Tensor, budget: int) -> torch.Tensor:
    """``K(X, Z)`` (n x m; the caller keeps it) computed in row blocks whose scratch fits ``budget``
    less the output (at least 4 MiB)."""
    n, m = X.shape[0], Z.shape[0]
    out = torch.empty(n, m, dtype=X.dtype, device=X.device)
    scratch_budget = ExecutionPlan(budget).holding(n * m * X.element_size(), floor=CROSS_SCRATCH_MIN_BYTES).budget
    # a row holds its m kernel entries and the kernel's working copies of them
    rows = plan_rows(n, max(m, 1) * X.element_size() * (1.0 + kernel.scratch(X.shape[1])), budget=scratch_budget,
                     max_bytes=None, what="a block of kernel rows")
    for rs in row_blocks(n, rows, desc="kernel to landmarks"):
        out[rs] = kernel(X[rs], Z)
    return out
