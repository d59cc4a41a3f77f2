"""No silent NaN: a check on computed values that, when they are not finite, names the cause.

Kernel values overflow in three ways on finite input: the inputs are so large that their squared
norms (or dot products) overflow the working dtype (``X * 1e200`` in float64: ``|x|^2 = inf``, and
``inf - inf`` is NaN in ``|x|^2 + |y|^2 - 2 x.y``); a kernel parameter is not representable in the
dtype of the computation (``gamma=1e300`` in float32 tiles is ``inf``, and ``inf * 0`` is NaN on the
diagonal); or the kernel's values themselves overflow (a polynomial kernel with a huge ``gamma``).
:func:`check_finite` raises a ``ValueError`` that says which, instead of letting the NaN through.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import torch

__all__ = ["check_finite", "check_params_fit_dtype", "overflow_cause"]


def _max_abs(A) -> float:
    """Largest absolute value of a tensor or array (dense or sparse), as a Python float (0.0 when empty)."""
    if A is None:
        return 0.0
    if isinstance(A, torch.Tensor):
        A = A.coalesce().values() if A.is_sparse else A
        return float(A.detach().abs().max()) if A.numel() else 0.0
    A = getattr(A, "data", A) if hasattr(A, "tocsr") else np.asarray(A)
    return float(np.abs(A).max()) if np.size(A) else 0.0


def _scalar_params(kernel) -> dict[str, float]:
    """The kernel's numeric parameters (nested ones as ``k1__gamma``), largest magnitude per name."""
    out = {}
    try:
        params = kernel.get_params(deep=True)
    except (AttributeError, TypeError):
        return out
    for name, v in params.items():
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().numpy()
        if isinstance(v, (Real, np.ndarray)) and not isinstance(v, bool):
            arr = np.asarray(v, dtype=np.float64)
            if arr.size:
                out[name] = float(np.abs(arr).max())
    return out


def overflow_cause(*, X=None, kernel=None, dtype=torch.float64, y=None) -> str:
    """The likeliest reason why values computed from ``X`` (features), ``kernel`` and ``y`` (targets)
    are not finite in ``dtype``: a sentence for an error message."""
    dtype = dtype if isinstance(dtype, torch.dtype) else torch.float64
    big = torch.finfo(dtype).max
    name = str(dtype).replace("torch.", "")
    if X is not None and getattr(X, "ndim", 0) == 2:
        amax, d = _max_abs(X), X.shape[1]
        for dt, top in ((torch.float64, torch.finfo(torch.float64).max), (dtype, big)):
            if amax * amax * max(d, 1) > top:
                dn = str(dt).replace("torch.", "")
                return (f"input values too large: squared norms overflow {dn} (largest |x| = {amax:.3g}, "
                        f"{d} features); rescale X (e.g. with StandardScaler)")
    for pname, v in _scalar_params(kernel).items():
        if v > big:
            return (f"the kernel parameter '{pname}' = {v:.3g} overflows {name}, the dtype of the kernel "
                    "computation; use dtype='float64' or a smaller value")
    if y is not None:
        ymax, n = _max_abs(y), max(int(np.shape(y)[0]), 1)
        if ymax * ymax * n > torch.finfo(torch.float64).max or ymax > big:
            return f"target values too large: their squares overflow (largest |y| = {ymax:.3g}); rescale y"
    params = ", ".join(f"{k}={v:.3g}" for k, v in _scalar_params(kernel).items() if v > 1e30 or 0 < v < 1e-30)
    return (f"the kernel values overflow {name} with these parameters{f' ({params})' if params else ''}; "
            "rescale X or change the kernel's parameters"
            + ("" if dtype == torch.float64 else ", or use dtype='float64'"))


def check_params_fit_dtype(kernel, dtype: torch.dtype, owner: str) -> None:
    """Raise a ``ValueError`` when a kernel parameter is not representable in ``dtype`` (it would
    be ``inf`` in the kernel computation, and ``inf * 0`` is NaN)."""
    big = torch.finfo(dtype).max
    for pname, v in _scalar_params(kernel).items():
        if v > big:
            raise ValueError(f"{owner}: the kernel parameter '{pname}' = {v:.3g} overflows "
                             f"{str(dtype).replace('torch.', '')}, the dtype of the kernel computation; use "
                             "dtype='float64' or a smaller value.")


def check_finite(values, owner: str, what: str, *, X=None, kernel=None, dtype=None, y=None) -> None:
    """Raise ``ValueError("{owner}: {what} are not finite (NaN or infinity): {cause}.")`` when
    ``values`` (a tensor, or a sequence of tensors) hold a NaN or an infinity."""
    vals = values if isinstance(values, (list, tuple)) else [values]
    if all(bool(torch.isfinite(v).all()) for v in vals if isinstance(v, torch.Tensor) and v.numel()):
        if all(math.isfinite(float(v)) for v in vals if isinstance(v, Real)):
            return
    dtype = dtype or next((v.dtype for v in vals if isinstance(v, torch.Tensor)), torch.float64)
    raise ValueError(f"{owner}: {what} are not finite (NaN or infinity): "
                     f"{overflow_cause(X=X, kernel=kernel, dtype=dtype, y=y)}.")
