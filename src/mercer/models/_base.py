"""Shared plumbing of mercer estimators: kernel resolution, device/dtype, input conversion."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, column_or_1d

from .._backend import resolve_device, resolve_dtype, to_numpy, to_tensor
from .._sparse import is_sparse_input
from .._validation import COMPUTE_CONSTRAINTS, check_array_like, describe, is_torch
from ..approx import record_source
from ..kernels import KERNEL_CONSTRAINTS, resolve_kernel
from ..linalg import ExecutionPlan, StreamedMethodsMixin, active_plan, current_plan, source_to_memory
from ..sources import RowSource, is_streamed

__all__ = ["COMPUTE_CONSTRAINTS", "KERNEL_CONSTRAINTS", "KernelEstimatorMixin", "check_class_labels",
           "class_weights", "labels_from_scores", "labels_like"]

# COMPUTE_CONSTRAINTS (device, dtype, memory_budget) and KERNEL_CONSTRAINTS (kernel, gamma, degree,
# coef0, kernel_params) are defined once, in mercer._validation and mercer.kernels, and re-exported
# here for the estimators' tables.


def labels_like(labels: np.ndarray, X):
    """Numeric labels come back as a tensor on the input's device for tensor input (strings and
    objects stay a numpy array)."""
    if is_torch(X) and labels.dtype.kind in "biuf":
        return torch.as_tensor(labels, device=X.device)
    return labels


def labels_from_scores(classes: np.ndarray, scores, X):
    """Predicted labels from decision scores: ``(n,)`` or ``(n, 1)`` -> ``classes[score > 0]``,
    ``(n, k)`` -> ``classes[argmax]`` (first on ties); returned as :func:`labels_like`."""
    s = scores if isinstance(scores, np.ndarray) else scores.detach().cpu().numpy()
    if s.ndim == 2 and s.shape[1] == 1:
        s = s[:, 0]
    idx = (s > 0).astype(int) if s.ndim == 1 else s.argmax(axis=1)
    return labels_like(classes[idx], X)


def check_class_labels(owner: str, y, n: int, *, min_classes: int = 1):
    """Class labels of ``n`` samples: ``(y, classes, codes)`` with ``y`` a 1-D numpy array (a
    column vector is raveled with scikit-learn's warning), ``classes`` its sorted labels and
    ``codes`` the class index of each sample; at least ``min_classes`` classes."""
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None.")
    y = to_numpy(y) if isinstance(y, torch.Tensor) else np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"{owner}: y must be 1-D with {n} labels (one per sample); got shape {y.shape}.")
    check_classification_targets(y)
    classes, codes = np.unique(y, return_inverse=True)
    if len(classes) < min_classes:
        raise ValueError(
            f"{owner} needs samples of at least {min_classes} classes in the data, but the data contains only "
            f"one class: {classes[0].item() if isinstance(classes[0], np.generic) else classes[0]!r}."
        )
    return y, classes, codes.astype(np.int64)


def class_weights(owner: str, class_weight, classes: np.ndarray, y: np.ndarray, sample_weight=None) -> np.ndarray:
    """Weight of each class (aligned with ``classes``) from a ``class_weight`` parameter: None,
    "balanced" or a dict {label: weight}, validated with errors naming ``owner``. "balanced"
    counts samples with ``sample_weight`` when given (a weight of 2 = a repeated sample); LIBSVM's
    estimators pass none, as scikit-learn's SVC does."""
    if class_weight is None:
        return np.ones(len(classes))
    if not (isinstance(class_weight, dict) or (isinstance(class_weight, str) and class_weight == "balanced")):
        raise ValueError(
            f"The 'class_weight' parameter of {owner} must be None, 'balanced' or a dict "
            f"{{label: weight}}. Got {describe(class_weight)} instead."
        )
    if isinstance(class_weight, dict):
        known = set(classes.tolist())
        unknown = [k for k in class_weight if k not in known]
        if unknown:
            raise ValueError(f"The 'class_weight' parameter of {owner} must have labels among the classes of y "
                             f"{classes.tolist()}. Got labels {unknown} instead.")
        bad = {k: v for k, v in class_weight.items() if not np.isfinite(v) or v < 0}
        if bad:
            raise ValueError(f"The 'class_weight' parameter of {owner} must have finite weights >= 0. Got {bad} instead.")
    return compute_class_weight(class_weight, classes=classes, y=y, sample_weight=sample_weight)


class KernelEstimatorMixin(StreamedMethodsMixin):
    """Mixin for estimators with scikit-learn-style ``kernel, gamma, degree, coef0, kernel_params``
    parameters and mercer's ``device, dtype, memory_budget``.

    Streamed data (:mod:`mercer.sources`): every row-wise method (``predict``, ``transform``, ...)
    accepts it (:class:`~mercer.linalg.StreamedMethodsMixin`); ``fit`` streams when the class sets
    ``_streams_fit`` (its ``_validate_X`` then returns the :class:`~mercer.sources.RowSource`),
    and otherwise reads the data into memory when it fits the budget.
    """

    #: Whether ``fit`` reads a streamed ``X`` block by block (else it is read into memory whole).
    _streams_fit: bool = False

    #: Why ``fit`` cannot take sparse ``X`` (and what to use instead), for the estimators whose
    #: algorithm cannot keep it sparse; ``None``: sparse rows are kept sparse.
    _sparse_refusal: str | None = None

    #: Private fitted attributes that :mod:`mercer.io` saves with the public ``name_`` ones;
    #: each subclass declares its own, and the declarations add up along the bases.
    _saved_private: tuple = ("_device", "_dtype")

    def _after_load(self) -> None:
        """Rebuild the state that :mod:`mercer.io` does not store once a model is loaded (the memory
        budget needs nothing: see ``_plan``). Subclasses with derived state extend it (calling
        ``super()._after_load()`` first)."""

    @property
    def _plan(self) -> ExecutionPlan:
        """The execution plan of the call in progress: its memory budget was resolved once when the
        public method started (``memory_budget``, else the caller's
        ``mercer.config_context(memory_budget=...)``, else a fraction of the memory then free on the
        model's device; :func:`mercer.linalg.planned_call`). So ``predict`` honours the context it
        is called in, and a loaded model the loading machine's memory, not the budget of the fit.
        Outside a public call (a private helper called directly), the plan is resolved now."""
        plan = active_plan(self)
        return plan if plan is not None else current_plan(self.memory_budget, getattr(self, "_device", None))

    @property
    def _budget(self) -> int:
        """The plan's budget in bytes (:attr:`_plan`)."""
        return self._plan.budget

    def _resolve_kernel(self):
        return resolve_kernel(self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                              kernel_params=self.kernel_params, owner=type(self).__name__)

    def _setup_compute(self, X) -> None:
        """Fix device, dtype and memory budget for this fit (called once per ``fit``)."""
        device = self.device
        if device is None and is_torch(X):
            device = X.device
        self._device = resolve_device(device)
        self._dtype = resolve_dtype(self.dtype, X)

    def _tensor(self, X, *, share_sparse: bool = False) -> torch.Tensor:
        """``X`` as a tensor or sparse rows in the estimator's dtype and device (a copy; ``share_sparse``:
        a scipy CSR matrix's arrays lent instead, for a fit that keeps only copies of its rows)."""
        return to_tensor(X, dtype=self._dtype, device=self._device, share_sparse=share_sparse)

    def _check_sparse_fit(self, X) -> None:
        """``TypeError`` saying why and what to use when ``X`` is sparse and ``fit`` cannot keep it so."""
        if self._sparse_refusal is not None and (is_sparse_input(X) or getattr(X, "_mercer_sparse_rows", False)):
            raise TypeError(f"{type(self).__name__} cannot fit sparse X (scipy.sparse or torch sparse rows, kept "
                            f"sparse by mercer): {self._sparse_refusal}")

    def _validate_X(self, X, *, reset: bool):
        if reset:
            self._check_sparse_fit(X)
        if is_streamed(X, self._budget):
            if self._streams_fit and reset:
                return self._validate_source(X)
            X = source_to_memory(X, type(self).__name__, memory_budget=self._budget)
        return check_array_like(self, X, reset=reset, accept_sparse=True)

    def _validate_source(self, X) -> RowSource:
        """A streamed training ``X`` as a source; records ``n_features_in_`` (and the column names)."""
        return record_source(self, X)

    def _validate_y(self, y, n_samples: int, *, multi_output: bool = True):
        """Numeric targets as a float64 numpy array of shape (n,) or (n, t)."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        if is_torch(y):
            y = y.detach().cpu().numpy()
        from sklearn.utils.validation import check_array

        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y", ensure_min_samples=1)
        if y.ndim > 2 or (y.ndim == 2 and not multi_output):
            raise ValueError(f"y must be 1-D{' or 2-D' if multi_output else ''}; got shape {y.shape}.")
        if y.shape[0] != n_samples:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n_samples}, {y.shape[0]}]"
            )
        return y

    def _sample_weight(self, sample_weight, X_like, n: int):
        if sample_weight is None:
            return None
        if is_torch(sample_weight):
            sample_weight = sample_weight.detach().cpu().numpy()
        sw = _check_sample_weight(sample_weight, np.empty((n, 0)), dtype=np.float64)
        if (sw < 0).any():
            raise ValueError("sample_weight must be non-negative; got negative weights.")
        return sw
