"""Gradient-based hyperparameter optimisation shared by the estimators that learn their kernel.

The objective is a torch function of one parameter vector ``theta`` (log-hyperparameters, and
possibly unconstrained extras such as inducing-point coordinates); autograd gives its gradient.
Two optimisers:

* ``"lbfgs"``: SciPy's L-BFGS-B on ``theta`` with the box bounds (log space), gradients from
  torch -- the same optimiser and bounds scikit-learn's GaussianProcessRegressor uses, so the
  optima are comparable;
* ``"adam"``: ``torch.optim.Adam``, projected onto the bounds after every step (works on any
  device without leaving it).

Restarts start from the initial point perturbed uniformly by up to ``spread`` (log units, i.e.
a factor ``e^spread``) in every perturbable coordinate, clipped into the bounds. Everything a run
did is returned (:class:`RunReport`), and :func:`report` turns it into warnings: an optimum on a
bound, or a run that stopped without converging.

Also shared by those estimators: the allowed values of their optimiser parameters
(:data:`OPTIMIZER_CONSTRAINTS`, merged into their ``_parameter_constraints``), the check of a
bounds pair (:func:`check_bounds`) and a differentiable Cholesky factorisation with a growing
jitter (:func:`chol_with_jitter`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import warnings

import numpy as np
import torch
from scipy.optimize import minimize as _scipy_minimize
from sklearn.exceptions import ConvergenceWarning

from .._backend import check_random_state
from .._progress import task
from .._threads import serial_blas
from .._validation import Interval, Options, describe

__all__ = ["OPTIMIZER_CONSTRAINTS", "RunReport", "check_bounds", "check_target_scale", "chol_with_jitter", "minimise_into",
           "optimize", "report"]

log = logging.getLogger(__name__)

_BAD = 1e30  # objective value reported for a point where the objective cannot be evaluated


@dataclasses.dataclass
class RunReport:
    """What one optimisation run did (objective values are the minimised loss)."""

    start: int
    initial_loss: float
    loss: float
    theta: np.ndarray
    converged: bool
    n_iter: int
    n_evals: int
    message: str

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["theta"] = self.theta.tolist()
        return d


#: Allowed values of the optimiser parameters, merged into the ``_parameter_constraints`` of the
#: estimators that learn their hyperparameters with :func:`optimize`.
OPTIMIZER_CONSTRAINTS: dict = {
    "optimizer": [Options("lbfgs", "adam"), None],
    "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
    "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
}


def check_bounds(owner: str, name: str, bounds) -> tuple[float, float]:
    """The bounds pair ``(low, high)`` of positive hyperparameters, ``0 < low < high < inf``, as floats."""
    ok = (isinstance(bounds, (tuple, list)) and len(bounds) == 2
          and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in bounds)
          and 0 < bounds[0] < bounds[1] < math.inf)
    if not ok:
        raise ValueError(f"The {name!r} parameter of {owner} must be a pair (low, high) with 0 < low < high < inf. "
                         f"Got {describe(bounds)} instead.")
    return float(bounds[0]), float(bounds[1])


def chol_with_jitter(K: torch.Tensor) -> torch.Tensor:
    """Differentiable Cholesky factor of ``K``, with a growing jitter (1e-10, relative to the mean
    diagonal, in float64; 1e-6 in float32; up to 10^6 times more) when K is numerically indefinite."""
    from ..linalg import interruptible as _interruptible  # large K: factored in a worker thread, Ctrl-C is heard

    L, info = _interruptible(lambda: torch.linalg.cholesky_ex(K), K, "Cholesky factorisation")
    if int(info) == 0:
        return L
    scale = float(K.diagonal().detach().abs().mean()) or 1.0
    start = 1e-6 if K.dtype == torch.float32 else 1e-10
    eye = torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
    for i in range(7):
        Kj = K + (start * scale * 10**i) * eye
        L, info = _interruptible(lambda: torch.linalg.cholesky_ex(Kj), Kj, "Cholesky factorisation")  # noqa: B023
        if int(info) == 0:
            return L
    raise torch.linalg.LinAlgError("Cholesky failed even with jitter")


class _EvaluationLimit(Exception):
    """Raised by :class:`_Objective` at its evaluation limit: L-BFGS-B checks ``maxfun`` only between
    iterations, so one long line search would run past it."""


class _Objective:
    """Wraps the torch loss: numpy theta in, (loss, gradient) out; failures become a large loss.
    A call at the point of the previous call returns its result without evaluating again (the
    start is evaluated before the optimiser, whose first call is the start)."""

    def __init__(self, loss_fn, dtype, device, bar=None):
        self.loss_fn, self.dtype, self.device = loss_fn, dtype, device
        self.n_evals = 0
        self.bar = bar  # a progress handle (mercer._progress.task): evaluations and the best loss
        self.best, self.best_x = math.inf, None  # the lowest loss evaluated, and where
        self.limit = None  # at most this many evaluations (optimize's max_evals)
        self._last = None  # (x, loss, gradient) of the previous call

    def __call__(self, x: np.ndarray):
        x = np.asarray(x, dtype=np.float64)
        if self._last is not None and np.array_equal(self._last[0], x):
            return self._last[1], self._last[2].copy()
        if self.limit is not None and self.n_evals >= self.limit:
            raise _EvaluationLimit
        f, g = self._evaluate(x)
        self._last = (x.copy(), f, g.copy())
        return f, g

    def _evaluate(self, x: np.ndarray):
        self.n_evals += 1
        t = torch.tensor(x, dtype=self.dtype, device=self.device, requires_grad=True)
        try:
            loss = self.loss_fn(t)
            if not bool(torch.isfinite(loss.detach())):
                raise FloatingPointError("non-finite objective")
            (grad,) = torch.autograd.grad(loss, t)
        except (RuntimeError, FloatingPointError, np.linalg.LinAlgError, torch.linalg.LinAlgError, ValueError) as exc:
            if isinstance(exc, ValueError) and self.n_evals == 1:
                    raise  # the starting point itself is refused: an input error, not a bad step
            log.debug("objective failed at theta=%s: %s", x, exc)
            return _BAD, np.zeros_like(x)
        g = grad.detach().cpu().numpy().astype(np.float64)
        if not np.all(np.isfinite(g)):
            return _BAD, np.zeros_like(x)
        f = float(loss.detach())
        if f < self.best:
            self.best, self.best_x = f, x.copy()
        if self.bar:
            self.bar.update(self.n_evals, loss=self.best)
        return f, g


def _lbfgs(obj, x0, bounds, max_iter, max_evals=None):
    iterations = [0]

    def count(*_):
        iterations[0] += 1

    if max_evals is not None:
        obj.limit = obj.n_evals + max_evals
    try:
        res = _scipy_minimize(obj, x0, jac=True, method="L-BFGS-B", bounds=[tuple(b) for b in bounds],
                              options={"maxiter": max_iter}, callback=count)
    except _EvaluationLimit:  # the best point evaluated (possibly inside a line search)
        x, f = (x0, _BAD) if obj.best_x is None else (obj.best_x, obj.best)
        return x.copy(), float(f), False, iterations[0], f"reached the limit of {max_evals} evaluations (max_evals)"
    finally:
        obj.limit = None
    msg = res.message if isinstance(res.message, str) else res.message.decode()
    return np.asarray(res.x, dtype=np.float64), float(res.fun), bool(res.success), int(res.nit), msg


def _user_optimizer(method, obj, x0, bounds):
    """scikit-learn's protocol: ``method(obj_func, initial_theta, bounds) -> (theta_opt, func_min)``
    with ``obj_func(theta, eval_gradient=True) -> (loss, gradient)`` (``loss`` alone without)."""

    def obj_func(theta, eval_gradient=True):
        loss, grad = obj(np.asarray(theta, dtype=np.float64))
        return (loss, grad) if eval_gradient else loss

    out = method(obj_func, x0.copy(), bounds.copy())
    try:
        x, f = out
        x = np.asarray(x, dtype=np.float64).reshape(x0.shape)
        f = float(f)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"The optimizer {method!r} must return (theta_opt, func_min) with theta_opt of shape "
                         f"{x0.shape}; got {out!r}.") from exc
    return x, f, True, obj.n_evals, f"callable optimizer {getattr(method, '__name__', method)!r}"


def _adam(obj, x0, bounds, max_iter, lr, dtype, device):
    lo = torch.tensor(np.where(np.isfinite(bounds[:, 0]), bounds[:, 0], -np.inf), dtype=dtype, device=device)
    hi = torch.tensor(np.where(np.isfinite(bounds[:, 1]), bounds[:, 1], np.inf), dtype=dtype, device=device)
    t = torch.tensor(x0, dtype=dtype, device=device, requires_grad=True)
    opt = torch.optim.Adam([t], lr=lr)
    best_x, best_f, history = x0.copy(), math.inf, []
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        opt.zero_grad()
        obj.n_evals += 1
        try:
            loss = obj.loss_fn(t)
            ok = bool(torch.isfinite(loss.detach()))
        except (RuntimeError, np.linalg.LinAlgError, torch.linalg.LinAlgError):
            ok = False
        if not ok:
            # step back half-way towards the best point and go on with a smaller rate
            with torch.no_grad():
                t.copy_(0.5 * (t + torch.as_tensor(best_x, dtype=dtype, device=device)))
            for g in opt.param_groups:
                g["lr"] *= 0.5
            continue
        f = float(loss.detach())
        if f < best_f:
            best_f, best_x = f, t.detach().cpu().numpy().astype(np.float64).copy()
        history.append(f)
        loss.backward()
        opt.step()
        with torch.no_grad():
            t.copy_(torch.maximum(torch.minimum(t, hi), lo))
        if len(history) > 20 and abs(history[-21] - history[-1]) <= 1e-7 * max(1.0, abs(history[-1])):
            converged = True
            break
    msg = "relative change of the objective over 20 steps below 1e-7" if converged else f"reached max_iter={max_iter}"
    return best_x, best_f, converged, it, msg


def optimize(loss_fn, theta0, bounds, *, method: str, max_iter: int, n_restarts: int, rng: np.random.RandomState,
             dtype=torch.float64, device="cpu", perturb=None, spread: float | None = math.log(10.0), lr: float = 0.05,
             desc: str = "learning kernel hyperparameters", max_evals: int | None = None):
    """Minimise ``loss_fn(theta)`` from ``theta0`` and ``n_restarts`` perturbed starts.

    Parameters
    ----------
    loss_fn : callable
        torch tensor ``theta`` (requires grad) -> scalar tensor.
    method : {"lbfgs", "fmin_l_bfgs_b", "adam"} or callable
        A callable follows scikit-learn's protocol (``method(obj_func, theta0, bounds)`` returns
        ``(theta_opt, func_min)``).
    theta0 : ndarray of shape (p,)
    bounds : ndarray of shape (p, 2)
        ``-inf`` / ``inf`` for unbounded coordinates.
    perturb : boolean ndarray of shape (p,), optional
        Coordinates that restarts perturb (default: the bounded ones).
    spread : float or None
        Restarts perturb by up to this much (log units); None draws them uniformly within the
        bounds, as scikit-learn's GP does (the bounds must then be finite).
    desc : str
        Progress bar text (inside :func:`mercer.progress`: objective evaluations and the best loss).
    max_evals : int, optional
        L-BFGS: at most this many evaluations of the objective per start besides the start's (line
        searches included). A run stopped by it may stop inside a line search: the best point it
        evaluated is returned.

    Returns
    -------
    best : RunReport
    runs : list of RunReport (one per start)
    """
    theta0 = np.asarray(theta0, dtype=np.float64)
    bounds = np.asarray(bounds, dtype=np.float64).reshape(-1, 2)
    if perturb is None:
        perturb = np.isfinite(bounds).all(axis=1)
    with serial_blas():  # SciPy's L-BFGS-B bookkeeping: one BLAS thread beside torch's (mercer._threads)
        runs = [_start(start, loss_fn, theta0, bounds, perturb, method=method, max_iter=max_iter, rng=rng, dtype=dtype,
                       device=device, spread=spread, lr=lr, desc=desc, max_evals=max_evals, n_restarts=n_restarts)
                for start in range(n_restarts + 1)]
    best = min(runs, key=lambda r: r.loss)
    return best, runs


def _start(start, loss_fn, theta0, bounds, perturb, *, method, max_iter, rng, dtype, device, spread, lr, desc, max_evals,
           n_restarts) -> RunReport:
    """One run of :func:`optimize`: start ``start`` (0: ``theta0`` itself)."""
    x0 = np.clip(theta0, bounds[:, 0], bounds[:, 1])  # a start outside the box is moved onto it
    if start and spread is None:
        x0 = rng.uniform(bounds[:, 0], bounds[:, 1])
    elif start:
        x0[perturb] += rng.uniform(-spread, spread, size=int(perturb.sum()))
        x0 = np.clip(x0, bounds[:, 0], bounds[:, 1])
    with task(f"{desc} (start {start + 1} of {n_restarts + 1})" if n_restarts else desc, unit="eval") as bar:
        obj = _Objective(loss_fn, dtype, device, bar)
        f0, _ = obj(x0)
        if callable(method):
            x, f, conv, nit, msg = _user_optimizer(method, obj, x0, bounds)
        elif method in ("lbfgs", "fmin_l_bfgs_b"):
            x, f, conv, nit, msg = _lbfgs(obj, x0, bounds, max_iter, max_evals)
        else:
            x, f, conv, nit, msg = _adam(obj, x0, bounds, max_iter, lr, dtype, device)
    if not f <= f0:  # never hand back a point worse than the start
        x, f = x0, f0
    log.info("start %d: loss %.6g -> %.6g in %d iterations (%s)", start, f0, f, nit, msg)
    return RunReport(start, f0, f, x, conv, nit, obj.n_evals, msg)


def minimise_into(est, loss, theta: np.ndarray, bounds: np.ndarray, names: list, *, what: str, dtype,
                  device, perturb=None, desc: str | None = None, max_iter: int | None = None,
                  n_restarts: int | None = None, max_evals: int | None = None) -> np.ndarray:
    """Minimise ``loss`` from ``theta`` with ``est``'s optimizer settings (``optimizer``, ``max_iter``,
    ``n_restarts_optimizer``, ``random_state``; ``max_iter`` / ``n_restarts`` given here replace
    ``est``'s; ``max_evals`` as in :func:`optimize`), or only evaluate it when ``est.optimizer`` is
    None or there is nothing to learn. Sets
    ``optimizer_results_``, ``n_evals_``, ``n_iter_`` and ``cv_error_`` on ``est`` (the objective
    ``what`` is minimised); returns the best theta. ``names`` and ``bounds`` name the reported
    coordinates (the first ``len(names)``)."""
    est.optimizer_results_ = []
    if est.optimizer is not None and theta.size:
        extra = {} if desc is None else {"desc": desc}
        best, runs = optimize(loss, theta, bounds, method=est.optimizer,
                              max_iter=est.max_iter if max_iter is None else max_iter,
                              n_restarts=est.n_restarts_optimizer if n_restarts is None else n_restarts,
                              rng=check_random_state(est.random_state),
                              dtype=dtype, device=device, perturb=perturb, max_evals=max_evals, **extra)
        est.optimizer_results_ = [r.as_dict() for r in runs]
        est.n_evals_ = int(sum(r.n_evals for r in runs))
        report(best, runs, names, bounds[:len(names)], owner=type(est).__name__, what=what, maximised=False)
        est.cv_error_ = float(best.loss)
        est.n_iter_ = max(1, int(best.n_iter))
        return best.theta
    with torch.no_grad():
        est.cv_error_ = float(loss(torch.as_tensor(theta, dtype=dtype, device=device)))
    est.n_evals_ = est.n_iter_ = 1
    return theta


def report(best: RunReport, runs, names, bounds, *, owner: str, what: str = "log marginal likelihood",
           maximised: bool = True, bound_warnings: bool = True) -> None:
    """Warn when the optimum sits on a bound (unless ``bound_warnings=False``: the caller warns
    its own way) or the best run stopped without converging."""
    bounds = np.asarray(bounds, dtype=np.float64).reshape(-1, 2)
    for i, name in enumerate(names if bound_warnings else ()):
        lo, hi = bounds[i]
        for side, b in (("lower", lo), ("upper", hi)):
            if np.isfinite(b) and abs(best.theta[i] - b) <= 1e-2:
                warnings.warn(
                    f"{owner}: the optimal value found for hyperparameter {name!r} "
                    f"({math.exp(best.theta[i]):.3g}) is at its {side} bound {math.exp(b):.3g}. "
                    f"{'Decreasing' if side == 'lower' else 'Increasing'} the bound and fitting again "
                    "may find a better value.",
                    ConvergenceWarning, stacklevel=3,
                )
    if best.loss >= _BAD:
        raise np.linalg.LinAlgError(
            f"{owner}: the {what} could not be evaluated at any start (Cholesky failed); the kernel "
            "is far from positive definite or the noise is too small."
        )
    if not best.converged:
        gain = best.initial_loss - best.loss
        sgn = -1.0 if maximised else 1.0
        warnings.warn(
            f"{owner}: the hyperparameter optimisation stopped without converging ({best.message}); "
            f"the {what} improved by {gain:.3g} (from {sgn * best.initial_loss:.6g} to {sgn * best.loss:.6g}"
            f"{', i.e. not at all' if gain <= 0 else ''}). Increase max_iter or try another optimizer.",
            ConvergenceWarning, stacklevel=3,
        )


def check_target_scale(owner: str, y: np.ndarray) -> None:
    """The objectives (LOO error, evidence) sum squares of the targets: a ``y`` whose squares
    overflow float64 is refused by name (it was "could not be evaluated at any start")."""
    n = max(int(y.shape[0]), 1) * (int(y.shape[1]) if y.ndim == 2 else 1)
    ymax = float(np.max(np.abs(y))) if y.size else 0.0
    if ymax > math.sqrt(np.finfo(np.float64).max / n):
        raise ValueError(f"{owner}: target values too large: the squares of y overflow float64 (largest |y| = "
                         f"{ymax:.3g}); rescale y.")
