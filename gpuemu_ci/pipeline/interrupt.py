"""SIGINT and SIGTERM during a run: stop within seconds and keep what was found.

While an `Interruption` is entered (on the main thread), either signal sets its event instead of killing the
process or raising KeyboardInterrupt. The run polls the event: it kills the running cases, stops the workers
(and everything they started), and returns the results so far, marked cut short. The caller writes them, then
exits 128 + the signal (130, 143) as shells report it (`errors.Interrupted`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from gpuemu_ci import early_signals

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interruption:
    """SIGINT and SIGTERM turned into a request to stop: used as a context manager around a run, it sets
    `event` and records the first signal, so the run stops starting cases and writes what it has. A signal
    that came while the process started counts too. Handlers are installed only from the main thread and
    restored on exit."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str:
        """The first signal's name (`SIGINT`), or "" when none came."""
        return signal.Signals(self.signal).name if self.signal is not None else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signum
        self.event.set()

    def __enter__(self) -> Interruption:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            held = early_signals.take()  # one that came while the process started: stop before the first case
            if held is not None:
                self._handle(held, None)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
