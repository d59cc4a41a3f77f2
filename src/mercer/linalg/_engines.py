"""Execution engines of the blocked kernel products: one registry, the engine chosen by the input.

An estimator asks :func:`engine_for` for the engine of its training data and gets from it a
:class:`~mercer.linalg.ProductOperator`; it never imports an engine nor tests what it got. Arrays,
tensors and row sources read in this process run on the ``"local"`` engine
(:class:`~mercer.linalg.KernelOperator`). A source or collection names its engine (a
:class:`~mercer.sources.RowSource`'s ``engine`` attribute: ``"dask"`` for a
:class:`~mercer.sources.DaskSource`; a Dask collection is Dask's); an engine from a layer *above* the
estimators (:mod:`mercer.distributed`) registers itself when its module is imported, and
:data:`_PROVIDERS` says which module that is, so it is imported only when data calls for it (``import
mercer`` never imports Dask). An engine that does not apply right now (Dask data without a
``distributed.Client``) hands the data to the local engine, which streams it in this process.

Adding an engine: its own package, whose import calls :func:`register_engine`, and one line in
:data:`_PROVIDERS` (or an explicit ``register_engine`` by the user for an engine of their own).

An engine is any object with

* ``applies(X) -> bool``: whether it runs the products for the training data ``X`` right now;
* ``operator(kernel, X, Z, *, memory_budget, n_rhs, max_tile_bytes, keep_bytes)``: a
  :class:`~mercer.linalg.ProductOperator` (``memory_budget``: an int or an
  :class:`~mercer.linalg.ExecutionPlan`);
* ``targets(y, X, owner)``: the targets ``y`` validated where they lie (float64, 1-D or 2-D, one
  row per sample of ``X``), or ``None`` when ``y`` is an ordinary in-memory array (the estimator
  then validates it as any other).
"""

from __future__ import annotations

import importlib
import sys

from ..sources import is_dask_collection

__all__ = ["LocalEngine", "distributed_engine", "engine_for", "register_engine"]

#: name -> engine object; "local" is built in, the others are filled by their providers on import
_ENGINES: dict = {}
#: name -> (module that registers it, module that must already be loaded for it to apply)
_PROVIDERS = {"dask": ("mercer.distributed", "distributed")}


class LocalEngine:
    """The products in this process: a :class:`~mercer.linalg.KernelOperator` over an in-memory ``X``
    or one that streams a row source block by block."""

    name = "local"

    def applies(self, X) -> bool:
        return True

    def operator(self, kernel, X, Z, *, memory_budget=None, n_rhs: int = 1, max_tile_bytes=-1, keep_bytes: int = 0):
        from ._operator import KernelOperator

        return KernelOperator(kernel, X, Z, memory_budget=memory_budget, n_rhs=n_rhs, max_tile_bytes=max_tile_bytes,
                              keep_bytes=keep_bytes)

    def targets(self, y, X, owner: str):
        return None


def register_engine(name: str, engine) -> None:
    """Register ``engine`` under ``name`` (done by the engine's module when it is imported)."""
    for attr in ("applies", "operator", "targets"):
        if not callable(getattr(engine, attr, None)):
            raise TypeError(f"register_engine: the engine {name!r} has no method {attr}().")
    _ENGINES[name] = engine


register_engine("local", LocalEngine())


def _engine_name(X) -> str:
    name = getattr(X, "engine", None)
    if isinstance(name, str):
        return name
    return "dask" if is_dask_collection(X) else "local"


def engine_for(X):
    """The engine that runs the blocked products for the training data ``X`` (never ``None``)."""
    name = _engine_name(X)
    if name == "local":
        return _ENGINES["local"]
    if name not in _ENGINES and name in _PROVIDERS:
        provider, needs = _PROVIDERS[name]
        if needs not in sys.modules:  # e.g. no distributed Client can exist: stream in this process
            return _ENGINES["local"]
        importlib.import_module(provider)  # registers itself
    engine = _ENGINES.get(name)
    if engine is None:
        raise ValueError(f"no execution engine named {name!r} is registered (the data {type(X).__name__} asks for "
                         f"it); registered: {sorted(_ENGINES)}.")
    return engine if engine.applies(X) else _ENGINES["local"]


def distributed_engine(X):
    """The engine of ``X`` when it is not the local one (data on a cluster, with its client in force),
    else ``None``."""
    engine = engine_for(X)
    return None if engine is _ENGINES["local"] else engine
