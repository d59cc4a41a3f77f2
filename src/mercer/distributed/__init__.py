"""Dask execution of the blocked kernel products (no estimator logic here).

With a ``distributed.Client`` in force, an estimator that streams its training data
(:class:`~mercer.NystroemKernelRidge`, :class:`~mercer.NystroemKernelRidgeClassifier`) fitted on a
Dask array or DataFrame runs its products as tasks on the workers that hold the partitions::

    >>> from distributed import Client
    >>> client = Client(cluster)
    >>> model = mercer.NystroemKernelRidge(n_centers=10_000).fit(X_dask, y_dask)
    >>> y_hat = model.predict(X_test_dask)          # a Dask array, computed on the workers

Without a client the same Dask input is read chunk by chunk in this process
(:class:`~mercer.sources.DaskSource`). The estimators find this engine through
:func:`mercer.linalg.distributed_engine`, which imports this package when the data calls for it.
"""

from ._engine import DaskEngine, current_client, dask_engine
from ._operator import DaskKernelOperator

__all__ = ["DaskEngine", "DaskKernelOperator", "current_client", "dask_engine"]
