"""NystroemKernelRidgeCV / NystroemKernelRidgeClassifierCV on sparse X (issue 29): the learning runs on
sparse blocks and sparse centres, and learns what the same fit on ``X.toarray()`` learns."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mercer import io, sources
from mercer._sparse import SparseRows, as_sparse_rows
from mercer.kernels import RBF, LearnableKernel
from mercer.linalg import kernel_statistics
from mercer.models.ridge import NystroemKernelRidgeClassifierCV, NystroemKernelRidgeCV

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_sparse_budget  # noqa: E402 - the budget child of the other estimators

RTOL = 1e-8


def _rows(labels: np.ndarray, d: int, rng) -> sp.csr_matrix:
    """TF-IDF-like rows: each a sparse prototype of its class (40 stored entries) plus 20 entries of
    its own, L2-normalised (~4% of the columns stored, many columns empty)."""
    protos = sp.random(labels.max() + 1, d, density=40 / d, format="csr", random_state=rng.integers(1 << 31))
    noise = sp.random(labels.size, d, density=20 / d, format="csr", random_state=rng.integers(1 << 31))
    X = sp.csr_matrix(protos[labels] + noise)
    X.data += 0.05
    norms = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X)


@pytest.fixture(scope="module")
def data():
    """Rows of three prototypes, a target smooth in them (an interior optimum of both objectives:
    the fits stop where they do for the objective, not for rounding), three classes of it."""
    rng = np.random.default_rng(0)
    X = _rows(rng.integers(0, 3, 280), 1500, rng)
    X, Xt = X[:240], X[240:]
    sw = rng.uniform(0.5, 2.0, 240)
    f = np.sin(2.0 * (X @ rng.normal(size=1500)))
    y = f + 0.05 * rng.normal(size=240)
    labels = np.digitize(f, np.quantile(f, [1 / 3, 2 / 3]))
    return X, Xt, y, labels, sw


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


KW = dict(n_centers=30, random_state=0, dtype="float64", solver="direct", max_iter=20)


@pytest.mark.parametrize("objective", ["gcv", "holdout"])
@pytest.mark.parametrize("kernel", ["rbf", "scaled_rbf", "laplacian"])
def test_regressor_learns_what_the_dense_fit_learns(data, objective, kernel):
    X, Xt, y, _, sw = data
    k = {"rbf": RBF(gamma=1.0), "scaled_rbf": 2.0 * RBF(gamma=1.0), "laplacian": "laplacian"}[kernel]
    kw = dict(KW, kernel=k, objective=objective)
    a = NystroemKernelRidgeCV(**kw).fit(X, y, sample_weight=sw)
    b = NystroemKernelRidgeCV(**kw).fit(X.toarray(), y, sample_weight=sw)
    assert a.n_evals_ >= 2 and a.cv_error_ < a.objective_path_[0]  # it learned something (the start and a step)
    assert isinstance(a.centers_, SparseRows) and isinstance(a.estimator_.centers_, SparseRows)
    np.testing.assert_array_equal(a.centers_.to_dense().numpy(), b.centers_.numpy())
    assert abs(a.cv_error_ - b.cv_error_) <= RTOL * abs(b.cv_error_)
    np.testing.assert_allclose(a.theta_, b.theta_, rtol=RTOL, atol=RTOL)
    assert _rel(a.predict(Xt), b.predict(Xt.toarray())) <= RTOL
    # a model of sparse data predicts from sparse rows and from dense ones alike
    assert _rel(a.predict(Xt.toarray()), a.predict(Xt)) <= 1e-12


@pytest.mark.parametrize("objective", ["gcv", "holdout"])
def test_classifier_learns_what_the_dense_fit_learns(data, objective):
    X, Xt, _, labels, _ = data
    kw = dict(KW, gamma=1.0, objective=objective, class_weight="balanced")
    a = NystroemKernelRidgeClassifierCV(**kw).fit(X, labels)
    b = NystroemKernelRidgeClassifierCV(**kw).fit(X.toarray(), labels)
    assert isinstance(a.centers_, SparseRows)
    assert abs(a.cv_error_ - b.cv_error_) <= RTOL * abs(b.cv_error_)
    np.testing.assert_allclose(a.theta_, b.theta_, rtol=RTOL, atol=RTOL)
    assert _rel(a.decision_function(Xt), b.decision_function(Xt.toarray())) <= RTOL
    np.testing.assert_array_equal(a.predict(Xt), b.predict(Xt.toarray()))
    np.testing.assert_array_equal(a.classes_, b.classes_)


@pytest.mark.parametrize("kernel", [RBF(gamma=0.7), 1.5 * RBF(gamma=0.7), RBF(gamma=0.7) + RBF(gamma=3.0)])
def test_statistics_gradient_on_sparse_blocks_is_the_dense_one(data, kernel):
    """The closed form on sparse rows (RBF and c * RBF with one gamma) and autograd on sparse rows
    (a sum of two RBFs) give the gradient of the dense closed form, over several blocks and two
    weight columns."""
    X, _, y, _, sw = data
    lk = LearnableKernel(kernel, X.shape[1])
    Xs = as_sparse_rows(X, dtype=torch.float64)
    Xd = torch.tensor(X.toarray())
    Zs = Xs[::8].clone()
    Zd = Zs.to_dense()
    Y = torch.tensor(np.stack([y, y**2], 1))
    W = torch.tensor(np.stack([sw, (sw > 1.0) * 1.0], 1))
    grads, values = [], []
    for Xb, Z in ((Xs, Zs), (Xd, Zd)):
        theta = torch.tensor(lk.theta0, requires_grad=True)
        st = kernel_statistics(lk.at, theta, Z, Xb, Y, W, rows=50)
        loss = (st.gram.sin().sum() + (st.rhs**2).sum() + st.colsum.cos().sum() + st.kdiag.sum())
        loss.backward()
        grads.append(theta.grad.numpy().copy())
        values.append(float(loss.detach()))
    assert abs(values[0] - values[1]) <= 1e-12 * abs(values[1])
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    assert np.abs(grads[1]).min() > 0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # the dense fit of 2 iterations
def test_what_cannot_be_learned_on_sparse_rows_is_refused(data):
    X, _, y, labels, _ = data
    with pytest.raises(ValueError, match=r"learn_centers=True.*learn_centers=False"):
        NystroemKernelRidgeCV(learn_centers=True, **KW).fit(X, y)
    with pytest.raises(ValueError, match=r"learn_centers=True"):
        NystroemKernelRidgeClassifierCV(learn_centers=True, **KW).fit(X, labels)
    ard = RBF(gamma=[1.0] * X.shape[1])
    with pytest.raises(ValueError, match=r"per-feature \(ARD\).*gamma.*n_features=1500.*scalar"):
        NystroemKernelRidgeCV(kernel=ard, **KW).fit(X, y)
    with pytest.raises(ValueError, match=r"per-feature \(ARD\).*k2__gamma"):
        NystroemKernelRidgeClassifierCV(kernel=RBF(1.0) + RBF(gamma=[1.0] * X.shape[1]), **KW).fit(X, labels)
    # the same parameters on dense rows are learned as before
    assert NystroemKernelRidgeCV(learn_centers=True, **dict(KW, max_iter=2)).fit(X[:60].toarray(), y[:60]).n_evals_ >= 1


def test_given_centres_sparse_or_dense_stay_sparse_rows(data):
    X, Xt, y, _, _ = data
    C = X[5:25]
    before = C.copy()
    a = NystroemKernelRidgeCV(**dict(KW, centers=C, gamma=1.0)).fit(X, y)
    b = NystroemKernelRidgeCV(**dict(KW, centers=C.toarray(), gamma=1.0)).fit(X, y)
    c = NystroemKernelRidgeCV(**dict(KW, centers=C.toarray(), gamma=1.0)).fit(X.toarray(), y)
    assert isinstance(a.centers_, SparseRows) and isinstance(b.centers_, SparseRows)
    assert _rel(a.predict(Xt), c.predict(Xt.toarray())) <= RTOL
    assert _rel(b.predict(Xt), c.predict(Xt.toarray())) <= RTOL
    assert (C != before).nnz == 0  # the caller's matrix is not mutated


def test_a_sparse_source_learns_the_in_memory_model(data, tmp_path):
    X, Xt, y, labels, _ = data
    sp.save_npz(tmp_path / "X.npz", X, compressed=False)
    kw = dict(KW, gamma=1.0, memory_budget=1 << 20)  # several blocks
    a = NystroemKernelRidgeCV(**kw).fit(sources.SparseSource(tmp_path / "X.npz"), y)
    b = NystroemKernelRidgeCV(**kw).fit(X, y)
    assert isinstance(a.centers_, SparseRows)
    assert abs(a.cv_error_ - b.cv_error_) <= 1e-12 * abs(b.cv_error_)
    assert _rel(a.predict(Xt), b.predict(Xt)) <= 1e-10
    c = NystroemKernelRidgeClassifierCV(**kw).fit(sources.SparseSource(tmp_path / "X.npz"), labels)
    np.testing.assert_array_equal(c.predict(Xt), NystroemKernelRidgeClassifierCV(**kw).fit(X, labels).predict(Xt))


def test_coarse_stages_on_sparse_rows_and_a_sparse_source_learn_the_dense_fit(data, tmp_path):
    """coarse_rows draws the same rows of sparse X, of a sparse source and of X.toarray()."""
    X, Xt, y, _, sw = data
    sp.save_npz(tmp_path / "X.npz", X, compressed=False)
    kw = dict(KW, gamma=1.0, coarse_rows=[80, 160], memory_budget=1 << 22)
    a = NystroemKernelRidgeCV(**kw).fit(X, y, sample_weight=sw)
    b = NystroemKernelRidgeCV(**kw).fit(sources.SparseSource(tmp_path / "X.npz"), y, sample_weight=sw)
    c = NystroemKernelRidgeCV(**kw).fit(X.toarray(), y, sample_weight=sw)
    assert [st["n_rows"] for st in a.stages_] == [80, 160, 240]
    assert isinstance(a.centers_, SparseRows) and isinstance(b.centers_, SparseRows)
    assert _rel(a.objective_path_, c.objective_path_) <= 1e-6
    assert _rel(b.objective_path_, a.objective_path_) <= 1e-10
    assert _rel(a.predict(Xt), c.predict(Xt.toarray())) <= 1e-6


def test_saved_and_loaded_with_sparse_centres(data, tmp_path):
    X, Xt, y, _, _ = data
    model = NystroemKernelRidgeCV(**dict(KW, gamma=1.0)).fit(X, y)
    io.save(model, tmp_path / "m.zip")
    back = io.load(tmp_path / "m.zip")
    np.testing.assert_array_equal(back.predict(Xt), model.predict(Xt))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA caps anonymous mappings on Linux")
def test_fits_where_dense_x_exceeds_the_budget():
    """400 x 10^6 rows (3 GiB dense) in a child capped at 2.5 GiB, memory_budget=512 MiB: in memory
    and streamed from a scipy .npz (tests/test_sparse_budget.py's child)."""
    names = ["NystroemKernelRidgeCV", "NystroemKernelRidgeClassifierCV", "NystroemKernelRidgeCV (npz)",
             "NystroemKernelRidgeClassifierCV (npz)"]
    cells = test_sparse_budget._run(names, timeout=600)
    assert {c["estimator"] for c in cells} == set(names)
    assert all(c["status"] == "ok" for c in cells), cells
