"""Support vector machines: SMO-trained KernelSVC, NuSVC, KernelSVR, NuSVR and OneClassSVM; reduced-set and
budget SVMs."""

from ._budget import BudgetSVC
from ._family import KernelSVR, NuSVC, NuSVR, OneClassSVM
from ._reduced import ReducedSetSVC
from ._svc import KernelSVC

__all__ = ["BudgetSVC", "KernelSVC", "KernelSVR", "NuSVC", "NuSVR", "OneClassSVM", "ReducedSetSVC"]
