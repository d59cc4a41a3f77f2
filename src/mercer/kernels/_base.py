"""Kernel base class and the operator algebra (``+``, ``*``, scalar ``*``).

A kernel is an immutable object that fills one block ``K(X1, X2)`` of shape ``(n1, n2)`` from two
2-D tensors on the same device; it never decides how a large matrix is tiled (that is
:mod:`mercer.linalg`'s job). Subclasses implement two small methods:

* ``_pairwise(X1, X2)`` -> ``(n1, n2)`` block,
* ``_paired(X1, X2)``   -> ``(n,)`` values ``k(X1[i], X2[i])`` (used for the diagonal),

and may declare ``scratch(d)``: extra working memory, in multiples of the output block, that
``_pairwise`` needs, so that the planner can size blocks for it. ``__init__`` validates its
arguments and stores each under its own name (that is what ``get_params`` reads).

Parameters follow scikit-learn's convention: :meth:`Kernel.get_params` returns the ``__init__``
arguments (read from the attributes of the same name; ``deep=True`` adds ``part__param`` entries
of nested kernels) and :meth:`Kernel.set_params` changes them, so ``sklearn.base.clone`` copies a
kernel and ``GridSearchCV`` can search ``kernel__gamma`` or ``kernel__k1__gamma``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import numbers
from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp
import torch

from ._params import positive

__all__ = ["Kernel", "Sum", "Product", "Scaled", "Constant"]


def _as_tensor(X, like: torch.Tensor | None = None) -> torch.Tensor:
    """Tensors pass through; anything else is copied (float32 stays float32, the rest float64)."""
    if not isinstance(X, torch.Tensor):
        if sp.issparse(X):
            X = X.toarray()
        arr = np.asarray(X)
        dtype = np.float32 if arr.dtype == np.float32 else np.float64
        try:
            X = torch.tensor(np.ascontiguousarray(arr, dtype=dtype))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"kernel inputs must be real-valued arrays; got dtype {arr.dtype}.") from exc
        if like is not None:
            X = X.to(device=like.device, dtype=like.dtype)
    if X.ndim != 2:
        raise ValueError(f"kernel inputs must be 2-D (n_samples, n_features); got ndim = {X.ndim}.")
    return X


def _take(X: torch.Tensor, s: slice) -> torch.Tensor:
    """``X[s]``, or ``X`` itself when the slice covers it (keeps the tensor's identity, which the
    RBF kernel's cache of augmented rows is keyed on)."""
    if s.step in (None, 1) and (s.start or 0) == 0 and (s.stop is None or s.stop >= X.shape[0]):
        return X
    return X[s]


def _fmt(value) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return f"{value:g}" if isinstance(value, float) else repr(value)


class Kernel:
    """Base class of every mercer kernel. See the module docstring for the subclass contract."""

    #: True when k(x, y) depends on x - y only (random Fourier features apply).
    is_stationary: bool = False
    #: True for kernels whose "inputs" are rows of a precomputed Gram matrix.
    is_precomputed: bool = False
    #: True when autograd differentiates a block in its inputs (learnable inducing points, the
    #: reduced-set and budget SVMs); False where the value is not a smooth function of them.
    differentiable_inputs: bool = False
    #: Positive hyperparameters learned by the estimators that learn their kernel (the GPs,
    #: KernelRidgeCV), as their logarithm: name -> unit of its default bounds, given in
    #: length-scale units ("length": as given, "inverse": 1 / l, "inverse_square": 1 / (2 l^2)).
    #: See :class:`mercer.kernels.LearnableKernel`. Each must accept a tensor value (0-d, or 1-d
    #: for a per-feature scale) and be differentiable in it.
    _learned: dict = {}

    # -- public API -------------------------------------------------------------------------
    def __call__(self, X1, X2=None) -> torch.Tensor:
        """Kernel matrix ``K[i, j] = k(X1[i], X2[j])``; ``X2=None`` means ``X2 = X1``. An array
        given with a tensor follows the tensor's device and dtype (either argument)."""
        if X2 is X1:  # one input given twice: the same tensor on both sides (White's noise, symmetric fast paths)
            X2 = None
        if X2 is not None and isinstance(X2, torch.Tensor) and not isinstance(X1, torch.Tensor):
            X2 = _as_tensor(X2)
            X1 = _as_tensor(X1, like=X2)
        else:
            X1 = _as_tensor(X1)
            X2 = X1 if X2 is None else _as_tensor(X2, like=X1)
        self._check_pair(X1, X2)
        return self._pairwise(X1, X2)

    def diag(self, X) -> torch.Tensor:
        """Diagonal ``k(X[i], X[i])`` of ``K(X, X)`` without forming the matrix, shape ``(n,)``."""
        X = _as_tensor(X)
        self._check_pair(X, X)
        return self._paired(X, X)

    def block(self, X: torch.Tensor, Z: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
        """One tile ``K(X[rows], Z[cols])`` of a larger kernel matrix (used by the block engine)."""
        return self._pairwise(_take(X, rows), _take(Z, cols))

    def scratch(self, n_features: int) -> float:
        """Extra working memory of ``_pairwise``, in multiples of the output block."""
        return 1.0

    def _part_features(self, n_features: int) -> int:
        """Number of input columns the kernel's parts see (all of them, unless it selects some)."""
        return n_features

    @property
    def hyperparameters(self) -> dict:
        """Named hyperparameters (floats or tensors; tensors may require grad)."""
        return {}

    # -- parameters (scikit-learn's get_params / set_params / clone protocol) ----------------
    def get_params(self, deep: bool = True) -> dict:
        """Parameters of the kernel: its ``__init__`` arguments, as scikit-learn's ``get_params``.

        Parameters
        ----------
        deep : bool, default True
            Also return the parameters of nested kernels as ``part__param`` (e.g. ``k1__gamma``
            for the first part of a sum, ``kernel__gamma`` for the kernel inside ``Scaled``).

        Returns
        -------
        params : dict
            Parameter names mapped to their values; ``Kernel(**params)`` (with ``deep=False``)
            is an equal kernel.
        """
        out = {}
        for name, value in self._shallow_params().items():
            out[name] = value
            if deep and isinstance(value, Kernel):
                out.update((f"{name}__{k}", v) for k, v in value.get_params(deep=True).items())
        return out

    def set_params(self, **params) -> Kernel:
        """Set parameters (names as in :meth:`get_params`, nested ones as ``part__param``).

        Values are validated as by ``__init__`` (same messages) and any cache the kernel keeps is
        reset. Kernels are otherwise immutable: this exists for scikit-learn's searches, which
        call it on a clone (``GridSearchCV(..., {"kernel__gamma": [...]})``). A direct value
        (``k1=RBF()``) is applied before the nested ones (``k1__gamma=0.1``), as in scikit-learn.

        Returns
        -------
        self : Kernel
        """
        if not params:
            return self
        current = self._shallow_params()
        direct, nested = {}, {}
        for key, value in params.items():
            name, delim, sub = key.partition("__")
            if name not in current:
                raise ValueError(f"Invalid parameter {name!r} for kernel {self!r}. "
                                 f"Valid parameters are: {sorted(current)!r}.")
            if delim:
                nested.setdefault(name, {})[sub] = value
            else:
                direct[name] = value
        if direct:
            self._replace_with(self._from_params(self._merged_params(current, direct)))
        if nested:
            for name, sub in nested.items():
                part = self._shallow_params()[name]
                if not isinstance(part, Kernel):
                    raise ValueError(f"Invalid parameter {name}__{next(iter(sub))} for kernel {self!r}: "
                                     f"{name!r} is not a kernel.")
                part.set_params(**sub)
            # re-validate the whole (a part may now be one this kernel refuses)
            self._replace_with(self._from_params(self._shallow_params()))
        return self

    def __sklearn_clone__(self) -> Kernel:
        """An equal, independent kernel (what ``sklearn.base.clone`` returns): nested kernels are
        cloned, other values deep-copied."""
        return self._from_params({k: _clone_value(v) for k, v in self._shallow_params().items()})

    def _shallow_params(self) -> dict:
        """``get_params(deep=False)``: the ``__init__`` arguments read from attributes."""
        return {name: getattr(self, name) for name in _init_arg_names(type(self))}

    @classmethod
    def _from_params(cls, params: dict) -> Kernel:
        """A new kernel from :meth:`get_params` (``deep=False``) output."""
        return cls(**params)

    def _merged_params(self, current: dict, changed: dict) -> dict:
        """The ``__init__`` arguments after ``set_params(**changed)`` (hook for aliases)."""
        return {**current, **changed}

    def _replace_with(self, other: Kernel) -> None:
        """Take ``other``'s state (validated by its ``__init__``; caches start empty)."""
        self.__dict__.clear()
        self.__dict__.update(other.__dict__)

    # -- subclass hooks ---------------------------------------------------------------------
    def _pairwise(self, X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _paired(self, X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _check_pair(self, X1: torch.Tensor, X2: torch.Tensor) -> None:
        if X1.shape[1] != X2.shape[1]:
            raise ValueError(
                f"{self!r}: X1 has {X1.shape[1]} features but X2 has {X2.shape[1]}; they must match."
            )
        if X1.device != X2.device:
            raise ValueError(f"{self!r}: inputs on different devices ({X1.device} and {X2.device}).")
        if X1.dtype != X2.dtype:
            raise ValueError(f"{self!r}: inputs of different dtypes ({X1.dtype} and {X2.dtype}); convert one.")

    # -- algebra ----------------------------------------------------------------------------
    def __add__(self, other):
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return self if other == 0 else Sum([self, Constant(float(other))])
        if isinstance(other, Kernel):
            return Sum([self, other])
        return NotImplemented

    def __radd__(self, other):
        return self.__add__(other)

    def __mul__(self, other):
        if isinstance(other, (numbers.Real, torch.Tensor)) and not isinstance(other, bool):
            return Scaled(other, self)
        if isinstance(other, Kernel):
            return Product([self, other])
        return NotImplemented

    def __rmul__(self, other):
        return self.__mul__(other)

    # -- identity ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        args = ", ".join(f"{k}={_fmt(v)}" for k, v in self.hyperparameters.items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other) -> bool:
        if type(self) is not type(other):
            return False
        a, b = self.hyperparameters, other.hyperparameters
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self)))


@functools.cache
def _init_arg_names(cls) -> tuple:
    """Names of the explicit ``__init__`` arguments of a kernel class (``self`` and ``*args`` /
    ``**kwargs`` excluded), in signature order."""
    sig = inspect.signature(cls.__init__)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in list(sig.parameters.values())[1:] if p.kind in kinds)


def _clone_value(value):
    if isinstance(value, Kernel):
        return value.__sklearn_clone__()
    return copy.deepcopy(value)


def _same(a, b) -> bool:
    if isinstance(a, Kernel) or isinstance(b, Kernel):
        return a == b
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
    return a == b


class Constant(Kernel):
    """Constant kernel ``k(x, y) = c`` (c >= 0): what a plain number becomes in ``k + c``."""

    is_stationary = True  # a constant is (trivially) a function of x - y
    differentiable_inputs = True
    _learned = {"value": "length"}

    def __init__(self, value: float = 1.0):
        self.value = positive("Constant", "value", value, allow_zero=True)

    @property
    def hyperparameters(self) -> dict:
        return {"value": self.value}

    def scratch(self, n_features: int) -> float:
        return 0.0

    def _full(self, shape, X) -> torch.Tensor:
        if isinstance(self.value, torch.Tensor):  # a (learnable) tensor: a fresh block, on the graph
            return torch.ones(shape, dtype=X.dtype, device=X.device) * self.value.to(X.device)
        return torch.full(shape, self.value, dtype=X.dtype, device=X.device)

    def _pairwise(self, X1, X2):
        return self._full((X1.shape[0], X2.shape[0]), X1)

    def _paired(self, X1, X2):
        return self._full((X1.shape[0],), X1)


class _Composite(Kernel):
    _op = "?"

    def __init__(self, kernels: Iterable[Kernel]):
        flat: list[Kernel] = []
        for k in kernels:
            if not isinstance(k, Kernel):
                raise TypeError(f"{type(self).__name__} expects mercer kernels; got {k!r}.")
            if k.is_precomputed:
                raise ValueError("a Precomputed kernel cannot be combined with other kernels.")
            flat.extend(k.kernels if type(k) is type(self) else [k])
        if len(flat) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two kernels; got {len(flat)}.")
        self.kernels = tuple(flat)

    def _shallow_params(self) -> dict:
        # the parts are parameters k1, k2, ..., kN (scikit-learn's GP kernels say k1, k2)
        return {f"k{i}": k for i, k in enumerate(self.kernels, 1)}

    @classmethod
    def _from_params(cls, params: dict) -> Kernel:
        return cls([params[f"k{i}"] for i in range(1, len(params) + 1)])

    @property
    def is_stationary(self) -> bool:  # type: ignore[override]
        # sums and products of functions of x - y are functions of x - y
        return all(k.is_stationary for k in self.kernels)

    @property
    def differentiable_inputs(self) -> bool:  # type: ignore[override]
        return all(k.differentiable_inputs for k in self.kernels)

    @property
    def hyperparameters(self) -> dict:
        return {"kernels": list(self.kernels)}

    def scratch(self, n_features: int) -> float:
        return 1.0 + max(k.scratch(n_features) for k in self.kernels)

    def __repr__(self) -> str:
        return "(" + f" {self._op} ".join(map(repr, self.kernels)) + ")"


class Sum(_Composite):
    r"""Sum kernel :math:`k(x, y) = \sum_{i=1}^N k_i(x, y)` (n-ary, nested sums are flattened).

    Parameters
    ----------
    kernels : iterable of Kernel
        At least two kernels (a ``Sum`` among them contributes its parts).

    Its parameters (:meth:`~Kernel.get_params`) are the parts ``k1, ..., kN``, so a search can
    reach ``k1__gamma``; ``set_params(k2=other)`` replaces the second part (a ``Sum`` given there
    is flattened in place, which renumbers the parts after it).
    """

    _op = "+"

    def _pairwise(self, X1, X2):
        out = self.kernels[0]._pairwise(X1, X2)
        for k in self.kernels[1:]:
            part = k._pairwise(X1, X2)
            # in place unless autograd records the blocks (it may have saved ``out`` for backward)
            out = out + part if out.requires_grad or part.requires_grad else out.add_(part)
        return out

    def _paired(self, X1, X2):
        return sum(k._paired(X1, X2) for k in self.kernels)


class Product(_Composite):
    r"""Product kernel :math:`k(x, y) = \prod_{i=1}^N k_i(x, y)` (n-ary, nested products are flattened).

    Parameters
    ----------
    kernels : iterable of Kernel
        At least two kernels (a ``Product`` among them contributes its parts).

    Its parameters are the parts ``k1, ..., kN``, as for :class:`Sum`.
    """

    _op = "*"

    def _pairwise(self, X1, X2):
        out = self.kernels[0]._pairwise(X1, X2)
        for k in self.kernels[1:]:
            part = k._pairwise(X1, X2)
            out = out * part if out.requires_grad or part.requires_grad else out.mul_(part)
        return out

    def _paired(self, X1, X2):
        out = self.kernels[0]._paired(X1, X2)
        for k in self.kernels[1:]:
            out = out * k._paired(X1, X2)
        return out


class Scaled(Kernel):
    r"""Scaled kernel :math:`k(x, y) = c \, k_0(x, y)` with :math:`c > 0`.

    Parameters
    ----------
    scale : float > 0, or a one-element tensor (a learnable hyperparameter)
        The factor ``c``.
    kernel : Kernel
        The kernel ``k0``; ``c1 * (c2 * k)`` collapses to ``(c1 c2) * k``.

    Its parameters are ``scale`` and ``kernel`` (and ``kernel__<param>`` with ``deep=True``).
    """

    _learned = {"scale": "length"}

    def __init__(self, scale, kernel: Kernel):
        scale = positive("Scaled", "scale", scale)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Scaled expects a mercer kernel; got {kernel!r}.")
        if isinstance(kernel, Scaled):
            scale, kernel = scale * kernel.scale, kernel.kernel
        self.scale = scale
        self.kernel = kernel

    @property
    def is_stationary(self) -> bool:  # type: ignore[override]
        return self.kernel.is_stationary

    @property
    def is_precomputed(self) -> bool:  # type: ignore[override]
        return self.kernel.is_precomputed

    @property
    def differentiable_inputs(self) -> bool:  # type: ignore[override]
        return self.kernel.differentiable_inputs

    @property
    def hyperparameters(self) -> dict:
        return {"scale": self.scale, "kernel": self.kernel}

    def scratch(self, n_features: int) -> float:
        return self.kernel.scratch(n_features)

    def sample_frequencies(self, *args, **kwargs):
        """Frequencies of the inner stationary kernel (the scale multiplies the features by sqrt(scale))."""
        return self.kernel.sample_frequencies(*args, **kwargs)

    def block(self, X, Z, rows, cols):
        return self._scale(self.kernel.block(X, Z, rows, cols))

    def _scale(self, out: torch.Tensor) -> torch.Tensor:
        grad = out.requires_grad or (isinstance(self.scale, torch.Tensor) and self.scale.requires_grad)
        return out * self.scale if grad else out.mul_(self.scale)

    def _check_pair(self, X1, X2):
        self.kernel._check_pair(X1, X2)

    def _pairwise(self, X1, X2):
        return self._scale(self.kernel._pairwise(X1, X2))

    def _paired(self, X1, X2):
        return self.kernel._paired(X1, X2) * self.scale

    def __repr__(self) -> str:
        return f"{_fmt(self.scale)} * {self.kernel!r}"
