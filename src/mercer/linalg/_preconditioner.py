"""FALKON's preconditioner (Rudi, Carratino & Rosasco 2017) for the Nyström ridge system

.. math:: (K_{nM}^T W K_{nM} + \\alpha K_{MM})\\, \\beta = K_{nM}^T W y,

kernel-agnostic: it is built from the ``M x M`` matrix ``K_MM`` and ``lam = alpha / n`` only.
With ``T = chol(K_MM)`` (upper, ``T^T T = K_MM``) and ``A = chol(T T^T / M + lam I)`` (upper), the
preconditioner is ``P = T^{-1} A^{-1}``: the change of variables ``beta = P u`` turns the system
(divided by ``n``) into

.. math:: P^T (K_{nM}^T W K_{nM} / n + \\lambda K_{MM}) P\\, u = P^T K_{nM}^T W y / n,

whose condition number stays small when ``K_nM^T K_nM ~ (n / M) K_MM^2`` (uniform centres).
Conjugate gradient runs on it through :meth:`FalkonPreconditioner.system`, given only the
operator's ``v -> K_nM^T W K_nM v`` (:meth:`KernelOperator.kt_k_v`).
"""

from __future__ import annotations

import torch

from .._backend import num_threads as _num_threads
from ._eig import DENSE_SERIAL_MAX_N
from ._factor import jittered_cholesky

__all__ = ["FalkonPreconditioner", "falkon_solve_bytes", "lower_gram"]


def falkon_solve_bytes(M: int, n_rhs: int, *, itemsize: int = 8, direct: bool = False) -> int:
    """Bytes a Nyström ridge solve holds besides its kernel tiles: ``M x M`` matrices (two for
    conjugate gradient, the factors ``T`` and ``A``; three for the direct solve, the normal
    matrix, its shifted copy and its factor) and twelve ``M x n_rhs`` vectors (the CG's)."""
    return (3 if direct else 2) * M * M * itemsize + 2 * M * n_rhs * itemsize * 6


#: Order up to which :func:`lower_gram` multiplies with one GEMM (its recursion's leaves).
GRAM_LEAF = 512


def lower_gram(L: torch.Tensor) -> torch.Tensor:
    """``L^T L`` (full, symmetric) for a lower-triangular ``L`` (its strict upper triangle must hold
    zeros; ``L`` is not modified), by halving: with ``L = [[A, 0], [B, C]]``,

    .. math:: L^T L = [[A^T A + B^T B, B^T C], [C^T B, C^T C]],

    ``A^T A`` and ``C^T C`` recursively, the rest by GEMMs: 2 M^3 / 3 flops, a third of one GEMM's,
    all in large GEMMs on any device and at torch's thread setting. Measured at M = 5,000, one
    thread: float32 0.53 s, float64 1.10 s, against LAPACK's ``lauum`` (M^3 / 3 flops, but run by
    scipy's OpenBLAS at a fraction of its GEMM speed) 2.35 s and 3.28 s, and one GEMM 1.45 s and 2.87 s.
    """
    out = torch.empty(L.shape, dtype=L.dtype, device=L.device)
    _gram_into(L, out)
    _mirror_lower(out)
    return out


def _gram_into(L: torch.Tensor, out: torch.Tensor) -> None:
    """The lower triangle of ``L^T L`` into ``out`` (its strict upper triangle is left unspecified:
    a GEMM ``X^T X`` need not be bitwise symmetric, e.g. with OpenBLAS on AMD EPYC)."""
    M = L.shape[0]
    if M <= GRAM_LEAF:
        out.copy_(L.mT @ L)
        return
    k = M // 2
    A, B, C = L[:k, :k], L[k:, :k], L[k:, k:]
    _gram_into(A, out[:k, :k])
    out[:k, :k].addmm_(B.mT, B)
    out[k:, :k].copy_(C.mT @ B)
    _gram_into(C, out[k:, k:])


def _mirror_lower(out: torch.Tensor) -> None:
    """Copy the strict lower triangle of the square ``out`` onto its upper one (exactly symmetric),
    in diagonal blocks of GRAM_LEAF rows (temporaries of one block, not of the matrix)."""
    M, b = out.shape[0], GRAM_LEAF
    for j in range(0, M, b):
        D = out[j:j + b, j:j + b]
        D.copy_(D.tril() + D.tril(-1).mT)
        out[j:j + b, j + b:].copy_(out[j + b:, j:j + b].mT)


def _inner_factor(L: torch.Tensor, lam: float, work: torch.dtype, owner: str) -> torch.Tensor:
    """Lower ``La`` with ``La La^T = L^T L / M + lam I``, the product formed in ``work`` precision."""
    C = lower_gram(L.to(work)).to(torch.float64)
    C.div_(L.shape[0]).diagonal().add_(lam)
    return jittered_cholesky(C, owner=owner).L.tril_()


class FalkonPreconditioner:
    """``P = T^{-1} A^{-1}`` for the Nyström ridge system (see the module docstring).

    Build it with :meth:`build`. ``L = T^T`` (lower, float64) defines the system: ``L L^T`` is
    ``K_MM`` shifted by ``eps * M * mean(diag)`` (``eps`` of the tiles' precision, as in FALKON,
    which keeps ``T^{-1}`` from amplifying the rounding of float32 tiles). ``La = A^T`` is only a
    change of variables (any invertible factor gives the same solution, a good one fast
    convergence), so its M^3 product is formed in the tiles' precision; ``La = None`` (no
    preconditioning) uses ``A = I``.

    Attributes
    ----------
    L, La : tensor of shape (M, M)
        Lower factors ``L L^T = K_MM + shift`` and ``La La^T ~ L^T L / M + lam I``.
    lam : float
        ``alpha / n``.
    jitter : float
        Jitter added to ``K_MM`` by its Cholesky factorisation (0.0 normally).
    """

    def __init__(self, L: torch.Tensor, La: torch.Tensor | None, lam: float, jitter: float = 0.0,
                 work_dtype: torch.dtype = torch.float64):
        self.L, self.La, self.lam, self.jitter, self.work_dtype = L, La, float(lam), float(jitter), work_dtype

    @classmethod
    def build(cls, K_mm: torch.Tensor, lam: float, *, tile_dtype: torch.dtype = torch.float64,
              precondition: bool = True, owner: str = "FalkonPreconditioner") -> FalkonPreconditioner:
        """Factor ``K_MM`` (float64, not modified) and, when ``precondition``, ``T T^T / M + lam I``.
        ``tile_dtype`` is the precision of the kernel tiles of the products (it sets the shift)."""
        eps = torch.finfo(tile_dtype).eps
        M = K_mm.shape[0]
        with _num_threads(1 if K_mm.device.type == "cpu" and M <= DENSE_SERIAL_MAX_N else None):
            K = K_mm.clone()
            K.diagonal().add_(eps * M * float(K.diagonal().mean().clamp_min(1e-300)))
            fac = jittered_cholesky(K, owner=owner)
            L = fac.L.tril_()  # the strict upper triangle still held K_MM's entries
            work = torch.float32 if eps > 1e-10 else torch.float64
            La = _inner_factor(L, lam, work, owner) if precondition else None
        return cls(L, La, lam, fac.jitter, work)

    def with_lam(self, lam: float, *, owner: str = "FalkonPreconditioner") -> FalkonPreconditioner:
        """The preconditioner of the same ``K_MM`` for another ``lam`` (``T`` reused, ``A`` refactored)."""
        if self.La is None:
            return type(self)(self.L, None, lam, self.jitter, self.work_dtype)
        M = self.L.shape[0]
        with _num_threads(1 if self.L.device.type == "cpu" and M <= DENSE_SERIAL_MAX_N else None):
            La = _inner_factor(self.L, lam, self.work_dtype, owner)
        return type(self)(self.L, La, lam, self.jitter, self.work_dtype)

    # -- the four triangular solves ------------------------------------------------------------
    def _solve_T(self, v):  # T^{-1} v with T = L^T
        return torch.linalg.solve_triangular(self.L.mT, v, upper=True)

    def _solve_Tt(self, v):  # T^{-T} v = L^{-1} v
        return torch.linalg.solve_triangular(self.L, v, upper=False)

    def _solve_A(self, v):
        return v if self.La is None else torch.linalg.solve_triangular(self.La.mT, v, upper=True)

    def _solve_At(self, v):
        return v if self.La is None else torch.linalg.solve_triangular(self.La, v, upper=False)

    # -- public products -----------------------------------------------------------------------
    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """``P v = T^{-1} A^{-1} v``: the coefficients ``beta`` from the CG variable ``u``."""
        return self._solve_T(self._solve_A(v))

    def apply_t(self, v: torch.Tensor) -> torch.Tensor:
        """``P^T v = A^{-T} T^{-T} v``."""
        return self._solve_At(self._solve_Tt(v))

    def rhs(self, b: torch.Tensor, n: float) -> torch.Tensor:
        """Right-hand side of the preconditioned system, ``P^T b / n`` (``b = K_nM^T W y``)."""
        return self._solve_At(self._solve_Tt(b) / n)

    def system(self, kt_k_v, n: float):
        """``u -> P^T (H / n + lam K_MM) P u`` with ``H v = kt_k_v(v)`` (``K_nM^T W K_nM v``): the
        symmetric positive definite matvec conjugate gradient runs on. ``P^T K_MM P = A^{-T}
        A^{-1}``, so the regulariser costs two triangular solves, not a product with ``K_MM``."""
        lam = self.lam

        def matvec(u: torch.Tensor) -> torch.Tensor:
            v1 = self._solve_A(u)
            kk = kt_k_v(self._solve_T(v1))
            return self._solve_At(self._solve_Tt(kk) / n + lam * v1)

        return matvec
