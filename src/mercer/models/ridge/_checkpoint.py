"""Checkpoints of a Nyström solver's conjugate-gradient state (``checkpoint=`` of the estimators).

A checkpoint is one ``.npz`` file written atomically (a temporary file renamed over it) after each
CG iteration: the iterate, residual and direction of the running solve, the coefficients of the
solves already finished (one per distinct ``alpha``), and a fingerprint of what determines the
iterates -- the parameters (but ``max_iter``, ``tol`` and ``checkpoint``), the centres, the
right-hand side ``K^T W y`` (which depends on every sample and target) and the dtype. A fit that
finds a file with its own fingerprint continues from it to the iterates of an uninterrupted fit; a
file with another fingerprint is ignored with a warning (and overwritten).
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings

import numpy as np
import torch

from ..._backend import to_numpy
from ...linalg import CGState

log = logging.getLogger(__name__)

_IGNORED = ("checkpoint", "max_iter", "tol")


def fingerprint(est, Z: torch.Tensor, rhs: torch.Tensor, n_w: float, n_samples: int) -> str:
    """What the CG iterates of ``est``'s fit depend on, hashed."""
    h = hashlib.sha256()
    params = {k: v for k, v in est.get_params(deep=False).items() if k not in _IGNORED}
    h.update(f"{type(est).__name__}|{sorted((k, repr(v)) for k, v in params.items())}|{n_samples}|{n_w!r}|"
             f"{Z.dtype}|{tuple(Z.shape)}".encode())
    h.update(np.ascontiguousarray(to_numpy(Z), dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(to_numpy(rhs), dtype=np.float64).tobytes())
    return h.hexdigest()


class Checkpoint:
    """The checkpoint file of one fit (``path``), or nothing when ``path`` is None."""

    def __init__(self, path, key: str, owner: str):
        self.path = None if path is None else os.fspath(path)
        self.key = key
        self.owner = owner
        self.saved: dict | None = None
        if self.path is not None and os.path.exists(self.path):
            with np.load(self.path, allow_pickle=False) as f:
                data = {k: f[k] for k in f.files}
            if str(data.get("fingerprint", "")) == key:
                self.saved = data
                log.info("%s: resuming from checkpoint %s (solve %d, iteration %d)", owner, self.path,
                         int(data["group"]), int(data["n_iter"]))
            else:
                warnings.warn(f"{owner}: the checkpoint {self.path!r} is of another fit (other data, centres or "
                              "parameters); it is ignored and will be overwritten.", UserWarning, stacklevel=5)

    def done(self, g: int):
        """``(coef, n_iter, residual, history)`` of solve ``g`` if the checkpoint finished it, else None."""
        if self.saved is None or g >= int(self.saved["group"]):
            return None
        return self.saved

    def resume(self, g: int, device) -> CGState | None:
        s = self.saved
        if s is None or g != int(s["group"]):
            return None
        t = {k: torch.from_numpy(s[k]).to(device) for k in ("x", "r", "d", "rz", "active")}
        return CGState(t["x"], t["r"], t["d"], t["rz"], t["active"], int(s["n_iter"]), list(s["history"]))

    def saver(self, g: int, coef: torch.Tensor, n_iter: np.ndarray, residual: np.ndarray, history: np.ndarray):
        """``save_state`` for solve ``g``, given what the solves before it found."""
        if self.path is None:
            return None

        def save(state: CGState) -> None:
            tmp = f"{self.path}.tmp-{os.getpid()}"
            with open(tmp, "wb") as f:
                np.savez(f, fingerprint=np.asarray(self.key), group=np.asarray(g), coef=to_numpy(coef),
                         n_iter_done=n_iter, residual_done=residual, history_done=history,
                         x=to_numpy(state.x), r=to_numpy(state.r), d=to_numpy(state.d), rz=to_numpy(state.rz),
                         active=to_numpy(state.active), n_iter=np.asarray(state.n_iter),
                         history=np.asarray(state.history, dtype=np.float64))
            os.replace(tmp, self.path)  # atomic: a crash leaves the previous checkpoint whole
        return save

    def finish(self) -> None:
        """The fit is complete: its checkpoint is no longer needed."""
        if self.path is not None and os.path.exists(self.path):
            os.remove(self.path)
