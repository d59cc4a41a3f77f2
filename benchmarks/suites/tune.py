"""Hyperparameters learned at the scale of the fit: NystroemKernelRidgeCV and SparseGPRegressor (ARD RBF).

Part 1, UCI regression (split 0 of ``--uci-dir`` / ``$MERCER_UCI_DIR``; absent: skipped), all training
rows (``--n-train`` caps them), inputs and targets standardised with the training statistics, RMSE
(and NLPD for the GPs) in standardised target units, on up to ``--n-test`` test rows. Every model
has M = ``--centers`` centres / inducing points:

* mercer ``NystroemKernelRidgeCV`` (ARD RBF: one gamma per feature, alpha and the centres' coordinates
  learned by L-BFGS on the blocked GCV, from uniform centres, its default coarse-to-fine schedule and
  ``max_iter`` unless ``--ridge-max-iter``; GPyTorch's SGPR learns its inducing points too);
* mercer ``SparseGPRegressor`` (``1.0 * RBF(sigma=[sqrt(d)] * d)``, noise, output scale and the
  k-means inducing points learned by L-BFGS on Titsias' bound through the blocked statistics);
* scikit-learn ``HalvingGridSearchCV`` over ``make_pipeline(Nystroem(rbf, M), Ridge())``, gamma (9 values)
  x alpha (5 values), 3-fold, successive halving over the rows (factor 3);
* GPyTorch SGPR (``--gpytorch-python``, a separate interpreter with gpytorch installed; absent:
  skipped) as its SGPR tutorial trains it: ``ScaleKernel(RBFKernel(ard_num_dims=d))`` in an
  ``InducingPointKernel`` whose inducing points start at the first M training rows, constant
  mean, Adam (lr 0.1) on the exact marginal likelihood for ``--gpytorch-iter`` iterations;
* FALKON's ``falkon.hopt`` (``--falkon-python``, an interpreter that imports falkon; absent: skipped)
  as its hyperparameter-optimisation example trains it: a ``GaussianKernel`` with one sigma per
  feature (from ``sqrt(d)``), M random training rows as centres, penalty from 1e-5, the objective
  (``--falkon-objective``: ``NystromCompReg`` as in the example, ``GCV``, ``SGPR``) minimised by Adam
  (lr 0.1) over sigma, the penalty and the centres for ``--falkon-iter`` iterations, in
  ``--falkon-dtype`` (float32 as in the example); its exact objectives hold ``K_nM``. FALKON 0.9.0's
  ``GCV.predict`` divides by ``sqrt(penalty (r - 1))`` with ``r`` the rows it predicts instead of the
  training rows (its own fit uses ``n - 1``): the script rescales its predictions by
  ``sqrt((r - 1) / (n - 1))``.

Timings are wall clock, one torch / BLAS thread for every model (the machine is shared: compare
ratios within a set, not absolute times); ``x best peer`` is the time over the fastest peer's. Every
in-process model is fitted once on 300 synthetic rows before the first set (not timed): the first
fit in a process pays lazy imports and compilation (~0.9 s CPU for NystroemKernelRidgeCV), which
belong to no set. The peers' scripts warm up the same way (two iterations on 300 rows) before
their timed fit. ``peak_MiB``: the fit's peak RSS over the process's RSS at its start (the data
loaded), sampled every 5 ms; an in-process model runs after the earlier ones, whose freed memory the
allocator may keep and reuse, so its figure can be lower than in a fresh process.

Part 2, memory: the peak RSS of ``SparseGPRegressor.fit`` (M = 300, d = 8, 2 L-BFGS iterations,
fixed inducing points) in a fresh process at two n, against the peak of a process that only holds
the same data: learning used to hold four n x M matrices (refused beyond its budget); now the
extra memory does not grow with n.

    python benchmarks/suites/tune.py --quick      # elevators, 3,000 rows, M = 100
    python benchmarks/suites/tune.py --data elevators pol
    python benchmarks/suites/tune.py --data pol bike --no-memory --tag uci-a   # -> history/uci-a.*
    python benchmarks/suites/tune.py --merge uci-a uci-b    # latest.* from history/uci-a.*, uci-b.*

``--merge`` joins runs made one or two sets at a time (``--tag``) into ``latest``: their rows, each
run's command, machine and load; a memory part from the tagged runs, else the one ``latest`` had
(with the command that made it).

Results: ``benchmarks/results/tune/latest.{json,md}`` (``quick.*`` with ``--quick``).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gp.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # _common.py
from _common import (SkipSuite, Timer, fmt_bytes, git_state, load_average, machine_info, markdown_table,  # noqa: E402
                     parse_suite_args, require_uci, run_isolated, suite_parser, thread_limits, write_results)
from gp import load, nlpd, rmse  # noqa: E402

SETS = ["pol", "elevators", "bike", "kin40k", "protein", "keggdirected", "keggundirected"]

_PEAK = r"""
import os as _os, threading as _threading


class PeakRSS:
    # the peak RSS of this process over its RSS at entry (over, bytes), sampled every 5 ms by a
    # thread from /proc/self/statm (0 where that is absent)

    def _rss(self):
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * _os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def __enter__(self):
        self.start = self.peak = self._rss()
        self._stop = _threading.Event()
        self._thread = _threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.over = max(self.peak, self._rss()) - self.start
"""
exec(_PEAK)  # PeakRSS, for the in-process models; the peers' scripts start with the same text

_GPYTORCH = _PEAK + r"""
import json, sys, time
import numpy as np, torch, gpytorch
torch.set_num_threads(1)
d = np.load(sys.argv[1])
M, iters = int(sys.argv[2]), int(sys.argv[3])
tx, ty = torch.tensor(d["Xtr"]), torch.tensor(d["ytr"])
ex = torch.tensor(d["Xte"])

class SGPR(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood):
        super().__init__(x, y, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        self.base_covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=x.shape[1]))
        self.covar_module = gpytorch.kernels.InducingPointKernel(self.base_covar_module,
                                                                 inducing_points=x[:M, :].clone(), likelihood=likelihood)
    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

def warm_up(x, y):  # first calls (lazy initialisation, allocator pools) outside the measured fit, as mercer's
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    model = SGPR(x, y, likelihood)
    model.train(); likelihood.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    for i in range(2):
        opt.zero_grad()
        (-mll(model(x), y)).backward()
        opt.step()

warm_up(tx[:max(M, 300)], ty[:max(M, 300)])
pk = PeakRSS().__enter__()
t0, c0 = time.perf_counter(), time.process_time()
likelihood = gpytorch.likelihoods.GaussianLikelihood()
model = SGPR(tx, ty, likelihood)
model.train(); likelihood.train()
opt = torch.optim.Adam(model.parameters(), lr=0.1)
mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
for i in range(iters):
    opt.zero_grad()
    loss = -mll(model(tx), ty)
    loss.backward()
    opt.step()
fit, cpu = time.perf_counter() - t0, time.process_time() - c0
pk.__exit__()
model.eval(); likelihood.eval()
with torch.no_grad(), gpytorch.settings.fast_pred_var():
    pred = likelihood(model(ex))
print(json.dumps({"fit_s": fit, "cpu_s": cpu, "mean": pred.mean.numpy().tolist(), "var": pred.variance.numpy().tolist(),
                  "noise": float(likelihood.noise), "peak": pk.over}))
"""


_FALKON = _PEAK + r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
import falkon
from falkon import FalkonOptions
from falkon.hopt.objectives import GCV, SGPR, NystromCompReg
d = np.load(sys.argv[1])
M, iters, objective, dtype = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], getattr(torch, sys.argv[5])
tx, ty = torch.tensor(d["Xtr"], dtype=dtype), torch.tensor(d["ytr"], dtype=dtype).reshape(-1, 1)
ex = torch.tensor(d["Xte"], dtype=dtype)

def learn(x, y, iters, rng):
    opt = FalkonOptions(use_cpu=True)
    sigma = torch.tensor([float(np.sqrt(x.shape[1]))] * x.shape[1], dtype=dtype).requires_grad_()
    kernel = falkon.kernels.GaussianKernel(sigma=sigma, opt=opt)
    centers = x[rng.choice(x.shape[0], size=M, replace=False)].clone()
    model = {"NystromCompReg": NystromCompReg, "GCV": GCV, "SGPR": SGPR}[objective](
        kernel=kernel, penalty_init=torch.tensor(1e-5, dtype=dtype), centers_init=centers, opt_penalty=True,
        opt_centers=True)
    adam = torch.optim.Adam(model.parameters(), lr=0.1)
    for i in range(iters):
        adam.zero_grad()
        loss = model(x, y)
        loss.backward()
        adam.step()
    return model

# first calls (lazy initialisation, allocator pools) outside the measured fit, as mercer's
learn(tx[:max(M, 300)], ty[:max(M, 300)], 2, np.random.default_rng(1))
pk = PeakRSS().__enter__()
t0, c0 = time.perf_counter(), time.process_time()
model = learn(tx, ty, iters, np.random.default_rng(0))
fit, cpu = time.perf_counter() - t0, time.process_time() - c0
pk.__exit__()
with torch.no_grad():
    pred = model.predict(ex).reshape(-1)
if objective == "GCV":  # GCV.predict (0.9.0) scales by sqrt(penalty (rows predicted - 1)), not the training rows'
    pred = pred * float(np.sqrt((ex.shape[0] - 1) / (tx.shape[0] - 1)))
print(json.dumps({"fit_s": fit, "cpu_s": cpu, "mean": pred.double().numpy().tolist(), "penalty": float(model.penalty),
                  "peak": pk.over}))
"""


class _Clock(Timer):
    """Wall clock and this process's CPU time (``cpu``): on a shared machine the CPU seconds of
    single-threaded fits compare where their wall times depend on what else ran meanwhile."""

    def __enter__(self):
        self._peak = PeakRSS().__enter__()  # noqa: F821 (defined by exec(_PEAK))
        self._c0 = time.process_time()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.cpu = time.process_time() - self._c0
        self._peak.__exit__(*exc)
        self.peak = self._peak.over


def gpytorch_row(python, name, Xtr, ytr, Xte, yte, M, iters):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, Xtr=Xtr, ytr=ytr, Xte=Xte)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        out = subprocess.run([python, "-c", _GPYTORCH, path, str(M), str(iters)], capture_output=True, text=True,
                             env=env, check=False)
    if out.returncode != 0:
        print(f"GPyTorch failed on {name}: {out.stderr[-2000:]}", file=sys.stderr)
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    m, v = np.asarray(r["mean"]), np.asarray(r["var"])  # the likelihood's: the noise included
    return {"model": f"GPyTorch SGPR (Adam, {iters} iterations)", "rmse": rmse(yte, m), "nlpd": nlpd(yte, m, v),
            "fit_s": r["fit_s"], "cpu_s": r["cpu_s"], "peak_MiB": _mib(r["peak"]), "notes": f"noise {r['noise']:.3g}"}


def falkon_row(python, name, Xtr, ytr, Xte, yte, M, iters, objective, dtype):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, Xtr=Xtr, ytr=ytr, Xte=Xte)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        out = subprocess.run([python, "-c", _FALKON, path, str(M), str(iters), objective, dtype], capture_output=True,
                             text=True, env=env, check=False)
    if out.returncode != 0:
        print(f"FALKON failed on {name}: {out.stderr[-2000:]}", file=sys.stderr)
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"model": f"FALKON hopt {objective} ({dtype}, Adam, {iters} iterations)",
            "rmse": rmse(yte, np.asarray(r["mean"])), "fit_s": r["fit_s"], "cpu_s": r["cpu_s"],
            "peak_MiB": _mib(r["peak"]), "notes": f"penalty {r['penalty']:.3g}"}


def _mib(nbytes) -> float:
    return round(nbytes / 2**20, 1)


def _stages(model):
    """``rows x evaluations`` of each stage of a NystroemKernelRidgeCV fit (coarse_rows)."""
    return "stages " + " + ".join(f"{s['n_rows']} x {s['n_evals']}" for s in model.stages_)


def warm_up():
    """Fit each in-process model once on 300 synthetic rows (lazy imports, compilation): not timed."""
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import HalvingGridSearchCV
    from sklearn.pipeline import make_pipeline

    from mercer.kernels import RBF
    from mercer.models.gp import SparseGPRegressor
    from mercer.models.ridge import NystroemKernelRidgeCV

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        NystroemKernelRidgeCV(kernel=RBF(gamma=[0.1] * 5), n_centers=20, learn_centers=True, max_iter=3,
                              random_state=0).fit(X, y)
        SparseGPRegressor(n_inducing=20, kernel=1.0 * RBF(sigma=[2.0] * 5), max_iter=3, random_state=0).fit(X, y)
        HalvingGridSearchCV(make_pipeline(Nystroem(n_components=20, random_state=0), Ridge()),
                            {"nystroem__gamma": [0.1, 1.0]}, cv=3, random_state=0).fit(X, y)


def rows_for(name, args):
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import HalvingGridSearchCV, KFold
    from sklearn.pipeline import make_pipeline

    from mercer.kernels import RBF
    from mercer.models.gp import SparseGPRegressor
    from mercer.models.ridge import NystroemKernelRidgeCV

    rng = np.random.default_rng(0)
    Xtr, ytr, Xte, yte = load(name, args.n_test, rng)
    if len(ytr) > args.n_train:
        sub = rng.choice(len(ytr), args.n_train, replace=False)
        Xtr, ytr = Xtr[sub], ytr[sub]
    n, d = Xtr.shape
    M = args.centers
    rows = []

    def add(r):
        r = {"data": name, "n_train": n, "d": d, "M": M, "nlpd": "n/a", "notes": "", **r}
        print(f"{name:>12} {r['model']:<48} RMSE {r['rmse']:.4f}  fit {r['fit_s']:7.1f} s (CPU {r['cpu_s']:7.1f} s)  "
              f"{r['notes']}", flush=True)
        rows.append(r)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _Clock() as t:
            ridge_iter = {} if args.ridge_max_iter is None else {"max_iter": args.ridge_max_iter}
            ny = NystroemKernelRidgeCV(kernel=RBF(gamma=[1.0 / (2 * d)] * d), alpha=1e-3 * n, n_centers=M,
                                       learn_centers=True, random_state=0, **ridge_iter).fit(Xtr, ytr)
        add({"model": "mercer NystroemKernelRidgeCV (ARD, GCV, centres)", "rmse": rmse(yte, ny.predict(Xte)),
             "fit_s": t.seconds, "cpu_s": t.cpu, "peak_MiB": _mib(t.peak),
             "notes": f"alpha/n {ny.alpha_ / n:.3g}, {ny.n_evals_} evaluations ({_stages(ny)})"})
        with _Clock() as t:
            sg = SparseGPRegressor(n_inducing=M, kernel=1.0 * RBF(sigma=[math.sqrt(d)] * d), noise=0.1,
                                   max_iter=args.max_iter, random_state=0).fit(Xtr, ytr)
        m, s = sg.predict(Xte, return_std=True)
        add({"model": "mercer SparseGPRegressor (ARD, L-BFGS)", "rmse": rmse(yte, m), "nlpd": nlpd(yte, m, s**2 + sg.noise_),
             "fit_s": t.seconds, "cpu_s": t.cpu, "peak_MiB": _mib(t.peak), "notes": f"noise {sg.noise_:.3g}, {sum(r['n_evals'] for r in sg.optimizer_results_)} "
                                          "evaluations"})
        if "sklearn" in args.refs:
            grid = {"nystroem__gamma": np.logspace(-2, 2, 9) / (2 * d), "ridge__alpha": np.logspace(-4, 0, 5)}
            pipe = make_pipeline(Nystroem(kernel="rbf", n_components=M, random_state=0), Ridge())
            with _Clock() as t:
                hs = HalvingGridSearchCV(pipe, grid, factor=3, cv=KFold(3, shuffle=True, random_state=0),
                                         scoring="neg_mean_squared_error", random_state=0).fit(Xtr, ytr)
            best = hs.best_params_
            add({"model": "sklearn HalvingGridSearchCV(Nystroem + Ridge)", "rmse": rmse(yte, hs.predict(Xte)),
                 "fit_s": t.seconds, "cpu_s": t.cpu, "peak_MiB": _mib(t.peak), "notes": f"gamma {best['nystroem__gamma']:.3g}, alpha {best['ridge__alpha']:.3g}, "
                                              f"{sum(hs.n_candidates_)} candidate fits x 3 folds"})
        if "gpytorch" in args.refs and args.gpytorch_python:
            r = gpytorch_row(args.gpytorch_python, name, Xtr, ytr, Xte, yte, M, args.gpytorch_iter)
            if r is not None:
                add(r)
        if "falkon" in args.refs and args.falkon_python:
            for objective in args.falkon_objective:
                r = falkon_row(args.falkon_python, name, Xtr, ytr, Xte, yte, M, args.falkon_iter, objective,
                               args.falkon_dtype)
                if r is not None:
                    add(r)
    for key, col in (("fit_s", "x best peer"), ("cpu_s", "cpu x best peer")):
        peers = [r[key] for r in rows if not r["model"].startswith("mercer")]
        for r in rows:
            r[col] = r[key] / min(peers) if peers else "n/a"
    return rows


def _sgpr_fit(n, m, d, fit):
    import mercer

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    if fit:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mercer.SparseGPRegressor(n_inducing=m, inducing_init="random", learn_inducing=False, max_iter=2,
                                     random_state=0).fit(X, y)
    return n


def memory_rows(args):
    rows = []
    for n in args.memory_n:
        base = run_isolated(_sgpr_fit, n, 300, 8, False)
        fit = run_isolated(_sgpr_fit, n, 300, 8, True)
        r = {"n": n, "M": 300, "peak RSS, data only": fmt_bytes(base.peak_rss_bytes),
             "peak RSS, fit": fmt_bytes(fit.peak_rss_bytes),
             "fit - data only": fmt_bytes(fit.peak_rss_bytes - base.peak_rss_bytes),
             "4 n x M float64 (held before)": fmt_bytes(4 * n * 300 * 8), "fit_s": fit.seconds}
        print(r, flush=True)
        rows.append(r)
    return rows


_UCI_COLUMNS = ["data", "n_train", "d", "M", "model", "rmse", "nlpd", "fit_s", "x best peer", "cpu_s", "cpu x best peer",
                "peak_MiB",
                "notes"]


def merge(args):
    """``latest.*`` from the tagged runs ``args.merge`` (see the module docstring)."""
    runs = [json.loads((Path(args.out) / "history" / f"{tag}.json").read_text()) for tag in args.merge]
    rows = [r for run in runs for r in run["parts"].get("uci", [])]
    memory = next((run for run in runs if "memory" in run["parts"]), None)
    if memory is None:
        try:
            memory = json.loads((Path(args.out) / "latest.json").read_text())
            memory = memory if "memory" in memory["parts"] else None
        except (OSError, ValueError, KeyError):
            memory = None
    runs_md = "\n".join(f"- `{run['command']}` (git {run['git']}; load {run['load']}; {run['machine']})" for run in runs)
    parts, text = {"uci": rows}, f"Runs merged (one process each; ratios within a set come from one run):\n\n{runs_md}\n\n"
    text += markdown_table(rows, _UCI_COLUMNS)
    source = None
    if memory is not None:
        parts["memory"] = memory["parts"]["memory"]
        source = memory.get("memory_source") or _memory_source(memory, Path(args.out) / "latest.md")
        text += f"\n\nMemory part, from `{source['command']}` (git {source['git']}):\n\n" + markdown_table(parts["memory"])
    print(text)
    write_results(args, {"merged": [{"command": r["command"], "git": r["git"], "load": r["load"], "machine": r["machine"]}
                                    for r in runs], "parts": parts, "memory_source": source},
                  text, title="Hyperparameters learned at the scale of the fit")


def _memory_source(run: dict, latest_md: Path) -> dict:
    """The command and git state of the run that measured a memory part: the run's own, or, for a
    merged ``latest`` written before it recorded them, what its markdown says."""
    if "git" in run:
        return {"command": run["command"], "git": run["git"]}
    m = re.search(r"Memory part, from `([^`]*)` \(git ([^)]*)\)", latest_md.read_text() if latest_md.is_file() else "")
    return {"command": m.group(1), "git": m.group(2)} if m else {"command": "unknown", "git": "unknown"}


def main(argv=None):
    p = suite_parser("tune", __doc__.splitlines()[0], refs=("sklearn", "gpytorch", "falkon"), data=("uci",),
                     quick="elevators only, 3,000 training rows, M = 100, 20 iterations; memory at n = 5,000 and 20,000")
    p.add_argument("--data", nargs="+", default=None, help=f"UCI sets (default {' '.join(SETS)})")
    p.add_argument("--n-train", type=int, default=None, help="training rows at most (default all; --quick 3000)")
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--centers", type=int, default=None, help="M (default 500; --quick 100)")
    p.add_argument("--max-iter", type=int, default=None,
                   help="SparseGPRegressor's L-BFGS iterations (default 50; --quick 20)")
    p.add_argument("--ridge-max-iter", type=int, default=None,
                   help="NystroemKernelRidgeCV's max_iter (its first stage's iterations; default: its own default, "
                        "100; --quick 20)")
    p.add_argument("--gpytorch-python", default=os.environ.get("GPYTORCH_PYTHON"),
                   help="interpreter with gpytorch installed (default $GPYTORCH_PYTHON; absent: skipped)")
    p.add_argument("--gpytorch-iter", type=int, default=50, help="Adam iterations (the tutorial's 50)")
    p.add_argument("--falkon-iter", type=int, default=50, help="FALKON hopt's Adam iterations (its docs' 50)")
    p.add_argument("--falkon-objective", nargs="+", default=["NystromCompReg"], choices=["NystromCompReg", "GCV", "SGPR"],
                   help="FALKON hopt objectives (default NystromCompReg, the one its docs train)")
    p.add_argument("--falkon-dtype", default="float32", choices=["float32", "float64"],
                   help="FALKON's precision (default float32, as its docs)")
    p.add_argument("--memory-n", type=int, nargs="+", default=None, help="n of the memory part (default 25000 100000)")
    p.add_argument("--no-memory", dest="memory", action="store_false")
    p.add_argument("--merge", nargs="+", metavar="TAG", default=None,
                   help="write latest.* from the runs history/TAG.json (made with --tag); runs nothing")
    args = parse_suite_args(p, argv)
    if args.merge:
        return merge(args)
    args.data = args.data or (["elevators"] if args.quick else SETS)
    args.n_train = args.n_train or (3000 if args.quick else 10**9)
    args.centers = args.centers or (100 if args.quick else 500)
    args.max_iter = args.max_iter or (20 if args.quick else 50)
    args.ridge_max_iter = args.ridge_max_iter or (20 if args.quick else None)
    args.memory_n = args.memory_n or ([5000, 20000] if args.quick else [25000, 100000])
    if args.gpytorch_python and not Path(args.gpytorch_python).exists():
        args.gpytorch_python = None
    if args.falkon_python and not Path(args.falkon_python).exists():
        args.falkon_python = None
    parts, tables = {}, []
    if require_uci("tune") is not None:
        torch.set_num_threads(1)
        rows = []
        with thread_limits(1):
            warm_up()
            for name in args.data:
                rows += rows_for(name, args)
        parts["uci"] = rows
        tables.append(markdown_table(rows, _UCI_COLUMNS))
    if args.memory:
        parts["memory"] = memory_rows(args)
        tables.append(markdown_table(parts["memory"]))
    if not parts:
        raise SkipSuite("tune: nothing to run")
    text = "\n\n".join(tables)
    print(text)
    write_results(args, {"args": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info(),
                         "load": load_average(), "git": git_state(), "parts": parts},
                  f"Machine: {machine_info()}; load {load_average()}; git {git_state()}\n\n{text}",
                  title="Hyperparameters learned at the scale of the fit")


if __name__ == "__main__":
    main()
