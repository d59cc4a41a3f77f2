"""Blocked statistics of a kernel and their backward pass: what learning hyperparameters at scale needs.

The objectives of Nyström ridge (GCV, hold-out error) and of sparse GP regression (Titsias'
collapsed bound) see the data only through sums over its rows. With ``K = k_theta(X, Z)`` (``n x m``),
``W = diag(w)`` and targets ``Y`` (``n x t``), :func:`kernel_statistics` returns, per weight column
``g`` (``w`` may hold several: a training and a validation mask),

* ``gram[g] = K^T W_g K`` (m x m), ``rhs[g] = K^T W_g Y`` (m x t), ``colsum[g] = K^T W_g 1`` (m),
* ``kdiag[g] = sum_i w_gi k(x_i, x_i)``,

and the kernel-free sums ``n_w[g] = sum_i w_gi``, ``yy[g] = sum_i w_gi y_i^2``, ``ysum[g] = Y^T w_g``.

**Forward** (pass 1): one loop over row blocks (:func:`~mercer.linalg.row_blocks`: progress and
Ctrl-C; a row source is read block by block), no autograd graph kept: memory O(block + m^2), never
``n x m``. The four kernel statistics are the outputs of one :class:`torch.autograd.Function` of
``theta`` (the kernel's log-hyperparameters) and ``Z``, so an objective written on them -- and on
``K_MM = k_theta(Z, Z)``, small and on the graph -- is differentiated by autograd as usual.

**Backward** (pass 2): given the adjoints ``G_A = dL/dgram``, ``G_b = dL/drhs``, ``g_c = dL/dcolsum``,
``g_k = dL/dkdiag``, each block's tile ``K_b`` is recomputed with autograd on (for ``RBF`` / ``c * RBF``
on dense rows, read from the forward pass instead when the ``n x m`` tiles fit the plan's "kept
matrix" share, which is then held by both passes) and the vector-Jacobian product of ``K_b`` with its
adjoint

.. math:: \\bar K_b = \\sum_g W_{g,b} \\big(K_b (G_{A,g} + G_{A,g}^T) + Y_b G_{b,g}^T + 1 g_{c,g}^T\\big)

(and of the block's diagonal with ``sum_g g_{k,g} w_{g,b}``) is accumulated into the gradients with
respect to ``theta`` and ``Z``: two passes per objective and gradient, whatever the number of
hyperparameters (ARD: one per feature) or of centres' coordinates. For ``RBF`` and ``c * RBF`` (one gamma or
ARD) the vector-Jacobian product is written out (:class:`_RBFGradient`: one ``m x d`` product per
block, no autograd graph); on sparse rows (:class:`~mercer._sparse.SparseRows` blocks and centres, the
centres fixed) ``RBF`` and ``c * RBF`` with one gamma take the same closed form from squared distances
(row norms and one sparse product per block, :class:`_SparseRBFGradient`); every other kernel is
differentiated by autograd through its own code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .._sparse import is_sparse, plan_features
from ..kernels import RBF, Scaled
from ..sources import RowSource
from ._blocking import plan_rows, row_blocks
from ._plan import DIRECT_TILE_BYTES, current_plan
from ._source_blocks import tensor_blocks

__all__ = ["KernelStatistics", "centres_gram", "kernel_statistics", "sample_row_bytes", "statistics_rows"]

#: Kernel-row copies one row of a block holds in the backward pass: the tile, the kernel's saved
#: intermediates (besides its declared scratch), the tile's adjoint, ``K_b G_A`` and autograd's
#: gradients of the intermediates. 4 was measured short: NystroemKernelRidgeCV at a 64 MiB budget
#: (n = 4,000, one block) peaked 89.7 MiB over its allowance of 77.3; with 8, 69.4 MiB
#: (benchmarks/probes/probe_memory_budget.py, benchmarks/results/budget/latest.md).
_BACKWARD_ROW_COPIES = 8.0


@dataclasses.dataclass(frozen=True)
class KernelStatistics:
    """The sums of :func:`kernel_statistics`, one leading entry per weight column ``g`` (float64).

    ``gram`` (g, m, m), ``rhs`` (g, m, t), ``colsum`` (g, m), ``kdiag`` (g,) are differentiable in
    ``theta`` and ``Z``; ``n_w`` (g,), ``yy`` (g, t), ``ysum`` (g, t) do not depend on the kernel."""

    gram: torch.Tensor
    rhs: torch.Tensor
    colsum: torch.Tensor
    kdiag: torch.Tensor
    n_w: torch.Tensor
    yy: torch.Tensor
    ysum: torch.Tensor


def statistics_rows(n: int, m: int, d: int, t: int, g: int, *, itemsize: int, scratch: float, memory_budget=None,
                    device=None, what: str = "a block of the kernel statistics") -> int:
    """Rows per block of :func:`kernel_statistics`: its backward pass holds ``4 + scratch`` kernel rows
    of ``m`` entries, the inputs, targets and weights per row; ``g`` float64 ``m x m`` accumulators
    and their adjoints (and the centres) throughout."""
    plan = current_plan(memory_budget, device)
    per_row = itemsize * (m * (_BACKWARD_ROW_COPIES + scratch) + d + t + g)
    fixed = 8 * (2 * g * m * (m + t + 1)) + itemsize * 2 * m * d
    return plan_rows(n, per_row, budget=plan.budget, fixed_bytes=fixed, max_bytes=DIRECT_TILE_BYTES, what=what)


def sample_row_bytes(X, t: int, g: int) -> int:
    """Bytes of one row of ``X`` (dense rows, sparse rows or a row source) held in memory in float64
    with its ``t`` targets and ``g`` weights: what a random subsample of the rows costs per row (the
    coarse stages of :class:`~mercer.models.ridge.NystroemKernelRidgeCV`)."""
    return 8 * (plan_features(X) + int(t) + int(g))


class _RBFGradient:
    """The backward pass of an RBF kernel (one ``gamma`` or one per feature, ARD), optionally scaled
    (``c * RBF``), in closed form: with ``P = K_b o Kbar_b`` (the tile times its adjoint),
    ``r = P 1``, ``c = P^T 1`` and ``Q = P^T X_b`` (one ``m x d`` product per block),

    * ``dL/dgamma_f = -sum_ij P_ij (x_if - z_jf)^2 = -(sum_i r_i x_if^2 + sum_j c_j z_jf^2 - 2 sum_j z_jf Q_jf)``,
    * ``dL/dZ_jf = 2 gamma_f (Q_jf - c_j z_jf)``,
    * ``dL/dscale = sum_ij P_ij / scale + sum_i w_i g_k`` (the diagonal is ``scale``),

    in coordinates shifted by the centres' mean (the distances do not change; the expansion then does
    not cancel digits for data far from the origin). Autograd would hold the tile's intermediates and
    make two ``n x m x d`` products and several elementwise passes; this makes one product and no
    graph. The gradients with respect to the kernel's hyperparameter tensors are taken to ``theta``
    once, at the end, by autograd through ``theta -> (gamma, scale)`` (whatever ``kernel_at`` does)."""

    def __init__(self, kernel, Z: torch.Tensor):
        self.scaled = isinstance(kernel, Scaled)
        rbf = kernel.kernel if self.scaled else kernel
        self.scale = kernel.scale if self.scaled else None
        d = Z.shape[1]
        gamma = 1.0 / d if rbf.gamma is None else rbf.gamma
        self.gamma_t = gamma if isinstance(gamma, torch.Tensor) else None
        g = gamma.detach() if isinstance(gamma, torch.Tensor) else torch.as_tensor(gamma, dtype=torch.float64)
        self.gamma = g.to(device=Z.device, dtype=torch.float64).reshape(-1).expand(d)
        self.Z_in = Z
        Z64 = Z.detach().to(torch.float64)
        self.shift = Z64.mean(0)
        self.Zs = Z64 - self.shift
        self.d_gamma = torch.zeros(d, dtype=torch.float64, device=Z.device)
        self.d_Z = torch.zeros_like(Z64)
        self.d_scale = torch.zeros((), dtype=torch.float64, device=Z.device)

    @staticmethod
    def handles(kernel) -> bool:
        """``RBF`` or ``c * RBF`` (exactly these classes: a subclass may change the formula)."""
        return type(kernel.kernel if type(kernel) is Scaled else kernel) is RBF

    def tile(self, k, Xb) -> torch.Tensor:
        """The block's kernel tile in float64 (``k``: the kernel without a graph)."""
        return k(Xb, self.Z_in).to(torch.float64)

    def add_block(self, Xb, P, diag_adjoint):
        """``P = K_b o Kbar_b`` (float64, overwritten is allowed) and the block's diagonal adjoint."""
        r, c = P.sum(1), P.sum(0)
        Xs = Xb.to(torch.float64) - self.shift
        Q = (Xs.mT @ P).mT  # P^T X_s: as X_s^T P, the faster layout for the thin product
        self.d_gamma.sub_((Xs * Xs).mT @ r).sub_(c @ (self.Zs * self.Zs)).add_(2.0 * (self.Zs * Q).sum(0))
        self.d_Z.add_(Q).sub_(c[:, None] * self.Zs)
        if self.scaled:
            self.d_scale.add_(c.sum()).add_(diag_adjoint.sum() * float(self.scale))

    def finish(self, theta, Z, needs):
        """``(d theta, d Z)`` (None where not needed)."""
        g_z = (2.0 * self.gamma * self.d_Z).to(Z.dtype) if needs[1] else None
        g_t = None
        if needs[0]:
            outs, adj = [], []
            if isinstance(self.gamma_t, torch.Tensor) and self.gamma_t.requires_grad:
                outs.append(self.gamma_t)
                adj.append(self.d_gamma.reshape(self.gamma_t.shape) if self.gamma_t.numel() == self.d_gamma.numel()
                           else self.d_gamma.sum().reshape(self.gamma_t.shape))
            if self.scaled and isinstance(self.scale, torch.Tensor) and self.scale.requires_grad:
                outs.append(self.scale)
                adj.append((self.d_scale / self.scale.detach().to(torch.float64)).reshape(self.scale.shape))
            g_t = torch.zeros_like(theta)
            if outs:
                grads = torch.autograd.grad(outs, theta, [a.to(o.dtype) for o, a in zip(outs, adj)],
                                            allow_unused=True)[0]
                if grads is not None:
                    g_t = grads
        return g_t, g_z


class _SparseRBFGradient(_RBFGradient):
    """The closed-form backward pass of ``RBF`` / ``c * RBF`` with one ``gamma`` on sparse rows
    (:class:`~mercer._sparse.SparseRows` blocks and centres): with ``P = K_b o Kbar_b``,
    ``dL/dgamma = -sum_ij P_ij D_ij`` where ``D_ij = |x_i|^2 + |z_j|^2 - 2 x_i . z_j`` (clamped at 0,
    as the kernel's own sparse evaluation clamps its exponent) comes from the rows' squared norms and
    one sparse product per block, which gives the tile ``c exp(-gamma D)`` too (the kernel's value to
    rounding); ``dL/dscale`` as for dense rows. No coordinates are formed: the centres are sparse
    rows and are not learned (``needs[1]`` is False)."""

    def __init__(self, kernel, Z):
        self.scaled = isinstance(kernel, Scaled)
        rbf = kernel.kernel if self.scaled else kernel
        self.scale = kernel.scale if self.scaled else None
        gamma = 1.0 / Z.shape[1] if rbf.gamma is None else rbf.gamma
        self.gamma_t = gamma if isinstance(gamma, torch.Tensor) else None
        self.g = float(gamma.detach()) if isinstance(gamma, torch.Tensor) else float(gamma)
        self.c = 1.0 if not self.scaled else float(self.scale.detach() if isinstance(self.scale, torch.Tensor)
                                                   else self.scale)
        self.Z = Z.to(torch.float64)
        self.z_sq = self.Z.row_sq_norms()
        f64 = dict(dtype=torch.float64, device=Z.device)
        self.d_gamma = torch.zeros(1, **f64)
        self.d_scale = torch.zeros((), **f64)
        self._D = None

    def tile(self, k, Xb) -> torch.Tensor:
        """The tile ``c exp(-gamma D)`` from the block's squared distances ``D``, kept for
        :meth:`add_block` (one sparse product per block for both; equal to the kernel's own
        evaluation to rounding)."""
        X64 = Xb.to(torch.float64)
        D = X64.dot_block(self.Z).mul_(-2.0).add_(X64.row_sq_norms()[:, None]).add_(self.z_sq[None, :]).clamp_min_(0.0)
        self._D = D
        K = torch.exp(D * -self.g)
        return K.mul_(self.c) if self.scaled else K

    @staticmethod
    def handles(kernel) -> bool:
        """``RBF`` or ``c * RBF`` with one ``gamma`` (ARD is not differentiated here)."""
        if not _RBFGradient.handles(kernel):
            return False
        gamma = (kernel.kernel if type(kernel) is Scaled else kernel).gamma
        return not (isinstance(gamma, torch.Tensor) and gamma.numel() > 1) and not isinstance(gamma, (tuple, list))

    def add_block(self, Xb, P, diag_adjoint):
        D, self._D = self._D, None  # the block's distances, from tile()
        self.d_gamma.sub_((P * D).sum())
        if self.scaled:
            self.d_scale.add_(P.sum()).add_(diag_adjoint.sum() * float(self.scale))


class _Pass:
    """The data of one call (inputs, targets, weights, block size) and its two passes."""

    def __init__(self, kernel_at, X, Y, W, rows, desc, keep_tiles=False):
        self.kernel_at, self.X, self.Y, self.W, self.rows, self.desc = kernel_at, X, Y, W, rows, desc
        self.ones = bool((W == 1).all())  # unweighted: no row scaling in either pass
        self.dense = not (X.sparse if isinstance(X, RowSource) else is_sparse(X))
        # the forward pass's tiles, kept for the closed-form RBF backward pass (which would recompute
        # them) when they fit the plan (see kernel_statistics); handed over once, then dropped
        self.tiles = [] if keep_tiles else None

    def blocks(self, dtype, device, what):
        """``(Xb, Yb, Wb)`` per row block (a source is read one block at a time)."""
        desc = f"{self.desc}: {what}"
        if isinstance(self.X, RowSource):
            for r, Xb in tensor_blocks(self.X, self.rows, dtype=dtype, device=device, desc=desc):
                yield Xb, self.Y[r], self.W[r]
        else:
            for r in row_blocks(self.X.shape[0], self.rows, desc=desc):
                yield self.X[r], self.Y[r], self.W[r]

    def forward(self, theta, Z):
        m, t, g = Z.shape[0], self.Y.shape[1], self.W.shape[1]
        f64 = dict(dtype=torch.float64, device=Z.device)
        gram, rhs = torch.zeros(g, m, m, **f64), torch.zeros(g, m, t, **f64)
        colsum, kdiag = torch.zeros(g, m, **f64), torch.zeros(g, **f64)
        with torch.no_grad():
            k = self.kernel_at(theta)
            for Xb, Yb, Wb in self.blocks(Z.dtype, Z.device, "statistics"):
                Kb = k(Xb, Z)
                if self.tiles is not None:
                    self.tiles.append(Kb)
                Wd = Wb.to(Kb.dtype)
                # [w_0 y, w_0, w_1 y, w_1, ...]^T K: the right-hand sides and column sums in one product
                # (R^T K rather than K^T R: a third of the time of the thin product at m = 200)
                R = torch.cat([torch.cat([Wd[:, j, None] * Yb.to(Kb.dtype), Wd[:, j, None]], 1) for j in range(g)], 1)
                RK = (R.mT @ Kb).to(torch.float64).reshape(g, t + 1, m)
                rhs.add_(RK[:, :t].mT)
                colsum.add_(RK[:, t])
                for j in range(g):
                    WK = Kb if self.ones else Kb * Wd[:, j, None]
                    gram[j].add_(WK.mT @ Kb)  # the tile's dtype, summed in float64
                kdiag.add_(Wd.mT.to(torch.float64) @ k.diag(Xb).to(torch.float64))
        gram = 0.5 * (gram + gram.mT)  # exactly symmetric (the products' rounding is not)
        return gram, rhs, colsum, kdiag

    def _adjoint(self, K64, Yb, Wd, GA, gb, gc):
        """The tile's adjoint ``sum_g W_g (K GA_g + Y gb_g^T + 1 gc_g^T)`` (float64): per weight column,
        ``1 gc^T + Y gb^T`` then ``K GA`` accumulated into it in place (no other ``block x m`` temporary)."""
        Y64 = Yb.to(torch.float64)
        bar = None
        for j in range(GA.shape[0]):
            part = torch.addmm(gc[j], Y64, gb[j].mT).addmm_(K64, GA[j])
            if not self.ones:
                part = part.mul_(Wd[:, j, None])
            bar = part if bar is None else bar.add_(part)
        return bar

    def backward(self, theta, Z, gA, gb, gc, gk, needs):
        if not any(needs):
            return None, None
        GA = gA + gA.mT  # d<G_A, K^T W K>/dK = W K (G_A + G_A^T)
        with torch.no_grad():
            k0 = self.kernel_at(theta.detach())
        if _RBFGradient.handles(k0) and self.dense:
            return self._backward_rbf(theta, Z, GA, gb, gc, gk, needs)
        if not self.dense and is_sparse(Z) and _SparseRBFGradient.handles(k0):
            return self._backward_rbf(theta, Z, GA, gb, gc, gk, needs, _SparseRBFGradient)
        return self._backward_autograd(theta, Z, GA, gb, gc, gk, needs)

    def _backward_rbf(self, theta, Z, GA, gb, gc, gk, needs, gradient=_RBFGradient):
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(needs[0])
            k = self.kernel_at(leaf)  # its hyperparameter tensors hang on theta's graph
        acc = gradient(k, Z)
        tiles, self.tiles = (iter(self.tiles) if self.tiles and gradient is _RBFGradient else None), None
        with torch.no_grad():
            kd = self.kernel_at(theta.detach())
            for Xb, Yb, Wb in self.blocks(Z.dtype, Z.device, "gradient"):
                K64 = acc.tile(kd, Xb) if tiles is None else next(tiles).to(torch.float64)
                Wd = Wb.to(torch.float64)
                P = self._adjoint(K64, Yb, Wd, GA, gb, gc).mul_(K64)
                acc.add_block(Xb, P, Wd @ gk)
        return acc.finish(leaf, Z, needs)

    def _backward_autograd(self, theta, Z, GA, gb, gc, gk, needs):
        want = [x for x, need in zip((theta, Z), needs) if need]
        grads = [torch.zeros_like(x) for x in want]
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(need) if torch.is_tensor(x) else x  # sparse centres: fixed
                      for x, need in zip((theta, Z), needs)]
            inputs = [x for x, need in zip(leaves, needs) if need]
            for Xb, Yb, Wb in self.blocks(Z.dtype, Z.device, "gradient"):
                k = self.kernel_at(leaves[0])  # per block: each block's graph is freed by its own grad
                Kb = k(Xb, leaves[1])
                Wd = Wb.to(torch.float64)
                with torch.no_grad():
                    bar = self._adjoint(Kb.detach().to(torch.float64), Yb, Wd, GA, gb, gc)
                outs, adj = [Kb], [bar.to(Kb.dtype)]
                dg = k.diag(Xb)
                if dg.requires_grad:
                    outs.append(dg)
                    adj.append((Wd @ gk).to(dg.dtype))
                if not Kb.requires_grad:
                    continue
                for acc, gr in zip(grads, torch.autograd.grad(outs, inputs, adj, allow_unused=True)):
                    if gr is not None:
                        acc.add_(gr)
        it = iter(grads)
        return tuple(next(it) if need else None for need in needs)


class _StatisticsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, theta, Z, job):
        ctx.job = job
        if is_sparse(Z):  # sparse centres (rows of sparse data) are no tensor autograd could save, nor a parameter
            ctx.save_for_backward(theta)
            ctx.sparse_Z = Z
        else:
            ctx.save_for_backward(theta, Z)
        return job.forward(theta, Z)

    @staticmethod
    def backward(ctx, gA, gb, gc, gk):
        theta, Z = (*ctx.saved_tensors, ctx.sparse_Z) if hasattr(ctx, "sparse_Z") else ctx.saved_tensors
        gt, gz = ctx.job.backward(theta, Z, gA, gb, gc, gk, ctx.needs_input_grad[:2])
        return gt, gz, None


class _CentresGram(torch.autograd.Function):
    """``k_theta(Z, Z)`` of ``RBF`` / ``c * RBF`` on dense centres, its backward in closed form: the
    centres are both the rows and the columns of the tile, so :class:`_RBFGradient` takes the columns'
    part (``d gamma``, ``d scale``, ``Z`` as centres) and the rows' part ``2 gamma (P Z - r z)`` is added
    (``P = K o G``, ``r = P 1``): no autograd graph of the kernel's code per evaluation."""

    @staticmethod
    def forward(ctx, theta, Z, kernel_at):
        with torch.no_grad():
            K = kernel_at(theta)(Z)
        ctx.kernel_at = kernel_at
        ctx.save_for_backward(theta, Z, K)
        return K

    @staticmethod
    def backward(ctx, G):
        theta, Z, K = ctx.saved_tensors
        needs = ctx.needs_input_grad[:2]
        if not any(needs):
            return None, None, None
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(needs[0])
            k = ctx.kernel_at(leaf)  # its hyperparameter tensors hang on theta's graph
        acc = _RBFGradient(k, Z)
        P = K.to(torch.float64) * G.to(torch.float64)
        acc.add_block(Z, P, torch.zeros(Z.shape[0], dtype=torch.float64, device=Z.device))
        acc.d_Z.add_(P @ acc.Zs).sub_(P.sum(1)[:, None] * acc.Zs)
        g_t, g_z = acc.finish(leaf, Z, needs)
        return g_t, g_z, None


def centres_gram(kernel_at: Callable[[torch.Tensor], object], theta: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """``K_MM = k_theta(Z, Z)``, differentiable in ``theta`` and ``Z`` (as ``kernel_at(theta)(Z)``): for
    ``RBF`` / ``c * RBF`` on dense centres with the closed-form backward of the blocked statistics,
    otherwise by autograd through the kernel's code."""
    if is_sparse(Z) or not _RBFGradient.handles(kernel_at(theta.detach())) or not torch.is_grad_enabled():
        return kernel_at(theta)(Z)
    return _CentresGram.apply(theta, Z, kernel_at)


def kernel_statistics(kernel_at: Callable[[torch.Tensor], object], theta: torch.Tensor, Z: torch.Tensor, X, Y,
                      weights: torch.Tensor | None = None, *, rows: int | None = None, memory_budget=None,
                      desc: str = "kernel statistics") -> KernelStatistics:
    """The blocked sums of ``K = k_theta(X, Z)`` (see the module docstring), differentiable in
    ``theta`` and ``Z`` by a second blocked pass.

    Parameters
    ----------
    kernel_at : callable
        ``theta -> Kernel`` (:meth:`mercer.kernels.LearnableKernel.at`): the kernel at the
        log-hyperparameters ``theta``, evaluated by its own code (under autograd in the backward pass).
    theta : tensor of shape (p,)
        May require grad; ``p = 0`` is allowed.
    Z : tensor of shape (m, d)
        The centres (inducing points); may require grad (kernels differentiable in their inputs).
        With sparse ``X``, :class:`~mercer._sparse.SparseRows` (fixed centres: no gradient).
    X : tensor of shape (n, d), :class:`~mercer._sparse.SparseRows` or :class:`mercer.sources.RowSource`
        A source is read block by block in ``Z``'s dtype.
    Y : tensor of shape (n, t)
    weights : tensor of shape (n,) or (n, g), optional
        One column per set of statistics (all ones when omitted).
    rows : int, optional
        Rows per block (default: :func:`statistics_rows` within ``memory_budget``).
    memory_budget : int or ExecutionPlan, optional
        The plan the blocks are sized from (default: the plan of the call in progress).
    """
    n = X.n_samples if isinstance(X, RowSource) else X.shape[0]
    d = X.n_features if isinstance(X, RowSource) else X.shape[1]
    if Y.ndim != 2 or Y.shape[0] != n:
        raise ValueError(f"kernel_statistics: Y must have shape ({n}, t); got {tuple(Y.shape)}.")
    if Z.ndim != 2 or Z.shape[1] != d:
        raise ValueError(f"kernel_statistics: Z must have shape (m, {d}); got {tuple(Z.shape)}.")
    W = torch.ones(n, 1, dtype=torch.float64, device=Z.device) if weights is None else weights.to(Z.device)
    W = W[:, None] if W.ndim == 1 else W
    if W.shape[0] != n:
        raise ValueError(f"kernel_statistics: weights must have {n} rows; got {W.shape[0]}.")
    kernel = kernel_at(theta.detach())
    dense = not (X.sparse if isinstance(X, RowSource) else is_sparse(X))
    keep = (dense and _RBFGradient.handles(kernel) and torch.is_grad_enabled()
            and (theta.requires_grad or Z.requires_grad))
    if keep:  # the n x m tiles kept for the backward pass: within the kept-matrix share, held throughout
        plan = current_plan(memory_budget, Z.device)
        tile_bytes = n * Z.shape[0] * Z.element_size()
        keep = tile_bytes <= plan.share("kept matrix")
        if keep:
            memory_budget = plan.holding(tile_bytes)
    if rows is None:
        scratch = float(kernel.scratch(d))
        # sparse rows (in memory or a sparse source): a row costs its stored entries, not d
        sparse = X.sparse if isinstance(X, RowSource) else is_sparse(X)
        rows = statistics_rows(n, Z.shape[0], plan_features(X) if sparse else d, Y.shape[1], W.shape[1],
                               itemsize=Z.element_size(), scratch=scratch, memory_budget=memory_budget,
                               device=Z.device)
    job = _Pass(kernel_at, X, Y.to(Z.device), W, int(rows), desc, keep_tiles=keep)
    gram, rhs, colsum, kdiag = _StatisticsFunction.apply(theta, Z, job)
    W64, Y64 = W.to(torch.float64), Y.to(device=Z.device, dtype=torch.float64)
    return KernelStatistics(gram, rhs, colsum, kdiag, W64.sum(0), W64.mT @ (Y64 * Y64), W64.mT @ Y64)
