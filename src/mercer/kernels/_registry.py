"""String shorthands: ``"rbf"`` -> ``RBF(...)``, and the CLI's ``"rbf:gamma=0.1"`` syntax.

The shorthands are declared by the kernel classes themselves (``SHORTHANDS``) and collected in
:data:`KERNELS` as the classes are created.

Every name of scikit-learn's ``sklearn.metrics.pairwise.PAIRWISE_KERNEL_FUNCTIONS`` is here, with
its keyword semantics (``gamma``, ``degree``, ``coef0``, ``kernel_params``); a callable becomes a
:class:`FunctionKernel` (``kernel_params`` are its keyword arguments, as in scikit-learn).
"""

from __future__ import annotations

import re
from numbers import Real

from .._validation import InstanceOf, Interval

from ._base import KERNELS, Kernel
from ._function import FunctionKernel
from ._sklearn import SKLEARN_KERNEL, _convert as _from_sklearn, is_sklearn_kernel

__all__ = ["KERNELS", "KERNEL_CONSTRAINTS", "resolve_kernel", "parse_kernel_spec"]

# KERNELS (imported above) maps each shorthand to its class: every kernel class declares its own
# (``SHORTHANDS = ("rbf", "gaussian")``) and is entered when it is created, that is when
# ``mercer.kernels`` (which any import of a module here runs first) imports its module.


#: Allowed values of scikit-learn's kernel parameters (``kernel, gamma, degree, coef0,
#: kernel_params``), merged into the ``_parameter_constraints`` of every estimator and transformer
#: that takes them; a kernel name and its keywords are then checked by :func:`resolve_kernel`,
#: which knows each kernel's own parameters.
KERNEL_CONSTRAINTS: dict = {
    "kernel": [str, InstanceOf(Kernel, "a mercer.kernels.Kernel"), SKLEARN_KERNEL, "callable"],
    "gamma": [Interval(Real, None, None), None],
    "degree": [Interval(Real, 0, None, closed="left"), None],
    "coef0": [Interval(Real, None, None), None],
    "kernel_params": [dict, None],
}


def resolve_kernel(kernel, *, gamma=None, degree=None, coef0=None, kernel_params=None,
                   owner: str = "estimator") -> Kernel:
    """Turn an estimator's ``kernel`` parameter into a :class:`Kernel`.

    Strings follow scikit-learn: ``gamma``, ``degree`` and ``coef0`` go to the kernels that take
    them (and are ignored by the others, as in scikit-learn); ``kernel_params`` (a dict, never
    modified) adds any other keyword. A :class:`Kernel` instance is returned as is. A callable
    ``f(X1, X2, **kernel_params)`` returning the ``(n1, n2)`` block becomes
    ``FunctionKernel(f, kernel_params)`` (``gamma``, ``degree`` and ``coef0`` are not passed to it,
    as in scikit-learn; note that scikit-learn calls its callables per pair of rows, mercer per block).
    A scikit-learn GP kernel (``sklearn.gaussian_process.kernels``) is converted by
    :func:`mercer.kernels.from_sklearn` (``gamma``, ``degree``, ``coef0`` and ``kernel_params`` are
    ignored, as for a :class:`Kernel`).
    """
    if isinstance(kernel, Kernel):
        return kernel
    if is_sklearn_kernel(kernel):  # before the callables: scikit-learn's kernels are callable
        return _from_sklearn(kernel, owner)
    if callable(kernel) and not isinstance(kernel, type):
        return FunctionKernel(kernel, None if kernel_params is None else dict(kernel_params))
    if not isinstance(kernel, str):
        raise ValueError(
            f"The 'kernel' parameter of {owner} must be a str among {sorted(KERNELS)}, a "
            f"mercer.kernels.Kernel or a callable. Got {kernel!r} instead."
        )
    name = kernel.lower()
    if name not in KERNELS:
        raise ValueError(
            f"The 'kernel' parameter of {owner} must be a str among {sorted(KERNELS)}, a "
            f"mercer.kernels.Kernel or a callable. Got {kernel!r} instead."
        )
    cls = KERNELS[name]
    accepted = {p.name for p in cls.PARAMS}
    params = {k: v for k, v in (("gamma", gamma), ("degree", degree), ("coef0", coef0))
              if k in accepted and v is not None}
    extra = dict(kernel_params or {})
    unknown = set(extra) - accepted
    if unknown:
        raise ValueError(
            f"kernel_params {sorted(unknown)} are not parameters of {cls.__name__} "
            f"(accepted: {sorted(accepted)})."
        )
    params.update(extra)
    return cls(**params)


def _parse_value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_kernel_spec(spec: str) -> Kernel:
    """Parse ``"name[:key=value[,key=value...]]"``, with ``+`` for sums, e.g.
    ``"rbf:gamma=0.1"`` or ``"rbf:gamma=0.5+linear"``."""
    # "+" joins kernels; a "+" inside a number (1e+3) is not followed by a kernel name.
    terms = [t.strip() for t in re.split(r"\+(?=\s*[A-Za-z_])", spec)]
    kernels = []
    for term in terms:
        name, _, args = term.partition(":")
        params = {}
        for item in filter(None, (a.strip() for a in args.split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise ValueError(f"kernel spec {spec!r}: expected key=value, got {item!r}.")
            params[key.strip()] = _parse_value(value.strip())
        kernels.append(resolve_kernel(name.strip(), kernel_params=params, owner="the kernel spec"))
    return kernels[0] if len(kernels) == 1 else sum(kernels)
