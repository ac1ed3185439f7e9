"""Progress on stderr while a suite runs. Stages report through `Observer`; they never print.

- On a terminal: one overall bar, redrawn in place: cases done of all planned, failures, ops finished, elapsed
  time and an estimate of what is left.
- In CI logs (no terminal): a line when an op starts, and every `interval` seconds a progress line with the
  totals, each running op's count, the elapsed time and the estimate, so a long suite is never silent.

An op's outcome is not printed here: the summary after the run lists every op once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, TextIO

from gpuemu_ci.terminal import Style, duration

DEFAULT_INTERVAL_S = 30.0  # CI progress lines; GPUEMU_PROGRESS_SECONDS overrides
BAR_WIDTH = 28
REDRAW_S = 0.1  # the bar is redrawn at most ten times a second


class Observer(Protocol):
    """What a running suite tells whoever shows its progress. The stages call these in order (planned, then per
    op started, its cases, finished); an implementation must not raise and must not print to stdout, which
    belongs to the command's output."""

    def suite_planned(self, cases: dict[str, int]) -> None:
        """Every op's planned case count (op name -> cases), once, before the first case runs."""
        ...

    def op_started(self, op: str, cases: int) -> None:
        """Op `op` starts running its `cases` cases."""
        ...

    def case_done(self, op: str, passed: bool) -> None:
        """One case of `op` was judged; `passed` is False when it failed (or errored)."""
        ...

    def op_finished(self, op: str, status: str, detail: str) -> None:
        """Op `op` ended with `status` (a results status value: passed, failed, error, skipped, ...) and a
        one-line `detail` (empty when there is none)."""
        ...

    def note(self, text: str) -> None:
        """A line for the user that is not about one case (a warning, what is happening while nothing runs)."""
        ...


class Silent(Observer):
    """The Observer that shows nothing: the default of library calls and tests."""

    def suite_planned(self, cases: dict[str, int]) -> None:
        pass

    def op_started(self, op: str, cases: int) -> None:
        pass

    def case_done(self, op: str, passed: bool) -> None:
        pass

    def op_finished(self, op: str, status: str, detail: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass
class _OpCount:
    total: int
    done: int = 0
    failed: int = 0
    started: bool = False
    finished: bool = False


class StderrReporter(Observer):
    """The Observer of `gpuemu-ci run` and the Action (see the module docstring). Use it as a context manager,
    or call `close()`, to stop the CI progress thread and end the bar's line."""

    def __init__(self, stream: TextIO | None = None, *, interval_s: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self.style = Style.for_stream(self.stream)
        self.interval_s = interval_s if interval_s is not None else _interval_from_env()
        self._ops: dict[str, _OpCount] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._bar_shown = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # --- Observer ---------------------------------------------------------------------------------------
    def suite_planned(self, cases: dict[str, int]) -> None:
        """Every op's planned case count, before the first case runs: the totals are the whole suite's."""
        with self._lock:
            for op, count in cases.items():
                self._ops.setdefault(op, _OpCount(count))

    def op_started(self, op: str, cases: int) -> None:
        with self._lock:
            self._ops[op] = _OpCount(cases, started=True)
            if self.interactive:
                self._draw(force=True)
            else:
                self._write(f"gpuemu-ci: {op}: {cases} cases")
                self._start_ticker()

    def case_done(self, op: str, passed: bool) -> None:
        with self._lock:
            count = self._ops.setdefault(op, _OpCount(0))
            count.done += 1
            count.failed += 0 if passed else 1
            if self.interactive:
                self._draw()

    def op_finished(self, op: str, status: str, detail: str) -> None:
        with self._lock:
            self._ops.setdefault(op, _OpCount(0)).finished = True
            if self.interactive:
                self._draw(force=True)

    def note(self, text: str) -> None:
        with self._lock:
            self._write(f"gpuemu-ci: {text}")

    # --- lifetime ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the CI progress thread and ends the bar's line; safe to call more than once."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock:
            if self._bar_shown:
                self.stream.write("\n")
                self.stream.flush()
                self._bar_shown = False

    def __enter__(self) -> StderrReporter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # --- what is shown ------------------------------------------------------------------------------------
    def progress_line(self) -> str:
        """The CI progress line: totals, each running op, elapsed time and the estimate."""
        done, total, failed, _ = self._totals()
        percent = f" ({100 * done // total}%)" if total else ""
        running = [
            f"{name} {c.done}/{c.total}" for name, c in self._ops.items() if c.started and not c.finished
        ]
        parts = [f"progress {done}/{total} cases{percent}, {failed} failed"]
        if running:
            parts.append("running " + ", ".join(running))
        parts.append(self._timing(done, total))
        return "gpuemu-ci: " + "; ".join(parts)

    def bar_line(self) -> str:
        """The terminal bar, without colour codes when colour is off."""
        done, total, failed, finished = self._totals()
        filled = BAR_WIDTH * done // total if total else 0
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        failures = self.style.paint(f"{failed} failed", "failed" if failed else "dim")
        return (
            f"[{bar}] {done}/{total} cases · {failures} · {finished}/{len(self._ops)} ops · "
            f"{self._timing(done, total)}"
        )

    def _totals(self) -> tuple[int, int, int, int]:
        counts = self._ops.values()
        return (
            sum(c.done for c in counts),
            sum(c.total for c in counts),
            sum(c.failed for c in counts),
            sum(1 for c in counts if c.finished),
        )

    def _timing(self, done: int, total: int) -> str:
        elapsed = time.monotonic() - self._started
        text = f"{duration(elapsed)} elapsed"
        if 0 < done < total:
            text += f", about {duration(elapsed / done * (total - done))} left"
        return text

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._drawn_at < REDRAW_S:
            return
        self._drawn_at = now
        self.stream.write("\r\x1b[2K" + self.bar_line())
        self.stream.flush()
        self._bar_shown = True

    def _write(self, line: str) -> None:
        prefix = "\r\x1b[2K" if self._bar_shown else ""
        self.stream.write(prefix + line + "\n")
        self.stream.flush()
        if self._bar_shown:
            self._draw(force=True)

    def _start_ticker(self) -> None:
        if self._ticker is not None and self._ticker.is_alive():
            return
        self._ticker = threading.Thread(target=self._tick, name="gpuemu-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if not any(c.started and not c.finished for c in self._ops.values()):
                    return  # idle: the next op_started starts a new ticker
                self._write(self.progress_line())


def _interval_from_env() -> float:
    text = os.environ.get("GPUEMU_PROGRESS_SECONDS", "")
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S
