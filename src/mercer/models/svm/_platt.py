"""Platt scaling of SVM decision values, as LIBSVM (Lin, Lin & Weng 2007), and pairwise coupling
of one-vs-one probabilities (Wu, Lin & Weng 2004).

A binary machine's probability is :math:`P(y = 1 | f) = 1 / (1 + \\exp(A f + B))`, with ``A, B``
fitted by Newton's method on cross-validated decision values; the ``k (k - 1) / 2`` pairwise
probabilities ``r_ij = P(i | i or j)`` are coupled into one distribution over the ``k`` classes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["_couple", "_sigmoid_predict", "_sigmoid_train", "class_probabilities"]


def _sigmoid_train(dec: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``(A, B)`` minimising the cross-entropy of ``1 / (1 + exp(A dec + B))`` against the
    regularised targets of ``y > 0`` (LIBSVM's sigmoid_train)."""
    prior1 = float((y > 0).sum())
    prior0 = float(len(y) - prior1)
    hi, lo = (prior1 + 1) / (prior1 + 2), 1 / (prior0 + 2)
    t = np.where(y > 0, hi, lo)
    A, B = 0.0, float(np.log((prior0 + 1) / (prior1 + 1)))

    def f(A, B):
        z = dec * A + B
        return float(np.sum(np.where(z >= 0, t * z + np.log1p(np.exp(-np.abs(z))), (t - 1) * z + np.log1p(np.exp(-np.abs(z))))))

    fval = f(A, B)
    for _ in range(100):
        z = dec * A + B
        p = np.where(z >= 0, np.exp(-np.abs(z)) / (1 + np.exp(-np.abs(z))), 1 / (1 + np.exp(-np.abs(z))))
        q = 1 - p
        d2 = p * q
        h11 = 1e-12 + np.sum(dec * dec * d2)
        h22 = 1e-12 + np.sum(d2)
        h21 = np.sum(dec * d2)
        d1 = t - p
        g1, g2 = np.sum(dec * d1), np.sum(d1)
        if abs(g1) < 1e-5 and abs(g2) < 1e-5:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= 1e-10:
            nA, nB = A + step * dA, B + step * dB
            nf = f(nA, nB)
            if nf < fval + 1e-4 * step * gd:
                A, B, fval = nA, nB, nf
                break
            step /= 2
        if step < 1e-10:
            break
    return float(A), float(B)


def _sigmoid_predict(dec, A, B):
    z = dec * A + B
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, e / (1 + e), 1 / (1 + e))


def _couple(r: np.ndarray) -> np.ndarray:
    """Pairwise coupling, vectorised over samples: ``r`` (n, k, k) with r[:, i, j] = P(i | i or j)."""
    n, k, _ = r.shape
    Q = -r.transpose(0, 2, 1) * r
    idx = np.arange(k)
    Q[:, idx, idx] = (r.transpose(0, 2, 1) ** 2).sum(axis=2) - r[:, idx, idx] ** 2
    p = np.full((n, k), 1.0 / k)
    todo = np.arange(n)  # each sample iterates until it converges (results independent of the batch)
    for _ in range(max(100, k)):
        Qs, ps = Q[todo], p[todo]
        Qp = np.einsum("nij,nj->ni", Qs, ps)
        pQp = (ps * Qp).sum(axis=1)
        run = np.abs(Qp - pQp[:, None]).max(axis=1) >= 0.005 / k
        todo, Qs, ps, Qp, pQp = todo[run], Qs[run], ps[run], Qp[run], pQp[run]
        if not len(todo):
            break
        for t in range(k):
            diff = (-Qp[:, t] + pQp) / Qs[:, t, t]
            ps[:, t] += diff
            pQp = (pQp + diff * (diff * Qs[:, t, t] + 2 * Qp[:, t])) / (1 + diff) ** 2
            Qp = (Qp + diff[:, None] * Qs[:, t, :]) / (1 + diff)[:, None]
            ps = ps / (1 + diff)[:, None]
        p[todo] = ps
    return p


def class_probabilities(raw: np.ndarray, probA: np.ndarray, probB: np.ndarray, pairs, n_classes: int,
                        one_vs_rest: bool) -> np.ndarray:
    """Class probabilities (n, n_classes) from the raw decision values (n, n_machines) of
    one-vs-one machines ``pairs`` (coupled) or one-vs-rest machines (normalised to sum to one)."""
    p = np.clip(_sigmoid_predict(raw, probA[None, :], probB[None, :]), 1e-7, 1 - 1e-7)
    if one_vs_rest:
        return p / p.sum(axis=1, keepdims=True)
    r = np.zeros((raw.shape[0], n_classes, n_classes))
    for m, (i, j) in enumerate(pairs):
        r[:, i, j] = p[:, m]
        r[:, j, i] = 1 - p[:, m]
    return np.stack([r[:, 0, 1], r[:, 1, 0]], axis=1) if n_classes == 2 else _couple(r)
