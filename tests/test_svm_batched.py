"""The batched working-set solver (``models/svm/_batched.py``) against LIBSVM (scikit-learn's SVC, SVR,
NuSVC, NuSVR, OneClassSVM) on real data: the same support sets, dual coefficients, intercepts and
decision values (1e-3), for each problem type of LIBSVM's general dual, at a tiny memory budget, on
sparse input and on Fashion-MNIST when installed; and its pieces (working-set size, selection)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn import svm
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine, make_classification
from sklearn.preprocessing import StandardScaler
from test_svm_family import _kept

from mercer.kernels import RBF
from mercer.linalg import ExecutionPlan
from mercer.models.svm import KernelSVC, KernelSVR, NuSVC, NuSVR, OneClassSVM
from mercer.models.svm import _batched, _dual


def _same_machine(ours, ref, X, sw=None, values="predict", tol=5e-3, dual_tol=3e-2):
    """Support sets, decision values, intercepts and dual coefficients (matched by support vector)
    against LIBSVM's: decision values and intercepts within ``tol``, dual coefficients within
    ``dual_tol``, both times the largest in magnitude.

    At LIBSVM's default tol (1e-3) the solution is fixed only to what its stopping rule resolves and
    the batched solver reaches it by another path than LIBSVM's pair-at-a-time one: measured on these
    sets, decision values differ by up to ~2e-3 of their range, dual coefficients by up to ~2 % of
    C, and a support set by at most a borderline vector or two (whose coefficient is then within
    ``dual_tol`` of 0). Solved to tol = 1e-7 on both sides (``tol=dual_tol=1e-5``), everything
    agrees, support sets exactly."""
    kept = _kept(sw, X.shape[0])
    ours_dual = ours.dual_coef_.toarray() if hasattr(ours.dual_coef_, "toarray") else ours.dual_coef_
    ref_dual = ref.dual_coef_.toarray() if hasattr(ref.dual_coef_, "toarray") else ref.dual_coef_
    o = dict(zip(ours.support_.tolist(), np.asarray(ours_dual).ravel().tolist()))
    r = dict(zip(kept[ref.support_].tolist(), np.asarray(ref_dual).ravel().tolist()))
    scale = max(1.0, max(abs(v) for v in r.values()))
    differ = set(o) ^ set(r)
    if tol < 1e-4:
        assert not differ, f"support sets differ in {sorted(differ)}"
    assert len(differ) <= max(2, len(r) // 100), f"support sets differ in {len(differ)} of {len(r)} vectors"
    for k in differ:  # borderline vectors only
        assert abs(o.get(k, 0.0)) + abs(r.get(k, 0.0)) <= dual_tol * scale, (k, o.get(k), r.get(k))
    a = np.asarray(getattr(ours, values)(X))
    b = np.asarray(getattr(ref, values)(X))
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(1.0, np.abs(b).max()))
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=0, atol=tol * max(1.0, np.abs(ref.intercept_).max()))
    both = sorted(set(o) & set(r))
    np.testing.assert_allclose([o[k] for k in both], [r[k] for k in both], rtol=0, atol=dual_tol * scale)


@pytest.fixture
def batched(monkeypatch):
    """Every solve_on call runs the batched solver, and says so."""
    calls = []
    real = _dual.solve_batched

    def spy(*args, **kwargs):
        calls.append(kwargs["q"])
        return real(*args, **kwargs)

    monkeypatch.setattr(_dual, "SOLVER", "batched")
    monkeypatch.setattr(_dual, "solve_batched", spy)
    return calls


def _std(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def cancer():
    return _std(load_breast_cancer)


@pytest.fixture(scope="module")
def diabetes():
    X, y = _std(load_diabetes)
    return X, (y - y.mean()) / y.std()


@pytest.mark.parametrize("params", [{"C": 1.0}, {"C": 10.0, "gamma": 0.02}, {"kernel": "linear", "C": 0.1},
                                    {"C": 5.0, "class_weight": "balanced"}])
def test_svc_binary_matches_libsvm(batched, cancer, params):
    X, y = cancer
    ours, ref = KernelSVC(**params).fit(X, y), svm.SVC(**params).fit(X, y)
    assert batched, "the batched solver did not run"
    _same_machine(ours, ref, X, values="decision_function")


def test_svc_multiclass_one_vs_one_matches_libsvm(batched):
    X, y = _std(load_wine)
    ours = KernelSVC(C=3.0, decision_function_shape="ovo").fit(X, y)
    ref = svm.SVC(C=3.0, decision_function_shape="ovo").fit(X, y)
    assert len(batched) == 3  # one solve per pair of classes
    np.testing.assert_array_equal(ours.support_, ref.support_)
    dec = ref.decision_function(X)
    np.testing.assert_allclose(ours.decision_function(X), dec, rtol=0, atol=5e-3 * np.abs(dec).max())
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=0, atol=5e-3 * np.abs(dec).max())
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, rtol=0, atol=2e-2 * 3.0)


@pytest.mark.parametrize("params", [{}, {"C": 10.0, "epsilon": 0.05}, {"kernel": "poly", "degree": 2, "epsilon": 0.2}])
def test_svr_matches_libsvm(batched, diabetes, params):
    X, y = diabetes
    _same_machine(KernelSVR(**params).fit(X, y), svm.SVR(**params).fit(X, y), X)
    assert batched


@pytest.mark.parametrize("params", [{"nu": 0.5}, {"nu": 0.2, "C": 10.0}])
def test_nusvr_matches_libsvm(batched, diabetes, params):
    X, y = diabetes
    _same_machine(NuSVR(**params).fit(X, y), svm.NuSVR(**params).fit(X, y), X)
    assert batched


@pytest.mark.parametrize("params", [{"nu": 0.5}, {"nu": 0.1, "gamma": 0.05}])
def test_nusvc_matches_libsvm(batched, cancer, params):
    X, y = cancer
    _same_machine(NuSVC(**params).fit(X, y), svm.NuSVC(**params).fit(X, y), X, values="decision_function")
    assert batched


@pytest.mark.parametrize("params", [{"nu": 0.5}, {"nu": 0.05, "gamma": 0.02}])
def test_one_class_matches_libsvm(batched, cancer, params):
    X, _ = cancer
    _same_machine(OneClassSVM(**params).fit(X), svm.OneClassSVM(**params).fit(X), X, values="decision_function")
    assert batched


@pytest.mark.parametrize("make", [
    lambda: (KernelSVC(C=10.0, tol=1e-7), svm.SVC(C=10.0, tol=1e-7), "clf", "decision_function"),
    lambda: (KernelSVR(C=3.0, tol=1e-7), svm.SVR(C=3.0, tol=1e-7), "reg", "predict"),
    lambda: (NuSVC(nu=0.3, tol=1e-7), svm.NuSVC(nu=0.3, tol=1e-7), "clf", "decision_function"),
    lambda: (NuSVR(nu=0.3, tol=1e-7), svm.NuSVR(nu=0.3, tol=1e-7), "reg", "predict"),
    lambda: (OneClassSVM(nu=0.2, tol=1e-7), svm.OneClassSVM(nu=0.2, tol=1e-7), None, "decision_function"),
], ids=["SVC", "SVR", "NuSVC", "NuSVR", "OneClassSVM"])
def test_tight_tolerance_dual_coefficients(batched, cancer, diabetes, make):
    """Solved to tol = 1e-7, the batched solver's dual coefficients are LIBSVM's to 1e-5."""
    ours, ref, kind, values = make()
    X, y = diabetes if kind == "reg" else cancer
    if kind is None:
        ours.fit(X), ref.fit(X)
    else:
        ours.fit(X, y), ref.fit(X, y)
    _same_machine(ours, ref, X, values=values, tol=1e-5, dual_tol=1e-5)


def test_sample_weights_match_libsvm(batched, cancer):
    X, y = cancer
    sw = np.random.default_rng(0).uniform(0.2, 3.0, len(y))
    sw[::17] = 0.0
    ours, ref = KernelSVC(C=2.0).fit(X, y, sample_weight=sw), svm.SVC(C=2.0).fit(X, y, sample_weight=sw)
    _same_machine(ours, ref, X, sw=sw, values="decision_function")


def test_tiny_memory_budget(batched, cancer):
    """A budget holding a handful of kernel rows: working sets of a few variables, rows recomputed;
    the same machine."""
    X, y = cancer
    ours = KernelSVC(C=10.0, memory_budget=2**16).fit(X, y)
    assert batched[0] <= 16
    _same_machine(ours, svm.SVC(C=10.0).fit(X, y), X, values="decision_function")


@pytest.mark.parametrize("make", [lambda: (NuSVC(nu=0.3, memory_budget=2**16), svm.NuSVC(nu=0.3)),
                                  lambda: (OneClassSVM(nu=0.3, memory_budget=2**16), svm.OneClassSVM(nu=0.3))],
                         ids=["NuSVC", "OneClassSVM"])
def test_tiny_memory_budget_nu(batched, cancer, make):
    """The nu duals' feasible start (its kernel rows a few at a time) at the tiny budget too."""
    X, y = cancer
    ours, ref = make()
    if isinstance(ref, svm.OneClassSVM):
        ours.fit(X), ref.fit(X)
    else:
        ours.fit(X, y), ref.fit(X, y)
    assert batched[0] <= 16
    _same_machine(ours, ref, X, values="decision_function")


@pytest.mark.parametrize("make", [lambda: (KernelSVC(C=3.0), svm.SVC(C=3.0)), lambda: (NuSVC(nu=0.3), svm.NuSVC(nu=0.3))],
                         ids=["SVC", "NuSVC"])
def test_working_sets_of_one_pair(batched, cancer, monkeypatch, make):
    """q = 2: the kept variable and the new one may hold no violating pair (nu: two sign classes);
    the solver then selects afresh and still reaches LIBSVM's solution."""
    monkeypatch.setattr(_batched, "Q_MAX", 2)
    X, y = cancer
    ours, ref = make()
    ours.fit(X, y), ref.fit(X, y)
    assert batched == [2]
    _same_machine(ours, ref, X, values="decision_function")


def test_sparse_input(batched):
    X, y = load_digits(return_X_y=True)
    X, y = sp.csr_matrix(X[:600] / 16.0), (y[:600] > 4).astype(int)
    ours, ref = KernelSVC(C=2.0, gamma=0.05).fit(X, y), svm.SVC(C=2.0, gamma=0.05).fit(X, y)
    _same_machine(ours, ref, X, values="decision_function")


def _fashion(n):
    try:
        files = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True, text=True).stdout.split()
    except OSError:
        files = []
    roots = sorted({f.rsplit("/", 1)[0] for f in files if "train-images" in f})
    if not roots:
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    from mercer.datasets import load_fashion_mnist

    X, y, _, _ = load_fashion_mnist(roots[0])
    return X[:n].astype(np.float64), y[:n]


@pytest.mark.slow
def test_fashion_mnist_multiclass(batched):
    X, y = _fashion(1500)
    ours = KernelSVC(C=10.0, decision_function_shape="ovo").fit(X, y)
    ref = svm.SVC(C=10.0, decision_function_shape="ovo").fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    dec = ref.decision_function(X)
    np.testing.assert_allclose(ours.decision_function(X), dec, rtol=0, atol=5e-3 * np.abs(dec).max())
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, rtol=0, atol=2e-2 * 10.0)


# -- the pieces -----------------------------------------------------------------------------------------
def test_working_set_size():
    assert _batched.working_set_size(100_000, 10**6) == _batched.Q_MAX
    assert _batched.working_set_size(100, 10**6) == 64  # a power of two within the variables
    assert _batched.working_set_size(100_000, 40) == 16  # 4 q rows within the cache's rows
    assert _batched.working_set_size(100_000, 2) == 2  # one pair


def test_select_alternates_violators_and_skips_kept():
    F = np.array([3.0, -2.0, 1.0, 0.5, -5.0, 4.0])
    side = np.array([1, 2, 1, 3, 2, 1], dtype=np.int8)  # up, low, up, both, low, up
    y = np.ones(6)
    got = _batched._select(F, side, y, np.array([5]), 4, False)
    # I_up by F (5 kept): 0, 2, 3; I_low by -F: 4, 1, 3
    np.testing.assert_array_equal(got, [0, 4, 2, 1])


def test_auto_rule(monkeypatch):
    monkeypatch.setattr(_dual, "SOLVER", "auto")
    for inloop, sparse, n in ((True, False, _dual.BATCHED_MIN_INLOOP), (False, False, _dual.BATCHED_MIN_BLOCKED),
                              (False, True, _dual.BATCHED_MIN_SPARSE)):
        assert not _dual.use_batched(n - 1, inloop, sparse)
        assert _dual.use_batched(n, inloop, sparse)
    monkeypatch.setattr(_dual, "SOLVER", "smo")
    assert not _dual.use_batched(10**9, False)


def test_observer_and_ctrl_c_between_outer_iterations(batched, cancer):
    """Every outer iteration reports ("SMO", pair steps, limit) to an observe_blocks observer; an
    exception it raises (a Ctrl-C) stops the fit there, the estimator left unfitted."""
    from sklearn.exceptions import NotFittedError

    from mercer.linalg import observe_blocks

    X, y = cancer
    seen = []

    def observer(desc, done, total):
        if desc == "SMO":
            seen.append(done)
            if len(seen) == 2:
                raise KeyboardInterrupt

    est = KernelSVC(C=10.0, memory_budget=2**16)  # working sets of a few variables: many outer iterations
    with observe_blocks(observer), pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert len(seen) == 2 and 0 < seen[0] < seen[1]
    with pytest.raises(NotFittedError):
        est.predict(X)


# -- float32 products for dense RBF rows (_dual.f32_products) ----------------------------------------------
def _rows_both(X, gamma, **kw):
    Xt = torch.as_tensor(X)
    k = RBF(gamma=gamma)
    f64 = _dual._Rows(k, Xt, 2**30)
    f32 = _dual._Rows(k, Xt, 2**30, products=_dual.f32_products(Xt, gamma, ExecutionPlan(2**30)), **kw)
    idx = np.arange(0, len(X), 7)
    return f64(idx), f32(idx), f32


def test_f32_products_match_the_float64_rows_within_their_bound():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 100))
    g = 1.0 / (X.shape[1] * X.var())
    for offset in (0.0, 1e4):  # centred first: a common offset costs the float32 products nothing
        a, b, rows = _rows_both(X + offset, g)
        assert rows.P.dtype == torch.float32
        # the bound F32_ROWS_MAX_ERR puts on the exponent's rounding, as a relative error of the kernel
        np.testing.assert_allclose(b, a, rtol=2 * _dual.F32_ROWS_MAX_ERR, atol=0)
    # rows on given products (a multi-machine fit's, gathered) are those made here
    pre = _dual.f32_products(torch.as_tensor(X), g, ExecutionPlan(2**30))
    it = torch.arange(0, 600, 2)
    own = _dual._Rows(RBF(gamma=g), torch.as_tensor(X[::2]), 2**30, products=(pre[0][it], pre[1][it]))
    np.testing.assert_allclose(own(np.arange(0, 300, 7)), _rows_both(X[::2], g)[0], rtol=2 * _dual.F32_ROWS_MAX_ERR)


def test_f32_products_refused_where_their_rounding_would_show(monkeypatch):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 30))
    Xt = torch.as_tensor(X)
    assert _dual.f32_products(Xt, 0.5, ExecutionPlan(2**30)) is None  # gamma |x|^2 ~ 15: tiny kernel values
    assert _dual.f32_products(Xt * 1e20, 1e-45, ExecutionPlan(2**30)) is None  # squared norms past float32's range
    assert _dual.f32_products(Xt.float(), 0.01, ExecutionPlan(2**30)) is None  # float32 data: its own products
    assert _dual.f32_products(Xt, 0.01, ExecutionPlan(10 * X.size)) is None  # past the plan's float32 share
    # centred a block of rows at a time (13 rows here): the same features as at once
    P, pn = _dual.f32_products(Xt, 0.01, ExecutionPlan(2**30))
    monkeypatch.setattr(_dual, "SVM_BATCH_BYTES", 5000)
    P2, pn2 = _dual.f32_products(Xt, 0.01, ExecutionPlan(2**30))
    torch.testing.assert_close(P2, P, rtol=0, atol=0)
    torch.testing.assert_close(pn2, pn, rtol=0, atol=0)
    _, _, rows = _rows_both(X, 0.5)
    assert rows.P.dtype == torch.float64  # the float64 products, exactly LIBSVM's


def test_f32_rows_only_for_large_fits_at_loose_tol(monkeypatch):
    """Below F32_ROWS_MIN samples or at tol < F32_ROWS_TOL the rows are float64 products (LIBSVM's
    iterates, step for step); above, float32 products whose model is LIBSVM's within its tol."""
    assert not _dual.f32_rows(KernelSVC(), _dual.F32_ROWS_MIN - 1)
    assert _dual.f32_rows(KernelSVC(), _dual.F32_ROWS_MIN)
    assert not _dual.f32_rows(KernelSVC(tol=1e-6), 10**6)
    monkeypatch.setattr(_dual, "F32_ROWS_MIN", 100)
    made = []
    real = _dual.f32_products
    monkeypatch.setattr(_dual, "f32_products", lambda *a: made.append(1) or real(*a))
    X, y = make_classification(n_samples=900, n_features=100, n_informative=8, n_redundant=0, n_classes=3,
                               random_state=0)
    X = StandardScaler().fit_transform(X)
    ours = KernelSVC(decision_function_shape="ovo").fit(X, y)
    assert made == [1]  # once for the fit, its three machines gather theirs
    ref = svm.SVC(decision_function_shape="ovo").fit(X, y)
    assert len(np.setxor1d(ours.support_, ref.support_)) <= 2
    dec = ref.decision_function(X)
    np.testing.assert_allclose(ours.decision_function(X), dec, rtol=0, atol=2e-3 * np.abs(dec).max())
    assert not hasattr(ours, "_f32_products")  # the fit's scratch is not kept
    # few features: the compiled loop computes C-SVC's rows from the features, and no copy is made;
    # nu-SVC's start reads its rows through the products, which are made
    made.clear()
    KernelSVC().fit(X[:, :8], y)
    assert made == []
    NuSVC(nu=0.3).fit(X[:, :8], y)
    assert made == [1]
