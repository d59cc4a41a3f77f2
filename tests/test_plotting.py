"""mercer.plotting and `mercer plot`: each picture is checked against the numbers it should show."""

import sys

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import mercer  # noqa: E402
from mercer import plotting  # noqa: E402
from mercer.datasets import make_circle_separable  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def circle():
    X, y = make_circle_separable(150, margin=0.05, random_state=0)
    X.flags.writeable = False
    return X, y


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install mercer\[plot\]"):
        plotting.require_matplotlib()
    with pytest.raises(ImportError, match=r"pip install mercer\[plot\]"):
        plotting.cg_convergence([1.0, 0.1])


def test_plot_dendrogram_without_matplotlib_names_the_extra(monkeypatch):
    model = mercer.KernelAgglomerative(n_clusters=2).fit(np.random.default_rng(0).normal(size=(12, 2)))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install mercer\[plot\]"):
        mercer.plot_dendrogram(model)




def test_decision_regions_2d_follow_the_classifier(circle):
    X, y = circle
    clf = mercer.KernelRidgeClassifier(kernel="rbf", gamma=2.0, alpha=0.01).fit(X, y)
    ax = plotting.decision_regions(clf, X, y, resolution=40)
    assert isinstance(ax, matplotlib.axes.Axes)
    assert "KernelRidgeClassifier" in ax.get_title()
    # the scatter shows the samples at their coordinates, coloured by class index
    points = ax.collections[-1]
    np.testing.assert_array_equal(points.get_offsets(), X)
    np.testing.assert_array_equal(points.get_array(), (y == 1).astype(int))
    # the boundary contour separates cells predicted differently: where the data are, the circle
    # r^2 = 0.6 (the far corners, without data, may hold more of it)
    boundary = ax.collections[-2]
    r = np.sqrt((np.concatenate([p.vertices for p in boundary.get_paths()]) ** 2).sum(1))
    assert np.mean(np.abs(r - np.sqrt(0.6)) < 0.12) > 0.9


def test_decision_regions_on_a_kernel_pca_projection(circle):
    X, y = circle
    X4 = np.column_stack([X, 0.01 * np.random.default_rng(1).normal(size=(len(X), 2))])
    clf = mercer.KernelRidgeClassifier(kernel="rbf", gamma=2.0, alpha=0.01).fit(X4, y)
    proj = mercer.KernelPCA(n_components=2, kernel="rbf", gamma=0.5, fit_inverse_transform=True).fit(X4)
    ax = plotting.decision_regions(clf, X4, y, projection=proj, resolution=30)
    np.testing.assert_allclose(ax.collections[-1].get_offsets(), proj.transform(X4))
    assert ax.get_xlabel() == "kernel PC 1"
    with pytest.raises(ValueError, match="d >= 2"):
        plotting.decision_regions(clf, X4[:, :1])


def test_embedding_is_the_kernel_pca_transform(circle):
    X, y = circle
    kpca = mercer.KernelPCA(n_components=2, kernel="rbf", gamma=1.0).fit(X)
    ax = plotting.embedding(X, y, transformer=kpca)
    np.testing.assert_allclose(ax.collections[0].get_offsets(), kpca.transform(X))
    np.testing.assert_array_equal(ax.collections[0].get_array(), y)


def test_embedding_with_text_labels_has_a_legend(circle):
    """Text labels (a CSV's class column) get one colour each and a legend, not a colour bar."""
    X, y = circle
    labels = np.where(y == 1, "inner", "outer")
    kpca = mercer.KernelPCA(n_components=2, kernel="rbf", gamma=1.0).fit(X)
    ax = plotting.embedding(X, labels, transformer=kpca)
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["inner", "outer"]
    Z = kpca.transform(X)
    np.testing.assert_allclose(ax.collections[0].get_offsets(), Z[labels == "inner"])


def test_predicted_vs_true_reports_r2():
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = X[:, 0] ** 2 + 0.1 * rng.normal(size=80)
    reg = mercer.KernelRidge(kernel="rbf", alpha=0.1).fit(X, y)
    ax = plotting.predicted_vs_true(reg, X, y)
    assert ax.get_title().endswith(f"R² = {r2_score(y, reg.predict(X)):.3f}")
    np.testing.assert_allclose(ax.collections[0].get_offsets(), np.column_stack([y, reg.predict(X)]))


def test_learning_curve_plots_scikit_learns_errors(circle):
    from sklearn.model_selection import learning_curve

    X, y = circle
    est = mercer.KernelRidgeClassifier(kernel="rbf", alpha=0.1)
    sizes = np.array([0.3, 1.0])
    ax = plotting.learning_curve(est, X, y, train_sizes=sizes, cv=3)
    n, _, test = learning_curve(est, X, y, train_sizes=sizes, cv=3, scoring="accuracy", shuffle=True, random_state=0)
    line = ax.get_lines()[1]
    np.testing.assert_array_equal(line.get_xdata(), n)
    np.testing.assert_allclose(line.get_ydata(), 1 - test.mean(1))


def test_approximation_errors_match_a_dense_reference(circle):
    X, _ = circle
    n = len(X)
    errs = plotting.approximation_errors(X, "rbf", (20, n), methods=("nystroem", "rff"), gamma=1.0)
    # Nystroem with every point as a landmark reproduces K
    assert errs["nystroem"][1] < 1e-6
    rff = mercer.RandomFourierFeatures(kernel="rbf", gamma=1.0, n_components=20, random_state=0).fit(X)
    K = np.exp(-1.0 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    Z = np.asarray(rff.transform(X))
    assert errs["rff"][0] == pytest.approx(np.linalg.norm(K - Z @ Z.T) / np.linalg.norm(K), rel=1e-10)
    assert errs["rff"][1] < errs["rff"][0]
    with pytest.raises(ValueError, match="'methods' parameter"):
        plotting.approximation_errors(X, methods=("svd",))
    ax = plotting.approximation_error(X, "rbf", (10, 40), gamma=1.0)
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == 3


def test_cg_convergence_draws_the_solvers_history():
    A = torch.randn(60, 60, dtype=torch.float64)
    A = A @ A.T + 60 * torch.eye(60, dtype=torch.float64)
    res = mercer.linalg.conjugate_gradient(lambda v: A @ v, torch.ones(60, dtype=torch.float64), tol=1e-10)
    ax = plotting.cg_convergence(res, tol=1e-10)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), res.history)
    assert ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="cg_history_"):
        plotting.cg_convergence(mercer.KernelRidge())


@pytest.mark.parametrize("make", [lambda: mercer.KMeans(n_clusters=2, random_state=0),
                                  lambda: mercer.KernelKMeans(n_clusters=2, kernel="rbf", gamma=2.0, random_state=0)])
def test_clusters_colour_the_labels(make):
    from sklearn.datasets import make_circles

    X, _ = make_circles(120, factor=0.3, noise=0.03, random_state=0)
    est = make().fit(X)
    ax = plotting.clusters(est, X)
    np.testing.assert_array_equal(ax.collections[0].get_array(), est.labels_)
    assert (len(ax.collections) == 2) == hasattr(est, "cluster_centers_")


# -- the command ---------------------------------------------------------------------------------
def _write(tmp_path, X, y, name="data.csv"):
    import pandas as pd

    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    frame["label"] = y
    frame.to_csv(tmp_path / name, index=False)
    return str(tmp_path / name)


def test_cli_plot_regions_and_embedding(tmp_path, circle, capsys):
    from mercer.cli import main

    X, y = circle
    data = _write(tmp_path, X, y)
    model = str(tmp_path / "m.mercer")
    assert main(["fit", "--data", data, "--target", "label", "--model", "ridge-classifier", "--no-tune", "--out", model,
                 "-q"]) == 0
    for argv in (["regions", "--model", model, "--target", "label"], ["embedding", "--target", "label"],
                 ["clusters", "--clusters", "2"], ["approximation"]):
        png = tmp_path / f"{argv[0]}.png"
        assert main(["plot", *argv, "--data", data, "--out", str(png)]) == 0, argv
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 150_000
    capsys.readouterr()
    assert main(["plot", "predicted", "--data", data, "--out", str(tmp_path / "p.png")]) == 2
    assert "needs --model" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_cli_plot_without_matplotlib_says_how_to_install(tmp_path, circle, monkeypatch, capsys):
    from mercer.cli import main

    X, y = circle
    data = _write(tmp_path, X, y)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    assert main(["plot", "embedding", "--data", data, "--out", str(tmp_path / "e.png")]) == 2
    err = capsys.readouterr().err
    assert "pip install mercer[plot]" in err and len(err.strip().splitlines()) == 1


def test_cg_convergence_of_a_fitted_nystroem_model():
    """NystroemKernelRidge records its CG residuals; the plot draws one point per iteration."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 4))
    m = mercer.NystroemKernelRidge(alpha=1e-3, kernel="rbf", gamma=0.2, n_centers=800, solver="cg",
                                   random_state=0).fit(X, np.sin(X[:, 0]))
    assert len(m.cg_history_) == int(m.n_iter_[0]) and m.residual_[0] <= m.cg_history_[-1] * (1 + 1e-9)
    ax = plotting.cg_convergence(m, tol=m.tol)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), m.cg_history_)
    direct = mercer.NystroemKernelRidge(kernel="rbf", n_centers=50, solver="direct", random_state=0).fit(X[:200], X[:200, 0])
    assert direct.cg_history_.size == 0
