"""One fit job of ``shapes.py`` in a fresh interpreter: cold fit, warm refits, a prediction.

    python benchmarks/suites/_shapes_child.py SPEC.json

``SPEC.json`` names the estimator (``est``), the implementation (``impl``: mercer, sklearn or
falkon), the data folder (``data``: ``.npy`` files written by ``_shapes.prepare``), the estimator's
parameters (``params``), ``reps``, a ``deadline_s`` and the ``out`` folder. The child writes
``out/result.json`` after the cold fit and again after each warm refit (a child killed at its time
limit still leaves what it measured), and the test predictions as ``out/pred.npy``.

This file imports only the standard library and numpy at the top, so that it runs under any
interpreter (FALKON lives in its own virtual environment); each implementation's library is imported
inside the timed region, as a command-line user meets it.

* cold_s: from the first line of this file to the end of the first fit, imports and JIT compilation
  included, minus the time spent loading the ``.npy`` files (``load_s``);
* warm_s: best of ``reps`` further fits in this process (a new estimator each time), or of more while
  the refits so far took less than ``warm_s`` seconds of the spec (20 refits at most);
* predict_s: one warm call of predict / transform on the test rows (after an untimed one).
"""

import time

T0 = time.perf_counter()  # the first statement: cold time counts from here (imports included)

import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _peak_rss_bytes() -> int:
    """Peak RSS of this process image: VmHWM (per address space, so a parent's peak does not leak in
    through fork + exec as it does for ``ru_maxrss``), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rmse(p, y) -> float:
    return float(np.sqrt(np.mean((np.asarray(p, dtype=np.float64).ravel() - y) ** 2)))


# -- the jobs: each returns (make, fit, summary, predict) -------------------------------------------
# make() -> a new estimator; fit(est, D) fits it on the training arrays; summary(est, D, pred) -> dict
# of result metrics; predict(est, D) -> test predictions (numpy).
def _job_svc(impl, p, D):
    if impl == "mercer":
        from mercer.models.svm import KernelSVC

        def make():
            return KernelSVC(C=p["C"], kernel="rbf", gamma=p["gamma"], tol=p["tol"], dtype=p["dtype"])
    else:
        from sklearn.svm import SVC

        def make():
            return SVC(C=p["C"], kernel="rbf", gamma=p["gamma"], tol=p["tol"])

    def summary(est, pred):
        return {"n_sv": int(len(est.support_)), "accuracy": float(np.mean(pred == D["cte"])),
                "n_iter": int(np.sum(est.n_iter_))}

    return make, lambda est: est.fit(D["Xtr"], D["ctr"]), summary, lambda est: np.asarray(est.predict(D["Xte"]))


def _job_kmeans(impl, p, D):
    if impl == "mercer":
        from mercer.models.cluster import KMeans
    else:
        from sklearn.cluster import KMeans

    def make():
        return KMeans(p["k"], init=D["init"], n_init=1, max_iter=p["max_iter"], tol=p["tol"])

    def summary(est, pred):
        return {"inertia": float(est.inertia_), "n_iter": int(est.n_iter_)}

    return make, lambda est: est.fit(D["Xtr"]), summary, lambda est: np.asarray(est.predict(D["Xte"]))


def _job_krr(impl, p, D):
    if impl == "mercer":
        from mercer.models import KernelRidge
    else:
        from sklearn.kernel_ridge import KernelRidge

    def make():
        return KernelRidge(alpha=p["alpha"], kernel="rbf", gamma=p["gamma"])

    def summary(est, pred):
        return {"rmse": _rmse(pred, D["yte"])}

    return make, lambda est: est.fit(D["Xtr"], D["ytr"]), summary, lambda est: np.asarray(est.predict(D["Xte"]))


def _job_kpca(impl, p, D):
    if impl == "mercer":
        from mercer.models import KernelPCA

        def make():
            return KernelPCA(n_components=p["n_components"], kernel="rbf", gamma=p["gamma"], random_state=0)
    else:
        from sklearn.decomposition import KernelPCA

        def make():
            return KernelPCA(n_components=p["n_components"], kernel="rbf", gamma=p["gamma"],
                             eigen_solver="arpack", random_state=0)

    def summary(est, pred):
        return {"eigenvalues": [float(v) for v in np.asarray(est.eigenvalues_)]}

    return make, lambda est: est.fit(D["Xtr"]), summary, lambda est: np.asarray(est.transform(D["Xte"]))


def centre_indices(n: int, M: int) -> np.ndarray:
    """The M training rows that scikit-learn's ``Nystroem(random_state=0)`` takes as centres (its
    ``component_indices_``: the first M of a permutation drawn by ``RandomState(0)``); mercer and
    FALKON are given the same rows, so that the three fit the same model."""
    return np.random.RandomState(0).permutation(n)[:M]


def _job_nkr(impl, p, D):
    idx = centre_indices(D["Xtr"].shape[0], p["M"])
    if impl == "mercer":
        from mercer.models import NystroemKernelRidge

        def make():
            return NystroemKernelRidge(alpha=p["alpha"], kernel="rbf", gamma=p["gamma"], n_centers=p["M"],
                                       centers=D["Xtr"][idx], dtype=p["dtype"], random_state=0)

        def fit(est):
            return est.fit(D["Xtr"], D["ytr"])

        def predict(est):
            return np.asarray(est.predict(D["Xte"]))

        def summary(est, pred):
            return {"rmse": _rmse(pred, D["yte"]), "n_iter": int(np.max(est.n_iter_)), "solver": est.solver_}
    elif impl == "sklearn":
        from sklearn.kernel_approximation import Nystroem
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline

        def make():
            return make_pipeline(Nystroem(kernel="rbf", gamma=p["gamma"], n_components=p["M"], random_state=0),
                                 Ridge(alpha=p["alpha"]))

        def fit(est):
            return est.fit(D["Xtr"], D["ytr"])

        def predict(est):
            return np.asarray(est.predict(D["Xte"]))

        def summary(est, pred):
            return {"rmse": _rmse(pred, D["yte"]),
                    "same_centres": bool(np.array_equal(est[0].component_indices_, idx))}
    else:
        import torch
        from falkon import Falkon, FalkonOptions
        from falkon.center_selection import FixedSelector
        from falkon.kernels import GaussianKernel

        dt = {"float32": torch.float32, "float64": torch.float64}[p["dtype"]]
        opt = FalkonOptions(use_cpu=True, keops_active="no")
        sigma = float(np.sqrt(1.0 / (2.0 * p["gamma"])))  # exp(-|x-y|^2 / (2 sigma^2)) = exp(-gamma |x-y|^2)
        n = D["Xtr"].shape[0]

        def make():
            centres = FixedSelector(torch.from_numpy(np.ascontiguousarray(D["Xtr"][idx], dtype=p["dtype"])),
                                    idx_centers=torch.from_numpy(idx))
            return Falkon(kernel=GaussianKernel(sigma=sigma, opt=opt), penalty=p["alpha"] / n, M=p["M"],
                          center_selection=centres, maxiter=p.get("maxiter", 20), seed=0, options=opt)

        def fit(est):  # the conversion to torch is part of what a FALKON user does
            X = torch.from_numpy(np.ascontiguousarray(D["Xtr"], dtype=p["dtype"]))
            Y = torch.from_numpy(np.ascontiguousarray(D["ytr"], dtype=p["dtype"])).reshape(-1, 1)
            return est.fit(X.to(dt), Y.to(dt))

        def predict(est):
            return est.predict(torch.from_numpy(np.ascontiguousarray(D["Xte"], dtype=p["dtype"]))).numpy().ravel()

        def summary(est, pred):
            return {"rmse": _rmse(pred, D["yte"])}

    return make, fit, summary, predict


JOBS = {"svc": _job_svc, "kmeans": _job_kmeans, "krr": _job_krr, "kpca": _job_kpca, "nkr": _job_nkr}


def falkon_penalty_check(gamma: float = 0.5, lam: float = 1e-3) -> dict:
    """FALKON's penalty convention against the closed form, on a tiny float64 problem.

    With FALKON's centres C, the Nyström ridge minimiser for mercer's ``alpha`` is
    ``beta = (K_nC^T K_nC + alpha K_CC)^-1 K_nC^T y``. FALKON with ``penalty = lam`` (and CG run to
    convergence) should give that ``beta`` for ``alpha = lam * n``: returned as the relative
    prediction difference (small) next to the one for ``alpha = lam`` (large), and the kernel's
    largest deviation from ``exp(-gamma |x - y|^2)`` for ``sigma = sqrt(1 / (2 gamma))``.
    """
    import torch
    from falkon import Falkon, FalkonOptions
    from falkon.kernels import GaussianKernel

    rng = np.random.default_rng(0)
    n, d, M = 300, 3, 40
    X = rng.standard_normal((n, d))
    y = np.sin(X @ np.array([1.0, -0.5, 0.25])) + 0.1 * rng.standard_normal(n)
    opt = FalkonOptions(use_cpu=True, keops_active="no", cg_tolerance=1e-14)
    kern = GaussianKernel(sigma=float(np.sqrt(1.0 / (2.0 * gamma))), opt=opt)
    m = Falkon(kernel=kern, penalty=lam, M=M, maxiter=500, seed=0, options=opt)
    m.fit(torch.from_numpy(X), torch.from_numpy(y).reshape(-1, 1))
    C = np.asarray(m.ny_points_.numpy(), dtype=np.float64)

    def rbf(A, B):
        return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))

    kernel_err = float(np.abs(kern(torch.from_numpy(X[:50]), torch.from_numpy(C)).numpy() - rbf(X[:50], C)).max())
    Knc, Kcc = rbf(X, C), rbf(C, C)
    pred = m.predict(torch.from_numpy(X)).numpy().ravel()

    def closed(alpha):
        beta = np.linalg.solve(Knc.T @ Knc + alpha * Kcc, Knc.T @ y)
        p = Knc @ beta
        return float(np.linalg.norm(pred - p) / np.linalg.norm(p))

    return {"n": n, "lambda": lam, "kernel_max_abs_err": kernel_err,
            "rel_pred_diff_alpha_eq_lambda_n": closed(lam * n), "rel_pred_diff_alpha_eq_lambda": closed(lam)}


def _load(folder: str) -> tuple[dict, float]:
    t = time.perf_counter()
    D = {}
    for name in ("Xtr", "ytr", "ctr", "Xte", "yte", "cte", "init"):
        path = os.path.join(folder, name + ".npy")
        if os.path.exists(path):
            D[name] = np.load(path)
    return D, time.perf_counter() - t


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    out = spec["out"]
    res: dict = {"impl": spec["impl"], "est": spec["est"], "pid": os.getpid()}

    def save() -> None:
        res["peak_rss_bytes"] = _peak_rss_bytes()
        tmp = os.path.join(out, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, os.path.join(out, "result.json"))

    if spec["est"] == "falkon_check":
        res["check"] = falkon_penalty_check()
        res["cold_s"] = time.perf_counter() - T0
        save()
        return
    D, load_s = _load(spec["data"])
    t_imp = time.perf_counter()
    make, fit, summary, predict = JOBS[spec["est"]](spec["impl"], spec["params"], D)
    res["import_s"] = time.perf_counter() - t_imp
    c0 = _cpu_s()
    t1 = time.perf_counter()
    est = fit(make())
    t2 = time.perf_counter()
    res.update(load_s=load_s, cold_s=t2 - T0 - load_s, first_fit_s=t2 - t1, first_fit_cpu_s=_cpu_s() - c0,
               warm_fits_s=[], warm_fits_cpu_s=[])
    t1 = time.perf_counter()
    pred = predict(est)
    res["predict_first_s"] = time.perf_counter() - t1
    res.update(summary(est, pred))
    np.save(os.path.join(out, "pred.npy"), pred)
    save()
    deadline = T0 + spec["deadline_s"]
    last = t2 - t1
    warm_min_s = spec.get("warm_s", 0.0)  # keep refitting short fits until this long was spent (20 at most)
    for i in range(max(spec["reps"], 20 if warm_min_s > 0 else 0)):
        if i >= spec["reps"] and sum(res["warm_fits_s"]) >= warm_min_s:
            break
        if time.perf_counter() + 1.2 * last > deadline:
            res["warm_cut"] = "deadline"  # another fit would not finish before the time limit
            break
        c0, t1 = _cpu_s(), time.perf_counter()
        est = fit(make())
        last = time.perf_counter() - t1
        res["warm_fits_s"].append(last)
        res["warm_fits_cpu_s"].append(_cpu_s() - c0)
        res["warm_s"] = min(res["warm_fits_s"])
        save()
    if time.perf_counter() + 2 * res.get("predict_first_s", 0.0) < deadline:
        t1 = time.perf_counter()
        predict(est)
        res["predict_s"] = time.perf_counter() - t1
    res["total_s"] = time.perf_counter() - T0
    save()


if __name__ == "__main__":
    main(sys.argv[1])
