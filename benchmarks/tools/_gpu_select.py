"""pytest plugin of ``make gpu-check`` (``-p _gpu_select``, benchmarks/tools on PYTHONPATH): keeps only
the tests that need a GPU -- marked ``gpu``, or skipped without CUDA (tests/conftest.py's ``cuda``
marker and the like: a ``skipif`` whose reason names CUDA)."""

from __future__ import annotations


def _needs_gpu(item) -> bool:
    if item.get_closest_marker("gpu") is not None:
        return True
    return any("cuda" in str(m.kwargs.get("reason", "")).lower() for m in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if _needs_gpu(i)]
    drop = [i for i in items if not _needs_gpu(i)]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
