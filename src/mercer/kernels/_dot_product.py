"""Kernels of the inner product: Linear, Polynomial, Quadratic, Sigmoid."""

from __future__ import annotations

import dataclasses
import numbers

import torch

from .._validation import Interval, check_param
from ._base import Kernel, inner_products, paired_inner
from ._params import Param, non_negative, optional_positive, real, resolved_gamma

__all__ = ["Linear", "Polynomial", "Quadratic", "Sigmoid"]


class Linear(Kernel):
    r"""Linear kernel :math:`k(x, y) = \langle x, y \rangle`.

    Its explicit feature map is the identity (dimension ``d``).
    """

    differentiable_inputs = True
    sparse_rows = True
    SHORTHANDS = ("linear",)

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _pairwise(self, X1, X2):
        return inner_products(X1, X2)

    def _paired(self, X1, X2):
        return paired_inner(X1, X2)


def _degree(owner: str, name: str, value):
    """An int >= 1, or a float > 0 (an integral float stored as an int)."""
    check_param(owner, name, value, [Interval(numbers.Integral, 1, None, closed="left"),
                                     Interval(numbers.Real, 0, None, closed="neither")])
    return int(value) if float(value).is_integer() else float(value)


class Polynomial(Kernel):
    r"""Polynomial kernel :math:`k(x, y) = (\gamma \langle x, y \rangle + c)^p`.

    Parameters
    ----------
    degree : int >= 1, or float > 0
        The power ``p``. A non-integer ``p`` is accepted as scikit-learn's ``polynomial_kernel``
        accepts it (an integral float is stored as an int); it has no finite explicit feature map,
        and ``gamma <x, y> + c`` must then be >= 0 on every pair (a negative number has no real
        non-integer power: an error, not NaN).
    gamma : float > 0 or None
        Scale of the inner product; ``None`` means ``1 / n_features`` (scikit-learn's default).
    coef0 : float >= 0
        The offset ``c``. ``c > 0`` keeps the lower-order monomials; ``c = 0`` gives the
        homogeneous kernel. Its explicit feature map has ``C(d + p, p)`` coordinates
        (see :class:`mercer.approx.PolynomialFeatureMap`).
    """

    differentiable_inputs = True
    sparse_rows = True
    SHORTHANDS = ("poly", "polynomial")
    PARAMS = (Param("degree", 3, _degree),
              Param("gamma", None, optional_positive, learn="length"),
              Param("coef0", 1.0, non_negative, learn="length"))

    def _pairwise(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return self._power(inner_products(X1, X2).mul_(g).add_(self.coef0))

    def _paired(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return self._power(paired_inner(X1, X2) * g + self.coef0)

    def _power(self, base: torch.Tensor) -> torch.Tensor:
        """``base ** degree`` in place; a non-integer degree of a negative base is an error (not NaN)."""
        if isinstance(self.degree, float) and base.numel() and bool((base < 0).any()):
            raise ValueError(f"{self!r}: gamma <x, y> + coef0 is negative for some pairs (down to "
                             f"{float(base.min()):.3g}), and a negative number has no real power {self.degree}; "
                             "use an integer degree, or a coef0 that keeps gamma <x, y> + coef0 >= 0.")
        return base.pow_(self.degree)


class Quadratic(Polynomial):
    r"""Quadratic kernel :math:`k(x, y) = (\gamma \langle x, y \rangle + c)^2`.

    Defaults to the seeds' :math:`K_{quad}(x, y) = \langle x, y \rangle^2` (``gamma=1, coef0=0``),
    whose feature map in 2-D is :math:`[x_1^2, \sqrt{2} x_1 x_2, x_2^2]`.
    """

    SHORTHANDS = ("quadratic",)
    PARAMS = (dataclasses.replace(Polynomial.PARAMS[1], default=1.0),
              dataclasses.replace(Polynomial.PARAMS[2], default=0.0))
    degree = 2  # not a parameter


class Sigmoid(Kernel):
    r"""Sigmoid ("neural") kernel :math:`k(x, y) = \tanh(\gamma \langle x, y \rangle + c)`.

    Not positive semi-definite in general: :func:`mercer.kernels.check_mercer` flags it (so
    its hyperparameters are not learned).
    """

    differentiable_inputs = True
    sparse_rows = True
    SHORTHANDS = ("sigmoid",)
    PARAMS = (Param("gamma", None, optional_positive), Param("coef0", 1.0, real))

    def _pairwise(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return inner_products(X1, X2).mul_(g).add_(self.coef0).tanh_()

    def _paired(self, X1, X2):
        g = resolved_gamma(self.gamma, X1.shape[1])
        return torch.tanh(paired_inner(X1, X2) * g + self.coef0)
