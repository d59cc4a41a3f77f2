"""The learnable hyperparameters of a kernel tree as one vector of logarithms.

Estimators that learn their kernel (the Gaussian processes, KernelRidgeCV) optimise a vector
``theta`` of log-hyperparameters. :class:`LearnableKernel` walks a kernel tree (composites, scales,
:class:`~mercer.kernels.Columns` and leaves), collects the positive hyperparameters that each kernel
class declares learnable (``Param(..., learn=unit)`` in its ``PARAMS``) and lays them out in ``theta``. It holds no formula:
:meth:`LearnableKernel.at` returns a kernel of the same classes whose hyperparameters are the
tensors ``exp(theta)``, evaluated by the kernels' ordinary code, so that autograd differentiates
the one formula every other estimator evaluates (and the inputs, for learnable inducing points).
:meth:`LearnableKernel.build` returns the same kernel with plain floats.

Which hyperparameters are learned: those declared with ``learn=`` (RBF and Laplacian ``gamma``,
Matern ``length_scale``, Polynomial ``gamma`` and ``coef0``, Constant ``value``, Scaled ``scale``,
RationalQuadratic ``length_scale`` and ``alpha``, ExpSineSquared ``length_scale`` and ``periodicity``,
White ``noise_level``, Chi2 ``gamma``) whose value is not 0 (a homogeneous polynomial stays
homogeneous) and not marked ``"fixed"``. A per-feature (ARD) scale contributes one entry per
feature. A value of ``None`` (``gamma=None``) starts from its resolved value ``1 / n_features``.

Bounds: a kernel converted from scikit-learn (:func:`mercer.kernels.from_sklearn`) carries its
own per-parameter bounds (or ``"fixed"``) in a ``bounds`` attribute, and they are used. Every other
hyperparameter gets a box derived from one pair ``(lo, hi)`` in length-scale units, as
scikit-learn's default ``(1e-5, 1e5)``: a length scale or a scale lies in ``[lo, hi]``, an RBF
``gamma = 1 / (2 l^2)`` in ``[1 / (2 hi^2), 1 / (2 lo^2)]``, a Laplacian ``gamma = 1 / l`` in
``[1 / hi, 1 / lo]`` (the unit each class declares, ``Param.learn``; see :func:`mercer.kernels._params.box`).

The learning loops evaluate the kernel at every step on the same inputs: they pass a
:class:`~mercer.kernels.DistanceCache` of those inputs to :meth:`LearnableKernel.gram` (or to the
kernel from :meth:`LearnableKernel.at`), so that the distances are computed once per fit.

Names are those of ``kernel.get_params(deep=True)`` (``"k1__scale"``, ``"k1__kernel__gamma"``);
the entries of a per-feature scale are ``"gamma[0]"``, ``"gamma[1]"``, ...
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ._base import Kernel
from ._distances import DistanceCache
from ._params import box

__all__ = ["Hyperparameter", "LearnableKernel"]


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
    """One learnable hyperparameter of a kernel tree.

    Attributes
    ----------
    name : str
        Its name in the root kernel's ``get_params(deep=True)`` (``"k1__kernel__gamma"``).
    value : ndarray of shape (n_elements,)
        Initial value(s), before clipping into the bounds.
    bounds : ndarray of shape (n_elements, 2)
        Lower and upper bound of each element (positive; the upper may be inf).
    vector : bool
        True for a per-feature (ARD) scale, whose elements are learned separately.
    """

    name: str
    value: np.ndarray
    bounds: np.ndarray
    vector: bool = False

    @property
    def n_elements(self) -> int:
        return int(self.value.size)

    @property
    def names(self) -> list[str]:
        """One name per element: ``name``, or ``name[i]`` for a per-feature scale."""
        return [f"{self.name}[{i}]" for i in range(self.n_elements)] if self.vector else [self.name]


def _own_bounds(kernel: Kernel) -> dict:
    bounds = getattr(kernel, "bounds", None)  # set by from_sklearn: name -> (low, high) or "fixed"
    return bounds if isinstance(bounds, dict) else {}


def _as_values(value) -> tuple[np.ndarray, bool]:
    """A hyperparameter's value as a float64 vector, and whether it is given per feature."""
    if isinstance(value, torch.Tensor):
        arr = value.detach().cpu().numpy().astype(np.float64)
        return arr.reshape(-1), arr.ndim >= 1 and arr.size != 1
    if isinstance(value, (tuple, list)):
        return np.asarray(value, dtype=np.float64).reshape(-1), True
    return np.array([float(value)]), False


def _element_bounds(given, unit: str, default: tuple, n: int) -> np.ndarray:
    """``(n, 2)`` bounds: the kernel's own (scalars or per-element tuples) or the default box."""
    lo, hi = given if given is not None else box(unit, *default)
    out = np.empty((n, 2), dtype=np.float64)
    out[:, 0] = np.broadcast_to(np.asarray(lo, dtype=np.float64), (n,))
    out[:, 1] = np.broadcast_to(np.asarray(hi, dtype=np.float64), (n,))
    return out


class LearnableKernel:
    """A kernel with its learnable hyperparameters exposed as one log-vector ``theta``.

    Parameters
    ----------
    kernel : Kernel
    n_features : int
        Number of input columns (resolves ``gamma=None`` to ``1 / n_features``).
    bounds : (float, float), default=(1e-5, 1e5)
        Default box in length-scale units (see the module docstring); a kernel's own bounds
        (from scikit-learn) take precedence.

    Attributes
    ----------
    hyperparameters : list of Hyperparameter
        In ``theta``'s order: a kernel's own hyperparameters, then those of its parts.
    differentiable_inputs : bool
        True when the kernel matrix is differentiable in its inputs by autograd (learnable
        inducing points).

    Examples
    --------
    >>> from mercer.kernels import RBF, Matern
    >>> lk = LearnableKernel(2.0 * RBF(gamma=[0.5, 1.0]) + Matern(length_scale=3.0), n_features=2)
    >>> lk.names
    ['k1__scale', 'k1__kernel__gamma[0]', 'k1__kernel__gamma[1]', 'k2__length_scale']
    >>> lk.build(lk.theta0)
    (2 * RBF(gamma=[0.5, 1]) + Matern(nu=1.5, length_scale=3))
    """

    def __init__(self, kernel: Kernel, n_features: int, bounds=(1e-5, 1e5)):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"LearnableKernel expects a mercer kernel; got {kernel!r}.")
        if kernel.is_precomputed:
            raise ValueError("a Precomputed kernel has no hyperparameters to learn; pass a kernel on features.")
        self.kernel = kernel
        self.hyperparameters: list[Hyperparameter] = []
        self._collect(kernel, "", int(n_features), (float(bounds[0]), float(bounds[1])))
        self._learned_names = {h.name for h in self.hyperparameters}
        self.differentiable_inputs = bool(kernel.differentiable_inputs)

    def _collect(self, kernel: Kernel, prefix: str, d: int, default: tuple) -> None:
        params = kernel._shallow_params()
        own = _own_bounds(kernel)
        for p in type(kernel).PARAMS:
            if p.learn is None or own.get(p.name) == "fixed":
                continue
            value = params[p.name]
            # None means 1 / n_features (scikit-learn's gamma=None)
            values, vector = _as_values(1.0 / d if value is None else value)
            if np.all(values == 0):  # 0 stays 0 (a homogeneous polynomial, a zero constant)
                continue
            self.hyperparameters.append(Hyperparameter(
                prefix + p.name, values, _element_bounds(own.get(p.name), p.learn, default, values.size), vector))
        for name, part in params.items():
            if isinstance(part, Kernel):
                self._collect(part, f"{prefix}{name}__", kernel._part_features(d), default)

    # -- vector views ---------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """One name per entry of ``theta``."""
        return [n for h in self.hyperparameters for n in h.names]

    @property
    def log_bounds(self) -> np.ndarray:
        """``(len(theta), 2)`` array of log-space bounds."""
        b = [h.bounds for h in self.hyperparameters]
        with np.errstate(divide="ignore"):
            return np.log(np.vstack(b)) if b else np.zeros((0, 2))

    @property
    def theta0(self) -> np.ndarray:
        """Log of the initial values, clipped into the bounds."""
        if not self.hyperparameters:
            return np.zeros(0)
        t = np.log(np.concatenate([h.value for h in self.hyperparameters]))
        return np.clip(t, *self.log_bounds.T)

    # -- kernels at theta -----------------------------------------------------------------------
    def at(self, theta: torch.Tensor) -> Kernel:
        """The kernel with hyperparameters ``exp(theta)`` as tensors (autograd records through
        its evaluation when ``theta`` requires grad)."""
        return self._substitute(self.kernel, "", self._values(torch.exp(theta)))

    def build(self, theta) -> Kernel:
        """A plain kernel (float hyperparameters, tuples for per-feature scales) at ``exp(theta)``."""
        t = theta.detach().cpu().numpy() if isinstance(theta, torch.Tensor) else np.asarray(theta)
        values = self._values(np.exp(np.asarray(t, dtype=np.float64)))
        plain = {k: (tuple(map(float, v)) if isinstance(v, np.ndarray) else float(v)) for k, v in values.items()}
        return self._substitute(self.kernel, "", plain)

    def gram(self, theta: torch.Tensor, X1: torch.Tensor, X2: torch.Tensor | None = None, *,
             cache: DistanceCache | None = None) -> torch.Tensor:
        """``K(X1, X2)`` at ``exp(theta)``, differentiable in ``theta`` (and in the inputs when
        :attr:`differentiable_inputs`); ``cache``: the :class:`DistanceCache` of ``X1, X2``, made
        once by the learning loop (see :meth:`Kernel.__call__ <mercer.kernels.Kernel.__call__>`)."""
        return self.at(theta)(X1, X2, cache=cache)

    def diag(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        return self.at(theta).diag(X)

    def _values(self, v) -> dict:
        """Name -> value (a scalar, or a slice for a per-feature scale) of ``v = exp(theta)``."""
        out, i = {}, 0
        for h in self.hyperparameters:
            out[h.name] = v[i:i + h.n_elements] if h.vector else v[i]
            i += h.n_elements
        if i != len(v):
            raise ValueError(f"theta must have {i} entries ({self.names}); got {len(v)}.")
        return out

    def _substitute(self, kernel: Kernel, prefix: str, values: dict) -> Kernel:
        """``kernel`` with the values of ``values`` (by full name) in place of its own; the same
        object when nothing under it is learned."""
        params = kernel._shallow_params()
        new, changed = dict(params), False
        for name, value in params.items():
            full = prefix + name
            if isinstance(value, Kernel):
                if any(n.startswith(full + "__") for n in self._learned_names):
                    new[name], changed = self._substitute(value, full + "__", values), True
            elif full in values:
                new[name], changed = values[full], True
        return type(kernel)._from_params(new) if changed else kernel

