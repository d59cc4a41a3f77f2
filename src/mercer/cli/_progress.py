"""Progress on the terminal for work that takes more than a moment (no dependency)."""

from __future__ import annotations

import sys
import threading
import time

from .._progress import active as bars_active

__all__ = ["Progress"]

_FRAMES = "|/-\\"


class Progress:
    """Context manager that shows ``label`` with a spinner and the elapsed time on stderr.

    On a terminal, the spinner appears after ``delay`` seconds and is replaced by a final
    ``label: done in 3.2 s`` line; elsewhere (pipes, logs, tests) only that final line is written,
    and only for work that took at least ``delay`` seconds. ``enabled=False`` silences it.
    """

    def __init__(self, label: str, *, stream=None, delay: float = 1.0, enabled: bool = True):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.enabled = enabled
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False

    def _tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def _spin(self) -> None:
        if self._stop.wait(self.delay):
            return
        i = 0
        while not self._stop.is_set():
            if bars_active():  # a progress bar (mercer.progress) has the line: do not draw over it
                self._stop.wait(0.1)
                continue
            elapsed = time.perf_counter() - self._t0
            self.stream.write(f"\r{_FRAMES[i % len(_FRAMES)]} {self.label} ... {elapsed:.1f} s")
            self.stream.flush()
            self._drawn = True
            i += 1
            self._stop.wait(0.1)

    def __enter__(self) -> Progress:
        self._t0 = time.perf_counter()
        if self.enabled and self._tty():
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.elapsed = time.perf_counter() - self._t0
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._drawn:
            self.stream.write("\r\033[K")
        if self.enabled and self.elapsed >= self.delay:
            status = "done" if exc_type is None else "failed"
            self.stream.write(f"{self.label}: {status} in {self.elapsed:.1f} s\n")
            self.stream.flush()
