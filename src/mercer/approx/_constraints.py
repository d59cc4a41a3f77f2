"""Allowed values of the parameters the feature maps share, merged into each transformer's
``_parameter_constraints`` table (checked by :func:`mercer._validation.check_params` in ``fit``).

The compute and kernel-keyword tables are the ones every estimator uses
(:data:`mercer._validation.COMPUTE_CONSTRAINTS`, :data:`mercer.kernels.KERNEL_CONSTRAINTS`); the
output dimension and the polynomial sketches' own parameters are declared here.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from .._validation import COMPUTE_CONSTRAINTS, Interval
from ..kernels import KERNEL_CONSTRAINTS

__all__ = ["COMPUTE_CONSTRAINTS", "KERNEL_CONSTRAINTS", "N_COMPONENTS", "POLYNOMIAL_CONSTRAINTS"]

#: The output dimension (landmarks, frequencies, sketch size, rank).
N_COMPONENTS = [Interval(Integral, 1, None, closed="left")]

#: The polynomial kernel's own parameters, as :class:`mercer.kernels.Polynomial` checks them.
POLYNOMIAL_CONSTRAINTS: dict = {
    "degree": [Interval(Integral, 1, None, closed="left")],
    "gamma": [Interval(Real, 0, math.inf, closed="neither")],
    "coef0": [Interval(Real, 0, math.inf, closed="left")],
}
