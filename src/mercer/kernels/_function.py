"""A kernel given as a user function of two blocks of rows."""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch

from .._validation import check_param
from ._base import Kernel

__all__ = ["FunctionKernel"]


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class FunctionKernel(Kernel):
    r"""Kernel :math:`K = f(X_1, X_2, **params)` computed by a user function ``f`` that returns the
    whole ``(n1, n2)`` block (what ``kernel=f`` becomes in every estimator).

    Unlike scikit-learn, which calls a callable kernel once per *pair of rows*, ``f`` receives two
    2-D blocks and returns the block: one call per tile of the kernel matrix, so it runs at the
    speed of its own array code (and on the GPU when it uses torch).

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

    def __init__(self, function, params: dict | None = None, *, diagonal=None, numpy: bool = False):
        owner = type(self).__name__
        check_param(owner, "function", function, ["callable"])
        check_param(owner, "params", params, [dict, None])
        check_param(owner, "diagonal", diagonal, ["callable", Real, None])
        check_param(owner, "numpy", numpy, ["boolean"])
        if isinstance(function, Kernel) or isinstance(function, type):
            raise ValueError(f"The 'function' parameter of {owner} must be a function of two arrays. "
                             f"Got {function!r} instead.")
        self.function = function
        self.params = params
        self.diagonal = diagonal
        self.numpy = bool(numpy)

    @property
    def hyperparameters(self) -> dict:
        return {"function": self.function, "params": self.params, "diagonal": self.diagonal, "numpy": self.numpy}

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
        return self._call(self.function, X1, (X1.shape[0], X2.shape[0]), X1, X2)

    def _paired(self, X1, X2):
        n = X1.shape[0]
        if X1 is X2 and isinstance(self.diagonal, Real):
            return torch.full((n,), float(self.diagonal), dtype=X1.dtype, device=X1.device)
        if X1 is X2 and self.diagonal is not None:
            return self._call(self.diagonal, X1, (n,), X1)
        if n == 0:
            return X1.new_zeros(0)
        return torch.cat([self._call(self.function, X1, (1, 1), X1[i:i + 1], X2[i:i + 1])[0]
                          for i in range(n)])

    def __repr__(self) -> str:
        args = [_name(self.function)] + [f"{k}={v!r}" for k, v in (self.params or {}).items()]
        return f"{type(self).__name__}({', '.join(args)})"
