"""Ridge-type estimators: exact kernel ridge (and its classifier and tuned variant), Nyström with
the FALKON preconditioner, random-feature ridge and sketched ridge."""

from ._cv import KernelRidgeCV
from ._exact import KernelRidge, KernelRidgeClassifier
from ._nystroem import NystroemKernelRidge, NystroemKernelRidgeClassifier
from ._nystroem_cv import NystroemKernelRidgeClassifierCV, NystroemKernelRidgeCV
from ._random_features import RandomFeatureRidge
from ._sketched import SketchedKernelRidge

__all__ = ["KernelRidge", "KernelRidgeCV", "KernelRidgeClassifier", "NystroemKernelRidge",
           "NystroemKernelRidgeCV", "NystroemKernelRidgeClassifier",
           "NystroemKernelRidgeClassifierCV", "RandomFeatureRidge", "SketchedKernelRidge"]
