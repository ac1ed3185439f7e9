"""The time split of a case (results/timings.PHASES), measured where it is spent: each worker clocks the
stages it reports anyway (protocol.Stage) and sends the seconds with its reply; the pool adds what only it
sees (starting workers, the time between its clock and the worker's) and hands the sum on with the case's
report. Clock readings only: nothing here reaches a verdict."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from gpuemu_ci.backends.protocol import Stage
from gpuemu_ci.results.timings import PHASES
from gpuemu_ci.triton_cpu import spent

# Which phase a worker's stage belongs to (IDLE: none, the worker waits for the pool).
STAGE_PHASE: dict[Stage, str | None] = {
    Stage.IDLE: None,
    Stage.LOADING: "load",
    Stage.GENERATING: "inputs",
    Stage.OP: "op",
    Stage.RERUN: "op",
    Stage.PROBE: "op",
    Stage.REFERENCE: "reference",
    Stage.REFERENCE_ABS: "reference",
    Stage.NAIVE: "reference",
    Stage.JUDGING: "judge",
    Stage.REPLY: "transport",
}


class PhaseClock:
    """A worker's seconds per phase for the side it runs: `start()` when a side begins, `mark(stage)` at each
    stage, `reading()` when it replies."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._phase: str | None = None
        self._since = time.perf_counter()

    def start(self) -> None:
        """Begins a side: forgets the previous side's seconds and any launch preparation counted before it."""
        self._seconds, self._phase, self._since = {}, None, time.perf_counter()
        spent.take()  # what an earlier side left uncounted is not this one's

    def mark(self, stage: Stage) -> None:
        """Closes the current phase at `stage`: its seconds so far go to its total, and `stage`'s phase begins."""
        now = time.perf_counter()
        if self._phase is not None:
            self._seconds[self._phase] = self._seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = STAGE_PHASE.get(stage), now

    def reading(self) -> dict[str, float]:
        """The seconds so far (the current stage's included); Triton launch preparation, which ran inside the
        op's calls, moved out of them."""
        now = time.perf_counter()
        seconds = dict(self._seconds)
        if self._phase is not None:
            seconds[self._phase] = seconds.get(self._phase, 0.0) + now - self._since
        prepared = min(spent.take(), seconds.get("op", 0.0))
        if prepared > 0:
            seconds["op"] -= prepared
            seconds["triton_prepare"] = seconds.get("triton_prepare", 0.0) + prepared
        return seconds


def charge(into: dict[str, float], reported: Mapping[str, object], side_s: float) -> None:
    """Add a side's split as its worker reported it to a case's, and the rest of the side's time in the pool
    (`side_s`) as transport. A worker runs user code, so its figures are bounded here, never trusted: unknown
    phases are dropped, each figure is kept within [0, side_s]."""
    measured = 0.0
    for phase, value in reported.items():
        if phase not in PHASES or not isinstance(value, float | int) or not math.isfinite(value):
            continue
        seconds = min(max(float(value), 0.0), max(side_s - measured, 0.0))
        into[phase] = into.get(phase, 0.0) + seconds
        measured += seconds
    into["transport"] = into.get("transport", 0.0) + max(side_s - measured, 0.0)


def charge_stage(into: dict[str, float], stage: Stage, side_s: float) -> None:
    """A side that ended without a reply (killed, crashed): its whole time to the phase it was in."""
    phase = STAGE_PHASE.get(stage) or "transport"
    into[phase] = into.get(phase, 0.0) + max(side_s, 0.0)
