"""How the format-version-1 model files beside this script were made (kept for the record: it
must run against mercer at commit 560bc70, the last one writing format 1).

    cd tests && python data/io_v1/generate.py
"""

import pathlib
import sys
import warnings

import numpy as np
from sklearn.datasets import load_digits

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from test_io import CASES, _fit, _output  # noqa: E402

from mercer.io import save  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent
X, y = load_digits(return_X_y=True)
X = X / 16.0
X_fit, y_fit, X_new = X[:80], y[:80], X[150:160]
expected = {}
for name, make in sorted(CASES.items()):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est, X_used = _fit(name, make(), X_fit, y_fit)
    save(est, OUT / f"{name}.mercer", compress=True)
    out = _output(est, X_new[:, :X_used.shape[1]])
    for i, part in enumerate(out if isinstance(out, tuple) else (out,)):
        expected[f"{name}/{i}"] = np.asarray(part)
np.savez_compressed(OUT / "expected.npz", **{k: (v.astype(str) if v.dtype == object else v) for k, v in expected.items()})
print(f"{len(CASES)} models written to {OUT}")
