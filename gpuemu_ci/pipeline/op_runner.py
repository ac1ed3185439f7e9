"""Runs planned cases through a pool and collects each op's judged cases into its OpResult.

Cases of every op are submitted in plan order and run on whichever worker is free, so they finish in any
order; everything an OpResult holds is computed so that the order does not matter (sums, maxima with the
lowest case index winning ties, failures sorted by case index). That is also what lets the shards of a suite
merge into exactly the document of an unsharded run (results/merge.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpuemu_ci.backends.interface import CaseAborted, CaseSpec, OpTask, Pool
from gpuemu_ci.calls import CaseReport
from gpuemu_ci.config.model import Config, OpSpec
from gpuemu_ci.errors import INPUTS_NOT_FROM_SEED, inputs_differ_message
from gpuemu_ci.pipeline import explain_rerun
from gpuemu_ci.pipeline.records import failure_record
from gpuemu_ci.plan.maxima import declared_maxima
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.progress import Observer
from gpuemu_ci.results.coverage import CoverageTally
from gpuemu_ci.results.model import (
    DotPrecision,
    DtypeResult,
    Failure,
    FailureKind,
    GradientResult,
    OpResult,
    OpStatus,
)
from gpuemu_ci.results.rules import (
    MAX_RECORDED_FAILURES,
    joined_reasons,
    merge_gradient,
    op_message,
    op_status,
    rows_reasons,
    triton_notes,
)
from gpuemu_ci.results.timings import OpTimings

STOPPED_BEFORE_EXPLAINING = "the run stopped before the failure's explain re-run"
WINDOW_PER_JOB = 8  # cases submitted ahead per job: workers never wait, a cut-short run wastes little


@dataclass
class OpTally:
    """One op x dtype's figures, from its cases in any order."""

    cases: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0  # not judged on this machine (too large for its memory, or Triton's interpreter on bf16)
    skip_reasons: set[str] = field(default_factory=set)
    from_corpus: int = 0
    call_us: int = 0  # whole microseconds: a sum that does not depend on the order cases arrive in
    worst_headroom: float | None = None
    worst_index: int | None = None
    worst_case: str | None = None
    max_abs_error: float | None = None
    comparator: str | None = None
    coverage: CoverageTally = field(default_factory=CoverageTally)
    gradients: dict[str, GradientResult] = field(default_factory=dict)  # input name -> worst so far

    def add(self, ref: CaseRef, report: CaseReport) -> None:
        """Counts one judged case of this dtype (its outcome, time, headroom and coverage)."""
        self.cases += 1
        self.from_corpus += ref.snapshot is not None
        self.call_us += round(report.call_s * 1e6)
        if report.outcome == "skipped":
            self.skipped += 1
            self.skip_reasons.add(skip_summary(report))
            self.coverage.skip(report.message)
            return
        if report.size_class:  # a case whose inputs were made (not one whose inputs hook failed)
            self.coverage.add(
                dims=report.dims,
                size_class=report.size_class,
                layouts=report.layouts.values(),
                mode=report.distribution,
                kwargs=report.kwargs,
                capped=report.capped,
            )
        if report.outcome == "errored":
            self.errored += 1
            return
        if report.outcome != "passed":
            self.failed += 1
        for figure in report.gradients:
            one = GradientResult(figure.of, figure.rule, figure.headroom, figure.max_abs_error)
            self.gradients[figure.of] = merge_gradient(self.gradients.get(figure.of), one)
        if report.comparator is None:
            return
        self.comparator = report.comparator
        headroom = report.headroom
        if headroom is not None and (
            self.worst_headroom is None
            or headroom > self.worst_headroom
            or (headroom == self.worst_headroom and ref.index < (self.worst_index or 0))
        ):
            self.worst_headroom, self.worst_index, self.worst_case = headroom, ref.index, ref.case_id
        if report.max_abs_error is not None:
            self.max_abs_error = max(self.max_abs_error or 0.0, report.max_abs_error)

    def row(self, dtype: str) -> DtypeResult:
        """The dtype's row of the results: status, counts, worst headroom and coverage."""
        return DtypeResult(
            dtype=dtype,
            status=op_status(self.cases, self.failed, self.errored, self.skipped),
            cases_total=self.cases,
            cases_failed=self.failed,
            cases_errored=self.errored,
            worst_headroom=self.worst_headroom,
            max_abs_error=self.max_abs_error,
            comparator=self.comparator,
            worst_case=self.worst_case,
            coverage=self.coverage.result(),
            cases_skipped=self.skipped,
            skip_reason=joined_reasons(self.skip_reasons),
            cases_from_corpus=self.from_corpus,
            duration_s=self.call_us / 1e6,
            gradients=tuple(self.gradients[name] for name in sorted(self.gradients)),
        )


def skip_summary(report: CaseReport) -> str:
    """Why a case was not judged here, in a few words (the coverage keeps each full reason)."""
    if report.interpreter_types:
        return report.message  # "Triton interpreter: bfloat16 unsupported"
    return "too large for this machine's memory"


def family_of(op: OpSpec) -> str | None:
    """The op's error-model family as results name it, or None when it declares none."""
    return op.error_model.family.value if op.error_model.family else None


def op_detail(total: int, failed: int, errored: int, skipped: int = 0) -> str:
    """The one-line count of an op's cases, as the summary and progress show it (`7/8 cases passed, 1
    failed`)."""
    detail = f"{total - failed - errored - skipped}/{total} cases passed"
    if skipped:
        detail += f", {skipped} not judged here"
    if failed:
        detail += f", {failed} failed"
    if errored:
        detail += f", {errored} errored"
    return detail


class OpCollector:
    """The judged cases of one op, arriving in any order -> its OpResult."""

    def __init__(
        self, config: Config, op: OpSpec, out_dir: Path | None = None, *, require_gpu: bool = False
    ) -> None:
        self.config = config
        self.op = op
        self.out_dir = out_dir  # where the judges wrote snapshots
        self.require_gpu = require_gpu
        self.need_gpu = 0  # cases only a GPU can judge (what Triton's interpreter cannot compute): errors
        self.triton_notes: set[str] = set()
        self.dot_precisions: set[DotPrecision] = set()
        self.tallies: dict[str, OpTally] = {}
        self.failing: list[tuple[CaseRef, CaseReport]] = []
        self.unloadable: tuple[CaseRef, CaseReport] | None = None
        self.interpreter: str | None = None
        self.triton_launches: dict[str, int] = {}
        self.inputs_differ = 0  # cases whose two sides built different inputs (not judged)
        self.timed = 0  # cases that came with a time split
        self.phase_us: dict[str, int] = {}  # whole microseconds per phase: sums independent of arrival order

    def add(self, ref: CaseRef, report: CaseReport) -> None:
        """Takes one case's report, in any order: counts it per dtype, keeps it if it failed, and notes an op
        that could not be loaded."""
        self._time(report)
        for how, count in report.triton_launches:
            self.triton_launches[how] = self.triton_launches.get(how, 0) + count
        if report.outcome == "unloadable":
            if self.unloadable is None or ref.index < self.unloadable[0].index:
                self.unloadable = (ref, report)
            return
        if report.outcome == "skipped" and report.interpreter_types:
            # What Triton's interpreter cannot compute as the GPU does is not checked: never part of a pass.
            self.need_gpu += 1
            report = msgspec.structs.replace(
                report,
                outcome="errored",
                kind="raised",
                message=f"not judged on this machine: {report.message}; a GPU runs it (replay it on one)",
            )
        for note in report.triton_notes:
            self.triton_notes.add(note)
        self.dot_precisions.update(report.dot_precisions)
        if report.dtype not in self.tallies:
            self.tallies[report.dtype] = OpTally(
                coverage=CoverageTally(
                    max_elements=self.op.shapes.max_elements, declared_max=declared_maxima(self.op)
                )
            )
        self.tallies[report.dtype].add(ref, report)
        if report.interpreter:
            self.interpreter = report.interpreter
        if report.outcome not in ("passed", "skipped"):
            self.failing.append((ref, report))
        if report.kind == FailureKind.INPUTS_DIFFER.value:
            self.inputs_differ += 1

    def _time(self, report: CaseReport) -> None:
        if not report.phases:
            return
        self.timed += 1
        for phase, seconds in report.phases.items():
            self.phase_us[phase] = self.phase_us.get(phase, 0) + round(seconds * 1e6)

    def _time_explained(self, rerun: CaseReport) -> None:
        """An explain re-run's seconds, all of them the explanation's (its case was timed when it was judged)."""
        spent = sum(round(seconds * 1e6) for seconds in rerun.phases.values())
        self.phase_us["explain"] = self.phase_us.get("explain", 0) + spent

    def timings(self) -> OpTimings | None:
        """The op's time split over the reports that carried one; None when none did (a run cut short early)."""
        return OpTimings.of_micros(self.timed, self.phase_us) if self.timed else None

    def recorded(self) -> list[tuple[CaseRef, CaseReport]]:
        """The failures the result records (the first MAX_RECORDED_FAILURES in plan order)."""
        self.failing.sort(key=lambda item: item[0].index)
        return self.failing[:MAX_RECORDED_FAILURES]

    def to_explain(self) -> list[tuple[CaseRef, CaseReport]]:
        """The recorded failures that get an explain re-run (pipeline/explain_rerun.py)."""
        return [(ref, report) for ref, report in self.recorded() if explain_rerun.wants_explaining(report)]

    def take_explanation(self, ref: CaseRef, rerun: CaseReport | None, why_not: str = "") -> None:
        """Case `ref`'s failure with what its explain re-run found (`rerun`; None: it did not finish, `why_not`).
        The error map the first run drew gives way to the explained one's (it marks the tiles)."""
        if rerun is not None:
            self._time_explained(rerun)
        for position, (known, report) in enumerate(self.failing):
            if known.index != ref.index:
                continue
            now = explain_rerun.with_explanation(report, rerun, why_not)
            self.failing[position] = (known, now)
            if report.error_map and report.error_map != now.error_map:
                self._drop_map(report.error_map)
            return

    def share_causes(self) -> None:
        """Once every explain re-run is in: a failure they found no cause for borrows another's
        (pipeline/explain_rerun.py)."""
        self.failing = explain_rerun.borrowed(self.failing)

    def _drop_map(self, path: str) -> None:
        if self.out_dir is None or any(r.error_map == path for _, r in self.failing):
            return
        with contextlib.suppress(OSError):
            (self.out_dir / path).unlink()

    def wants_snapshot(self, index: int) -> bool:
        """Whether a failure of case `index` could still be among the recorded ones."""
        earlier = sum(1 for ref, _ in self.failing if ref.index < index)
        return earlier < MAX_RECORDED_FAILURES

    def result(self, *, cut_short: bool = False) -> OpResult:
        """The op's result from every report added: the failures in plan order (the first
        MAX_RECORDED_FAILURES recorded, the others' snapshots deleted), one row per dtype, and the status;
        `cut_short` when the deadline stopped it."""
        if self.unloadable is not None:
            return self._unloadable(self.unloadable[1])
        recorded = self.recorded()
        failures = tuple(failure_record(self.config, ref, report) for ref, report in recorded)
        self._drop_unrecorded_snapshots(failures)
        order = [d for d in self.op.dtypes if d in self.tallies] + sorted(
            set(self.tallies) - set(self.op.dtypes)
        )
        rows = tuple(self.tallies[d].row(d) for d in order)
        total = sum(t.cases for t in self.tallies.values())
        failed = sum(t.failed for t in self.tallies.values())
        errored = sum(t.errored for t in self.tallies.values())
        skipped = sum(t.skipped for t in self.tallies.values())
        reasons = rows_reasons(rows)
        comparators = sorted({t.comparator for t in self.tallies.values() if t.comparator})
        status = op_status(total, failed, errored, skipped)
        return OpResult(
            name=self.op.name,
            status=status,
            family=family_of(self.op),
            comparator=",".join(comparators) or None,
            line=self.op.line,
            framework=self.op.targets.framework.value,
            interpreter=self.interpreter,
            triton_launches=dict(sorted(self.triton_launches.items())),
            skip_reason=reasons if status is OpStatus.SKIPPED else None,
            message=self._message(total, errored, failed, cut_short, skipped, reasons, failures),
            triton_dot_precisions=tuple(sorted(self.dot_precisions)),
            triton_notes=triton_notes(self.triton_notes),
            cases_total=total,
            cases_passed=total - failed - errored - skipped,
            cases_failed=failed,
            cases_errored=errored,
            dtypes=rows,
            failures=failures,
            failures_omitted=max(0, len(self.failing) - MAX_RECORDED_FAILURES),
            cases_skipped=skipped,
            timings=self.timings(),
        )

    def _message(
        self,
        total: int,
        errored: int,
        failed: int,
        cut_short: bool,
        skipped: int,
        reasons: str | None,
        failures: tuple[Failure, ...],
    ) -> str | None:
        if self.need_gpu and not failed:
            return (
                f"{self.need_gpu} of {total} cases need a GPU: Triton's interpreter cannot compute them as "
                "the GPU does (not judged)"
            )
        if self.inputs_differ and not failed:
            return (
                f"{self.inputs_differ} of {total} cases could not be judged: the op's worker and the judge's built "
                f"different inputs from the same seed. {INPUTS_NOT_FROM_SEED}"
            )
        return op_message(total, errored, failed, cut_short, skipped, reasons, failures)

    def _drop_unrecorded_snapshots(self, failures: tuple[Failure, ...]) -> None:
        """Snapshots of failures past the recorded ones were written before the order was known."""
        kept = {f.snapshot for f in failures}
        out_dir = self.out_dir
        if out_dir is None:
            return
        for _, report in self.failing[MAX_RECORDED_FAILURES:]:
            if report.snapshot and report.snapshot not in kept:
                with contextlib.suppress(OSError):
                    (out_dir / report.snapshot).unlink()

    def _unloadable(self, report: CaseReport) -> OpResult:
        return OpResult(
            name=self.op.name,
            status=OpStatus.ERROR,
            family=family_of(self.op),
            comparator=None,
            line=self.op.line,
            framework=self.op.targets.framework.value,
            interpreter=None,
            skip_reason=None,
            message=f"the {report.unloadable or 'op'} could not be loaded: {report.message}",
            cases_total=0,
            cases_passed=0,
            cases_failed=0,
            cases_errored=0,
            import_error=True,
            timings=self.timings(),
        )


@dataclass(frozen=True)
class OpPlan:
    """One op of a run: its task and the cases to run."""

    op: OpSpec
    task: OpTask
    cases: Sequence[CaseRef]


@dataclass
class _OpState:
    plan: OpPlan
    collector: OpCollector
    submitted: int = 0
    finished: int = 0
    pending: set[Future[CaseReport]] = field(default_factory=set)
    skipped: bool = False  # unloadable: its remaining cases are not run
    done: bool = False
    explaining: dict[Future[CaseReport], CaseRef] = field(default_factory=dict)  # explain re-runs in flight
    explain_started: bool = False


class SuiteRun:
    """Runs the cases of several ops through one pool: every op's cases spread over every worker.

    `deadline` (time.monotonic()): no case starts after it. `stop`: set it (from a signal handler) to stop at
    once; running cases are killed. Either leaves the run `cut_short`."""

    def __init__(
        self,
        config: Config,
        pool: Callable[[], Pool],
        observer: Observer,
        *,
        jobs: int = 1,
        deadline: float | None = None,
        stop: threading.Event | None = None,
        require_gpu: bool = False,
    ) -> None:
        self.require_gpu = require_gpu
        self.config = config
        self._pool_of = pool  # started on first use: a run stopped before its first case starts no worker
        self._pool: Pool | None = None
        self.observer = observer
        self.window = max(1, jobs) * WINDOW_PER_JOB + 2
        self.deadline = deadline
        self.stop = stop or threading.Event()
        self.cut_short = False

    @property
    def pool(self) -> Pool:
        """The worker pool, started on first use."""
        if self._pool is None:
            self._pool = self._pool_of()
        return self._pool

    def run(self, plans: Sequence[OpPlan]) -> dict[str, OpResult]:
        """Runs every plan's cases through one pool, all workers busy, and returns each op's result by name;
        stops starting cases at the deadline or on a signal, and reports progress to the observer."""
        states = [
            _OpState(plan, OpCollector(self.config, plan.op, plan.task.out_dir, require_gpu=self.require_gpu))
            for plan in plans
        ]
        owner: dict[Future[CaseReport], tuple[_OpState, CaseRef]] = {}
        results: dict[str, OpResult] = {}
        started: set[str] = set()
        stopped = False
        try:
            while True:
                if not stopped and (self.stop.is_set() or self._expired()):
                    stopped = True
                    self.cut_short = True
                    if self.stop.is_set() and self._pool is not None:
                        self._pool.abort()  # kills running cases: stop within seconds
                    for future in list(owner):
                        future.cancel()  # queued cases never start
                if not stopped:
                    self._submit(states, owner, started)
                self._finish_ops(states, results, stopped, owner)
                if not owner:
                    break
                timeout = (
                    0.2 if self.deadline is None else max(0.0, min(0.2, self.deadline - time.monotonic()))
                )
                done, _ = wait(list(owner), timeout=timeout, return_when=FIRST_COMPLETED)
                for future in done:
                    state, ref = owner.pop(future)
                    state.pending.discard(future)
                    if state.explaining.pop(future, None) is not None:
                        self._take_explanation(state, ref, future)
                    else:
                        self._collect(state, ref, future)
            self._finish_ops(states, results, stopped, owner)
        finally:
            for future in owner:
                future.cancel()
        return results

    def _expired(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def _submit(
        self,
        states: list[_OpState],
        owner: dict[Future[CaseReport], tuple[_OpState, CaseRef]],
        started: set[str],
    ) -> None:
        for state in states:
            while len(owner) < self.window and not state.skipped and state.submitted < len(state.plan.cases):
                ref = state.plan.cases[state.submitted]
                if state.plan.op.name not in started:
                    started.add(state.plan.op.name)
                    self.observer.op_started(state.plan.op.name, len(state.plan.cases))
                spec = CaseSpec(
                    ref.seed,
                    ref.index,
                    snapshot=ref.snapshot,
                    # a corpus case's inputs are already a file: no copy of them is written
                    snapshot_wanted=ref.snapshot is None and state.collector.wants_snapshot(ref.index),
                )
                future = self.pool.submit(state.plan.task, spec)
                state.submitted += 1
                state.pending.add(future)
                owner[future] = (state, ref)
            if len(owner) >= self.window:
                return

    def _collect(self, state: _OpState, ref: CaseRef, future: Future[CaseReport]) -> None:
        if future.cancelled() or isinstance(future.exception(), CaseAborted):
            return  # not run: the run was cut short
        error = future.exception()
        if error is not None:
            raise error  # the pool could not run anything (InfraError)
        report = future.result()
        if report.outcome == "inputs_differ":  # that case cannot be judged: the op's error, the run goes on
            message = inputs_differ_message(
                ref.case_id, ref.seed, report.op_inputs_digest or "", report.inputs_digest or ""
            )
            report = msgspec.structs.replace(
                report, outcome="errored", kind=FailureKind.INPUTS_DIFFER.value, message=message
            )
        state.finished += 1
        state.collector.add(ref, report)
        if report.outcome == "unloadable" and not state.skipped:
            state.skipped = True  # the config is wrong: the other cases of this op would say the same
            for pending in list(state.pending):
                pending.cancel()
            return
        if report.outcome not in ("unloadable", "skipped"):
            self.observer.case_done(state.plan.op.name, report.outcome == "passed")

    def _take_explanation(self, state: _OpState, ref: CaseRef, future: Future[CaseReport]) -> None:
        if future.cancelled() or isinstance(future.exception(), CaseAborted):
            state.collector.take_explanation(ref, None, STOPPED_BEFORE_EXPLAINING)
            return
        error = future.exception()
        if error is not None:
            raise error  # the pool could not run anything (InfraError)
        state.collector.take_explanation(ref, future.result())

    def _explain(self, state: _OpState, owner: dict[Future[CaseReport], tuple[_OpState, CaseRef]]) -> None:
        """Submits the explain re-runs of the op's recorded failures, once, when all its cases are judged."""
        state.explain_started = True
        for ref, failure in state.collector.to_explain():
            future = self.pool.submit(state.plan.task, explain_rerun.explain_spec(ref, failure))
            state.pending.add(future)
            state.explaining[future] = ref
            owner[future] = (state, ref)

    def _finish_ops(
        self,
        states: list[_OpState],
        results: dict[str, OpResult],
        stopped: bool,
        owner: dict[Future[CaseReport], tuple[_OpState, CaseRef]],
    ) -> None:
        for state in states:
            if state.done or state.pending:
                continue
            complete = state.skipped or state.submitted == len(state.plan.cases)
            if not complete and not stopped:
                continue
            if not state.explain_started and not state.skipped:
                if complete and not stopped:
                    self._explain(state, owner)
                    if state.pending:
                        continue
                else:
                    for ref, _ in state.collector.to_explain():
                        state.collector.take_explanation(ref, None, STOPPED_BEFORE_EXPLAINING)
            state.collector.share_causes()
            state.done = True
            short = state.finished < len(state.plan.cases) and not state.skipped
            result = state.collector.result(cut_short=short)
            results[state.plan.op.name] = result
            if result.import_error:
                self.observer.op_finished(result.name, "error", result.message or "")
            else:
                self.observer.op_finished(
                    result.name,
                    result.status.value,
                    op_detail(
                        result.cases_total, result.cases_failed, result.cases_errored, result.cases_skipped
                    ),
                )
