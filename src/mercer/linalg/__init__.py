"""Everything that touches a large matrix: planning, blocked kernel products, factorisations."""

from ._blocking import BlockPlan, MemoryBudgetError, available_memory, default_memory_budget, format_bytes, plan_blocks
from ._cg import CGResult, conjugate_gradient
from ._eig import ConvergenceWarning, EigResult, top_eigenpairs
from ._factor import CholeskyFactor, NumericalWarning, jittered_cholesky
from ._operator import KernelOperator

__all__ = [
    "BlockPlan",
    "CGResult",
    "CholeskyFactor",
    "ConvergenceWarning",
    "EigResult",
    "KernelOperator",
    "MemoryBudgetError",
    "NumericalWarning",
    "available_memory",
    "conjugate_gradient",
    "default_memory_budget",
    "format_bytes",
    "jittered_cholesky",
    "plan_blocks",
    "top_eigenpairs",
]
