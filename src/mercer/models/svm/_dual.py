"""One SMO solve on a subset of the training samples, shared by the whole SVM family.

:func:`solve_on` builds the kernel rows of the samples ``idx`` (:class:`~mercer.models.svm._svc._Rows`:
blocked products, or the RBF rows computed inside the compiled loop), sizes the row cache from the
execution plan (or ``cache_size``) and the prefetch batch, and runs
:func:`~mercer.models.svm._smo.solve_smo` on LIBSVM's general dual
:math:`\\min_\\alpha \\tfrac12 \\alpha^T Q \\alpha + p^T \\alpha`, :math:`y^T \\alpha = \\delta`,
:math:`0 \\le \\alpha_t \\le C_t`: C-SVC (:class:`~mercer.models.svm.KernelSVC`), nu-SVC
(:class:`~mercer.models.svm.NuSVC`), epsilon- and nu-SVR (:class:`~mercer.models.svm.KernelSVR`,
:class:`~mercer.models.svm.NuSVR`, two variables per sample reading one kernel row) and the
one-class SVM (:class:`~mercer.models.svm.OneClassSVM`).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ...linalg import SVM_BATCH_BYTES, MiB, NumericalWarning, plan_rows
from ._smo import SMOResult, solve_smo

__all__ = ["solve_on"]

#: Most kernel rows computed per cache miss (the missing row and the top violators) ...
MAX_BATCH = 64
#: ... and fewest, when the rows are so long that a batch of 64 would pass
#: :data:`mercer.linalg.SVM_BATCH_BYTES`.
MIN_BATCH = 8
#: Bytes per entry of the kernel-row cache: float32 rows, as LIBSVM's.
CACHE_ITEMSIZE = 4
#: Smallest stopping tolerance SMO is run with: its float64 gradient, updated a column at a time,
#: does not resolve smaller KKT violations (tol=1e-300 ran to the 10^7-iteration limit; 1e-13 stops).
TOL_MIN = 1e-12


def solver_tol(est) -> float:
    """``est.tol``, or :data:`TOL_MIN` with a warning when it is smaller (a fit that could not stop)."""
    tol = float(est.tol)
    if tol >= TOL_MIN:
        return tol
    warnings.warn(f"{type(est).__name__}: tol={tol:g} is below what SMO's float64 gradient resolves; it stops "
                  f"at tol={TOL_MIN:g} instead (a smaller tol would only run to max_iter).", NumericalWarning,
                  stacklevel=5)
    return TOL_MIN


def solve_on(est, Xt: torch.Tensor, idx: np.ndarray, y: np.ndarray, Cb: np.ndarray, *, p=None, alpha0=None,
             pairs: bool = False, nu: bool = False) -> SMOResult:
    """Solve the dual of estimator ``est`` (its kernel ``kernel_``, ``tol``, ``shrinking``,
    ``max_iter``, ``cache_size`` and execution plan) on samples ``idx`` of ``Xt``.

    ``y``, ``Cb``, ``p``, ``alpha0``: per variable (see :func:`~mercer.models.svm._smo.solve_smo`);
    ``pairs``: two variables per sample (SVR: variable ``t`` and ``t + n`` read sample ``t``'s
    kernel row), so ``len(y) == 2 len(idx)``; ``nu``: LIBSVM's Solver_NU. Sets ``index`` of the result.
    """
    from ._svc import _Rows  # the row source of KernelSVC (imported here: _svc imports this module)

    n = len(idx)
    it = torch.as_tensor(idx, device=Xt.device)
    rows = _Rows(est.kernel_, Xt[it], est._budget, cols=it if est.kernel_.is_precomputed else None,
                 owner=type(est).__name__)
    width = 2 * n if pairs else n  # a cached row holds one entry per variable
    # The cache's capacity (LIBSVM's cache_size): at least the two rows of the pair being updated.
    # (a cache_size of 1e308 MiB is inf bytes: capped, never int(inf))
    cache_bytes = est._plan.share("row cache") if est.cache_size is None else int(min(est.cache_size * MiB, 2.0**62))
    cache_rows = max(2, min(n, cache_bytes // max(1, width * CACHE_ITEMSIZE)))
    batch = plan_rows(MAX_BATCH, width * CACHE_ITEMSIZE, budget=est._budget, min_rows=MIN_BATCH,
                      max_bytes=SVM_BATCH_BYTES, what="a batch of kernel rows")
    rmap = np.concatenate([np.arange(n), np.arange(n)]) if pairs else None
    res = solve_smo(rows, rows.diag(), y, Cb, matvec=rows.matvec, cache_rows=cache_rows, cache_dtype=np.float32,
                    tol=solver_tol(est), shrinking=bool(est.shrinking), max_iter=int(est.max_iter), batch=batch,
                    features=rows.features(), p=p, alpha0=alpha0, rmap=rmap, nu=nu)
    res.index = idx
    return res
