"""Save and load fitted estimators without pickle: one zip of ``.npy`` arrays and a JSON manifest.

A model file is a zip archive (readable by ``numpy.load`` like an ``.npz``) holding

* ``manifest.json``: format version, mercer version, the estimator's class (one of a fixed
  whitelist), its ``get_params()`` and its fitted state, every value encoded as JSON;
* ``arr_<i>.npy``: each array or tensor of the state, written with ``allow_pickle=False``.

Kernels are stored as ``{"type": "RBF", "params": {"gamma": 0.1}}``, recursively for ``Sum``,
``Product`` and ``Scaled``; only mercer's own kernel classes are accepted. State that depends on
the machine (the memory budget) or that is a pure function of the rest (explicit feature maps) is
recomputed on load instead of stored. Loading never executes code from the file: it looks the
class name up in a whitelist, and every value is rebuilt by a known constructor.

>>> from mercer.io import save, load
>>> save(model, "model.mercer")
>>> model2 = load("model.mercer")            # on CPU; load(path, device="cuda") for a GPU
"""

from __future__ import annotations

import importlib
import json
import math
import re
import numbers
import warnings
import zipfile

import numpy as np
import torch

from . import __version__

__all__ = ["FORMAT_VERSION", "kernel_from_dict", "kernel_to_dict", "load", "save", "loadable_estimators"]

FORMAT = "mercer.model"
FORMAT_VERSION = 1
_MANIFEST = "manifest.json"

#: Estimators that can be saved and loaded: class name -> (module, attribute).
_ESTIMATORS = {
    "KernelRidge": ("mercer.models.ridge", "KernelRidge"),
    "KernelRidgeClassifier": ("mercer.models.ridge", "KernelRidgeClassifier"),
    "KernelPCA": ("mercer.models.decomposition", "KernelPCA"),
    "PolynomialFeatureMap": ("mercer.approx", "PolynomialFeatureMap"),
    "NystroemKernelRidge": ("mercer.models.ridge", "NystroemKernelRidge"),
    "NystroemKernelRidgeClassifier": ("mercer.models.ridge", "NystroemKernelRidgeClassifier"),
    "Nystroem": ("mercer.approx", "Nystroem"),
    "LandmarkFeatures": ("mercer.approx", "LandmarkFeatures"),
    "RandomFourierFeatures": ("mercer.approx", "RandomFourierFeatures"),
    "IncompleteCholesky": ("mercer.approx", "IncompleteCholesky"),
    "KernelPerceptron": ("mercer.models.linear", "KernelPerceptron"),
    "KMeans": ("mercer.models.cluster", "KMeans"),
    "KernelSVC": ("mercer.models.svm", "KernelSVC"),
    "ReducedSetSVC": ("mercer.models.svm", "ReducedSetSVC"),
    "BudgetSVC": ("mercer.models.svm", "BudgetSVC"),
    "KernelKMeans": ("mercer.models.cluster", "KernelKMeans"),
    "KernelKNeighborsClassifier": ("mercer.models.neighbors", "KernelKNeighborsClassifier"),
    "KernelKNeighborsRegressor": ("mercer.models.neighbors", "KernelKNeighborsRegressor"),
    "KernelRadiusNeighborsClassifier": ("mercer.models.neighbors", "KernelRadiusNeighborsClassifier"),
    "KernelRadiusNeighborsRegressor": ("mercer.models.neighbors", "KernelRadiusNeighborsRegressor"),
    "KernelLogisticRegression": ("mercer.models.linear", "KernelLogisticRegression"),
    "RandomFeatureRidge": ("mercer.models.ridge", "RandomFeatureRidge"),
    "SketchedKernelRidge": ("mercer.models.ridge", "SketchedKernelRidge"),
    "ApproximateKernelPCA": ("mercer.models.decomposition", "ApproximateKernelPCA"),
    "TensorSketch": ("mercer.approx", "TensorSketch"),
    "RandomMaclaurin": ("mercer.approx", "RandomMaclaurin"),
    "GaussianProcessRegressor": ("mercer.models.gp", "GaussianProcessRegressor"),
    "SparseGPRegressor": ("mercer.models.gp", "SparseGPRegressor"),
    "KernelRidgeCV": ("mercer.models.ridge", "KernelRidgeCV"),
    "MKLRegressor": ("mercer.models.mkl", "MKLRegressor"),
    "MKLClassifier": ("mercer.models.mkl", "MKLClassifier"),
    "KernelAgglomerative": ("mercer.models.cluster", "KernelAgglomerative"),
}

#: scikit-learn helpers that appear inside fitted state (stored as params + fitted attributes).
_HELPERS = {
    "LabelBinarizer": ("sklearn.preprocessing", "LabelBinarizer"),
    "LinearSVC": ("sklearn.svm", "LinearSVC"),
}


def loadable_estimators() -> list[str]:
    """Names of the estimator classes that :func:`save` and :func:`load` accept."""
    return sorted(_ESTIMATORS)


def _import(table: dict, name: str):
    module, attr = table[name]
    return getattr(importlib.import_module(module), attr)


# -- derived state: recomputed on load, never stored ----------------------------------------------
def _derive_budget(est):
    from .linalg import default_memory_budget

    return default_memory_budget(est._device, est.memory_budget)


def _derive_landmark_budget(est):
    from .linalg import default_memory_budget

    return default_memory_budget(est.landmarks_.device, est.memory_budget)


def _derive_phi(est):
    from .approx import explicit_feature_map

    phi = explicit_feature_map(est.kernel_, est.n_features_in_)
    if phi is None or phi.dim != est.coef_.shape[0]:
        raise ValueError(f"{type(est).__name__}: the saved primal coefficients do not match the kernel's feature map.")
    return phi


def _derive_learnable(est):
    """The GPs' learnable view of the kernel: rebuilt from the fitted kernel (same structure and
    hyperparameter layout as the one optimised, whose values only set the starting point)."""
    from .kernels._learnable import LearnableKernel

    lk = LearnableKernel(est.kernel_, est.n_features_in_, est._bounds)
    if list(lk.names) != list(est.hyperparameter_names_[: est._n_kernel]):
        raise ValueError(f"{type(est).__name__}: the saved hyperparameter names {est.hyperparameter_names_} do not "
                         f"match the kernel's {lk.names}.")
    return lk


def _derive_polymap(est):
    from .approx import explicit_feature_map
    from .kernels import Polynomial

    kernel = Polynomial(degree=int(est.degree), gamma=float(est.gamma), coef0=float(est.coef0))
    return explicit_feature_map(kernel, est.n_features_in_)


_DERIVED = {
    "KernelRidge": {"_budget": _derive_budget, "_phi": _derive_phi},
    "KernelRidgeClassifier": {"_budget": _derive_budget, "_phi": _derive_phi},
    "KernelPCA": {"_budget": _derive_budget},
    "PolynomialFeatureMap": {"_map": _derive_polymap},
    "NystroemKernelRidge": {"_budget": _derive_budget},
    "NystroemKernelRidgeClassifier": {"_budget": _derive_budget},
    "KernelPerceptron": {"_budget": _derive_budget},
    "KMeans": {"_budget": _derive_budget},
    "KernelSVC": {"_budget": _derive_budget},
    "ReducedSetSVC": {"_budget": _derive_budget},
    "BudgetSVC": {"_budget": _derive_budget},
    "KernelKMeans": {"_budget": _derive_budget},
    "KernelKNeighborsClassifier": {"_budget": _derive_budget},
    "KernelKNeighborsRegressor": {"_budget": _derive_budget},
    "KernelRadiusNeighborsClassifier": {"_budget": _derive_budget},
    "KernelRadiusNeighborsRegressor": {"_budget": _derive_budget},
    "KernelLogisticRegression": {"_budget": _derive_budget},
    "Nystroem": {"_budget": _derive_landmark_budget},
    "LandmarkFeatures": {"_budget": _derive_landmark_budget},
    "GaussianProcessRegressor": {"_lk": _derive_learnable},
    "SparseGPRegressor": {"_lk": _derive_learnable},
}


def _derived_fns(name: str) -> dict:
    """Attributes recomputed on load for class ``name``: its own table, and the memory budget
    (``_budget``, from ``memory_budget`` and the device of the machine that loads)."""
    return {"_budget": _derive_budget, **_DERIVED.get(name, {})}


# -- kernels ------------------------------------------------------------------------------------
def _kernel_types() -> dict:
    from . import kernels

    out = {}
    for name in kernels.__all__:
        obj = getattr(kernels, name)
        if isinstance(obj, type) and issubclass(obj, kernels.Kernel) and obj is not kernels.Kernel:
            out[obj.__name__] = obj
    return out


def _kernel_value_to_json(v):
    from .kernels import Kernel

    if isinstance(v, Kernel):
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
    from .kernels import Product, Scaled, Sum

    if not isinstance(spec, dict) or set(spec) != {"type", "params"} or not isinstance(spec["params"], dict):
        raise ValueError(f"a kernel is described by {{'type': ..., 'params': {{...}}}}; got {spec!r}.")
    types = _kernel_types()
    cls = types.get(spec["type"])
    if cls is None:
        raise ValueError(f"unknown kernel type {spec['type']!r}; known: {sorted(types)}.")
    params = {k: _kernel_value_from_json(v) for k, v in spec["params"].items()}
    if cls in (Sum, Product):
        return cls(params["kernels"])
    if cls is Scaled:
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


class _Encoder:
    """Turns a value into JSON, moving arrays and tensors to ``self.arrays``."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _store(self, arr: np.ndarray) -> str:
        name = f"arr_{len(self.arrays)}.npy"
        self.arrays[name] = arr
        return name

    def __call__(self, v, where: str):
        from .kernels import Kernel

        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real) and not isinstance(v, torch.Tensor):
            return _float(v)
        if isinstance(v, torch.Tensor):
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
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return {"__objects__": [self(x, where) for x in v.ravel().tolist()], "shape": list(v.shape)}
            return {"__ndarray__": self._store(np.ascontiguousarray(v))}
        if isinstance(v, torch.device):
            return {"__device__": str(v)}
        if isinstance(v, torch.dtype):
            return {"__dtype__": str(v).removeprefix("torch.")}
        if isinstance(v, Kernel):
            return {"__kernel__": kernel_to_dict(v)}
        if isinstance(v, tuple):
            return {"__tuple__": [self(x, where) for x in v]}
        if isinstance(v, list):
            return [self(x, where) for x in v]
        if isinstance(v, dict):
            return {"__dict__": [[self(k, where), self(x, f"{where}[{k!r}]")] for k, x in v.items()]}
        nested = _estimator_name(v)
        if nested is not None:
            return {"__estimator__": nested, **_encode_estimator(self, v, nested)}
        if type(v).__name__ in _HELPERS and _import(_HELPERS, type(v).__name__) is type(v):
            state = {k: x for k, x in vars(v).items() if k not in v.get_params(deep=False)}
            return {"__sklearn__": type(v).__name__, "params": self(v.get_params(deep=False), where),
                    "state": self(state, where)}
        raise TypeError(f"cannot save {where}: values of type {type(v).__module__}.{type(v).__name__} are not supported.")


class _Decoder:
    def __init__(self, arrays: dict, device: torch.device):
        self.arrays, self.device = arrays, device

    def _array(self, name):
        if name not in self.arrays:
            raise ValueError(f"model file refers to a missing array {name!r}.")
        return self.arrays[name]

    def __call__(self, v):
        if v is None or isinstance(v, (bool, str, int, float)):
            return v
        if isinstance(v, list):
            return [self(x) for x in v]
        if not isinstance(v, dict) or len([k for k in v if k.startswith("__")]) != 1:
            raise ValueError(f"unrecognised value in model file: {str(v)[:80]}")
        if "__float__" in v:
            return _unfloat(v)
        if "__tensor__" in v:
            # a fresh torch allocation (64-byte aligned, as the fitted tensors were): BLAS kernels
            # can round differently on differently aligned data, and a loaded model must predict
            # bit for bit as the saved one
            src = torch.from_numpy(self._array(v["__tensor__"]))
            strides = v.get("strides")
            if strides is not None:
                if (not isinstance(strides, list) or len(strides) != src.ndim
                        or not all(isinstance(x, int) and x >= 0 for x in strides)
                        or not _dense_layout(src.shape, strides)):
                    raise ValueError(f"model file: bad strides {str(strides)[:40]} for an array of shape {tuple(src.shape)}.")
            else:
                strides = _contiguous_strides(src.shape)
            # a fresh torch allocation with the saved layout (64-byte aligned, as fitted tensors are)
            t = torch.empty_strided(tuple(src.shape), tuple(strides), dtype=src.dtype, device=self.device).copy_(src)
            return t.requires_grad_(True) if v.get("requires_grad") else t
        if "__ndarray__" in v:
            return self._array(v["__ndarray__"])
        if "__objects__" in v:
            out = np.empty(len(v["__objects__"]), dtype=object)
            out[:] = [self(x) for x in v["__objects__"]]
            return out.reshape(v["shape"])
        if "__device__" in v:
            return self.device
        if "__dtype__" in v:
            return _torch_dtype(v["__dtype__"])
        if "__kernel__" in v:
            return kernel_from_dict(v["__kernel__"])
        if "__tuple__" in v:
            return tuple(self(x) for x in v["__tuple__"])
        if "__dict__" in v:
            return {self(k): self(x) for k, x in v["__dict__"]}
        if "__estimator__" in v:
            name = v["__estimator__"]
            if name not in _ESTIMATORS or set(v) != {"__estimator__", "params", "state", "derived"}:
                raise ValueError(f"model file holds an unknown or malformed estimator {str(name)[:40]!r}; refusing to load it.")
            return _decode_estimator(self, name, v, "model file")
        if "__sklearn__" in v:
            name = v["__sklearn__"]
            if name not in _HELPERS:
                raise ValueError(f"model file holds an unknown helper class {name!r}; refusing to load it.")
            cls = _import(_HELPERS, name)
            obj = cls(**self(v["params"]))
            for k, x in self(v["state"]).items():
                _check_attr(cls, k, obj.get_params(deep=False), "model file")
                setattr(obj, k, x)
            return obj
        raise ValueError(f"unrecognised value in model file: {str(v)[:80]}")


# -- save / load --------------------------------------------------------------------------------
def _estimator_name(v) -> str | None:
    """The whitelist name of a mercer estimator, or None for anything else."""
    name = type(v).__name__
    return name if name in _ESTIMATORS and _import(_ESTIMATORS, name) is type(v) else None


def _class_name(estimator) -> str:
    name = _estimator_name(estimator)
    if name is None:
        raise TypeError(
            f"mercer.io.save supports {loadable_estimators()}; got {type(estimator).__module__}.{type(estimator).__name__}."
        )
    return name


def _encode_estimator(enc: _Encoder, estimator, name: str) -> dict:
    """``{"params", "state", "derived"}`` of a fitted estimator; nested estimators (a cross-validated
    model's ``estimator_``, a feature map inside a model) go through the same function."""
    params = estimator.get_params(deep=False)
    encoded_params = {}
    for k, v in params.items():
        try:
            encoded_params[k] = enc(v, f"parameter {k!r}")
        except TypeError:
            warnings.warn(f"mercer.io.save: parameter {k!r} of {name} ({type(v).__name__}) cannot be stored; "
                          "it is saved as None (it only matters for a new fit).", UserWarning, stacklevel=3)
            encoded_params[k] = None
    derived_fns = _derived_fns(name)
    state, derived = {}, []
    for k, v in vars(estimator).items():
        if k in params:
            continue
        if k in derived_fns:
            derived.append(k)
        else:
            state[k] = enc(v, f"{name}.{k}")
    return {"params": encoded_params, "state": state, "derived": derived}


def _decode_estimator(dec: "_Decoder", name: str, payload: dict, path) -> object:
    cls = _import(_ESTIMATORS, name)
    if not isinstance(payload.get("params"), dict) or not isinstance(payload.get("state"), dict) \
            or not isinstance(payload.get("derived", []), list):
        raise ValueError(f"{path}: malformed model file (params and state of {name} must be JSON objects).")
    params = {k: dec(v) for k, v in payload["params"].items()}
    known = set(cls._get_param_names())
    unknown = set(params) - known
    if unknown:
        raise ValueError(f"{path}: parameters {sorted(unknown)} are not parameters of {name}.")
    if params.get("device") is not None:
        params["device"] = str(dec.device)
    est = cls(**params)
    for k, v in payload["state"].items():
        _check_attr(cls, k, known, path)
        setattr(est, k, dec(v))
    if "_device" in payload["state"]:
        est._device = dec.device
    derived_fns = _derived_fns(name)
    for k in payload.get("derived", []):
        if k not in derived_fns:
            raise ValueError(f"{path}: {name} has no derived attribute {k!r}.")
        setattr(est, k, derived_fns[k](est))
    return est


def save(estimator, path, *, compress: bool = False) -> None:
    """Write a fitted estimator to ``path`` (a zip: JSON manifest + ``.npy`` arrays, no pickle).

    Parameters
    ----------
    estimator : a fitted estimator of one of the classes in :func:`loadable_estimators`
    path : str, path or writable binary file
    compress : bool, default=False
        Deflate the arrays (smaller file, slower save and load).
    """
    from sklearn.utils.validation import check_is_fitted

    name = _class_name(estimator)
    check_is_fitted(estimator)
    enc = _Encoder()
    body = _encode_estimator(enc, estimator, name)
    import sklearn

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
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"{path}: not a mercer model file (format is not {FORMAT!r}).")
        version = manifest.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(f"{path}: model format version {version!r} is newer than this mercer reads "
                             f"({FORMAT_VERSION}); upgrade mercer.")
        name = manifest.get("class")
        if name not in _ESTIMATORS:
            raise ValueError(f"{path}: refusing to load unknown estimator class {name!r}; "
                             f"loadable: {loadable_estimators()}.")
        arrays = {}
        for entry in zf.namelist():
            if entry == _MANIFEST:
                continue
            if not (entry.startswith("arr_") and entry.endswith(".npy")) or "/" in entry:
                raise ValueError(f"{path}: unexpected entry {entry!r} in model file.")
            with zf.open(entry) as fh:
                arrays[entry] = np.lib.format.read_array(fh, allow_pickle=False)
    return manifest, arrays


_ATTR = re.compile(r"_?[A-Za-z][A-Za-z0-9_]*")


def _check_attr(cls, name, params, path) -> None:
    """A state attribute must be a plain data name: not a parameter, a dunder, a method or a property."""
    target = getattr(cls, name, None) if isinstance(name, str) else None
    if (not isinstance(name, str) or not _ATTR.fullmatch(name) or name in params or name.endswith("__")
            or callable(target) or isinstance(target, property)):
        raise ValueError(f"{path}: bad state attribute {name!r} for {cls.__name__}.")


def load(path, *, device=None):
    """Read an estimator written by :func:`save`.

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
        For a file that is not a mercer model, a class outside the whitelist, or a newer format.
    """
    from ._backend import resolve_device

    manifest, arrays = _read(path)
    name = manifest["class"]
    from ._config import get_config

    dev = resolve_device(device if device is not None else (get_config().device or "cpu"))
    dec = _Decoder(arrays, dev)
    if manifest.get("mercer_version") != __version__:
        warnings.warn(f"{path}: saved by mercer {manifest.get('mercer_version')}, loaded by {__version__}; "
                      "results may differ.", UserWarning, stacklevel=2)
    est = _decode_estimator(dec, name, manifest, path)
    return est
