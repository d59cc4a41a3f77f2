"""A kernel given as a user function of two blocks of rows."""

from __future__ import annotations

import logging
from numbers import Real

import numpy as np
import torch

from .._validation import check_param
from ._base import Kernel
from ._params import Param, constrained

log = logging.getLogger(__name__)

__all__ = ["FunctionKernel"]


def _is_number(out) -> bool:
    return np.ndim(out) == 0 or (isinstance(out, torch.Tensor) and out.numel() == 1 and out.ndim == 0)


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _function(owner: str, name: str, value):
    check_param(owner, name, value, ["callable"])
    if isinstance(value, Kernel) or isinstance(value, type):
        raise ValueError(f"The {name!r} parameter of {owner} must be a function of two arrays. Got {value!r} instead.")
    return value


class FunctionKernel(Kernel):
    r"""Kernel :math:`K = f(X_1, X_2, **params)` computed by a user function ``f`` that returns the
    whole ``(n1, n2)`` block (what ``kernel=f`` becomes in every estimator).

    Unlike scikit-learn, which calls a callable kernel once per *pair of rows*, ``f`` receives two
    2-D blocks and returns the block: one call per tile of the kernel matrix, so it runs at the
    speed of its own array code (and on the GPU when it uses torch). A function written for
    scikit-learn's convention (two 1-D numpy rows in, a number out) also works: when the block call
    fails or returns another shape and ``f`` returns a number for one pair of rows, the block is
    filled pair by pair, as scikit-learn does (one Python call per entry: slow beyond a few
    thousand rows). Which convention ``f`` follows is found by one call on the first pair of rows
    (see ``_detect``) and remembered, so a per-pair function is called exactly as scikit-learn
    calls it.

    Parameters
    ----------
    function : callable
        ``function(X1, X2, **params)``: ``X1`` of shape ``(n1, d)``, ``X2`` of shape ``(n2, d)``,
        returning an ``(n1, n2)`` tensor or array (an array is converted to the inputs' dtype and
        device; a tensor keeps its autograd graph).
    params : dict or None
        Keyword arguments of ``function`` (an estimator's ``kernel_params``, as in scikit-learn).
    diagonal : callable, float or None
        How to get ``k(x_i, x_i)`` without the full matrix: ``diagonal(X, **params)`` returning
        ``(n,)``, or a constant (1.0 for a normalised kernel). ``None`` calls ``function`` once per
        row on the ``(1, d)`` pair: n Python calls, fine for thousands of rows, slow for millions.
    numpy : bool, default False
        Pass numpy arrays (CPU float copies) instead of tensors, for functions written for numpy
        (``sklearn.metrics.pairwise.*_kernel`` among them). Tensors are passed by default; most
        numpy code also works on CPU tensors.

    Not stationary (nothing is known about ``f``); a ``FunctionKernel`` cannot be saved by
    :mod:`mercer.io` (a function is code, not data).
    """

    #: :func:`mercer.io.kernel_to_dict` refuses kernels that say why they cannot be saved
    _unsaveable = "a kernel defined by a Python function cannot be saved; use a built-in kernel or re-create it"
    _sparse_refusal = "it calls a Python function on dense blocks of rows"

    PARAMS = (Param("function", check=_function), Param("params", None, constrained(dict, None)),
              Param("diagonal", None, constrained("callable", Real, None), keyword_only=True),
              Param("numpy", False, constrained("boolean", convert=bool), keyword_only=True))

    def _call(self, fn, like: torch.Tensor, shape: tuple, *args) -> torch.Tensor:
        if self.numpy:
            args = tuple(a.detach().cpu().numpy() for a in args)
        out = fn(*args, **(self.params or {}))
        # a fresh block: the function may return (a view of) the user's own data, and composites
        # and the block engine write into blocks in place
        if not isinstance(out, torch.Tensor):
            out = torch.tensor(np.asarray(out), dtype=like.dtype, device=like.device)
        elif out.dtype != like.dtype or out.device != like.device:
            out = out.to(dtype=like.dtype, device=like.device)
        else:
            out = out.clone()
        if tuple(out.shape) != shape:
            raise ValueError(f"{type(self).__name__}: the function {_name(fn)} returned shape {tuple(out.shape)} "
                             f"for inputs of {args[0].shape[0]} and {args[-1].shape[0]} rows; it must return "
                             f"the {shape} block (one value per pair of rows).")
        return out

    def _pairwise(self, X1, X2):
        shape = (X1.shape[0], X2.shape[0])
        convention = getattr(self, "_convention", None)
        if convention is None and shape[0] and shape[1]:
            convention, first = self._detect(X1, X2)
            if convention == "pair":  # the probe's value is the first entry: no call is repeated
                return self._per_pair(X1, X2, shape, first=first)
        if convention == "pair":
            return self._per_pair(X1, X2, shape)
        return self._call(self.function, X1, shape, X1, X2)

    def _detect(self, X1, X2):
        """Which convention the function follows, from one call on the first pair of rows, passed
        as two ``(1, d)`` blocks: a ``(1, 1)`` block is mercer's (the answer is remembered), a
        number is scikit-learn's per-pair one (its value is the first entry). When that call fails,
        one call on the two 1-D rows, as scikit-learn makes it: a number is the per-pair convention;
        otherwise the block call decides (and raises its own error). So a per-pair function is
        called exactly as scikit-learn calls it (``Nystroem`` counts: each unordered pair once).
        Returns ``(convention, first value or None)``."""
        params = self.params or {}
        try:
            out = self.function(*self._args(X1[:1], X2[:1]), **params)
        except Exception as exc:  # noqa: BLE001 - any failure: try scikit-learn's 1-D rows
            log.debug("%s: the call on a (1, d) pair of blocks failed (%s); trying two 1-D rows", self, exc)
        else:
            if _is_number(out):
                return self._remember("pair"), out
            if tuple(np.shape(out)) == (1, 1):
                return self._remember("block"), None
        try:
            out = self.function(self._rows(X1[0]), self._rows(X2[0]), **params)
        except Exception:  # noqa: BLE001 - it does not take pairs either: the block call's error will say why
            return None, None
        return (self._remember("pair"), out) if _is_number(out) else (None, None)

    def _remember(self, convention: str) -> str:
        # a memo of what the function is, not a hyperparameter (clone() and get_params() ignore it)
        self._convention = convention
        return convention

    def _args(self, *blocks):
        return tuple(self._rows(b) for b in blocks) if self.numpy else blocks

    def _rows(self, X: torch.Tensor) -> np.ndarray:
        return X.detach().cpu().numpy()

    def _per_pair(self, X1, X2, shape, first=None) -> torch.Tensor:
        A, B = self._rows(X1), self._rows(X2)
        params = self.params or {}
        out = np.empty(shape, dtype=np.float64)
        same = X1 is X2  # symmetric: each unordered pair once, as scikit-learn
        for i in range(shape[0]):
            for j in range(i if same else 0, shape[1]):
                value = first if (i, j) == (0, 0) and first is not None else self.function(A[i], B[j], **params)
                out[i, j] = float(value)
                if same:
                    out[j, i] = out[i, j]
        return torch.tensor(out, dtype=X1.dtype, device=X1.device)

    def _paired(self, X1, X2):
        n = X1.shape[0]
        if X1 is X2 and isinstance(self.diagonal, Real):
            return torch.full((n,), float(self.diagonal), dtype=X1.dtype, device=X1.device)
        if X1 is X2 and self.diagonal is not None:
            return self._call(self.diagonal, X1, (n,), X1)
        if n == 0:
            return X1.new_zeros(0)
        return torch.cat([self._pairwise(X1[i:i + 1], X2[i:i + 1])[0] for i in range(n)])

    def __repr__(self) -> str:
        args = [_name(self.function)] + [f"{k}={v!r}" for k, v in (self.params or {}).items()]
        return f"{type(self).__name__}({', '.join(args)})"
