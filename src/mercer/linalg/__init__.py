"""Everything that touches a large matrix: planning, blocked kernel products, factorisations."""

from ._blocking import BlockPlan, MemoryBudgetError, available_memory, default_memory_budget, plan_blocks
from ._factor import CholeskyFactor, NumericalWarning, jittered_cholesky
from ._operator import KernelOperator

__all__ = [
    "BlockPlan",
    "CholeskyFactor",
    "KernelOperator",
    "MemoryBudgetError",
    "NumericalWarning",
    "available_memory",
    "default_memory_budget",
    "jittered_cholesky",
    "plan_blocks",
]
