"""Never dies on a user's data: Hypothesis fuzzing of every estimator of the registry.

Two families of cases, each per estimator of :data:`mercer.models._registry.ESTIMATORS` (its first
example's configuration):

* **parameters** -- one parameter of its ``_parameter_constraints`` table set to a value drawn from
  that table (every Options value, Interval boundaries and values inside, None, booleans, ...) or
  from a pool of values it must refuse (out of range, NaN, infinities, wrong types, unknown names);
* **inputs** -- X of 0-3 rows or of 8-14, of one to three features, with constant or duplicate
  columns and rows, NaN, infinities, 1e-300 / 1e300 magnitudes, float16/float32/int/bool/object
  dtypes, as numpy, lists, pandas frames (categories, nullable dtypes), scipy sparse matrices or
  torch tensors; y with one class, string or boolean labels, NaN, huge values; sample weights with
  zeros (all or some) or negative ones.

The property: either the fit succeeds and everything it returns on the training rows and on clean
rows (predict, transform, decision_function, predict_proba, labels_) is finite, or it raises a
``ValueError`` / ``TypeError`` / ``MemoryBudgetError`` whose message names the parameter or the
input (X, y, sample_weight) -- never an exception from inside torch, numba, numpy or scipy with
their own message, never NaN, and the user's arrays are never modified.

The default suite runs a bounded number of examples per estimator; ``-m slow`` runs many more
(the ``long`` variants); with ``-s`` each test prints how many cases it ran.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import re
import traceback
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mercer._validation import Interval, Options, _accepts  # noqa: E402
from mercer.linalg import MemoryBudgetError  # noqa: E402
from mercer.models._registry import CLASSIFIER, CLUSTERER, ESTIMATORS, REGRESSOR  # noqa: E402

pd = pytest.importorskip("pandas")

#: examples per estimator: the default suite, and ``-m slow``
FAST_EXAMPLES = 12  # each test checks that at least half ran (fewer only if a strategy ran dry)
LONG_EXAMPLES = 300

FAST = settings(max_examples=FAST_EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=LONG_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

ENTRIES = {e.name: e for e in ESTIMATORS}
NAMES = sorted(ENTRIES)

#: where an exception may not come from: the libraries underneath, with their own messages
_INTERNALS = re.compile(r"[/\\](torch|numba|numpy|scipy)[/\\]")
#: what a clear message about an input says
_INPUT_WORDS = {
    "X": r"\bX\b|sample\(s\)|feature\(s\)|n_samples|features?\b|\binput",
    "y": r"\by\b|class|target|label",
    "sample_weight": r"sample_weight|weights?\b",
}


#: fewer optimiser iterations than the registry's examples: a case is a fit, the fuzz runs hundreds
_QUICK = {"KernelRidgeCV": {"max_iter": 3}, "SparseGPRegressor": {"max_iter": 3}, "BudgetSVC": {"max_iter": 5},
          "GaussianProcessRegressor": {"max_iter": 3}}
#: parameters whose large valid values only cost time (more fits, restarts, iterations): at most 8
_COSTLY = {"n_init", "n_restarts_optimizer", "max_iter", "n_local_trials", "cg_max_iter", "n_iter_no_change"}
#: known, not fixed here (reported): (estimator, parameter) -> the values the fuzz leaves out
_KNOWN: dict = {}


def _estimator(name: str, **params):
    entry = ENTRIES[name]
    kwargs = entry.examples[0].kwargs()
    kwargs.update(_QUICK.get(name, {}))
    kwargs.update(params)
    return entry.load()(**kwargs)


def _kind(name: str) -> str:
    return ENTRIES[name].kind


# -- outcomes ----------------------------------------------------------------------------------------
def _numpy(a):
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    if sp.issparse(a):
        return a.toarray()
    return np.asarray(a)


def _outputs(est, X) -> dict:
    """Everything the fitted ``est`` returns on ``X``, as numpy (labels aside)."""
    out = {}
    for method in ("predict", "transform", "decision_function", "predict_proba"):
        if hasattr(est, method):
            try:
                out[method] = _numpy(getattr(est, method)(X))
            except (AttributeError, NotImplementedError) as e:  # e.g. predict_proba without probability
                if "probability" in str(e) or isinstance(e, NotImplementedError) or "not available" in str(e):
                    continue
                raise
    if hasattr(est, "labels_"):
        out["labels_"] = _numpy(est.labels_)
    return out


def _assert_finite(outputs: dict, where: str, kind: str, caught=()):
    """Every float output is finite; but a radius-neighbours regressor predicts NaN for a query
    without a neighbour, with a warning that says so (as scikit-learn's)."""
    warned_nan = any("predicting NaN" in str(w.message) for w in caught)
    for method, values in outputs.items():
        if method in ("predict", "labels_") and kind in (CLASSIFIER, CLUSTERER):
            continue  # labels: whatever the classes are
        if method == "predict" and warned_nan:
            continue
        values = np.asarray(values)
        if values.dtype.kind in "fc":
            assert np.isfinite(values).all(), f"{method} on {where} is not finite: {values!r}"


def _assert_clear(exc: BaseException, names: list[str], context: str):
    """``exc`` is a clear error: an allowed type, raised outside torch/numba/numpy/scipy, naming
    one of ``names`` (parameters, or 'X' / 'y' / 'sample_weight')."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert isinstance(exc, (ValueError, TypeError, MemoryBudgetError)), f"{context}: unexpected exception\n{text}"
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    origin = tb.tb_frame.f_code.co_filename
    assert not _INTERNALS.search(origin), f"{context}: raised inside {origin}\n{text}"
    msg = str(exc)
    patterns = [_INPUT_WORDS.get(n, rf"\b{re.escape(n)}\b") for n in names]
    if isinstance(exc, MemoryBudgetError):
        patterns.append("memory budget")
    assert any(re.search(p, msg) for p in patterns), f"{context}: the message names none of {names}\n{text}"


def _fit(est, name, X, y=None, sample_weight=None):
    kw = {} if sample_weight is None else {"sample_weight": sample_weight}
    if _kind(name) in (CLASSIFIER, REGRESSOR):
        return est.fit(X, y, **kw)
    return est.fit(X, **kw)


# -- a small, clean data set for the parameter cases ----------------------------------------------
def _clean(n=15, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y_reg = X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    y_clf = np.arange(n) % 3
    return X, y_reg, y_clf


X0, Y_REG, Y_CLF = _clean()
X_TEST = _clean(n=7, seed=1)[0]


def _target(name, y_reg=Y_REG, y_clf=Y_CLF):
    kind = _kind(name)
    return y_clf if kind == CLASSIFIER else y_reg if kind == REGRESSOR else None


# -- parameter strategies -----------------------------------------------------------------------------
_POOL = [
    -1, 0, 1, 2, 3, 7, 50, -1.0, 0.0, 1e-300, 1e-8, 0.5, 1.0, 2.5, 1e300, math.inf, -math.inf, math.nan,
    np.float32(0.5), np.int64(3), np.nan, True, False, None, "", "auto", "bogus", "rbf", "linear",
    "poly", "laplacian", "sigmoid", "cuda:7", "meta", "float16", "float64", "scale", [], [1.0, 2.0], (0.1, 10.0), {},
    {"gamma": 0.5}, {"bogus": 1}, object(), np.random.RandomState(0), np.random.default_rng(0),
    torch.device("cpu"), torch.float16, 2**32, -(2**31),
]


def _boundary_values(constraint) -> list:
    """Values on and around the edges of ``constraint`` (a parameter table entry)."""
    if isinstance(constraint, Options):
        return list(constraint.values) + [str(v).upper() for v in constraint.values if isinstance(v, str)]
    if isinstance(constraint, Interval):
        out = []
        for edge in (constraint.left, constraint.right):
            if edge is None:
                continue
            if constraint.type is numbers.Integral:
                out += [edge - 1, edge, edge + 1]
            else:
                out += [float(edge), float(np.nextafter(edge, -np.inf)), float(np.nextafter(edge, np.inf))]
        return out
    return []


def _param_values(table: dict, name: str, owner: str = ""):
    """(value, valid) pairs for parameter ``name``: the pool and the table's edges, valid when the
    table accepts the value."""
    known = _KNOWN.get((owner, name), lambda v: False)
    constraints = table[name]
    values = _POOL + [v for c in constraints for v in _boundary_values(c)]
    seen, out = set(), []
    for v in values:
        key = (type(v).__name__, repr(v))
        if key in seen:
            continue
        seen.add(key)
        valid = any(_accepts(c, v) for c in constraints)
        if valid and isinstance(v, numbers.Integral) and v > (8 if name in _COSTLY else 1000):
            continue  # n_init=2**32 is a request for 4e9 fits: honoured, slowly
        if valid and known(v):
            continue
        out.append((v, valid))
    return out


@st.composite
def param_case(draw, name):
    table = ENTRIES[name].load()._parameter_constraints
    param = draw(st.sampled_from(sorted(table)))
    value, valid = draw(st.sampled_from(_param_values(table, param, name)))
    return param, value, valid


def _run_param_case(name, param, value, valid):
    context = f"{name}({param}={value!r}) [{'valid' if valid else 'invalid'} by its table]"
    try:
        est = _estimator(name, **{param: value})
    except (ValueError, TypeError) as e:  # a constructor that checks
        _assert_clear(e, [param], context)
        return
    X, y = X0.copy(), _target(name)
    y = None if y is None else y.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _fit(est, name, X, y)
            outputs = {"train": _outputs(est, X), "test": _outputs(est, X_TEST)}
        except Exception as e:  # noqa: BLE001 (judged below)
            _assert_clear(e, [param, "X", "y"], context)
            return
    assert valid, f"{context}: accepted a value its table refuses"
    for where, out in outputs.items():
        _assert_finite(out, f"{where} rows ({context})", _kind(name), caught)
    np.testing.assert_array_equal(X, X0)


def _fuzz(strategy, run, profile, name):
    """Run ``run(name, *case)`` on cases drawn from ``strategy``; prints how many ran (``-s``)."""
    count = [0]

    def case_(case):
        count[0] += 1
        run(name, *case)

    given(case=strategy)(profile(case_))()
    print(f"{name}: {count[0]} cases")
    return count[0]


@pytest.mark.parametrize("name", NAMES)
def test_parameters(name):
    assert _fuzz(param_case(name), _run_param_case, FAST, name) >= FAST_EXAMPLES // 2


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_parameters_long(name):
    _fuzz(param_case(name), _run_param_case, LONG, name)


# -- input strategies ---------------------------------------------------------------------------------
_SPECIALS = [math.nan, math.inf, -math.inf, 1e-300, 1e300, -1e300, 0.0]


@st.composite
def matrix(draw):
    """A float64 matrix (before any container / dtype change) and a description."""
    n = draw(st.sampled_from([0, 1, 2, 3, 8, 12, 14]))
    d = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    X = np.random.default_rng(seed).normal(size=(n, d)).round(2)
    edits = draw(st.lists(st.sampled_from(["constant column", "duplicate column", "duplicate rows", "identical rows",
                                           "special cell", "scale"]), max_size=3))
    for edit in edits:
        if n == 0:
            break
        if edit == "constant column":
            X[:, draw(st.integers(0, d - 1))] = draw(st.sampled_from([0.0, 1.0, -3.5]))
        elif edit == "duplicate column" and d > 1:
            X[:, 1] = X[:, 0]
        elif edit == "duplicate rows" and n > 1:
            X[n // 2:] = X[: n - n // 2]
        elif edit == "identical rows":
            X[:] = X[0]
        elif edit == "special cell":
            X[draw(st.integers(0, n - 1)), draw(st.integers(0, d - 1))] = draw(st.sampled_from(_SPECIALS))
        elif edit == "scale":
            with np.errstate(over="ignore"):
                X = X * draw(st.sampled_from([1e-300, 1e-150, 1e150, 1e300]))
    return X


def _as_container(draw, X):
    kind = draw(st.sampled_from(["float64", "float32", "float16", "int", "bool", "object", "object-str", "list",
                                 "pandas", "pandas-category", "pandas-nullable", "csr", "csc", "coo", "torch64",
                                 "torch32", "torch-int"]))
    n, d = X.shape
    with np.errstate(all="ignore"):
        if kind in ("float64", "float32", "float16"):
            return X.astype(kind)
        if kind == "int":
            return np.nan_to_num(X, posinf=0, neginf=0).clip(-1e6, 1e6).astype(np.int64)
        if kind == "bool":
            return X > 0
        if kind == "object":
            return X.astype(object)
        if kind == "object-str":
            A = X.astype(object)
            if n:
                A[0, 0] = "a"
            return A
        if kind == "list":
            return X.tolist()
        if kind == "pandas":
            return pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
        if kind == "pandas-category":
            df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
            df["f0"] = pd.Categorical(np.where(np.nan_to_num(X[:, 0]) > 0, "hi", "lo"))
            return df
        if kind == "pandas-nullable":
            df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)]).astype("Float64")
            if n:
                df.iloc[0, 0] = pd.NA if draw(st.booleans()) else df.iloc[0, 0]
            return df
        if kind in ("csr", "csc", "coo"):
            return getattr(sp, f"{kind}_matrix")(X)
        if kind == "torch64":
            return torch.tensor(X, dtype=torch.float64)
        if kind == "torch32":
            return torch.tensor(X, dtype=torch.float32)
        return torch.tensor(np.nan_to_num(X, posinf=0, neginf=0).clip(-1e6, 1e6).astype(np.int64))


@st.composite
def targets(draw, n, kind):
    if kind == CLASSIFIER:
        labels = draw(st.sampled_from(["int", "str", "bool", "one class", "float"]))
        base = np.arange(n) % (2 if labels == "bool" else 3)
        y = {"int": base, "str": np.array(["a", "b", "c"])[base] if n else np.array([], dtype=str),
             "bool": base.astype(bool), "one class": np.zeros(n, dtype=int), "float": base * 0.5}[labels]
    else:
        y = np.random.default_rng(draw(st.integers(0, 99))).normal(size=n)
        if n and draw(st.booleans()):
            y[draw(st.integers(0, n - 1))] = draw(st.sampled_from(_SPECIALS))
        if draw(st.booleans()):
            with np.errstate(over="ignore"):  # 1e300 * a 3: inf, a case like any other
                y = y * draw(st.sampled_from([1e-300, 1e300]))
    if draw(st.booleans()):
        y = pd.Series(y) if draw(st.booleans()) or kind != REGRESSOR else pd.Series(y).astype("Float64")
    return y


@st.composite
def input_case(draw, name):
    X = draw(matrix())
    n = X.shape[0]
    y = draw(targets(n, _kind(name))) if _kind(name) in (CLASSIFIER, REGRESSOR) else None
    sw = None
    if "sample_weight" in inspect.signature(ENTRIES[name].load().fit).parameters:
        choice = draw(st.sampled_from(["none", "none", "zeros", "some zeros", "negative", "ones"]))
        if choice != "none":
            sw = np.ones(n)
            if choice == "zeros":
                sw[:] = 0.0
            elif choice == "some zeros":
                sw[: max(n - 2, 0)] = 0.0
            elif choice == "negative" and n:
                sw[0] = -1.0
    return _as_container(draw, X), y, sw


def _snapshot(a):
    if isinstance(a, torch.Tensor):
        return a.clone()
    return copy.deepcopy(a)


def _same(a, b) -> bool:
    if a is None:
        return b is None
    if isinstance(a, torch.Tensor):
        return torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) and torch.equal(a.isnan(), b.isnan()) \
            if a.is_floating_point() else torch.equal(a, b)
    if isinstance(a, (pd.DataFrame, pd.Series)):
        return a.equals(b)
    if sp.issparse(a):
        return a.format == b.format and a.shape == b.shape and np.array_equal(a.toarray(), b.toarray(), equal_nan=True)
    if isinstance(a, list):
        return repr(a) == repr(b)
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc":
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return a.dtype == b.dtype and repr(a.tolist()) == repr(b.tolist())


def _run_input_case(name, X, y, sw):
    context = f"{name}.fit(X={X!r}, y={y!r}, sample_weight={sw!r})"
    copies = [_snapshot(a) for a in (X, y, sw)]
    est = _estimator(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _fit(est, name, X, y, sw)
            outputs = {"train": _outputs(est, X) if np.shape(X)[0] else {}}
        except Exception as e:  # noqa: BLE001 (judged below)
            _assert_clear(e, ["X", "y", "sample_weight"], context)
            outputs = None
        if outputs is not None:
            d = np.shape(X)[1]
            X_test = X_TEST[:, :1].repeat(d, axis=1) + np.arange(d)
            X_test = torch.as_tensor(X_test, dtype=X.dtype) if isinstance(X, torch.Tensor) and X.is_floating_point() \
                else X_test
            if isinstance(X, pd.DataFrame) and all(pd.api.types.is_numeric_dtype(t) for t in X.dtypes):
                X_test = pd.DataFrame(X_test, columns=X.columns)
            try:
                outputs["test"] = _outputs(est, X_test)
            except Exception as e:  # noqa: BLE001 (a fit on odd data may refuse clean rows: clearly)
                _assert_clear(e, ["X"], context + " then predicting clean rows")
    for before, after, what in zip(copies, (X, y, sw), ("X", "y", "sample_weight")):
        assert _same(before, after), f"{context}: {what} was modified"
    if outputs is not None:
        for where, out in outputs.items():
            _assert_finite(out, f"{where} rows ({context})", _kind(name), caught)


@pytest.mark.parametrize("name", NAMES)
def test_inputs(name):
    assert _fuzz(input_case(name), _run_input_case, FAST, name) >= FAST_EXAMPLES // 2


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_inputs_long(name):
    _fuzz(input_case(name), _run_input_case, LONG, name)


# -- cases the fuzz found, kept as regressions ----------------------------------------------------------
@pytest.mark.parametrize("name", ["KernelSVC", "ReducedSetSVC"])
def test_svm_tol_below_the_gradient_resolution_stops(name):
    """tol=1e-300 with max_iter=-1 ran SMO to LIBSVM's 10^7-iteration limit (no float64 gradient resolves
    such a KKT violation): it is raised to 1e-12 with a NumericalWarning naming tol, and converges there."""
    from mercer.linalg import NumericalWarning

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(40) > 0).astype(int)
    with pytest.warns(NumericalWarning, match=r"tol=1e-300 is below .* at tol=1e-12"):
        tiny = _estimator(name, tol=1e-300, max_iter=-1).fit(X, y)
    assert tiny.fit_status_ == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", NumericalWarning)
        floor = _estimator(name, tol=1e-12, max_iter=-1).fit(X, y)
    np.testing.assert_array_equal(tiny.decision_function(X), floor.decision_function(X))


@pytest.mark.parametrize("name, params, named", [
    ("RandomMaclaurin", {"degree": 2**32}, "degree=4294967296"),
    ("RandomMaclaurin", {"degree": 2**32, "coef0": 0.0}, "degree=4294967296"),
    ("RandomMaclaurin", {"n_components": 2**32}, "n_components=4294967296"),
    ("PolynomialFeatureMap", {"degree": 2**32}, "degree=4294967296"),
])
def test_feature_maps_refuse_tables_beyond_the_budget(name, params, named):
    """Parameters at 2**32 were a 4e9-long Python loop (the Maclaurin coefficients, the monomials) or an
    allocation failure in torch: now a MemoryBudgetError naming the parameter, before any table is built."""
    import mercer

    X = np.random.default_rng(0).standard_normal((5, 3))
    with mercer.config_context(memory_budget=2**30), \
            pytest.raises(MemoryBudgetError, match=re.escape(named) + r".*more than the memory budget.*smaller"):
        _estimator(name, **params).fit(X)


def test_random_maclaurin_degree_beyond_float64_probabilities():
    """coef0 = 0 puts every feature on the degree p, whose q^-(p+1) underflows past p ~ 1,074: all
    features on it (was a NaN distribution in torch.multinomial), or a clear error when even its
    coefficient gamma^p underflows."""
    X = np.random.default_rng(0).standard_normal((5, 3)) * 0.3
    est = _estimator("RandomMaclaurin", degree=1200, coef0=0.0, gamma=1.0, n_components=6).fit(X)
    assert (est.feature_degrees_ == 1200).all()
    with pytest.raises(ValueError, match=r"Maclaurin coefficient .* underflows .* degree=3000"):
        _estimator("RandomMaclaurin", degree=3000, coef0=0.0, gamma=0.1).fit(X)


@pytest.mark.parametrize("dtype", ["float64", "Float64"])
def test_sparse_gp_on_a_one_column_frame(dtype):
    """A one-column DataFrame (plain or nullable) fits and predicts as its numpy array; a missing value
    in it is named."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 1))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(30)
    frame = pd.DataFrame(X, columns=["f0"]).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _estimator("SparseGPRegressor").fit(frame, pd.Series(y).astype(dtype))
        b = _estimator("SparseGPRegressor").fit(X, y)
    np.testing.assert_allclose(a.predict(frame), b.predict(X), rtol=1e-10)
    if dtype == "Float64":
        frame.iloc[0, 0] = pd.NA
        with pytest.raises(ValueError, match=r"\bX\b.*NaN|NaN.*\bX\b"):
            _estimator("SparseGPRegressor").fit(frame, y)
