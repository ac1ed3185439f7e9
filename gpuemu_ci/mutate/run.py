"""`gpuemu-ci mutate`: plant known bugs in the op's own kernels and see which ones its suite lets through.

1. The original suite runs, as `gpuemu-ci run` would run it, in the usual isolated workers; each case reports
   the op's outputs bit for bit (a digest) and the Triton functions it ran (the census).
2. The operators (triton_operators.py) change the kernels of the census; mutants are numbered and selected
   from the seed (plan.py).
3. Each mutant runs the same cases in the same workers, its kernel swapped in memory (backends/mutant.py):
   killed at its first failing case, else survived, or `equivalent?` when its outputs are the original's on
   every case. Verdicts are cached by the kernel's source, the change, the config, the seed and the
   original's outputs (cache.py).

The document is the original run's results.json with a `mutation` part.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gpuemu_ci.backends.interface import LaunchedKernel, OpTask
from gpuemu_ci.clock import utc_now
from gpuemu_ci.config.model import Config, OpSpec
from gpuemu_ci.errors import ExitCode, UsageError
from gpuemu_ci.files import check_output_dir
from gpuemu_ci.lint.model import LintReport
from gpuemu_ci.mutate.batches import Batch, run_batches
from gpuemu_ci.mutate.cache import VerdictCache
from gpuemu_ci.mutate.hints import hint
from gpuemu_ci.mutate.plan import Mutant, all_mutants, kernel_sources, operators_named, ordered
from gpuemu_ci.pipeline.gate import Ran, diffed, run_document
from gpuemu_ci.pipeline.op_runner import OpCollector, op_detail
from gpuemu_ci.pipeline.session import DETECT, Session
from gpuemu_ci.pipeline.settings import RunOptions, Settings, select_ops
from gpuemu_ci.pipeline.shard import Shard
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.progress import Observer, Silent
from gpuemu_ci.results.model import GpuInfo, OpResult, OpStatus, Results, Verdict
from gpuemu_ci.results.mutation import MutantResult, MutantStatus, MutationReport, OpMutation

WINDOW_PER_JOB = 4  # cases queued per job: workers never wait, and a killed mutant wastes little
MIN_MUTANT_TIMEOUT_S = 10.0
TIMEOUT_FACTOR = 10.0  # a mutant's case may take this many times the original's slowest case


@dataclass(frozen=True)
class MutateOptions:
    run: RunOptions
    max_mutants: int | None = None  # per op
    operators: tuple[str, ...] = ()  # by name; empty: all
    cache_dir: Path | None = None  # None: no cache
    min_score: float | None = None  # an op scored below it fails the run (exit 1)


@dataclass
class _Op:
    """One op through the run: its cases and the original's reports, then its mutants."""

    spec: OpSpec
    task: OpTask
    cases: list[CaseRef]
    original: Batch
    result: OpResult | None = None
    mutants: list[Mutant] = dataclasses.field(default_factory=list)
    planned: int = 0
    kernels: tuple[str, ...] = ()
    results: dict[str, MutantResult] = dataclasses.field(default_factory=dict)
    message: str | None = None


def run_mutation(
    config: Config,
    options: MutateOptions,
    *,
    observer: Observer | None = None,
    gpu: GpuInfo | str | None = DETECT,
) -> Results:
    """The original suite of every selected op, then its mutants; the results document with its `mutation`
    part, its verdict decided (an original that fails, or a score under --min-score, fails the run)."""
    started, started_at = time.monotonic(), utc_now()
    observer = observer or Silent()
    try:
        operators = operators_named(options.operators)
    except ValueError as exc:
        raise UsageError(f"--operator: {exc}") from None
    run = dataclasses.replace(options.run, shard=None)  # mutants are sharded, not cases
    settings = Settings.resolve(config, run)
    check_output_dir(settings.out_dir)
    ops = [op for op in select_ops(config, run.ops) if op in config.ops]
    if not ops:
        raise UsageError("mutate changes the Triton kernels of [[ops]] entries: none is selected")
    deadline = started + settings.timeout_s
    cache = VerdictCache(options.cache_dir) if options.cache_dir is not None else None
    with Session(config, settings, observer=observer, gpu=gpu) as session:
        session.start()
        states = []
        for op in ops:
            task, cases = session.task(op), session.plan(op)
            collector = OpCollector(config, op, settings.out_dir)
            states.append(_Op(op, task, cases, Batch(task, cases, snapshots=collector.wants_snapshot)))
        observer.suite_planned({s.spec.name: len(s.cases) for s in states})
        window = settings.jobs * WINDOW_PER_JOB + 2

        def original_started(batch: Batch) -> None:
            observer.op_started(batch.task.op.name, len(batch.cases))

        def original_done(batch: Batch) -> None:
            state = next(s for s in states if s.original is batch)
            state.result = _op_result(config, state, settings)
            observer.op_finished(
                state.spec.name,
                state.result.status.value,
                op_detail(
                    state.result.cases_total,
                    state.result.cases_failed,
                    state.result.cases_errored,
                    state.result.cases_skipped,
                ),
            )

        cut_short = run_batches(
            session.pool,
            [s.original for s in states],
            window=window,
            deadline=deadline,
            on_done=original_done,
            on_started=original_started,
        )
        for state in states:
            _plan_mutants(state, operators, options, settings, config.root)
        cut_short = (
            _run_mutants(session, states, options, settings, config, cache, window, deadline, observer)
            or cut_short
        )
        gpu_seen = session.gpu
    op_results = tuple(s.result for s in states if s.result is not None)
    report = MutationReport(
        operators=tuple(op.name for op in operators),
        max_mutants=options.max_mutants,
        min_score=options.min_score,
        ops=tuple(_op_mutation(s, options.run.shard) for s in states),
        cut_short=cut_short,
        duration_s=round(time.monotonic() - started, 3),
    )
    lint = LintReport.disabled("mutate runs no lint")
    ran = Ran(op_results, cut_short, None, lint, gpu_seen)
    notes = (
        (f"the time budget ({settings.timeout_s:g} s) ran out: mutants left were not run",)
        if cut_short
        else ()
    )
    document = diffed(run_document(config, settings, ran, notes, (started, started_at)), config, None)
    return _with_mutation(document, report)


def _op_result(config: Config, state: _Op, settings: Settings) -> OpResult:
    collector = OpCollector(config, state.spec, settings.out_dir)
    for position, report in sorted(state.original.reports.items()):
        collector.add(state.cases[position], report)
    return collector.result(cut_short=state.original.cut_short)


def _plan_mutants(
    state: _Op, operators: Sequence[object], options: MutateOptions, settings: Settings, root: Path
) -> None:
    result = state.result
    if result is None or result.status is not OpStatus.PASSED:
        status = result.status.value if result is not None else "not run"
        state.message = f"not scored: the original op did not pass its own suite ({status}); fix it first"
        return
    census: dict[tuple[str, str], LaunchedKernel] = {}
    for report in state.original.reports.values():
        for kernel in report.kernels:
            census.setdefault((kernel.path, kernel.name), kernel)
    sources = kernel_sources(census.values(), root)
    if not sources:
        state.message = "not scored: no Triton kernel ran in its cases (mutate changes @triton.jit kernels)"
        return
    state.kernels = tuple(source.label for source in sources)
    everything = ordered(all_mutants(sources, operators), operators, settings.seed)  # type: ignore[arg-type]
    state.planned = len(everything)
    state.mutants = everything[: options.max_mutants] if options.max_mutants is not None else everything
    if not state.mutants:
        state.message = "not scored: no operator applies to its kernels"


def _in_shard(number: int, shard: Shard | None) -> bool:
    return shard is None or (number - 1) % shard.count == shard.index - 1


def _run_mutants(
    session: Session,
    states: list[_Op],
    options: MutateOptions,
    settings: Settings,
    config: Config,
    cache: VerdictCache | None,
    window: int,
    deadline: float,
    observer: Observer,
) -> bool:
    batches: list[Batch] = []
    owners: dict[int, tuple[_Op, Mutant, int]] = {}
    for state in states:
        judged = [r for r in state.original.reports.values() if r.outcome == "passed"]
        slowest = max((r.call_s for r in judged), default=0.0)
        timeout = min(state.task.timeout_s, max(MIN_MUTANT_TIMEOUT_S, TIMEOUT_FACTOR * slowest + 5.0))
        for number, mutant in enumerate(state.mutants, start=1):
            if not _in_shard(number, options.run.shard):
                continue
            key = cache.key(config, settings, state, mutant) if cache is not None else None
            hit = cache.get(key) if cache is not None and key is not None else None
            if hit is not None:
                state.results[mutant.id] = msgspec.structs.replace(hit, number=number, cached=True)
                continue
            task = dataclasses.replace(
                state.task,
                key=f"{state.task.key}/mutant-{mutant.id}",
                patches=(mutant.patch(),),
                timeout_s=timeout,
                out_dir=None,
            )
            batch = Batch(task, state.cases, stop_at_failure=True)
            owners[id(batch)] = (state, mutant, number)
            batches.append(batch)
    counts: dict[str, int] = {}
    for state, _, _ in owners.values():
        counts[f"{state.spec.name} mutants"] = counts.get(f"{state.spec.name} mutants", 0) + 1
    observer.suite_planned(counts)
    for label, count in counts.items():
        observer.op_started(label, count)

    def done(batch: Batch) -> None:
        state, mutant, number = owners[id(batch)]
        result = _classify(state, mutant, number, batch)
        state.results[mutant.id] = result
        if cache is not None and result.status is not MutantStatus.NOT_RUN:
            cache.put(cache.key(config, settings, state, mutant), result)
        observer.case_done(f"{state.spec.name} mutants", result.status is not MutantStatus.SURVIVED)

    cut_short = run_batches(session.pool, batches, window=window, deadline=deadline, on_done=done)
    for label in counts:
        observer.op_finished(label, "done", "")
    return cut_short


def _blank(mutant: Mutant, number: int, message: str | None = None) -> MutantResult:
    """The mutant, not run yet."""
    return MutantResult(
        id=mutant.id,
        number=number,
        operator=mutant.operator,
        kernel=mutant.source.label,
        file=mutant.source.display,
        line=mutant.line,
        before=mutant.before,
        after=mutant.after,
        status=MutantStatus.NOT_RUN,
        message=message,
    )


def _classify(state: _Op, mutant: Mutant, number: int, batch: Batch) -> MutantResult:
    base = _blank(mutant, number)
    replace = msgspec.structs.replace
    unloadable = next((r for r in batch.reports.values() if r.outcome == "unloadable"), None)
    if unloadable is not None:
        return replace(base, status=MutantStatus.ERRORED, message=_first_line(unloadable.message))
    if batch.first_failure is not None:
        ref, report = batch.cases[batch.first_failure], batch.reports[batch.first_failure]
        return replace(
            base,
            status=MutantStatus.KILLED,
            killed_by=report.kind or "failed",
            case=ref.case_id,
            case_seed=f"{ref.seed:#018x}",
            message=_first_line(report.message),
        )
    if batch.cut_short:
        return replace(base, message="the time budget ran out before its cases were run")
    errored = next((r for r in batch.reports.values() if r.outcome == "errored"), None)
    if errored is not None:
        return replace(base, status=MutantStatus.ERRORED, message=_first_line(errored.message))
    original = state.original.reports
    judged = [
        p for p, r in batch.reports.items() if r.outcome == "passed" and original[p].outcome == "passed"
    ]
    if not judged:
        return replace(base, message="no case was judged on this machine")
    same = all(batch.reports[p].outputs_digest == original[p].outputs_digest for p in judged)
    cases = [original[p] for p in judged]
    return replace(
        base,
        status=MutantStatus.EQUIVALENT if same else MutantStatus.SURVIVED,
        hint=hint(mutant.operator, mutant.before, mutant.after, cases),
        message="its outputs were bit for bit the original's on every case" if same else None,
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def _op_mutation(state: _Op, shard: Shard | None) -> OpMutation:
    mutants = []
    for number, mutant in enumerate(state.mutants, start=1):
        found = state.results.get(mutant.id)
        if found is None:
            why = "in another shard" if not _in_shard(number, shard) else "not run"
            found = _blank(mutant, number, why)
        mutants.append(found)
    return OpMutation(
        op=state.spec.name,
        language="triton",
        scored=bool(state.mutants) and state.message is None,
        message=state.message,
        kernels=state.kernels,
        mutants_planned=state.planned,
        mutants=tuple(mutants),
    )


def _with_mutation(document: Results, report: MutationReport) -> Results:
    """The document with its mutation part; an op scored under --min-score fails the run."""
    below = report.below_min_score()
    notes = document.notes
    verdict, code = document.verdict, document.exit_code
    if below:
        names = ", ".join(f"{op.op} ({op.score:.0%})" for op in below if op.score is not None)
        notes = (*notes, f"mutation score under --min-score {report.min_score:.0%}: {names}")
        verdict, code = Verdict.FAILED, int(ExitCode.GATE_FAILED)
    return msgspec.structs.replace(document, mutation=report, notes=notes, verdict=verdict, exit_code=code)
