"""A kernel declares each hyperparameter once (``PARAMS``, :class:`mercer.kernels.Param`).

A toy kernel defined here, with no ``__init__``, ``get_params`` or learnable view of its own,
gets them all from its declaration: the constructor and its checks, the scikit-learn parameter
protocol (``clone``, ``set_params``, ``GridSearchCV``), repr / equality / pickling, the learnable
view with default bounds (so a GP learns it), the distance cache of the learning loops, its
shorthand for ``kernel="..."``, and the shared kernel contract. A declaration that does not match a
hand-written ``__init__`` fails when the class is created.
"""

from __future__ import annotations

import inspect
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone

from contracts import KernelContract
from mercer.kernels import (
    KERNELS,
    RBF,
    DistanceCache,
    Kernel,
    LearnableKernel,
    Param,
    resolve_kernel,
    squared_distances,
)
from mercer.kernels._params import one_of, positive


class Cauchy(Kernel):
    r"""Toy kernel :math:`k(x, y) = (1 + \|x - y\|^2 / l^2)^{-p}` (p in {1, 2})."""

    is_stationary = True
    differentiable_inputs = True
    PARAMS = (Param("length_scale", 1.0, positive, learn="length"),
              Param("power", 1.0, one_of(1.0, 2.0)))

    def _pairwise(self, X1, X2):
        return self._profile(squared_distances(X1, X2))

    def _cached_pairwise(self, cache):
        return self._profile(cache.distances("sq"))

    def _paired(self, X1, X2):
        return self._profile(((X1 - X2) ** 2).sum(dim=1))

    def _profile(self, d2):
        return (1.0 + d2 / self.length_scale**2) ** (-self.power)


def cauchy_reference(length_scale, power):
    def ref(X, Z):
        d2 = ((X[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
        return (1.0 + d2 / length_scale**2) ** (-power)
    return ref


class TestCauchy(KernelContract):
    cases = [(Cauchy(), cauchy_reference(1.0, 1.0)), (Cauchy(0.7, power=2.0), cauchy_reference(0.7, 2.0)),
             (2.0 * Cauchy(1.5) + RBF(0.3), lambda X, Z: 2.0 * cauchy_reference(1.5, 1.0)(X, Z)
              + np.exp(-0.3 * ((X[:, None, :] - Z[None, :, :]) ** 2).sum(-1)))]


def test_constructor_and_parameters_come_from_the_declaration():
    assert str(inspect.signature(Cauchy)) == "(length_scale=1.0, power=1.0)"
    k = Cauchy(2.0)
    assert (k.length_scale, k.power) == (2.0, 1.0) and isinstance(k.length_scale, float)
    assert k.get_params() == {"length_scale": 2.0, "power": 1.0}
    assert k.hyperparameters == {"length_scale": 2.0, "power": 1.0}
    assert repr(k) == "Cauchy(length_scale=2, power=1)"
    assert k == Cauchy(length_scale=2) and k != Cauchy(3.0) and hash(k) == hash(Cauchy(2.0))
    assert pickle.loads(pickle.dumps(k)) == k
    c = clone(k)
    assert c == k and c is not k
    assert c.set_params(power=2.0) is c and c.power == 2.0 and k.power == 1.0
    nested = (1.5 * k + RBF()).get_params()
    assert nested["k1__kernel__length_scale"] == 2.0 and nested["k1__kernel__power"] == 1.0


def test_values_are_checked_with_mercer_messages():
    with pytest.raises(ValueError, match="The 'length_scale' parameter of Cauchy must be a float in the range"):
        Cauchy(-1.0)
    with pytest.raises(ValueError, match=r"The 'power' parameter of Cauchy must be one of \(1.0, 2.0\)"):
        Cauchy(power=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gamma'"):
        Cauchy(gamma=1.0)
    with pytest.raises(ValueError, match="Invalid parameter 'gamma'"):
        Cauchy().set_params(gamma=1.0)
    with pytest.raises(ValueError, match="The 'length_scale' parameter of Cauchy"):
        Cauchy().set_params(length_scale=0.0)


def test_learnable_view_and_default_bounds_come_from_the_declaration():
    lk = LearnableKernel(3.0 * Cauchy(2.0, power=2.0) + RBF(sigma=1.0), n_features=2, bounds=(1e-3, 1e3))
    assert lk.names == ["k1__scale", "k1__kernel__length_scale", "k2__gamma"]  # power is not learned
    np.testing.assert_allclose(np.exp(lk.theta0), [3.0, 2.0, 0.5])
    np.testing.assert_allclose(np.exp(lk.log_bounds), [[1e-3, 1e3], [1e-3, 1e3], [0.5e-6, 0.5e6]])
    assert repr(lk.build(lk.theta0)) == "(3 * Cauchy(length_scale=2, power=2) + RBF(gamma=0.5))"
    # differentiable in theta through the class's own formula, with and without the distance cache
    X = torch.randn(7, 2, dtype=torch.float64)
    theta = torch.tensor(lk.theta0, requires_grad=True)
    (g,) = torch.autograd.grad(lk.gram(theta, X).sum(), theta)
    (g_cached,) = torch.autograd.grad(lk.gram(theta, X, cache=DistanceCache(X)).sum(), theta)
    torch.testing.assert_close(g_cached, g, rtol=1e-10, atol=1e-12)
    assert bool((g != 0).all())


def test_a_gp_learns_the_new_kernel():
    from mercer.models import GaussianProcessRegressor

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(40, 1))
    y = np.sin(X[:, 0]) + 0.05 * rng.normal(size=40)
    gp = GaussianProcessRegressor(kernel=Cauchy(1.0, power=2.0), noise=0.01, random_state=0).fit(X, y)
    assert gp.hyperparameter_names_ == ["scale", "kernel__length_scale", "noise"]  # the GP adds a scale
    assert type(gp.kernel_.kernel) is Cauchy and 2.0 < gp.kernel_.kernel.length_scale < 10.0
    assert gp.score(X, y) > 0.99
    assert gp.log_marginal_likelihood(gp.theta_) == pytest.approx(gp.log_marginal_likelihood_value_, rel=1e-9)


def test_a_shorthand_registers_the_kernel_by_name():
    try:
        class ToyCauchy(Cauchy):
            SHORTHANDS = ("toy_cauchy",)

        assert KERNELS["toy_cauchy"] is ToyCauchy
        k = resolve_kernel("toy_cauchy", gamma=0.5, kernel_params={"length_scale": 3.0})  # gamma: not its own
        assert k == ToyCauchy(3.0)
        with pytest.raises(ValueError, match="not parameters of ToyCauchy"):
            resolve_kernel("toy_cauchy", kernel_params={"sigma": 1.0})
        with pytest.raises(ValueError, match=r"'toy_cauchy' of .*Other is already .*ToyCauchy's"):
            class Other(Cauchy):
                SHORTHANDS = ("toy_cauchy",)
    finally:
        KERNELS.pop("toy_cauchy", None)


# -- a declaration that does not match fails at class creation -------------------------------------
def test_init_without_the_declared_parameter_fails():
    with pytest.raises(TypeError, match=r"Bad.__init__\(scale=1.0\) does not match its declared PARAMS "
                                        r"\(length_scale=1.0\)"):
        class Bad(Kernel):
            PARAMS = (Param("length_scale", 1.0, positive),)

            def __init__(self, scale=1.0):
                self.length_scale = scale


def test_init_with_another_default_fails():
    with pytest.raises(TypeError, match="does not match its declared PARAMS"):
        class Bad(Kernel):
            PARAMS = (Param("length_scale", 1.0, positive),)

            def __init__(self, length_scale=2.0):
                self.length_scale = length_scale


def test_undeclared_init_parameters_fail():
    with pytest.raises(TypeError, match=r"Bad.__init__\(gamma=1.0\) does not match its declared PARAMS \(\)"):
        class Bad(Kernel):
            def __init__(self, gamma=1.0):
                self.gamma = gamma

    with pytest.raises(TypeError, match="does not match"):
        class Forwarding(Cauchy):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)


def test_a_matching_handwritten_init_is_accepted():
    class Checked(Kernel):
        PARAMS = (Param("length_scale", 1.0, positive, learn="length"),)

        def __init__(self, length_scale=1.0):
            self.length_scale = self._validate("length_scale", length_scale)

    assert Checked(2).length_scale == 2.0 and Checked(2).get_params() == {"length_scale": 2.0}
    with pytest.raises(ValueError, match="'length_scale' parameter of Checked"):
        Checked(-1)


def test_bad_declarations_fail():
    with pytest.raises(ValueError, match="learn must be one of"):
        Param("length_scale", 1.0, learn="log")
    with pytest.raises(TypeError, match="distinct names"):
        class Twice(Kernel):
            PARAMS = (Param("a", 1.0), Param("a", 2.0))
    with pytest.raises(TypeError, match="alias parameter: it must write its own __init__"):
        class Alias(Kernel):
            PARAMS = (Param("a", 1.0), Param("b", None, alias=True))
    with pytest.raises(ValueError, match=r"'rbf' of .*Mine is already RBF's"):
        class Mine(Kernel):
            SHORTHANDS = ("rbf",)
    assert KERNELS["rbf"] is RBF
