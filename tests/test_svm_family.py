"""KernelSVR, NuSVR, NuSVC and OneClassSVM against LIBSVM (scikit-learn's SVR, NuSVR, NuSVC,
OneClassSVM) on real data: the same support sets and decision values (1e-3), several kernels, C / nu /
epsilon values and sample weights; the generalised solver's pieces against dense references."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA
from sklearn import svm
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris, load_wine
from sklearn.preprocessing import StandardScaler

from mercer import io as mio
from mercer.kernels import RBF, Laplacian
from mercer.models.svm import KernelSVR, NuSVC, NuSVR, OneClassSVM
from mercer.models.svm import _smo

TOL = 1e-3


def _scaled(loader, n=None):
    X, y = loader(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return (X, y) if n is None else (X[:n], y[:n])


@pytest.fixture(scope="module")
def diabetes_std():
    X, y = _scaled(load_diabetes)
    return X, (y - y.mean()) / y.std()


def _kept(sw, n):
    """scikit-learn's support_ indexes the samples of positive weight; mercer's the training rows."""
    return np.arange(n) if sw is None else np.flatnonzero(sw > 0)


def _same_machine(ours, ref, X, sw=None, values="predict"):
    np.testing.assert_array_equal(np.sort(ours.support_), np.sort(_kept(sw, X.shape[0])[ref.support_]))
    assert ours.n_support_.sum() == len(ref.support_)
    a = np.asarray(getattr(ours, values)(X))
    b = np.asarray(getattr(ref, values)(X))
    np.testing.assert_allclose(a, b, rtol=0, atol=TOL * max(1.0, np.abs(b).max()))
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=0, atol=TOL * max(1.0, np.abs(ref.intercept_).max()))
    # the coefficients, matched by support vector
    ours_dual = ours.dual_coef_.toarray() if hasattr(ours.dual_coef_, "toarray") else ours.dual_coef_
    o = dict(zip(ours.support_.tolist(), np.asarray(ours_dual).ravel().tolist()))
    ref_dual = ref.dual_coef_.toarray() if hasattr(ref.dual_coef_, "toarray") else ref.dual_coef_  # a sparse fit's
    r = dict(zip(_kept(sw, X.shape[0])[ref.support_].tolist(), np.asarray(ref_dual).ravel().tolist()))
    np.testing.assert_allclose([o[k] for k in sorted(r)], [r[k] for k in sorted(r)], rtol=0,
                               atol=TOL * max(1.0, max(abs(v) for v in r.values())))


# -- epsilon-SVR and nu-SVR --------------------------------------------------------------------------
@pytest.mark.parametrize("params", [
    {}, {"C": 10.0, "epsilon": 0.05}, {"kernel": "linear", "C": 0.5}, {"kernel": "poly", "degree": 2, "epsilon": 0.2},
    {"kernel": "sigmoid", "gamma": 0.01, "C": 0.3}, {"gamma": 0.5, "epsilon": 0.0, "shrinking": False},
])
def test_svr_equals_libsvm(diabetes_std, params):
    X, y = diabetes_std
    ours, ref = KernelSVR(**params).fit(X, y), svm.SVR(**params).fit(X, y)
    _same_machine(ours, ref, X)
    assert ours.n_iter_ == ref.n_iter_ and ours.fit_status_ == 0 and ours.shape_fit_ == X.shape


@pytest.mark.parametrize("params", [{}, {"nu": 0.2, "C": 3.0}, {"kernel": "poly", "degree": 3, "nu": 0.7},
                                    {"nu": 1.0, "gamma": 0.3}])
def test_nusvr_equals_libsvm(diabetes_std, params):
    X, y = diabetes_std
    _same_machine(NuSVR(**params).fit(X, y), svm.NuSVR(**params).fit(X, y), X)


@pytest.mark.parametrize("cls,ref_cls", [(KernelSVR, svm.SVR), (NuSVR, svm.NuSVR)])
def test_regression_sample_weights_equal_libsvm(diabetes_std, cls, ref_cls):
    X, y = diabetes_std
    w = np.random.default_rng(0).uniform(0.2, 3.0, len(y))
    w[:15] = 0.0  # left out, as LIBSVM
    _same_machine(cls().fit(X, y, sample_weight=w), ref_cls().fit(X, y, sample_weight=w), X, sw=w)


def test_svr_linear_coef_and_precomputed_kernel(diabetes_std):
    X, y = diabetes_std
    lin = KernelSVR(kernel="linear", C=2.0).fit(X, y)
    np.testing.assert_allclose(lin.coef_, svm.SVR(kernel="linear", C=2.0).fit(X, y).coef_, rtol=0, atol=TOL)
    np.testing.assert_allclose(X @ lin.coef_.ravel() + lin.intercept_, lin.predict(X), atol=1e-9)
    K = X @ X.T
    pre = KernelSVR(kernel="precomputed", C=2.0).fit(K, y)
    np.testing.assert_array_equal(pre.support_, lin.support_)
    np.testing.assert_allclose(pre.predict(K), lin.predict(X), atol=1e-8)


def test_svr_kernel_objects_and_callables(diabetes_std):
    X, y = diabetes_std
    _same_machine(KernelSVR(kernel=RBF(gamma=0.1)).fit(X, y), svm.SVR(gamma=0.1).fit(X, y), X)
    _same_machine(KernelSVR(kernel=lambda A, B: A @ B.T).fit(X, y), svm.SVR(kernel="linear").fit(X, y), X)
    # any mercer kernel: LIBSVM on its precomputed Gram is the reference
    lap = KernelSVR(kernel=Laplacian(gamma=0.05)).fit(X, y)
    K = Laplacian(gamma=0.05)(torch.as_tensor(X), torch.as_tensor(X)).numpy()
    ref = svm.SVR(kernel="precomputed").fit(K, y)
    np.testing.assert_array_equal(np.sort(lap.support_), np.sort(ref.support_))
    np.testing.assert_allclose(lap.predict(X), ref.predict(K), rtol=0, atol=TOL)


@pytest.mark.skipif(not (SHARED_DATA / "uci" / "elevators").is_dir(), reason="../shared/data (UCI sets) absent")
@pytest.mark.parametrize("cls,ref_cls,params", [
    (KernelSVR, svm.SVR, {"C": 3.0, "epsilon": 0.1}),
    (NuSVR, svm.NuSVR, {"nu": 0.3}),
])
def test_uci_regression_equals_libsvm(cls, ref_cls, params):
    from mercer.datasets import load_uci

    X, y, _, _ = load_uci("elevators", SHARED_DATA / "uci")
    X, y = X[:2500], y[:2500]
    X = StandardScaler().fit_transform(X)
    y = (y - y.mean()) / y.std()
    _same_machine(cls(**params).fit(X, y), ref_cls(**params).fit(X, y), X)


# -- one-class --------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [{}, {"nu": 0.1}, {"kernel": "linear", "nu": 0.3}, {"nu": 0.05, "gamma": 0.5},
                                    {"kernel": "poly", "degree": 2, "nu": 0.2}])
def test_one_class_equals_libsvm(params):
    X, _ = _scaled(load_breast_cancer)
    ours, ref = OneClassSVM(**params).fit(X), svm.OneClassSVM(**params).fit(X)
    _same_machine(ours, ref, X, values="decision_function")
    np.testing.assert_allclose(ours.score_samples(X), ref.score_samples(X), atol=TOL * max(1.0, ref.offset_[0]))
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours.offset_, ref.offset_, rtol=0, atol=TOL * max(1.0, ref.offset_[0]))
    np.testing.assert_allclose(ours.decision_function(X), ours.score_samples(X) - ours.offset_, atol=1e-9)
    assert set(np.unique(ours.predict(X))) <= {-1, 1}


def test_one_class_sample_weights_equal_libsvm():
    X, _ = _scaled(load_wine)
    w = np.random.default_rng(1).uniform(0.1, 2.0, len(X))
    w[::7] = 0.0
    _same_machine(OneClassSVM(nu=0.2).fit(X, sample_weight=w), svm.OneClassSVM(nu=0.2).fit(X, sample_weight=w), X,
                  sw=w, values="decision_function")


# -- nu-SVC -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data,params", [
    ("iris", {}), ("iris", {"nu": 0.1}), ("wine", {"nu": 0.3, "kernel": "poly", "degree": 2}),
    ("cancer", {"nu": 0.2}), ("cancer", {"nu": 0.4, "kernel": "linear"}), ("wine", {"nu": 0.5, "gamma": 0.02}),
])
def test_nusvc_equals_libsvm(data, params):
    X, y = {"iris": lambda: load_iris(return_X_y=True), "wine": lambda: _scaled(load_wine),
            "cancer": lambda: _scaled(load_breast_cancer)}[data]()
    ours, ref = NuSVC(**params).fit(X, y), svm.NuSVC(**params).fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_array_equal(ours.n_support_, ref.n_support_)
    scale = max(1.0, np.abs(ref.dual_coef_).max())
    # the nu solution is scaled by 1 / r after SMO stops at tol: coefficients agree to tol / r
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, rtol=0, atol=10 * TOL * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=0, atol=TOL * max(1.0, np.abs(ref.intercept_).max()))
    dec = ref.decision_function(X)
    np.testing.assert_allclose(ours.decision_function(X), dec, rtol=0, atol=TOL * max(1.0, np.abs(dec).max()))
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    # iterations: LIBSVM's, up to the rounding of float32 kernel rows computed another way (a few steps)
    np.testing.assert_allclose(ours.n_iter_, ref.n_iter_, rtol=0.05)


def test_nusvc_sample_weights_equal_libsvm():
    X, y = load_iris(return_X_y=True)
    w = np.random.default_rng(0).uniform(0.2, 2.0, len(y))
    ours, ref = NuSVC(nu=0.3).fit(X, y, sample_weight=w), svm.NuSVC(nu=0.3).fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=TOL)


def test_nusvc_infeasible_nu_is_scikit_learns_error():
    X, y = load_iris(return_X_y=True)
    keep = np.r_[0:50, 50:60]  # 50 vs 10 samples: nu (60) / 2 > 10 for nu > 1/3
    with pytest.raises(ValueError, match="specified nu is infeasible"):
        svm.NuSVC(nu=0.5).fit(X[keep], y[keep])
    with pytest.raises(ValueError, match="specified nu is infeasible"):
        NuSVC(nu=0.5).fit(X[keep], y[keep])
    NuSVC(nu=0.3).fit(X[keep], y[keep])


def test_nusvc_decision_shapes_and_probabilities():
    X, y = load_iris(return_X_y=True)
    ovo = NuSVC(decision_function_shape="ovo").fit(X, y)
    assert ovo.decision_function(X).shape == (150, 3)
    ties = NuSVC(break_ties=True).fit(X, y)
    np.testing.assert_array_equal(ties.predict(X), svm.NuSVC(break_ties=True).fit(X, y).predict(X))
    with pytest.warns(FutureWarning):
        prob = NuSVC(probability=True, random_state=0).fit(X, y)
    p = prob.predict_proba(X)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert (p.argmax(axis=1) == y).mean() > 0.9


# -- parameters, errors, persistence -----------------------------------------------------------------
def test_parameters_are_scikit_learns():
    for ours, ref in [(KernelSVR, svm.SVR), (NuSVR, svm.NuSVR), (NuSVC, svm.NuSVC), (OneClassSVM, svm.OneClassSVM)]:
        mine, theirs = ours().get_params(), ref().get_params()
        shared = set(theirs) - {"verbose", "cache_size", "probability"}
        assert shared <= set(mine), (ours, shared - set(mine))
        assert all(mine[k] == theirs[k] for k in shared), ours


@pytest.mark.parametrize("est,msg", [(KernelSVR(epsilon=-1.0), "epsilon"), (NuSVR(nu=0.0), "nu"),
                                     (NuSVR(nu=1.5), "nu"), (OneClassSVM(nu=-0.1), "nu"), (NuSVC(nu=2.0), "nu"),
                                     (KernelSVR(C=0.0), "C")])
def test_bad_parameters_are_named(est, msg):
    X, y = _scaled(load_iris)
    with pytest.raises(ValueError, match=msg):
        est.fit(X, y)


def test_regressors_have_no_decision_function_and_inputs_are_not_modified(diabetes_std):
    X, y = diabetes_std
    X0, y0 = X.copy(), y.copy()
    m = KernelSVR().fit(X, y)
    assert not hasattr(m, "decision_function") and not hasattr(NuSVR(), "decision_function")
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    with pytest.raises(ValueError, match="y is None"):
        KernelSVR().fit(X, None)


@pytest.mark.parametrize("est", [KernelSVR(C=2.0), NuSVR(nu=0.3), OneClassSVM(nu=0.2), NuSVC(nu=0.2)])
def test_save_load_roundtrip(tmp_path, est):
    X, y = _scaled(load_iris)
    est.fit(X, y)
    path = tmp_path / "model"
    mio.save(est, path)
    back = mio.load(path)
    method = "decision_function" if hasattr(est, "decision_function") else "predict"
    np.testing.assert_allclose(np.asarray(getattr(back, method)(X)), np.asarray(getattr(est, method)(X)), atol=1e-12)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.support_, est.support_)


def test_torch_input_gives_torch_output():
    X, y = _scaled(load_iris)
    Xt = torch.as_tensor(X)
    for est in (KernelSVR(), OneClassSVM()):
        est.fit(Xt, torch.as_tensor(y, dtype=torch.float64))
        assert isinstance(est.predict(Xt), torch.Tensor)


# -- the generalised solver -----------------------------------------------------------------------------
def _dense_dual_objective(K, y, p, alpha, rmap):
    Q = (y[:, None] * y[None, :]) * K[np.ix_(rmap, rmap)]
    return 0.5 * alpha @ Q @ alpha + p @ alpha


def test_general_solver_reaches_the_dense_optimum_with_a_row_map():
    # epsilon-SVR's 2n-variable dual from the compiled loop (in-loop RBF rows) vs the blocked rows: both
    # satisfy the constraints and reach the same objective as a dense projected reference (KKT to tol)
    rng = np.random.default_rng(0)
    n = 120
    X = rng.normal(size=(n, 3))
    yy = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    rmap = np.r_[np.arange(n), np.arange(n)]
    y = np.r_[np.ones(n), -np.ones(n)]
    p = np.r_[0.1 - yy, 0.1 + yy]
    Cb = np.full(2 * n, 2.0)
    common = dict(matvec=lambda r, c, v: K[np.ix_(r, c)] @ v, cache_rows=n, tol=1e-6, p=p, rmap=rmap)
    blocked = _smo.solve_smo(lambda i: K[i], np.diag(K).copy(), y, Cb, **common)
    inloop = _smo.solve_smo(lambda i: pytest.fail("rows called"), np.diag(K).copy(), y, Cb,
                            features=np.ascontiguousarray((X * np.sqrt(0.5)).T), **common)
    for res in (blocked, inloop):
        assert res.converged and abs(y @ res.alpha) < 1e-9 and (res.alpha >= 0).all() and (res.alpha <= 2.0).all()
        # KKT: the gradient G = Q alpha + p against rho at the free variables
        Q = (y[:, None] * y[None, :]) * K[np.ix_(rmap, rmap)]
        yG = y * (Q @ res.alpha + p)
        free = (res.alpha > 1e-8) & (res.alpha < 2.0 - 1e-8)
        np.testing.assert_allclose(yG[free], res.rho, atol=1e-4)
    np.testing.assert_allclose(_dense_dual_objective(K, y, p, inloop.alpha, rmap),
                               _dense_dual_objective(K, y, p, blocked.alpha, rmap), rtol=1e-7)


def test_nu_solver_keeps_both_equality_constraints():
    rng = np.random.default_rng(1)
    n = 150
    X = rng.normal(size=(n, 4))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    K = np.exp(-0.3 * ((X[:, None] - X[None]) ** 2).sum(-1))
    nu = 0.4
    alpha0 = np.zeros(n)
    for s in (1.0, -1.0):
        cls = np.flatnonzero(y == s)
        left = nu * n / 2
        for i in cls:
            alpha0[i] = min(1.0, left)
            left -= alpha0[i]
    res = _smo.solve_smo(lambda i: K[i], np.diag(K).copy(), y, np.ones(n), matvec=lambda r, c, v: K[np.ix_(r, c)] @ v,
                         cache_rows=8, tol=1e-5, p=np.zeros(n), alpha0=alpha0, nu=True)
    assert res.converged and res.r > 0
    for s in (1.0, -1.0):  # e^T alpha and y^T alpha fixed: each class keeps its sum
        assert res.alpha[y == s].sum() == pytest.approx(nu * n / 2, rel=1e-10)
    # the scaled solution is a C-SVC solution with C = 1 / r (LIBSVM's nu-SVC / C-SVC equivalence)
    ref = _smo.solve_smo(lambda i: K[i], np.diag(K).copy(), y, np.full(n, 1 / res.r),
                         matvec=lambda r, c, v: K[np.ix_(r, c)] @ v, cache_rows=n, tol=1e-7)
    np.testing.assert_allclose(res.alpha / res.r, ref.alpha, atol=2e-3 / res.r)
    assert res.rho / res.r == pytest.approx(ref.rho, abs=2e-3)


def test_sparse_rows_equal_libsvms_sparse_fit(diabetes_std):
    import scipy.sparse as sp

    X, y = diabetes_std
    Xs = sp.csr_matrix(np.where(np.abs(X) < 0.5, 0.0, X))  # ~60 % zeros
    ours, ref = KernelSVR().fit(Xs, y), svm.SVR().fit(Xs, y)
    _same_machine(ours, ref, Xs)
    assert sp.issparse(ours.support_vectors_)
    np.testing.assert_allclose(ours.support_vectors_.toarray(), ref.support_vectors_.toarray())
    # linear: a degenerate dual (10 features, 442 samples), so the primal weights and predictions are compared
    ours, ref = KernelSVR(kernel="linear").fit(Xs, y), svm.SVR(kernel="linear").fit(Xs, y)
    assert sp.issparse(ours.coef_) and sp.issparse(ours.dual_coef_)  # as scikit-learn's after a sparse fit
    np.testing.assert_allclose(ours.coef_.toarray(), ref.coef_.toarray(), rtol=0, atol=TOL)
    pred = ref.predict(Xs)
    np.testing.assert_allclose(ours.predict(Xs), pred, rtol=0, atol=TOL * max(1.0, np.abs(pred).max()))
    _same_machine(OneClassSVM(nu=0.2).fit(Xs), svm.OneClassSVM(nu=0.2).fit(Xs), Xs, values="decision_function")
