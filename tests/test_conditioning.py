"""Ill-conditioned solves are said (mercer.linalg.warn_ill_conditioned): the condition estimate from
the Cholesky factor, the NumericalWarning of the direct Nyström solve, the exact ridge and the GP on
unscaled features, and silence on ordinary (scaled) data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import mercer
from mercer.linalg import ILL_CONDITIONED_ERROR, NumericalWarning, condition_estimate, jittered_cholesky

ADVICE = "Scale the features"


def _spd(n: int, cond: float, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    e = torch.logspace(0, np.log10(cond), n, dtype=torch.float64)
    A = (Q * e) @ Q.T
    return (A + A.T) / 2


@pytest.mark.parametrize("n, cond", [(1, 1.0), (40, 1e3), (200, 1e9), (400, 1e14)])
def test_condition_estimate_is_a_close_lower_bound(n, cond):
    A = _spd(n, cond)
    e = torch.linalg.eigvalsh(A)
    true = float(e[-1] / e[0])
    L = torch.linalg.cholesky(A)
    L.triu_(1).add_(torch.linalg.cholesky(A))  # garbage above the diagonal, as blocked_cholesky leaves it: not read
    est = condition_estimate(L)
    assert true / 20 <= est <= true * 1.001


def test_condition_estimate_of_a_kernel_matrix():
    X = torch.randn(300, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    K = torch.exp(-0.3 * torch.cdist(X, X) ** 2)
    K.diagonal().add_(1e-4)
    e = torch.linalg.eigvalsh(K)
    true = float(e[-1] / e[0])
    est = condition_estimate(jittered_cholesky(K.clone()).L)
    assert true / 3 <= est <= true * 1.001


def _unscaled(n=1500, seed=0):
    """One feature in the hundreds, four of unit scale: with a gamma suited to the large one the kernel
    sees almost nothing of the others, and K_nM^T K_nM + alpha K_MM has a condition number ~1e14."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)) * np.array([300, 1, 1, 1, 1.0])
    y = np.sin(X[:, 1]) + X[:, 0] / 300 + 0.1 * rng.normal(size=n)
    return X, y


def _ill_warnings(record):
    return [w.message for w in record if issubclass(w.category, NumericalWarning) and "ill-conditioned" in str(w.message)]


def _fit(est, X, y):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est.fit(X, y)
    return _ill_warnings(record)


NYSTROEM_ILL = dict(gamma=1e-4, alpha=1e-3, n_centers=100, solver="direct", dtype="float64", random_state=0)


def test_nystroem_direct_warns_on_unscaled_features():
    X, y = _unscaled()
    with pytest.warns(NumericalWarning, match=r"ill-conditioned.*ill-determined.*Scale the features.*raise alpha") as rec:
        mercer.NystroemKernelRidge(**NYSTROEM_ILL).fit(X, y)
    w = _ill_warnings(rec)[0]
    assert w.condition * np.finfo(np.float64).eps > ILL_CONDITIONED_ERROR
    assert rec[0].filename == __file__  # attributed to the caller of fit, through mercer's wrappers


def test_ordinary_data_does_not_warn():
    X, y = _unscaled()
    Xs = (X - X.mean(0)) / X.std(0)
    assert _fit(mercer.NystroemKernelRidge(**dict(NYSTROEM_ILL, gamma=0.2, alpha=1e-3)), Xs, y) == []
    assert _fit(mercer.NystroemKernelRidge(gamma=0.2, alpha=1e-6, n_centers=300, solver="direct",
                                           random_state=0), Xs, y) == []
    assert _fit(mercer.KernelRidge(alpha=1e-3, kernel="rbf", gamma=0.2), Xs[:800], y[:800]) == []
    assert _fit(mercer.KernelRidge(alpha=1e-3, kernel="linear", solver="primal"), Xs, y) == []
    assert _fit(mercer.GaussianProcessRegressor(kernel="rbf"), Xs[:300], y[:300]) == []


@pytest.mark.parametrize("est", [
    mercer.KernelRidge(alpha=1e-9, kernel="linear", solver="dual"),
    mercer.KernelRidge(alpha=1e-9, kernel="linear", solver="primal"),
], ids=["dual", "primal"])
def test_exact_ridge_warns(est):
    X, y = _unscaled(300)
    X = np.c_[X, X[:, 1] + 1e-7 * X[:, 2]]  # a nearly collinear column: X^T X nearly singular
    msgs = _fit(est, X, y)
    assert len(msgs) == 1 and ADVICE in str(msgs[0]) and "raise alpha" in str(msgs[0])


def test_gp_warns_on_a_tiny_noise():
    X, y = _unscaled(300)
    msgs = _fit(mercer.GaussianProcessRegressor(kernel="rbf", gamma=1e-4, noise=1e-12, optimizer=None), X, y)
    assert len(msgs) == 1 and "raise the noise level" in str(msgs[0])
