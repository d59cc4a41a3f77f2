"""Support vector machines: SMO-trained KernelSVC, reduced-set and budget SVMs."""

from ._svc import BudgetSVC, KernelSVC, ReducedSetSVC

__all__ = ["BudgetSVC", "KernelSVC", "ReducedSetSVC"]
