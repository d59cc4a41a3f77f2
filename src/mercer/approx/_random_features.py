"""Random Fourier features (Rahimi & Recht 2007) for every stationary mercer kernel.

Bochner's theorem: a continuous stationary kernel is the Fourier transform of a non-negative
measure, :math:`k(x - y) = k(0)\\, E_{\\omega \\sim p}[\\cos(\\omega^T (x - y))]`. Drawing m
frequencies gives the map of seed 002,

.. math:: z(x) = \\sqrt{k(0) / m}\\,[\\cos(\\omega_1^T x), \\dots, \\cos(\\omega_m^T x),
                                   \\sin(\\omega_1^T x), \\dots, \\sin(\\omega_m^T x)]

(2m features, ``variant="cossin"``), or :math:`\\sqrt{2 k(0) / m} \\cos(\\omega_j^T x + b_j)` with
:math:`b_j \\sim U[0, 2\\pi)` (m features, ``variant="phase"``). Both are unbiased; the cos/sin pair
has lower variance. The error of :math:`z(x)^T z(y)` falls like :math:`1/\\sqrt{m}`.

Spectral densities: RBF -> Gaussian, Laplacian -> a product of Cauchy laws, Matérn -> Student-t;
with per-feature scales (ARD) the frequencies are drawn for unit scale and rescaled per feature.
Composites are sampled exactly: ``c * k`` scales k(0); a sum of stationary kernels is a mixture
(each frequency drawn from term i with probability k_i(0) / sum_j k_j(0)); a product is a
convolution (frequencies add).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import as_output, make_generator, resolve_device, resolve_dtype, to_numpy, to_tensor
from .._validation import Options, check_array_like, check_params
from ..kernels import Constant, Kernel, Matern, Product, RBF, Scaled, Sum, resolve_kernel
from ..linalg import MemoryBudgetError, StreamedMethodsMixin, default_memory_budget, format_bytes, row_blocks
from ..sources import RowSource
from ._constraints import COMPUTE_CONSTRAINTS, KERNEL_CONSTRAINTS, N_COMPONENTS
from ._stream import fit_source, source_variance

__all__ = ["RandomFourierFeatures", "spectral_sample"]

_VARIANTS = ("cossin", "phase")


def _not_stationary(kernel: Kernel, owner: str) -> ValueError:
    return ValueError(
        f"{owner} needs a stationary kernel (k(x, y) depends on x - y only: RBF, Laplacian, Matern, "
        f"RationalQuadratic, ExpSineSquared on one feature, "
        f"and positive scalings, sums and products of these); got {kernel!r}. For dot-product "
        "kernels use Nystroem, TensorSketch or PolynomialFeatureMap."
    )


def spectral_sample(kernel: Kernel, n_features: int, n_components: int, *, generator: torch.Generator,
                    dtype=torch.float64, device="cpu", owner: str = "RandomFourierFeatures"):
    """Draw ``(n_features, n_components)`` frequencies of ``kernel``'s spectral measure.

    Returns ``(W, k0)`` where ``k0 = k(x, x)`` is the total mass of the measure, so that
    ``k(x, y) = k0 * E[cos(w^T (x - y))]``. Raises ``ValueError`` for a non-stationary kernel.
    """
    if isinstance(kernel, Constant):
        return torch.zeros(n_features, n_components, dtype=dtype, device=device), float(kernel.value)
    if isinstance(kernel, Scaled):
        if isinstance(kernel.scale, torch.Tensor):
            scale = float(kernel.scale.detach())
        else:
            scale = float(kernel.scale)
        W, k0 = spectral_sample(kernel.kernel, n_features, n_components, generator=generator, dtype=dtype,
                                device=device, owner=owner)
        return W, k0 * scale
    cols = getattr(kernel, "columns", None)
    if cols is not None and isinstance(getattr(kernel, "kernel", None), Kernel):  # a kernel on some columns
        Wc, k0 = spectral_sample(kernel.kernel, len(cols), n_components, generator=generator, dtype=dtype,
                                 device=device, owner=owner)
        W = torch.zeros(n_features, n_components, dtype=dtype, device=device)
        W[torch.as_tensor(cols, device=device)] = Wc
        return W, k0
    if isinstance(kernel, Product):
        W = torch.zeros(n_features, n_components, dtype=dtype, device=device)
        k0 = 1.0
        for part in kernel.kernels:
            Wi, ki = spectral_sample(part, n_features, n_components, generator=generator, dtype=dtype,
                                     device=device, owner=owner)
            W += Wi
            k0 *= ki
        return W, k0
    if isinstance(kernel, Sum):
        masses = [_mass(part, owner, n_features) for part in kernel.kernels]
        total = sum(masses)
        probs = torch.tensor(masses, dtype=torch.float64) / total
        which = torch.multinomial(probs, n_components, replacement=True,
                                  generator=_cpu_generator(generator))
        W = torch.empty(n_features, n_components, dtype=dtype, device=device)
        for i, part in enumerate(kernel.kernels):
            cols = (which == i).nonzero().flatten().to(device)
            if cols.numel():
                Wi, _ = spectral_sample(part, n_features, cols.numel(), generator=generator, dtype=dtype,
                                        device=device, owner=owner)
                W[:, cols] = Wi
        return W, total
    if not kernel.is_stationary or not hasattr(kernel, "sample_frequencies"):
        raise _not_stationary(kernel, owner)
    # drawn where the generator lives (the CPU for mercer's own): the same frequencies on any device
    return kernel.sample_frequencies(n_features, n_components, generator=generator, dtype=dtype,
                                     device=generator.device).to(device), 1.0


def _mass(kernel: Kernel, owner: str, n_features: int) -> float:
    """k(x, x) of a stationary kernel (the same for every x with ``n_features`` features)."""
    if isinstance(kernel, Constant):
        return float(kernel.value)
    if isinstance(kernel, Scaled):
        return float(kernel.scale) * _mass(kernel.kernel, owner, n_features)
    if isinstance(kernel, Product):
        return math.prod(_mass(k, owner, n_features) for k in kernel.kernels)
    if isinstance(kernel, Sum):
        return sum(_mass(k, owner, n_features) for k in kernel.kernels)
    cols = getattr(kernel, "columns", None)
    if cols is not None and isinstance(getattr(kernel, "kernel", None), Kernel):
        return _mass(kernel.kernel, owner, len(cols))
    if not kernel.is_stationary:
        raise _not_stationary(kernel, owner)
    return float(kernel.diag(torch.zeros(1, n_features, dtype=torch.float64))[0])


def _cpu_generator(generator: torch.Generator) -> torch.Generator:
    if generator.device.type == "cpu":
        return generator
    g = torch.Generator()
    g.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device)))
    return g


def _isotropic(kernel: Kernel) -> bool:
    if isinstance(kernel, Scaled):
        return _isotropic(kernel.kernel)
    return isinstance(kernel, (RBF, Matern)) and not kernel.is_ard  # per-feature scales: not isotropic


def _orthogonalise(W: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Orthogonal random features (Yu et al. 2016): keep the column norms of ``W`` (the radial
    law of an isotropic density) and replace the directions by blocks of orthonormal vectors."""
    d, m = W.shape
    norms = torch.linalg.vector_norm(W, dim=0)
    out = torch.empty_like(W)
    # blocks of d frequencies, one d x d orthogonal matrix each (the block size is the maths', not memory's)
    for cols in row_blocks(m, d, desc="orthogonal frequencies"):
        G = torch.randn(d, d, generator=generator, dtype=W.dtype, device=generator.device).to(W.device)
        Q, R = torch.linalg.qr(G)
        Q = Q * torch.sign(torch.diagonal(R))[None, :]  # Haar-distributed
        out[:, cols] = Q[:, : cols.stop - cols.start]
    return out * norms[None, :]


def _scale_gamma(X, owner: str) -> float:
    """scikit-learn's ``gamma="scale"``: ``1 / (n_features * X.var())`` (1.0 when the variance is 0);
    an error naming ``gamma="scale"`` when that is not a positive finite float."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if isinstance(X, RowSource):  # streamed data: two passes over row blocks
            var = source_variance(X)
        elif hasattr(X, "tocsr"):
            var = float(X.multiply(X).mean() - X.mean() ** 2)
        elif isinstance(X, torch.Tensor):
            Xd = X.to_dense() if X.is_sparse else X
            var = float(Xd.double().var(unbiased=False))
        else:
            var = float(np.asarray(X, dtype=np.float64).var())
        if var == 0:
            return 1.0
        value = float(1.0 / (np.float64(X.shape[1]) * np.float64(var)))
    if not (math.isfinite(var) and 0 < value < math.inf):
        raise ValueError(f"{owner}: gamma='scale' is 1 / (n_features * X.var()), and X.var() = {var:.3g} on this data "
                         f"gives gamma = {value:.3g}, not a positive finite float; rescale X (e.g. with "
                         "StandardScaler) or give gamma explicitly.")
    return value


class RandomFourierFeatures(TransformerMixin, StreamedMethodsMixin, BaseEstimator):
    """Random Fourier features of a stationary kernel: ``z(x)^T z(y) ~ k(x, y)``.

    Parameters
    ----------
    kernel : str or Kernel, default="rbf"
        Any stationary mercer kernel: ``"rbf"``, ``"laplacian"``, ``"matern"``, or a composite
        such as ``0.5 * RBF(gamma=1) + Matern(nu=1.5) * RBF(gamma=0.1)``.
    n_components : int, default=100
        Number of random frequencies m. The output has 2m columns (``variant="cossin"``) or m
        (``variant="phase"``); ``n_features_out_`` says which.
    variant : {"cossin", "phase"}, default="cossin"
    orthogonal : bool, default=False
        Orthogonal random features (lower variance); RBF and Matérn kernels only (isotropic).
    gamma : float, "scale" or None, default=None
        For a string ``kernel``, as in :class:`mercer.KernelRidge` (None: the kernel's default).
        "scale" is scikit-learn's ``RBFSampler(gamma="scale")``: ``1 / (n_features * X.var())``
        from the data given to ``fit`` (1.0 when ``X.var()`` is 0).
    kernel_params : dict, optional
        For a string ``kernel``.
    random_state : int, RandomState or None
    device, dtype : optional
        Where and in which precision to compute (numpy in -> numpy out; torch in -> torch out).

    Attributes
    ----------
    _gamma : float or None
        scikit-learn RBFSampler's private attribute, which its tests read: the numeric ``gamma``
        (``"scale"`` resolved on the data; None when the kernel's default applies).
    frequencies_ : tensor of shape (n_features_in_, n_components)
    offsets_ : tensor of shape (n_components,) or None
        The random phases (``variant="phase"``).
    amplitude_ : float
        ``k(x, x)``; the features are scaled by ``sqrt(amplitude_ / m)``.
    random_weights_, random_offset_ : ndarray
        The same map in scikit-learn's ``RBFSampler`` parametrisation (read-only properties).
    n_features_out_ : int
    kernel_ : Kernel
    """

    _parameter_constraints: dict = {
        "kernel": KERNEL_CONSTRAINTS["kernel"],
        "gamma": [Options("scale"), *KERNEL_CONSTRAINTS["gamma"]],
        "kernel_params": KERNEL_CONSTRAINTS["kernel_params"],
        "device": COMPUTE_CONSTRAINTS["device"],
        "dtype": COMPUTE_CONSTRAINTS["dtype"],
        "n_components": N_COMPONENTS,
        "variant": [Options(*_VARIANTS)],
        "orthogonal": ["boolean"],
        "random_state": ["random_state"],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # densified block by block
        return tags

    def __init__(self, kernel="rbf", n_components=100, *, variant="cossin", orthogonal=False, gamma=None,
                 kernel_params=None, random_state=None, device=None, dtype=None):
        self.kernel = kernel
        self.n_components = n_components
        self.variant = variant
        self.orthogonal = orthogonal
        self.gamma = gamma
        self.kernel_params = kernel_params
        self.random_state = random_state
        self.device = device
        self.dtype = dtype

    def fit(self, X, y=None):
        """Draw the frequencies for ``X``'s number of features (only ``X.shape[1]`` is used, and
        ``X.var()`` for ``gamma="scale"``). Streamed ``X`` (:mod:`mercer.sources`) is not read,
        except for ``gamma="scale"`` (two passes over row blocks)."""
        check_params(self)
        owner = type(self).__name__
        Xv = fit_source(self, X)
        if Xv is None:
            Xv = check_array_like(self, X, reset=True, accept_sparse=True)
        gamma = _scale_gamma(Xv, owner) if isinstance(self.gamma, str) else self.gamma
        kernel = resolve_kernel(self.kernel, gamma=gamma, kernel_params=self.kernel_params, owner=owner)
        if not kernel.is_stationary:
            raise _not_stationary(kernel, owner)
        if self.orthogonal and not _isotropic(kernel):
            raise ValueError(f"{owner}(orthogonal=True) needs an isotropic kernel (RBF or Matern with one "
                             f"scalar scale, possibly scaled); got {kernel!r}. Use orthogonal=False.")
        device = resolve_device(self.device if not isinstance(Xv, torch.Tensor) else (self.device or Xv.device))
        dtype = resolve_dtype(self.dtype, Xv)
        gen = make_generator(self.random_state)  # CPU draws: the same features on every device
        d, m = Xv.shape[1], int(self.n_components)
        need, budget = 2 * d * m * 8, default_memory_budget(device)  # the float64 draws and their copy
        if need > budget:
            raise MemoryBudgetError(f"{owner}: n_components={m} frequencies of {d} features need about "
                                    f"{format_bytes(need)}, more than the memory budget of {format_bytes(budget)}; "
                                    "lower n_components.")
        W, k0 = spectral_sample(kernel, d, m, generator=gen, dtype=torch.float64, device=device, owner=owner)
        if self.orthogonal:
            W = _orthogonalise(W, gen)
        self.kernel_ = kernel
        self._gamma = gamma  # scikit-learn RBFSampler's private attribute: the numeric gamma ("scale" resolved)
        self.frequencies_ = W.to(dtype)
        self.offsets_ = None
        if self.variant == "phase":
            b = torch.rand(m, generator=gen, dtype=torch.float64).to(device) * (2 * math.pi)
            self.offsets_ = b.to(dtype)
        self.amplitude_ = float(k0)
        self.n_features_out_ = 2 * m if self.variant == "cossin" else m
        return self

    def _features(self, Xt: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Features of a tensor already on the right device and dtype (used by the solvers)."""
        W = self.frequencies_.to(device=Xt.device, dtype=Xt.dtype)
        P = Xt @ W
        m = W.shape[1]
        if self.variant == "phase":
            P += self.offsets_.to(device=Xt.device, dtype=Xt.dtype)
            return P.cos_().mul_(math.sqrt(2.0 * self.amplitude_ / m))
        if out is None:
            out = torch.empty(Xt.shape[0], 2 * m, dtype=Xt.dtype, device=Xt.device)
        torch.cos(P, out=out[:, :m])
        torch.sin(P, out=out[:, m:])
        return out.mul_(math.sqrt(self.amplitude_ / m))

    def transform(self, X):
        check_is_fitted(self)
        Xv = check_array_like(self, X, reset=False, accept_sparse=True)
        dev = self.frequencies_.device if not isinstance(Xv, torch.Tensor) else Xv.device
        Xt = to_tensor(Xv, dtype=self.frequencies_.dtype, device=dev)
        return as_output(self._features(Xt), X)

    @property
    def random_weights_(self) -> np.ndarray:
        """The frequencies in scikit-learn's ``RBFSampler`` form (numpy, shape ``(n_features_in_,
        n_features_out_)``): ``transform(X) = sqrt(2 amplitude_ / D) cos(X random_weights_ +
        random_offset_)`` with ``D = n_features_out_``. For ``variant="cossin"`` each frequency
        appears twice, once with offset 0 (the cosine) and once with offset -pi/2 (the sine)."""
        check_is_fitted(self)
        W = to_numpy(self.frequencies_)
        return W if self.variant == "phase" else np.hstack([W, W])

    @property
    def random_offset_(self) -> np.ndarray:
        """The phases in scikit-learn's ``RBFSampler`` form (numpy, shape ``(n_features_out_,)``);
        see :attr:`random_weights_`."""
        check_is_fitted(self)
        if self.variant == "phase":
            return to_numpy(self.offsets_)
        m = self.frequencies_.shape[1]
        dtype = to_numpy(self.frequencies_[:0]).dtype
        return np.concatenate([np.zeros(m, dtype=dtype), np.full(m, -math.pi / 2, dtype=dtype)])

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self)
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(self.n_features_out_)], dtype=object)
