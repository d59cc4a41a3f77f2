"""Differentiable parametrisation of mercer kernels, for hyperparameter learning with autograd.

A mercer kernel is an immutable object with float hyperparameters. :class:`LearnableKernel`
walks a kernel tree (``Sum``, ``Product``, ``Scaled``, ``Columns`` and the leaves), collects its
positive hyperparameters as one vector ``theta`` of logarithms, and evaluates the kernel matrix
from a ``theta`` tensor with ordinary (not in-place) torch operations, so that autograd gives
d K / d theta -- and d K / d X2 for learnable inducing points. :meth:`LearnableKernel.build`
turns a ``theta`` back into a plain mercer kernel.

Learnable hyperparameters (each positive, learned as its logarithm):

* ``RBF.gamma`` and ``Laplacian.gamma``, ``Matern.length_scale``,
* ``Polynomial.gamma`` and ``Polynomial.coef0`` (when > 0), ``Constant.value`` (when > 0),
* ``Scaled.scale`` (the output scale of the kernel under it).

Other kernels (``Linear``, ``Sigmoid``, ``Intersection``, ``HistogramIntersection``, user
kernels...) have no learnable hyperparameters here and are evaluated as they are.

Bounds: every hyperparameter gets a box in log space derived from one pair ``(lo, hi)`` in
length-scale units, as in scikit-learn's default ``(1e-5, 1e5)``: a length scale or a scale
lies in ``[lo, hi]``, an RBF ``gamma = 1 / (2 l^2)`` in ``[1 / (2 hi^2), 1 / (2 lo^2)]``, a
Laplacian ``gamma = 1 / l`` in ``[1 / hi, 1 / lo]``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ._base import Constant, Kernel, Product, Scaled, Sum
from ._columns import Columns
from ._dot_product import Linear, Polynomial
from ._params import resolved_gamma
from ._stationary import RBF, Laplacian, Matern

__all__ = ["LearnableKernel", "HyperParameter"]


@dataclasses.dataclass(frozen=True)
class HyperParameter:
    """One learnable hyperparameter: its name (path in the kernel tree), initial value and bounds."""

    name: str
    value: float
    lower: float
    upper: float

    @property
    def log_bounds(self) -> tuple[float, float]:
        return math.log(self.lower), math.log(self.upper)


def _sq_dist(X1, X2, exact: bool):
    if exact:
        return torch.cdist(X1, X2, p=2.0, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    n1 = (X1 * X1).sum(1)
    n2 = (X2 * X2).sum(1)
    return (n1[:, None] + n2[None, :] - 2.0 * (X1 @ X2.T)).clamp_min(0.0)


class _Node:
    """One node of the compiled tree; ``index`` are positions in ``theta``."""

    differentiable_inputs = True

    def __init__(self, kernel: Kernel):
        self.kernel = kernel

    def params(self, prefix: str, d: int, bounds) -> list[HyperParameter]:
        return []

    def gram(self, v, X1, X2, cache):  # pragma: no cover - overridden
        raise NotImplementedError

    def diag(self, v, X):
        return self._diag(v, X)

    def _diag(self, v, X):
        return self.kernel._paired(X, X)

    def build(self, values) -> Kernel:
        return self.kernel


class _Fixed(_Node):
    """A kernel without learnable hyperparameters, evaluated as it is."""

    def __init__(self, kernel):
        super().__init__(kernel)
        self.differentiable_inputs = isinstance(kernel, Linear)

    def gram(self, v, X1, X2, cache):
        if isinstance(self.kernel, Linear):
            return X1 @ X2.T
        key = (id(self), "fixed")
        if cache is not None and key in cache:
            return cache[key]
        with torch.no_grad():
            K = self.kernel(X1.detach(), X2.detach())
        if cache is not None:
            cache[key] = K
        return K


class _Param(_Node):
    """Base of the leaves with one or two positive hyperparameters."""

    def __init__(self, kernel):
        super().__init__(kernel)
        self.index: list[int] = []


class _RBF(_Param):
    def params(self, prefix, d, bounds):
        lo, hi = bounds
        g = float(resolved_gamma(self.kernel.gamma, d))
        return [HyperParameter(prefix + "gamma", g, 1.0 / (2 * hi * hi), 1.0 / (2 * lo * lo))]

    def gram(self, v, X1, X2, cache):
        key = (id(self), "sqdist")
        if cache is not None and key in cache:
            D = cache[key]
        else:
            D = _sq_dist(X1, X2, exact=cache is not None)
            if cache is not None:
                cache[key] = D
        return torch.exp(-v[self.index[0]] * D)

    def _diag(self, v, X):
        return torch.ones(X.shape[0], dtype=X.dtype, device=X.device)

    def build(self, values):
        return RBF(gamma=float(values[self.index[0]]))


class _Laplacian(_Param):
    def params(self, prefix, d, bounds):
        lo, hi = bounds
        return [HyperParameter(prefix + "gamma", float(resolved_gamma(self.kernel.gamma, d)), 1.0 / hi, 1.0 / lo)]

    def gram(self, v, X1, X2, cache):
        key = (id(self), "l1")
        if cache is not None and key in cache:
            D = cache[key]
        else:
            D = torch.cdist(X1, X2, p=1.0)
            if cache is not None:
                cache[key] = D
        return torch.exp(-v[self.index[0]] * D)

    def _diag(self, v, X):
        return torch.ones(X.shape[0], dtype=X.dtype, device=X.device)

    def build(self, values):
        return Laplacian(gamma=float(values[self.index[0]]))


class _Matern(_Param):
    def params(self, prefix, d, bounds):
        return [HyperParameter(prefix + "length_scale", float(self.kernel.length_scale), *bounds)]

    def gram(self, v, X1, X2, cache):
        key = (id(self), "l2")
        if cache is not None and key in cache:
            D = cache[key]
        else:
            D = torch.cdist(X1, X2, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")
            if cache is not None:
                cache[key] = D
        r = D / v[self.index[0]]
        nu = self.kernel.nu
        if nu == 0.5:
            return torch.exp(-r)
        if nu == 1.5:
            r = r * math.sqrt(3.0)
            return (1.0 + r) * torch.exp(-r)
        r = r * math.sqrt(5.0)
        return (1.0 + r + r * r / 3.0) * torch.exp(-r)

    def _diag(self, v, X):
        return torch.ones(X.shape[0], dtype=X.dtype, device=X.device)

    def build(self, values):
        return Matern(nu=self.kernel.nu, length_scale=float(values[self.index[0]]))


class _Polynomial(_Param):
    def params(self, prefix, d, bounds):
        k = self.kernel
        out = [HyperParameter(prefix + "gamma", float(resolved_gamma(k.gamma, d)), *bounds)]
        self.learn_coef0 = float(k.coef0) > 0
        if self.learn_coef0:
            out.append(HyperParameter(prefix + "coef0", float(k.coef0), *bounds))
        return out

    def _coef0(self, v):
        return v[self.index[1]] if self.learn_coef0 else float(self.kernel.coef0)

    def gram(self, v, X1, X2, cache):
        key = (id(self), "dot")
        if cache is not None and key in cache:
            G = cache[key]
        else:
            G = X1 @ X2.T
            if cache is not None:
                cache[key] = G
        return (v[self.index[0]] * G + self._coef0(v)) ** self.kernel.degree

    def _diag(self, v, X):
        return (v[self.index[0]] * (X * X).sum(1) + self._coef0(v)) ** self.kernel.degree

    def build(self, values):
        k = self.kernel
        coef0 = float(values[self.index[1]]) if self.learn_coef0 else float(k.coef0)
        return Polynomial(degree=k.degree, gamma=float(values[self.index[0]]), coef0=coef0)


class _Constant(_Param):
    def params(self, prefix, d, bounds):
        self.learn = self.kernel.value > 0
        return [HyperParameter(prefix + "value", self.kernel.value, *bounds)] if self.learn else []

    def _c(self, v):
        return v[self.index[0]] if self.learn else self.kernel.value

    def gram(self, v, X1, X2, cache):
        return self._c(v) * torch.ones(X1.shape[0], X2.shape[0], dtype=X1.dtype, device=X1.device)

    def _diag(self, v, X):
        return self._c(v) * torch.ones(X.shape[0], dtype=X.dtype, device=X.device)

    def build(self, values):
        return Constant(float(values[self.index[0]])) if self.learn else self.kernel


class _Scaled(_Param):
    def __init__(self, kernel, child):
        super().__init__(kernel)
        self.child = child
        self.differentiable_inputs = child.differentiable_inputs

    def params(self, prefix, d, bounds):
        return [HyperParameter(prefix + "scale", float(self.kernel.scale), *bounds)]

    def gram(self, v, X1, X2, cache):
        return v[self.index[0]] * self.child.gram(v, X1, X2, cache)

    def _diag(self, v, X):
        return v[self.index[0]] * self.child.diag(v, X)

    def build(self, values):
        return Scaled(float(values[self.index[0]]), self.child.build(values))


class _Composite(_Node):
    def __init__(self, kernel, children):
        super().__init__(kernel)
        self.children = children
        self.differentiable_inputs = all(c.differentiable_inputs for c in children)

    def gram(self, v, X1, X2, cache):
        out = self.children[0].gram(v, X1, X2, cache)
        for c in self.children[1:]:
            out = out + c.gram(v, X1, X2, cache) if isinstance(self.kernel, Sum) else out * c.gram(v, X1, X2, cache)
        return out

    def _diag(self, v, X):
        out = self.children[0].diag(v, X)
        for c in self.children[1:]:
            out = out + c.diag(v, X) if isinstance(self.kernel, Sum) else out * c.diag(v, X)
        return out

    def build(self, values):
        kids = [c.build(values) for c in self.children]
        return Sum(kids) if isinstance(self.kernel, Sum) else Product(kids)


class _Columns(_Node):
    def __init__(self, kernel, child):
        super().__init__(kernel)
        self.child = child
        self.differentiable_inputs = child.differentiable_inputs

    def gram(self, v, X1, X2, cache):
        sub = None if cache is None else cache.setdefault((id(self), "sub"), {})
        return self.child.gram(v, self.kernel.select(X1), self.kernel.select(X2), sub)

    def _diag(self, v, X):
        return self.child.diag(v, self.kernel.select(X))

    def build(self, values):
        return Columns(self.child.build(values), self.kernel.columns)


_LEAVES = {RBF: _RBF, Laplacian: _Laplacian, Matern: _Matern, Polynomial: _Polynomial, Constant: _Constant}


def _compile(kernel: Kernel) -> _Node:
    if isinstance(kernel, (Sum, Product)):
        return _Composite(kernel, [_compile(k) for k in kernel.kernels])
    if isinstance(kernel, Scaled):
        return _Scaled(kernel, _compile(kernel.kernel))
    if isinstance(kernel, Columns):
        return _Columns(kernel, _compile(kernel.kernel))
    for cls in type(kernel).__mro__:
        if cls in _LEAVES:
            return _LEAVES[cls](kernel)
    return _Fixed(kernel)


class LearnableKernel:
    """A mercer kernel with its positive hyperparameters exposed as one log-vector ``theta``.

    Parameters
    ----------
    kernel : Kernel
    n_features : int
        Number of input columns (resolves ``gamma=None`` to ``1 / n_features``).
    bounds : (float, float), default=(1e-5, 1e5)
        Range in length-scale units for every hyperparameter (see the module docstring).

    Attributes
    ----------
    hyperparameters : list of HyperParameter
    differentiable_inputs : bool
        True when the kernel matrix is differentiable in its inputs (learnable inducing points).
    """

    def __init__(self, kernel: Kernel, n_features: int, bounds=(1e-5, 1e5)):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"LearnableKernel expects a mercer kernel; got {kernel!r}.")
        if kernel.is_precomputed:
            raise ValueError("a Precomputed kernel has no hyperparameters to learn; pass a kernel on features.")
        self.kernel = kernel
        self.root = _compile(kernel)
        self.hyperparameters: list[HyperParameter] = []
        self._collect(self.root, "", n_features, bounds)
        self.differentiable_inputs = self.root.differentiable_inputs

    def _collect(self, node, prefix, d, bounds):
        if isinstance(node, _Param):
            ps = node.params(prefix, d, bounds)
            node.index = list(range(len(self.hyperparameters), len(self.hyperparameters) + len(ps)))
            self.hyperparameters.extend(ps)
        if isinstance(node, _Composite):
            for i, c in enumerate(node.children):
                self._collect(c, f"{prefix}k{i + 1}.", d, bounds)
        elif isinstance(node, _Scaled):
            self._collect(node.child, prefix + "kernel.", d, bounds)
        elif isinstance(node, _Columns):
            self._collect(node.child, prefix, len(node.kernel.columns), bounds)

    # -- vector views ---------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [p.name for p in self.hyperparameters]

    @property
    def theta0(self) -> np.ndarray:
        """Log of the initial values, clipped into the bounds."""
        t = np.array([math.log(p.value) for p in self.hyperparameters], dtype=np.float64)
        return np.clip(t, *self.log_bounds.T) if t.size else t

    @property
    def log_bounds(self) -> np.ndarray:
        """``(n_params, 2)`` array of log-space bounds."""
        return np.array([p.log_bounds for p in self.hyperparameters], dtype=np.float64).reshape(-1, 2)

    # -- evaluation -----------------------------------------------------------------------------
    def gram(self, theta: torch.Tensor, X1: torch.Tensor, X2: torch.Tensor | None = None, cache: dict | None = None):
        """``K(X1, X2)`` at ``exp(theta)``, differentiable in ``theta`` (and in the inputs when
        :attr:`differentiable_inputs`). ``cache`` (a dict, reused across calls with the same
        constant inputs) keeps the distance matrices, which do not depend on ``theta``."""
        v = torch.exp(theta) if theta.numel() else theta
        return self.root.gram(v, X1, X1 if X2 is None else X2, cache)

    def diag(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        v = torch.exp(theta) if theta.numel() else theta
        return self.root.diag(v, X)

    def build(self, theta) -> Kernel:
        """A plain mercer kernel with hyperparameters ``exp(theta)``."""
        values = np.exp(np.asarray(theta.detach().cpu() if isinstance(theta, torch.Tensor) else theta, dtype=np.float64))
        return self.root.build(values)
