"""What the dual linear classifiers (perceptron, logistic regression) share: the start of ``fit``
(data, labels, weights, kernel) and one-thread execution of small problems."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from ..._backend import serial_if_small, to_numpy
from .._base import class_weights


def _serial_if_small(device: torch.device, n: int, limit: int = 1000):
    """Problems of up to ``limit`` samples run on one thread (torch and BLAS): see
    :func:`mercer._backend.num_threads` for the measurements behind it."""
    return serial_if_small(device, n, limit, blas=True)


def _classifier_setup(est, X, y, sample_weight):
    """Shared start of the dual classifiers' ``fit`` (after ``check_params``): validated ``X`` and
    its tensor, labels and their codes (sets ``classes_``), sample weights (ones when None) and
    per-class weights; the kernel is resolved (``kernel_``)."""
    owner = type(est).__name__
    X = est._validate_X(X, reset=True)
    y, est.classes_, codes = _check_labels(owner, X, y)
    sw = est._sample_weight(sample_weight, X, X.shape[0])
    cw = class_weights(owner, est.class_weight, est.classes_, y, sw)
    sw = np.ones(X.shape[0]) if sw is None else sw
    est._setup_compute(X)
    est.kernel_ = est._resolve_kernel()
    if est.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
        raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
    return X, est._tensor(X), y, codes, sw, cw


def _check_labels(owner: str, X, y):
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None.")
    y = to_numpy(y) if isinstance(y, torch.Tensor) else np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"{owner}: y must be 1-D with {X.shape[0]} labels (one per sample); got shape {y.shape}.")
    check_classification_targets(y)
    classes, codes = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{owner} needs samples of at least 2 classes in the data, but the data contains only "
            f"one class: {classes[0].item()!r}."
        )
    return y, classes, codes
