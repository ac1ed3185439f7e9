"""Runs batches of cases (the original op's suite, then each mutant's) through one worker pool, every worker
busy, and keeps each case's report.

A batch that stops at its first failure (a mutant: one failing case kills it) never starts a case after a
failing one and cancels those queued, but every case before it still runs, so the failure it records, the
first in plan order, is the same whatever order the workers finish in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

from gpuemu_ci.backends.interface import CaseAborted, CaseSpec, OpTask, Pool
from gpuemu_ci.calls import CaseReport
from gpuemu_ci.errors import InputsDiffer
from gpuemu_ci.plan.model import CaseRef


@dataclass
class Batch:
    """The cases of one task. `reports[i]` is the report of `cases[i]`."""

    task: OpTask
    cases: Sequence[CaseRef]
    stop_at_failure: bool = False
    snapshots: Callable[[int], bool] = lambda index: (
        False
    )  # whether a failure of case `index` keeps its inputs
    reports: dict[int, CaseReport] = field(default_factory=dict)
    first_failure: int | None = None
    cut_short: bool = False  # the deadline stopped it before its cases were all run
    started: bool = False
    _next: int = 0
    _pending: dict[Future[CaseReport], int] = field(default_factory=dict)

    @property
    def limit(self) -> int:
        """How many cases the batch runs: all of them, or up to and including its first failure when it stops
        there."""
        return len(self.cases) if self.first_failure is None else self.first_failure + 1

    @property
    def done(self) -> bool:
        """Whether every case up to `limit` has been started and none is still running."""
        return not self._pending and self._next >= self.limit


def run_batches(
    pool: Pool,
    batches: Sequence[Batch],
    *,
    window: int,
    deadline: float | None = None,
    on_done: Callable[[Batch], None] = lambda batch: None,
    on_started: Callable[[Batch], None] = lambda batch: None,
) -> bool:
    """Runs the batches, the earlier first, at most `window` cases queued at once; `on_done(batch)` as each
    finishes. Returns whether the deadline cut the run short (no case starts after it; the batches left are
    `cut_short`)."""
    owner: dict[Future[CaseReport], Batch] = {}
    finished: set[int] = set()
    expired = False
    try:
        while True:
            if not expired and deadline is not None and time.monotonic() > deadline:
                expired = True
                for future in list(owner):
                    future.cancel()
            if not expired:
                _submit(pool, batches, owner, window, on_started)
            for index, batch in enumerate(batches):
                if index not in finished and (batch.done or (expired and not batch._pending)):
                    finished.add(index)
                    batch.cut_short = not batch.done
                    on_done(batch)
            if not owner:
                if len(finished) == len(batches):
                    return expired
                continue
            done, _ = wait(list(owner), timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                _collect(owner.pop(future), future)
    finally:
        for future in owner:
            future.cancel()


def _submit(
    pool: Pool,
    batches: Sequence[Batch],
    owner: dict[Future[CaseReport], Batch],
    window: int,
    on_started: Callable[[Batch], None],
) -> None:
    for batch in batches:
        while len(owner) < window and batch._next < batch.limit:
            ref = batch.cases[batch._next]
            if not batch.started:
                batch.started = True
                on_started(batch)
            spec = CaseSpec(
                ref.seed, ref.index, snapshot=ref.snapshot, snapshot_wanted=batch.snapshots(ref.index)
            )
            future = pool.submit(batch.task, spec)
            batch._pending[future] = batch._next
            owner[future] = batch
            batch._next += 1
        if len(owner) >= window:
            return


def _collect(batch: Batch, future: Future[CaseReport]) -> None:
    position = batch._pending.pop(future)
    if future.cancelled() or isinstance(future.exception(), CaseAborted):
        return
    error = future.exception()
    if error is not None:
        raise error  # the pool could not run anything (InfraError)
    report = future.result()
    if report.outcome == "inputs_differ":
        ref = batch.cases[position]
        raise InputsDiffer(ref.case_id, ref.seed, report.op_inputs_digest or "", report.inputs_digest or "")
    batch.reports[position] = report
    failed = report.outcome == "failed" or report.outcome == "unloadable"
    if batch.stop_at_failure and failed and (batch.first_failure is None or position < batch.first_failure):
        batch.first_failure = position
        for pending, later in list(batch._pending.items()):
            if later > position:
                pending.cancel()  # a queued case after the failure never starts
