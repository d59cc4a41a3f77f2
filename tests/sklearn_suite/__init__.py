"""scikit-learn's own unit tests run with mercer's estimators swapped in (see harness.py)."""
