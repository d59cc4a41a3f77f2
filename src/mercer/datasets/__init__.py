"""Data: the seeds' synthetic examples and loaders for real data kept outside the package.

Nothing here downloads: loaders read files already on disk (``root=``) and say what they expected
when the files are missing.
"""

from ._idx import FASHION_MNIST_ROOT, load_fashion_mnist, read_idx
from ._synthetic import make_circle_separable, make_curve, make_ellipse
from ._uci import load_uci

__all__ = [
    "FASHION_MNIST_ROOT",
    "load_fashion_mnist",
    "load_uci",
    "make_circle_separable",
    "make_curve",
    "make_ellipse",
    "read_idx",
]
