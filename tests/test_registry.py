"""The registry of estimators (``mercer.models._registry``) is the one list: ``mercer.models``,
``mercer``, the command's ``--model`` names, :mod:`mercer.io`'s loadable classes and the estimator
checks derive from it, and every public estimator class of the packages is in it."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
import tomllib
from pathlib import Path

import pytest
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin, is_classifier, is_outlier_detector, is_regressor

import mercer
import mercer.approx
import mercer.models
from mercer.cli import _arguments
from mercer.io import loadable_estimators
from mercer.models import ESTIMATORS, _registry

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / "src" / "mercer" / "models"
FAMILIES = sorted(m.name for m in pkgutil.iter_modules([str(MODELS_DIR)]) if m.ispkg)


def test_entries_are_well_formed():
    names = [e.name for e in ESTIMATORS]
    assert len(names) == len(set(names)), "an estimator is registered twice"
    cli = [e.cli for e in ESTIMATORS if e.cli is not None]
    assert len(cli) == len(set(cli))
    for e in ESTIMATORS:
        assert e.kind in _registry.KINDS, e
        assert e.family in FAMILIES or e.module == "mercer.approx", e
        assert e.examples, f"{e.name}: no example for the estimator checks"
        for ex in e.examples:
            assert isinstance(ex.params, dict) and all(isinstance(k, str) for k in ex.params), e.name
    assert set(_registry.FUNCTIONS.values()) <= set(FAMILIES)


def test_registry_imports_only_the_standard_library():
    tree = ast.parse((MODELS_DIR / "_registry.py").read_text(encoding="utf-8"))
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top


def test_every_public_estimator_class_is_registered():
    registered = {(e.module, e.name) for e in ESTIMATORS}
    found = set()
    for family in FAMILIES:
        package = importlib.import_module(f"mercer.models.{family}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, obj in vars(module).items():
                if (inspect.isclass(obj) and issubclass(obj, BaseEstimator) and not name.startswith("_")
                        and obj.__module__ == module.__name__):
                    found.add((package.__name__, name))
                    assert name in package.__all__, f"{module.__name__}.{name} is public but not in {package.__name__}"
    for name in mercer.approx.__all__:
        obj = getattr(mercer.approx, name)
        if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
            found.add(("mercer.approx", name))
    assert found == registered, (f"not registered: {sorted(found - registered)}; "
                                 f"registered but not found: {sorted(registered - found)}")


def test_every_entry_loads_its_class_of_the_declared_kind():
    for e in ESTIMATORS:
        cls = e.load()
        assert cls.__name__ == e.name and getattr(importlib.import_module(e.module), e.name) is cls
        est = cls()
        kind = ("regressor" if is_regressor(est) else "classifier" if is_classifier(est)
                else "clusterer" if isinstance(est, ClusterMixin) else
                "outlier_detector" if is_outlier_detector(est) else
                "transformer" if isinstance(est, TransformerMixin) else None)
        assert kind == e.kind, (e.name, kind)
        for ex, inst in zip(e.examples, e.instances()):  # every example names constructor parameters
            assert type(inst) is cls and set(ex.params) <= set(inst.get_params(deep=False)), (e.name, ex)


def test_models_namespace_is_the_registry():
    models = {e.name for e in ESTIMATORS if e.family is not None}
    assert mercer.models.__all__ == sorted(models | set(_registry.FUNCTIONS))
    for e in ESTIMATORS:
        if e.family is not None:
            assert mercer.models._ORIGIN[e.name] == e.family and getattr(mercer.models, e.name) is e.load()
    assert sorted(mercer.models._FAMILIES) == FAMILIES  # every family subpackage has a registered name


def test_package_namespace_is_the_registry():
    assert list(mercer._MODELS) == mercer.models.__all__
    for e in ESTIMATORS:
        assert e.name in mercer.__all__ and getattr(mercer, e.name) is e.load(), e.name
    public_classes = {n for n in mercer.__all__ if inspect.isclass(getattr(mercer, n))
                      and issubclass(getattr(mercer, n), BaseEstimator)}
    assert public_classes == {e.name for e in ESTIMATORS}


def test_command_models_are_the_registry():
    assert _arguments.MODELS == {e.cli: e.name for e in ESTIMATORS if e.cli is not None}
    from mercer.cli._commands import APPLICABLE

    assert set(_arguments.MODELS.values()) <= APPLICABLE


def test_loadable_classes_are_the_registry():
    assert loadable_estimators() == sorted(e.name for e in ESTIMATORS)


def test_type_checking_imports_name_the_registry():
    """Type checkers see every family's public names (star imports of each family, whose __all__ is
    the registry's names for it): a new estimator in a family needs no line here."""
    import importlib

    tree = ast.parse((MODELS_DIR / "__init__.py").read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    starred = {node.module for node in block.body if isinstance(node, ast.ImportFrom)
               and [a.name for a in node.names] == ["*"]}
    expected: dict = {}
    for e in ESTIMATORS:
        if e.family is not None:
            expected.setdefault(e.family, set()).add(e.name)
    for name, family in _registry.FUNCTIONS.items():
        expected.setdefault(family, set()).add(name)
    assert starred == set(expected)
    for family, names in expected.items():
        assert set(importlib.import_module(f"mercer.models.{family}").__all__) == names, family


def test_family_contract_lists_the_registry_families():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "model-families")
    listed = {name.strip(" ()") for layer in contract["layers"] for name in layer.split("|")}
    assert set(FAMILIES) <= listed, sorted(set(FAMILIES) - listed)


@pytest.mark.parametrize("entry", [e for e in ESTIMATORS if any(isinstance(v, _registry.KernelExpr)
                                                                 for ex in e.examples for v in ex.params.values())],
                         ids=lambda e: e.name)
def test_kernel_expressions_build_mercer_kernels(entry):
    from mercer.kernels import Kernel

    for ex in entry.examples:
        for key, value in ex.kwargs().items():
            if isinstance(ex.params[key], _registry.KernelExpr):
                assert isinstance(value, Kernel), (entry.name, key, value)
