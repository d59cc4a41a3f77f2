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
* nothing else is stored. State that depends on the machine (the memory budget) or that is a pure
  function of the rest (explicit feature maps, a GP's learnable kernel) is rebuilt after loading
  by the estimator's ``_after_load()`` method.

So renaming an undeclared private attribute does not change the file format, and this module
knows no estimator's internals. Estimators nested in the state (a cross-validated model's
``estimator_``, a feature map inside a model) are stored as ``{"__estimator__": name, "params",
"state"}`` by the same rules. Kernels are stored as ``{"type": "RBF", "params": {"gamma": 0.1}}``,
recursively for ``Sum``, ``Product`` and ``Scaled``; only mercer's own kernel classes are accepted.

Loading never executes code from the file: the class name is looked up among mercer's public
estimator classes (``mercer.models.__all__`` and ``mercer.approx.__all__``), every state attribute
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
import json
import math
import numbers
import re
import warnings
import zipfile

import numpy as np
import sklearn
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from . import __version__, approx, kernels, models
from ._backend import resolve_device
from ._config import get_config

__all__ = ["FORMAT_VERSION", "kernel_from_dict", "kernel_to_dict", "load", "save", "loadable_estimators"]

FORMAT = "mercer.model"
#: 2: the state holds the public fitted attributes and the private ones each class declares
#: (``_saved_private``); 1: every attribute, plus a ``derived`` list of those recomputed on load.
FORMAT_VERSION = 2
_MANIFEST = "manifest.json"

#: scikit-learn helpers that appear inside fitted state (stored as params + fitted attributes).
_HELPERS = {"LabelBinarizer": ("sklearn.preprocessing", "LabelBinarizer"), "LinearSVC": ("sklearn.svm", "LinearSVC")}


def _helper_class(name: str):
    """A whitelisted scikit-learn helper class by name (imported on use: ``sklearn.svm`` costs
    ~40 ms at start-up, and only models fitted with an approximation hold one)."""
    module, attr = _HELPERS[name]
    return getattr(importlib.import_module(module), attr)


# -- which classes, which attributes ------------------------------------------------------------
@functools.cache
def _estimator_classes() -> dict:
    """Loadable classes, name -> class: the public estimators of :mod:`mercer.models` and
    :mod:`mercer.approx` (the scikit-learn estimators named in their ``__all__``)."""
    out = {}
    for package in (models, approx):
        for name in package.__all__:
            obj = getattr(package, name)
            if isinstance(obj, type) and issubclass(obj, BaseEstimator):
                out[name] = obj
    return out


def loadable_estimators() -> list[str]:
    """Names of the estimator classes that :func:`save` and :func:`load` accept."""
    return sorted(_estimator_classes())


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
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return {"__objects__": [self(x, where) for x in v.ravel().tolist()], "shape": list(v.shape)}
            return {"__ndarray__": self._store(np.ascontiguousarray(v))}
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
            return {"__dict__": [[self(k, where), self(x, f"{where}[{k!r}]")] for k, x in v.items()]}
        nested = _estimator_name(v)
        if nested is not None:
            return {"__estimator__": nested, **_encode_estimator(self, v, nested)}
        if type(v).__name__ in _HELPERS and type(v).__module__.startswith(_HELPERS[type(v).__name__][0]) \
                and _helper_class(type(v).__name__) is type(v):
            state = {k: x for k, x in vars(v).items() if k not in v.get_params(deep=False)}
            return {"__sklearn__": type(v).__name__, "params": self(v.get_params(deep=False), where),
                    "state": self(state, where)}
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

    def _estimator(self, v: dict):
        name = v["__estimator__"]
        keys = {"__estimator__", "params", "state"} | ({"derived"} if self.version == 1 else set())
        if name not in _estimator_classes() or set(v) != keys:
            raise ValueError(f"model file holds an unknown or malformed estimator {str(name)[:40]!r}; refusing to load it.")
        return _decode_estimator(self, name, v, "model file")

    def _helper(self, v: dict):
        name = v["__sklearn__"]
        if name not in _HELPERS:
            raise ValueError(f"model file holds an unknown helper class {name!r}; refusing to load it.")
        cls = _helper_class(name)
        obj = cls(**self(v["params"]))
        for k, x in self(v["state"]).items():
            _check_attr(cls, k, obj.get_params(deep=False), "model file")
            setattr(obj, k, x)
        return obj

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
            return self._tensor(v)
        if "__ndarray__" in v:
            return self._array(v["__ndarray__"])
        if "__objects__" in v:
            out = np.empty(len(v["__objects__"]), dtype=object)
            out[:] = [self(x) for x in v["__objects__"]]
            return out.reshape(v["shape"])
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
            f"mercer.io.save supports {loadable_estimators()}; got {type(estimator).__module__}.{type(estimator).__name__}."
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
    state = {}
    for k, v in payload["state"].items():
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
    if after_load is not None:
        after_load()  # the state that is not stored: memory budget, feature maps, ...
    return est


# -- save / load --------------------------------------------------------------------------------
def save(estimator, path, *, compress: bool = False) -> None:
    """Write a fitted estimator to ``path`` (a zip: JSON manifest + ``.npy`` arrays, no pickle).

    Parameters
    ----------
    estimator : a fitted estimator of one of the classes in :func:`loadable_estimators`
    path : str, path or writable binary file
    compress : bool, default=False
        Deflate the arrays (smaller file, slower save and load).
    """
    name = _class_name(estimator)
    check_is_fitted(estimator)
    enc = _Encoder()
    body = _encode_estimator(enc, estimator, name)
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
    if name not in _estimator_classes():
        raise ValueError(f"{path}: refusing to load unknown estimator class {name!r}; "
                         f"loadable: {loadable_estimators()}.")


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
        For a file that is not a mercer model, a class that is not a mercer estimator, state that
        the class does not save, or a newer format.
    """
    manifest, arrays = _read(path)
    dev = resolve_device(device if device is not None else (get_config().device or "cpu"))
    dec = _Decoder(arrays, dev, manifest["format_version"])
    if manifest.get("mercer_version") != __version__:
        warnings.warn(f"{path}: saved by mercer {manifest.get('mercer_version')}, loaded by {__version__}; "
                      "results may differ.", UserWarning, stacklevel=2)
    return _decode_estimator(dec, manifest["class"], manifest, path)
