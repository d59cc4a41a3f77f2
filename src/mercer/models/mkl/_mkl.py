"""Multiple kernel learning: non-negative weights of base kernels, then a kernel ridge model on
the combined kernel :math:`k = \\sum_i w_i k_i / m_i` (``m_i`` the mean diagonal of ``K_i`` when
``normalize``: every base kernel then has unit mean variance and the weights compare).

Two weight learners:

* **ALIGNF** (Cortes, Mohri & Rostamizadeh, *Algorithms for learning kernels based on centered
  alignment*, JMLR 2012): maximise the centred alignment between :math:`\\sum_i \\mu_i K_i^c` and
  the target kernel :math:`y y^T` over :math:`\\mu \\ge 0`. With
  :math:`M_{ij} = \\langle K^c_i, K^c_j \\rangle_F` and :math:`a_i = \\langle K^c_i, y y^T \\rangle_F`
  this is the QP :math:`v^* = \\arg\\min_{v \\ge 0} v^T M v - 2 v^T a`, :math:`\\mu = v^* / \\|v^*\\|`
  (their Proposition 9), solved exactly as a non-negative least-squares problem. Works for
  regression (``y`` real) and classification (``Y`` the ±1 one-vs-rest codes).
* **EasyMKL** (Aiolli & Donini, *EasyMKL: a scalable multiple kernel learning algorithm*,
  Neurocomputing 2015), for classification: solve
  :math:`\\min_{\\gamma \\in \\Gamma} (1-\\lambda) \\gamma^T Y \\bar K Y \\gamma + \\lambda \\|\\gamma\\|^2`
  on the average kernel (:math:`\\Gamma`: a probability distribution on each class), then
  :math:`w_i \\propto \\gamma^T Y K_i Y \\gamma`. Multi-class: one-vs-rest, weights averaged.

The statistics are accumulated over row blocks of the base kernel matrices, within the memory
budget (every base kernel's ``n x n`` matrix is never held at once); with ``n_components`` each
base kernel is replaced by ``n_components`` Nyström features (large n), and the final model is a
linear ridge on the weighted, concatenated features -- kernel ridge with the combined Nyström kernel.
"""

from __future__ import annotations

import logging
import math
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.optimize
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..._backend import to_numpy
from ..._validation import Interval, Options, check_params, describe
from ...approx import Nystroem, check_finite
from ...kernels import RBF, Kernel, Scaled, Sum, resolve_kernel
from ...linalg import MemoryBudgetError, format_bytes, plan_rows, row_blocks
from .._base import COMPUTE_CONSTRAINTS, KernelEstimatorMixin, check_class_labels
from ..ridge import KernelRidge, KernelRidgeClassifier

__all__ = ["MKLRegressor", "MKLClassifier", "alignf_weights", "kernel_statistics"]

log = logging.getLogger(__name__)


# -- statistics of the base kernels ----------------------------------------------------------------
def kernel_statistics(kernels, X: torch.Tensor, Y: torch.Tensor, *, budget: int, features=None) -> dict:
    """Frobenius products, row sums and target alignments of the base kernels.

    Returns a dict of float64 numpy arrays: ``F`` (p, p) with ``<K_i, K_j>_F``, ``r`` (p, n) row
    sums, ``trace`` (p,), ``a`` (p,) with ``sum_c y_c^T K_i y_c`` for the centred columns of
    ``Y``, and ``Fc`` (p, p), the products of the centred kernels
    ``<K_i, K_j> - 2 r_i . r_j / n + s_i s_j / n^2``. With ``features`` (a list of (n, D_i)
    tensors, ``K_i = Phi_i Phi_i^T``) no kernel matrix is formed.
    """
    n, p = X.shape[0], len(kernels)
    Yc = Y - Y.mean(0, keepdim=True)
    F = torch.zeros(p, p, dtype=torch.float64)
    R = torch.zeros(p, n, dtype=torch.float64)
    tr = torch.zeros(p, dtype=torch.float64)
    a = torch.zeros(p, dtype=torch.float64)
    if features is not None:
        for i, Pi in enumerate(features):
            R[i] = (Pi @ Pi.sum(0)).double().cpu()
            tr[i] = float((Pi * Pi).sum())
            a[i] = float(((Pi.T @ Yc) ** 2).sum())
            for j in range(i + 1):
                F[i, j] = F[j, i] = float(((Pi.T @ features[j]) ** 2).sum())
    else:
        _accumulate_kernel_rows(kernels, X, Yc, budget, F, R, tr, a)
    s_ = R.sum(1)
    Fc = F - 2.0 * (R @ R.T) / n + torch.outer(s_, s_) / n**2
    return {"F": F.numpy(), "r": R.numpy(), "trace": tr.numpy(), "a": a.numpy(), "Fc": Fc.numpy()}


def _accumulate_kernel_rows(kernels, X, Yc, budget, F, R, tr, a) -> None:
    """The statistics of :func:`kernel_statistics` from row blocks of the base kernel matrices."""
    n, p = X.shape[0], len(kernels)
    # a row of the block holds its row of each of the p base kernels, and two temporaries
    # blocks of at most MAX_TILE_BYTES (plan_rows' default): one block of the whole matrix was one
    # uninterruptible kernel call of n x n per base kernel (n = 4,000: Ctrl-C waited 1.4 s)
    rows = plan_rows(n, (p + 2) * n * X.element_size(), budget=budget,
                     what=f"multiple kernel learning (a block of rows of the {p} exact base kernels; n_components= "
                          "uses Nyström features instead)")
    for sl in row_blocks(n, rows, desc="base kernel statistics"):
        tiles = [k(X[sl], X) for k in kernels]
        for i, T in enumerate(tiles):
            R[i, sl] = T.sum(1).double().cpu()
            tr[i] += float(T[:, sl].diagonal().sum())
            a[i] += float((Yc[sl] * (T @ Yc)).sum())
            for j in range(i + 1):
                v = float((T * tiles[j]).sum())
                F[i, j] += v
                if i != j:
                    F[j, i] += v
        del tiles


def alignf_weights(M: np.ndarray, a: np.ndarray) -> np.ndarray:
    """ALIGNF: ``v = argmin_{v >= 0} v^T M v - 2 v^T a``, returned normalised to unit 2-norm.

    ``M`` is positive semi-definite (a Gram matrix of centred kernels) and ``a`` lies in its
    range, so with ``M = R^T R`` (symmetric square root) the QP is the non-negative least
    squares problem ``min ||R v - R^{+T} a||`` (SciPy's active-set NNLS: exact).
    """
    M = 0.5 * (np.asarray(M, dtype=np.float64) + np.asarray(M, dtype=np.float64).T)
    lam, U = np.linalg.eigh(M)
    keep = lam > lam.max() * 1e-12 if lam.max() > 0 else np.zeros_like(lam, dtype=bool)
    R = (U[:, keep] * np.sqrt(lam[keep])).T
    b = (U[:, keep].T @ a) / np.sqrt(lam[keep])
    v, _ = scipy.optimize.nnls(R, b, maxiter=50 * len(a))
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


def _project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection onto the probability simplex (Duchi et al. 2008)."""
    u, _ = torch.sort(v, descending=True)
    css = torch.cumsum(u, 0) - 1.0
    idx = torch.arange(1, v.numel() + 1, dtype=v.dtype, device=v.device)
    rho = int(torch.nonzero(u - css / idx > 0).max())
    return (v - css[rho] / (rho + 1)).clamp_min(0.0)


def easymkl_gamma(matvec, y: torch.Tensor, lam: float, *, max_iter: int = 2000, tol: float = 1e-7):
    """EasyMKL's inner problem ``min_{gamma} (1 - lam) gamma^T Y K Y gamma + lam ||gamma||^2``
    with ``gamma >= 0`` summing to 1 on each class (``y`` in {-1, +1}), by accelerated projected
    gradient (FISTA with adaptive restart). ``matvec(v) = K v``. Returns ``(gamma, converged, n_iter)``."""
    pos, neg = y > 0, y < 0

    def grad(g):
        return 2.0 * (1.0 - lam) * y * matvec(y * g) + 2.0 * lam * g

    def project(g):
        out = torch.empty_like(g)
        out[pos] = _project_simplex(g[pos])
        out[neg] = _project_simplex(g[neg])
        return out

    v = torch.randn(y.numel(), dtype=y.dtype, generator=torch.Generator().manual_seed(0)).to(y.device)  # same on any device
    for _ in range(30):  # power iteration for the Lipschitz constant
        v = y * matvec(y * v)
        v = v / v.norm().clamp_min(1e-300)
    Lip = 2.0 * ((1.0 - lam) * float(v @ (y * matvec(y * v))) * 1.05 + lam) + 1e-12
    g = project(torch.where(pos, 1.0 / pos.sum(), 1.0 / neg.sum()).to(y.dtype))
    z, t = g.clone(), 1.0
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        g_new = project(z - grad(z) / Lip)
        if float((z - g_new) @ (g_new - g)) > 0:  # adaptive restart (O'Donoghue & Candes 2015)
            t = 1.0
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        z = g_new + ((t - 1.0) / t_new) * (g_new - g)
        step = float((g_new - g).norm())
        g, t = g_new, t_new
        if step <= tol * max(1.0, float(g.norm())):
            converged = True
            break
    return g, converged, it


# -- Nyström features -----------------------------------------------------------------------------
class _NystroemMap:
    """Nyström features of one base kernel (:class:`mercer.approx.Nystroem`, fitted in ``est``)."""

    def __init__(self, kernel, n_components, random_state, budget):
        self.kernel, self.n_components, self.random_state, self.budget = kernel, n_components, random_state, budget

    def fit(self, X: torch.Tensor):
        self.est = Nystroem(kernel=self.kernel, n_components=self.n_components, random_state=self.random_state,
                            device=X.device, dtype=X.dtype, memory_budget=self.budget).fit(X)
        return self

    def transform(self, X: torch.Tensor) -> torch.Tensor:
        return self.est.transform(X)


# -- estimators -----------------------------------------------------------------------------------
#: Parameters shared by both MKL estimators (``alpha`` is checked again by the final ridge model).
_MKL_CONSTRAINTS: dict = {
    **COMPUTE_CONSTRAINTS,
    "kernels": ["array-like", None],  # non-empty, of kernels: checked when they are resolved
    "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
    "normalize": ["boolean"],
    "n_components": [Interval(Integral, 1, None, closed="left"), None],
    "random_state": ["random_state"],
}


class _MKLBase(KernelEstimatorMixin, BaseEstimator):
    """Base kernels, their learned weights and the combined kernel, shared by both MKL estimators."""

    # private state that mercer.io saves (the Nystroem maps of n_components are not storable: such a
    # model is refused by save, as before, rather than saved without them)
    _saved_private = ("_maps",)

    def _base_kernels(self, n_features: int) -> list[Kernel]:
        owner = type(self).__name__
        kernels = self.kernels
        if kernels is None:
            return [RBF(gamma=g / n_features) for g in (0.1, 1.0, 10.0)]
        if isinstance(kernels, (str, Kernel)) or not hasattr(kernels, "__len__") or len(kernels) < 1:
            raise ValueError(f"The 'kernels' parameter of {owner} must be a non-empty list of mercer kernels or "
                             f"kernel names. Got {describe(kernels)} instead.")
        out = [resolve_kernel(k, owner=owner) for k in kernels]
        if any(k.is_precomputed for k in out):
            raise ValueError(f"{owner}: precomputed base kernels are not supported; pass kernels on features.")
        return out

    def _learn(self, X, Y: np.ndarray, y_labels=None):
        """Fit weights_ and the combined kernel_; returns the training representation."""
        self._setup_compute(X)
        Xt = self._tensor(X)
        n = Xt.shape[0]
        base = self._base_kernels(Xt.shape[1])
        self.base_kernels_ = base
        Yt = torch.as_tensor(Y, dtype=self._dtype, device=self._device)
        feats = None
        if self.n_components is None:
            self._check_exact_fits(n, Xt.element_size())
        else:
            m = min(self.n_components, n)
            rs = self.random_state if self.random_state is not None else int(np.random.randint(2**31 - 1))
            self._maps = [_NystroemMap(k, m, rs, self._budget).fit(Xt) for k in base]
            feats = [mp.transform(Xt) for mp in self._maps]
        stats = kernel_statistics(base, Xt, Yt, budget=self._budget, features=feats)
        # not a NaN deep inside EasyMKL's simplex projection or a LAPACK routine: the cause
        check_finite([torch.from_numpy(np.asarray(v, dtype=np.float64)) for v in stats.values()], type(self).__name__,
                     "the base kernels' statistics", X=Xt, y=Yt)
        scale = stats["trace"] / n if self.normalize else np.ones(len(base))
        scale = np.where(scale > 0, scale, 1.0)
        self.kernel_scales_ = scale
        if self.method == "alignf":
            Fc = stats["Fc"] / np.outer(scale, scale)
            a = stats["a"] / scale
            w = alignf_weights(Fc, a)
            w = w / w.sum() if w.sum() > 0 else w
        else:
            w = self._easymkl(base, Xt, Y, scale, feats)
        if not np.any(w > 0):
            warnings.warn(f"{type(self).__name__}: every learned weight is 0 (no base kernel aligns with the "
                          "target); using equal weights.", ConvergenceWarning, stacklevel=3)
            w = np.ones(len(base)) / math.sqrt(len(base))
        self.weights_ = w
        self.alignment_ = _alignments(stats, Y)
        terms = [Scaled(float(wi / si), k) for wi, si, k in zip(w, scale, base) if wi > 0]
        self.kernel_ = terms[0] if len(terms) == 1 else Sum(terms)
        if feats is None:
            return X
        return self._combine(feats)

    #: n x n matrices the exact path holds at once (the final kernel ridge solve: its Gram matrix)
    _exact_matrices = 1

    def _check_exact_fits(self, n: int, itemsize: int) -> None:
        """Refuse before any kernel is evaluated when the exact path cannot fit the budget: the final
        solve holds ``_exact_matrices`` n x n matrices. The way out is this estimator's own
        ``n_components`` (Nyström features per base kernel)."""
        need = self._exact_matrices * n * n * itemsize
        if need > self._budget:
            m = max(100, min(2000, n // 10))
            raise MemoryBudgetError(
                f"{type(self).__name__}: without n_components the exact path holds {self._exact_matrices} "
                f"{n} x {n} matri{'x' if self._exact_matrices == 1 else 'ces'} ({format_bytes(need)}), more than "
                f"the memory budget of {format_bytes(self._budget)}; set n_components (e.g. n_components={m}: "
                "each base kernel becomes that many Nyström features) or raise memory_budget.")

    def _combine(self, feats):
        cols = [f * math.sqrt(wi / si) for f, wi, si in zip(feats, self.weights_, self.kernel_scales_) if wi > 0]
        return torch.cat(cols, dim=1)

    def _features(self, X):
        Xt = self._tensor(X)
        return self._combine([mp.transform(Xt) for mp in self._maps])

    def _easymkl(self, base, Xt, Y, scale, feats):  # pragma: no cover - classifier only
        raise NotImplementedError

    def _downstream_input(self, X):
        Xv = self._validate_X(X, reset=False)
        if self.n_components is None:
            return Xv
        F = self._features(Xv)
        return F if isinstance(X, torch.Tensor) else to_numpy(F)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _alignments(stats, Y) -> np.ndarray:
    """Centred alignment of each (normalised) base kernel with the target kernel ``Y Y^T``."""
    Yc = Y - Y.mean(0)
    yy = float(np.linalg.norm(Yc.T @ Yc))  # ||Yc Yc^T||_F
    diag = np.clip(np.diag(stats["Fc"]), 1e-300, None)
    return stats["a"] / np.sqrt(diag) / max(yy, 1e-300)


class MKLRegressor(MultiOutputMixin, RegressorMixin, _MKLBase):
    """Multiple kernel learning for regression: ALIGNF weights, kernel ridge on the combination.

    Parameters
    ----------
    kernels : list of mercer Kernel or str, optional
        Base kernels (any mercer kernels: composites, set kernels, ``Columns(k, cols)`` for
        feature groups). Default: three RBF kernels with ``gamma`` in ``{0.1, 1, 10} / n_features``.
    method : {"alignf"}, default="alignf"
    alpha : float, default=1.0
        Regularisation of the final kernel ridge (as in :class:`~mercer.models.ridge.KernelRidge`).
    normalize : bool, default=True
        Scale every base kernel to unit mean diagonal before learning the weights.
    n_components : int, optional
        Nyström features per base kernel (large n); None uses the exact kernels (blocked).
    random_state, device, dtype, memory_budget :
        As in every mercer estimator (``random_state`` picks the Nyström landmarks).

    Attributes
    ----------
    weights_ : ndarray of shape (n_kernels,)
        Non-negative, summing to 1, on the normalised base kernels (ALIGNF's unit-2-norm
        solution rescaled: the alignment does not depend on the scale).
    alignment_ : ndarray of shape (n_kernels,)
        Centred alignment of each base kernel with ``y y^T``.
    kernel_ : Kernel
        The combined kernel ``sum_i weights_[i] / kernel_scales_[i] * base_kernels_[i]``.
    base_kernels_, kernel_scales_ :
    estimator_ : KernelRidge
    """

    _parameter_constraints: dict = {**_MKL_CONSTRAINTS, "method": [Options("alignf")]}

    def __init__(self, kernels=None, *, method="alignf", alpha=1.0, normalize=True, n_components=None,
                 random_state=None, device=None, dtype=None, memory_budget=None):
        self.kernels = kernels
        self.method = method
        self.alpha = alpha
        self.normalize = normalize
        self.n_components = n_components
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        check_params(self)
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        Z = self._learn(X, y.reshape(len(y), -1))
        if self.n_components is None:
            est = KernelRidge(alpha=self.alpha, kernel=self.kernel_, device=self._device, dtype=self._dtype,
                              memory_budget=self.memory_budget)
        else:
            est = KernelRidge(alpha=self.alpha, kernel="linear", device=self._device, dtype=self._dtype,
                              memory_budget=self.memory_budget)
        self.estimator_ = est.fit(Z, y)
        return self

    def predict(self, X):
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(self._downstream_input(X))


class MKLClassifier(ClassifierMixin, _MKLBase):
    """Multiple kernel learning for classification: EasyMKL (default) or ALIGNF weights, then a
    kernel ridge classifier on the combined kernel.

    Parameters
    ----------
    kernels, normalize, n_components, random_state, device, dtype, memory_budget :
        As in :class:`MKLRegressor`.
    method : {"easymkl", "alignf"}, default="easymkl"
    lam : float in [0, 1], default=0.1
        EasyMKL's trade-off between the margin and the 2-norm of ``gamma``.
    alpha : float, default=1.0
        Regularisation of the final :class:`~mercer.models.ridge.KernelRidgeClassifier`.
    max_iter : int, default=2000
        Projected-gradient iterations of EasyMKL's QP.

    Attributes
    ----------
    classes_, weights_, kernel_, base_kernels_, kernel_scales_, estimator_ :
    converged_ : bool
        EasyMKL's QP converged (for every one-vs-rest problem).
    n_iter_ : int
        Most projected-gradient iterations of EasyMKL's QP (1 for ALIGNF, which has none).
    """

    _parameter_constraints: dict = {
        **_MKL_CONSTRAINTS,
        "method": [Options("easymkl", "alignf")],
        "lam": [Interval(Real, 0, 1, closed="both")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, kernels=None, *, method="easymkl", lam=0.1, alpha=1.0, normalize=True, n_components=None,
                 max_iter=2000, random_state=None, device=None, dtype=None, memory_budget=None):
        self.kernels = kernels
        self.method = method
        self.lam = lam
        self.alpha = alpha
        self.normalize = normalize
        self.n_components = n_components
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.memory_budget = memory_budget

    def fit(self, X, y):
        check_params(self)
        owner = type(self).__name__
        X = self._validate_X(X, reset=True)
        y = check_class_labels(owner, y, X.shape[0])[0]
        from sklearn.preprocessing import LabelBinarizer  # on use: sklearn.preprocessing costs ~25 ms of import

        binarizer = LabelBinarizer(pos_label=1, neg_label=-1)
        Y = binarizer.fit_transform(y).astype(np.float64)
        self.classes_ = binarizer.classes_
        if len(self.classes_) < 2:
            raise ValueError(f"{owner} needs samples of at least 2 classes in the data, but the data contains "
                             f"only one class: {self.classes_[0]!r}.")
        self.converged_, self.n_iter_ = True, 1
        Z = self._learn(X, Y)
        if self.n_components is None:
            est = KernelRidgeClassifier(alpha=self.alpha, kernel=self.kernel_, device=self._device,
                                        dtype=self._dtype, memory_budget=self.memory_budget)
        else:
            est = KernelRidgeClassifier(alpha=self.alpha, kernel="linear", device=self._device, dtype=self._dtype,
                                        memory_budget=self.memory_budget)
        self.estimator_ = est.fit(Z, y)
        return self

    @property
    def _exact_matrices(self) -> int:  # EasyMKL's average kernel and a base kernel, then the solve
        return 2 if self.method == "easymkl" else 1

    def _easymkl(self, base, Xt, Y, scale, feats):
        n, p = Xt.shape[0], len(base)
        if feats is None:
            need = 2 * n * n * Xt.element_size()
            if need > self._budget:
                raise MemoryBudgetError(
                    f"{type(self).__name__}: EasyMKL holds the {n} x {n} average kernel ({format_bytes(need)}), "
                    f"more than the memory budget {format_bytes(self._budget)}; use n_components (Nyström).")
            Kbar = sum(k(Xt) / float(s) for k, s in zip(base, scale)) / p

            def matvec(v):
                return Kbar @ v

            def quad(i, u):
                return float(u @ (base[i](Xt) @ u)) / float(scale[i])
        else:
            def matvec(v):
                return sum(f @ (f.T @ v) / float(s) for f, s in zip(feats, scale)) / p

            def quad(i, u):
                return float(((feats[i].T @ u) ** 2).sum()) / float(scale[i])

        cols = Y.T if Y.shape[1] > 1 else Y.T[:1]
        weights, self.converged_, self.n_iter_ = np.zeros(p), True, 1
        for col in cols:
            yt = torch.as_tensor(col, dtype=Xt.dtype, device=Xt.device)
            g, conv, it = easymkl_gamma(matvec, yt, float(self.lam), max_iter=self.max_iter)
            self.converged_ &= conv
            self.n_iter_ = max(self.n_iter_, it)
            u = yt * g
            d = np.array([quad(i, u) for i in range(p)])
            d = np.clip(d, 0.0, None)
            weights += d / d.sum() if d.sum() > 0 else 0.0
        if not self.converged_:
            warnings.warn(f"{type(self).__name__}: EasyMKL's QP did not converge in max_iter={self.max_iter} "
                          "iterations; the weights may be inaccurate.", ConvergenceWarning, stacklevel=3)
        return weights / len(cols)

    def decision_function(self, X):
        check_is_fitted(self, "estimator_")
        return self.estimator_.decision_function(self._downstream_input(X))

    def predict(self, X):
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(self._downstream_input(X))
