"""The parameter tables: one constraint language, one message style, one table per estimator."""

from __future__ import annotations

import inspect
import math
from numbers import Integral, Real

import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator

import mercer
from mercer._validation import COMPUTE_CONSTRAINTS, InstanceOf, Interval, Options, check_at_most, check_param, check_params
from mercer.kernels import KERNEL_CONSTRAINTS, RBF, Kernel

ESTIMATORS = [getattr(mercer, n) for n in mercer.__all__
              if inspect.isclass(getattr(mercer, n)) and issubclass(getattr(mercer, n), BaseEstimator)]
#: parameters whose allowed values depend on the data (checked in fit against the classes of y)
DATA_DEPENDENT = {("KernelRadiusNeighborsClassifier", "outlier_label")}


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_parameter_of_every_estimator_is_in_its_table(cls):
    table = cls._parameter_constraints
    names = set(cls._get_param_names())
    assert set(table) <= names, f"table entries that are not parameters: {set(table) - names}"
    missing = {p for p in names - set(table) if (cls.__name__, p) not in DATA_DEPENDENT}
    assert not missing, f"{cls.__name__}: parameters without constraints: {missing}"


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_defaults_satisfy_the_table(cls):
    check_params(cls())  # the defaults are allowed values


@pytest.mark.parametrize("cls", [c for c in ESTIMATORS if "memory_budget" in c._get_param_names()],
                         ids=lambda c: c.__name__)
def test_fit_refuses_a_bad_compute_parameter_in_the_one_style(cls):
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match=rf"^The 'memory_budget' parameter of {cls.__name__} must be an int in the "
                                         r"range \[1, inf\) or None\. Got -5 instead\.$"):
        cls(memory_budget=-5).fit(X, np.arange(20) % 2)


@pytest.mark.parametrize("constraint, good, bad, text", [
    (Interval(Real, 0, None, closed="left"), [0, 0.5, 3, np.float32(2)], [-1, math.nan, True, "1"],
     "a float in the range [0, inf)"),
    (Interval(Real, 0, 1, closed="right"), [1, 0.5], [0, 1.5], "a float in the range (0, 1]"),
    (Interval(Integral, 1, None, closed="left"), [1, np.int64(7)], [0, 1.0, False], "an int in the range [1, inf)"),
    (Interval(Real, None, None), [-math.inf, 0.0], [math.nan], "a float in the range (-inf, inf)"),
    (Options("auto", "dense"), ["auto"], ["Auto", 1, None], "a str among {'auto', 'dense'}"),
    (InstanceOf(Kernel, "a mercer kernel"), [RBF()], ["rbf"], "a mercer kernel"),
])
def test_constraints_accept_and_describe(constraint, good, bad, text):
    assert str(constraint) == text
    assert all(constraint.accepts(v) for v in good)
    assert not any(constraint.accepts(v) for v in bad)


def test_one_message_style_with_alternatives_and_none_last():
    with pytest.raises(ValueError) as err:
        check_param("KMeans", "n_init", "x", [None, Interval(Integral, 1, None, closed="left"), Options("auto")])
    assert str(err.value) == ("The 'n_init' parameter of KMeans must be an int in the range [1, inf), a str among "
                              "{'auto'} or None. Got 'x' instead.")
    with pytest.raises(ValueError, match=r"^The 'n_clusters' parameter of KMeans must be at most n_samples = 5\. "
                                         r"Got 7 instead\.$"):
        check_at_most("KMeans", "n_clusters", 7, 5)
    check_at_most("KMeans", "n_clusters", 5, 5)


def test_named_constraints():
    check_param("E", "dtype", torch.float32, COMPUTE_CONSTRAINTS["dtype"])
    check_param("E", "device", "cpu", COMPUTE_CONSTRAINTS["device"])
    check_param("E", "kernel", RBF(), KERNEL_CONSTRAINTS["kernel"])
    for name, value in [("dtype", "float16"), ("device", 3), ("memory_budget", 2.5)]:
        with pytest.raises(ValueError, match=f"The '{name}' parameter of E must be"):
            check_param("E", name, value, COMPUTE_CONSTRAINTS[name])
    with pytest.raises(ValueError, match="array-like"):
        check_param("E", "init", "kmeans", ["array-like"])  # a string is not an array


def test_global_config_is_checked_the_same_way():
    with pytest.raises(ValueError, match=r"^The 'memory_fraction' parameter of Config must be a float in the range "
                                         r"\(0, 1\]\. Got 2 instead\.$"):
        mercer.set_config(memory_fraction=2)


def test_precomputed_kernel_with_the_wrong_number_of_columns_is_refused():
    X = np.random.default_rng(0).normal(size=(10, 3))
    K = X @ X.T
    model = mercer.KernelRidge(kernel="precomputed").fit(K, X[:, 0])
    with pytest.raises(ValueError, match="X has 9 features, but KernelRidge is expecting 10 features"):
        model.predict(K[:, :9])
    svc = mercer.KernelSVC(kernel="precomputed").fit(K, X[:, 0] > 0)
    with pytest.raises(ValueError, match="X has 9 features, but KernelSVC is expecting 10 features"):
        svc.decision_function(K[:, :9])
