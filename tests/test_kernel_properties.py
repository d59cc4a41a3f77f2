"""Property-based tests (hypothesis) of every kernel and of composites built from them.

Kernels are drawn from every class of :mod:`mercer.kernels` that is built from parameters, and
combined with ``+``, ``*``, scalar ``*``, ``+ c`` and :class:`~mercer.kernels.Columns` up to depth 3;
inputs are random ``(n, d)`` float64 arrays (n 1-30, d 1-6, values in [-3, 3] rounded to 3
decimals, some rows duplicated), non-negative for histogram kernels and 0/1 for set kernels. The
properties are the contract every kernel states: a symmetric Gram matrix, PSD within rounding for
PSD kernels, ``k(X) == k(X, X)``, ``k.diag(X) == diag(k(X))``, blocked evaluation equal to dense,
the algebra of ``+ * c*``, the scikit-learn parameter protocol, float32, torch versus numpy, and
autograd gradients of tensor hyperparameters against finite differences.

A kernel is described by a *spec*, a small tree of tuples that hypothesis prints when a property
fails: ``("leaf", name, params)``, ``("+", a, b)``, ``("*", a, b)``, ``("c*", c, a)``,
``("+c", a, c)``, ``("cols", columns, a)``; :func:`build` turns it into a kernel, with any of its
continuous parameters replaced (by tensors for gradients, by shifted values for finite differences).

Per-feature scales (ARD vectors of RBF, Laplacian, Matern) are drawn too, their gradients per entry
included. The hyperparameters a class declares learnable (``Param(..., learn=...)``, what the GP and
KernelRidgeCV learn through :class:`~mercer.kernels.LearnableKernel`) must all have a gradient case
here (:func:`test_every_learned_hyperparameter_has_a_gradient_case`), so a new kernel is one class
plus these shared tests.

Tolerances are relative to the scale of the entries (:func:`entry_scale`): the largest entry of
each leaf on the inputs (its diagonal included), added over sums and multiplied over products, so
cancellation in a composite does not make a rounding error look large. Every test runs a fixed
set of examples (``derandomize=True``), so a failure reproduces in CI.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.metrics.pairwise import rbf_kernel

from mercer import kernels as mk
from mercer.kernels import (
    RBF,
    AdditiveChi2,
    Chi2,
    Columns,
    Constant,
    Cosine,
    ExpSineSquared,
    FunctionKernel,
    HistogramIntersection,
    Intersection,
    Kernel,
    Laplacian,
    Linear,
    Matern,
    Polynomial,
    Precomputed,
    Product,
    Quadratic,
    RationalQuadratic,
    Scaled,
    Sigmoid,
    Sum,
    White,
)
from mercer.linalg import KernelOperator

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402

#: A fixed set of examples per test (reproducible in CI), no example database written to disk.
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: Gradient tests: fewer examples, and no shrinking: their xfail cases fail on every example and
#: shrinking them costs seconds; a failure reports the first example found (at most 12 rows).
FEW = settings(SETTINGS, max_examples=15, phases=[Phase.explicit, Phase.generate])

#: float64 results of two evaluation routes (GEMM expansion of distances, tiles, flattened sums)
#: agree to this, relative to the entries' scale; float32 keeps about three digits through the
#: expansion of squared distances (cancellation of |x|^2 + |y|^2 - 2 <x, y>).
RTOL64 = 1e-10
RTOL32 = 2e-3
#: Autograd against finite differences (a five-point central stencil, step 1e-4 of the value).
GRAD_RTOL = 1e-5
GRAD_FLOOR = 1e-8  # of n * m * scale per unit of the parameter: the rounding floor of the stencil

# -- kernels drawn --------------------------------------------------------------------------------
def _rounded(lo: float, hi: float):
    return st.floats(lo, hi).map(lambda v: round(v, 3))


def _gamma(lo: float, hi: float):
    return st.none() | _rounded(lo, hi)


def _rbf_block(X1, X2, gamma=1.0):
    """A known function for FunctionKernel: the RBF block from exact differences."""
    D = torch.cdist(X1, X2, compute_mode="donot_use_mm_for_euclid_dist")
    return torch.exp(-gamma * D**2)


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One kernel class as drawn: its parameters' strategies, the inputs it accepts ("real",
    "nonneg" or "binary"), whether it is PSD, and the continuous parameters (with the range
    their gradient is checked on) that may be given as tensors."""

    cls: type
    params: dict | Callable  # parameter -> strategy, or n_features -> that (per-feature parameters)
    domain: str = "real"
    psd: bool = True
    psd_1d_only: bool = False
    grad: dict = dataclasses.field(default_factory=dict)
    make: Callable | None = None  # builds the kernel from the params (default: cls(**params))

    def strategies(self, d: int) -> dict:
        return self.params(d) if callable(self.params) else self.params

    def build(self, params: dict) -> Kernel:
        return (self.make or self.cls)(**params)

    def allowed(self, d: int, domain: str, psd: bool) -> bool:
        fits = {"real": ("real",), "nonneg": ("real", "nonneg"), "binary": ("real", "nonneg", "binary")}
        if self.domain not in fits[domain]:
            return False
        return not psd or (self.psd and (d == 1 or not self.psd_1d_only))


LEAVES = {
    "RBF": Leaf(RBF, {"gamma": _gamma(0.05, 2.0)}, grad={"gamma": (0.05, 2.0)}),
    "RBF(sigma)": Leaf(RBF, {"sigma": _rounded(0.5, 3.0)}, grad={"sigma": (0.5, 3.0)}),
    "Laplacian": Leaf(Laplacian, {"gamma": _gamma(0.05, 2.0)}, grad={"gamma": (0.05, 2.0)}),
    **{f"Matern(nu={nu})": Leaf(Matern, {"nu": st.just(nu), "length_scale": _rounded(0.3, 3.0)},
                                grad={"length_scale": (0.3, 3.0)}) for nu in (0.5, 1.5, 2.5)},
    "Linear": Leaf(Linear, {}),
    "Polynomial": Leaf(Polynomial, {"degree": st.integers(1, 4), "gamma": _gamma(0.1, 1.0),
                                    "coef0": _rounded(0.0, 2.0)},
                       grad={"gamma": (0.1, 1.0), "coef0": (0.1, 2.0)}),
    "Quadratic": Leaf(Quadratic, {"gamma": _gamma(0.1, 1.0), "coef0": _rounded(0.0, 2.0)},
                      grad={"gamma": (0.1, 1.0), "coef0": (0.1, 2.0)}),
    "Sigmoid": Leaf(Sigmoid, {"gamma": _gamma(0.05, 1.0), "coef0": _rounded(-1.0, 1.0)}, psd=False,
                    grad={"gamma": (0.05, 1.0), "coef0": (-1.0, 1.0)}),
    "Constant": Leaf(Constant, {"value": _rounded(0.0, 3.0)}, grad={"value": (0.1, 3.0)}),
    "Intersection": Leaf(Intersection, {}, domain="binary"),
    "HistogramIntersection": Leaf(HistogramIntersection, {}, domain="nonneg"),
    "Chi2": Leaf(Chi2, {"gamma": _rounded(0.1, 2.0)}, domain="nonneg", grad={"gamma": (0.1, 2.0)}),
    "AdditiveChi2": Leaf(AdditiveChi2, {}, domain="nonneg", psd=False),
    "Cosine": Leaf(Cosine, {}),
    "RationalQuadratic": Leaf(RationalQuadratic, {"length_scale": _rounded(0.3, 3.0), "alpha": _rounded(0.2, 3.0)},
                              grad={"length_scale": (0.3, 3.0), "alpha": (0.2, 3.0)}),
    "ExpSineSquared": Leaf(ExpSineSquared, {"length_scale": _rounded(0.5, 3.0), "periodicity": _rounded(0.5, 4.0)},
                           psd_1d_only=True, grad={"length_scale": (0.5, 3.0), "periodicity": (0.5, 4.0)}),
    "White": Leaf(White, {"noise_level": _rounded(0.1, 2.0)}, grad={"noise_level": (0.1, 2.0)}),
    "FunctionKernel": Leaf(FunctionKernel, {"gamma": _rounded(0.1, 2.0)}, grad={"gamma": (0.1, 2.0)},
                           make=lambda gamma: FunctionKernel(_rbf_block, {"gamma": gamma}, diagonal=1.0)),
    "FunctionKernel(numpy)": Leaf(FunctionKernel, {"gamma": _rounded(0.1, 2.0)},
                                  make=lambda gamma: FunctionKernel(rbf_kernel, {"gamma": gamma}, numpy=True)),
}


def _supports_ard() -> bool:
    """Per-feature scales (ARD vectors) come in a later step: drawn once they exist."""
    try:
        RBF(gamma=[1.0, 2.0])
    except (TypeError, ValueError):
        return False
    return True


def _per_feature(lo: float, hi: float):
    return lambda d: st.lists(_rounded(lo, hi), min_size=d, max_size=d)


if _supports_ard():
    LEAVES.update({
        "RBF(ARD)": Leaf(RBF, lambda d: {"gamma": _per_feature(0.05, 2.0)(d)}),
        "RBF(ARD sigma)": Leaf(RBF, lambda d: {"sigma": _per_feature(0.5, 3.0)(d)}),
        "Laplacian(ARD)": Leaf(Laplacian, lambda d: {"gamma": _per_feature(0.05, 2.0)(d)}),
        **{f"Matern(ARD, nu={nu})": Leaf(Matern, lambda d, nu=nu: {"nu": st.just(nu),
                                                                    "length_scale": _per_feature(0.3, 3.0)(d)})
           for nu in (0.5, 1.5, 2.5)},
    })
#: Classes drawn only as the structure of composites, and classes not drawn (with why).
STRUCTURAL = {Kernel, Sum, Product, Scaled, Columns}
NOT_DRAWN = {Precomputed: "its inputs are rows of a Gram matrix and it cannot be combined"}
SCALE = _rounded(0.1, 5.0)
CONST = _rounded(0.0, 3.0)


def _leaf_specs(d: int, domain: str, psd: bool):
    names = [name for name, leaf in LEAVES.items() if leaf.allowed(d, domain, psd)]
    return st.sampled_from(names).flatmap(
        lambda name: st.fixed_dictionaries(LEAVES[name].strategies(d)).map(lambda p: ("leaf", name, p)))


@lru_cache(maxsize=None)
def specs(d: int, domain: str, psd: bool, depth: int):
    """Kernel specs on ``d`` features of ``domain``, PSD ones only with ``psd``, of depth <= ``depth``."""
    leaf = _leaf_specs(d, domain, psd)
    if depth == 0:
        return leaf
    sub = specs(d, domain, psd, depth - 1)
    columns = st.lists(st.integers(0, d - 1), min_size=1, max_size=d, unique=True)
    return st.one_of(
        leaf,
        st.tuples(st.just("+"), sub, sub),
        st.tuples(st.just("*"), sub, sub),
        st.tuples(st.just("c*"), SCALE, sub),
        st.tuples(st.just("+c"), sub, CONST),
        columns.flatmap(lambda c: specs(len(c), domain, psd, depth - 1).map(lambda s: ("cols", tuple(c), s))),
    )


def build(spec, subst: Callable | None = None) -> Kernel:
    """The kernel of ``spec``. ``subst(i, owner, name, value)`` may replace its ``i``-th continuous
    parameter (a leaf's parameter within its gradient range, or a scale), in traversal order;
    ``owner`` is the leaf's name in :data:`LEAVES`, or "Scaled"."""
    counter = itertools.count()

    def slot(owner, name, value, lo_hi):
        if subst is None or value is None or not lo_hi[0] <= value <= lo_hi[1]:
            return value
        return subst(next(counter), owner, name, value)

    def go(s):
        tag = s[0]
        if tag == "leaf":
            leaf = LEAVES[s[1]]
            params = {k: slot(s[1], k, v, leaf.grad[k]) if k in leaf.grad else v for k, v in s[2].items()}
            return leaf.build(params)
        if tag == "+":
            return go(s[1]) + go(s[2])
        if tag == "*":
            return go(s[1]) * go(s[2])
        if tag == "c*":
            c = slot("Scaled", "scale", s[1], (0.1, 5.0))
            inner = go(s[2])
            return c * inner if isinstance(c, float) else Scaled(c, inner)
        if tag == "+c":
            return go(s[1]) + s[2]
        return Columns(go(s[2]), list(s[1]))  # "cols"

    return go(spec)


# -- inputs drawn ---------------------------------------------------------------------------------
def _values(domain: str):
    if domain == "binary":
        return st.sampled_from([0.0, 1.0])
    return st.floats(0.0 if domain == "nonneg" else -3.0, 3.0).map(lambda v: round(v, 3))


@st.composite
def inputs(draw, d: int, domain: str, max_rows: int = 30):
    """An ``(n, d)`` read-only float64 array, some rows copies of others."""
    n = draw(st.integers(1, max_rows))
    X = draw(arrays(np.float64, (n, d), elements=_values(domain)))
    for dst, src in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3)):
        X[dst] = X[src]
    X.flags.writeable = False
    return X


@dataclasses.dataclass
class Problem:
    spec: tuple
    X: np.ndarray
    Y: np.ndarray


@st.composite
def problems(draw, *, psd: bool = False, depth: int = 3, max_rows: int = 30, n_specs: int = 1):
    """A kernel spec (``n_specs`` of them: a list) and two inputs ``X``, ``Y`` it accepts."""
    d = draw(st.integers(1, 6))
    domain = draw(st.sampled_from(["real", "real", "nonneg", "binary"]))
    kernel_specs = [draw(specs(d, domain, psd, depth)) for _ in range(n_specs)]
    X = draw(inputs(d, domain, max_rows))
    Y = draw(inputs(d, domain, max_rows))
    return Problem(kernel_specs[0] if n_specs == 1 else kernel_specs, X, Y)


# -- helpers --------------------------------------------------------------------------------------
def entry_scale(k: Kernel, X, Y) -> float:
    """Scale of the entries of ``k(X, Y)``: a leaf's largest entry on ``X`` and ``Y`` together
    (diagonal included), summed over the parts of a sum, multiplied over a product."""
    if isinstance(k, Sum):
        return sum(entry_scale(p, X, Y) for p in k.kernels)
    if isinstance(k, Product):
        return math.prod(entry_scale(p, X, Y) for p in k.kernels)
    if isinstance(k, Scaled):
        return abs(float(k.scale)) * entry_scale(k.kernel, X, Y)
    if isinstance(k, Columns):
        cols = list(k.columns)
        return entry_scale(k.kernel, np.asarray(X)[:, cols], np.asarray(Y)[:, cols])
    Z = np.concatenate([np.asarray(X), np.asarray(Y)])
    with torch.no_grad():
        return float(k(Z).abs().max())


def assert_close(got, want, scale: float, rtol: float, what: str) -> None:
    got, want = torch.as_tensor(got).detach().double(), torch.as_tensor(want).detach().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = float((got - want).abs().max()) if got.numel() else 0.0
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol:g} * scale {scale:.3g}"


def _tiny_budget(k: Kernel, n: int, m: int, d: int, side: int) -> int:
    """A budget that holds the ``(n, m)`` output and about one ``side x side`` tile more."""
    tile = side * side * (1.0 + k.scratch(d)) + 2 * side * (d + 1) + 4 * side
    return n * m * 8 + math.ceil(tile * 8)


# -- the properties (each a check on one kernel and two inputs) -----------------------------------
def check_gram(k: Kernel, X) -> None:
    """``k(X)`` is symmetric, equals ``k(X, X)``, and its diagonal is ``k.diag(X)``."""
    K = k(X)
    n = X.shape[0]
    assert K.shape == (n, n) and K.dtype == torch.float64
    scale = entry_scale(k, X, X)
    assert_close(K, K.T, scale, RTOL64, f"{k!r}: K - K.T")
    assert torch.equal(k(X, X), K), f"{k!r}: k(X, X) != k(X)"
    assert_close(k.diag(X), torch.diagonal(K), scale, RTOL64, f"{k!r}: diag(X) - diag(K)")


def check_psd(k: Kernel, X) -> None:
    """The smallest eigenvalue of ``k(X)`` is >= -1e-8 n max|K|."""
    K = k(X)
    smallest = float(torch.linalg.eigvalsh(K).min())
    assert smallest >= -1e-8 * K.shape[0] * float(K.abs().max()), f"{k!r}: smallest eigenvalue {smallest:.3g}"


def check_blocked(k: Kernel, X, Y, side: int) -> None:
    """``KernelOperator(k, ..., memory_budget=tiny).dense()`` (tiles of about ``side`` rows) is ``k(...)``."""
    T, U = torch.tensor(X), torch.tensor(Y)
    (n, d), m = T.shape, U.shape[0]
    square = KernelOperator(k, T, memory_budget=_tiny_budget(k, n, n, d, side)).dense()
    assert_close(square, k(T), entry_scale(k, X, X), RTOL64, f"{k!r}: blocked k(X)")
    rect = KernelOperator(k, T, U, memory_budget=_tiny_budget(k, n, m, d, side)).dense()
    assert_close(rect, k(T, U), entry_scale(k, X, Y), RTOL64, f"{k!r}: blocked k(X, Y)")


def check_params(spec, X, Y) -> None:
    """``clone(k)`` and ``k.set_params(**k.get_params(deep))`` give an equal kernel, same blocks."""
    k = build(spec)
    K, K_xx = k(X, Y), k(X)
    twin = clone(k)
    assert twin is not k and twin == k
    assert torch.equal(twin(X, Y), K) and torch.equal(twin(X), K_xx)
    for deep in (False, True):
        same = build(spec)
        assert same.set_params(**same.get_params(deep=deep)) is same
        assert same == k, f"set_params(**get_params(deep={deep})) changed {k!r} into {same!r}"
        assert torch.equal(same(X, Y), K) and torch.equal(same(X), K_xx)


def check_float32(k: Kernel, X, Y) -> None:
    """float32 inputs give float32 blocks close to the float64 ones."""
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    for args, args32 in (((X, Y), (X32, Y32)), ((X,), (X32,))):
        K32 = k(*args32)
        assert K32.dtype == torch.float32
        assert_close(K32, k(*args), entry_scale(k, args[0], args[-1]), RTOL32, f"{k!r}: float32")
    assert k.diag(X32).dtype == torch.float32


def check_containers(k: Kernel, X, Y) -> None:
    """A tensor and the same numpy array give the same block (bit for bit), mixed ones too."""
    T, U = torch.tensor(X), torch.tensor(Y)
    K = k(X, Y)
    assert torch.equal(k(T, U), K) and torch.equal(k(X, U), K) and torch.equal(k(T, Y), K)
    assert torch.equal(k(T), k(X))
    assert torch.equal(k.diag(T), k.diag(X))


# -- every kernel class alone, then random composites ---------------------------------------------
@pytest.mark.parametrize("name", list(LEAVES))
@settings(SETTINGS, max_examples=10)
@given(data=st.data())
def test_each_kernel(name, data):
    """Every property, for each kernel class alone (so that none is left to chance)."""
    leaf = LEAVES[name]
    d = data.draw(st.integers(1, 6))
    spec = ("leaf", name, data.draw(st.fixed_dictionaries(leaf.strategies(d))))
    X, Y = data.draw(inputs(d, leaf.domain)), data.draw(inputs(d, leaf.domain))
    k = build(spec)
    check_gram(k, X)
    if leaf.psd:  # ExpSineSquared is PSD on one feature only: its first column then
        check_psd(k, np.ascontiguousarray(X[:, :1]) if leaf.psd_1d_only else X)
    check_blocked(k, X, Y, data.draw(st.integers(1, 4)))
    check_params(spec, X, Y)
    check_float32(k, X, Y)
    check_containers(k, X, Y)


@SETTINGS
@given(problems())
def test_gram_symmetric_self_and_diagonal(p):
    check_gram(build(p.spec), p.X)


@SETTINGS
@given(problems(psd=True))
def test_gram_psd(p):
    check_psd(build(p.spec), p.X)


@SETTINGS
@given(problems(), st.integers(1, 4))
def test_blocked_equals_dense(p, side):
    check_blocked(build(p.spec), p.X, p.Y, side)


@SETTINGS
@given(problems(depth=2, n_specs=3), SCALE, CONST)
def test_algebra(p, c, c0):
    k1, k2, k3 = map(build, p.spec)
    for X, Y in ((p.X, p.Y), (p.X, p.X)):
        A, B, C = k1(X, Y), k2(X, Y), k3(X, Y)
        s1, s2, s3 = (entry_scale(k, X, Y) for k in (k1, k2, k3))
        assert_close((k1 + k2)(X, Y), A + B, s1 + s2, RTOL64, "(k1 + k2)")
        assert_close((k1 * k2)(X, Y), A * B, s1 * s2, RTOL64, "(k1 * k2)")
        assert_close((c * k1)(X, Y), c * A, c * s1, RTOL64, "(c * k1)")
        assert_close((k1 * c)(X, Y), c * A, c * s1, RTOL64, "(k1 * c)")
        assert_close((k1 + c0)(X, Y), A + c0, s1 + c0, RTOL64, "(k1 + c)")
        total = sum([k1, k2, k3])
        assert isinstance(total, Sum) and len(total.kernels) >= 3
        assert_close(total(X, Y), A + B + C, s1 + s2 + s3, RTOL64, "sum([k1, k2, k3])")


@SETTINGS
@given(problems())
def test_clone_and_set_params(p):
    check_params(p.spec, p.X, p.Y)


@SETTINGS
@given(problems())
def test_float32_close_to_float64(p):
    check_float32(build(p.spec), p.X, p.Y)


@SETTINGS
@given(problems())
def test_tensor_and_numpy_give_the_same_block(p):
    check_containers(build(p.spec), p.X, p.Y)


# -- gradients of tensor hyperparameters ----------------------------------------------------------
def _tensor(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64, requires_grad=True)


def _check_gradients(spec, X, Y, chosen: Callable) -> int:
    """Autograd of ``sum(k(X, Y))`` against five-point central differences for every continuous
    parameter of ``spec`` that ``chosen(owner, name)`` selects; returns how many were checked."""
    thetas: dict[int, tuple[torch.Tensor, float]] = {}

    def as_tensor(i, owner, name, value):
        if not chosen(owner, name):
            return value
        thetas[i] = (_tensor(value), value)
        return thetas[i][0]

    k = build(spec, as_tensor)
    K = k(X, Y)
    k0 = build(spec)
    entries = entry_scale(k0, X, Y)
    assert_close(K, k0(X, Y), entries, RTOL64, f"{k!r}: tensor hyperparameters change the block")
    scale = X.shape[0] * Y.shape[0] * entries  # of sum(k(X, Y))
    if not thetas:
        return 0
    total = K.sum()
    tensors = [t for t, _ in thetas.values()]
    grads = torch.autograd.grad(total, tensors, allow_unused=True) if total.requires_grad else [None] * len(tensors)
    for (i, (_, value)), g in zip(thetas.items(), grads):
        h = 1e-4 * max(abs(value), 1.0)

        def f(delta, i=i):
            return float(build(spec, lambda j, _o, _n, v: v + delta if j == i else v)(X, Y).sum())

        fd = (f(-2 * h) - 8 * f(-h) + 8 * f(h) - f(2 * h)) / (12 * h)
        got = 0.0 if g is None else float(g)
        tol = GRAD_RTOL * abs(fd) + GRAD_FLOOR * scale / max(abs(value), 1.0)
        assert abs(got - fd) <= tol, f"{k!r}: d/d(parameter {i}) autograd {got:.10g} vs finite differences {fd:.10g}"
    return len(thetas)


def _grad_cases():
    cases = []
    for name, leaf in LEAVES.items():
        for param in leaf.grad:
            cases.append(pytest.param(name, param, id=f"{name}-{param}"))
    cases.append(pytest.param("Scaled", "scale", id="Scaled-scale"))
    return cases


@pytest.mark.parametrize(("name", "param"), _grad_cases())
@FEW
@given(data=st.data())
def test_hyperparameter_gradient(name, param, data):
    """``torch.autograd.grad(k(X, Y).sum(), theta)`` for a 0-d float64 tensor ``theta``."""
    d = data.draw(st.integers(1, 4))
    if name == "Scaled":  # the scale of c * k for a leaf k with float parameters
        inner = data.draw(_leaf_specs(d, "real", False))
        spec, domain = ("c*", data.draw(SCALE), inner), "real"
    else:
        leaf = LEAVES[name]
        params = data.draw(st.fixed_dictionaries({**leaf.strategies(d), param: _rounded(*leaf.grad[param])}))
        spec, domain = ("leaf", name, params), leaf.domain
    X = data.draw(inputs(d, domain, 12))
    same = data.draw(st.booleans())  # k(X) too: White's noise is only there
    Y = X if same else data.draw(inputs(d, domain, 12))
    checked = _check_gradients(spec, X, Y, lambda owner, n: (owner, n) == (name, param))
    assert checked == 1


@FEW
@given(problems(depth=2, max_rows=12))
def test_composite_gradients(p):
    """Every tensor hyperparameter of a random composite, at once."""
    _check_gradients(p.spec, p.X, p.Y, lambda owner, _n: True)


@pytest.mark.parametrize("make", [
    pytest.param(lambda t: Linear() + RBF(gamma=t), id="Linear+RBF(t)"),
    pytest.param(lambda t: Linear() * Matern(length_scale=t), id="Linear*Matern(t)"),
    pytest.param(lambda t: Scaled(t, RBF(gamma=0.5)) + Linear(), id="Scaled(t,RBF)+Linear"),
    pytest.param(lambda t: RBF(gamma=t) + Linear(), id="RBF(t)+Linear"),
    pytest.param(lambda t: RBF(gamma=t) * Linear(), id="RBF(t)*Linear"),
    pytest.param(lambda t: 2.0 * RBF(gamma=t), id="2*RBF(t)"),
    pytest.param(lambda t: Sigmoid(gamma=t) + Linear(), id="Sigmoid(t)+Linear"),
    pytest.param(lambda t: RationalQuadratic(alpha=t) + Linear(), id="RationalQuadratic(t)+Linear"),
])
def test_composite_gradient_cases(make):
    """The smallest composites whose first part's block the sum, product or scale used to write in
    place, which broke backpropagation through exp/tanh/pow: whichever part comes first."""
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(6, 2)), rng.normal(size=(5, 2))
    t = _tensor(0.7)
    (g,) = torch.autograd.grad(make(t)(X, Y).sum(), t)
    h = 1e-4

    def f(v):
        return float(make(v)(X, Y).sum())

    fd = (f(0.7 - 2 * h) - 8 * f(0.7 - h) + 8 * f(0.7 + h) - f(0.7 + 2 * h)) / (12 * h)
    assert float(g) == pytest.approx(fd, rel=GRAD_RTOL)


# -- user data and coverage -----------------------------------------------------------------------
@pytest.mark.parametrize("combine", [
    pytest.param(lambda k: 2.0 * k, id="scaled"),
    pytest.param(lambda k: k + Linear(), id="sum"),
    pytest.param(lambda k: k * RBF(gamma=0.5), id="product"),
])
def test_composites_leave_the_functions_block_alone(combine):
    """A FunctionKernel whose function returns a stored array: evaluating a composite must not
    write into it."""
    stored = np.arange(36, dtype=np.float64).reshape(6, 6)
    before = stored.copy()
    k = combine(FunctionKernel(lambda X1, X2: stored[: len(X1), : len(X2)]))
    k(np.ones((4, 2)), np.full((3, 2), 2.0))
    np.testing.assert_array_equal(stored, before)


def test_every_learned_hyperparameter_has_a_gradient_case():
    """What a class declares learnable (``learn=`` in its ``PARAMS``) is checked against finite differences above."""
    covered = {(leaf.cls, p) for leaf in LEAVES.values() for p in leaf.grad} | {(Scaled, "scale")}
    for name in mk.__all__:
        cls = getattr(mk, name)
        if isinstance(cls, type) and issubclass(cls, Kernel):
            learned = [p.name for p in cls.PARAMS if p.learn]
            missing = {p for p in learned if not any(issubclass(cls, c) and p == q for c, q in covered)}
            assert not missing, f"{cls.__name__}: learned hyperparameters without a gradient case: {missing}"


def test_per_feature_gradients():
    """Gradients of per-feature (ARD) scales given as 1-D tensors, entry by entry."""
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(8, 3)), rng.normal(size=(6, 3))
    for make, v in [(lambda t: RBF(gamma=t), [0.3, 1.0, 0.7]), (lambda t: Laplacian(gamma=t), [0.5, 0.2, 1.1]),
                    *[(lambda t, nu=nu: Matern(nu, length_scale=t), [0.8, 1.5, 2.0]) for nu in (0.5, 1.5, 2.5)]]:
        t = torch.tensor(v, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(make(t)(X, Y).sum(), t)
        for i in range(3):
            h = 1e-4 * np.eye(3)[i]

            def f(delta):
                return float(make(np.add(v, delta))(X, Y).sum())

            fd = (f(-2 * h) - 8 * f(-h) + 8 * f(h) - f(2 * h)) / (12 * 1e-4)
            assert float(g[i]) == pytest.approx(fd, rel=GRAD_RTOL, abs=1e-9)


@pytest.mark.parametrize("name", [n for n, leaf in LEAVES.items() if leaf.cls.differentiable_inputs])
@FEW
@given(data=st.data())
def test_input_gradients(name, data):
    """Kernels that declare ``differentiable_inputs`` (learnable inducing points, reduced-set and
    budget SVMs) give autograd gradients in both inputs equal to finite differences. Inputs are
    continuous random draws: no two rows tie (|x - y| and ||x - y|| are smooth away from ties)."""
    leaf = LEAVES[name]
    rng = np.random.default_rng(7)
    d = 3
    X = torch.tensor(rng.uniform(0.2, 2.0, size=(5, d)) if leaf.domain != "real" else rng.normal(size=(5, d)))
    Y = torch.tensor(rng.uniform(0.2, 2.0, size=(4, d)) if leaf.domain != "real" else rng.normal(size=(4, d)))
    k = leaf.build(data.draw(st.fixed_dictionaries(leaf.strategies(d))))
    W = torch.tensor(rng.normal(size=(5, 4)))  # a weighted sum: every entry matters
    for side in (0, 1):
        A = (X if side == 0 else Y).clone().requires_grad_(True)
        K = k(A, Y) if side == 0 else k(X, A)
        total = (K * W).sum()
        g = torch.autograd.grad(total, A)[0] if total.requires_grad else torch.zeros_like(A)  # Constant
        for i, j in [(0, 0), (1, 2), (3, 1)]:
            h = torch.zeros_like(A)
            h[i, j] = 1e-6
            f = [float(((k(A.detach() + e, Y) if side == 0 else k(X, A.detach() + e)) * W).sum()) for e in (h, -h)]
            assert float(g[i, j]) == pytest.approx((f[0] - f[1]) / 2e-6, rel=1e-5, abs=1e-8), (k, side, i, j)


def test_every_kernel_class_is_drawn():
    """A kernel class added to mercer.kernels is drawn here too (or said why not)."""
    classes = {obj for name in mk.__all__
               if isinstance(obj := getattr(mk, name), type) and issubclass(obj, Kernel)}
    drawn = {leaf.cls for leaf in LEAVES.values()} | STRUCTURAL | set(NOT_DRAWN)
    assert classes <= drawn, f"kernel classes not drawn: {sorted(c.__name__ for c in classes - drawn)}"
