"""KernelSVC (SMO) against scikit-learn's SVC (LIBSVM); reduced-set, budget and approximate SVMs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.svm import SVC

from mercer.kernels import RBF, Intersection, Linear, Polynomial, encode_sets
from mercer.linalg import NumericalWarning
from mercer.models.svm._smo import solve_smo
from mercer.models.svm import BudgetSVC, KernelSVC, ReducedSetSVC
from mercer.models.svm._platt import _couple, _sigmoid_train

from conftest import cuda, readonly

BINARY_KERNELS = [
    dict(kernel="rbf"),
    dict(kernel="rbf", gamma=0.05, C=10.0),
    dict(kernel="poly", degree=3, gamma="auto", coef0=1.0),
    dict(kernel="linear", C=0.1),
    dict(kernel="laplacian", gamma=0.02),
]


def _split(X, y, n):
    return X[:n], y[:n], X[n:], y[n:]


# -- agreement with LIBSVM ------------------------------------------------------------------------
@pytest.mark.parametrize("params", BINARY_KERNELS, ids=lambda p: p["kernel"] + str(p.get("C", "")))
def test_binary_matches_libsvm(breast_cancer, params):
    X, y, Xte, yte = _split(*breast_cancer, 400)
    if params["kernel"] == "laplacian":  # scikit-learn's SVC has no laplacian: use its precomputed Gram
        from sklearn.metrics.pairwise import laplacian_kernel

        ref = SVC(kernel="precomputed", C=params.get("C", 1.0)).fit(laplacian_kernel(X, gamma=0.02), y)
        ref_dec = ref.decision_function(laplacian_kernel(Xte, X, gamma=0.02))
    else:
        ref = SVC(**params).fit(X, y)
        ref_dec = ref.decision_function(Xte)
    ours = KernelSVC(**params).fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_array_equal(ours.n_support_, ref.n_support_)
    assert np.abs(ours.decision_function(Xte) - ref_dec).max() < 1e-3
    assert np.abs(ours.intercept_ - ref.intercept_).max() < 1e-3
    assert np.abs(ours.dual_coef_ - ref.dual_coef_).max() < 1e-2 * params.get("C", 1.0)
    assert ours.score(Xte, yte) == ref.score(*((laplacian_kernel(Xte, X, gamma=0.02),) if params["kernel"] == "laplacian" else (Xte,)), yte)


def test_tight_tolerance_gives_libsvm_dual(breast_cancer):
    X, y = breast_cancer
    ours = KernelSVC(C=3.0, tol=1e-6).fit(X, y)
    ref = SVC(C=3.0, tol=1e-6).fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    assert np.abs(ours.dual_coef_ - ref.dual_coef_).max() < 1e-4
    assert np.abs(ours.decision_function(X) - ref.decision_function(X)).max() < 1e-5


@pytest.mark.parametrize("shape", ["ovo", "ovr"])
def test_multiclass_ovo_matches_libsvm(digits, shape):
    X, y, Xte, yte = _split(*digits, 700)
    ours = KernelSVC(decision_function_shape=shape).fit(X, y)
    ref = SVC(decision_function_shape=shape).fit(X, y)
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_array_equal(ours.n_support_, ref.n_support_)
    assert ours.dual_coef_.shape == ref.dual_coef_.shape == (9, len(ref.support_))
    assert np.abs(ours.dual_coef_ - ref.dual_coef_).max() < 1e-2
    assert np.abs(ours.intercept_ - ref.intercept_).max() < 1e-3
    d1, d2 = ours.decision_function(Xte), ref.decision_function(Xte)
    assert d1.shape == d2.shape
    if shape == "ovo":
        assert np.abs(d1 - d2).max() < 1e-3
    else:  # votes + confidences: equal wherever no pairwise value sits within tol of 0
        raw = SVC(decision_function_shape="ovo").fit(X, y).decision_function(Xte)
        clear = (np.abs(raw) > 1e-3).all(axis=1)
        assert clear.mean() > 0.9 and np.abs(d1 - d2)[clear].max() < 1e-3
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))


def test_multiclass_model_keeps_libsvm_compact_coefficients(digits, tmp_path):
    """One-vs-one with k classes keeps (n_SV, k - 1) coefficients, as LIBSVM, not (n_SV, k (k - 1) / 2):
    a 42-class text model held 83 MiB that way. A model in the dense layout (saved by an earlier
    version) predicts the same; coef_ and the precomputed kernel follow the compact layout too."""
    import mercer

    X, y, Xte, _ = _split(*digits, 600)
    ours = KernelSVC(kernel="linear", C=0.01).fit(X, y)
    ref = SVC(kernel="linear", C=0.01).fit(X, y)
    assert tuple(ours._W.shape) == (len(ref.support_), 9)
    assert np.abs(ours.coef_ - ref.coef_).max() < 1e-3 * np.abs(ref.coef_).max()
    dense = KernelSVC(kernel="linear", C=0.01).fit(X, y)
    dense._W = dense._machine_W()  # the layout of a model saved before
    assert tuple(dense._W.shape) == (len(ref.support_), 45) and not dense._compact_ovo()
    np.testing.assert_allclose(dense.decision_function(Xte), ours.decision_function(Xte), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(dense.dual_coef_, ours.dual_coef_)
    mercer.io.save(dense, tmp_path / "dense.mercer")
    back = mercer.io.load(tmp_path / "dense.mercer")
    np.testing.assert_array_equal(back.predict(Xte), ours.predict(Xte))
    G, Gte = X @ X.T, Xte @ X.T
    pre = KernelSVC(kernel="precomputed", C=0.01).fit(G, y)
    assert pre._compact_ovo()
    np.testing.assert_allclose(pre.decision_function(Gte), ours.decision_function(Xte), rtol=1e-6, atol=1e-6)


def test_support_vectors_and_decision_formula(breast_cancer):
    X, y = breast_cancer
    m = KernelSVC(kernel=RBF(gamma=0.03)).fit(X, y)
    np.testing.assert_allclose(m.support_vectors_.cpu().numpy(), X[m.support_])
    K = RBF(gamma=0.03)(X, X[m.support_]).cpu().numpy()
    np.testing.assert_allclose(m.decision_function(X), K @ m.dual_coef_[0] + m.intercept_[0], atol=1e-10)
    # KKT: 0 <= |coef| <= C, sum of coefficients = 0
    assert np.all(np.abs(m.dual_coef_) <= 1.0 + 1e-12) and abs(m.dual_coef_.sum()) < 1e-8


def test_class_weight_and_imbalance_match_libsvm(digits):
    X, y = digits
    keep = (y == 0) | ((y == 1) & (np.arange(len(y)) % 6 == 0))  # 178 vs ~30
    X, y = X[keep], y[keep]
    for cw in ("balanced", {0: 0.5, 1: 4.0}):
        ours = KernelSVC(C=0.5, class_weight=cw).fit(X, y)
        ref = SVC(C=0.5, class_weight=cw).fit(X, y)
        np.testing.assert_array_equal(ours.support_, ref.support_)
        np.testing.assert_allclose(ours.class_weight_, ref.class_weight_)
        assert np.abs(ours.decision_function(X) - ref.decision_function(X)).max() < 1e-3


def test_sample_weight_matches_libsvm(breast_cancer):
    X, y = breast_cancer
    sw = readonly(np.random.default_rng(0).uniform(0.2, 3.0, len(y)))
    ours = KernelSVC(C=2.0).fit(X, y, sample_weight=sw)
    ref = SVC(C=2.0).fit(X, y, sample_weight=sw)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    assert np.abs(ours.decision_function(X) - ref.decision_function(X)).max() < 1e-3


def test_string_labels(digits):
    X, y = digits
    names = np.array(["zero", "one", "two"])
    keep = y < 3
    ys = readonly(names[y[keep]])
    m = KernelSVC().fit(X[keep], ys)
    np.testing.assert_array_equal(m.classes_, np.sort(names))
    ref = SVC().fit(X[keep], ys)
    np.testing.assert_array_equal(m.predict(X[keep]), ref.predict(X[keep]))
    assert m.predict(X[keep]).dtype.kind == "U"


def test_precomputed_matches_libsvm(breast_cancer):
    X, y, Xte, _ = _split(*breast_cancer, 400)
    K = readonly(Polynomial(degree=2, gamma=0.02, coef0=1.0)(X).cpu().numpy())
    Kte = Polynomial(degree=2, gamma=0.02, coef0=1.0)(Xte, X).cpu().numpy()
    # LIBSVM caches Q in float32: on a kernel of scale ~5 the paths part at 1e-3; compare at 1e-4
    ours = KernelSVC(kernel="precomputed", tol=1e-4).fit(K, y)
    ref = SVC(kernel="precomputed", tol=1e-4).fit(K, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    assert ours.support_vectors_.numel() == 0
    assert np.abs(ours.decision_function(Kte) - ref.decision_function(Kte)).max() < 1e-3


def test_composite_kernel_equals_its_gram(breast_cancer):
    X, y, Xte, _ = _split(*breast_cancer, 300)
    k = 0.7 * RBF(gamma=0.05) + 0.01 * Linear()
    ours = KernelSVC(kernel=k, C=2.0).fit(X, y)
    ref = SVC(kernel="precomputed", C=2.0).fit(k(X).cpu().numpy(), y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    assert np.abs(ours.decision_function(Xte) - ref.decision_function(k(Xte, X).cpu().numpy())).max() < 1e-3


def test_set_kernel():
    rng = np.random.default_rng(0)
    vocab = list("abcdefghijklmnopqrst")
    sets = [set(rng.choice(vocab[:12] if i % 2 else vocab[8:], size=5, replace=False)) for i in range(120)]
    y = np.arange(120) % 2
    S, _ = encode_sets(sets, vocab)
    Xs = S.toarray()
    ours = KernelSVC(kernel=Intersection(), C=1.0).fit(S, y)
    ref = SVC(kernel="precomputed").fit(Xs @ Xs.T, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    assert np.abs(ours.decision_function(S) - ref.decision_function(Xs @ Xs.T)).max() < 1e-3


def test_gamma_scale_and_auto_as_sklearn(breast_cancer):
    X, y = breast_cancer
    Xs = X * 3.0
    for g in ("scale", "auto"):
        m = KernelSVC(gamma=g).fit(Xs, y)
        expected = 1.0 / (X.shape[1] * Xs.var()) if g == "scale" else 1.0 / X.shape[1]
        assert m.kernel_.gamma == pytest.approx(expected)
        assert np.abs(m.decision_function(Xs) - SVC(gamma=g).fit(Xs, y).decision_function(Xs)).max() < 1e-3


def test_tiny_cache_and_no_shrinking_give_the_same_machine(breast_cancer):
    X, y = breast_cancer
    ref = KernelSVC(C=5.0).fit(X, y)
    tiny = KernelSVC(C=5.0, cache_size=0.05).fit(X, y)  # ~11 rows of 569: constant eviction
    noshrink = KernelSVC(C=5.0, shrinking=False).fit(X, y)
    for m in (tiny, noshrink):
        np.testing.assert_array_equal(m.support_, ref.support_)
        assert np.abs(m.decision_function(X) - ref.decision_function(X)).max() < 1e-3


def test_float32(breast_cancer):
    X, y = breast_cancer
    m = KernelSVC(dtype="float32").fit(X, y)
    ref = SVC().fit(X, y)
    assert m.support_vectors_.dtype == torch.float32
    assert np.abs(m.decision_function(X) - ref.decision_function(X)).max() < 1e-3


def test_torch_in_torch_out(breast_cancer):
    X, y = breast_cancer
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    m = KernelSVC().fit(Xt, yt)
    assert isinstance(m.decision_function(Xt), torch.Tensor) and isinstance(m.predict(Xt), torch.Tensor)
    np.testing.assert_allclose(m.decision_function(Xt).cpu().numpy(), KernelSVC().fit(X, y).decision_function(X))


def test_one_vs_rest_machines_are_binary_svcs(digits):
    X, y = digits[0][:600], digits[1][:600]
    m = KernelSVC(multiclass="ovr").fit(X, y)
    dec = m.decision_function(X)
    assert dec.shape == (600, 10)
    for c in (0, 7):
        ref = SVC().fit(X, (y == c).astype(int))
        assert np.abs(dec[:, c] - ref.decision_function(X)).max() < 1e-3
    assert m.score(X, y) > 0.98
    with pytest.raises(AttributeError):
        m.predict_proba


# -- the SMO solver itself ----------------------------------------------------------------------
def test_smo_solves_the_dual_kkt(breast_cancer):
    X, y = breast_cancer
    yy = np.where(y == 1, 1.0, -1.0)
    K = RBF(gamma=0.05)(X).cpu().numpy()
    Cb = np.where(yy > 0, 1.0, 3.0)
    res = solve_smo(lambda i: K[i], np.diag(K).copy(), yy, Cb, matvec=lambda r, c, v: K[np.ix_(r, c)] @ v,
                    cache_rows=40, tol=1e-6)
    a = res.alpha
    assert res.converged and abs(a @ yy) < 1e-10 and np.all((a >= 0) & (a <= Cb))
    free = (a > 1e-8) & (a < Cb - 1e-8)
    dec = K @ (a * yy) - res.rho
    margin = yy * dec
    assert np.all(margin[a < 1e-8] >= 1 - 1e-4) and np.all(margin[a > Cb - 1e-8] <= 1 + 1e-4)
    assert free.sum() > 10 and np.abs(margin[free] - 1).max() < 1e-4


def test_nonpsd_kernel_warns_and_terminates(breast_cancer):
    X, y = breast_cancer
    with pytest.warns(NumericalWarning):
        m = KernelSVC(kernel="sigmoid", gamma=0.5, coef0=-1.0, max_iter=200_000).fit(X, y)
    assert m.fit_status_ in (0, 1) and m.n_iter_[0] <= 200_000
    # an indefinite precomputed matrix is detected by the solver itself
    rng = np.random.default_rng(0)
    A = rng.normal(size=(80, 80))
    K = readonly((A + A.T) / 2)
    yy = np.arange(80) % 2
    with pytest.warns(NumericalWarning, match="not positive semi-definite"):
        KernelSVC(kernel="precomputed", max_iter=100_000).fit(K, yy)


def test_max_iter_warns(breast_cancer):
    from sklearn.exceptions import ConvergenceWarning

    X, y = breast_cancer
    with pytest.warns(ConvergenceWarning):
        m = KernelSVC(max_iter=5).fit(X, y)
    assert m.fit_status_ == 1 and m.n_iter_[0] == 5


# -- bad input ----------------------------------------------------------------------------------
def test_one_class_only(breast_cancer):
    X, _ = breast_cancer
    for est in (KernelSVC(), BudgetSVC(), ReducedSetSVC()):
        with pytest.raises(ValueError, match="at least 2 classes.*only one class: 1"):
            est.fit(X[:20], np.ones(20, dtype=int))


@pytest.mark.parametrize("C", [0, -1.0, float("nan"), "1"])
def test_bad_C(breast_cancer, C):
    X, y = breast_cancer
    for est in (KernelSVC(C=C), BudgetSVC(C=C)):
        # KernelSVC accepts C=inf (the hard margin, as SVC): "(0, inf]"; BudgetSVC "(0, inf)"
        with pytest.raises(ValueError, match=r"'C' parameter of \w+ must be a float in the range \(0, inf[\)\]]"):
            est.fit(X, y)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf(breast_cancer, bad):
    X, y = breast_cancer
    X = X.copy()
    X[3, 2] = bad
    for est in (KernelSVC(), BudgetSVC()):
        with pytest.raises(ValueError, match="NaN|infinity"):
            est.fit(X, y)
    with pytest.raises(ValueError, match="NaN|infinity"):
        KernelSVC().fit(torch.as_tensor(X), torch.as_tensor(y))


def test_bad_parameters(breast_cancer):
    X, y = breast_cancer
    cases = [
        (KernelSVC(gamma="wide"), r"'gamma' parameter of KernelSVC must be a str among \{'scale', 'auto'\}, "
                                  r"a float in the range \(0, inf\) or None. Got 'wide' instead"),
        (KernelSVC(gamma=-1.0), r"'gamma' parameter of KernelSVC must be .*a float in the range \(0, inf\).* Got -1.0"),
        (KernelSVC(decision_function_shape="x"), "'decision_function_shape' parameter .* Got 'x'"),
        (KernelSVC(multiclass="all"), "'multiclass' parameter .* Got 'all'"),
        (KernelSVC(class_weight="even"), "'class_weight' parameter .* Got 'even'"),
        (KernelSVC(max_iter=0), r"'max_iter' parameter of KernelSVC must be an int in the range \[1, inf\) .* Got 0"),
        (KernelSVC(tol=0), r"'tol' parameter of KernelSVC must be a float in the range \(0, inf\). Got 0"),
        (KernelSVC(approximation="exact"), "'approximation' parameter .* Got 'exact'"),
        (ReducedSetSVC(n_vectors=1.5), r"'n_vectors' parameter of ReducedSetSVC .* Got 1.5"),
        (ReducedSetSVC(method="pca"), "'method' parameter of ReducedSetSVC .* Got 'pca'"),
        (BudgetSVC(n_vectors=0), r"'n_vectors' parameter of BudgetSVC must be an int in the range \[1, inf\). Got 0"),
        (BudgetSVC(optimizer="sgd"), "'optimizer' parameter of BudgetSVC .* Got 'sgd'"),
    ]
    for est, msg in cases:
        with pytest.raises(ValueError, match=msg):
            est.fit(X, y)
    with pytest.raises(ValueError, match="square"):
        KernelSVC(kernel="precomputed").fit(X, y)
    with pytest.raises(ValueError, match="y must be 1-D"):
        KernelSVC().fit(X, y[:-1])


def test_user_arrays_are_not_modified(breast_cancer):
    X, y = breast_cancer[0][:200], breast_cancer[1][:200]  # read-only fixtures: any write raises
    KernelSVC(probability=True, random_state=0).fit(X, y).predict_proba(X)
    ReducedSetSVC(n_vectors=10).fit(X, y).predict(X)
    BudgetSVC(n_vectors=10, max_iter=5).fit(X, y).predict(X)


# -- probabilities ------------------------------------------------------------------------------
def test_sigmoid_fit_is_the_platt_maximum_likelihood():
    rng = np.random.default_rng(1)
    dec = rng.normal(size=300)
    y = np.where(rng.uniform(size=300) < 1 / (1 + np.exp(2.0 * dec - 0.3)), 1.0, -1.0)
    A, B = _sigmoid_train(dec, y)
    n1, n0 = (y > 0).sum(), (y < 0).sum()
    t = np.where(y > 0, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))

    def nll(p):
        z = dec * p[0] + p[1]
        return np.sum(t * z + np.logaddexp(0, -z))

    ref = scipy.optimize.minimize(nll, [0.0, 0.0], method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose([A, B], ref, atol=1e-4)


def test_pairwise_coupling_recovers_consistent_probabilities():
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    r = p[:, :, None] / (p[:, :, None] + p[:, None, :])
    np.testing.assert_allclose(_couple(r), p, atol=1e-3)


def test_predict_proba(digits):
    keep = digits[1] < 5
    X, y, Xte, yte = _split(digits[0][keep], digits[1][keep], 500)
    m = KernelSVC(probability=True, random_state=0).fit(X, y)
    ref = SVC(probability=True, random_state=0).fit(X, y)
    P, Pr = m.predict_proba(Xte), ref.predict_proba(Xte)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert np.abs(P - Pr).mean() < 0.02  # different CV folds: close, not equal
    assert (P.argmax(axis=1) == m.predict(Xte)).mean() > 0.97
    np.testing.assert_allclose(m.predict_log_proba(Xte), np.log(P))
    assert m.probA_.shape == (10,) and np.all(m.probA_ < 0)


def test_binary_predict_proba_orientation(breast_cancer):
    X, y = breast_cancer
    m = KernelSVC(probability=True, random_state=0).fit(X, y)
    P = m.predict_proba(X)
    assert np.corrcoef(P[:, 1], m.decision_function(X))[0, 1] > 0.9


# -- reduced set ----------------------------------------------------------------------------------
def test_reduced_set_with_every_support_vector_is_the_exact_machine(breast_cancer):
    X, y = breast_cancer
    svc = KernelSVC(kernel=RBF(gamma=0.02)).fit(X, y)
    n_sv = len(svc.support_)
    for refit in ("decision", "feature"):
        red = ReducedSetSVC.from_svc(svc, n_sv, refit=refit)
        assert red.support_vectors_.shape[0] == n_sv
        assert np.abs(red.decision_function(X) - svc.decision_function(X)).max() < 1e-4


@pytest.mark.parametrize("refit", ["decision", "feature"])
def test_reduced_set_refit_is_the_ridge_least_squares_solution(breast_cancer, refit):
    """The blocked normal equations give the QR solution of the stacked system [B; sqrt(lam) I]."""
    X, y = breast_cancer
    svc = KernelSVC(kernel=RBF(gamma=0.02)).fit(X, y)
    red = ReducedSetSVC.from_svc(svc, 25, refit=refit, random_state=0)
    S, W, Z = (svc._sv.double().numpy(), svc._W.double().numpy(), red.support_vectors_.double().numpy())
    k = lambda A, B: red.kernel_(torch.from_numpy(A), torch.from_numpy(B)).double().numpy()  # noqa: E731
    B, F = (k(S, Z), k(S, S) @ W) if refit == "decision" else (k(Z, Z), k(Z, S) @ W)
    lam = 1e-10 * ((B**2).sum() / len(Z) if refit == "decision" else np.diag(k(Z, Z)).mean())
    A = np.vstack([B, np.sqrt(lam) * np.eye(len(Z))])
    ref = np.linalg.lstsq(A, np.vstack([F, np.zeros((len(Z), W.shape[1]))]), rcond=None)[0]
    np.testing.assert_allclose(red.dual_coef_.T, ref, rtol=1e-6, atol=1e-8 * np.abs(ref).max())


def test_reduced_set_refit_refuses_matrices_over_the_budget():
    from mercer.linalg import MemoryBudgetError

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 4))
    y = (np.sin(X @ rng.standard_normal(4) * 2) > 0).astype(int)
    n_sv = len(KernelSVC(memory_budget=2**21).fit(X, y).support_)
    assert n_sv > 300  # K = n_sv vectors: three K x K float64 matrices are over 2 MiB
    with pytest.raises(MemoryBudgetError, match=r"ReducedSetSVC: refitting the coefficients of .*n_vectors"):
        ReducedSetSVC(n_vectors=n_sv, memory_budget=2**21).fit(X, y)


def test_from_svc_needs_a_fitted_kernel_svc(breast_cancer):
    from sklearn.exceptions import NotFittedError

    X, y = breast_cancer
    with pytest.raises(NotFittedError):
        ReducedSetSVC.from_svc(KernelSVC(), 10)
    with pytest.raises(TypeError, match="from_svc needs a fitted KernelSVC; got BudgetSVC"):
        ReducedSetSVC.from_svc(BudgetSVC(n_vectors=5, max_iter=2).fit(X[:50], y[:50]), 10)
    svc = KernelSVC(C=3.0, kernel=RBF(gamma=0.02)).fit(X, y)
    red = ReducedSetSVC.from_svc(svc, 10, random_state=0)
    assert (red.C, red.kernel, red.n_vectors, red.random_state) == (3.0, svc.kernel, 10, 0)
    assert red.support_vectors_.shape[0] == 10 and red.n_support_original_ == len(svc.support_)


@pytest.mark.parametrize("method", ["kmeans", "kernel_kmeans"])
def test_reduced_set_keeps_accuracy(digits, method):
    X, y, Xte, yte = _split(*digits, 900)
    svc = KernelSVC().fit(X, y)
    red = ReducedSetSVC.from_svc(svc, 0.2, method=method, random_state=0)
    K = red.support_vectors_.shape[0]
    assert K == round(0.2 * len(svc.support_))
    assert red.dual_coef_.shape == (45, K)
    assert red.score(Xte, yte) > svc.score(Xte, yte) - 0.03
    assert red.n_support_.sum() == K


def test_reduced_set_estimator_fit(breast_cancer):
    X, y = breast_cancer
    red = ReducedSetSVC(n_vectors=15, C=1.0, random_state=0).fit(X, y)
    assert red.support_vectors_.shape == (15, X.shape[1])
    assert red.score(X, y) > 0.95 and red.n_support_original_ > 15


# -- budget SVM -----------------------------------------------------------------------------------
def test_budget_with_fixed_vectors_solves_the_primal(breast_cancer):
    """Linear kernel, every training point a fixed vector: the L2-SVM primal in w = X^T W."""
    X, y = breast_cancer[0][:150], breast_cancer[1][:150]
    m = BudgetSVC(n_vectors=150, kernel="linear", C=0.5, learn_vectors=False, max_iter=500).fit(X, y)
    ys = np.where(y == 1, 1.0, -1.0)

    def obj(p):
        w, b = p[:-1], p[-1]
        h = np.maximum(0, 1 - ys * (X @ w + b))
        return 0.5 * w @ w + 0.5 * np.sum(h * h), np.concatenate([w - (X.T @ (ys * h)), [-np.sum(ys * h)]])

    p = scipy.optimize.minimize(obj, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B",
                                options={"gtol": 1e-10, "maxiter": 5000}).x
    assert np.abs(m.decision_function(X) - (X @ p[:-1] + p[-1])).max() < 1e-3


def test_budget_svc_accuracy(digits):
    X, y, Xte, yte = _split(*digits, 900)
    m = BudgetSVC(n_vectors=60, C=10.0, random_state=0, max_iter=60).fit(X, y)
    assert m.support_vectors_.shape == (60, 64) and m.dual_coef_.shape == (10, 60)
    fixed = BudgetSVC(n_vectors=60, C=10.0, random_state=0, max_iter=60, learn_vectors=False).fit(X, y)
    assert m.loss_ <= fixed.loss_ * 1.0001  # learning the vectors cannot do worse than fixing them
    assert m.score(Xte, yte) > 0.9
    adam = BudgetSVC(n_vectors=60, C=10.0, random_state=0, optimizer="adam", lr=0.05, max_iter=50).fit(X, y)
    assert adam.score(Xte, yte) > 0.8


# -- kernel approximation -------------------------------------------------------------------------
@pytest.mark.parametrize("approximation", ["nystroem", "rff"])
def test_approximate_svc(breast_cancer, approximation):
    pytest.importorskip("mercer.approx", reason="approx module")
    from mercer import approx

    if not hasattr(approx, "Nystroem") or not hasattr(approx, "RandomFourierFeatures"):
        pytest.skip("mercer.approx.Nystroem / RandomFourierFeatures not available yet")
    X, y, Xte, yte = _split(*breast_cancer, 400)
    exact = KernelSVC().fit(X, y)
    m = KernelSVC(approximation=approximation, n_components=300, random_state=0).fit(X, y)
    assert m.score(Xte, yte) > exact.score(Xte, yte) - 0.04
    assert m.decision_function(Xte).shape == (len(Xte),)
    assert not hasattr(m, "support_")


# -- real data subsets ------------------------------------------------------------------------------
def _fashion(n):
    from mercer.datasets import load_fashion_mnist

    try:
        X, y, Xte, yte = load_fashion_mnist()
    except (FileNotFoundError, OSError, ValueError) as exc:
        pytest.skip(f"Fashion-MNIST not installed: {exc}")
    return X[:n].astype(np.float64), y[:n], Xte[:n].astype(np.float64), yte[:n]


@pytest.mark.slow
def test_fashion_mnist_subset_matches_libsvm():
    X, y, Xte, yte = _fashion(2000)
    ours = KernelSVC(C=5.0).fit(X, y)
    ref = SVC(C=5.0).fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    d1 = KernelSVC(C=5.0, decision_function_shape="ovo").fit(X, y).decision_function(Xte)
    assert np.abs(d1 - SVC(C=5.0, decision_function_shape="ovo").fit(X, y).decision_function(Xte)).max() < 1e-3
    assert ours.score(Xte, yte) == ref.score(Xte, yte)


@pytest.mark.slow
def test_larger_synthetic_matches_libsvm():
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=4000, n_features=24, n_informative=12, random_state=0, flip_y=0.05)
    ours = KernelSVC(cache_size=20).fit(X[:3000], y[:3000])  # cache of ~870 rows of 3000
    ref = SVC().fit(X[:3000], y[:3000])
    sym = np.setxor1d(ours.support_, ref.support_)
    assert len(sym) <= 2  # support vectors at alpha ~ tol may differ
    assert np.abs(ours.decision_function(X[3000:]) - ref.decision_function(X[3000:])).max() < 1e-3
    assert ours.score(X[3000:], y[3000:]) == ref.score(X[3000:], y[3000:])


@cuda
def test_cuda_matches_cpu(breast_cancer):
    X, y = breast_cancer
    cpu = KernelSVC().fit(X, y)
    gpu = KernelSVC(device="cuda").fit(torch.as_tensor(X, device="cuda"), torch.as_tensor(y))
    assert gpu.support_vectors_.device.type == "cuda"
    np.testing.assert_array_equal(gpu.support_, cpu.support_)
    d = gpu.decision_function(torch.as_tensor(X, device="cuda"))
    assert d.device.type == "cuda" and np.abs(d.cpu().numpy() - cpu.decision_function(X)).max() < 1e-6
    BudgetSVC(n_vectors=10, max_iter=5, device="cuda").fit(X, y).predict(X)
    ReducedSetSVC.from_svc(cpu, 10).predict(X)


# -- issue 12: scikit-learn behaviours found by its own test suite ---------------------------------
TOY_X = [[-2, -1], [-1, -1], [-1, -2], [1, 1], [1, 2], [2, 1]]
TOY_Y = [1, 1, 1, 2, 2, 2]


def test_predict_proba_after_switching_probability_on_is_a_clear_error(digits):
    from sklearn.exceptions import NotFittedError

    X, y = digits
    m = KernelSVC().fit(X[:200], y[:200])
    assert not hasattr(m, "predict_proba")
    m.set_params(probability=True)
    assert hasattr(m, "predict_proba")  # as scikit-learn: available, but the fitted model has no sigmoids
    for method in (m.predict_proba, m.predict_log_proba):
        with pytest.raises(NotFittedError, match="predict_proba is not available when fitted with probability=False"):
            method(X[:5])


def test_gamma_scale_on_huge_values_names_gamma_scale():
    rng = np.random.RandomState(42)
    X = np.finfo(np.float64).max * rng.uniform(size=(10, 2))
    y = rng.randint(0, 2, size=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow RuntimeWarning either
        with pytest.raises(ValueError, match=r"KernelSVC: The dual coefficients or intercepts are not finite: "
                                             r"gamma='scale' is 1 / \(n_features \* X.var\(\)\)"):
            KernelSVC().fit(X, y)
    # a gamma given by the user: the kernel itself is not finite, said as scikit-learn says it
    with pytest.raises(ValueError, match="dual coefficients or intercepts would not be finite"):
        KernelSVC(gamma=1.0).fit(X, y)
    # zero variance: gamma = 1, as scikit-learn
    m = KernelSVC(kernel="rbf").fit([[1.0, 1.0], [1.0, 1.0]], [0, 1])
    assert m.kernel_.gamma == 1.0


def test_duplicate_points_do_not_warn_of_an_indefinite_kernel():
    # two identical points: the RBF Gram is singular (zero curvature), not indefinite
    X = [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [3.0, 1.0]]
    y = [0, 1, 0, 1, 1]
    for params in (dict(), dict(kernel="linear"), dict(kernel="poly", degree=2)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", NumericalWarning)
            ours = KernelSVC(**params).fit(X, y)
        ref = SVC(**params).fit(X, y)
        np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-6)


@pytest.mark.parametrize("n_classes", [2, 3, 4])
def test_coef_of_the_linear_kernel_matches_sklearn(n_classes):
    from sklearn.datasets import make_blobs

    X, y = make_blobs(90, centers=n_classes, random_state=0)
    ours = KernelSVC(kernel="linear", C=0.5, tol=1e-8).fit(readonly(X), y)
    ref = SVC(kernel="linear", C=0.5, tol=1e-8).fit(X, y)
    assert ours.coef_.shape == ref.coef_.shape == (n_classes * (n_classes - 1) // 2, 2)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)
    raw = ours.decision_function(X) if n_classes == 2 else ours.set_params(decision_function_shape="ovo").decision_function(X)
    np.testing.assert_allclose(raw, X @ ours.coef_.T.squeeze() + ours.intercept_, atol=1e-8)
    with pytest.raises(AttributeError):
        ours.coef_ = np.zeros(2)
    with pytest.raises(ValueError, match="read-only"):
        ours.coef_[0, 0] = 1.0
    # one-vs-rest machines: one row per class, decision = X coef^T + intercept
    ovr = KernelSVC(kernel="linear", multiclass="ovr").fit(X, y)
    if n_classes > 2:
        np.testing.assert_allclose(ovr.decision_function(X), X @ ovr.coef_.T + ovr.intercept_, atol=1e-8)
    for m in (KernelSVC().fit(X, y), KernelSVC(kernel="poly").fit(X, y)):
        assert not hasattr(m, "coef_")


def test_break_ties_as_sklearn():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(random_state=0, n_samples=20, n_features=2)
    xx, yy = np.meshgrid(np.linspace(X[:, 0].min(), X[:, 0].max(), 60), np.linspace(X[:, 1].min(), X[:, 1].max(), 60))
    G = np.c_[xx.ravel(), yy.ravel()]
    for ties in (False, True):
        ours = KernelSVC(kernel="rbf", gamma=1e6, break_ties=ties).fit(X, y)
        ref = SVC(kernel="rbf", gamma=1e6, break_ties=ties).fit(X, y)
        np.testing.assert_array_equal(ours.predict(G), ref.predict(G))
        agree = (ours.predict(G) == ours.decision_function(G).argmax(axis=1)).all()
        assert agree == ties
    with pytest.raises(ValueError, match="break_ties must be False when decision_function_shape is 'ovo'"):
        KernelSVC(break_ties=True, decision_function_shape="ovo").fit(X, y).predict(X)
    with pytest.raises(ValueError, match="'break_ties' parameter of KernelSVC"):
        KernelSVC(break_ties="yes").fit(X, y)


def test_infinite_C_is_the_hard_margin():
    from sklearn.datasets import make_blobs, make_classification

    X, y = make_blobs(60, centers=[[0, 0], [4, 4]], cluster_std=1.0, random_state=0)
    ours = KernelSVC(C=np.inf, kernel="linear", tol=1e-8).fit(X, y)
    ref = SVC(C=np.inf, kernel="linear", tol=1e-8).fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, rtol=1e-8)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-8)
    # the maximum-margin separator: every point at functional margin >= 1, the support vectors at 1
    margin = (2 * y - 1) * ours.decision_function(X)
    assert margin.min() > 1 - 1e-6
    np.testing.assert_allclose(margin[ours.support_], 1.0, atol=1e-6)
    X, y = make_classification(random_state=42)
    a, b = KernelSVC(C=float("inf")).fit(X, y), SVC(C=np.inf).fit(X, y)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-8)
    np.testing.assert_array_equal(a.predict(X), KernelSVC(C=1e10).fit(X, y).predict(X))


def test_zero_and_negative_sample_weights_as_sklearn():
    X, Y = np.array(TOY_X, dtype=float), np.array(TOY_Y)
    for sw in ([0] * 6, [-0.3] * 6):
        with pytest.raises(ValueError, match="Invalid input - all samples have zero or negative weights."):
            KernelSVC(kernel="linear").fit(X, Y, sample_weight=sw)
    for sw in ([0, -0.5, 0, 1, 1, 1], [1, 1, 1, 0, -0.1, -0.3]):
        with pytest.raises(ValueError, match="Invalid input - all samples with positive weights belong to the same"):
            KernelSVC(kernel="linear").fit(X, Y, sample_weight=sw)
    for sw, expect in (([1, -0.5, 1, 1, 1, 1], [0.3998, 0.4]), ([1, 1, 1, 0, 1, 1], [0.4, 0.3999])):
        ours = KernelSVC(kernel="linear").fit(X, Y, sample_weight=sw)
        ref = SVC(kernel="linear").fit(X, Y, sample_weight=sw)
        np.testing.assert_allclose(ours.coef_, [expect], rtol=1e-3)
        np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6)
        # scikit-learn's support_ indexes the samples left after dropping those of weight <= 0;
        # mercer's indexes the training data, as documented for support_
        keep = np.asarray(sw) > 0
        np.testing.assert_array_equal(ours.support_, np.flatnonzero(keep)[ref.support_])
        # a sample of weight <= 0 is the same as no sample
        drop = KernelSVC(kernel="linear").fit(X[keep], Y[keep])
        np.testing.assert_allclose(ours.decision_function(X), drop.decision_function(X), atol=1e-12)


def test_class_without_positive_weight_is_never_predicted():
    X = np.array([[0.0, 0], [1, 1], [2, 0], [3, 1], [0, 2]])
    y = [0, 0, 1, 1, 2]
    with pytest.warns(UserWarning, match=r"class\(es\) \[2\] have no sample with a positive weight"):
        m = KernelSVC(kernel="linear").fit(X, y, sample_weight=[1, 1, 1, 1, 0])
    ref = KernelSVC(kernel="linear").fit(X[:4], y[:4])
    np.testing.assert_array_equal(m.predict(X), ref.predict(X))
    assert np.isfinite(m.decision_function(X)).all()


def test_convergence_warning_has_sklearn_wording():
    from sklearn.exceptions import ConvergenceWarning

    msg = r"Solver terminated early \(max_iter=2\).  Consider pre-processing your data with StandardScaler or MinMaxScaler."
    with pytest.warns(ConvergenceWarning, match=msg):
        m = KernelSVC(kernel="linear", max_iter=2).fit(np.array(TOY_X, dtype=float), TOY_Y)
    assert np.all(m.n_iter_ == 2)


# -- scikit-learn's private attributes and messages, as its own tests use them (issue 12) ---------
@pytest.mark.parametrize("gamma", ["scale", "auto", 0.3])
def test_private_gamma_as_sklearn(breast_cancer, gamma):
    X, y = breast_cancer
    X, y = X[:60], y[:60]
    for kernel in ("rbf", "linear", "precomputed"):
        data = X @ X.T if kernel == "precomputed" else X
        ours = KernelSVC(kernel=kernel, gamma=gamma).fit(data, y)
        ref = SVC(kernel=kernel, gamma=gamma).fit(data, y)
        assert ours._gamma == pytest.approx(ref._gamma, rel=1e-12)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_private_dual_coef_drives_prediction_as_sklearn(n_classes):
    from sklearn.datasets import make_blobs

    X, y = make_blobs(60, centers=n_classes, cluster_std=3.0, random_state=0)
    ours = KernelSVC(kernel="linear", tol=1e-8).fit(X, y)
    ref = SVC(kernel="linear", tol=1e-8).fit(X, y)
    np.testing.assert_allclose(ours._dual_coef_, ref._dual_coef_, atol=1e-6)
    new = np.random.RandomState(1).uniform(-1, 1, size=ref._dual_coef_.shape)
    ours._dual_coef_ = new
    ref._dual_coef_ = new
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-6)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours._dual_coef_, new, rtol=0, atol=0)
    # dual_coef_ and coef_ follow (scikit-learn's dual_coef_ is the sign-flipped copy for two classes)
    np.testing.assert_allclose(ours.dual_coef_, -new if n_classes == 2 else new, rtol=0, atol=0)
    np.testing.assert_allclose(ours.decision_function(X[:5]) if n_classes == 2 else ours.set_params(
        decision_function_shape="ovo").decision_function(X[:5]), X[:5] @ ours.coef_.T.squeeze() + ours.intercept_,
        atol=1e-8)
    with pytest.raises(ValueError, match=r"_dual_coef_ must be a finite array of shape"):
        ours._dual_coef_ = new[:, :-1]


def test_tweaked_dual_coef_as_sklearns_own_test():
    X, y = [[-2, -1], [-1, -1], [-1, -2], [1, 1], [1, 2], [2, 1]], [1, 1, 1, 2, 2, 2]
    m = KernelSVC(kernel="linear").fit(X, y)
    np.testing.assert_array_equal(m.dual_coef_, [[-0.25, 0.25]])
    assert m.predict([[-0.1, -0.1]]).tolist() == [1]
    m._dual_coef_ = np.array([[0.0, 1.0]])
    assert m.predict([[-0.1, -0.1]]).tolist() == [2]


def test_altered_n_support_is_refused_as_sklearn(breast_cancer):
    X, y = breast_cancer
    m = KernelSVC(kernel="linear").fit(X[:80], y[:80])
    assert m._n_support is m.n_support_
    m.predict(X[:3])
    m._n_support[0] = 1_000_000
    with pytest.raises(ValueError, match="The internal representation of SVC was altered"):
        m.predict(X[:3])


def test_sparse_rules_as_sklearn(breast_cancer):
    import scipy.sparse as sp

    X, y = breast_cancer
    X, y = X[:80], y[:80]
    with pytest.raises(TypeError, match="Sparse precomputed kernels are not supported"):
        KernelSVC(kernel="precomputed").fit(sp.csr_matrix(X @ X.T), y)
    dense = KernelSVC().fit(X, y)
    with pytest.raises(ValueError, match="cannot use sparse input in 'KernelSVC' trained on dense data"):
        dense.predict(sp.csr_matrix(X))
    sparse = KernelSVC().fit(sp.csr_matrix(X), y)  # a sparse fit takes both, as scikit-learn's
    np.testing.assert_array_equal(sparse.predict(sp.csr_matrix(X)), sparse.predict(X))
    np.testing.assert_array_equal(sparse.predict(X), dense.predict(X))


def test_unfitted_message_names_svc():
    from sklearn.exceptions import NotFittedError

    for method in ("predict", "decision_function"):
        with pytest.raises(NotFittedError, match=r".*\bSVC\b.*\bnot\b.*\bfitted\b"):
            getattr(KernelSVC(), method)("foo!")  # said before the string is read as a file


def test_probability_deprecation_as_sklearn(breast_cancer):
    X, y = breast_cancer
    X, y = X[:80], y[:80]
    with pytest.warns(FutureWarning, match="probability.+parameter.+deprecated"):
        m = KernelSVC(probability=True, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        p = m.predict_proba(X[:3])  # using the model does not warn
        KernelSVC(probability=False).fit(X, y)
    for name in ("probA_", "probB_"):
        with pytest.warns(FutureWarning, match=f"Attribute `{name}` was deprecated"):
            value = getattr(m, name)
        assert value.shape == (1,)
    assert p.shape == (3, 2)


def test_model_holds_its_coefficients_and_sparse_values_once():
    """A multi-class model's dual_coef_ is its coefficients' transpose, and sparse support vectors share
    their values with the rows it predicts from: the model holds each once (half of it was copies),
    and it predicts as before and as LIBSVM, also after its arrays are used in place of copies."""
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(120, 40, density=0.2, random_state=1, format="csr")
    y = rng.integers(0, 4, 120)
    est = KernelSVC(kernel="linear", C=1.0).fit(X, y)
    ref = SVC(kernel="linear", C=1.0).fit(X, y)
    assert np.shares_memory(est.dual_coef_, est._W.numpy())
    assert np.shares_memory(est.support_vectors_.data, est._sv.data.numpy())
    np.testing.assert_allclose(est.dual_coef_, ref.dual_coef_.toarray(), atol=1e-6)
    np.testing.assert_array_equal(est.support_vectors_.toarray(), ref.support_vectors_.toarray())
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))
    # float32 models and two classes keep copies (another dtype, another sign): still the same values
    est32 = KernelSVC(kernel="linear", C=1.0, dtype="float32").fit(X, y)
    assert not np.shares_memory(est32.dual_coef_, est32._W.numpy())
    np.testing.assert_allclose(est32._W.numpy().T, est32.dual_coef_, rtol=1e-6, atol=1e-12)
    two = KernelSVC(kernel="linear", C=1.0).fit(X, y % 2)
    np.testing.assert_allclose(two.dual_coef_, SVC(kernel="linear", C=1.0).fit(X, y % 2).dual_coef_.toarray(),
                               atol=1e-6)


def test_sparse_fit_lends_x_without_keeping_it():
    """A sparse fit reads the user's CSR arrays in place (no second copy of the data) but writes none and
    keeps none: the user's matrix is unchanged by the fit (also a non-canonical one, which is sorted in a
    copy), and changing it afterwards changes no prediction."""
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    X = sp.random(150, 60, density=0.15, random_state=4, format="csr")
    y = rng.integers(0, 3, 150)
    Xq = X[:40].copy()
    for canonical in (True, False):
        Xf = X.copy()
        if not canonical:  # reverse each row's entries: unsorted indices
            for i in range(Xf.shape[0]):
                a, b = Xf.indptr[i], Xf.indptr[i + 1]
                Xf.indices[a:b] = Xf.indices[a:b][::-1].copy()
                Xf.data[a:b] = Xf.data[a:b][::-1].copy()
            Xf.has_sorted_indices = False
        before = (Xf.data.copy(), Xf.indices.copy(), Xf.indptr.copy())
        est = KernelSVC(kernel="rbf", gamma=0.5).fit(Xf, y)
        for got, want in zip((Xf.data, Xf.indices, Xf.indptr), before):
            np.testing.assert_array_equal(got, want)
        dec = est.decision_function(Xq)
        Xf.data[:] = 7.0
        Xf.indices[:] = 0
        np.testing.assert_array_equal(est.decision_function(Xq), dec)
        np.testing.assert_allclose(dec, SVC(kernel="rbf", gamma=0.5).fit(X, y).decision_function(Xq), atol=1e-6)
