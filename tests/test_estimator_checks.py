"""Every mercer estimator passes scikit-learn's estimator checks: one test over every example of
the registry (``mercer.models._registry``: the configurations, the checks expected to fail and
why, the warnings silenced), so a registered estimator is checked without a line here.

Slow examples run with ``-m slow``. A check that only fails for a reason of the data size it uses
is run elsewhere with a fitting configuration (``tests/test_sketched_ridge.py``).
"""

from __future__ import annotations

import importlib
import warnings

import pytest
from sklearn.utils.estimator_checks import _get_check_estimator_ids, estimator_checks_generator

from mercer.models import ESTIMATORS

_BY_NAME = {entry.name: entry for entry in ESTIMATORS}


def _category(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _cases() -> list:
    """(estimator, check) for every example of every registered estimator, as
    ``parametrize_with_checks`` makes them (expected failures marked xfail), slow ones marked."""
    cases = []
    for entry in ESTIMATORS:
        cls = entry.load()
        for example in entry.examples:
            marks = (pytest.mark.slow,) if example.slow else ()
            failed = {**entry.expected_failed_checks, **example.expected_failed_checks}
            for case in estimator_checks_generator(cls(**example.kwargs()), legacy=True, mark="xfail",
                                                   expected_failed_checks=failed):
                values, case_marks = (case.values, tuple(case.marks)) if hasattr(case, "marks") else (case, ())
                cases.append(pytest.param(*values, marks=case_marks + marks))
    return cases


@pytest.mark.parametrize("estimator, check", _cases(), ids=_get_check_estimator_ids)
def test_sklearn_contract(estimator, check):
    with warnings.catch_warnings():
        for dotted in _BY_NAME[type(estimator).__name__].quiet:
            warnings.simplefilter("ignore", _category(dotted))
        check(estimator)
