"""What the dual linear classifiers (perceptron, logistic regression) share: the start of ``fit``
(data, labels, weights, kernel) and one-thread execution of small problems."""

from __future__ import annotations

import numpy as np
import torch

from ..._backend import serial_if_small
from .._base import check_class_labels, class_weights


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
    y, est.classes_, codes = check_class_labels(owner, y, X.shape[0], min_classes=2)
    sw = est._sample_weight(sample_weight, X, X.shape[0])
    cw = class_weights(owner, est.class_weight, est.classes_, y, sw)
    sw = np.ones(X.shape[0]) if sw is None else sw
    est._setup_compute(X)
    est.kernel_ = est._resolve_kernel()
    if est.kernel_.is_precomputed and X.shape[0] != X.shape[1]:
        raise ValueError(f"{owner} with a precomputed kernel expects a square (n, n) Gram matrix; got shape {X.shape}.")
    return X, est._tensor(X), y, codes, sw, cw
