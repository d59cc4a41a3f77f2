"""Kernels follow scikit-learn's parameter protocol: get_params / set_params / clone, and the
searches (GridSearchCV, RandomizedSearchCV, HalvingGridSearchCV) reach a kernel's parameters
(``kernel__gamma``, ``kernel__k1__gamma``) in every estimator that takes a kernel."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
import torch
from scipy.stats import loguniform
from sklearn.base import clone, is_classifier
from sklearn.experimental import enable_halving_search_cv  # noqa: F401
from sklearn.model_selection import GridSearchCV, HalvingGridSearchCV, RandomizedSearchCV

import mercer
from mercer import io, kernels
from mercer.kernels import (
    RBF,
    Columns,
    Constant,
    Kernel,
    Laplacian,
    Linear,
    Matern,
    Polynomial,
    Product,
    Quadratic,
    Scaled,
    Sigmoid,
    Sum,
)
from mercer.models import KernelRidge, KernelSVC, MKLRegressor

# -- the kernels ---------------------------------------------------------------------------------
KERNEL_CLASSES = sorted({obj for name in kernels.__all__ if isinstance(obj := getattr(kernels, name), type)
                         and issubclass(obj, Kernel) and obj is not Kernel}, key=lambda c: c.__name__)

# Non-default examples (classes not listed here are built with their defaults).
EXAMPLES = {
    RBF: RBF(gamma=0.3),
    Laplacian: Laplacian(gamma=0.2),
    Matern: Matern(nu=2.5, length_scale=0.7),
    Polynomial: Polynomial(degree=2, gamma=0.5, coef0=0.25),
    Quadratic: Quadratic(gamma=0.5, coef0=1.0),
    Sigmoid: Sigmoid(gamma=0.1, coef0=-0.5),
    Constant: Constant(0.7),
    Scaled: Scaled(2.0, RBF(0.5)),
    Sum: RBF(0.5) + Linear() + 0.3 * Laplacian(0.1),
    Product: RBF(0.5) * Polynomial(degree=2),
    Columns: Columns(RBF(0.5), [0, 2]),
}


def _dot(A, B, scale=1.0):
    return scale * (A @ B.T)


# Kernels added by name (built when present), with arguments that have no default.
EXAMPLES_BY_NAME = {"FunctionKernel": lambda cls: cls(_dot, {"scale": 2.0})}


def _example(cls) -> Kernel:
    if cls in EXAMPLES:
        return EXAMPLES[cls]
    if cls.__name__ in EXAMPLES_BY_NAME:
        return EXAMPLES_BY_NAME[cls.__name__](cls)
    try:
        return cls()
    except TypeError:  # pragma: no cover - a new kernel class with required arguments
        pytest.fail(f"add an example of {cls.__name__} to EXAMPLES in tests/test_kernel_params.py")


def _data(d: int = 3, n: int = 6, seed: int = 0) -> np.ndarray:
    return np.abs(np.random.default_rng(seed).normal(size=(n, d)))  # >= 0: valid for histogram kernels


def _inputs(kernel: Kernel):
    if kernel.is_precomputed:
        X = _data(3, 7)
        G = X @ X.T
        return G, G
    X = _data()
    if type(kernel).__name__ == "Intersection":
        X = (X > 0.6).astype(float)
    return X, X[:4]


def _parts(kernel: Kernel) -> list[Kernel]:
    """Every kernel nested in ``kernel`` (itself included)."""
    out = [kernel]
    for v in kernel.get_params(deep=False).values():
        if isinstance(v, Kernel):
            out += _parts(v)
    return out


@pytest.mark.parametrize("cls", KERNEL_CLASSES, ids=lambda c: c.__name__)
def test_clone_round_trip(cls):
    kernel = _example(cls)
    copy = clone(kernel)
    assert type(copy) is type(kernel) and copy == kernel and hash(copy) == hash(kernel)
    assert copy.get_params(deep=True) == kernel.get_params(deep=True)
    # independent: no nested kernel is shared
    assert not {id(p) for p in _parts(copy)} & {id(p) for p in _parts(kernel)}
    X, Z = _inputs(kernel)
    assert torch.equal(copy(X, Z), kernel(X, Z))
    # the parameters rebuild an equal kernel (composites take their parts as a list)
    params = kernel.get_params(deep=False)
    rebuilt = cls(list(params.values())) if isinstance(kernel, (Sum, Product)) else cls(**params)
    assert rebuilt == kernel
    # a nested change on the clone leaves the original alone
    nested = {k: v for k, v in copy.get_params(deep=True).items() if k.endswith("gamma") and v is not None}
    if nested:
        before = kernel.get_params(deep=True)
        copy.set_params(**{k: 0.123 for k in nested})
        assert kernel.get_params(deep=True) == before
        assert all(v == 0.123 for k, v in copy.get_params(deep=True).items() if k in nested)


def test_clone_keeps_tensor_hyperparameters():
    scale = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    kernel = Scaled(scale, RBF(0.5))
    copy = clone(kernel)
    assert copy == kernel and copy.scale is not scale and copy.scale.requires_grad


def test_estimator_clone_gives_an_independent_kernel():
    est = KernelRidge(kernel=RBF(0.1) + Linear())
    copy = clone(est)
    assert copy.kernel == est.kernel and copy.kernel is not est.kernel
    assert copy.kernel.kernels[0] is not est.kernel.kernels[0]
    copy.set_params(kernel__k1__gamma=2.0)
    assert est.kernel.kernels[0].gamma == 0.1 and copy.kernel.kernels[0].gamma == 2.0
    assert {"kernel__k1", "kernel__k1__gamma", "kernel__k2"} <= set(est.get_params(deep=True))


# -- get_params / set_params -------------------------------------------------------------------
def test_nested_names():
    k = 0.5 * RBF(0.1) + Linear() + Matern()
    assert list(k.get_params(deep=False)) == ["k1", "k2", "k3"]
    deep = k.get_params()
    assert deep["k1__scale"] == 0.5 and deep["k1__kernel__gamma"] == 0.1 and deep["k3__nu"] == 1.5
    assert Scaled(2.0, RBF(0.3)).get_params() == {"scale": 2.0, "kernel": RBF(0.3), "kernel__gamma": 0.3,
                                                  "kernel__sigma": None}
    assert Columns(Laplacian(0.2), [1, 0]).get_params() == {"kernel": Laplacian(0.2), "kernel__gamma": 0.2,
                                                            "columns": (1, 0)}
    assert Linear().get_params() == {} and Quadratic().get_params() == {"gamma": 1.0, "coef0": 0.0}
    # nested sums are flattened, so their parts are numbered in order
    s = (RBF(0.1) + Linear()) + (Laplacian() + Constant(2.0))
    assert [type(v).__name__ for v in s.get_params(deep=False).values()] == ["RBF", "Linear", "Laplacian", "Constant"]
    p = RBF(0.1) * Linear() * Matern()
    assert p.set_params(k3__length_scale=2.0) is p and p.kernels[2] == Matern(length_scale=2.0)


def test_set_params_replaces_parts():
    k = RBF(0.1) + Linear()
    first = k.kernels[0]
    k.set_params(k2=Laplacian(0.5), k1__gamma=0.2)
    assert k == RBF(0.2) + Laplacian(0.5) and k.kernels[0] is first  # nested: changed in place
    k.set_params(k1=Polynomial(degree=2), k1__coef0=0.0)  # direct first, then nested
    assert k == Polynomial(degree=2, coef0=0.0) + Laplacian(0.5)
    k.set_params(k2=Matern() + Constant(1.0))  # a sum given as a part is flattened
    assert list(k.get_params(deep=False)) == ["k1", "k2", "k3"] and k.kernels[2] == Constant(1.0)
    s = Scaled(2.0, RBF(0.1)).set_params(kernel=Scaled(3.0, Linear()))  # collapses as in __init__
    assert s.scale == 6.0 and s.kernel == Linear()
    c = Columns(RBF(0.1), [0, 1])
    X = torch.as_tensor(_data(4, 5))
    c(X)
    c.set_params(columns=[2, 3])  # the cached column index is reset
    assert torch.equal(c(X), Columns(RBF(0.1), [2, 3])(X))
    torch.testing.assert_close(c(X), RBF(0.1)(X[:, 2:]))


def test_set_params_aliases_of_rbf():
    k = RBF(sigma=2.0)
    assert k.get_params() == {"gamma": 0.125, "sigma": None} and clone(k) == k
    assert k.set_params(sigma=0.5) == RBF(sigma=0.5) and k.get_params()["sigma"] is None
    assert k.set_params(gamma=0.3) == RBF(0.3)
    assert k.set_params(sigma=None) == RBF(0.3)  # sigma=None keeps gamma, as in __init__
    with pytest.raises(ValueError, match=re.escape("The 'sigma' parameter of RBF must be None when 'gamma' is given")):
        k.set_params(gamma=0.1, sigma=1.0)
    assert k == RBF(0.3)


@pytest.mark.parametrize("kernel, params, message", [
    (RBF(0.1), {"gamma": -1}, "The 'gamma' parameter of RBF must be a float in the range (0, inf) or None. Got -1"),
    (Matern(), {"nu": 1.0}, "The 'nu' parameter of Matern must be one of (0.5, 1.5, 2.5). Got 1.0"),
    (Polynomial(), {"degree": 0}, "The 'degree' parameter of Polynomial must be an int in the range [1, inf) or a float in the range (0, inf). Got 0"),
    (Constant(1.0), {"value": -2.0},
     "The 'value' parameter of Constant must be a float in the range [0, inf). Got -2.0"),
    (Scaled(2.0, RBF()), {"scale": 0}, "The 'scale' parameter of Scaled must be a float in the range (0, inf). Got 0"),
    (RBF(0.1) + Linear(), {"k1__gamma": "a"},
     "The 'gamma' parameter of RBF must be a float in the range (0, inf) or None. Got 'a'"),
    (Columns(Linear(), [0]), {"columns": [-1]}, "The 'columns' parameter of Columns must be a non-empty sequence"),
])
def test_set_params_validates(kernel, params, message):
    before = clone(kernel)
    with pytest.raises(ValueError, match=re.escape(message)):
        kernel.set_params(**params)
    assert kernel == before  # a refused value leaves the kernel as it was


def test_set_params_unknown_names():
    with pytest.raises(ValueError, match="Invalid parameter 'k3' for kernel"):
        (RBF() + Linear()).set_params(k3=RBF())
    with pytest.raises(ValueError, match="Invalid parameter 'length_scale' for kernel RBF"):
        RBF().set_params(length_scale=1.0)
    with pytest.raises(ValueError, match="'columns' is not a kernel"):
        Columns(RBF(), [0]).set_params(columns__gamma=1.0)
    with pytest.raises(TypeError, match="Sum expects mercer kernels"):
        (RBF() + Linear()).set_params(k2="linear")


def test_set_params_after_cached_evaluation():
    """The RBF keeps the squared norms of stored points (keyed by the tensor): a new gamma gives
    the new values, on the small-batch route and the GEMM route alike."""
    rng = np.random.default_rng(1)
    Z = torch.as_tensor(rng.normal(size=(200, 5)))
    X_small, X_big = Z[:5].clone(), torch.as_tensor(rng.normal(size=(100, 5)))
    k = RBF(0.1)
    for X in (X_small, X_small, X_big):
        k(X, Z)
    k.set_params(gamma=0.7)
    for X in (X_small, X_big):
        torch.testing.assert_close(k(X, Z), RBF(0.7)(X, Z), rtol=0, atol=0)
        torch.testing.assert_close(k(X, Z), torch.exp(-0.7 * torch.cdist(X, Z) ** 2), rtol=1e-12, atol=1e-12)
    assert hash(k) == hash(RBF(0.7)) and k.hyperparameters == {"gamma": 0.7}


def test_io_round_trip_after_set_params():
    k = (0.5 * RBF(0.1) + Linear()).set_params(k1__kernel__gamma=0.4, k1__scale=2.0)
    again = io.kernel_from_dict(io.kernel_to_dict(k))
    assert again == k == 2.0 * RBF(0.4) + Linear()


# -- searches in every estimator that takes a kernel -------------------------------------------
def _kernel_estimators():
    out = []
    for name in mercer.__all__:
        obj = getattr(mercer, name)
        if isinstance(obj, type) and "kernel" in inspect.signature(obj.__init__).parameters:
            out.append(obj)
    return out


# Small data: cap the sizes that default above n_samples / cv.
_SMALL = {"n_components": 5, "n_features": 5}
_POLYNOMIAL_ONLY = {"RandomMaclaurin", "TensorSketch"}  # dot-product kernels only


def _make(cls, kernel):
    accepted = inspect.signature(cls.__init__).parameters
    if cls.__name__ in _POLYNOMIAL_ONLY:
        kernel = Polynomial(degree=2, gamma=kernel.gamma)
    return cls(kernel=kernel, **{k: v for k, v in _SMALL.items() if k in accepted})


def _search_scorer(est, X, y=None):
    """Uses the fitted candidate, then prefers gamma = 0.01: the search must have set it."""
    out = est.predict(X) if hasattr(est, "predict") else est.transform(X) if hasattr(est, "transform") else est.labels_
    assert np.isfinite(np.asarray(out, dtype=float)).all()
    return -abs(est.kernel.gamma - 0.01)


def _xy(est, n=40):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    return X, ((X[:, 0] > 0).astype(int) if is_classifier(est) else X[:, 0] + 0.1 * rng.normal(size=n))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", _kernel_estimators(), ids=lambda c: c.__name__)
def test_grid_search_over_kernel_gamma(cls):
    est = _make(cls, RBF(0.1))
    X, y = _xy(est)
    search = GridSearchCV(est, {"kernel__gamma": [0.1, 0.01]}, cv=2, scoring=_search_scorer,
                          error_score="raise").fit(X, y)
    assert search.best_params_ == {"kernel__gamma": 0.01}
    assert search.best_estimator_.kernel.gamma == 0.01 and est.kernel.gamma == 0.1  # the user's kernel untouched


def test_grid_search_inside_composites():
    X, y = _xy(KernelRidge())
    est = KernelRidge(kernel=0.5 * RBF(1.0) + Linear())
    search = GridSearchCV(est, {"kernel__k1__kernel__gamma": [0.01, 0.1, 1.0], "kernel__k1__scale": [0.5, 2.0]},
                          cv=2).fit(X, y)
    best = search.best_estimator_.kernel
    assert best == search.best_params_["kernel__k1__scale"] * RBF(search.best_params_["kernel__k1__kernel__gamma"]) \
        + Linear()
    assert est.kernel == 0.5 * RBF(1.0) + Linear()
    search = GridSearchCV(KernelSVC(kernel=RBF(1.0) * Polynomial(degree=2)), {"kernel__k1__gamma": [0.01, 0.1]},
                          cv=2, scoring=_search_scorer_k1).fit(X, y > 0)
    assert search.best_params_ == {"kernel__k1__gamma": 0.01}


def _search_scorer_k1(est, X, y=None):
    return -abs(est.kernel.kernels[0].gamma - 0.01)


def test_grid_search_over_sigma():
    X, y = _xy(KernelRidge())
    search = GridSearchCV(KernelRidge(kernel=RBF(sigma=1.0)), {"kernel__sigma": [0.5, 7.0]}, cv=2,
                          scoring=lambda est, X, y: -abs(est.kernel.gamma - 0.01)).fit(X, y)
    assert search.best_params_ == {"kernel__sigma": 7.0}
    assert search.best_estimator_.kernel == RBF(sigma=7.0)


def test_randomized_search():
    X, y = _xy(KernelRidge())
    search = RandomizedSearchCV(KernelRidge(kernel=RBF(1.0) + Linear()), {"kernel__k1__gamma": loguniform(1e-3, 1e1)},
                                n_iter=4, cv=2, random_state=0).fit(X, y)
    gammas = [p["kernel__k1__gamma"] for p in search.cv_results_["params"]]
    assert len(set(gammas)) == 4
    assert search.best_estimator_.kernel.kernels[0].gamma == search.best_params_["kernel__k1__gamma"]


def test_halving_grid_search():
    X, y = _xy(KernelRidge(), n=80)
    search = HalvingGridSearchCV(KernelRidge(kernel=RBF(1.0)), {"kernel__gamma": [1e-3, 1e-2, 1e-1, 1.0]},
                                 factor=2, cv=2, random_state=0).fit(X, y)
    assert search.best_estimator_.kernel == RBF(search.best_params_["kernel__gamma"])
    assert search.n_iterations_ >= 2


def test_mkl_searches_over_kernel_lists():
    """MKL estimators take a list ``kernels``: a list has no set_params, so ``kernels__0__gamma``
    is not a parameter name; the search runs over whole lists (each candidate cloned)."""
    X, y = _xy(KernelRidge())
    grid = {"kernels": [[RBF(0.01), Linear()], [RBF(1.0), Linear()]]}
    search = GridSearchCV(MKLRegressor(kernels=[RBF(0.1), Linear()]), grid, cv=2).fit(X, y)
    assert search.best_estimator_.kernels in grid["kernels"]
    assert search.best_estimator_.kernels[0] is not grid["kernels"][0][0]
    assert search.best_estimator_.kernels[0] is not grid["kernels"][1][0]
