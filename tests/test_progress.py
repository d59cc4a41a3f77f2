"""Progress bars (mercer.progress), their hooks in the solvers and block loops, the worker thread
that keeps long Cholesky factorisations interruptible, and Ctrl-C in the CLI."""

import io
import logging
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

import mercer
from mercer import _progress
from mercer.linalg import conjugate_gradient, jittered_cholesky, observe_blocks, row_blocks
from mercer.linalg._factor import CholeskyFactor, _interruptible, _try_factor

from conftest import ctrl_c_cli_fit


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _spd(n, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 5, generator=g, dtype=dtype)
    return torch.exp(-torch.cdist(X, X) ** 2 / 10) + 1e-2 * torch.eye(n, dtype=dtype)


def _slow_cg(n=200, delay=0.02):
    A = _spd(n)

    def matvec(v):
        time.sleep(delay)
        return A @ v

    return matvec, torch.ones(n, dtype=torch.float64)


# -- silent by default -------------------------------------------------------------------------
def test_library_is_silent_by_default(capsys):
    matvec, b = _slow_cg()
    conjugate_gradient(matvec, b, tol=1e-10)
    list(row_blocks(10, 3, desc="x"))
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert not _progress.task("x")  # a do-nothing handle


def test_no_bar_when_the_stream_is_not_a_terminal():
    buf = io.StringIO()
    matvec, b = _slow_cg()
    with mercer.progress(file=buf, delay=0.0) as on:
        conjugate_gradient(matvec, b, tol=1e-10)
    assert on is False and buf.getvalue() == ""


# -- bars ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_tqdm", [False, pytest.param(True, marks=pytest.mark.skipif(
    not _progress._tqdm_available(), reason="tqdm not installed"))])
def test_cg_bar_shows_iterations_residual_and_eta(use_tqdm):
    out = _Terminal()
    matvec, b = _slow_cg()
    with mercer.progress(file=out, delay=0.05, use_tqdm=use_tqdm):
        res = conjugate_gradient(matvec, b, tol=1e-10)
    text = out.getvalue()
    assert "conjugate gradient" in text and "residual=" in text
    assert "<" in text  # elapsed<remaining
    # the last drawn residual is one of the solver's own
    shown = float(text.rsplit("residual=", 1)[1].split("]")[0].split(",")[0])
    assert any(np.isclose(shown, h, rtol=2e-3) for h in res.history)
    assert not _progress.active()  # the bar was removed


def test_eta_total_follows_the_geometric_decrease_of_the_residual():
    seen = []

    class Recorder:
        def __bool__(self):
            return True

        def update(self, done=None, **kw):
            seen.append((done, kw["total"], kw["residual"]))

    from mercer.linalg._cg import _with_bar

    step = _with_bar(Recorder(), None, tol=1e-8, max_iter=1000)
    step(2, None, torch.tensor([1e-2], dtype=torch.float64))  # 1e-2 after 2 iterations: 1e-8 after 8
    step(4, None, torch.tensor([2.0], dtype=torch.float64))  # no decrease: the bound is max_iter
    assert seen == [(2, 8, 1e-2), (4, 1000, 2.0)]


def test_block_loop_bar_and_nested_solver_bars():
    out = _Terminal()
    with mercer.progress(file=out, delay=0.0, use_tqdm=False):
        for _ in row_blocks(40, 10, desc="my blocks"):
            time.sleep(0.12)
    assert "my blocks:" in out.getvalue() and "rows" in out.getvalue()


def test_lloyd_and_smo_report_progress():
    out = _Terminal()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1, -1)
    with mercer.progress(file=out, delay=0.0, use_tqdm=False), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(_progress, "_REFRESH", 0.0)
        mercer.KMeans(n_clusters=5, n_init=1, random_state=0).fit(X)
        mercer.KernelSVC(C=10.0, kernel="rbf").fit(X, y)
    text = out.getvalue()
    assert "Lloyd (k-means):" in text and "shift=" in text
    assert "SMO:" in text and "objective=" in text


def test_bars_left_open_by_an_interrupt_are_cleared():
    out = _Terminal()
    with pytest.raises(KeyboardInterrupt), mercer.progress(file=out, delay=0.0, use_tqdm=False):
        for s in row_blocks(100, 10, desc="stopped"):
            time.sleep(0.11)
            if s.start >= 20:
                raise KeyboardInterrupt
    assert not _progress.active() and out.getvalue().endswith("\r\x1b[K")


def test_long_loops_are_logged_at_info_level(caplog, monkeypatch):
    t = [0.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: t[0])
    with caplog.at_level(logging.INFO, logger="mercer.progress"):
        with _progress.task("long work", total=3, unit="it") as bar:
            for i in range(3):
                t[0] += 0.6
                bar.update(i + 1)
        with _progress.task("short work") as bar:
            bar.update(1)
    assert [r.getMessage() for r in caplog.records] == ["long work: 3 it in 1.8 s"]


# -- long LAPACK calls in a worker thread -------------------------------------------------------
@pytest.fixture
def small_worker(monkeypatch):
    """Factor and solve in the worker thread from 64 rows up (the default starts at 2048)."""
    import mercer.linalg._factor as factor

    monkeypatch.setattr(factor, "LAPACK_WORKER_MIN_N", 64)


def _direct_factor(A):
    """What _try_factor did before the worker thread: one LAPACK call in this thread."""
    info = torch.empty((), dtype=torch.int32)
    torch.linalg.cholesky_ex(A.mT, upper=True, out=(A.mT, info))
    return int(info) == 0


@pytest.mark.parametrize("n", [64, 301])
def test_worker_factor_and_solves_are_bit_identical_to_the_direct_calls(n, small_worker):
    K = _spd(n, seed=n)
    K[tuple(torch.triu_indices(n, n, 1))] = 123.0  # only the lower triangle may be read
    A, ref = K.clone(), K.clone()
    seen = []
    with observe_blocks(lambda desc, done, total: seen.append((desc, done, total))):
        assert _try_factor(A)
        f = CholeskyFactor(A, 0.0)
        B = torch.randn(n, 3, dtype=torch.float64)
        X, x = f.solve(B), f.solve(B[:, 0])
    assert ("Cholesky factorisation", n, n) in seen and ("triangular solve", n, n) in seen  # the worker ran them
    assert _direct_factor(ref)
    assert torch.equal(A, ref)  # the same LAPACK call: the same bits, upper triangle included
    L = ref.tril()
    Y = torch.linalg.solve_triangular(L, B, upper=False)
    assert torch.equal(X, torch.linalg.solve_triangular(L.mT, Y, upper=True))
    torch.testing.assert_close(x, torch.cholesky_solve(B[:, :1], L)[:, 0], rtol=1e-10, atol=1e-12)


def test_small_matrices_and_the_default_threshold_call_lapack_directly():
    seen = []
    with observe_blocks(lambda desc, done, total: seen.append(desc)):
        f = jittered_cholesky(_spd(300))
        f.solve(torch.ones(300, dtype=torch.float64))
    assert seen == []  # no worker thread, no polls


def test_worker_reports_indefinite_and_jitter_still_works(small_worker):
    X = torch.randn(200, 3, dtype=torch.float64)
    assert not _try_factor((X @ X.T).clone())  # rank 3: not positive definite
    with pytest.warns(mercer.linalg.NumericalWarning):
        f = jittered_cholesky(X @ X.T, owner="test")
    assert f.jitter > 0


def test_errors_inside_the_worker_reach_the_caller(small_worker):
    f = CholeskyFactor(_spd(100), 0.0)
    with pytest.raises(RuntimeError):
        f.solve(torch.ones(99, 2, dtype=torch.float64))  # torch's own shape error, raised in the worker

    def boom():
        raise ValueError("from the worker")

    with pytest.raises(ValueError, match="from the worker"):
        _interruptible(boom, _spd(100), "test")


def _openmp_threads():
    """OpenMP's team size for this thread, read from the runtime itself where it can be found
    (torch.get_num_threads() would first set it from torch's global setting)."""
    import ctypes

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")  # not scikit-learn's own copy
    try:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps
                         if torch_lib in line and ("libgomp" in line or "libiomp" in line)), None)
    except OSError:
        path = None
    return ctypes.CDLL(path).omp_get_max_threads() if path else torch.get_num_threads()


def test_worker_runs_with_the_callers_threads_and_autograd_modes(small_worker):
    A = _spd(100)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a new thread would run MKL with OpenMP's default team instead
    try:
        with torch.no_grad():
            assert _interruptible(lambda: (_openmp_threads(), torch.is_grad_enabled()), A, "t") == (1, False)
        with torch.inference_mode():
            assert _interruptible(torch.is_inference_mode_enabled, A, "t")
    finally:
        torch.set_num_threads(before)


def _abandoned_call():
    """A call that blocks (GIL released, as LAPACK does) until the test releases it."""
    release = threading.Event()

    def call():
        release.wait(30)
        return "finished"

    return call, release


def _worker_alive(desc):
    return any(t.name == f"mercer {desc}" and t.is_alive() for t in threading.enumerate())


def test_an_observer_stops_a_long_call_at_once(small_worker):
    call, release = _abandoned_call()
    seen = []

    def stop(desc, done, total):
        seen.append((desc, done, total))
        raise KeyboardInterrupt

    try:
        with observe_blocks(stop), pytest.raises(KeyboardInterrupt):
            _interruptible(call, _spd(100), "stoppable")
        assert seen == [("stoppable", 0, 100)]  # the first poll
        assert _worker_alive("stoppable")  # the caller left while the call was still running
    finally:
        release.set()


def test_sigint_interrupts_a_long_call_in_the_main_thread(small_worker):
    blocking, release = _abandoned_call()

    def call():  # Ctrl-C once the long call has begun (the signal may land in either thread)
        os.kill(os.getpid(), signal.SIGINT)
        return blocking()

    A = _spd(100)
    # Python's own Ctrl-C handler, whatever the runner inherited (a shell's background job starts with
    # SIGINT ignored, and then Python installs no handler at all).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _interruptible(call, A, "interrupted")
        assert _worker_alive("interrupted")
    finally:
        release.set()
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("use_tqdm", [False, True])
def test_a_long_call_shows_a_timer_bar(use_tqdm, small_worker, monkeypatch):
    monkeypatch.setattr(_progress, "_REFRESH", 0.0)
    out = _Terminal()
    with mercer.progress(file=out, force=True, delay=0.0, use_tqdm=use_tqdm):
        _interruptible(lambda: time.sleep(0.35), _spd(100), "Cholesky factorisation")
    text = out.getvalue()
    assert "Cholesky factorisation of 100 rows: [00:00" in text
    assert " it" not in text and "%" not in text  # no count, no percentage: a timer


def test_exact_ridge_through_the_worker_matches_scikit_learn(small_worker):
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=300)
    ours = mercer.KernelRidge(alpha=0.5, kernel="rbf", gamma=0.3).fit(X, y)
    ref = SkKernelRidge(alpha=0.5, kernel="rbf", gamma=0.3).fit(X, y)
    np.testing.assert_allclose(ours.predict(X[:50]), ref.predict(X[:50]), rtol=1e-7, atol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_calls_lapack_directly(small_worker):
    seen = []
    A = _spd(300).cuda()
    with observe_blocks(lambda desc, done, total: seen.append(desc)):
        f = jittered_cholesky(A.clone())
        x = f.solve(torch.ones(300, dtype=torch.float64, device="cuda"))
    assert seen == []  # no worker thread on CUDA
    torch.testing.assert_close(x.cpu(), torch.linalg.solve(_spd(300), torch.ones(300, dtype=torch.float64)))


# -- Ctrl-C in the CLI ---------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_stops_an_exact_fit_with_status_130_and_no_output(tmp_path):
    X = np.random.default_rng(0).normal(size=(6000, 5))
    status, err, _, out = ctrl_c_cli_fit(tmp_path, np.column_stack([X, X[:, 0]]), "--model", "ridge", "--preprocess",
                                         "none", "--no-tune")
    assert status == 130, err
    assert "interrupted" in err
    assert not out.exists() and not list(tmp_path.glob(".m.mercer*"))


def test_cli_draws_bars_on_a_terminal_unless_quiet(tmp_path, monkeypatch, capsys):
    from mercer.cli import main

    monkeypatch.setattr(_progress, "_isatty", lambda stream: True)
    monkeypatch.setattr(_progress, "_REFRESH", 0.0)
    monkeypatch.setitem(_progress.progress.__wrapped__.__kwdefaults__, "delay", 0.0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    np.save(tmp_path / "d.npy", np.column_stack([X, X[:, 0]]))
    args = ["fit", "--data", str(tmp_path / "d.npy"), "--target", "-1", "--model", "ridge", "--no-tune",
            "--out", str(tmp_path / "m")]
    assert main(args) == 0
    assert "kernel matrix" in capsys.readouterr().err
    assert main([*args, "--quiet"]) == 0
    assert "kernel matrix" not in capsys.readouterr().err
