"""Conversions between user containers and torch tensors; device, dtype and seed resolution."""

from __future__ import annotations

import numbers

import numpy as np
import torch
from sklearn.utils import check_random_state as _sk_check_random_state

from ._config import get_config
from ._sparse import SparseRows, as_sparse_rows, is_sparse_input
from ._threads import num_threads, serial_if_small  # the thread policy lives in _threads

__all__ = [
    "as_output",
    "check_random_state",
    "make_generator",
    "num_threads",
    "resolve_device",
    "resolve_dtype",
    "row_sq_norms",
    "serial_if_small",
    "to_numpy",
    "to_tensor",
]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_device(device=None) -> torch.device:
    """``None`` -> the configured default (CPU unless set); checks that CUDA exists when asked."""
    if device is None:
        device = get_config().device or "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device must be a torch device such as 'cpu' or 'cuda'; got {device!r}."
        ) from exc
    if dev.type == "meta":
        raise ValueError(f"device={device!r} holds no data (a torch meta device); use device='cpu' or 'cuda'.")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available on this machine; "
            "use device='cpu'."
        )
    return dev


def resolve_dtype(dtype=None, X=None) -> torch.dtype:
    """``None`` -> configured default, else follows ``X`` (float32 stays float32, anything else float64)."""
    if dtype is None:
        dtype = get_config().dtype
    if dtype is None:
        x_dtype = getattr(X, "dtype", None)
        return torch.float32 if x_dtype in (np.float32, torch.float32) else torch.float64
    if isinstance(dtype, torch.dtype):
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be float32 or float64; got {dtype}.")
        return dtype
    key = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if key not in _DTYPES:
        raise ValueError(f"dtype must be 'float32', 'float64' or None; got {dtype!r}.")
    return _DTYPES[key]


def to_tensor(X, *, dtype: torch.dtype, device: torch.device, share_sparse: bool = False) -> torch.Tensor | SparseRows:
    """Return a tensor holding ``X`` (never a view that could write to the user's array); sparse
    input (scipy, torch sparse) becomes :class:`~mercer._sparse.SparseRows`, never dense
    (``share_sparse``: a scipy CSR matrix's arrays lent, not copied: see
    :func:`~mercer._sparse.as_sparse_rows`'s ``share``).

    A torch input is data, not a parameter: it is detached from any autograd graph (a tensor
    with ``requires_grad=True`` is accepted, and nothing mercer computes from it records a graph)
    and copied, so the user's tensor is never modified and never pinned by a fitted model.
    """
    if is_sparse_input(X):
        rows = as_sparse_rows(X, dtype=dtype, device=device, share=share_sparse)  # a copy, unless X is SparseRows
        # already (or share_sparse)
        return rows.clone() if rows is X else rows
    if isinstance(X, torch.Tensor):
        return X.detach().to(device=device, dtype=dtype, copy=True)
    arr = np.asarray(X)
    if not arr.flags.writeable or not arr.flags.c_contiguous or arr.dtype != np.dtype(str(dtype)[6:]):
        arr = np.array(arr, dtype=str(dtype)[6:], order="C")
    else:
        arr = arr.copy()  # torch.from_numpy shares memory: copy so user data is never touched
    return torch.from_numpy(arr).to(device)


def row_sq_norms(X: torch.Tensor) -> torch.Tensor:
    """Sparse rows: their own :meth:`~mercer._sparse.SparseRows.row_sq_norms`. Dense: ``|x|^2`` of every row, shape (n,), without an (n, d) temporary: ``(X * X).sum(1)`` writes
    one, and fresh memory is slow to touch on these VMs (20k x 784 float64: 120 ms vs 11 ms)."""
    if isinstance(X, SparseRows):
        return X.row_sq_norms()
    return torch.linalg.vector_norm(X, dim=1).square()


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def as_output(t: torch.Tensor, like):
    """numpy in -> numpy out; torch in -> torch out on the input's device (mercer's own sparse rows,
    passed between its estimators, count as torch)."""
    if isinstance(like, (torch.Tensor, SparseRows)):
        return t.to(device=like.device)
    return to_numpy(t)


def _torch_seed(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))


def check_random_state(random_state) -> np.random.RandomState:
    """scikit-learn's ``check_random_state``, and the generators every ``random_state`` parameter
    accepts besides (a numpy ``Generator``, a ``torch.Generator``): a RandomState seeded from them
    (scikit-learn's refused them with "cannot be used to seed a numpy.random.RandomState")."""
    if isinstance(random_state, np.random.Generator):
        return np.random.RandomState(int(random_state.integers(0, 2**31 - 1)))
    if isinstance(random_state, torch.Generator):
        return np.random.RandomState(_torch_seed(random_state))
    return _sk_check_random_state(random_state)


def make_generator(random_state, device: torch.device | None = None) -> torch.Generator:
    """Turn a scikit-learn style ``random_state`` (None, int, RandomState) into a torch Generator.

    mercer's estimators keep the default ``device=None`` (a CPU generator) and draw on the CPU,
    moving the draws to the data's device (:mod:`mercer._random`): the same ``random_state`` then
    gives the same model on every device."""
    if random_state is None:
        seed = int(np.random.randint(0, 2**31 - 1))
    elif isinstance(random_state, numbers.Integral):
        seed = int(random_state)
    elif isinstance(random_state, np.random.RandomState):
        seed = int(random_state.randint(0, 2**31 - 1))
    elif isinstance(random_state, np.random.Generator):
        seed = int(random_state.integers(0, 2**31 - 1))
    elif isinstance(random_state, torch.Generator):
        seed = _torch_seed(random_state)
    else:
        raise ValueError(
            f"random_state must be None, an int or a numpy RandomState/Generator; got {random_state!r}."
        )
    gen = torch.Generator(device=device or "cpu")
    gen.manual_seed(seed)
    return gen


