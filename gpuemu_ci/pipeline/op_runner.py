"""Runs the planned cases of one op through a worker pool and judges each: -> OpResult."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuemu_ci.backends.interface import CallStatus, CallTarget, CaseJob, CaseRun, Pool
from gpuemu_ci.config.model import Config, Layout, OpSpec
from gpuemu_ci.fuzz.case import CaseInputs, build_case
from gpuemu_ci.oracle import bounds
from gpuemu_ci.oracle.judge import CaseContext, comparator_for, judge
from gpuemu_ci.oracle.model import Comparator
from gpuemu_ci.pipeline.records import CaseOutcome, failure_record
from gpuemu_ci.pipeline.targets import naive_target, op_target, reference_target
from gpuemu_ci.plan.model import CaseRef, ValueMode
from gpuemu_ci.progress import Observer
from gpuemu_ci.results.base import json_float
from gpuemu_ci.results.model import DtypeResult, Failure, OpResult, OpStatus

MAX_RECORDED_FAILURES = 20  # per op; the rest are counted (snapshots cost disk and comment space)


# Cases generated and queued ahead of the one being judged: enough that a worker never waits for the parent
# and that the parent generates while workers boot, few enough that a suite cut short wastes little.
MAX_QUEUED = 64
MAX_QUEUED_BYTES = 64 << 20  # inputs held by queued cases (a single larger case still runs)


@dataclass(frozen=True)
class _Queued:
    ref: CaseRef
    case: CaseInputs
    job: CaseJob
    future: Future[CaseRun]
    nbytes: int


def _has_room(window: deque[_Queued]) -> bool:
    return not window or (len(window) < MAX_QUEUED and sum(q.nbytes for q in window) < MAX_QUEUED_BYTES)


@dataclass
class OpTally:
    """Accumulates case outcomes into per-dtype figures."""

    cases: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0  # ran in Triton's interpreter on a type it mishandles: not judged
    worst_headroom: float | None = None
    max_abs_error: float | None = None
    comparator: str | None = None
    worst_case: str | None = None

    def add(self, outcome: CaseOutcome) -> None:
        self.cases += 1
        if outcome.verdict is None:
            self.errored += 1
            return
        if not outcome.verdict.passed:
            self.failed += 1
        stats = outcome.verdict.stats
        if stats is None:
            return
        self.comparator = stats.comparator.value
        if stats.headroom is not None and (
            self.worst_headroom is None or stats.headroom > self.worst_headroom
        ):
            self.worst_headroom = stats.headroom
            self.worst_case = outcome.ref.case_id
        if stats.max_abs_error is not None:
            self.max_abs_error = max(self.max_abs_error or 0.0, stats.max_abs_error)


@dataclass
class OpRunner:
    config: Config
    op: OpSpec
    pool: Pool
    out_dir: Path
    master_seed: int
    observer: Observer
    deadline: float | None = None  # time.monotonic() value after which no new case starts
    target: CallTarget | None = None  # instead of the op's own (a [[kernels]] entry launched through CuPy)
    interpreter: str | None = None
    require_gpu: bool = False  # a case that cannot be judged without a GPU is then an error, not a skip
    cut_short: bool = False
    _failures: list[Failure] = field(default_factory=list)
    _constants: dict[str, tuple[CallTarget, CallTarget, float, tuple[str, ...]]] = field(default_factory=dict)
    _error_scale: Callable[..., Any] | None = None
    _interpreter_types: set[str] = field(default_factory=set)

    def run(self, cases: Sequence[CaseRef]) -> OpResult:
        """Runs and judges `cases` in order. With a pool that has `submit`, the next cases are generated and
        queued while a worker computes, and finished ones are judged meanwhile (results keep case order).
        Once the deadline has passed no further case starts: queued cases no worker has begun are dropped."""
        self.observer.op_started(self.op.name, len(cases))
        tallies: dict[str, OpTally] = {}
        omitted = 0
        error_scale = self.error_scale_hook()
        window: deque[_Queued] = deque()  # submitted cases, oldest first
        upcoming = 0
        stopped = False  # the deadline passed: nothing more starts
        try:
            while True:
                if not stopped and self._expired():
                    kept = deque(q for q in window if not q.future.cancel())  # running ones cannot be
                    self.cut_short = upcoming < len(cases) or len(kept) < len(window)
                    upcoming, window, stopped = len(cases), kept, True
                head_ready = bool(window) and window[0].future.done()
                if not head_ready and upcoming < len(cases) and _has_room(window):
                    window.append(self._submit(cases[upcoming]))
                    upcoming += 1
                    continue
                if not window:
                    break
                if not head_ready and not stopped and self.deadline is not None:
                    wait((window[0].future,), timeout=max(0.0, self.deadline - time.monotonic()) + 1e-3)
                    continue  # finished, or the deadline passed while waiting
                queued = window.popleft()
                run = queued.future.result()
                if self._interpreter_cannot_judge(run):
                    tally = tallies.setdefault(queued.case.dtype, OpTally())
                    tally.cases += 1
                    if self.require_gpu:
                        tally.errored += 1
                    else:
                        tally.skipped += 1
                    self.observer.case_done(self.op.name, not self.require_gpu)
                    continue
                outcome = self._finish(queued.ref, queued.case, queued.job, run, error_scale)
                if outcome.run.op.status is CallStatus.IMPORT_ERROR or (
                    outcome.run.reference.status is CallStatus.IMPORT_ERROR
                ):
                    return self._import_failure(outcome)
                tallies.setdefault(outcome.inputs.dtype, OpTally()).add(outcome)
                passed = outcome.verdict is not None and outcome.verdict.passed
                self.observer.case_done(self.op.name, passed)
                if not passed:
                    if len(self._failures) < MAX_RECORDED_FAILURES:
                        self._failures.append(
                            failure_record(self.config, self.op, self.master_seed, self.out_dir, outcome)
                        )
                    else:
                        omitted += 1
        finally:
            for queued in window:  # an early return or an error: cases not started yet are not run
                queued.future.cancel()
        return self._result(tallies, omitted)

    def _interpreter_cannot_judge(self, run: CaseRun) -> bool:
        """Whether the case ran in Triton's interpreter on a type it mishandles (backends.triton_probe)."""
        if not (run.interpreter and run.interpreter_types):
            return False
        self.interpreter = run.interpreter
        self._interpreter_types.update(run.interpreter_types)
        return True

    def _expired(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    # --- one case ---------------------------------------------------------------------------------------
    def run_case(self, ref: CaseRef, inputs: CaseInputs | None = None) -> CaseOutcome:
        """Builds (unless `inputs` is given), runs and judges one case, waiting for it."""
        case = inputs if inputs is not None else build_case(self.op, ref.seed, self.config.root)
        job = self._job(case)
        run = self.pool.run(job)
        if self._interpreter_cannot_judge(run):
            from gpuemu_ci.errors import InfraError

            raise InfraError(
                f"case {ref.case_id} of op {self.op.name!r} ran in Triton's CPU interpreter on "
                f"{', '.join(run.interpreter_types)}, which the interpreter computes wrongly "
                f"({interpreter_reason(set(run.interpreter_types))}); replay it on a machine with a GPU"
            )
        return self._finish(ref, case, job, run, self.error_scale_hook())

    def _submit(self, ref: CaseRef) -> _Queued:
        case = build_case(self.op, ref.seed, self.config.root)
        job = self._job(case)
        future = self.pool.submit(job)
        nbytes = sum(a.nbytes for a in case.arrays.values()) + sum(a.nbytes for a in case.logical.values())
        return _Queued(ref, case, job, future, nbytes)

    def _job(self, case: CaseInputs) -> CaseJob:
        constants = self._constants.get(case.dtype)
        if constants is None:  # per op and dtype: the targets, the timeout and what the |x| reference needs
            root = self.config.root
            bound = comparator_for(self.op, case.dtype) is Comparator.BOUND
            constants = self._constants[case.dtype] = (
                self.target or op_target(self.op, root),
                reference_target(self.op, root),
                self.op.execution.timeout_s or self.config.ci.case_timeout,
                bounds.abs_linear_inputs(self.op) if bound else (),
            )
        op, reference, timeout, abs_inputs = constants
        return CaseJob(
            op=op,
            reference=reference,
            inputs=case.arrays,
            kwargs=case.kwargs,
            timeout_s=timeout,
            rerun_for_determinism=self.op.execution.deterministic,
            out_arg=self.op.execution.out_arg,
            out_dtype=self.op.output_dtype or case.dtype,
            abs_reference_inputs=abs_inputs,
        )

    def _finish(
        self,
        ref: CaseRef,
        case: CaseInputs,
        job: CaseJob,
        run: CaseRun,
        error_scale: Callable[..., Any] | None,
    ) -> CaseOutcome:
        """Judges a finished run (running the naive implementation first for baseline-relative ops)."""
        root = self.config.root
        if run.interpreter:
            self.interpreter = run.interpreter
        if run.reference.status is not CallStatus.OK:
            return CaseOutcome(ref, case, run, None)
        naive_output = None
        naive = naive_target(self.op, root)
        if naive is not None and run.op.status is CallStatus.OK:
            naive_run = self.pool.run(
                CaseJob(
                    op=naive,
                    reference=job.reference,
                    inputs=case.arrays,
                    kwargs=case.kwargs,
                    timeout_s=job.timeout_s,
                )
            )
            if naive_run.op.status is not CallStatus.OK or not naive_run.op.outputs:
                return CaseOutcome(ref, case, naive_run, None)
            naive_output = naive_run.op.outputs[0]
        context = CaseContext(
            case.dtype,
            case.dims,
            case.kwargs,
            case.logical,
            naive_output,
            error_scale,
            bias_test=case.stratum.mode is ValueMode.REGULAR
            and all(c.layout is not Layout.BROADCAST for c in case.layouts.values()),
            # Sorted values, and real data (captured), may sum correlated addends: the bound assumes g(n) = n.
            correlated=case.stratum.mode in (ValueMode.ASCENDING, ValueMode.CAPTURED)
            or bounds.constant_along_reduction(
                self.op,
                {
                    name: c.broadcast_dim
                    for name, c in case.layouts.items()
                    if c.layout is Layout.BROADCAST and c.broadcast_dim is not None
                },
            ),
        )
        return CaseOutcome(ref, case, run, judge(self.op, context, run, self.config.validation), naive_output)

    def error_scale_hook(self) -> Callable[..., Any] | None:
        """The op's `error_scale` hook (custom family), loaded once."""
        spec = self.op.targets.error_scale
        if spec is None:
            return None
        if self._error_scale is None:
            self._error_scale = self._load_hook(spec)
        return self._error_scale

    def _load_hook(self, spec: str) -> Callable[..., Any]:
        from gpuemu_ci.backends.loading import LoadError, load_callable
        from gpuemu_ci.errors import ConfigError

        try:
            hook: Callable[..., Any] = load_callable(spec, self.config.root)
        except LoadError as exc:
            raise ConfigError(
                f"op {self.op.name!r}: error_scale hook {spec!r} does not import: {exc}", line=self.op.line
            ) from None
        return hook

    def _import_failure(self, outcome: CaseOutcome) -> OpResult:
        failed = outcome.run.op if outcome.run.op.status is CallStatus.IMPORT_ERROR else outcome.run.reference
        who = "op" if failed is outcome.run.op else "reference"
        message = f"the {who} could not be loaded: {failed.message}"
        self.observer.op_finished(self.op.name, "error", message)
        return OpResult(
            name=self.op.name,
            status=OpStatus.ERROR,
            family=_family(self.op),
            comparator=None,
            line=self.op.line,
            framework=self.op.targets.framework.value,
            interpreter=None,
            skip_reason=None,
            message=message,
            cases_total=0,
            cases_passed=0,
            cases_failed=0,
            cases_errored=0,
            import_error=True,
        )

    def _result(self, tallies: dict[str, OpTally], omitted: int) -> OpResult:
        total = sum(t.cases for t in tallies.values())
        failed = sum(t.failed for t in tallies.values())
        errored = sum(t.errored for t in tallies.values())
        skipped = sum(t.skipped for t in tallies.values())
        reason = interpreter_reason(self._interpreter_types)
        dtype_results = tuple(
            DtypeResult(
                dtype=dtype,
                status=_status(t.cases - t.skipped, t.failed, t.errored, t.skipped),
                cases_total=t.cases,
                cases_failed=t.failed,
                cases_errored=t.errored,
                worst_headroom=json_float(t.worst_headroom),
                max_abs_error=json_float(t.max_abs_error),
                comparator=t.comparator,
                worst_case=t.worst_case,
                cases_skipped=t.skipped,
                skip_reason=reason if t.skipped else None,
            )
            for dtype, t in tallies.items()
        )
        status = _status(total - skipped, failed, errored, skipped)
        message = None
        if total == 0:
            message = "no case ran" + (" (the suite timeout expired first)" if self.cut_short else "")
        elif errored and not failed and self._interpreter_types and self.require_gpu:
            message = f"{errored} of {total} cases need a GPU ({reason}; --require-gpu)"
        elif errored and not failed:
            message = f"{errored} of {total} cases could not be judged (the reference failed)"
        elif skipped:
            message = f"{skipped} of {total} cases skipped ({reason}): not tested"
        comparators = sorted({t.comparator for t in tallies.values() if t.comparator})
        detail = f"{total - failed - errored - skipped}/{total} cases passed"
        if skipped:
            detail += f", {skipped} skipped ({reason})"
        if failed:
            detail += f", {failed} failed"
        if errored:
            detail += f", {errored} errored"
        self.observer.op_finished(self.op.name, status.value, detail)
        return OpResult(
            name=self.op.name,
            status=status,
            family=_family(self.op),
            comparator=",".join(comparators) or None,
            line=self.op.line,
            framework=self.op.targets.framework.value,
            interpreter=self.interpreter,
            skip_reason=reason if status is OpStatus.SKIPPED else None,
            message=message,
            cases_total=total,
            cases_passed=total - failed - errored - skipped,
            cases_failed=failed,
            cases_errored=errored,
            dtypes=dtype_results,
            failures=tuple(self._failures),
            failures_omitted=omitted,
            cases_skipped=skipped,
        )


def _status(judged: int, failed: int, errored: int, skipped: int = 0) -> OpStatus:
    if failed:
        return OpStatus.FAILED
    if errored:
        return OpStatus.ERROR
    if judged == 0:
        return OpStatus.SKIPPED if skipped else OpStatus.ERROR
    return OpStatus.PASSED


def interpreter_reason(types: set[str] | frozenset[str]) -> str:
    """`Triton interpreter: bfloat16 unsupported` (the types it mishandled, in words)."""
    return f"Triton interpreter: {', '.join(sorted(types)) or 'bfloat16'} unsupported"


def _family(op: OpSpec) -> str | None:
    return op.error_model.family.value if op.error_model.family else None
