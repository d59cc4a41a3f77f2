"""Kernel logistic regression: exact Newton on the dual, or Newton on Nyström features for large n.

The model is :math:`f(x) = \\sum_j a_j k(x_j, x) + b` (one column per class for more than two
classes), fitted by minimising scikit-learn's ``LogisticRegression`` objective on the kernel's
feature map :math:`\\phi`, with :math:`w = \\sum_j a_j \\phi(x_j)`:

.. math:: J(a, b) = \\tfrac12 \\sum_c a_c^T K a_c
          + C \\sum_i s_i\\, \\ell\\big(y_i, (K a)_i + b\\big),

with ``C`` the inverse regularisation strength exactly as in scikit-learn (``C = 1 / alpha``;
the seeds' :math:`\\lambda` is ``1 / (n C)``), :math:`s_i` the sample weights times the class
weights, :math:`\\ell` the binary logistic loss for two classes and the multinomial (softmax)
loss for more, and an unpenalised intercept ``b``. With the linear kernel this is
``LogisticRegression(C=C)`` and ``X.T @ a`` is its ``coef_``.

Both solvers are Newton's method with a backtracking line search, in a basis in which the
Newton systems are well conditioned and solved by preconditioned conjugate gradients:

* ``"newton"`` (exact): ``K = U diag(lam) U^T``; with :math:`\\Phi = U \\Lambda^{1/2}` the problem is
  logistic regression on the ``n`` features :math:`\\Phi` (``a = U \\Lambda^{-1/2} w``), whose
  Hessian :math:`I + \\Phi^T W \\Phi` is preconditioned by :math:`I + \\tau \\Lambda` (exact when the
  IRLS weights ``W`` are constant). One eigendecomposition, then a few GEMMs per CG step.
  Needs two ``n x n`` matrices within the memory budget.
* ``"nystroem"``: the same on the Nyström features :math:`\\Phi = K_{nM} K_{MM}^{-1/2}` of ``M``
  landmarks drawn uniformly (as ``sklearn.kernel_approximation.Nystroem`` with the same
  ``random_state``), rotated so that :math:`\\Phi^T \\Phi` is diagonal; memory ``O(n M)``. The model
  keeps the ``M`` landmarks and their coefficients. With all points as landmarks it equals the
  exact model.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..._backend import as_output, check_random_state, to_numpy
from ..._validation import Interval, Options, check_params
from ...linalg import KernelOperator, MemoryBudgetError, conjugate_gradient, format_bytes
from ...linalg import eigh as _eigh  # in a worker thread for large matrices: Ctrl-C is heard
from .._base import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, KernelEstimatorMixin, labels_from_scores
from ._common import _classifier_setup, _serial_if_small

__all__ = ["KernelLogisticRegression"]

log = logging.getLogger(__name__)

#: ``solver="auto"`` uses the exact solver up to this many samples (when the budget allows).
_AUTO_EXACT_MAX_N = 5000


# -- the loss ----------------------------------------------------------------------------------
class _Loss:
    """Binary (one column, targets 0/1) or multinomial (``C`` columns, one-hot targets) logistic
    loss with per-sample weights ``c_i = C * s_i``."""

    def __init__(self, T: torch.Tensor, c: torch.Tensor, multinomial: bool):
        self.T, self.c, self.multinomial = T, c, multinomial

    def value(self, F: torch.Tensor) -> float:
        if self.multinomial:
            per = torch.logsumexp(F, dim=1) - (F * self.T).sum(dim=1)
        else:
            f = F[:, 0]
            per = torch.nn.functional.softplus(f) - self.T[:, 0] * f
        return float(self.c @ per)

    def grad_and_curvature(self, F: torch.Tensor):
        """Gradient ``dJ/dF`` (n, k) and the weighted probabilities that define ``W``."""
        if self.multinomial:
            P = torch.softmax(F, dim=1)
        else:
            P = torch.sigmoid(F)
        G = self.c[:, None] * (P - self.T)
        return G, P

    def hess(self, P: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """``W V`` with ``W_i = c_i (diag(p_i) - p_i p_i^T)`` (multinomial) or ``c_i p_i (1 - p_i)``."""
        if self.multinomial:
            PV = P * V
            return self.c[:, None] * (PV - P * PV.sum(dim=1, keepdim=True))
        return (self.c * (P[:, 0] * (1 - P[:, 0])))[:, None] * V

    def mean_curvature(self, P: torch.Tensor) -> torch.Tensor:
        """Diagonal of ``W`` averaged over the samples, per column (preconditioner)."""
        d = P * (1 - P)
        return (self.c[:, None] * d).mean(dim=0)


def _newton(Phi: torch.Tensor, lam: torch.Tensor, loss: _Loss, *, fit_intercept: bool, tol: float,
            max_iter: int, cg_max_iter: int, owner: str):
    """Minimise ``0.5 ||w||^2 + L(Phi w + b)`` by Newton-CG with a backtracking line search.

    ``Phi`` (n, m) has orthogonal columns with squared norms ``lam`` (m,). Returns ``w (m, k)``,
    ``b (k,)``, the number of iterations, whether it converged and the total CG iterations.
    """
    n, m = Phi.shape
    k = loss.T.shape[1]
    dt, dev = Phi.dtype, Phi.device
    w = torch.zeros(m, k, dtype=dt, device=dev)
    b = torch.zeros(k, dtype=dt, device=dev)
    F = torch.zeros(n, k, dtype=dt, device=dev)
    J = loss.value(F)
    converged, cg_total, cg_tol = False, 0, 1e-2
    it = 0
    for it in range(1, max_iter + 1):
        step, dF, slope, n_cg = _newton_direction(Phi, lam, loss, w, F, fit_intercept=fit_intercept,
                                                  cg_tol=cg_tol, cg_max_iter=cg_max_iter)
        cg_total += n_cg
        # J is only known to round-off: a decrease below that cannot be measured.
        slack = 16 * torch.finfo(dt).eps * max(abs(J), 1.0)
        t, J_new = _backtrack(loss, w, step[:m], F, dF, J, slope, slack)
        if t is None:
            warnings.warn(f"{owner}: the line search found no decrease (objective {J:.6g}); stopping.",
                          ConvergenceWarning, stacklevel=3)
            break
        w.add_(step[:m], alpha=t)
        b.add_(step[m], alpha=t)
        F.add_(dF, alpha=t)
        change = t * float(dF.abs().max()) if n else 0.0
        stalled = t == 1.0 and J - J_new <= slack  # at the optimum to working precision
        J = min(J, J_new)
        # Inexact Newton: tighten the CG tolerance as the steps shrink (Eisenstat-Walker style).
        cg_tol = min(1e-2, max(1e-12, change * 1e-2))
        if t == 1.0 and (change <= tol or stalled):
            converged = True
            break
    return w, b, it, converged, cg_total


def _newton_direction(Phi, lam, loss: _Loss, w, F, *, fit_intercept: bool, cg_tol: float, cg_max_iter: int):
    """The Newton step at ``(w, F = Phi w + b)`` by preconditioned CG over the weights and the
    intercept (the last row); returns the step (m + 1, k), its change of ``F``, the directional
    derivative and the CG iterations. Falls back to the preconditioned gradient when CG breaks down."""
    n, m = Phi.shape
    G, P = loss.grad_and_curvature(F)
    g = torch.cat([w + Phi.T @ G, G.sum(dim=0, keepdim=True)])  # (m + 1, k): weights, intercept
    if not fit_intercept:
        g[m] = 0
    tau = loss.mean_curvature(P)                                   # (k,)
    diag = 1.0 + lam[:, None] * tau[None, :]
    b_diag = float(n * tau.mean()) if fit_intercept else 1.0
    b_diag = b_diag if b_diag > 0 else 1.0

    def matvec(V):
        Z = loss.hess(P, Phi @ V[:m] + V[m])
        out = torch.cat([V[:m] + Phi.T @ Z, Z.sum(dim=0, keepdim=True)])
        if not fit_intercept:
            out[m] = V[m]
        return out

    def precond(R):
        return torch.cat([R[:m] / diag, R[m:] / b_diag])

    # One CG over all (m + 1) x k unknowns: the classes are coupled through the softmax.
    shape = g.shape
    info = conjugate_gradient(lambda v: matvec(v.reshape(shape)).reshape(-1, 1), -g.reshape(-1, 1),
                              preconditioner=lambda r: precond(r.reshape(shape)).reshape(-1, 1),
                              tol=cg_tol, max_iter=cg_max_iter)
    step = info.x.reshape(shape)
    if loss.multinomial:  # the softmax is blind to a common shift of the intercepts
        step[m] -= step[m].mean()
    dF = Phi @ step[:m] + step[m]
    slope = float((g * step).sum())
    if slope >= 0:  # not a descent direction (CG broke down): fall back to the gradient
        step = -precond(g)
        dF = Phi @ step[:m] + step[m]
        slope = float((g * step).sum())
    return step, dF, slope, info.n_iter


def _backtrack(loss: _Loss, w, dw, F, dF, J: float, slope: float, slack: float):
    """Armijo backtracking on ``J(t) = 0.5 ||w + t dw||^2 + L(F + t dF)``: the step length and
    the objective there, or ``(None, None)`` when 40 halvings find no decrease."""
    ww, wd, dd = float((w * w).sum()), float((w * dw).sum()), float((dw ** 2).sum())
    t = 1.0
    for _ in range(40):
        J_new = 0.5 * (ww + 2 * t * wd + t * t * dd) + loss.value(F + t * dF)
        if J_new <= J + 1e-4 * t * slope + slack:
            return t, J_new
        t *= 0.5
    return None, None


class KernelLogisticRegression(ClassifierMixin, KernelEstimatorMixin, BaseEstimator):
    """Kernel logistic regression (binary and multinomial), exact or Nyström, with ``predict_proba``.

    Minimises scikit-learn's ``LogisticRegression`` objective on the kernel's feature map (see
    the module docstring): ``0.5 ||w||^2 + C * sum_i s_i loss_i``, unpenalised intercept.

    Parameters
    ----------
    C : float > 0, default=1.0
        Inverse regularisation strength, as in ``LogisticRegression`` (``alpha = 1 / C``).
    kernel : str or mercer Kernel, default="rbf"
    gamma, degree, coef0, kernel_params :
        Passed to a kernel given by name.
    solver : {"auto", "newton", "nystroem"}, default="auto"
        ``"newton"``: exact (``O(n^2)`` memory, ``O(n^3)`` once for the eigendecomposition);
        ``"nystroem"``: ``n_components`` landmarks (``O(n M)`` memory). ``"auto"``: exact up to
        5,000 samples when two ``n x n`` matrices fit the memory budget, else Nyström.
    n_components : int, default=500
        Nyström landmarks ``M`` (all samples when there are fewer; see ``n_components_``).
    fit_intercept : bool, default=True
    max_iter : int, default=100
        Newton iterations.
    tol : float, default=1e-6
        Converged when a full Newton step changes no training decision value (logit) by more than ``tol``.
    cg_max_iter : int, default=500
        Conjugate-gradient iterations per Newton step (an unfinished solve still gives a descent step).
    class_weight : dict, "balanced" or None
        Multiplies the sample weights, as in scikit-learn.
    random_state : int, RandomState or None
        Draws the Nyström landmarks (``sklearn.kernel_approximation.Nystroem``'s sampling).
    device, dtype, memory_budget :
        As in every mercer estimator.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    dual_coef_ : tensor of shape (n_centres, n_columns)
        ``a``: coefficients of ``k(x, centres_)`` (one column for two classes, favouring ``classes_[1]``).
    centres_ : tensor of shape (n_centres, n_features)
        The training samples (exact) or the landmarks (Nyström); empty with a precomputed kernel.
    centre_indices_ : ndarray of shape (n_centres,)
        Their indices in the training data.
    intercept_ : ndarray of shape (n_columns,)
    n_iter_ : int
        Newton iterations; ``n_cg_iter_``: conjugate-gradient iterations in total.
    converged_ : bool
    n_components_ : int
        Centres used; ``rank_``: dimension of the feature basis kept (eigenvalues above round-off).
    solver_ : str
    objective_ : float
        Final value of the objective.
    kernel_ : Kernel
    fit_time_ : float
    """

    _parameter_constraints: dict = {
        **KERNEL_CONSTRAINTS,
        **COMPUTE_CONSTRAINTS,
        "C": [Interval(Real, 0, math.inf, closed="neither")],
        "solver": [Options("auto", "newton", "nystroem")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, math.inf, closed="left")],
        "cg_max_iter": [Interval(Integral, 1, None, closed="left")],
        "class_weight": [dict, Options("balanced"), None],
        "random_state": ["random_state"],
    }

    def __init__(self, C=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1, kernel_params=None,
                 solver="auto", n_components=500, fit_intercept=True, max_iter=100, tol=1e-6, cg_max_iter=500,
                 class_weight=None, random_state=None, device=None, dtype=None, memory_budget=None):
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.solver = solver
        self.n_components = n_components
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.cg_max_iter = cg_max_iter
        self.class_weight = class_weight
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) — or the (n, n) Gram matrix for ``kernel="precomputed"`` — and labels ``y``."""
        check_params(self)
        owner = type(self).__name__
        X, Xt, y, codes, sw, cw = _classifier_setup(self, X, y, sample_weight)
        n, n_classes = X.shape[0], len(self.classes_)
        multinomial = n_classes > 2
        T = (codes[:, None] == np.arange(n_classes)[None, :]) if multinomial else (codes == 1)[:, None]
        T = torch.as_tensor(T, dtype=self._dtype, device=self._device)
        c = torch.as_tensor(self.C * sw * cw[codes], dtype=self._dtype, device=self._device)
        t0 = time.perf_counter()
        self.solver_ = self._pick_solver(n, Xt.element_size())
        with _serial_if_small(self._device, n):
            if self.solver_ == "newton":
                centres, Phi, lam, basis = self._exact_basis(Xt)
            else:
                centres, Phi, lam, basis = self._nystroem_basis(Xt)
            self.rank_ = int(lam.numel())
            w, b, self.n_iter_, self.converged_, self.n_cg_iter_ = _newton(
                Phi, lam, _Loss(T, c, multinomial), fit_intercept=bool(self.fit_intercept), tol=float(self.tol),
                max_iter=self.max_iter, cg_max_iter=self.cg_max_iter, owner=owner)
        F = Phi @ w + b
        self.objective_ = 0.5 * float((w * w).sum()) + _Loss(T, c, multinomial).value(F)
        self.dual_coef_ = basis @ w
        self.intercept_ = to_numpy(b).astype(np.float64)
        self.centre_indices_ = centres
        self.n_components_ = len(centres)
        centres_t = torch.as_tensor(centres, device=self._device)
        self.centres_ = Xt[centres_t] if not self.kernel_.is_precomputed else \
            torch.zeros(0, Xt.shape[1], dtype=self._dtype, device=self._device)
        self.fit_time_ = time.perf_counter() - t0
        if not self.converged_:
            warnings.warn(
                f"{owner}: Newton did not converge in max_iter={self.max_iter} iterations (tol={self.tol:g}); "
                "increase max_iter, or lower C (stronger regularisation) if the classes are separable.",
                ConvergenceWarning, stacklevel=2,
            )
        log.info("%s: %s solver, %d Newton / %d CG iterations, %.2f s", owner, self.solver_, self.n_iter_,
                 self.n_cg_iter_, self.fit_time_)
        return self

    def _pick_solver(self, n: int, itemsize: int) -> str:
        exact_fits = 2 * n * n * itemsize < self._budget
        if self.solver == "auto":
            return "newton" if exact_fits and n <= _AUTO_EXACT_MAX_N else "nystroem"
        if self.solver == "newton" and not exact_fits:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the exact solver holds two {n} x {n} matrices "
                f"({format_bytes(2 * n * n * itemsize)}), more than the memory budget of "
                f"{format_bytes(self._budget)}. Use solver='nystroem' (n_components landmarks) or raise memory_budget."
            )
        return self.solver

    @staticmethod
    def _keep(eigvals: torch.Tensor) -> torch.Tensor:
        """Eigenvalues above round-off (relative to the largest)."""
        if eigvals.numel() == 0:
            return eigvals > 0
        top = float(eigvals.max())
        eps = torch.finfo(eigvals.dtype).eps
        return eigvals > max(top, 0.0) * eigvals.numel() * eps

    def _exact_basis(self, Xt):
        """``K = U diag(lam) U^T``: features ``Phi = U sqrt(lam)``, ``a = U lam^{-1/2} w``."""
        n = Xt.shape[0]
        K = KernelOperator(self.kernel_, Xt, memory_budget=self._budget).dense()
        lam, U = _eigh(K)
        del K
        keep = self._keep(lam)
        lam, U = lam[keep], U[:, keep]
        root = lam.sqrt()
        basis = U / root
        Phi = U.mul_(root)
        return np.arange(n), Phi, lam, basis

    def _nystroem_basis(self, Xt):
        """Landmarks as ``sklearn.kernel_approximation.Nystroem`` draws them; features
        ``K_nM K_MM^{-1/2}`` rotated to orthogonal columns (``Phi^T Phi = diag(lam)``)."""
        n = Xt.shape[0]
        M = min(int(self.n_components), n)
        rng = check_random_state(self.random_state)
        centres = np.sort(rng.permutation(n)[:M])
        ct = torch.as_tensor(centres, device=self._device)
        itemsize = Xt.element_size()
        need = 2 * n * M * itemsize
        if need >= self._budget:
            raise MemoryBudgetError(
                f"{type(self).__name__}: the Nyström solver holds two {n} x {M} matrices ({format_bytes(need)}), "
                f"more than the memory budget of {format_bytes(self._budget)}; lower n_components or raise memory_budget."
            )
        if self.kernel_.is_precomputed:
            K_nM = Xt[:, ct].clone()
            K_MM = K_nM[ct]
        else:
            K_MM = self.kernel_(Xt[ct])
            K_nM = KernelOperator(self.kernel_, Xt, Xt[ct], memory_budget=self._plan.holding(need / 2)).dense()
        mu, V = _eigh(0.5 * (K_MM + K_MM.T))
        keep = self._keep(mu)
        N = V[:, keep] / mu[keep].sqrt()                 # K_MM^{-1/2} on its range
        Phi0 = K_nM @ N
        del K_nM
        lam, Q = _eigh(Phi0.T @ Phi0)
        Phi = Phi0 @ Q
        del Phi0
        return centres, Phi, lam.clamp_min(0), N @ Q

    # -- predict ------------------------------------------------------------------------------
    def _decision(self, X) -> torch.Tensor:
        check_is_fitted(self, "dual_coef_")
        Xv = self._validate_X(X, reset=False)
        Xt = self._tensor(Xv)
        coef = self.dual_coef_
        out = torch.as_tensor(self.intercept_, dtype=self._dtype, device=self._device).expand(Xt.shape[0], -1).clone()
        with _serial_if_small(self._device, max(Xt.shape[0], coef.shape[0])):
            if self.kernel_.is_precomputed:
                out.addmm_(Xt[:, torch.as_tensor(self.centre_indices_, device=self._device)], coef)
            else:
                op = KernelOperator(self.kernel_, Xt, self.centres_, memory_budget=self._budget, n_rhs=coef.shape[1])
                out.add_(op.matvec(coef))
        return out

    def decision_function(self, X):
        """Logits: shape (n,) for two classes (log-odds of ``classes_[1]``), else (n, n_classes)."""
        out = self._decision(X)
        return as_output(out[:, 0] if out.shape[1] == 1 else out, X)

    def predict_proba(self, X):
        """Class probabilities, shape (n, n_classes), columns in the order of ``classes_``."""
        F = self._decision(X)
        P = torch.cat([torch.sigmoid(-F), torch.sigmoid(F)], dim=1) if F.shape[1] == 1 else torch.softmax(F, dim=1)
        return as_output(P, X)

    def predict_log_proba(self, X):
        F = self._decision(X)
        L = torch.cat([torch.nn.functional.logsigmoid(-F), torch.nn.functional.logsigmoid(F)], dim=1) \
            if F.shape[1] == 1 else torch.log_softmax(F, dim=1)
        return as_output(L, X)

    def predict(self, X):
        scores = self._decision(X)  # checks that the model is fitted first
        return labels_from_scores(self.classes_, scores, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        return tags
