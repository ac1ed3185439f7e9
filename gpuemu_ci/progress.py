"""Progress reporting on stderr: a bar on a terminal, plain lines in CI logs. Stages report, never print."""

from __future__ import annotations

import sys
import threading
from typing import Protocol, TextIO


class Observer(Protocol):
    def op_started(self, op: str, cases: int) -> None: ...
    def case_done(self, op: str, passed: bool) -> None: ...
    def op_finished(self, op: str, status: str, detail: str) -> None: ...
    def note(self, text: str) -> None: ...


class Silent:
    def op_started(self, op: str, cases: int) -> None:
        pass

    def case_done(self, op: str, passed: bool) -> None:
        pass

    def op_finished(self, op: str, status: str, detail: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass


class StderrReporter:
    """Plain lines when stderr is not a terminal (CI logs stay readable); a one-line bar per op otherwise."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self._lock = threading.Lock()
        self._counts: dict[str, list[int]] = {}

    def op_started(self, op: str, cases: int) -> None:
        with self._lock:
            self._counts[op] = [0, cases, 0]
            if not self.interactive:
                self.stream.write(f"gpuemu-ci: {op}: {cases} cases\n")
                self.stream.flush()

    def case_done(self, op: str, passed: bool) -> None:
        with self._lock:
            done, total, failed = self._counts.setdefault(op, [0, 0, 0])
            self._counts[op] = [done + 1, total, failed + (0 if passed else 1)]
            if self.interactive:
                done, total, failed = self._counts[op]
                width = 24
                filled = width * done // max(total, 1)
                bar = "#" * filled + "-" * (width - filled)
                self.stream.write(f"\r  {op:<24} [{bar}] {done}/{total} failed {failed}")
                self.stream.flush()

    def op_finished(self, op: str, status: str, detail: str) -> None:
        with self._lock:
            prefix = "\r" + " " * 80 + "\r" if self.interactive else ""
            self.stream.write(f"{prefix}  {status.upper():<8} {op}: {detail}\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        with self._lock:
            self.stream.write(f"gpuemu-ci: {text}\n")
            self.stream.flush()
