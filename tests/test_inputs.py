"""Every public estimator takes a torch tensor that requires grad as data (issue 12).

Inputs are data, not parameters: mercer detaches them (no estimator learns by differentiating
through its inputs), so a ``requires_grad=True`` tensor fits and predicts exactly as the same
values without grad would, its outputs carry no autograd graph, and the user's tensor is left as
it was. The estimators are enumerated from ``mercer.__all__``, so a new one is covered at once.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

import mercer

ESTIMATORS = sorted(n for n in mercer.__all__
                    if isinstance(getattr(mercer, n), type) and issubclass(getattr(mercer, n), BaseEstimator))
#: Parameters that fit the 40 x 3 data below (defaults ask for more samples than that).
PARAMS = {"ApproximateKernelPCA": {"n_components": 2, "n_features": 20}}
METHODS = ("predict", "transform", "decision_function", "predict_proba", "score_samples")


def _build(name):
    est = getattr(mercer, name)()
    params = est.get_params()
    small = {"n_components": 5, "n_clusters": 3, "random_state": 0}
    est.set_params(**{**{k: v for k, v in small.items() if k in params}, **PARAMS.get(name, {})})
    return est


def _data(est):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, dtype=torch.float64, generator=g)
    Xt = torch.randn(7, 3, dtype=torch.float64, generator=g)
    if isinstance(est, ClassifierMixin):
        y = torch.arange(40) % 2
    elif isinstance(est, RegressorMixin):
        y = torch.randn(40, dtype=torch.float64, generator=g)
    else:
        y = None
    return X, Xt, y


def _grad(t):
    return None if t is None or not t.is_floating_point() else t.clone().requires_grad_(True)


def _fit_and_outputs(est, X, Xt, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        out = {m: getattr(est, m)(Xt) for m in METHODS if hasattr(est, m)}
    return {**out, "labels_": est.labels_} if hasattr(est, "labels_") else out


def test_every_public_estimator_is_enumerated():
    assert len(ESTIMATORS) >= 30 and "KernelRidge" in ESTIMATORS and "GaussianProcessRegressor" in ESTIMATORS


@pytest.mark.parametrize("name", ESTIMATORS)
def test_requires_grad_input_is_data(name):
    """Fit + predict on requires_grad inputs equals the same values without grad; nothing
    returned or kept carries a graph; the user's tensors are unchanged (still leaves, no grad)."""
    X, Xt, y = _data(_build(name))
    ref = _fit_and_outputs(_build(name), X, Xt, y)
    Xg, Xtg, yg = _grad(X), _grad(Xt), _grad(y)
    est = _build(name)
    out = _fit_and_outputs(est, Xg, Xtg, y if yg is None else yg)
    assert out.keys() == ref.keys() and out
    for method, value in out.items():
        assert not getattr(value, "requires_grad", False), method
        np.testing.assert_allclose(np.asarray(value), np.asarray(ref[method]), rtol=1e-12, atol=1e-12, err_msg=method)
    fitted = [v for k, v in vars(est).items() if k.endswith("_") and isinstance(v, torch.Tensor)]
    assert not any(t.requires_grad for t in fitted)
    for user, orig in ((Xg, X), (Xtg, Xt), (yg, y)):
        if user is not None:
            assert user.is_leaf and user.requires_grad and user.grad is None
            assert torch.equal(user.detach(), orig)
