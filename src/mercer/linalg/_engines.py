"""Execution engines for the blocked kernel products, found by the estimators without importing them.

An estimator (layer ``models``) builds a :class:`~mercer.linalg.KernelOperator` for its blocked
products. When its data lives on a cluster, the products should instead run where the data is,
through an engine from a layer *above* the estimators (:mod:`mercer.distributed`), which the
estimators must not import. This registry breaks the cycle: an engine registers itself here when its
module is imported, and :func:`distributed_engine` imports the module that provides an engine only
when the data calls for it (a Dask collection, with ``distributed`` already loaded by the user's
``Client``), so ``import mercer`` never imports Dask.

An engine is any object with

* ``applies(X) -> bool``: whether it runs the products for the training data ``X`` (a
  :class:`~mercer.sources.RowSource`, e.g. a :class:`~mercer.sources.DaskSource`) right now;
* ``operator(kernel, X, Z, *, memory_budget, n_rhs, max_tile_bytes)``: an operator with
  :class:`~mercer.linalg.KernelOperator`'s ``rmatvec``, ``kt_k_v``, ``kt_k``, ``shape`` and
  ``dtype``, plus ``rows(u)``: a per-sample array (targets, weights) placed like ``X``'s rows;
* ``targets(y, X, owner)``: a per-sample target array validated without gathering it (float64,
  1-D or 2-D, one row per sample of ``X``).
"""

from __future__ import annotations

import importlib
import sys

from ..sources import DaskSource, is_dask_collection

__all__ = ["distributed_engine", "register_engine"]

#: name -> engine object, filled by the providers when they are imported
_ENGINES: dict = {}
#: name -> (module that registers it, module that must already be loaded for it to apply)
_PROVIDERS = {"dask": ("mercer.distributed", "distributed")}


def register_engine(name: str, engine) -> None:
    """Register ``engine`` under ``name`` (done by the engine's module when it is imported)."""
    for attr in ("applies", "operator", "targets"):
        if not callable(getattr(engine, attr, None)):
            raise TypeError(f"register_engine: the engine {name!r} has no method {attr}().")
    _ENGINES[name] = engine


def distributed_engine(X):
    """The engine that runs the products for the training data ``X`` on a cluster, or ``None``
    (then the caller uses a local :class:`~mercer.linalg.KernelOperator`). Dask data gets the Dask
    engine when a ``distributed.Client`` is in force; its module is imported on first use."""
    if not (isinstance(X, DaskSource) or is_dask_collection(X)):
        return None
    provider, needs = _PROVIDERS["dask"]
    if needs not in sys.modules:  # no distributed Client can exist: stream in this process
        return None
    if "dask" not in _ENGINES:
        importlib.import_module(provider)  # registers itself
    engine = _ENGINES.get("dask")
    return engine if engine is not None and engine.applies(X) else None
