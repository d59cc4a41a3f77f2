"""The SVM family's fitted models before and after a solver change, compared for exact equality.

Fits KernelSVC (RBF with and without shrinking, one-vs-one wine, linear and RBF digits), KernelSVR
(with and without shrinking), NuSVR, NuSVC and OneClassSVM on small problems, once with each solver
(``_dual.SOLVER = "smo"`` and ``"batched"``), and records ``dual_coef_``, ``intercept_``,
``support_`` and the decision values (or predictions) on 50 rows. ``save`` writes them to an .npz
file; ``compare`` refits and reports every array that is not bit-for-bit equal to the saved one.
A change meant to keep the SMO's iterates (and the batched solver's) must report ``differ 0``.

Run (checkout of the base, then of the change)::

    .venv/bin/python benchmarks/experiments/svm_family_before_after.py save before.npz
    .venv/bin/python benchmarks/experiments/svm_family_before_after.py compare before.npz
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits, load_wine, make_classification, make_regression

from mercer import KernelSVC, KernelSVR, NuSVC, NuSVR, OneClassSVM
from mercer.models.svm import _dual


def problems():
    X, y = make_classification(600, 8, random_state=0, flip_y=0.1)
    yield "svc_rbf", KernelSVC(C=1.0), X, y
    yield "svc_rbf_noshrink", KernelSVC(C=10.0, shrinking=False), X, y
    Xw, yw = load_wine(return_X_y=True)
    yield "svc_wine_ovo", KernelSVC(C=3.0), (Xw - Xw.mean(0)) / Xw.std(0), yw
    Xd, yd = load_digits(return_X_y=True)
    Xd, yd = Xd[:500] / 16, yd[:500]
    yield "svc_digits_linear", KernelSVC(C=0.1, kernel="linear"), Xd, yd
    yield "svc_digits_rbf", KernelSVC(C=5.0), Xd, yd
    Xr, yr = make_regression(500, 6, noise=5.0, random_state=1)
    yr = yr / yr.std()
    yield "svr", KernelSVR(C=2.0, epsilon=0.1), Xr, yr
    yield "svr_noshrink", KernelSVR(C=2.0, epsilon=0.05, shrinking=False), Xr, yr
    yield "nusvr", NuSVR(C=2.0, nu=0.4), Xr, yr
    yield "nusvc", NuSVC(nu=0.3), X, y
    yield "ocsvm", OneClassSVM(nu=0.2), X, None


def fitted() -> dict[str, np.ndarray]:
    out = {}
    for solver in ("smo", "batched"):
        _dual.SOLVER = solver
        for name, est, X, y in problems():
            est.fit(X) if y is None else est.fit(X, y)
            coef = est.dual_coef_
            out[f"{solver}/{name}/coef"] = np.asarray(coef.toarray() if hasattr(coef, "toarray") else coef)
            out[f"{solver}/{name}/intercept"] = np.asarray(est.intercept_)
            out[f"{solver}/{name}/support"] = np.asarray(est.support_)
            values = getattr(est, "decision_function", None) or est.predict
            out[f"{solver}/{name}/values"] = np.asarray(values(X[:50]))
    _dual.SOLVER = "auto"
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("save", "compare"))
    parser.add_argument("path")
    args = parser.parse_args(argv)
    res = fitted()
    if args.mode == "save":
        np.savez(args.path, **res)
        print(f"saved {len(res)} arrays to {args.path}")
        return
    ref = np.load(args.path)
    differ = [k for k in res if not (k in ref and res[k].shape == ref[k].shape and np.array_equal(res[k], ref[k]))]
    for k in differ:
        same_shape = k in ref and res[k].shape == ref[k].shape
        print(f"differs: {k}" + (f" (max abs difference {np.abs(res[k] - ref[k]).max():.3g})" if same_shape else ""))
    print(f"compared {len(res)}, differ {len(differ)}")


if __name__ == "__main__":
    main()
