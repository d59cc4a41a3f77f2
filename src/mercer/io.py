"""Save and load fitted estimators without pickle: one zip of ``.npy`` arrays and a JSON manifest.

A model file (format version 2) is a zip archive (readable by ``numpy.load`` like an ``.npz``) holding

* ``manifest.json``: ``format``, ``format_version``, the versions of mercer, scikit-learn and torch
  that wrote it, the estimator's ``class`` (a public estimator of :mod:`mercer.models` or
  :mod:`mercer.approx`), its ``params`` (``get_params()``) and its fitted ``state``, every value
  encoded as JSON;
* ``arr_<i>.npy``: each array or tensor of the state, written with ``allow_pickle=False``.

What an estimator saves is declared by its class, next to its code, not by this module:

* its public fitted attributes (names ending in ``_`` and not starting with ``_``) are saved;
* a private attribute is saved only when the class declares it part of the model, in a class
  attribute ``_saved_private = ("_foo", ...)``; declarations add up along the class's bases (the
  kernel-estimator mixin declares the compute device and dtype);
* a class that renamed a saved attribute maps the old name to the new one in ``_renamed_state``
  (so files written before still load);
* nothing else is stored. The memory budget depends on the machine and is resolved at each call
  (so a loaded model uses the loading machine's memory, never the fitting machine's); state that
  is a pure function of the rest (explicit feature maps, a GP's learnable kernel) is rebuilt after
  loading by the estimator's ``_after_load()`` method.

So renaming an undeclared private attribute does not change the file format, and this module
knows no estimator's internals. Estimators nested in the state (a cross-validated model's
``estimator_``, a feature map inside a model) are stored as ``{"__estimator__": name, "params",
"state"}`` by the same rules. Kernels are stored as ``{"type": "RBF", "params": {"gamma": 0.1}}``,
recursively for ``Sum``, ``Product`` and ``Scaled``; only mercer's own kernel classes are accepted.

scikit-learn's containers and standard preprocessing transformers (an allow-list: ``Pipeline``,
``ColumnTransformer``, ``TransformedTargetRegressor``, ``FeatureUnion``, ``StandardScaler``,
``OneHotEncoder``, ``SimpleImputer``, ``TfidfVectorizer``, ... see :func:`loadable_sklearn_classes`)
are stored as ``{"__sklearn__": name, "params", "state"}``: their ``get_params(deep=False)`` (a
pipeline's steps, fitted or not, are nested values) and their other attributes. So a whole
"preprocessing + mercer model" pipeline saves and loads without pickle. Parameters that hold code or
touch files (``func``, ``inverse_func``, ``memory``) must be None, and a vectorizer's ``input`` must
be ``"content"`` (not file names to open). A dict numbering its text keys 0..n-1 (a vectorizer's
``vocabulary_``) is stored as its keys in that order.

Loading never executes code from the file: the class name is looked up among mercer's public
estimator classes (the registry, ``mercer.models.ESTIMATORS``) or the scikit-learn
allow-list, every state attribute
must be a plain data name the class saves by the rules above (an undeclared one is refused), and
every value is rebuilt by a known constructor.

Format version 1 (written before the classes declared their state) stored every attribute of the
estimator plus a ``derived`` list of the attributes recomputed on load. Such files still load: the
public fitted attributes and the private ones the class still declares are kept, the rest is
dropped, and ``_after_load()`` rebuilds the derived state.

>>> from mercer.io import save, load
>>> save(model, "model.mercer")
>>> model2 = load("model.mercer")            # on CPU; load(path, device="cuda") for a GPU
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import math
import numbers
import re
import warnings
import zipfile
import zlib

import numpy as np
import scipy.sparse as sp
import sklearn
import torch
from sklearn.utils.validation import check_is_fitted

from . import __version__, kernels, models
from ._backend import resolve_device
from ._config import get_config
from ._sparse import SparseRows, as_sparse_rows

__all__ = ["FORMAT_VERSION", "kernel_from_dict", "kernel_to_dict", "load", "save", "loadable_estimators",
           "loadable_sklearn_classes"]

FORMAT = "mercer.model"
#: 2: the state holds the public fitted attributes and the private ones each class declares
#: (``_saved_private``); 1: every attribute, plus a ``derived`` list of those recomputed on load.
FORMAT_VERSION = 2
_MANIFEST = "manifest.json"

#: scikit-learn classes that may be saved and loaded (as their parameters + fitted attributes): the
#: helpers that appear inside mercer's fitted state, the containers that assemble models (Pipeline,
#: ColumnTransformer, TransformedTargetRegressor, FeatureUnion) and the standard preprocessing
#: transformers. Only these names are ever instantiated from a file; their values are plain data.
_SKLEARN = {
    "LabelBinarizer": "sklearn.preprocessing", "LinearSVC": "sklearn.svm",
    "Pipeline": "sklearn.pipeline", "FeatureUnion": "sklearn.pipeline",
    "ColumnTransformer": "sklearn.compose", "TransformedTargetRegressor": "sklearn.compose",
    "StandardScaler": "sklearn.preprocessing", "MinMaxScaler": "sklearn.preprocessing",
    "MaxAbsScaler": "sklearn.preprocessing", "RobustScaler": "sklearn.preprocessing",
    "Normalizer": "sklearn.preprocessing", "OneHotEncoder": "sklearn.preprocessing",
    "OrdinalEncoder": "sklearn.preprocessing", "LabelEncoder": "sklearn.preprocessing",
    "PolynomialFeatures": "sklearn.preprocessing", "QuantileTransformer": "sklearn.preprocessing",
    "PowerTransformer": "sklearn.preprocessing", "KBinsDiscretizer": "sklearn.preprocessing",
    "FunctionTransformer": "sklearn.preprocessing",
    "SimpleImputer": "sklearn.impute", "MissingIndicator": "sklearn.impute",
    "VarianceThreshold": "sklearn.feature_selection", "PCA": "sklearn.decomposition",
    # text: a fitted TF-IDF vectorizer is its parameters, vocabulary_ and the idf_ of its TfidfTransformer
    "TfidfVectorizer": "sklearn.feature_extraction.text", "TfidfTransformer": "sklearn.feature_extraction.text",
    # scikit-learn's GP kernels: the parameter of an estimator given one, and the fitted kernel_ of
    # a GaussianProcessRegressor in scikit-learn's mode (plain numbers, bounds and nested kernels)
    **dict.fromkeys(["RBF", "Matern", "RationalQuadratic", "ExpSineSquared", "DotProduct", "ConstantKernel",
                     "WhiteKernel", "Sum", "Product", "Exponentiation"], "sklearn.gaussian_process.kernels"),
}
_HELPERS = _SKLEARN  # the name of this table before pipelines were saved

#: parameters that would make a loaded scikit-learn object run code or touch files on its own
#: (a function, a cache folder): they must be None in a model file.
_MUST_BE_NONE = {"func", "inverse_func", "memory"}
#: parameters that must hold one value in a model file: a vectorizer given ``input="filename"`` or
#: ``"file"`` would open the paths or files it is handed instead of reading texts.
_MUST_BE = {"input": "content"}


def _helper_class(name: str):
    """An allow-listed scikit-learn class by name (imported on use: ``sklearn.svm`` costs ~40 ms
    at start-up, and only some models hold one)."""
    return getattr(importlib.import_module(_SKLEARN[name]), name)


def _sklearn_name(v) -> str | None:
    """The allow-list name of a scikit-learn object of exactly an allowed class, else None."""
    name = type(v).__name__
    if name not in _SKLEARN or not type(v).__module__.startswith(_SKLEARN[name]):
        return None
    return name if _helper_class(name) is type(v) else None


# -- which classes, which attributes ------------------------------------------------------------
@functools.cache
def _estimator_classes() -> dict:
    """Loadable classes, name -> class: the public estimators of :mod:`mercer.models` and
    :mod:`mercer.approx`, as the registry lists them (``mercer.models.ESTIMATORS``)."""
    return {entry.name: entry.load() for entry in models.ESTIMATORS}


def loadable_estimators() -> list[str]:
    """Names of mercer's estimator classes that :func:`save` and :func:`load` accept (see also
    :func:`loadable_sklearn_classes`)."""
    return sorted(_estimator_classes())


def loadable_sklearn_classes() -> list[str]:
    """Names of the scikit-learn classes that :func:`save` and :func:`load` accept: containers
    (``Pipeline``, ``ColumnTransformer``, ``TransformedTargetRegressor``, ``FeatureUnion``) whose
    steps are in turn loadable, and standard preprocessing transformers."""
    return sorted(_SKLEARN)


def _declared_private(cls) -> frozenset:
    """The private attributes that ``cls`` declares part of its model: the ``_saved_private``
    tuples of the class and of its bases, together."""
    return frozenset(name for klass in cls.__mro__ for name in vars(klass).get("_saved_private", ()))


def _is_saved(name: str, declared: frozenset) -> bool:
    """Whether an attribute belongs to the saved state: a public fitted attribute (``name_``) or
    a private one the class declares."""
    return name in declared or (name.endswith("_") and not name.startswith("_"))


# -- kernels ------------------------------------------------------------------------------------
def _kernel_types() -> dict:
    out = {}
    for name in kernels.__all__:
        obj = getattr(kernels, name)
        if isinstance(obj, type) and issubclass(obj, kernels.Kernel) and obj is not kernels.Kernel:
            out[obj.__name__] = obj
    return out


def _kernel_value_to_json(v):
    if isinstance(v, kernels.Kernel):
        return kernel_to_dict(v)
    if isinstance(v, (list, tuple)):
        return [_kernel_value_to_json(x) for x in v]
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise TypeError(f"kernel hyperparameters must be scalars to be saved; got {tuple(v.shape)} tensor.")
        return {"__tensor_scalar__": _float(v.item()), "dtype": str(v.dtype).removeprefix("torch."),
                "requires_grad": bool(v.requires_grad)}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return _float(v)
    raise TypeError(f"cannot save a kernel hyperparameter of type {type(v).__name__}.")


def kernel_to_dict(kernel) -> dict:
    """JSON-ready description ``{"type": "RBF", "params": {...}}`` of a mercer kernel
    (recursive for ``Sum``, ``Product`` and ``Scaled``). Raises ``TypeError`` for other classes."""
    types = _kernel_types()
    name = type(kernel).__name__
    if getattr(kernel, "_unsaveable", None):  # e.g. FunctionKernel: a Python function is code, not data
        raise TypeError(f"cannot save the kernel {kernel!r}: {kernel._unsaveable}.")
    if types.get(name) is not type(kernel):
        raise TypeError(
            f"only mercer's own kernels can be saved; got {type(kernel).__module__}.{name}. "
            f"Known kernels: {sorted(types)}."
        )
    return {"type": name, "params": {k: _kernel_value_to_json(v) for k, v in kernel.hyperparameters.items()}}


def _kernel_value_from_json(v):
    if isinstance(v, list):
        return [_kernel_value_from_json(x) for x in v]
    if isinstance(v, dict):
        if set(v) == {"type", "params"}:
            return kernel_from_dict(v)
        if "__tensor_scalar__" in v:
            t = torch.tensor(_unfloat(v["__tensor_scalar__"]), dtype=_torch_dtype(v["dtype"]))
            return t.requires_grad_(bool(v.get("requires_grad", False)))
        if "__float__" in v:
            return _unfloat(v)
        raise ValueError(f"unrecognised kernel hyperparameter {v!r}.")
    return v


def kernel_from_dict(spec: dict):
    """Rebuild a kernel from :func:`kernel_to_dict`'s output; only mercer's kernel classes."""
    if not isinstance(spec, dict) or set(spec) != {"type", "params"} or not isinstance(spec["params"], dict):
        raise ValueError(f"a kernel is described by {{'type': ..., 'params': {{...}}}}; got {spec!r}.")
    types = _kernel_types()
    cls = types.get(spec["type"])
    if cls is None:
        raise ValueError(f"unknown kernel type {spec['type']!r}; known: {sorted(types)}.")
    params = {k: _kernel_value_from_json(v) for k, v in spec["params"].items()}
    if cls in (kernels.Sum, kernels.Product):
        return cls(params["kernels"])
    if cls is kernels.Scaled:
        return cls(params["scale"], params["kernel"])
    return cls(**params)


# -- generic values -----------------------------------------------------------------------------
def _float(v):
    f = float(v)
    return f if math.isfinite(f) else {"__float__": repr(f)}


def _unfloat(v):
    if isinstance(v, dict):
        text = v["__float__"]
        if text not in ("nan", "inf", "-inf"):
            raise ValueError(f"bad float {text!r} in model file.")
        return float(text)
    return float(v)


def _torch_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r} in model file.")
    return dt


def _contiguous_strides(shape) -> tuple:
    out, step = [], 1
    for size in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(out))


def _dense_layout(shape, strides) -> bool:
    """True when ``strides`` lay ``shape`` out densely without overlap (a permutation of the
    row-major layout; dimensions of size 1 may have any stride)."""
    dims = sorted((int(st), int(sz)) for sz, st in zip(shape, strides) if int(sz) != 1)
    step = 1
    for st, sz in dims:
        if st != step:
            return False
        step *= sz
    return True


_PY_TYPES = {"float": float, "int": int, "bool": bool, "str": str, "object": object}
_DTYPE = re.compile(r"[<>|=]?[a-zA-Z][0-9]*(\[[a-z]+\])?")


def _dtype_text(dt: np.dtype, where: str) -> str:
    """A plain (unstructured) numpy dtype as text, e.g. ``'<f8'``, ``'|O'``, ``'<U5'``."""
    if dt.fields is not None or dt.subdtype is not None or not _DTYPE.fullmatch(dt.str):
        raise TypeError(f"cannot save {where}: structured numpy dtype {dt} is not supported.")
    return dt.str


def _dtype_from_text(text) -> np.dtype:
    if not isinstance(text, str) or not _DTYPE.fullmatch(text):
        raise ValueError(f"bad numpy dtype {str(text)[:40]!r} in model file.")
    return np.dtype(text)


def _encode_sklearn(enc, obj, where: str) -> dict:
    """``{"params", "state"}`` of an allow-listed scikit-learn object: its ``get_params(deep=False)``
    (nested estimators, fitted or not, go through the same encoder) and every other attribute."""
    params = obj.get_params(deep=False)
    name = type(obj).__name__
    for k in _MUST_BE_NONE & set(params):
        if params[k] is not None:
            raise TypeError(f"cannot save {where}: {name}'s {k!r} must be None to be saved without pickle "
                            f"(got {type(params[k]).__name__}).")
    for k in _MUST_BE.keys() & set(params):
        if params[k] != _MUST_BE[k]:
            raise TypeError(f"cannot save {where}: {name}'s {k!r} must be {_MUST_BE[k]!r} to be saved "
                            f"(got {params[k]!r}).")
    state = {k: x for k, x in vars(obj).items() if k not in params}
    # as encoded dicts ({"__dict__": [[key, value], ...]}), as the helpers were stored from format 2 on
    return {"params": enc(params, name), "state": enc(state, name)}


def _numbers_its_keys(v: dict) -> bool:
    """Whether a dict maps at least two text keys onto 0, 1, ..., len - 1 (a vocabulary: stored as
    its keys in that order, a fraction of the JSON of the pairs)."""
    if len(v) < 2 or not all(isinstance(k, str) for k in v) or \
            not all(isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)) for x in v.values()):
        return False
    return sorted(int(x) for x in v.values()) == list(range(len(v)))


class _Encoder:
    """Turns a value into JSON, moving arrays and tensors to ``self.arrays``."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _store(self, arr: np.ndarray) -> str:
        name = f"arr_{len(self.arrays)}.npy"
        self.arrays[name] = arr
        return name

    def _tensor(self, v: torch.Tensor, where: str) -> dict:
        t = v.detach().cpu()
        try:
            arr = t.contiguous().numpy()
        except TypeError as exc:
            raise TypeError(f"cannot save {where}: tensor dtype {t.dtype} has no numpy equivalent.") from exc
        out = {"__tensor__": self._store(arr), "requires_grad": bool(v.requires_grad)}
        # The memory layout is kept (column-major outputs of triangular solves, transposes):
        # BLAS rounds differently on different layouts, and a loaded model must predict bit
        # for bit as the saved one.
        if t.ndim > 1 and tuple(t.stride()) != _contiguous_strides(t.shape) and _dense_layout(t.shape, t.stride()):
            out["strides"] = [int(x) for x in t.stride()]
        return out

    def __call__(self, v, where: str):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real) and not isinstance(v, torch.Tensor):
            return _float(v)
        if isinstance(v, torch.Tensor):
            return self._tensor(v, where)
        if isinstance(v, SparseRows):  # sparse centres / support vectors: their three arrays
            c = v.compact().cpu()
            return {"__sparse_rows__": [self._store(c.indptr.numpy()), self._store(c.indices.numpy()),
                                        self._store(c.data.numpy())], "n_features": int(v.shape[1])}
        if sp.issparse(v):
            c = sp.csr_matrix(v)
            return {"__csr__": [self._store(c.indptr), self._store(c.indices), self._store(c.data)],
                    "n_features": int(c.shape[1])}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return {"__objects__": [self(x, where) for x in v.ravel().tolist()], "shape": list(v.shape)}
            # C or Fortran order kept (.npy records it): BLAS rounds differently on either layout, and
            # a loaded model must predict bit for bit as the saved one (scikit-learn's PCA components)
            return {"__ndarray__": self._store(v if v.flags.c_contiguous or v.flags.f_contiguous
                                               else np.ascontiguousarray(v))}
        if isinstance(v, torch.device):
            return {"__device__": str(v)}
        if isinstance(v, torch.dtype):
            return {"__dtype__": str(v).removeprefix("torch.")}
        if isinstance(v, kernels.Kernel):
            return {"__kernel__": kernel_to_dict(v)}
        if isinstance(v, tuple):
            return {"__tuple__": [self(x, where) for x in v]}
        if isinstance(v, list):
            return [self(x, where) for x in v]
        if isinstance(v, dict):
            if _numbers_its_keys(v):  # a vocabulary (term -> column): its terms in column order
                return {"__index__": sorted(v, key=v.__getitem__)}
            return {"__dict__": [[self(k, where), self(x, f"{where}[{k!r}]")] for k, x in v.items()]}
        if isinstance(v, slice):
            return {"__slice__": [self(v.start, where), self(v.stop, where), self(v.step, where)]}
        if isinstance(v, np.dtype):
            return {"__npdtype__": _dtype_text(v, where)}
        if isinstance(v, type) and (issubclass(v, np.generic) or v in _PY_TYPES.values()):
            return {"__type__": v.__name__ if v in _PY_TYPES.values() else _dtype_text(np.dtype(v), where)}
        nested = _estimator_name(v)
        if nested is not None:
            return {"__estimator__": nested, **_encode_estimator(self, v, nested)}
        if _sklearn_name(v) is not None:
            return {"__sklearn__": _sklearn_name(v), **_encode_sklearn(self, v, where)}
        raise TypeError(f"cannot save {where}: values of type {type(v).__module__}.{type(v).__name__} are not supported.")


class _Decoder:
    """Turns JSON back into values; ``version`` is the format version of the file being read."""

    def __init__(self, arrays: dict, device: torch.device, version: int = FORMAT_VERSION):
        self.arrays, self.device, self.version = arrays, device, version

    def _array(self, name):
        if name not in self.arrays:
            raise ValueError(f"model file refers to a missing array {name!r}.")
        return self.arrays[name]

    def _tensor(self, v: dict) -> torch.Tensor:
        src = torch.from_numpy(self._array(v["__tensor__"]))
        strides = v.get("strides")
        if strides is not None:
            if (not isinstance(strides, list) or len(strides) != src.ndim
                    or not all(isinstance(x, int) and x >= 0 for x in strides)
                    or not _dense_layout(src.shape, strides)):
                raise ValueError(f"model file: bad strides {str(strides)[:40]} for an array of shape {tuple(src.shape)}.")
        else:
            strides = _contiguous_strides(src.shape)
        # a fresh torch allocation with the saved layout (64-byte aligned, as fitted tensors are):
        # BLAS kernels can round differently on differently aligned data, and a loaded model must
        # predict bit for bit as the saved one
        t = torch.empty_strided(tuple(src.shape), tuple(strides), dtype=src.dtype, device=self.device).copy_(src)
        return t.requires_grad_(True) if v.get("requires_grad") else t

    def _sparse(self, v: dict):
        """Sparse rows (or a scipy CSR matrix) from their three arrays, checked as scipy checks a
        CSR matrix (row pointers, column indices in range), so a malformed file cannot index
        outside its arrays."""
        key = "__sparse_rows__" if "__sparse_rows__" in v else "__csr__"
        parts, d = v.get(key), v.get("n_features")
        if set(v) != {key, "n_features"} or not isinstance(parts, list) or len(parts) != 3 or type(d) is not int:
            raise ValueError(f"unrecognised value in model file: {str(v)[:80]}")
        indptr, indices, data = (self._array(p) for p in parts)
        if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu" or \
                data.dtype not in (np.float32, np.float64):
            raise ValueError("model file: malformed sparse rows.")
        try:
            csr = sp.csr_matrix((data, indices, indptr), shape=(indptr.shape[0] - 1, d))
            csr.check_format(full_check=True)
        except ValueError as exc:
            raise ValueError(f"model file: malformed sparse rows ({exc}).") from exc
        if key == "__csr__":
            return csr
        return as_sparse_rows(csr, device=self.device)

    def _estimator(self, v: dict):
        name = v["__estimator__"]
        keys = {"__estimator__", "params", "state"} | ({"derived"} if self.version == 1 else set())
        if name not in _estimator_classes() or set(v) != keys:
            raise ValueError(f"model file holds an unknown or malformed estimator {str(name)[:40]!r}; refusing to load it.")
        return _decode_estimator(self, name, v, "model file")

    def _helper(self, v: dict):
        name = v["__sklearn__"]
        if not isinstance(name, str) or name not in _SKLEARN or set(v) != {"__sklearn__", "params", "state"}:
            raise ValueError(f"model file holds a scikit-learn class {str(name)[:40]!r} that is not allowed "
                             f"(allowed: {sorted(_SKLEARN)}); refusing to load it.")
        return _decode_sklearn(self, name, v, "model file")

    def __call__(self, v):
        if v is None or isinstance(v, (bool, str, int, float)):
            return v
        if isinstance(v, list):
            return [self(x) for x in v]
        if isinstance(v, dict) and ("__sparse_rows__" in v or "__csr__" in v):
            return self._sparse(v)
        if not isinstance(v, dict) or len([k for k in v if k.startswith("__")]) != 1:
            raise ValueError(f"unrecognised value in model file: {str(v)[:80]}")
        if "__float__" in v:
            return _unfloat(v)
        if "__tensor__" in v:
            return self._tensor(v)
        if "__ndarray__" in v:
            return self._array(v["__ndarray__"])
        if "__objects__" in v:
            out = np.empty(len(v["__objects__"]), dtype=object)
            out[:] = [self(x) for x in v["__objects__"]]
            return out.reshape(v["shape"])
        if "__slice__" in v:
            parts = self(v["__slice__"])
            if not isinstance(parts, list) or len(parts) != 3 or not all(p is None or type(p) is int for p in parts):
                raise ValueError(f"bad slice {str(parts)[:40]} in model file.")
            return slice(*parts)
        if "__npdtype__" in v:
            return _dtype_from_text(v["__npdtype__"])
        if "__type__" in v:
            text = v["__type__"]
            return _PY_TYPES[text] if text in _PY_TYPES else _dtype_from_text(text).type
        if "__device__" in v:  # state computes where the model is loaded
            return self.device
        if "__dtype__" in v:
            return _torch_dtype(v["__dtype__"])
        if "__kernel__" in v:
            return kernel_from_dict(v["__kernel__"])
        if "__tuple__" in v:
            return tuple(self(x) for x in v["__tuple__"])
        if "__dict__" in v:
            return {self(k): self(x) for k, x in v["__dict__"]}
        if "__index__" in v:
            keys = v["__index__"]
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or \
                    len(set(keys)) != len(keys):
                raise ValueError("model file: a vocabulary must be a list of distinct texts.")
            return {k: i for i, k in enumerate(keys)}
        if "__estimator__" in v:
            return self._estimator(v)
        if "__sklearn__" in v:
            return self._helper(v)
        raise ValueError(f"unrecognised value in model file: {str(v)[:80]}")


# -- estimators ---------------------------------------------------------------------------------
def _estimator_name(v) -> str | None:
    """The name of a loadable mercer estimator, or None for anything else."""
    name = type(v).__name__
    return name if _estimator_classes().get(name) is type(v) else None


def _class_name(estimator) -> str:
    name = _estimator_name(estimator)
    if name is None:
        raise TypeError(
            f"mercer.io.save supports {loadable_estimators()} and scikit-learn's {loadable_sklearn_classes()}; "
            f"got {type(estimator).__module__}.{type(estimator).__name__}."
        )
    return name


def _encode_estimator(enc: _Encoder, estimator, name: str) -> dict:
    """``{"params", "state"}`` of a fitted estimator: the state is what its class saves (public
    fitted attributes and the declared private ones). Nested estimators (a cross-validated model's
    ``estimator_``, a feature map inside a model) go through the same function."""
    params = estimator.get_params(deep=False)
    encoded_params = {}
    for k, v in params.items():
        try:
            encoded_params[k] = enc(v, f"parameter {k!r}")
        except TypeError:
            warnings.warn(f"mercer.io.save: parameter {k!r} of {name} ({type(v).__name__}) cannot be stored; "
                          "it is saved as None (it only matters for a new fit).", UserWarning, stacklevel=3)
            encoded_params[k] = None
    declared = _declared_private(type(estimator))
    state = {k: enc(v, f"{name}.{k}") for k, v in vars(estimator).items()
             if k not in params and _is_saved(k, declared)}
    return {"params": encoded_params, "state": state}


_ATTR = re.compile(r"_?[A-Za-z][A-Za-z0-9_]*")


def _check_attr(cls, name, params, path) -> None:
    """A state attribute must be a plain data name: not a parameter, a dunder, a method or a property."""
    target = getattr(cls, name, None) if isinstance(name, str) else None
    if (not isinstance(name, str) or not _ATTR.fullmatch(name) or name in params or name.endswith("__")
            or callable(target) or isinstance(target, property)):
        raise ValueError(f"{path}: bad state attribute {name!r} for {cls.__name__}.")


def _saved_state(cls, name: str, payload: dict, params, path, version: int) -> dict:
    """The encoded state attributes to set on a new ``cls``. Format 2 holds only what the class
    saves, anything else is refused; format 1 held every attribute: the ones the class does not
    save (derived, or no longer declared) are dropped, ``_after_load`` rebuilds what is needed."""
    derived = payload.get("derived", []) if version == 1 else []
    if not isinstance(derived, list) or not all(isinstance(k, str) and _ATTR.fullmatch(k) for k in derived):
        raise ValueError(f"{path}: malformed model file (the derived attributes of {name} must be a list of names).")
    declared = _declared_private(cls)
    renamed = getattr(cls, "_renamed_state", {})  # attributes the class now stores under another name
    state = {}
    for k, v in payload["state"].items():
        k = renamed.get(k, k)
        saved = _is_saved(k, declared)
        if saved or version >= 2:  # format 1: what is dropped is never set, whatever its name
            _check_attr(cls, k, params, path)
        if saved:
            state[k] = v
        elif version >= 2:
            raise ValueError(f"{path}: {name} does not save the attribute {k!r} (it saves its public fitted "
                             f"attributes and {sorted(declared)}); refusing to load it.")
    return state


def _decode_estimator(dec: _Decoder, name: str, payload: dict, path) -> object:
    cls = _estimator_classes()[name]
    if not isinstance(payload.get("params"), dict) or not isinstance(payload.get("state"), dict):
        raise ValueError(f"{path}: malformed model file (params and state of {name} must be JSON objects).")
    params = {k: dec(v) for k, v in payload["params"].items()}
    known = set(cls._get_param_names())
    unknown = set(params) - known
    if unknown:
        raise ValueError(f"{path}: parameters {sorted(unknown)} are not parameters of {name}.")
    if params.get("device") is not None:
        params["device"] = str(dec.device)
    est = cls(**params)
    for k, v in _saved_state(cls, name, payload, known, path, dec.version).items():
        setattr(est, k, dec(v))
    after_load = getattr(est, "_after_load", None)
    if after_load is not None and payload["state"]:  # an unfitted estimator (a pipeline's template) has none
        after_load()  # the state that is not stored: feature maps, ...
    return est


def _decode_sklearn(dec: _Decoder, name: str, payload: dict, path) -> object:
    """An allow-listed scikit-learn object: constructed from its decoded parameters (data and
    nested allowed estimators only), then its fitted attributes set by name."""
    cls = _helper_class(name)
    params, state = dec(payload.get("params")), dec(payload.get("state"))
    if not isinstance(params, dict) or not isinstance(state, dict):
        raise ValueError(f"{path}: malformed model file (params and state of {name} must be dicts).")
    if hasattr(cls, "_get_param_names"):
        known = set(cls._get_param_names())
    else:  # scikit-learn's GP kernels: their __init__ arguments
        known = {p for p in inspect.signature(cls.__init__).parameters if p != "self"}
    if set(params) - known:
        raise ValueError(f"{path}: parameters {sorted(set(params) - known)} are not parameters of {name}.")
    for k in _MUST_BE_NONE & set(params):
        if params[k] is not None:
            raise ValueError(f"{path}: {name}'s {k!r} must be None in a model file; refusing to load it.")
    for k in _MUST_BE.keys() & set(params):
        if params[k] != _MUST_BE[k]:
            raise ValueError(f"{path}: {name}'s {k!r} must be {_MUST_BE[k]!r} in a model file; "
                             "refusing to load it.")
    obj = cls(**params)
    for k, v in state.items():
        _check_attr(cls, k, known, path)
        setattr(obj, k, v)
    return obj


# -- save / load --------------------------------------------------------------------------------
def save(estimator, path, *, compress: bool = False) -> None:
    """Write a fitted estimator to ``path`` (a zip: JSON manifest + ``.npy`` arrays, no pickle).

    Parameters
    ----------
    estimator : a fitted estimator
        One of the classes in :func:`loadable_estimators`, or a scikit-learn ``Pipeline``,
        ``ColumnTransformer``, ``TransformedTargetRegressor``, ``FeatureUnion`` or transformer of
        :func:`loadable_sklearn_classes` whose steps are in turn loadable.
    path : str, path or writable binary file
    compress : bool, default=False
        Deflate the arrays (smaller file, slower save and load).

    Raises
    ------
    TypeError
        For a class outside both lists (anywhere in a pipeline), or a parameter holding code
        (``FunctionTransformer(func=...)``, a pipeline's ``memory``).
    """
    name = _sklearn_name(estimator) or _class_name(estimator)
    check_is_fitted(estimator)
    enc = _Encoder()
    body = (_encode_sklearn(enc, estimator, name) if name in _SKLEARN and _estimator_name(estimator) is None
            else _encode_estimator(enc, estimator, name))
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "mercer_version": __version__, "sklearn_version": sklearn.__version__,
        "torch_version": torch.__version__,
        "class": name, **body,
    }
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method, allowZip64=True) as zf:
        zf.writestr(_MANIFEST, json.dumps(manifest, indent=1, allow_nan=False))
        for entry, arr in enc.arrays.items():
            with zf.open(entry, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)


def _check_manifest(manifest, path) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: not a mercer model file (format is not {FORMAT!r}).")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
        raise ValueError(f"{path}: model format version {version!r} is newer than this mercer reads "
                         f"({FORMAT_VERSION}); upgrade mercer.")
    if version < 1:
        raise ValueError(f"{path}: unknown model format version {version!r}.")
    name = manifest.get("class")
    if not isinstance(name, str) or (name not in _estimator_classes() and name not in _SKLEARN):
        raise ValueError(f"{path}: refusing to load unknown estimator class {str(name)[:40]!r}; "
                         f"loadable: {loadable_estimators()} and scikit-learn's {loadable_sklearn_classes()}.")


def _read(path):
    try:
        zf = zipfile.ZipFile(path, "r")
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{path}: not a mercer model file (not a zip archive).") from exc
    with zf:
        try:
            manifest = json.loads(zf.read(_MANIFEST).decode("utf-8"))
        except KeyError as exc:
            raise ValueError(f"{path}: not a mercer model file (no {_MANIFEST}).") from exc
        except json.JSONDecodeError as exc:
            what = "empty" if not exc.doc.strip() else f"not valid JSON ({exc})"
            raise ValueError(f"{path}: damaged model file ({_MANIFEST} is {what}).") from exc
        _check_manifest(manifest, path)
        arrays = {}
        for entry in zf.namelist():
            if entry == _MANIFEST:
                continue
            if not (entry.startswith("arr_") and entry.endswith(".npy")) or "/" in entry:
                raise ValueError(f"{path}: unexpected entry {entry!r} in model file.")
            with zf.open(entry) as fh:
                arrays[entry] = np.lib.format.read_array(fh, allow_pickle=False)
    return manifest, arrays


def load(path, *, device=None):
    """Read an estimator written by :func:`save` (format version 2, or 1 from earlier mercer).

    Parameters
    ----------
    path : str, path or readable binary file
    device : str or torch.device, optional
        Where the loaded model computes; default: mercer's configured device
        (``mercer.set_config(device=...)``), else ``"cpu"``, whatever the device it was fitted on.
        A ``device`` parameter that was set at fit time is replaced by this one.

    Returns
    -------
    estimator : the fitted estimator, giving the same ``predict``/``transform`` output.

    Raises
    ------
    ValueError
        For a file that is not a mercer model, a class that is neither a mercer estimator nor an
        allowed scikit-learn class, state that the class does not save, a newer format, or a
        damaged file (a bad checksum, JSON nested too deeply, values of the wrong type), each
        reported in one message.
    """
    dev = resolve_device(device if device is not None else (get_config().device or "cpu"))
    try:
        manifest, arrays = _read(path)
        if manifest.get("mercer_version") != __version__:
            warnings.warn(f"{path}: saved by mercer {manifest.get('mercer_version')}, loaded by {__version__}; "
                          "results may differ.", UserWarning, stacklevel=2)
        dec = _Decoder(arrays, dev, manifest["format_version"])
        name = manifest["class"]
        if name in _SKLEARN and manifest.get("sklearn_version") != sklearn.__version__:
            warnings.warn(f"{path}: a scikit-learn {name} saved with scikit-learn {manifest.get('sklearn_version')}, "
                          f"loaded with {sklearn.__version__}; its fitted attributes may differ between versions.",
                          UserWarning, stacklevel=2)
        if name in _estimator_classes():
            return _decode_estimator(dec, name, manifest, path)
        return _decode_sklearn(dec, name, manifest, path)
    except _DAMAGE as exc:
        # a damaged or hostile file (flipped bits, JSON nested past Python's recursion limit,
        # values of the wrong type or shape) is a bad input, reported as one ValueError
        raise ValueError(f"{path}: damaged or invalid model file ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}).") from exc


#: what reading a damaged or hostile file can raise besides ValueError
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, RecursionError, TypeError, KeyError, AttributeError,
           IndexError, RuntimeError, OverflowError, UnicodeDecodeError)
