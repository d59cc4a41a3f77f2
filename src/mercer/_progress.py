"""Progress bars for mercer's long loops, silent unless switched on with :func:`progress`.

The library never draws anything by itself: solvers (conjugate gradient, SMO, Lloyd) and the
planned block loops (:func:`mercer.linalg.row_blocks`, hence every kernel product) open a
:func:`task` and update it (a long Cholesky factorisation opens a timer); outside a
:func:`progress` context that costs one context-variable lookup. Inside one, a bar appears for
work that lasts longer than ``delay`` seconds, drawn by `tqdm <https://tqdm.github.io>`_ when it
is installed (an optional dependency: ``pip install tqdm``) and by a one-line fallback otherwise;
nothing is drawn when the stream is not a terminal (unless ``force=True``). Work that took a
second or more is also logged at INFO level on the ``mercer.progress`` logger, so
``logging.basicConfig(level=logging.INFO)`` records it without any bar.

>>> import mercer
>>> with mercer.progress():                     # doctest: +SKIP
...     mercer.KernelRidge(kernel="rbf").fit(X, y)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import math
import sys
import time
from collections.abc import Iterator

__all__ = ["progress", "task"]

log = logging.getLogger("mercer.progress")

#: Seconds between two redraws of a bar.
_REFRESH = 0.1


@dataclasses.dataclass(frozen=True)
class _Settings:
    file: object
    delay: float
    use_tqdm: bool


_SETTINGS: contextvars.ContextVar[_Settings | None] = contextvars.ContextVar("mercer_progress", default=None)
_OPEN: list = []  # bars currently drawn, innermost last (their screen rows)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _tqdm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tqdm") is not None


@contextlib.contextmanager
def progress(enabled: bool = True, *, file=None, delay: float = 0.5, force: bool = False,
             use_tqdm: bool | None = None) -> Iterator[bool]:
    """Show progress bars for mercer's long computations inside this block.

    Parameters
    ----------
    enabled : bool, default=True
        ``False`` silences bars inside an enclosing ``progress()`` block.
    file : text stream, default=sys.stderr
    delay : float, default=0.5
        Seconds a loop must run before its bar appears (short loops never draw).
    force : bool, default=False
        Draw even when ``file`` is not a terminal (by default, pipes, logs and notebooks
        redirected to files stay clean).
    use_tqdm : bool or None
        Draw with tqdm (default: when it is installed) or with the built-in one-line bar.

    Yields
    ------
    bool
        Whether bars will be drawn.
    """
    stream = sys.stderr if file is None else file
    on = bool(enabled) and (force or _isatty(stream))
    tq = _tqdm_available() if use_tqdm is None else bool(use_tqdm)
    token = _SETTINGS.set(_Settings(stream, float(delay), tq) if on else None)
    opened = len(_OPEN)
    try:
        yield on
    finally:
        _SETTINGS.reset(token)
        for bar in _OPEN[opened:][::-1]:  # left open by an exception (Ctrl-C): clear them
            bar.close()


def active() -> bool:
    """Whether a bar is on the screen now (a spinner should not draw over it)."""
    return bool(_OPEN)


class _NullTask:
    """What :func:`task` returns when no bar can be drawn: every method does nothing."""

    def __bool__(self) -> bool:
        return False

    def update(self, done=None, *, advance: int = 1, total=None, **postfix) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_NULL = _NullTask()


def _width() -> int:
    """Columns of the terminal (100 when it does not say)."""
    import shutil

    return shutil.get_terminal_size((100, 24)).columns or 100


def _height() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).lines or 24


def _fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60:02d}:{seconds % 60:02d}"


def _fmt_value(value) -> str:
    if callable(value):
        value = value()
    if isinstance(value, float):
        return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"
    return str(value)


def _log_done(level: int, desc: str, n, unit: str, elapsed: float) -> None:
    if unit:
        log.log(level, "%s: %g %s in %.1f s", desc, n, unit, elapsed)
    else:  # a timer
        log.log(level, "%s: %.1f s", desc, elapsed)


class _TextBar:
    """The fallback: ``desc: 45%|####      | 9/20 it [00:03<00:04, residual=1e-3]`` on one line."""

    def __init__(self, desc, total, unit, file, initial, t0):
        self.desc, self.total, self.unit, self.file, self.n, self.t0 = desc, total, unit, file, initial, t0
        self.postfix = ""

    def render(self) -> str:
        elapsed = time.perf_counter() - self.t0
        parts = [f"{self.desc}:"]
        if self.total:
            frac = min(1.0, self.n / self.total)
            parts.append(f"{100 * frac:3.0f}%|{'#' * int(20 * frac):<20}| {self.n:g}/{self.total:g} {self.unit}")
            eta = elapsed * (1 - frac) / frac if frac > 0 else math.inf
            timing = f"{_fmt_time(elapsed)}<{_fmt_time(eta) if math.isfinite(eta) else '?'}"
        else:
            if self.unit:  # without a unit the bar is a timer for work of unknown size: no count
                parts.append(f"{self.n:g} {self.unit}")
            timing = _fmt_time(elapsed)
        return " ".join(parts) + f" [{timing}{', ' + self.postfix if self.postfix else ''}]"

    def refresh(self) -> None:
        self.file.write("\r" + self.render()[:_width() - 1] + "\033[K")
        self.file.flush()

    def close(self) -> None:
        self.file.write("\r\033[K")
        self.file.flush()


class _Task:
    """One loop's progress: created by :func:`task`, drawn once it has run ``delay`` seconds."""

    def __init__(self, desc: str, total, unit: str, settings: _Settings, level: int = logging.INFO) -> None:
        self.desc, self.total, self.unit, self.settings, self.level = desc, total, unit, settings, level
        self.n = 0
        self.t0 = self._last = time.perf_counter()
        self._bar = None
        self._postfix: dict = {}

    def __bool__(self) -> bool:
        return True

    def update(self, done=None, *, advance: int = 1, total=None, **postfix) -> None:
        """Record progress: ``done`` units so far (or ``advance`` more); ``total`` revises the
        expected units; ``postfix`` values (or callables, evaluated only when drawn) follow the bar."""
        self.n = done if done is not None else self.n + advance
        if total is not None:
            self.total = total
        self._postfix.update(postfix)
        now = time.perf_counter()
        if now - self._last < _REFRESH or now - self.t0 < self.settings.delay:
            return
        self._last = now
        if self._bar is None:
            self._bar = self._open()
        self._draw()

    def _open(self):
        s = self.settings
        _OPEN.append(self)
        if s.use_tqdm:
            from tqdm.auto import tqdm

            # the size asked here: tqdm's own query reads 0 x 0 on a pseudo-terminal without a size,
            # and then hides every bar
            timer = self.total is None and not self.unit  # work of unknown size: only the elapsed time
            bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, file=s.file, leave=False, initial=self.n,
                       position=len(_OPEN) - 1, ncols=_width(), nrows=_height(), mininterval=_REFRESH, smoothing=0,
                       bar_format="{desc}: [{elapsed}{postfix}]" if timer else None)
            bar.start_t -= time.perf_counter() - self.t0  # the loop began before its bar: rate and ETA from then
            return bar
        return _TextBar(self.desc, self.total, self.unit, s.file, self.n, self.t0)

    def _draw(self) -> None:
        bar = self._bar
        text = ", ".join(f"{k}={_fmt_value(v)}" for k, v in self._postfix.items())
        if isinstance(bar, _TextBar):
            bar.n, bar.total, bar.postfix = self.n, self.total, text
        else:
            bar.total, bar.n = self.total, self.n
            bar.set_postfix_str(text, refresh=False)
        bar.refresh()

    def close(self) -> None:
        """Remove the bar; log the loop at INFO level when it took a second or more."""
        elapsed = time.perf_counter() - self.t0
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            if self in _OPEN:
                _OPEN.remove(self)
        if elapsed >= 1.0:
            _log_done(self.level, self.desc, self.n, self.unit, elapsed)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def task(desc: str, total=None, unit: str = "it", *, level: int = logging.INFO):
    """A progress handle for one loop: ``with task("Lloyd", total=300) as t: ... t.update(it, shift=s)``.

    With neither ``total`` nor ``unit`` (``unit=""``) the bar is a timer for one long call of
    unknown duration (``desc: [00:12]``), kept alive by calling ``update()`` now and then.

    Returns a do-nothing handle (falsy) outside a :func:`progress` context, so the caller pays
    nothing and can skip computing what the bar would show (``if t: ...``). Loops lasting a
    second or more are logged at ``level`` either way.
    """
    settings = _SETTINGS.get()
    if settings is None:
        return _LogTask(desc, unit, level) if log.isEnabledFor(level) else _NULL
    return _Task(desc, total, unit, settings, level)


class _LogTask(_NullTask):
    """No bar, but the INFO line when the loop took a second or more (logging switched on)."""

    def __init__(self, desc: str, unit: str, level: int) -> None:
        self.desc, self.unit, self.level, self.n, self.t0 = desc, unit, level, 0, time.perf_counter()

    def update(self, done=None, *, advance: int = 1, total=None, **postfix) -> None:
        self.n = done if done is not None else self.n + advance

    def close(self) -> None:
        elapsed = time.perf_counter() - self.t0
        if elapsed >= 1.0:
            _log_done(self.level, self.desc, self.n, self.unit, elapsed)
