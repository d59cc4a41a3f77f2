"""Save/load without pickle: every whitelisted estimator round-trips to identical output."""

from __future__ import annotations

import json
import pathlib
import warnings
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge

from mercer.approx import IncompleteCholesky, LandmarkFeatures, Nystroem, PolynomialFeatureMap, RandomFourierFeatures
from mercer import get_config
from mercer.io import kernel_from_dict, kernel_to_dict, load, loadable_estimators, save
from mercer.kernels import (
    RBF,
    Constant,
    HistogramIntersection,
    Intersection,
    Laplacian,
    Linear,
    Matern,
    Polynomial,
    Precomputed,
    Quadratic,
    Sigmoid,
)
from mercer.models import (KernelPCA, KernelRidge, KernelRidgeClassifier, NystroemKernelRidge,
                           NystroemKernelRidgeClassifier)
from mercer.models import BudgetSVC, KernelSVC, KernelSVR, NuSVC, NuSVR, OneClassSVM, ReducedSetSVC
from mercer.models import NystroemKernelRidgeClassifierCV, NystroemKernelRidgeCV
from mercer.models import (KernelKMeans, KernelKNeighborsClassifier, KernelKNeighborsRegressor, KernelLogisticRegression,
                           KernelPerceptron, KernelRadiusNeighborsClassifier, KernelRadiusNeighborsRegressor, KMeans)

from mercer.approx import RandomMaclaurin, TensorSketch
from mercer.models import (ApproximateKernelPCA, GaussianProcessRegressor, KernelAgglomerative, KernelRidgeCV,
                           MKLClassifier, MKLRegressor, RandomFeatureRidge, SketchedKernelRidge, SparseGPRegressor)

from conftest import cuda, readonly


@pytest.fixture(scope="module")
def data(digits):
    X, y = digits
    return readonly(X[:150]), readonly(y[:150]), readonly(X[150:200])


def _output(est, X):
    if isinstance(est, KernelAgglomerative):  # no out-of-sample map: the fitted tree and cut
        return np.column_stack([np.asarray(est.labels_)[:-1], est.children_])
    if isinstance(est, (GaussianProcessRegressor, SparseGPRegressor)):
        mean, std = est.predict(X, return_std=True)
        return mean, std
    return est.transform(X) if hasattr(est, "transform") else est.predict(X)


CASES = {
    "ridge-composite-dual": lambda: KernelRidge(alpha=0.1, kernel=0.5 * RBF(0.1) + Linear()),
    "ridge-poly-primal": lambda: KernelRidge(alpha=0.5, kernel="poly", degree=2, gamma=0.5),
    "ridge-float32": lambda: KernelRidge(kernel="rbf", gamma=0.05, dtype="float32"),
    "ridge-alpha-array": lambda: KernelRidge(alpha=np.array([0.1, 1.0]), kernel=Matern(nu=2.5)),
    "classifier-strings": lambda: KernelRidgeClassifier(alpha=0.1, kernel="rbf", gamma=0.05,
                                                        class_weight={"a": 2.0, "b": 1.0, "c": 1.0}),
    "classifier-binary-primal": lambda: KernelRidgeClassifier(kernel=2.0 * Linear() + 1.0),
    "classifier-binary-product": lambda: KernelRidgeClassifier(kernel=2.0 * Linear() * RBF(0.1) + 1.0),
    "kpca": lambda: KernelPCA(n_components=4, kernel="rbf", gamma=0.05, kernel_params=None),
    "kpca-all-components": lambda: KernelPCA(kernel=Laplacian(gamma=0.1), eigen_solver="dense"),
    "kpca-blocked": lambda: KernelPCA(3, kernel="rbf", eigen_solver="randomized", random_state=0,
                                      memory_budget=100_000),
    "polynomial-map": lambda: PolynomialFeatureMap(degree=3, coef0=0.5, gamma=0.2),
    "nystroem-ridge": lambda: NystroemKernelRidge(alpha=0.1, kernel=RBF(0.05) + Linear(), n_centers=30,
                                                  random_state=0),
    "classifier-nystroem": lambda: NystroemKernelRidgeClassifier(kernel="rbf", gamma=0.05, n_centers=40,
                                                                 centers="kmeans++", random_state=0),
    "nystroem-map": lambda: Nystroem(kernel="laplacian", n_components=20, method="cholesky", random_state=0),
    "landmark-features": lambda: LandmarkFeatures(n_components=12, random_state=0),
    "random-fourier-features": lambda: RandomFourierFeatures(kernel=2.0 * Matern(nu=1.5), n_components=16,
                                                             random_state=0),
    "classifier-perceptron": lambda: KernelPerceptron(kernel="rbf", gamma=0.05, averaged=True, random_state=0),
    "classifier-logistic": lambda: KernelLogisticRegression(kernel="rbf", gamma=0.05, C=2.0),
    "classifier-svc": lambda: KernelSVC(C=2.0, kernel="rbf", gamma=0.05),
    "classifier-svc-ovr-proba": lambda: KernelSVC(kernel=RBF(0.05) + Linear(), multiclass="ovr", probability=True,
                                                  random_state=0),
    "classifier-reduced-svc": lambda: ReducedSetSVC(n_vectors=0.5, random_state=0),
    "classifier-budget-svc": lambda: BudgetSVC(n_vectors=10, max_iter=20, random_state=0),
    "classifier-nusvc": lambda: NuSVC(nu=0.2, gamma=0.05),
    "regressor-svr": lambda: KernelSVR(C=2.0, gamma=0.05, epsilon=0.05),
    "regressor-nusvr": lambda: NuSVR(nu=0.3, gamma=0.05),
    "one-class-svm-map": lambda: OneClassSVM(nu=0.2, gamma=0.05),  # (-map: fitted on X alone)
    "kmeans-map": lambda: KMeans(n_clusters=5, n_init=2, random_state=0),
    "kernel-kmeans-map": lambda: KernelKMeans(n_clusters=4, kernel="rbf", gamma=0.05, random_state=0),
    "classifier-knn": lambda: KernelKNeighborsClassifier(n_neighbors=3, kernel="rbf", gamma=0.05, weights="distance"),
    "knn-regressor": lambda: KernelKNeighborsRegressor(n_neighbors=4, kernel=Laplacian(gamma=0.1)),
    "classifier-rnn": lambda: KernelRadiusNeighborsClassifier(radius=1.2, kernel="rbf", gamma=0.05,
                                                              outlier_label="most_frequent"),
    "rnn-regressor": lambda: KernelRadiusNeighborsRegressor(radius=1.3, kernel="rbf", gamma=0.05),
    "incomplete-cholesky": lambda: IncompleteCholesky(kernel="rbf", n_components=10, rule="greedy",
                                                      random_state=0),
    # models holding other mercer estimators (nested in the model file) or learnt kernels
    "random-feature-ridge": lambda: RandomFeatureRidge(alpha=0.1, kernel="rbf", gamma=0.05, n_components=40,
                                                       random_state=0),
    "sketched-ridge": lambda: SketchedKernelRidge(kernel="rbf", gamma=0.05, n_components=30, sketch="hadamard",
                                                  random_state=0),
    "kpca-approximate": lambda: ApproximateKernelPCA(3, kernel="rbf", gamma=0.05, n_features=40, random_state=0),
    "tensor-sketch-map": lambda: TensorSketch(degree=2, gamma=0.1, n_components=32, random_state=0),
    "random-maclaurin-map": lambda: RandomMaclaurin(degree=3, gamma=0.1, n_components=32, random_state=0),
    "gp": lambda: GaussianProcessRegressor(kernel=RBF(0.05) + Linear(), max_iter=20),
    "gp-sparse": lambda: SparseGPRegressor(n_inducing=15, max_iter=10, random_state=0),
    "ridge-cv": lambda: KernelRidgeCV(kernel="rbf", gamma=0.05, max_iter=10),
    "nystroem-ridge-cv": lambda: NystroemKernelRidgeCV(gamma=0.05, n_centers=20, max_iter=5, random_state=0),
    "classifier-nystroem-cv": lambda: NystroemKernelRidgeClassifierCV(gamma=0.05, n_centers=20, max_iter=5,
                                                                      random_state=0),
    "mkl-regressor": lambda: MKLRegressor(kernels=[RBF(0.05), Linear(), Polynomial(degree=2)]),
    "classifier-mkl": lambda: MKLClassifier(kernels=[RBF(0.05), Laplacian(0.1)], max_iter=100),
    "classifier-svc-nystroem": lambda: KernelSVC(kernel="rbf", gamma=0.05, approximation="nystroem", n_components=40,
                                                 random_state=0),
    "agglomerative-map": lambda: KernelAgglomerative(n_clusters=4, kernel="rbf", gamma=0.05),
}


def _fit(name, est, X, y):
    if name == "ridge-poly-primal":
        return est.fit(X[:, :6], y), X[:, :6]
    if name == "ridge-alpha-array":
        return est.fit(X, np.column_stack([y, -y])), X
    if name == "classifier-strings":
        return est.fit(X, np.array(["a", "b", "c"], dtype=object)[y % 3]), X
    if name.startswith("classifier-binary"):
        return est.fit(X[:, :5], y % 2), X[:, :5]
    if name == "polynomial-map":
        return est.fit(X[:, :4]), X[:, :4]
    if name.startswith("kpca") or name.endswith(("-map", "-features", "-cholesky")):
        return est.fit(X), X
    return est.fit(X, y.astype(float)), X


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_roundtrip_identical_output(name, data, tmp_path):
    X, y, X_new = data
    est, X_used = _fit(name, CASES[name](), X, y)
    if type(est).__name__ in ("KernelRidge", "KernelRidgeClassifier"):
        assert est.solver_ == ("primal" if "primal" in name else "dual")
    X_new = X_new[:, :X_used.shape[1]]
    path = tmp_path / "model.mercer"
    save(est, path)
    loaded = load(path)
    assert type(loaded) is type(est)
    before, after = _output(est, X_new), _output(loaded, X_new)
    assert type(after) is type(before)
    np.testing.assert_array_equal(after, before)
    if hasattr(est, "log_marginal_likelihood"):  # the learnable kernel is rebuilt on load
        theta = est.theta_ + 0.1
        assert loaded.log_marginal_likelihood(theta) == pytest.approx(est.log_marginal_likelihood(theta), rel=1e-12)
    # parameters come back equal (kernels compare by hyperparameters)
    p1, p2 = est.get_params(), loaded.get_params()
    assert p1.keys() == p2.keys()
    for k in p1:
        if isinstance(p1[k], np.ndarray):
            np.testing.assert_array_equal(p1[k], p2[k])
        else:
            assert p1[k] == p2[k], k
    # torch in, torch out, identical too
    t = torch.as_tensor(np.array(X_new))
    out = _output(loaded, t)
    if isinstance(out, torch.Tensor):
        np.testing.assert_array_equal(out.cpu().numpy(), np.asarray(_output(est, t)))


def test_model_file_is_a_zip_of_npy_and_json_without_pickle(data, tmp_path):
    X, y, _ = data
    est = KernelRidgeClassifier(kernel=0.5 * RBF(0.1) + Linear()).fit(X, y)
    path = tmp_path / "m.mercer"
    save(est, path)
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    assert "manifest.json" in names and all(n.endswith(".npy") for n in names if n != "manifest.json")
    assert manifest["class"] == "KernelRidgeClassifier"
    assert manifest["params"]["kernel"] == {"__kernel__": {"type": "Sum", "params": {"kernels": [
        {"type": "Scaled", "params": {"scale": 0.5, "kernel": {"type": "RBF", "params": {"gamma": 0.1}}}},
        {"type": "Linear", "params": {}}]}}}
    # format 2: the state is what the class declares; the memory budget is rebuilt on load
    assert manifest["format_version"] == 2 and "derived" not in manifest
    assert "_budget" not in manifest["state"] and {"_device", "_dtype", "_binarizer"} <= set(manifest["state"])
    with np.load(path, allow_pickle=False) as npz:  # an .npz reader opens it, no pickle needed
        assert len([f for f in npz.files if f.startswith("arr_")]) >= 3


def test_pandas_feature_names_survive(data, tmp_path):
    X, y, X_new = data
    cols = [f"px{i}" for i in range(X.shape[1])]
    est = KernelRidge(kernel="rbf", gamma=0.05).fit(pd.DataFrame(X, columns=cols), y.astype(float))
    save(est, tmp_path / "m")
    loaded = load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.feature_names_in_, est.feature_names_in_)
    frame = pd.DataFrame(X_new, columns=cols)
    np.testing.assert_array_equal(loaded.predict(frame), est.predict(frame))
    with pytest.raises(ValueError, match="feature names"):
        loaded.predict(pd.DataFrame(X_new, columns=cols[::-1]))


def test_precomputed_kernel_roundtrip(data, tmp_path):
    X, y, X_new = data
    K, K_new = RBF(0.05)(X).cpu().numpy(), RBF(0.05)(X_new, X).cpu().numpy()
    est = KernelRidge(kernel="precomputed").fit(K, y.astype(float))
    save(est, tmp_path / "m")
    np.testing.assert_array_equal(load(tmp_path / "m").predict(K_new), est.predict(K_new))


def test_loaded_model_computes_on_the_default_device_and_can_refit(data, tmp_path):
    X, y, X_new = data
    est = KernelRidge(kernel="rbf").fit(X, y.astype(float))
    save(est, tmp_path / "m")
    loaded = load(tmp_path / "m")
    where = torch.device(get_config().device or "cpu").type  # the configured default device
    assert loaded._device.type == where and loaded.X_fit_.device.type == where
    loaded.set_params(alpha=3.0).fit(X, y.astype(float))
    np.testing.assert_allclose(loaded.predict(X_new), KernelRidge(alpha=3.0, kernel="rbf").fit(X, y.astype(float)).predict(X_new))


@cuda
def test_gpu_model_loads_on_cpu(data, tmp_path):
    X, y, X_new = data
    est = KernelRidge(kernel="rbf", device="cuda").fit(X, y.astype(float))
    save(est, tmp_path / "m")
    loaded = load(tmp_path / "m", device="cpu")
    assert loaded.device == "cpu" and loaded.dual_coef_.device.type == "cpu"
    np.testing.assert_allclose(loaded.predict(X_new), est.predict(X_new), rtol=1e-10, atol=1e-10)
    on_gpu = load(tmp_path / "m", device="cuda")
    assert on_gpu.dual_coef_.device.type == "cuda"


# -- kernels ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [
    Linear(), Polynomial(degree=4, gamma=None, coef0=0.0), Quadratic(), Sigmoid(gamma=0.1, coef0=-1.0),
    RBF(sigma=2.0), Laplacian(), Matern(nu=0.5, length_scale=3.0), Intersection(), HistogramIntersection(),
    Precomputed(), Constant(2.0), 0.5 * RBF(0.1) + Linear(), 3.0 * (RBF(1.0) * Polynomial(2) + 1.0),
    sum([RBF(0.1), Laplacian(0.2), Matern()]),
], ids=repr)
def test_kernel_dict_roundtrip(kernel):
    spec = kernel_to_dict(kernel)
    assert json.loads(json.dumps(spec)) == spec
    rebuilt = kernel_from_dict(spec)
    assert type(rebuilt) is type(kernel) and rebuilt == kernel
    X = np.random.default_rng(0).integers(0, 2, size=(5, 3)).astype(float)  # valid for set kernels too
    if not kernel.is_precomputed:
        np.testing.assert_array_equal(rebuilt(X).cpu().numpy(), kernel(X).cpu().numpy())


def test_kernel_tensor_hyperparameter_roundtrip():
    k = 2.0 * RBF(gamma=torch.tensor(0.3, dtype=torch.float64, requires_grad=True))
    rebuilt = kernel_from_dict(json.loads(json.dumps(kernel_to_dict(k))))
    assert rebuilt == k
    assert rebuilt.kernel.gamma.requires_grad


def test_unknown_kernel_refused():
    class MyKernel(RBF):
        pass

    with pytest.raises(TypeError, match="only mercer's own kernels"):
        kernel_to_dict(MyKernel(0.1))
    with pytest.raises(ValueError, match="unknown kernel type"):
        kernel_from_dict({"type": "Exec", "params": {}})


# -- refusals -----------------------------------------------------------------------------------
def _rewrite_manifest(path, edit):
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(entries["manifest.json"])
    edit(manifest)
    entries["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in entries.items():
            zf.writestr(n, b)


@pytest.fixture(scope="module")
def saved_bytes(data, tmp_path_factory):
    X, y, _ = data
    path = tmp_path_factory.mktemp("io") / "m.mercer"
    save(KernelRidgeClassifier(kernel="rbf").fit(X, y), path)
    return path.read_bytes()


@pytest.fixture()
def saved(saved_bytes, tmp_path):
    path = tmp_path / "m.mercer"
    path.write_bytes(saved_bytes)
    return path


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update({"class": "os.system"}), "refusing to load unknown estimator class"),
    (lambda m: m.update({"class": "RandomForestClassifier"}), "refusing to load unknown estimator class"),
    (lambda m: m["state"]["_binarizer"].update({"__sklearn__": "RandomForestClassifier"}), "is not allowed"),
    (lambda m: m["state"].update({"kernel_": {"__kernel__": {"type": "Popen", "params": {}}}}), "unknown kernel type"),
    (lambda m: m["state"].update({"X_fit_": {"__tensor__": "arr_99.npy"}}), "missing array"),
    (lambda m: m["params"].update({"evil": 1}), "not parameters of"),
    (lambda m: m.update({"format_version": 99}), "newer"),
    (lambda m: m.update({"format": "pickle"}), "not a mercer model"),
    (lambda m: m["state"].update({"_sneaky": 1}), "does not save the attribute '_sneaky'"),
    (lambda m: m["state"].update({"_budget": 1}), "attribute '_budget'"),  # derived: never stored
    (lambda m: m["state"].update({"fitted": 1}), "does not save the attribute 'fitted'"),
    (lambda m: m["state"].update({"predict": 1}), "bad state attribute 'predict'"),
    (lambda m: m["state"].update({"__class__": 1}), "bad state attribute"),
    (lambda m: m["state"].update({"alpha": 5.0}), "bad state attribute 'alpha'"),
    (lambda m: m["state"]["_binarizer"]["state"]["__dict__"].append(["fit", 0]), "bad state attribute 'fit'"),
    (lambda m: m["state"].update({"nested_": {"__estimator__": "RandomForestClassifier", "params": {},
                                              "state": {}}}),
     "unknown or malformed estimator"),
    (lambda m: m["state"].update({"nested_": {"__estimator__": "KernelRidge", "params": {}, "state": {},
                                              "extra": 1}}), "unknown or malformed estimator"),
    (lambda m: m["state"].update({"nested_": {"__estimator__": "KernelRidge", "params": {}, "state": {},
                                              "derived": []}}), "unknown or malformed estimator"),
    (lambda m: m["state"].update({"nested_": {"__estimator__": "KernelRidge", "params": {"evil": 1},
                                              "state": {}}}), "not parameters of KernelRidge"),
    (lambda m: m["state"].update({"nested_": {"__estimator__": "KernelRidge", "params": {},
                                              "state": {"_phi": 1}}}), "does not save the attribute '_phi'"),
])
def test_tampered_manifest_refused(saved, edit, match):
    _rewrite_manifest(saved, edit)
    with pytest.raises(ValueError, match=match):
        load(saved)


def test_version_mismatch_warns(saved):
    _rewrite_manifest(saved, lambda m: m.update({"mercer_version": "0.0.1"}))
    with pytest.warns(UserWarning, match="saved by mercer 0.0.1"):
        load(saved)


def test_not_a_model_file(tmp_path):
    (tmp_path / "x").write_bytes(b"\x80\x04garbage")
    with pytest.raises(ValueError, match="not a zip"):
        load(tmp_path / "x")
    with zipfile.ZipFile(tmp_path / "z", "w") as zf:
        zf.writestr("data.pkl", b"...")
    with pytest.raises(ValueError, match="no manifest"):
        load(tmp_path / "z")


def test_save_refuses_foreign_and_unfitted(data, tmp_path):
    X, y, _ = data
    with pytest.raises(TypeError, match="supports"):
        save(Ridge().fit(X, y), tmp_path / "m")
    with pytest.raises(NotFittedError):
        save(KernelRidge(), tmp_path / "m")
    # every whitelisted class has a round-trip case above
    assert {type(make()).__name__ for make in CASES.values()} == set(loadable_estimators())


def test_unstorable_parameter_saved_as_none_with_warning(data, tmp_path):
    X, _, _ = data
    est = KernelPCA(2, kernel="rbf", random_state=np.random.RandomState(0)).fit(X)
    with pytest.warns(UserWarning, match="random_state"):
        save(est, tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load(tmp_path / "m")
    assert loaded.random_state is None
    np.testing.assert_array_equal(loaded.transform(X[:5]), est.transform(X[:5]))


def test_fitted_state_of_unknown_type_refused(data, tmp_path):
    X, y, _ = data
    est = KernelRidge(kernel="rbf").fit(X, y.astype(float))
    est.extra_ = object()
    with pytest.raises(TypeError, match="extra_"):
        save(est, tmp_path / "m")




def test_tensor_layout_survives_and_bad_strides_are_refused():
    """Column-major state (triangular-solve outputs) comes back column-major: BLAS rounds
    differently on the two layouts, and a loaded model must predict bit for bit."""
    from mercer.io import _Decoder, _Encoder

    enc = _Encoder()
    t = torch.arange(12.0, dtype=torch.float64).reshape(3, 4).T  # (4, 3), strides (1, 4)
    spec = enc(t, "t")
    assert spec["strides"] == [1, 4]
    back = _Decoder(enc.arrays, torch.device("cpu"))(spec)
    assert back.stride() == (1, 4) and torch.equal(back, t)
    plain = enc(torch.ones(2, 3), "p")
    assert "strides" not in plain
    for bad in ([1, 1], [4, 1, 1], [0, 4], "x"):
        with pytest.raises(ValueError, match="bad strides"):
            _Decoder(enc.arrays, torch.device("cpu"))({**spec, "strides": bad})


# -- format 2: the classes declare what is saved ------------------------------------------------
_TRANSFORMERS = {"IncompleteCholesky", "LandmarkFeatures", "Nystroem", "PolynomialFeatureMap",
                 "RandomFourierFeatures", "RandomMaclaurin", "TensorSketch"}


def _declared(cls) -> set:
    return {a for klass in cls.__mro__ for a in vars(klass).get("_saved_private", ())}


def _payloads(payload, name):
    """``(class name, payload)`` of an estimator in a manifest and of every estimator nested in it."""
    yield name, payload

    def walk(v):
        if isinstance(v, dict) and "__estimator__" in v:
            yield from _payloads(v, v["__estimator__"])
        elif isinstance(v, dict):
            for x in v.values():
                yield from walk(x)
        elif isinstance(v, list):
            for x in v:
                yield from walk(x)

    yield from walk(payload["state"])


def test_registry_covers_every_public_estimator():
    import mercer.approx
    import mercer.models

    models = {n for n in mercer.models.__all__ if isinstance(getattr(mercer.models, n), type)}
    assert len(models) == 31 and _TRANSFORMERS <= set(mercer.approx.__all__)
    assert set(loadable_estimators()) == models | _TRANSFORMERS
    for name in loadable_estimators():  # declarations are private attribute names, never fitted ones
        cls = getattr(mercer.models, name, None) or getattr(mercer.approx, name)
        for klass in cls.__mro__:
            names = vars(klass).get("_saved_private", ())
            assert isinstance(names, tuple) and all(n.startswith("_") and not n.endswith("_") for n in names), klass


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_format_2_file_holds_only_declared_state(name, data, tmp_path):
    import mercer.approx
    import mercer.models

    X, y, _ = data
    est, _ = _fit(name, CASES[name](), X, y)
    save(est, tmp_path / "m")
    with zipfile.ZipFile(tmp_path / "m") as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["format_version"] == 2
    for cls_name, payload in _payloads(manifest, manifest["class"]):
        cls = getattr(mercer.models, cls_name, None) or getattr(mercer.approx, cls_name)
        assert "derived" not in payload
        state = set(payload["state"])
        assert {k for k in state if k.startswith("_")} <= _declared(cls), cls_name
        assert all(k.endswith("_") for k in state if not k.startswith("_")), cls_name


def test_undeclared_private_state_is_not_saved(data, tmp_path):
    X, y, X_new = data
    est = KernelRidge(kernel="rbf", gamma=0.05).fit(X, y.astype(float))
    est._cache = object()  # neither declared nor storable: not even looked at
    save(est, tmp_path / "m")
    with zipfile.ZipFile(tmp_path / "m") as zf:
        state = json.loads(zf.read("manifest.json"))["state"]
    assert "_cache" not in state and "_budget" not in state
    loaded = load(tmp_path / "m")
    assert not hasattr(loaded, "_cache") and loaded._budget > 0  # rebuilt by _after_load
    np.testing.assert_array_equal(loaded.predict(X_new), est.predict(X_new))


def _as_format_1(m):
    """A format-2 manifest rewritten as format 1 wrote it: every attribute, plus ``derived``."""
    m["format_version"] = 1
    m["derived"] = ["_budget"]
    m["state"].update({"_cache": 5, "_budget": 7, "predict": 0})  # an old attribute now a method: dropped


def test_format_1_keeps_declared_state_and_drops_the_rest(saved):
    _rewrite_manifest(saved, _as_format_1)
    loaded = load(saved)
    assert not hasattr(loaded, "_cache") and loaded._budget != 7  # dropped; the budget is recomputed
    assert hasattr(loaded, "_binarizer") and hasattr(loaded, "dual_coef_")


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update({"derived": "_budget"}), "derived attributes"),
    (lambda m: m.update({"derived": ["a b"]}), "derived attributes"),
    (lambda m: m["state"].update({"a b_": 1}), "bad state attribute 'a b_'"),
    (lambda m: m["state"].update({"nested_": {"__estimator__": "KernelRidge", "params": {}, "state": {}}}),
     "unknown or malformed estimator"),  # format 1 nested estimators have a derived list
])
def test_tampered_format_1_manifest_refused(saved, edit, match):
    _rewrite_manifest(saved, lambda m: (_as_format_1(m), edit(m)))
    with pytest.raises(ValueError, match=match):
        load(saved)


_V1 = pathlib.Path(__file__).parent / "data" / "io_v1"


@pytest.mark.filterwarnings("ignore:.*saved by mercer")
@pytest.mark.parametrize("name", sorted(n for n in CASES if (_V1 / f"{n}.mercer").exists()))  # estimators of format 1
def test_format_version_1_files_still_load(name):
    """Model files written by format version 1 (``data/io_v1/generate.py``) load and predict as
    they did when saved."""
    path = _V1 / f"{name}.mercer"
    with zipfile.ZipFile(path) as zf:
        assert json.loads(zf.read("manifest.json"))["format_version"] == 1
    X_new = load_digits_new()
    est = load(path)
    out = _output(est, X_new[:, :est.n_features_in_] if hasattr(est, "n_features_in_") else X_new)
    expected = np.load(_V1 / "expected.npz")
    # The files hold the same state, but predict reruns BLAS products whose rounding depends on
    # the CPU's kernels: float64 models agree to ~1e-13, float32 ones (dtype="float32": the
    # products run in float32) only to float32 rounding amplified by the products' cancellation,
    # measured 2.7e-6 of the largest output on AMD EPYC (NystroemKernelRidge).
    float32 = str(getattr(est, "dtype", None)).removeprefix("torch.") == "float32"
    for i, part in enumerate(out if isinstance(out, tuple) else (out,)):
        want = expected[f"{name}/{i}"]
        got = np.asarray(part)
        if got.dtype == object:
            got = got.astype(str)
        if got.dtype.kind != "f":
            np.testing.assert_array_equal(got, want)
        elif float32:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def load_digits_new():
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)[0][150:160] / 16.0


# -- scikit-learn pipelines: preprocessing + mercer model, saved without pickle ------------------------
def _messy_frame(n=90, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n) * 10 + 3,
                       "colour": rng.choice(["red", "green", "blue"], n).astype(object),
                       "size": rng.choice(["S", "M", "L"], n).astype(object)})
    df.loc[rng.random(n) < 0.1, "a"] = np.nan
    df.loc[rng.random(n) < 0.1, "colour"] = np.nan
    y = df["b"].fillna(0) * 0.3 + (df["colour"] == "red") * 2.0 + rng.normal(size=n) * 0.1
    return df, y.to_numpy()


def _table_pipeline(model, target_scaler: bool = False):
    from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    prep = ColumnTransformer([
        ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), ["a", "b"]),
        ("cat", make_pipeline(SimpleImputer(strategy="most_frequent"),
                              OneHotEncoder(handle_unknown="ignore", sparse_output=False)), ["colour", "size"]),
    ])
    if target_scaler:
        model = TransformedTargetRegressor(regressor=model, transformer=StandardScaler())
    return Pipeline([("prep", prep), ("model", model)])


@pytest.mark.parametrize("make", [
    lambda: _table_pipeline(KernelRidge(kernel="rbf", alpha=0.1), target_scaler=True),
    lambda: _table_pipeline(NystroemKernelRidge(n_centers=30, random_state=0)),
    lambda: _table_pipeline(KernelSVC(C=2.0)),
], ids=["ridge-ttr", "nystroem", "svc"])
def test_pipeline_roundtrip_predicts_identically(make, tmp_path):
    df, y = _messy_frame()
    pipe = make()
    target = (y > np.median(y)).astype(int) if "SVC" in repr(pipe) else y
    pipe.fit(df.iloc[:60], target[:60])
    save(pipe, tmp_path / "p.mercer")
    got = load(tmp_path / "p.mercer")
    assert type(got) is type(pipe) and repr(got) == repr(pipe)
    np.testing.assert_array_equal(got.predict(df.iloc[60:]), pipe.predict(df.iloc[60:]))
    np.testing.assert_array_equal(got.predict(df.iloc[60:, ::-1]), pipe.predict(df.iloc[60:]))  # by name


def _transformers():
    from sklearn.decomposition import PCA
    from sklearn.feature_selection import VarianceThreshold
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import FeatureUnion
    from sklearn.preprocessing import (FunctionTransformer, KBinsDiscretizer, MaxAbsScaler, MinMaxScaler, Normalizer,
                                       PolynomialFeatures, PowerTransformer, QuantileTransformer, RobustScaler,
                                       StandardScaler)

    return [StandardScaler(), MinMaxScaler(), MaxAbsScaler(), RobustScaler(), Normalizer(), PolynomialFeatures(2),
            QuantileTransformer(n_quantiles=40), PowerTransformer(),
            KBinsDiscretizer(n_bins=3, encode="onehot-dense", strategy="uniform"),
            VarianceThreshold(0.01), PCA(n_components=5, random_state=0), FunctionTransformer(),
            SimpleImputer(add_indicator=True), FeatureUnion([("pca", PCA(3)), ("scale", StandardScaler())])]


@pytest.mark.parametrize("step", _transformers(), ids=lambda s: type(s).__name__)
def test_allowed_transformers_roundtrip(step, data, tmp_path):
    from sklearn.pipeline import make_pipeline

    X, y, X_new = data
    cols = np.sort(np.argsort(X.var(axis=0))[-12:])  # 12 pixels that vary (no constant column)
    X, X_new = X[:, cols].copy(), X_new[:, cols]
    X[::7, 3] = np.nan if "Imputer" in type(step).__name__ else X[::7, 3]
    pipe = make_pipeline(step, KernelRidgeClassifier(kernel="rbf", gamma=0.05)).fit(X, y)
    save(pipe, tmp_path / "p.mercer")
    np.testing.assert_array_equal(load(tmp_path / "p.mercer").decision_function(X_new), pipe.decision_function(X_new))


def test_ordinal_encoder_and_column_transformer_alone(tmp_path):
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OrdinalEncoder

    df, _ = _messy_frame()
    ct = ColumnTransformer([("ord", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1),
                             ["size"])], remainder="passthrough").fit(df[["size", "b"]])
    save(ct, tmp_path / "c.mercer")
    np.testing.assert_array_equal(load(tmp_path / "c.mercer").transform(df[["size", "b"]]), ct.transform(df[["size", "b"]]))


@pytest.fixture()
def pipeline_file(tmp_path):
    df, y = _messy_frame()
    path = tmp_path / "p.mercer"
    save(_table_pipeline(KernelRidge(kernel="rbf"), target_scaler=True).fit(df, y), path)
    return path


def _replace_in_manifest(path, old: str, new: str) -> None:
    """Replace the first ``old`` by ``new`` in the manifest's compact JSON text."""
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    text = json.dumps(json.loads(entries["manifest.json"]))
    assert old in text
    entries["manifest.json"] = text.replace(old, new, 1).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in entries.items():
            zf.writestr(n, b)


@pytest.mark.parametrize("old, new, match", [
    ('"__sklearn__": "StandardScaler"', '"__sklearn__": "RandomForestClassifier"', "is not allowed"),
    ('"__sklearn__": "OneHotEncoder"', '"__sklearn__": "os.system"', "is not allowed"),
    ('"class": "Pipeline"', '"class": "GridSearchCV"', "refusing to load unknown estimator class"),
    ('"__estimator__": "KernelRidge"', '"__estimator__": "Ridge"', "unknown or malformed estimator"),
    ('["memory", null]', '["memory", "/tmp/cache"]', "'memory' must be None"),
    ('["func", null]', '["func", "os.system"]', "'func' must be None"),
])
def test_tampered_pipeline_refused(pipeline_file, old, new, match):
    _replace_in_manifest(pipeline_file, old, new)
    with pytest.raises(ValueError, match=match):
        load(pipeline_file)


def test_save_refuses_pipelines_with_foreign_steps_or_code(data, tmp_path):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    X, y, _ = data
    with pytest.raises(TypeError, match="sklearn.linear_model._ridge.Ridge are not supported"):
        save(make_pipeline(StandardScaler(), Ridge()).fit(X, y), tmp_path / "m")
    with pytest.raises(TypeError, match="'func' must be None"):
        save(make_pipeline(FunctionTransformer(np.log1p), KernelRidge()).fit(X, y), tmp_path / "m")
    with pytest.raises(NotFittedError):
        save(make_pipeline(StandardScaler(), KernelRidge()), tmp_path / "m")


def test_pipeline_from_another_sklearn_version_warns(pipeline_file):
    _rewrite_manifest(pipeline_file, lambda m: m.update({"sklearn_version": "0.24.2"}))
    with pytest.warns(UserWarning, match="saved with scikit-learn 0.24.2"):
        load(pipeline_file)


# -- text: a fitted TfidfVectorizer (vocabulary_, idf_, parameters) ------------------------------
_DOCS = ["The cat sat on the mat.", "Dogs and cats, cats and dogs!", "A mat of cats: the end", "zebra",
         "Über café naïve", "the the the cat"]


@pytest.mark.parametrize("params", [{}, {"ngram_range": (1, 2), "sublinear_tf": True, "stop_words": "english",
                                         "min_df": 1, "max_features": 8, "norm": "l1", "dtype": np.float32},
                                    {"analyzer": "char_wb", "ngram_range": (2, 3), "strip_accents": "unicode",
                                     "use_idf": False, "binary": True}], ids=["defaults", "words", "chars"])
def test_tfidf_vectorizer_roundtrip_transforms_identically(params, tmp_path):
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(**params).fit(_DOCS)
    save(vec, tmp_path / "v.mercer")
    got = load(tmp_path / "v.mercer")
    assert repr(got) == repr(vec) and got.vocabulary_ == vec.vocabulary_
    np.testing.assert_array_equal(got.get_feature_names_out(), vec.get_feature_names_out())
    if vec.use_idf:
        np.testing.assert_array_equal(got.idf_, vec.idf_)
    new = _DOCS + ["an unseen text about cats", ""]
    a, b = vec.transform(new), got.transform(new)
    assert a.dtype == b.dtype and a.shape == b.shape and (a != b).nnz == 0


def test_text_pipeline_roundtrip_and_vocabulary_stored_compactly(tmp_path):
    """A ColumnTransformer with a vectorizer on a text column and a mercer model: the loaded pipeline
    transforms and predicts identically; the vocabulary is stored as its terms in column order."""
    import scipy.sparse as sp
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import Pipeline

    df = pd.DataFrame({"text": _DOCS * 5, "n": np.arange(30.0)})
    y = np.arange(30) % 2
    pipe = Pipeline([("prep", ColumnTransformer([("text0", TfidfVectorizer(), "text")], remainder="passthrough",
                                                sparse_threshold=1.0)),
                     ("model", KernelSVC(kernel="linear"))]).fit(df, y)
    save(pipe, tmp_path / "p.mercer")
    got = load(tmp_path / "p.mercer")
    a, b = pipe.named_steps["prep"].transform(df), got.named_steps["prep"].transform(df)
    assert sp.issparse(b) and (a != b).nnz == 0
    np.testing.assert_array_equal(got.decision_function(df), pipe.decision_function(df))
    with zipfile.ZipFile(tmp_path / "p.mercer") as zf:
        text = zf.read("manifest.json").decode()
    terms = pipe.named_steps["prep"].named_transformers_["text0"].get_feature_names_out().tolist()
    assert json.dumps({"__index__": terms}) in json.dumps(json.loads(text))


def test_tfidf_vectorizer_that_opens_files_refused(tmp_path):
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer().fit(_DOCS)
    vec.set_params(input="filename")  # it would open each text it is given as a file
    with pytest.raises(TypeError, match="'input' must be 'content'"):
        save(vec, tmp_path / "v.mercer")
    save(vec.set_params(input="content"), tmp_path / "v.mercer")
    _replace_in_manifest(tmp_path / "v.mercer", '["input", "content"]', '["input", "filename"]')
    with pytest.raises(ValueError, match="'input' must be 'content'"):
        load(tmp_path / "v.mercer")
    save(vec, tmp_path / "w.mercer")
    _replace_in_manifest(tmp_path / "w.mercer", '{"__index__": ["and"', '{"__index__": ["cat"')  # a duplicate term
    with pytest.raises(ValueError, match="vocabulary must be a list of distinct texts"):
        load(tmp_path / "w.mercer")
