"""What the support vector classifiers share: parameter constraints, labels, scikit-learn's
``gamma="scale"``, and one-thread execution of small kernel products."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import torch

from ..._backend import serial_if_small
from ..._validation import Interval, Options
from ...kernels import Kernel, Product, Scaled, Sigmoid, Sum, resolve_kernel
from .._base import KERNEL_CONSTRAINTS, check_class_labels, class_weights, labels_like

#: A float in (0, inf), infinity excluded (C, tol, cache_size, lr).
POSITIVE = Interval(Real, 0, math.inf, closed="neither")
#: A float in (0, inf], infinity included: KernelSVC's ``C`` (``C=inf`` is the hard margin, as SVC).
POSITIVE_OR_INF = Interval(Real, 0, math.inf, closed="right")
#: An int in [1, inf).
AT_LEAST_ONE = Interval(Integral, 1, None, closed="left")
#: The kernel parameters with scikit-learn SVC's ``gamma``: "scale", "auto", a float > 0 or None
#: (the kernel's default); strings are ignored by kernel objects and precomputed kernels.
SVC_KERNEL_CONSTRAINTS: dict = {**KERNEL_CONSTRAINTS, "gamma": [Options("scale", "auto"), POSITIVE, None]}
CLASS_WEIGHT_CONSTRAINT: list = [dict, Options("balanced"), None]


#: Kernel entries below which an OpenMP team costs more than it saves (one-sample prediction:
#: 0.5 ms on one thread, 20+ ms on two busy cores): the work runs on one torch thread.
SERIAL_MAX_ENTRIES = 4_194_304


def _few_threads(device: torch.device, work: float, limit: float = SERIAL_MAX_ENTRIES):
    """Small work (below ``limit`` kernel entries) on one torch thread."""
    return serial_if_small(device, work, limit)


def _data_variance(X) -> float:
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by the caller
        if sp.issparse(X):
            return float(X.multiply(X).mean() - X.mean() ** 2)
        if isinstance(X, torch.Tensor):
            return float(X.double().var(unbiased=False))
        return float(np.asarray(X, dtype=np.float64).var())


def _numeric_gamma(gamma, kernel, X, owner: str = "estimator"):
    """scikit-learn SVC's ``gamma``: "scale" = 1 / (d Var X) (1 when Var X = 0), "auto" = 1 / d,
    or the float given. A "scale" gamma that is not a positive finite float (Var X overflows on
    data near the float limit, or is subnormal) is an error naming ``gamma="scale"``, not the kernel's
    "gamma must be > 0": the user set no gamma."""
    if isinstance(kernel, Kernel) or (isinstance(kernel, str) and kernel == "precomputed"):
        return None if isinstance(gamma, str) else gamma
    if gamma == "scale":
        var = _data_variance(X)
        if var == 0:
            return 1.0
        with np.errstate(over="ignore", divide="ignore"):
            value = float(1.0 / (np.float64(X.shape[1]) * np.float64(var)))
        if not (math.isfinite(var) and 0 < value < math.inf):
            # scikit-learn's wording first (users search for it), then what it means here
            raise ValueError(
                f"{owner}: The dual coefficients or intercepts are not finite: gamma='scale' is 1 / (n_features * "
                f"X.var()), and X.var() = {var:.3g} on this data gives gamma = {value:.3g}, not a positive finite "
                "float (the data's values are too large, or too small, for the kernel to be evaluated in floating "
                "point). The input data may contain large values and need to be preprocessed (e.g. "
                "sklearn.preprocessing.StandardScaler), or gamma given explicitly."
            )
        return value
    if gamma == "auto":
        return 1.0 / X.shape[1]
    return gamma


def svc_kernel(est, X) -> Kernel:
    """The kernel of ``est`` (``kernel, gamma, degree, coef0, kernel_params``) for data ``X``.

    Also sets ``est._gamma``, scikit-learn SVC's private numeric gamma ("scale" and "auto"
    resolved; 0.0, as scikit-learn's, for a precomputed or callable kernel, and for a kernel object
    with a string gamma)."""
    owner = type(est).__name__
    gamma = _numeric_gamma(est.gamma, est.kernel, X, owner)
    gram = (isinstance(est.kernel, str) and est.kernel == "precomputed") or (
        callable(est.kernel) and not isinstance(est.kernel, Kernel))
    est._gamma = 0.0 if gamma is None or gram else float(gamma)
    return resolve_kernel(est.kernel, gamma=gamma, degree=est.degree, coef0=est.coef0,
                          kernel_params=est.kernel_params, owner=owner)


def _contains_sigmoid(k: Kernel) -> bool:
    if isinstance(k, Sigmoid):
        return True
    if isinstance(k, (Sum, Product)):
        return any(_contains_sigmoid(c) for c in k.kernels)
    if isinstance(k, Scaled):
        return _contains_sigmoid(k.kernel)
    return False


def _labels(owner: str, y, n: int):
    """``classes_`` and the class index of each sample; at least two classes."""
    return check_class_labels(owner, y, n, min_classes=2)[1:]


def _class_weights(owner: str, class_weight, classes, yi) -> np.ndarray:
    """Class weights as scikit-learn's SVC: "balanced" from the counts (sample weights ignored)."""
    return class_weights(owner, class_weight, classes, classes[yi])


def _predict_labels(classes, idx, X):
    return labels_like(classes[idx], X)
