"""Global options as a frozen dataclass, with a context manager for temporary overrides.

Every option can also be given per estimator (``memory_budget=``, ``device=``, ``dtype=``); the
global value is only the default used when an estimator leaves its own parameter at ``None``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from numbers import Integral, Real

from ._validation import Interval, Options, check_params

__all__ = ["Config", "get_config", "set_config", "config_context"]


class _DaskClient:
    """Constraint: a ``distributed.Client`` (duck-typed: this layer does not import Dask)."""

    def accepts(self, v) -> bool:
        return all(callable(getattr(v, m, None)) for m in ("submit", "scatter", "compute"))

    def __str__(self) -> str:
        return "a distributed.Client"


@dataclasses.dataclass(frozen=True)
class Config:
    """Library-wide defaults.

    Attributes
    ----------
    memory_budget : int or None
        Bytes that one blocked kernel computation may hold at once. ``None`` derives it from the
        memory available on the target device (see :func:`mercer.linalg.default_memory_budget`).
        An estimator resolves its budget at each call (``fit``, ``predict``, ``transform``): its own
        ``memory_budget``, else this option in the caller's context, else the free memory then, so
        ``with config_context(memory_budget=...)`` applies to the calls made inside it, and a
        loaded model uses the loading machine's memory.
    memory_fraction : float
        Fraction of the available memory used when ``memory_budget`` is ``None``.
    device : str or None
        Default torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``). ``None`` means ``"cpu"``.
    dtype : str or None
        Default floating dtype (``"float32"`` or ``"float64"``); ``None`` follows the input.
    dask_client : distributed.Client or None
        The client whose cluster runs the products of a fit on Dask data (:mod:`mercer.distributed`);
        ``None``: Dask's default client (``distributed.default_client()``) if there is one, else the
        Dask data is read chunk by chunk in this process.
    """

    memory_budget: int | None = None
    memory_fraction: float = 0.5
    device: str | None = None
    dtype: str | None = None
    dask_client: object | None = None

    _parameter_constraints = {
        "memory_budget": [Interval(Integral, 1, None, closed="left"), None],
        "memory_fraction": [Interval(Real, 0, 1, closed="right")],
        "device": ["device", None],
        "dtype": [Options("float32", "float64"), None],
        "dask_client": [_DaskClient(), None],
    }

    def __post_init__(self) -> None:
        check_params(self)


_CONFIG: contextvars.ContextVar[Config] = contextvars.ContextVar("mercer_config", default=Config())


def get_config() -> Config:
    """Return the options in force in the current context."""
    return _CONFIG.get()


def set_config(**options) -> Config:
    """Replace options for the rest of the current context; returns the new :class:`Config`."""
    new = dataclasses.replace(get_config(), **options)
    _CONFIG.set(new)
    return new


@contextlib.contextmanager
def config_context(**options) -> Iterator[Config]:
    """Temporarily override options.

    Examples
    --------
    ::

        with mercer.config_context(memory_budget=64 * 2**20):
            model.fit(X, y)
    """
    token = _CONFIG.set(dataclasses.replace(get_config(), **options))
    try:
        yield _CONFIG.get()
    finally:
        _CONFIG.reset(token)
