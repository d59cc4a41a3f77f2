"""Sparse rows: a CSR matrix as three torch tensors, kept sparse from validation to the kernel tiles.

Why a class of mercer's and not torch's sparse CSR tensor: torch 2.13's CSR tensors on the CPU
multiply a dense matrix (``csr @ dense``) and another CSR, but cannot be sliced by rows
(``t[10:20]``: "Sparse CSR tensors do not have strides"), have no ``index_select`` and no row
reductions -- and the block engine lives on contiguous row slices, gathers of rows (support
vectors, landmarks) and row norms. :class:`SparseRows` holds ``indptr`` / ``indices`` / ``data``
tensors (on any device) and gives exactly those: a slice of rows is a view (``indptr`` sliced, the
other two shared), :meth:`take` gathers rows, :meth:`row_sq_norms`, ``@ dense`` (through a torch CSR
view, so cuSPARSE runs it on a GPU), ``X.T @ U``, and the two kinds of kernel tiles:

* products ``A B^T`` of two sparse blocks into a dense tile: on the CPU a compiled scatter / gather
  (row ``a`` scattered into a length-``d`` work vector once, each row of ``B`` gathers from it:
  ``O(nnz(B))`` per row of ``A``); elsewhere torch's CSR x CSR product;
* coordinate-wise sums ``sum_k f(a_k, b_k)`` with ``f(0, 0) = 0`` (L1, exact squared L2, min,
  chi-squared): on the CPU a compiled merge of the two sorted index lists of each pair (only the
  union of the two supports is visited, and each term is the dense formula's term, so the sum is
  the dense one); elsewhere the two blocks made dense on the union of their columns, a chunk of
  columns at a time.

Rows are kept in canonical form (indices sorted within a row, no duplicates): the merges need it.
"""

from __future__ import annotations

import numbers
import threading
import warnings

import numpy as np
import scipy.sparse as sp
import torch

from ._jit import LazyJit

__all__ = ["SparseRows", "as_sparse_rows", "is_sparse", "is_sparse_input", "plan_features"]

_jit = LazyJit(globals())

#: The coordinate-wise sums a merge computes (``f(0, 0) = 0`` for each).
MERGE_KINDS = ("l1", "sq", "min", "chi2")
_KIND_CODE = {k: i for i, k in enumerate(MERGE_KINDS)}


def is_sparse(X) -> bool:
    """True for :class:`SparseRows`."""
    return isinstance(X, SparseRows)


def is_sparse_input(X) -> bool:
    """True for what becomes :class:`SparseRows`: scipy sparse matrices and arrays, torch sparse
    (CSR or COO) tensors, and :class:`SparseRows` themselves."""
    return isinstance(X, SparseRows) or sp.issparse(X) or (
        isinstance(X, torch.Tensor) and X.layout in (torch.sparse_csr, torch.sparse_coo))


def plan_features(X) -> int:
    """The features the planner counts per row of ``X``: ``d`` for dense rows, the stored entries of
    an average row for sparse ones (:attr:`SparseRows.plan_features`, or a sparse
    :class:`~mercer.sources.RowSource`'s): blocks are sized from the non-zeros, not from ``d``."""
    if isinstance(X, SparseRows) or getattr(X, "sparse", False) is True:  # sparse rows, or a sparse source
        return int(X.plan_features)
    return int(X.shape[1])


class SparseRows:
    """``n`` rows of ``d`` features in compressed sparse row form, as torch tensors.

    Parameters
    ----------
    indptr : int64 tensor of shape (n + 1,)
        Row ``i`` holds entries ``indptr[i]:indptr[i + 1]`` of ``indices`` / ``data`` (absolute
        positions: a slice of rows keeps its parent's arrays).
    indices : int64 or int32 tensor
        Column of each entry, sorted within a row, no duplicates (int32 where the rows hold a scipy
        matrix's own indices: :func:`as_sparse_rows` with ``share=True``).
    data : float tensor
        Value of each entry (float32 or float64); its dtype and device are the rows'.
    n_features : int
        ``d``.

    Build one with :func:`as_sparse_rows` (from scipy, torch sparse or dense rows).
    """

    __slots__ = ("indptr", "indices", "data", "shape", "_columns", "_sq_norms")
    ndim = 2
    requires_grad = False
    is_sparse = True
    layout = "sparse rows"  # not torch.strided: code for dense tensors checks the layout
    _mercer_sparse_rows = True  # what mercer._validation (a lower layer) recognises

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, data: torch.Tensor, n_features: int):
        self.indptr, self.indices, self.data = indptr, indices, data
        self.shape = torch.Size((int(indptr.shape[0]) - 1, int(n_features)))
        self._columns = None  # the rows by column (CPU products), made on first use
        self._sq_norms = None  # |x|^2 of every row, made on first use (kernel rows against these rows)

    # -- what the block engine reads of a tensor ------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def device(self) -> torch.device:
        return self.data.device

    def element_size(self) -> int:
        return self.data.element_size()

    def is_floating_point(self) -> bool:
        return True

    def detach(self) -> SparseRows:
        return self

    @property
    def _version(self) -> int:
        """Changes when the values are written in place (as a tensor's version counter)."""
        return self.data._version

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nnz(self) -> int:
        """Stored entries of these rows."""
        return int(self.indptr[-1]) - int(self.indptr[0]) if self.shape[0] else 0

    @property
    def plan_features(self) -> int:
        """What the planner counts per row instead of ``d``: the stored entries of an average row
        (value and column index, in units of one value), at least 1."""
        n = max(self.shape[0], 1)
        per_entry = 1 + self.indices.element_size() / self.element_size()
        return max(1, int(np.ceil(self.nnz / n * per_entry)))

    def nbytes(self) -> int:
        """Bytes of the rows' own entries and row pointers."""
        return self.nnz * (self.element_size() + self.indices.element_size()) + (self.shape[0] + 1) * 8

    def to(self, *args, device=None, dtype=None, copy: bool = False) -> SparseRows:
        """The rows on ``device`` in ``dtype`` (a copy when either changes, or ``copy``); as
        ``Tensor.to``, positional arguments may be a dtype or a device."""
        for a in args:
            if isinstance(a, torch.dtype):
                dtype = a
            else:
                device = a
        device = self.device if device is None else torch.device(device)
        dtype = self.dtype if dtype is None else dtype
        if device == self.device and dtype == self.dtype and not copy:
            return self
        c = self.compact()
        if c is self and copy:
            c = SparseRows(self.indptr.clone(), self.indices.clone(), self.data.clone(), self.shape[1])
        return SparseRows(c.indptr.to(device), c.indices.to(device), c.data.to(device=device, dtype=dtype),
                          self.shape[1])

    def cpu(self) -> SparseRows:
        return self.to("cpu")

    def clone(self) -> SparseRows:
        return self.to(copy=True)

    # -- rows ---------------------------------------------------------------------------------
    def __getitem__(self, key) -> SparseRows:
        if isinstance(key, tuple):
            if len(key) == 2 and isinstance(key[1], slice) and key[1] == slice(None):
                key = key[0]
            else:
                raise IndexError("SparseRows select rows only (X[rows] or X[rows, :]).")
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step == 1:
                stop = max(stop, start)
                return SparseRows(self.indptr[start:stop + 1], self.indices, self.data, self.shape[1])
            return self.take(torch.arange(start, stop, step, device=self.device))
        if isinstance(key, numbers.Integral):
            i = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"row {key} out of range for {self.shape[0]} rows.")
            return self[i:i + 1]
        return self.take(key)

    def take(self, rows) -> SparseRows:
        """The rows ``rows`` (int indices, or a boolean mask) as new rows, in that order."""
        rows = torch.as_tensor(np.asarray(rows) if not isinstance(rows, torch.Tensor) else rows)
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        rows = rows.to(device=self.device, dtype=torch.long).flatten()
        n = self.shape[0]
        if self.device.type == "cpu":
            return self._take_numpy(rows.numpy(), n)
        if rows.numel() and (int(rows.min()) < -n or int(rows.max()) >= n):
            raise IndexError(f"row indices out of range for {n} rows.")
        rows = torch.where(rows < 0, rows + n, rows)
        starts, counts = self.indptr[rows], self.indptr[rows + 1] - self.indptr[rows]
        indptr = torch.zeros(rows.numel() + 1, dtype=torch.long, device=self.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        total = int(indptr[-1])
        pos = torch.arange(total, device=self.device) + torch.repeat_interleave(starts - indptr[:-1], counts,
                                                                                output_size=total)
        return SparseRows(indptr, self.indices[pos], self.data[pos], self.shape[1])

    def _take_numpy(self, rows: np.ndarray, n: int) -> SparseRows:
        """:meth:`take` on the CPU with numpy (a small gather costs a tenth of the torch ops' overhead)."""
        if rows.size and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"row indices out of range for {n} rows.")
        rows = np.where(rows < 0, rows + n, rows)
        ip = self.indptr.numpy()
        starts, counts = ip[rows], ip[rows + 1] - ip[rows]
        indptr = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        pos = np.arange(indptr[-1], dtype=np.int64) + np.repeat(starts - indptr[:-1], counts)
        return SparseRows(torch.from_numpy(indptr), self.indices[torch.from_numpy(pos)],
                          self.data[torch.from_numpy(pos)], self.shape[1])

    def by_columns(self):
        """These rows by column (CSC of the rows, numpy, on the CPU): ``(colptr, rows, values)``,
        made once per object; rows are in increasing order within a column."""
        if self._columns is None:
            c = self.compact()
            ind = c.indices.numpy()
            order = np.argsort(ind, kind="stable")
            colptr = np.zeros(self.shape[1] + 1, dtype=np.int64)
            np.cumsum(np.bincount(ind, minlength=self.shape[1]), out=colptr[1:])
            self._columns = (colptr, c._row_ids().numpy()[order], c.data.numpy()[order])
        return self._columns

    def compact(self) -> SparseRows:
        """The same rows with ``indptr`` starting at 0 and only their own entries (a view)."""
        a, b = int(self.indptr[0]), int(self.indptr[-1])
        if a == 0 and b == self.data.shape[0] and self.indices.shape[0] == b:
            return self
        return SparseRows(self.indptr - a, self.indices[a:b], self.data[a:b], self.shape[1])

    def _row_ids(self) -> torch.Tensor:
        """The row of each stored entry of :meth:`compact`."""
        counts = self.indptr[1:] - self.indptr[:-1]
        return torch.repeat_interleave(torch.arange(self.shape[0], device=self.device), counts,
                                       output_size=self.nnz)

    # -- reductions and element-wise --------------------------------------------------------------
    def _segment_sum(self, values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.shape[0], dtype=values.dtype, device=self.device)
        return out.index_add_(0, self._row_ids(), values)

    def row_sq_norms(self) -> torch.Tensor:
        """``|x|^2`` of every row, shape (n,): computed once per object (rows are not edited in place;
        :meth:`with_data` makes new ones; kernel rows of a few samples against these rows read them
        on every call), a copy returned (callers scale it in place)."""
        if self._sq_norms is None:
            c = self.compact()
            self._sq_norms = c._segment_sum(c.data.square())
        return self._sq_norms.clone()

    def row_sums(self, absolute: bool = False) -> torch.Tensor:
        c = self.compact()
        return c._segment_sum(c.data.abs() if absolute else c.data)

    def col_sums(self, weights: torch.Tensor | None = None) -> torch.Tensor:
        """``1^T X`` (or ``w^T X``), shape (d,)."""
        c = self.compact()
        vals = c.data if weights is None else c.data * weights.to(c.dtype)[c._row_ids()]
        return torch.zeros(self.shape[1], dtype=self.dtype, device=self.device).index_add_(0, c.indices, vals)

    def with_data(self, data: torch.Tensor) -> SparseRows:
        """The same pattern (of :meth:`compact`) with other values."""
        c = self.compact()
        return SparseRows(c.indptr, c.indices, data, self.shape[1])

    def scale_columns(self, s: torch.Tensor) -> SparseRows:
        """``X diag(s)``."""
        c = self.compact()
        return c.with_data(c.data * s.to(device=self.device, dtype=self.dtype)[c.indices])

    def scale_rows(self, s: torch.Tensor) -> SparseRows:
        """``diag(s) X``."""
        c = self.compact()
        return c.with_data(c.data * s.to(device=self.device, dtype=self.dtype)[c._row_ids()])

    def select_columns(self, cols: torch.Tensor) -> SparseRows:
        """The columns ``cols`` (distinct) of these rows, in that order, as new rows."""
        c = self.compact()
        cols = cols.to(device=self.device, dtype=torch.long)
        where = torch.full((self.shape[1],), -1, dtype=torch.long, device=self.device)
        where[cols] = torch.arange(cols.numel(), device=self.device)
        new = where[c.indices]
        keep = new >= 0
        counts = torch.bincount(c._row_ids()[keep], minlength=self.shape[0])
        indptr = torch.zeros(self.shape[0] + 1, dtype=torch.long, device=self.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        return _canonical_torch(SparseRows(indptr, new[keep], c.data[keep], cols.numel()))

    def all_finite(self) -> bool:
        return bool(torch.isfinite(self.compact().data).all())

    def min_value(self) -> float:
        """Smallest stored entry (0 when none)."""
        d = self.compact().data
        return float(d.min()) if d.numel() else 0.0

    def is_binary(self) -> bool:
        d = self.compact().data
        return bool(((d == 0) | (d == 1)).all())

    # -- products -------------------------------------------------------------------------------
    def torch_csr(self) -> torch.Tensor:
        """A torch sparse CSR tensor viewing these rows (for torch's products)."""
        c = self.compact()
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(c.indptr, c.indices, c.data, size=tuple(self.shape),
                                           check_invariants=False)

    def __matmul__(self, W: torch.Tensor) -> torch.Tensor:
        """``X @ W`` for a dense ``W`` of shape (d,) or (d, k): a dense result."""
        if isinstance(W, SparseRows):
            raise TypeError("SparseRows @ SparseRows: use dot_block(B) for A @ B.T.")
        vec = W.ndim == 1
        W2 = W[:, None] if vec else W
        if self.shape[0] == 0 or self.nnz == 0:
            out = torch.zeros(self.shape[0], W2.shape[1], dtype=torch.promote_types(self.dtype, W2.dtype),
                              device=self.device)
        else:
            out = self.torch_csr() @ W2.to(self.dtype).contiguous()
        return out[:, 0] if vec else out

    def t_matmul(self, U: torch.Tensor) -> torch.Tensor:
        """``X^T @ U`` for a dense ``U`` of shape (n,) or (n, k): shape (d,) or (d, k)."""
        vec = U.ndim == 1
        U2 = (U[:, None] if vec else U).to(self.dtype)
        c = self.compact()
        out = torch.zeros(self.shape[1], U2.shape[1], dtype=self.dtype, device=self.device)
        if c.nnz:
            out.index_add_(0, c.indices, U2[c._row_ids()] * c.data[:, None])
        return out[:, 0] if vec else out

    def dot_block(self, B: SparseRows) -> torch.Tensor:
        """``A B^T`` (``A`` these rows): the dense ``(n_A, n_B)`` tile of inner products."""
        _check_same(self, B)
        out = torch.zeros(self.shape[0], B.shape[0], dtype=self.dtype, device=self.device)
        if self.nnz == 0 or B.nnz == 0:
            return out
        if self.device.type == "cpu":
            a = _numpy_parts(self)
            if B._columns is not None or self.shape[0] >= _COLUMNS_MIN_ROWS:
                # by B's columns: a_i's entries meet only the rows of B sharing a column with it (the
                # same sums, in the same order of columns, as the gather)
                _jit("dot_block_columns")(*a, *B.by_columns(), out.numpy())
            else:
                _jit("dot_block")(*a, *_numpy_parts(B), _work_vector(self.shape[1], out.numpy().dtype), out.numpy())
            return out
        return (self.torch_csr() @ B.torch_csr().t()).to_dense()

    def merge_block(self, B: SparseRows, kind: str) -> torch.Tensor:
        """``sum_k f(a_k, b_k)`` for every pair of rows (``kind``: ``"l1"`` |a - b|, ``"sq"``
        (a - b)^2, ``"min"`` min(a, b), ``"chi2"`` (a - b)^2 / (a + b), 0 where a = b = 0)."""
        _check_same(self, B)
        out = torch.zeros(self.shape[0], B.shape[0], dtype=self.dtype, device=self.device)
        if out.numel() == 0:
            return out
        if self.device.type == "cpu":
            a, b = _numpy_parts(self), _numpy_parts(B)
            _jit("merge_block")(*a, *b, _KIND_CODE[kind], out.numpy())
            return out
        return _union_dense_block(self, B, kind, out)

    def paired(self, B: SparseRows, kind: str) -> torch.Tensor:
        """Row ``i`` of these rows against row ``i`` of ``B``, shape (n,): ``kind`` ``"dot"`` or
        one of the merge kinds."""
        _check_same(self, B)
        if B.shape[0] != self.shape[0]:
            raise ValueError(f"paired rows: {self.shape[0]} and {B.shape[0]} rows; they must match.")
        if B is self:
            if kind in ("dot",):
                return self.row_sq_norms()
            if kind == "min":
                return self.row_sums()
            return torch.zeros(self.shape[0], dtype=self.dtype, device=self.device)
        dev = self.device
        A, B = (self, B) if dev.type == "cpu" else (self.cpu(), B.cpu())
        out = np.zeros(self.shape[0], dtype=np.dtype(str(self.dtype)[6:]))
        code = -1 if kind == "dot" else _KIND_CODE[kind]
        _jit("merge_paired")(*_numpy_parts(A), *_numpy_parts(B), code, out)
        return torch.from_numpy(out).to(dev)

    # -- conversions ----------------------------------------------------------------------------
    def to_scipy(self, *, share_data: bool = False) -> sp.csr_matrix:
        """The rows as a scipy CSR matrix (on the CPU; a copy). ``share_data``: its values, and its
        column indices where they are int32 (scipy keeps them int32 where they fit), are these rows'
        own where they can be (CPU rows that are their own entries: :meth:`compact` is a view)."""
        c = self.compact().cpu()
        data, indices = c.data.numpy(), c.indices.numpy()
        if not (share_data and c is self and self.device.type == "cpu"):
            data = data.copy()
        if not (share_data and indices.dtype == np.int32 and c is self and self.device.type == "cpu"):
            indices = indices.copy()
        return sp.csr_matrix((data, indices, c.indptr.numpy().copy()), shape=tuple(self.shape), copy=False)

    def to_dense(self) -> torch.Tensor:
        """The ``(n, d)`` dense tensor (for small blocks and tests: it holds ``n d`` values)."""
        c = self.compact()
        out = torch.zeros(self.shape[0], self.shape[1], dtype=self.dtype, device=self.device)
        if c.nnz:
            out.index_put_((c._row_ids(), c.indices), c.data, accumulate=True)
        return out

    def __repr__(self) -> str:
        return (f"SparseRows(shape=({self.shape[0]}, {self.shape[1]}), nnz={self.nnz}, dtype={self.dtype}, "
                f"device={self.device})")


def _check_same(A: SparseRows, B) -> None:
    if not isinstance(B, SparseRows):
        raise TypeError(f"expected SparseRows; got {type(B).__name__}.")
    if A.shape[1] != B.shape[1] or A.dtype != B.dtype or A.device != B.device:
        raise ValueError(f"sparse rows of different shapes, dtypes or devices: {A!r} and {B!r}.")


#: Rows of A from which ``A B^T`` goes by the columns of B (B transposed once: O(nnz(B) log + d));
#: fewer rows gather from a scattered row instead (O(nnz(B)) per row of A, nothing to build).
_COLUMNS_MIN_ROWS = 32

_WORK = threading.local()


def _work_vector(d: int, dtype) -> np.ndarray:
    """This thread's zero work vector of ``d`` values for the scatter / gather products (kept
    between calls: each call leaves it zero; O(d) per thread, allocated once, not per tile)."""
    key = np.dtype(dtype).char
    work = getattr(_WORK, key, None)
    if work is None or work.shape[0] < d:
        work = np.zeros(d, dtype=dtype)
        setattr(_WORK, key, work)
    return work


def _numpy_parts(X: SparseRows):
    return X.indptr.numpy(), X.indices.numpy(), X.data.numpy()


def _canonical_csr(X) -> sp.csr_matrix:
    """A CSR matrix with sorted indices and no duplicates (the user's matrix is never changed)."""
    X = sp.csr_matrix(X)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
        X.sort_indices()
    return X


def as_sparse_rows(X, *, dtype: torch.dtype | None = None, device=None, share: bool = False) -> SparseRows:
    """:class:`SparseRows` holding ``X``: a scipy sparse matrix or array, a torch sparse tensor
    (CSR or COO), :class:`SparseRows`, or dense rows (a tensor or an array: their non-zeros).
    The result never shares memory with a user's scipy or torch object (a copy), unless ``share``:
    then a canonical scipy CSR matrix on the CPU in the requested dtype lends its values and column
    indices (kept int32 where they are; only the row pointers are made int64), for a caller that
    never writes them and keeps no view of them past its call (a fit whose model copies what it
    keeps): its data then cost no second copy."""
    if isinstance(X, SparseRows):
        return X.to(device=device, dtype=dtype)
    if isinstance(X, torch.Tensor):
        if X.layout == torch.sparse_coo:
            X = X.coalesce().to_sparse_csr()
        if X.layout == torch.sparse_csr:
            dev = X.device if device is None else torch.device(device)
            rows = SparseRows(X.crow_indices().long(), X.col_indices().long(), X.values(), X.shape[1])
            rows = _canonical_torch(rows)
            return rows.to(device=dev, dtype=dtype or X.dtype, copy=True)
        dev = X.device if device is None else torch.device(device)
        X = X.detach()
        nz = X.nonzero()
        counts = torch.bincount(nz[:, 0], minlength=X.shape[0]) if nz.numel() else \
            torch.zeros(X.shape[0], dtype=torch.long, device=X.device)
        indptr = torch.zeros(X.shape[0] + 1, dtype=torch.long, device=X.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        rows = SparseRows(indptr, nz[:, 1].contiguous(), X[nz[:, 0], nz[:, 1]], X.shape[1])
        return rows.to(device=dev, dtype=dtype or X.dtype, copy=True)
    if not sp.issparse(X):
        X = sp.csr_matrix(np.asarray(X))
    X = _canonical_csr(X)
    np_dtype = np.float32 if dtype == torch.float32 or (dtype is None and X.dtype == np.float32) else np.float64
    lend = share and (device is None or torch.device(device).type == "cpu") and X.indices.dtype in (np.int32, np.int64)
    data = torch.from_numpy(np.asarray(X.data, dtype=np_dtype) if lend else np.array(X.data, dtype=np_dtype))
    indices = np.asarray(X.indices) if lend else X.indices.astype(np.int64)
    rows = SparseRows(torch.from_numpy(X.indptr.astype(np.int64)), torch.from_numpy(indices), data, X.shape[1])
    return rows.to(device=device)


def _canonical_torch(rows: SparseRows) -> SparseRows:
    """Indices sorted within rows, duplicates summed (torch's CSR does not promise either)."""
    c = rows.compact()
    if c.nnz == 0:
        return c
    r = c._row_ids()
    key = r * c.shape[1] + c.indices
    if bool((key[1:] > key[:-1]).all()):
        return c
    uniq, inverse = torch.unique(key, sorted=True, return_inverse=True)
    data = torch.zeros(uniq.numel(), dtype=c.dtype, device=c.device).index_add_(0, inverse, c.data)
    rr = uniq // c.shape[1]
    counts = torch.bincount(rr, minlength=c.shape[0])
    indptr = torch.zeros(c.shape[0] + 1, dtype=torch.long, device=c.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return SparseRows(indptr, uniq % c.shape[1], data, c.shape[1])


# -- other devices: the two blocks dense on the union of their columns, a chunk at a time --------
def _union_dense_block(A: SparseRows, B: SparseRows, kind: str, out: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise sums through dense blocks on the columns either block uses (a column used
    by neither adds ``f(0, 0) = 0``): chunks of columns sized so that the two dense blocks hold
    about as much as the output tile."""
    Ac, Bc = A.compact(), B.compact()
    cols = torch.unique(torch.cat([Ac.indices, Bc.indices]))
    n1, n2 = A.shape[0], B.shape[0]
    chunk = max(1, (n1 * n2) // max(n1 + n2, 1))
    tiny = torch.finfo(A.dtype).tiny
    for s in range(0, cols.numel(), chunk):
        sel = cols[s:s + chunk]
        Da, Db = _dense_on(Ac, sel), _dense_on(Bc, sel)
        if kind == "l1":
            out.add_(torch.cdist(Da, Db, p=1.0))
        elif kind == "sq":
            out.add_(torch.cdist(Da, Db, p=2.0, compute_mode="donot_use_mm_for_euclid_dist").square_())
        else:
            for j in range(sel.numel()):
                a, b = Da[:, j, None], Db[None, :, j]
                if kind == "min":
                    out.add_(torch.minimum(a, b))
                else:
                    out.add_((a - b).square_().div_((a + b).clamp_min_(tiny)))
    return out


def _dense_on(X: SparseRows, cols: torch.Tensor) -> torch.Tensor:
    """The rows' values on the sorted columns ``cols`` as a dense ``(n, len(cols))`` block."""
    pos = torch.searchsorted(cols, X.indices)
    keep = (pos < cols.numel()) & (cols[pos.clamp_max(max(cols.numel() - 1, 0))] == X.indices)
    out = torch.zeros(X.shape[0], cols.numel(), dtype=X.dtype, device=X.device)
    if bool(keep.any()):
        out.index_put_((X._row_ids()[keep], pos[keep]), X.data[keep], accumulate=True)
    return out


# -- compiled CPU loops (numba, on first use) ----------------------------------------------------
@_jit.mark(fastmath={"contract"})
def dot_block(ap, ai, av, bp, bi, bv, work, out):  # pragma: no cover - compiled
    """out[i, j] = <a_i, b_j>: a_i scattered into the zero work vector, each b_j gathers from it
    (the work vector is zero again on return)."""
    n1, n2 = ap.shape[0] - 1, bp.shape[0] - 1
    for i in range(n1):
        for p in range(ap[i], ap[i + 1]):
            work[ai[p]] = av[p]
        for j in range(n2):
            s = 0.0
            for q in range(bp[j], bp[j + 1]):
                s += work[bi[q]] * bv[q]
            out[i, j] = s
        for p in range(ap[i], ap[i + 1]):
            work[ai[p]] = 0.0


@_jit.mark(fastmath={"contract"})
def dot_block_columns(ap, ai, av, colptr, brows, bvals, out):  # pragma: no cover - compiled
    """out[i, j] += a_ik b_jk over the entries of a_i, through the rows of B holding column k
    (``out`` starts at zero; columns in increasing order for every pair, as in dot_block)."""
    for i in range(ap.shape[0] - 1):
        for p in range(ap[i], ap[i + 1]):
            k, v = ai[p], av[p]
            for q in range(colptr[k], colptr[k + 1]):
                out[i, brows[q]] += v * bvals[q]


@_jit.mark
def _term(kind, a, b):  # pragma: no cover - compiled
    if kind == 0:
        return abs(a - b)
    if kind == 1:
        return (a - b) * (a - b)
    if kind == 2:
        return min(a, b)
    s = a + b
    if s == 0.0:
        return 0.0
    return (a - b) * (a - b) / s


@_jit.mark
def _merge_pair(ai, av, p0, p1, bi, bv, q0, q1, kind):  # pragma: no cover - compiled
    """sum_k f(a_k, b_k) over the union of two sorted supports (kind -1: the inner product)."""
    s = 0.0
    p, q = p0, q0
    while p < p1 and q < q1:
        if ai[p] == bi[q]:
            s += av[p] * bv[q] if kind < 0 else _term(kind, av[p], bv[q])
            p += 1
            q += 1
        elif ai[p] < bi[q]:
            if kind >= 0:
                s += _term(kind, av[p], 0.0)
            p += 1
        else:
            if kind >= 0:
                s += _term(kind, 0.0, bv[q])
            q += 1
    if kind >= 0:
        while p < p1:
            s += _term(kind, av[p], 0.0)
            p += 1
        while q < q1:
            s += _term(kind, 0.0, bv[q])
            q += 1
    return s


@_jit.mark
def merge_block(ap, ai, av, bp, bi, bv, kind, out):  # pragma: no cover - compiled
    for i in range(ap.shape[0] - 1):
        for j in range(bp.shape[0] - 1):
            out[i, j] = _merge_pair(ai, av, ap[i], ap[i + 1], bi, bv, bp[j], bp[j + 1], kind)


@_jit.mark
def merge_paired(ap, ai, av, bp, bi, bv, kind, out):  # pragma: no cover - compiled
    for i in range(ap.shape[0] - 1):
        out[i] = _merge_pair(ai, av, ap[i], ap[i + 1], bi, bv, bp[i], bp[i + 1], kind)
