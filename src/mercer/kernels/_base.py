"""Kernel base class and the operator algebra (``+``, ``*``, scalar ``*``).

A kernel is an immutable object that fills one block ``K(X1, X2)`` of shape ``(n1, n2)`` from two
2-D tensors on the same device; it never decides how a large matrix is tiled (that is
:mod:`mercer.linalg`'s job). A subclass declares its hyperparameters once and implements two
small methods:

* ``PARAMS``: a tuple of :class:`~mercer.kernels.Param`, one per hyperparameter (name, default,
  check, whether and in which unit it is learned, per-feature or not, its scikit-learn name);
* ``_pairwise(X1, X2)`` -> ``(n1, n2)`` block,
* ``_paired(X1, X2)``   -> ``(n,)`` values ``k(X1[i], X2[i])`` (used for the diagonal),

and may declare ``SHORTHANDS`` (the names :func:`mercer.kernels.resolve_kernel` knows it by,
``("rbf", "gaussian")``), ``scratch(d)`` (extra working memory, in multiples of the output block,
that ``_pairwise`` needs, so that the planner can size blocks for it) and
``_cached_pairwise(cache)`` (the block from the distances of a :class:`~mercer.kernels.DistanceCache`,
for the stationary kernels).

Everything else is derived from ``PARAMS`` when the class is created: ``__init__`` (each value
checked by its ``Param.check`` and stored under its name), unless the class writes its own, whose
signature must then list the same names with the same defaults (a mismatch raises ``TypeError``
at class creation); ``get_params`` / ``set_params`` / ``clone``; ``hyperparameters`` (repr,
equality, hashing, :mod:`mercer.io`); the learnable view and default bounds
(:class:`~mercer.kernels.LearnableKernel`); the conversion from scikit-learn's GP kernels
(:func:`~mercer.kernels.from_sklearn`). A new kernel is one class (and its export in
``mercer.kernels``)::

    class Cauchy(Kernel):  # k(x, y) = 1 / (1 + ||x - y||^2 / l^2)
        SHORTHANDS = ("cauchy",)
        PARAMS = (Param("length_scale", 1.0, positive, learn="length"),)

        def _pairwise(self, X1, X2):
            return squared_distances(X1, X2).div_(self.length_scale**2).add_(1.0).reciprocal_()

        def _paired(self, X1, X2):
            return 1.0 / (1.0 + ((X1 - X2) ** 2).sum(dim=1) / self.length_scale**2)

Parameters follow scikit-learn's convention: :meth:`Kernel.get_params` returns the ``__init__``
arguments (read from the attributes of the same name; ``deep=True`` adds ``part__param`` entries
of nested kernels) and :meth:`Kernel.set_params` changes them, so ``sklearn.base.clone`` copies a
kernel and ``GridSearchCV`` can search ``kernel__gamma`` or ``kernel__k1__gamma``.
"""

from __future__ import annotations

import copy
import inspect
import numbers
from collections.abc import Iterable

import numpy as np
import torch

from .._sparse import SparseRows, as_sparse_rows, is_sparse, is_sparse_input
from ._distances import DistanceCache
from ._params import Param, non_negative, positive

__all__ = ["Kernel", "Sum", "Product", "Scaled", "Constant", "KERNELS", "inner_products", "paired_inner"]

#: Kernel classes by shorthand (``"rbf"``), filled from the classes' ``SHORTHANDS`` as they are created.
KERNELS: dict[str, type] = {}


def _as_tensor(X, like: torch.Tensor | None = None) -> torch.Tensor | SparseRows:
    """Tensors pass through; sparse input becomes :class:`~mercer._sparse.SparseRows` (never
    dense); anything else is copied (float32 stays float32, the rest float64)."""
    if is_sparse_input(X):
        if like is None:
            return as_sparse_rows(X)
        return as_sparse_rows(X, dtype=like.dtype, device=like.device)
    if not isinstance(X, torch.Tensor):
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


def _sparse_pair(X1, X2):
    """Sparse rows against dense ones: both as sparse rows (a kernel on sparse rows computes on
    two sparse blocks; the dense side is the smaller one: centres, a test batch)."""
    if is_sparse(X1) != is_sparse(X2):
        if is_sparse(X1):
            X2 = as_sparse_rows(X2, dtype=X1.dtype, device=X1.device)
        else:
            X1 = as_sparse_rows(X1, dtype=X2.dtype, device=X2.device)
    return X1, X2


def inner_products(X1, X2) -> torch.Tensor:
    """``X1 @ X2.T`` for dense or sparse rows (a dense block)."""
    return X1.dot_block(X2) if is_sparse(X1) else X1 @ X2.T


def paired_inner(X1, X2) -> torch.Tensor:
    """``<X1[i], X2[i]>`` for every row, for dense or sparse rows."""
    return X1.paired(X2, "dot") if is_sparse(X1) else (X1 * X2).sum(dim=1)


#: The kernels that take sparse rows, named in the error of those that do not.
SPARSE_KERNELS = ("linear", "poly", "sigmoid", "cosine", "rbf", "laplacian", "matern", "rational_quadratic",
                  "exp_sine_squared", "chi2", "additive_chi2", "intersection", "histogram_intersection")


def _take(X: torch.Tensor, s: slice) -> torch.Tensor:
    """``X[s]``, or ``X`` itself when the slice covers it (keeps the tensor's identity, which the
    RBF kernel's small-batch cache of the stored points' norms is keyed on)."""
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
    #: True when ``_pairwise`` / ``_paired`` take :class:`~mercer._sparse.SparseRows` (sparse data).
    sparse_rows: bool = False
    #: Why a kernel does not take sparse rows (said in its error), when there is more to say.
    _sparse_refusal: str = "it has no formula on sparse rows"
    #: The hyperparameters, declared once (see the module docstring and :class:`Param`).
    PARAMS: tuple = ()
    #: Names :func:`mercer.kernels.resolve_kernel` knows the class by (``"rbf"``), if any.
    SHORTHANDS: tuple = ()
    _declared: dict = {}  # name -> Param, derived from PARAMS

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _declare(cls)

    # -- public API -------------------------------------------------------------------------
    def __call__(self, X1, X2=None, *, cache: DistanceCache | None = None) -> torch.Tensor:
        """Kernel matrix ``K[i, j] = k(X1[i], X2[j])``; ``X2=None`` means ``X2 = X1``. An array
        given with a tensor follows the tensor's device and dtype (either argument).

        ``cache``: the :class:`~mercer.kernels.DistanceCache` of exactly these input tensors, made
        by a loop that evaluates kernels on them again and again (hyperparameter learning); the
        stationary kernels then reuse its distances instead of computing their block in place."""
        if cache is not None:
            X1, X2 = cache.inputs(X1, X2)
            self._check_pair(X1, X2)
            return self._cached_pairwise(cache)
        if X2 is X1:  # one input given twice: the same tensor on both sides (White's noise, symmetric fast paths)
            X2 = None
        if X2 is not None and isinstance(X2, torch.Tensor) and not isinstance(X1, torch.Tensor):
            X2 = _as_tensor(X2)
            X1 = _as_tensor(X1, like=X2)
        else:
            X1 = _as_tensor(X1)
            X2 = X1 if X2 is None else _as_tensor(X2, like=X1)
        if is_sparse(X1) or is_sparse(X2):
            self.check_sparse()
            X1, X2 = _sparse_pair(X1, X2)
        self._check_pair(X1, X2)
        return self._pairwise(X1, X2)

    def diag(self, X) -> torch.Tensor:
        """Diagonal ``k(X[i], X[i])`` of ``K(X, X)`` without forming the matrix, shape ``(n,)``."""
        X = _as_tensor(X)
        if is_sparse(X):
            self.check_sparse()
        self._check_pair(X, X)
        return self._paired(X, X)

    def block(self, X: torch.Tensor, Z: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
        """One tile ``K(X[rows], Z[cols])`` of a larger kernel matrix (used by the block engine)."""
        if is_sparse(X) or is_sparse(Z):
            self.check_sparse()
            X, Z = _sparse_pair(_take(X, rows), _take(Z, cols))
            return self._pairwise(X, Z)
        return self._pairwise(_take(X, rows), _take(Z, cols))

    def check_sparse(self) -> None:
        """Raise ``TypeError`` naming this kernel and what to use unless it takes sparse rows."""
        if not self.sparse_rows:
            raise TypeError(
                f"{self!r} cannot take sparse input (scipy.sparse or torch sparse rows): "
                f"{self._sparse_refusal_of()}. Use a kernel that computes on sparse rows "
                f"({', '.join(SPARSE_KERNELS)}, their sums, products and scalings), or pass dense "
                "data (X.toarray()) if n_samples x n_features values fit in memory.")

    def _sparse_refusal_of(self) -> str:
        """The reason of the first part (of a composite) that refuses sparse rows."""
        return self._sparse_refusal

    def scratch(self, n_features: int) -> float:
        """Extra working memory of ``_pairwise``, in multiples of the output block."""
        return 1.0

    def _part_features(self, n_features: int) -> int:
        """Number of input columns the kernel's parts see (all of them, unless it selects some)."""
        return n_features

    @property
    def hyperparameters(self) -> dict:
        """The declared hyperparameters (``PARAMS``, aliases excepted) by name: floats, tensors
        (which may require grad), per-feature tuples, nested kernels, other values as given."""
        return {p.name: getattr(self, p.name) for p in type(self).PARAMS if not p.alias}

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
        """``get_params(deep=False)``: the ``__init__`` arguments (``PARAMS``) read from attributes
        (an alias reads as its default)."""
        return {p.name: p.default if p.alias else getattr(self, p.name) for p in type(self).PARAMS}

    @classmethod
    def _validate(cls, name: str, value):
        """``value`` checked and normalised as the declared parameter ``name`` (for a hand-written
        ``__init__``)."""
        return cls._declared[name].validate(cls.__name__, value)

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

    def _cached_pairwise(self, cache: DistanceCache) -> torch.Tensor:
        """The block of ``cache``'s inputs, given their cached distances (override to use them);
        the result may be written in place, the cached distances not."""
        return self._pairwise(cache.X1, cache.X2)

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


_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _declare(cls) -> None:
    """What a kernel class derives from its ``PARAMS`` when it is created: the ``__init__`` (made
    unless the class writes one, then checked against it), the name table, its shorthands."""
    params = tuple(cls.PARAMS)
    names = [p.name for p in params]
    if not all(isinstance(p, Param) for p in params) or len(set(names)) != len(names):
        raise TypeError(f"{cls.__qualname__}.PARAMS must be a tuple of Param with distinct names; got {cls.PARAMS!r}.")
    cls._declared = dict(zip(names, params))
    if "PARAMS" in cls.__dict__:
        cls.PARAMS = params  # a tuple
        if "__init__" not in cls.__dict__:
            if any(p.alias for p in params):
                raise TypeError(f"{cls.__qualname__} declares an alias parameter: it must write its own __init__.")
            cls.__init__ = _generated_init(cls, params)
    _check_signature(cls, params)
    for name in cls.__dict__.get("SHORTHANDS", ()):
        other = KERNELS.get(name)
        if other is not None and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"kernel shorthand {name!r} of {cls.__qualname__} is already {other.__qualname__}'s.")
        KERNELS[name] = cls


def _signature(params) -> inspect.Signature:
    kind = inspect.Parameter
    return inspect.Signature([kind("self", kind.POSITIONAL_OR_KEYWORD)] + [
        kind(p.name, kind.KEYWORD_ONLY if p.keyword_only else kind.POSITIONAL_OR_KEYWORD, default=p.default)
        for p in params])


def _generated_init(cls, params):
    """``__init__(self, <PARAMS>)``: each value checked by its ``Param`` and stored under its name."""
    sig = _signature(params)

    def __init__(self, *args, **kwargs):
        given = sig.bind(self, *args, **kwargs).arguments
        owner = type(self).__name__
        for p in params:
            setattr(self, p.name, p.validate(owner, given.get(p.name, p.default)))

    __init__.__signature__ = sig
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = f"Parameters: see {cls.__name__}'s docstring ({cls.__name__}.PARAMS)."
    return __init__


def _check_signature(cls, params) -> None:
    """A hand-written ``__init__`` must take the declared parameters, in order, with their defaults
    (and nothing else): the declaration is what ``get_params`` reports."""
    if cls.__init__ is object.__init__:
        got = []
    else:
        got = list(inspect.signature(cls.__init__).parameters.values())[1:]
    want = list(_signature(params).parameters.values())[1:]

    def show(ps):
        return "(" + ", ".join(str(p) for p in ps) + ")"

    same = len(got) == len(want) and all(
        g.name == w.name and g.kind in _KINDS and (g.kind == w.kind)
        and (g.default is w.default or (type(g.default) is type(w.default) and g.default == w.default))
        for g, w in zip(got, want))
    if not same:
        raise TypeError(f"{cls.__qualname__}.__init__{show(got)} does not match its declared PARAMS {show(want)}: "
                        "declare each hyperparameter in PARAMS (name, default) and take exactly those arguments "
                        "(or write no __init__: one is made from PARAMS).")


def a_kernel(owner: str, name: str, value):
    """Check of a parameter that is a mercer kernel."""
    if not isinstance(value, Kernel):
        raise TypeError(f"{owner} expects a mercer kernel; got {value!r}.")
    return value


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
    sparse_rows = True
    PARAMS = (Param("value", 1.0, non_negative, learn="length", sklearn="constant_value"),)

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
    PARAMS = (Param("kernels"),)

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
    def sparse_rows(self) -> bool:  # type: ignore[override]
        return all(k.sparse_rows for k in self.kernels)

    def _sparse_refusal_of(self) -> str:
        part = next((k for k in self.kernels if not k.sparse_rows), None)
        return self._sparse_refusal if part is None else f"its part {part!r} cannot ({part._sparse_refusal_of()})"

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

    @staticmethod
    def _combine(blocks) -> torch.Tensor:
        out = next(blocks)
        for part in blocks:
            # in place unless autograd records the blocks (it may have saved ``out`` for backward)
            out = out + part if out.requires_grad or part.requires_grad else out.add_(part)
        return out

    def _pairwise(self, X1, X2):
        return self._combine(k._pairwise(X1, X2) for k in self.kernels)

    def _cached_pairwise(self, cache):
        return self._combine(k._cached_pairwise(cache) for k in self.kernels)

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

    @staticmethod
    def _combine(blocks) -> torch.Tensor:
        out = next(blocks)
        for part in blocks:
            out = out * part if out.requires_grad or part.requires_grad else out.mul_(part)
        return out

    def _pairwise(self, X1, X2):
        return self._combine(k._pairwise(X1, X2) for k in self.kernels)

    def _cached_pairwise(self, cache):
        return self._combine(k._cached_pairwise(cache) for k in self.kernels)

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

    PARAMS = (Param("scale", check=positive, learn="length"), Param("kernel", check=a_kernel))

    def __init__(self, scale, kernel: Kernel):
        scale, kernel = self._validate("scale", scale), self._validate("kernel", kernel)
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
    def sparse_rows(self) -> bool:  # type: ignore[override]
        return self.kernel.sparse_rows

    def _sparse_refusal_of(self) -> str:
        return self.kernel._sparse_refusal_of()

    def scratch(self, n_features: int) -> float:
        return self.kernel.scratch(n_features)

    def sample_frequencies(self, *args, **kwargs):
        """Frequencies of the inner stationary kernel (the scale multiplies the features by sqrt(scale))."""
        return self.kernel.sample_frequencies(*args, **kwargs)

    def block(self, X, Z, rows, cols):
        if is_sparse(X) or is_sparse(Z):
            self.check_sparse()
        return self._scale(self.kernel.block(X, Z, rows, cols))

    def _scale(self, out: torch.Tensor) -> torch.Tensor:
        grad = out.requires_grad or (isinstance(self.scale, torch.Tensor) and self.scale.requires_grad)
        return out * self.scale if grad else out.mul_(self.scale)

    def _check_pair(self, X1, X2):
        self.kernel._check_pair(X1, X2)

    def _pairwise(self, X1, X2):
        return self._scale(self.kernel._pairwise(X1, X2))

    def _cached_pairwise(self, cache):
        return self._scale(self.kernel._cached_pairwise(cache))

    def _paired(self, X1, X2):
        return self.kernel._paired(X1, X2) * self.scale

    def __repr__(self) -> str:
        return f"{_fmt(self.scale)} * {self.kernel!r}"
