"""``mercer plot`` on sparse data files (issue 29): a scipy ``.npz`` with its target in a ``.npy`` file
and Parquet in the sparse layout are opened as ``fit`` / ``predict`` open them and drawn from their
sparse rows (never densified); the pictures of more than two features project the sparse rows as
for dense data, and equal the pictures of the same data made dense."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from mercer import plotting, sources
from mercer.models import KernelPCA, KMeans

from conftest import cli_ok, cli_run, text_like_rows

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

N, D = 240, 400
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def problem():
    X, codes = text_like_rows(N, D, density=0.03, spacing=7)
    y = np.asarray(X[:, :60].sum(1)).ravel() + np.sin(3 * X[:, 7].toarray().ravel())
    return X, y, np.array(["sea", "food", "space"])[codes]


@pytest.fixture(scope="module")
def files(problem, tmp_path_factory):
    """``{kind: (data, label target, numeric target)}`` as the CLI reads them, and two fitted models."""
    X, y, labels = problem
    root = tmp_path_factory.mktemp("plot_sparse")
    sp.save_npz(root / "X.npz", X)
    np.save(root / "labels.npy", labels)
    np.save(root / "y.npy", y)
    table = {"npz": (root / "X.npz", root / "labels.npy", root / "y.npy")}
    sources.write_sparse_parquet(root / "X.parquet", X, labels, target="label", row_group_size=50)
    sources.write_sparse_parquet(root / "Xy.parquet", X, y, target="y", row_group_size=50)
    table["parquet"] = (root / "X.parquet", "label", None)
    return root, table


def _no_dense(monkeypatch):
    """Densifying the rows (scipy's toarray, or mercer's sparse rows' to_dense beyond a few seeds)
    fails the test."""
    from mercer._sparse import SparseRows

    for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix):
        real = cls.toarray

        def toarray(self, *a, _real=real, **kw):
            assert self.shape[1] <= 2 or self.shape[0] <= 2, f"densified {self.shape}"
            return _real(self, *a, **kw)

        monkeypatch.setattr(cls, "toarray", toarray)
    real_dense = SparseRows.to_dense

    def to_dense(self):
        assert self.shape[1] <= 2 or self.shape[0] <= 16, f"densified {tuple(self.shape)}"
        return real_dense(self)

    monkeypatch.setattr(SparseRows, "to_dense", to_dense)


@pytest.mark.parametrize("kind", ["npz", "parquet"])
def test_every_picture_of_a_sparse_file(kind, files, tmp_path, capsys, monkeypatch):
    root, table = files
    data, labels, _ = table[kind]
    models = {}
    for name, model, target in (("svc", "svc", root / "labels.npy"), ("ridge", "nystroem-ridge", root / "y.npy")):
        models[name] = tmp_path / f"{name}.mercer"
        cli_ok(["fit", "--data", root / "X.npz", "--target", target, "--model", model, "--no-tune", "--out",
                models[name], "-q"], capsys)
    _no_dense(monkeypatch)
    for argv in (["embedding", "--target", labels], ["clusters", "--clusters", "3", "--max-rows", "100"],
                 ["approximation"], ["learning-curve", "--model", models["svc"], "--target", labels]):
        png = tmp_path / f"{argv[0]}.png"
        out, _ = cli_ok(["plot", *argv, "--data", data, "--out", png], capsys)
        rows = 100 if argv[0] == "clusters" else N
        assert f"wrote {png} ({argv[0]}, {rows} rows)" in out
        assert png.read_bytes()[:8] == PNG
    png = tmp_path / "predicted.png"
    if kind == "npz":
        cli_ok(["plot", "predicted", "--data", data, "--target", root / "y.npy", "--model", models["ridge"], "--out",
                png], capsys)
    else:
        cli_ok(["plot", "predicted", "--data", root / "Xy.parquet", "--target", "y", "--model", models["ridge"],
                "--out", png], capsys)
    assert png.read_bytes()[:8] == PNG


def test_bad_files_name_the_parameter(files, tmp_path, capsys):
    root, table = files
    np.savez(tmp_path / "not_sparse.npz", a=np.ones(3))
    np.save(tmp_path / "short.npy", np.ones(N - 1))
    cases = [(["embedding", "--data", tmp_path / "not_sparse.npz"], "--data .*not_sparse.npz.*save_npz"),
             (["embedding", "--data", root / "X.npz", "--target", tmp_path / "short.npy"],
              rf"--target .*short.npy: expected {N} values"),
             (["embedding", "--data", root / "X.npz", "--target", "label"], "--target as a .npy file"),
             (["embedding", "--data", root / "X.parquet", "--target", "nope"], "nope"),
             (["embedding", "--data", tmp_path / "missing.npz"], "not found")]
    for argv, message in cases:
        png = tmp_path / "bad.png"
        code, _, err = cli_run(["plot", *argv, "--out", png], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert pytest.importorskip("re").search(message, err), err
        assert not png.exists()


def test_regions_of_many_sparse_features_is_refused_and_two_are_drawn(files, problem, tmp_path, capsys):
    root, table = files
    X, _, labels = problem
    model = tmp_path / "svc.mercer"
    cli_ok(["fit", "--data", root / "X.npz", "--target", root / "labels.npy", "--model", "svc", "--no-tune", "--out",
            model, "-q"], capsys)
    code, _, err = cli_run(["plot", "regions", "--data", root / "X.npz", "--target", root / "labels.npy", "--model",
                            model, "--out", tmp_path / "r.png"], capsys)
    assert code == 2 and f"sparse rows of {D} features" in err and "mercer plot embedding" in err
    two = sp.csr_matrix(np.column_stack([X[:, 7].toarray().ravel(), X[:, 14].toarray().ravel()]))
    sp.save_npz(tmp_path / "two.npz", two)
    cli_ok(["fit", "--data", tmp_path / "two.npz", "--target", root / "labels.npy", "--model", "svc", "--no-tune",
            "--out", tmp_path / "two.mercer", "-q"], capsys)
    cli_ok(["plot", "regions", "--data", tmp_path / "two.npz", "--target", root / "labels.npy", "--model",
            tmp_path / "two.mercer", "--out", tmp_path / "two.png"], capsys)
    assert (tmp_path / "two.png").read_bytes()[:8] == PNG


# -- the pictures' numbers: sparse rows as their dense form ----------------------------------------
def _same_up_to_sign(A, B, atol):
    """Columns equal up to their sign."""
    for j in range(A.shape[1]):
        s = np.sign(A[:, j] @ B[:, j]) or 1.0
        np.testing.assert_allclose(A[:, j], s * B[:, j], rtol=0, atol=atol)


def test_clusters_project_sparse_rows_on_their_principal_components(problem):
    X = problem[0]
    est = KMeans(3, random_state=0).fit(X)
    sparse_ax = plotting.clusters(est, X)
    dense_ax = plotting.clusters(est, X.toarray())
    for got, ref in zip(sparse_ax.collections, dense_ax.collections):  # the points, then the centres
        _same_up_to_sign(got.get_offsets().data, ref.get_offsets().data, atol=1e-9)
    np.testing.assert_array_equal(sparse_ax.collections[0].get_array(), est.labels_)


def test_embedding_and_approximation_errors_of_sparse_rows(problem):
    X, _, labels = problem
    ax = plotting.embedding(X, labels, transformer=KernelPCA(n_components=2, kernel="rbf", gamma=0.5).fit(X))
    ref = KernelPCA(n_components=2, kernel="rbf", gamma=0.5).fit(X.toarray()).transform(X.toarray())
    got = np.concatenate([c.get_offsets().data for c in ax.collections])
    order = np.concatenate([np.flatnonzero(labels.astype(str) == c) for c in np.unique(labels.astype(str))])
    _same_up_to_sign(got, ref[order], atol=1e-8)
    errs = plotting.approximation_errors(X, "rbf", (10, 40), gamma=0.5)
    dense = plotting.approximation_errors(X.toarray(), "rbf", (10, 40), gamma=0.5)
    for method in errs:
        np.testing.assert_allclose(errs[method], dense[method], rtol=1e-8)
