"""The seeds' synthetic examples: a 1-D curve and an ellipse in 2-D (kernel PCA), and data that is
separable by a circle but not by a line (feature maps and the kernel trick)."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state

from .._validation import Interval, check_param

__all__ = ["make_circle_separable", "make_curve", "make_ellipse"]

_N_SAMPLES = [Interval(Integral, 1, None, closed="left")]
_NON_NEGATIVE = [Interval(Real, 0, math.inf, closed="left")]  # finite


def make_curve(n_samples: int = 200, noise: float = 0.0, random_state=None):
    r"""Points on the cubic :math:`x = t,\ y = 2 t^2 + t^3` with :math:`t \sim U[-2, 1]`.

    The data looks 2-D but is explained by the single variable ``t``; with the feature map
    :math:`\phi(x, y) = [y, x^2, x^3]` it lies on a plane (a polynomial kernel of degree 3 sees it).

    Parameters
    ----------
    n_samples : int, default=200
    noise : float, default=0.0
        Standard deviation of Gaussian noise added to both coordinates.
    random_state : int, RandomState or None

    Returns
    -------
    X : ndarray of shape (n_samples, 2), float64
    t : ndarray of shape (n_samples,), float64, the latent variable
    """
    check_param("make_curve", "n_samples", n_samples, _N_SAMPLES)
    check_param("make_curve", "noise", noise, _NON_NEGATIVE)
    n, noise = int(n_samples), float(noise)
    rng = check_random_state(random_state)
    t = rng.uniform(-2.0, 1.0, size=n)
    X = np.column_stack([t, 2.0 * t**2 + t**3])
    if noise > 0:
        X += rng.normal(scale=noise, size=X.shape)
    return X, t


def make_ellipse(n_samples: int = 200, noise: float = 0.0, random_state=None):
    r"""Points on the ellipse :math:`x^2 + 4 y^2 = 1`: :math:`(\cos\theta, \sin\theta / 2)`, :math:`\theta \sim U[0, 2\pi)`.

    Linear in the two new variables :math:`(x^2, y^2)`, i.e. in the quadratic kernel's features.

    Parameters
    ----------
    n_samples : int, default=200
    noise : float, default=0.0
        Standard deviation of Gaussian noise added to both coordinates.
    random_state : int, RandomState or None

    Returns
    -------
    X : ndarray of shape (n_samples, 2), float64
    """
    check_param("make_ellipse", "n_samples", n_samples, _N_SAMPLES)
    check_param("make_ellipse", "noise", noise, _NON_NEGATIVE)
    n, noise = int(n_samples), float(noise)
    rng = check_random_state(random_state)
    theta = rng.uniform(0.0, 2.0 * np.pi, size=n)
    X = np.column_stack([np.cos(theta), 0.5 * np.sin(theta)])
    if noise > 0:
        X += rng.normal(scale=noise, size=X.shape)
    return X


def make_circle_separable(n_samples: int = 200, radius2: float = 0.6, margin: float = 0.0, random_state=None):
    r"""Labels :math:`y = \mathrm{sign}(r^2 - x_1^2 - x_2^2)` for :math:`x \sim U[-1, 1]^2`.

    Separable by the circle of radius :math:`\sqrt{r^2}` (the seeds use :math:`r^2 = 0.6`), not by a
    line; linearly separable in the features :math:`(1, x_1^2, x_2^2)`.

    Parameters
    ----------
    n_samples : int, default=200
    radius2 : float in (0, 2), default=0.6
        Squared radius of the separating circle.
    margin : float, default=0.0
        Points with :math:`|x_1^2 + x_2^2 - r^2| < margin` are redrawn, so the classes are strictly
        separated by a band of that width (in squared radius).
    random_state : int, RandomState or None

    Returns
    -------
    X : ndarray of shape (n_samples, 2), float64
    y : ndarray of shape (n_samples,), int64 in {-1, +1} (+1 inside the circle)
    """
    owner = "make_circle_separable"
    check_param(owner, "n_samples", n_samples, _N_SAMPLES)
    check_param(owner, "margin", margin, _NON_NEGATIVE)
    check_param(owner, "radius2", radius2, [Interval(Real, 0, 2, closed="neither")])
    n, margin = int(n_samples), float(margin)
    if radius2 - margin <= 0 or radius2 + margin >= 2:
        raise ValueError(f"The 'margin' parameter of {owner} must leave room for both classes around "
                         f"radius2={radius2}, i.e. be below min(radius2, 2 - radius2). Got {margin} instead.")
    rng = check_random_state(random_state)
    chunks, have = [], 0
    while have < n:
        Z = rng.uniform(-1.0, 1.0, size=(2 * (n - have) + 16, 2))
        r2 = (Z**2).sum(axis=1)
        Z = Z[np.abs(r2 - radius2) >= margin] if margin > 0 else Z
        chunks.append(Z)
        have += len(Z)
    X = np.concatenate(chunks)[:n]
    y = np.where((X**2).sum(axis=1) < radius2, 1, -1).astype(np.int64)
    return X, y
