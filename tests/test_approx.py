"""Explicit polynomial feature map (seed 001: circle-separable data becomes linearly separable)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import Perceptron

from mercer.approx import PolynomialFeatureMap, explicit_feature_map, polynomial_feature_dim
from mercer.kernels import RBF, Constant, Linear, Polynomial, Quadratic

from conftest import readonly


@pytest.mark.parametrize("degree, coef0, gamma", [(1, 0.0, 1.0), (2, 1.0, 1.0), (3, 0.5, 0.7), (3, 0.0, 2.0), (4, 2.0, 0.3)])
def test_inner_products_equal_the_kernel(degree, coef0, gamma):
    rng = np.random.default_rng(degree)
    X, Z = readonly(rng.normal(size=(30, 4)), rng.normal(size=(11, 4)))
    fmap = PolynomialFeatureMap(degree=degree, coef0=coef0, gamma=gamma).fit(X)
    F, G = fmap.transform(X), fmap.transform(Z)
    K = Polynomial(degree, gamma=gamma, coef0=coef0)(X, Z).cpu().numpy()
    np.testing.assert_allclose(F @ G.T, K, rtol=1e-12, atol=1e-10)
    expected = math.comb(4 + degree, degree) if coef0 > 0 else math.comb(3 + degree, degree)
    assert F.shape[1] == fmap.n_output_features_ == expected == polynomial_feature_dim(4, degree, coef0)


def test_quadratic_map_of_the_seeds():
    # K_quad(x, y) = <x, y>^2 has phi(x) = [x1^2, sqrt(2) x1 x2, x2^2] in 2-D.
    X = readonly(np.array([[1.0, 2.0], [-0.5, 3.0]]))
    F = PolynomialFeatureMap(degree=2, coef0=0.0).fit(X).transform(X)
    expected = np.c_[X[:, 0] ** 2, math.sqrt(2) * X[:, 0] * X[:, 1], X[:, 1] ** 2]
    np.testing.assert_allclose(np.sort(F, axis=1), np.sort(expected, axis=1), rtol=1e-14)


def test_feature_names_and_powers():
    fmap = PolynomialFeatureMap(degree=2, coef0=1.0).fit(np.zeros((2, 2)))
    names = list(fmap.get_feature_names_out())
    assert set(names) == {"x0^2", "x0 x1", "x0", "x1^2", "x1", "1"}
    assert fmap.powers_.sum(axis=1).max() == 2


def test_circle_separable_becomes_linearly_separable():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(400, 2))
    r2 = (X**2).sum(1)
    keep = np.abs(r2 - 0.6) > 0.05  # a margin so the data is strictly separable
    X, y = readonly(X[keep], np.sign(0.6 - r2[keep]))
    raw = Perceptron(max_iter=1000, tol=None, random_state=0).fit(X, y).score(X, y)
    lifted = PolynomialFeatureMap(degree=2, coef0=1.0).fit(X).transform(X)
    lifted_score = Perceptron(max_iter=1000, tol=None, random_state=0).fit(lifted, y).score(lifted, y)
    assert raw < 0.8
    assert lifted_score == 1.0


def test_torch_in_torch_out_and_float32():
    X = torch.randn(5, 3, dtype=torch.float32)
    out = PolynomialFeatureMap(degree=2).fit(X).transform(X)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32


@pytest.mark.parametrize("params, match", [
    (dict(degree=0), "'degree'"), (dict(degree=1.5), "'degree'"),
    (dict(coef0=-1.0), "'coef0'"), (dict(gamma=0.0), "'gamma'"),
])
def test_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        PolynomialFeatureMap(**params).fit(np.zeros((3, 2)))


def test_explicit_maps_of_composites():
    X = torch.randn(8, 3, dtype=torch.float64)
    for k in (Linear(), Quadratic(), 2.0 * Polynomial(3, gamma=0.5), Linear() + Polynomial(2) + Constant(3.0)):
        phi = explicit_feature_map(k, 3)
        torch.testing.assert_close(phi(X) @ phi(X).T, k(X), rtol=1e-12, atol=1e-12)
    assert explicit_feature_map(RBF(), 3) is None
    assert explicit_feature_map(Linear() * Linear(), 3) is None
