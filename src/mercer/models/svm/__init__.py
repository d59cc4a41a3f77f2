"""Support vector machines: SMO-trained KernelSVC, reduced-set and budget SVMs."""

from ._budget import BudgetSVC
from ._reduced import ReducedSetSVC
from ._svc import KernelSVC

__all__ = ["BudgetSVC", "KernelSVC", "ReducedSetSVC"]
