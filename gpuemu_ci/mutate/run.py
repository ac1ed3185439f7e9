"""`gpuemu-ci mutate`: plant known bugs in the op's own kernels and see which ones its suite lets through.

1. The original suite runs, as `gpuemu-ci run` would run it, in the usual isolated workers; each case reports
   the op's outputs bit for bit (a digest) and the Triton functions it ran (the census). The CUDA sources of
   `[[kernels]]` are linted first, as `run` lints them; on a GPU, a kernel with a launch table runs its suite
   too.
2. The operators change the kernels of the census (triton_operators.py) and the device functions of each
   CUDA source (cuda_operators.py); mutants are numbered and selected from the seed (plan.py).
3. A CUDA mutant is compiled first and judged by what the lint can judge (cuda.py): it does not build, it
   breaks an artifact check, or it compiles to the original's PTX. The others, and every Triton mutant, run
   the same cases in the same workers, the kernel swapped in memory (backends/mutant.py, or the CUDA source
   compiled from the changed text): killed at its first failing case, else survived, or `equivalent?` when
   its outputs are the original's on every case. A CUDA mutant whose cases cannot run here is `not run`.
   Verdicts are cached (cache.py).

The document is the original run's results.json with a `mutation` part.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gpuemu_ci import __version__
from gpuemu_ci.backends.interface import OpTask
from gpuemu_ci.calls import LaunchedKernel
from gpuemu_ci.clock import utc_now
from gpuemu_ci.config.model import Config, KernelSpec, OpSpec
from gpuemu_ci.errors import ConfigError, ExitCode, InfraError, UsageError
from gpuemu_ci.files import check_output_dir
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.lint.compile import SourceKind, source_kind
from gpuemu_ci.lint.model import LintReport, Toolchain
from gpuemu_ci.lint.run import lint_kernels
from gpuemu_ci.mutate.batches import Batch, run_batches
from gpuemu_ci.mutate.cache import VerdictCache
from gpuemu_ci.mutate.cuda import (
    CudaMutant,
    LintJudgement,
    OriginalDoesNotBuild,
    cuda_mutants,
    lint_mutants,
    source_display,
)
from gpuemu_ci.mutate.cuda_operators import CudaOperator
from gpuemu_ci.mutate.hints import hint
from gpuemu_ci.mutate.plan import AnyMutant, all_mutants, kernel_sources, operators_named, ordered
from gpuemu_ci.mutate.triton_operators import Operator
from gpuemu_ci.pipeline.gate import Ran, diffed, run_document
from gpuemu_ci.pipeline.op_runner import OpCollector, op_detail
from gpuemu_ci.pipeline.session import DETECT, Session
from gpuemu_ci.pipeline.settings import RunOptions, Settings, select_ops
from gpuemu_ci.pipeline.shard import Shard
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.progress import Observer, Silent
from gpuemu_ci.results.kernels import KernelStatus
from gpuemu_ci.results.model import GpuInfo, OpResult, OpStatus, Results, Verdict
from gpuemu_ci.results.mutation import (
    MIN_SCORE_NOTE,
    MutantResult,
    MutantStatus,
    MutationReport,
    MutationShard,
    OpMutation,
)

WINDOW_PER_JOB = 4  # cases queued per job: workers never wait, and a killed mutant wastes little
MIN_MUTANT_TIMEOUT_S = 10.0
TIMEOUT_FACTOR = 10.0  # a mutant's case may take this many times the original's slowest case


@dataclass(frozen=True)
class MutateOptions:
    """What `gpuemu-ci mutate` was asked for: the run's options, and the mutation's own (how many mutants per
    op, which operators, where verdicts are cached, the score below which the run fails)."""

    run: RunOptions
    max_mutants: int | None = None  # per op
    operators: tuple[str, ...] = ()  # by name; empty: all
    cache_dir: Path | None = None  # None: no cache
    min_score: float | None = None  # an op scored below it fails the run (exit 1)


@dataclass
class _Suite:
    """An op's cases and the original's reports: a Triton op, or a CUDA kernel's launch on a GPU."""

    spec: OpSpec
    task: OpTask
    cases: list[CaseRef]
    original: Batch
    result: OpResult | None = None


@dataclass
class _Target:
    """One op or `[[kernels]]` entry through the run: its suite (where its cases run here), then its mutants."""

    name: str
    language: str  # "triton" or "cuda"
    suite: _Suite | None = None
    kernel: KernelSpec | None = None  # a CUDA entry
    without_cases: str | None = None  # why a CUDA entry's cases cannot run here (its mutants: lint only)
    mutants: list[AnyMutant] = dataclasses.field(default_factory=list)
    planned: int = 0
    kernels: tuple[str, ...] = ()
    results: dict[str, MutantResult] = dataclasses.field(default_factory=dict)
    message: str | None = None  # why it is not scored


@dataclass(frozen=True)
class _Run:
    """What every step of the run shares."""

    config: Config
    options: MutateOptions
    settings: Settings
    cache: VerdictCache | None
    deadline: float
    observer: Observer


def run_mutation(
    config: Config,
    options: MutateOptions,
    *,
    observer: Observer | None = None,
    gpu: GpuInfo | str | None = DETECT,
) -> Results:
    """The original suite of every selected op and the lint of every selected CUDA kernel, then their mutants;
    the results document with its `mutation` part, its verdict decided (an original that fails, or a score
    under --min-score, fails the run)."""
    started, started_at = time.monotonic(), utc_now()
    try:
        triton_operators, cuda_operators = operators_named(options.operators)
    except ValueError as exc:
        raise UsageError(f"--operator: {exc}") from None
    settings = Settings.resolve(config, dataclasses.replace(options.run, shard=None))  # mutants are sharded
    check_output_dir(settings.out_dir)
    ops, kernels = _selected(config, options.run.ops)
    run = _Run(
        config,
        options,
        settings,
        VerdictCache(options.cache_dir) if options.cache_dir is not None else None,
        started + settings.timeout_s,
        observer or Silent(),
    )
    lint = _lint_originals(config, kernels, settings)
    with Session(config, settings, observer=run.observer, gpu=gpu) as session:
        targets = [_Target(op.name, "triton") for op in ops]
        targets += [_cuda_target(kernel, lint, session.gpu is not None) for kernel in kernels]
        for target, op in zip(targets, (*ops, *(k.op for k in kernels)), strict=True):
            runs_cases = target.language == "triton" or target.without_cases is None
            if op is not None and runs_cases and target.message is None:
                task = dataclasses.replace(session.task(op), poison_uninitialized=True)
                cases = session.plan(op)
                snapshots = OpCollector(config, op, settings.out_dir).wants_snapshot
                target.suite = _Suite(op, task, cases, Batch(task, cases, snapshots=snapshots))
        cut_short = _run_originals(run, session, targets)
        for target in targets:
            if target.language == "triton":
                _plan_triton(run, target, triton_operators)
            else:
                _plan_cuda(run, target, cuda_operators)
        cut_short = _judge_cuda(run, targets, lint.toolchain) or cut_short
        cut_short = _run_mutants(run, session, targets) or cut_short
        gpu_seen = session.gpu
    shard = options.run.shard
    report = MutationReport(
        operators=tuple(
            dict.fromkeys([op.name for op in triton_operators] + [op.name for op in cuda_operators])
        ),
        max_mutants=options.max_mutants,
        min_score=options.min_score,
        ops=tuple(_op_mutation(target, shard) for target in targets),
        cut_short=cut_short,
        duration_s=round(time.monotonic() - started, 3),
        shard=MutationShard(shard.index, shard.count, _plan_digest(run, targets)) if shard else None,
    )
    op_results = tuple(t.suite.result for t in targets if t.suite is not None and t.suite.result is not None)
    ran = Ran(op_results, cut_short, None, lint, gpu_seen)
    notes = (
        (f"the time budget ({settings.timeout_s:g} s) ran out: mutants left were not run",)
        if cut_short
        else ()
    )
    document = diffed(run_document(config, settings, ran, notes, (started, started_at)), config, None)
    return with_mutation(document, report)


def _selected(config: Config, names: Sequence[str]) -> tuple[tuple[OpSpec, ...], tuple[KernelSpec, ...]]:
    """The [[ops]] and the [[kernels]] `--op` names (all of both when none is named)."""
    if not names:
        ops, kernels = config.ops, config.kernels
    else:
        by_name = {kernel.name: kernel for kernel in config.kernels}
        kernels = tuple(by_name[n] for n in dict.fromkeys(names) if n in by_name)
        rest = [n for n in names if n not in by_name]
        ops = tuple(op for op in select_ops(config, rest) if op in config.ops) if rest else ()
    if not ops and not kernels:
        raise UsageError(
            "mutate changes the Triton kernels of [[ops]] entries and the CUDA sources of [[kernels]]: "
            "none is selected"
        )
    return ops, kernels


def _lint_originals(config: Config, kernels: Sequence[KernelSpec], settings: Settings) -> LintReport:
    """The selected kernels' lint, as `run` lints them (a missing toolchain is recorded, not raised)."""
    if not kernels:
        return LintReport.disabled("mutate lints only the [[kernels]] it changes: none was selected")
    if not settings.lint:
        return LintReport.disabled()
    try:
        return lint_kernels(kernels, archs=settings.archs or None, jobs=settings.lint_jobs, root=config.root)
    except InfraError as exc:
        return LintReport.unavailable(exc.message)


def _cuda_target(kernel: KernelSpec, lint: LintReport, gpu: bool) -> _Target:
    target = _Target(kernel.name, "cuda", kernel=kernel)
    result = next((k for k in lint.kernels if k.name == kernel.name), None)
    if source_kind(kernel.source) is not SourceKind.CUDA:
        target.message = "not scored: mutate changes CUDA C++ sources (.cu); a .ptx source is left alone"
    elif result is None:
        why = lint.reason or "the lint did not run"
        target.message = f"not scored: its mutants are judged by compiling them, and {why}"
    elif result.status is not KernelStatus.PASSED:
        target.message = (
            f"not scored: the original does not pass its own lint ({result.status.value}); fix it first"
        )
    if kernel.launch is None or kernel.op is None:
        target.without_cases = "it has no [kernels.launch] table, so no case runs it"
    elif not gpu:
        target.without_cases = "its cases need a GPU and there is none here"
    return target


def _run_originals(run: _Run, session: Session, targets: Sequence[_Target]) -> bool:
    suites = [t.suite for t in targets if t.suite is not None]
    if not suites:
        return False
    session.start()
    run.observer.suite_planned({s.spec.name: len(s.cases) for s in suites})

    def started(batch: Batch) -> None:
        run.observer.op_started(batch.task.op.name, len(batch.cases))

    def done(batch: Batch) -> None:
        suite = next(s for s in suites if s.original is batch)
        for report in batch.reports.values():  # the progress counts every case of the original suite
            run.observer.case_done(suite.spec.name, report.outcome in ("passed", "skipped"))
        suite.result = _op_result(run.config, suite, run.settings)
        result = suite.result
        detail = op_detail(
            result.cases_total, result.cases_failed, result.cases_errored, result.cases_skipped
        )
        run.observer.op_finished(suite.spec.name, result.status.value, detail)

    originals = [s.original for s in suites]
    return run_batches(
        session.pool,
        originals,
        window=_window(run),
        deadline=run.deadline,
        on_done=done,
        on_started=started,
    )


def _window(run: _Run) -> int:
    return run.settings.jobs * WINDOW_PER_JOB + 2


def _op_result(config: Config, suite: _Suite, settings: Settings) -> OpResult:
    collector = OpCollector(config, suite.spec, settings.out_dir)
    for position, report in sorted(suite.original.reports.items()):
        collector.add(suite.cases[position], report)
    return collector.result(cut_short=suite.original.cut_short)


def _original_passed(target: _Target) -> bool:
    """Whether the original passed its own suite; sets why not (the target is then not scored)."""
    suite = target.suite
    result = suite.result if suite is not None else None
    if suite is not None and (result is None or result.status is not OpStatus.PASSED):
        status = result.status.value if result is not None else "not run"
        target.message = f"not scored: the original op did not pass its own suite ({status}); fix it first"
    return target.message is None


def _select(run: _Run, target: _Target, everything: Sequence[AnyMutant]) -> None:
    target.planned = len(everything)
    limit = run.options.max_mutants
    target.mutants = list(everything[:limit] if limit is not None else everything)
    if not target.mutants:
        target.message = "not scored: no operator applies to its kernels"


def _plan_triton(run: _Run, target: _Target, operators: Sequence[Operator]) -> None:
    if not _original_passed(target):
        return
    assert target.suite is not None
    census: dict[tuple[str, str], LaunchedKernel] = {}
    for report in target.suite.original.reports.values():
        for kernel in report.kernels:
            census.setdefault((kernel.path, kernel.name), kernel)
    sources = kernel_sources(census.values(), run.config.root)
    if not sources:
        target.message = "not scored: no Triton kernel ran in its cases (mutate changes @triton.jit kernels)"
        return
    target.kernels = tuple(source.label for source in sources)
    names = [op.name for op in operators]
    _select(run, target, ordered(all_mutants(sources, operators), names, run.settings.seed))


def _plan_cuda(run: _Run, target: _Target, operators: Sequence[CudaOperator]) -> None:
    if not _original_passed(target):
        return
    kernel = target.kernel
    assert kernel is not None
    display = source_display(kernel.source, run.config.root)
    mutants = cuda_mutants(kernel, kernel.source.read_text("utf-8"), display, operators)
    target.kernels = tuple(dict.fromkeys(m.kernel for m in mutants))
    names = [op.name for op in operators]
    _select(run, target, ordered(mutants, names, run.settings.seed))


def _in_shard(number: int, shard: Shard | None) -> bool:
    return shard is None or (number - 1) % shard.count == shard.index - 1


def _judge_cuda(run: _Run, targets: Sequence[_Target], toolchain: Toolchain | None) -> bool:
    """Compile every CUDA mutant of this shard not in the cache and keep what the lint decides; a mutant the
    lint cannot judge is left to its cases, or `not run` where they cannot run. Whether the budget ran out."""
    cut_short = False
    for target in targets:
        if target.kernel is not None and target.message is None and toolchain is not None:
            cut_short = _judge_kernel(run, target, target.kernel, toolchain) or cut_short
    return cut_short


def _judge_kernel(run: _Run, target: _Target, kernel: KernelSpec, toolchain: Toolchain) -> bool:
    todo: list[CudaMutant] = []
    numbers: dict[str, int] = {}
    for number, mutant in enumerate(target.mutants, start=1):
        assert isinstance(mutant, CudaMutant)
        if not _in_shard(number, run.options.run.shard):
            continue
        hit = run.cache.get(_lint_key(run, target, toolchain, mutant)) if run.cache is not None else None
        if hit is not None:
            target.results[mutant.id] = msgspec.structs.replace(hit, number=number, cached=True)
        else:
            todo.append(mutant)
            numbers[mutant.id] = number
    label = f"{target.name} mutants (lint)"
    run.observer.suite_planned({label: len(todo)})
    run.observer.op_started(label, len(todo))

    def judged(mutant: CudaMutant, judgement: LintJudgement) -> None:
        result = _lint_result(target, mutant, numbers[mutant.id], judgement)
        if result is not None:
            target.results[mutant.id] = result
            if run.cache is not None and judgement.status is not None:
                run.cache.put(_lint_key(run, target, toolchain, mutant), result)
        run.observer.case_done(label, True)  # the lint finds no survivor: it kills, or leaves to the cases

    try:
        _, cut_short = lint_mutants(
            kernel,
            kernel.source.read_text("utf-8"),
            todo,
            toolchain=toolchain,
            root=run.config.root,
            archs=run.settings.archs or None,
            jobs=run.settings.lint_jobs,
            deadline=run.deadline,
            on_judged=judged,
        )
    except (OriginalDoesNotBuild, ConfigError) as exc:
        target.message = f"not scored: {exc}"
        cut_short = False
    run.observer.op_finished(label, "done", "")
    return cut_short


def _lint_key(run: _Run, target: _Target, toolchain: Toolchain, mutant: AnyMutant) -> str:
    return VerdictCache.lint_key(run.config, run.settings, target.name, toolchain, mutant.id)


def _lint_result(
    target: _Target, mutant: CudaMutant, number: int, judgement: LintJudgement
) -> MutantResult | None:
    """The mutant's result when the lint decides it, or when its cases cannot run here (`not run`); None when
    its cases will run."""
    base = _blank(mutant, number)
    if judgement.status is not None:
        return msgspec.structs.replace(
            base,
            status=judgement.status,
            killed_by=judgement.killed_by,
            message=judgement.message,
            hint=judgement.hint,
        )
    if target.suite is not None:
        return None
    return msgspec.structs.replace(
        base, message=f"{target.without_cases}; {judgement.message}", hint=judgement.hint
    )


def _run_mutants(run: _Run, session: Session, targets: Sequence[_Target]) -> bool:
    """Every mutant of this shard that its cases must judge, through the pool. Whether the budget ran out."""
    batches: list[Batch] = []
    owners: dict[int, tuple[_Target, _Suite, AnyMutant, int]] = {}
    for target in targets:
        suite = target.suite
        if suite is None or target.message is not None:
            continue
        judged = [r for r in suite.original.reports.values() if r.outcome == "passed"]
        slowest = max((r.call_s for r in judged), default=0.0)
        timeout = min(suite.task.timeout_s, max(MIN_MUTANT_TIMEOUT_S, TIMEOUT_FACTOR * slowest + 5.0))
        for number, mutant in enumerate(target.mutants, start=1):
            if not _in_shard(number, run.options.run.shard) or mutant.id in target.results:
                continue
            key = _suite_key(run, suite, mutant)
            hit = run.cache.get(key) if run.cache is not None else None
            if hit is not None:
                target.results[mutant.id] = msgspec.structs.replace(hit, number=number, cached=True)
                continue
            task = dataclasses.replace(
                mutant.task(suite.task),
                key=f"{suite.task.key}/mutant-{mutant.id}",
                timeout_s=timeout,
                out_dir=None,
            )
            batch = Batch(task, suite.cases, stop_at_failure=True)
            owners[id(batch)] = (target, suite, mutant, number)
            batches.append(batch)
    if not batches:
        return False
    counts: dict[str, int] = {}
    for target, _, _, _ in owners.values():
        counts[f"{target.name} mutants"] = counts.get(f"{target.name} mutants", 0) + 1
    run.observer.suite_planned(counts)
    for label, count in counts.items():
        run.observer.op_started(label, count)

    def done(batch: Batch) -> None:
        target, suite, mutant, number = owners[id(batch)]
        result = _classify(suite, mutant, number, batch)
        target.results[mutant.id] = result
        if run.cache is not None and result.status is not MutantStatus.NOT_RUN:
            run.cache.put(_suite_key(run, suite, mutant), result)
        run.observer.case_done(f"{target.name} mutants", result.status is not MutantStatus.SURVIVED)

    cut_short = run_batches(session.pool, batches, window=_window(run), deadline=run.deadline, on_done=done)
    for label in counts:
        run.observer.op_finished(label, "done", "")
    return cut_short


def _suite_key(run: _Run, suite: _Suite, mutant: AnyMutant) -> str:
    return VerdictCache.suite_key(
        run.config, run.settings, suite.spec.name, suite.cases, suite.original.reports, mutant.id
    )


def _blank(mutant: AnyMutant, number: int, message: str | None = None) -> MutantResult:
    """The mutant, not run yet."""
    return MutantResult(
        id=mutant.id,
        number=number,
        operator=mutant.operator,
        kernel=mutant.kernel,
        file=mutant.file,
        line=mutant.line,
        before=mutant.before,
        after=mutant.after,
        status=MutantStatus.NOT_RUN,
        message=message,
    )


def _classify(suite: _Suite, mutant: AnyMutant, number: int, batch: Batch) -> MutantResult:
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
    original = suite.original.reports
    judged = [
        p for p, r in batch.reports.items() if r.outcome == "passed" and original[p].outcome == "passed"
    ]
    if not judged:
        return replace(base, message="no case was judged on this machine")
    same = all(batch.reports[p].outputs_digest == original[p].outputs_digest for p in judged)
    cases = [original[p] for p in judged]
    unjudged = [report for _, report in sorted(original.items()) if report.outcome == "skipped"]
    return replace(
        base,
        status=MutantStatus.EQUIVALENT if same else MutantStatus.SURVIVED,
        hint=hint(mutant.operator, mutant.before, mutant.after, cases, unjudged),
        message="its outputs were bit for bit the original's on every case" if same else None,
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def _op_mutation(target: _Target, shard: Shard | None) -> OpMutation:
    mutants = []
    for number, mutant in enumerate(target.mutants, start=1):
        found = target.results.get(mutant.id)
        if found is None:
            why = "in another shard" if not _in_shard(number, shard) else "not run"
            found = _blank(mutant, number, why)
        mutants.append(found)
    return OpMutation(
        op=target.name,
        language=target.language,
        scored=bool(target.mutants) and target.message is None,
        message=target.message,
        lint_only_because=target.without_cases if target.language == "cuda" else None,
        kernels=target.kernels,
        mutants_planned=target.planned,
        mutants=tuple(mutants),
    )


def _plan_digest(run: _Run, targets: Sequence[_Target]) -> str:
    """What every shard of one mutate run shares: the config, the seed, the operators and every op's mutants
    in plan order."""
    parts = [
        __version__,
        GENERATOR_VERSION,
        run.config.sha256,
        run.settings.seed,
        run.settings.suite.value,
        list(run.options.operators),
        run.options.max_mutants,
        [[t.name, [m.id for m in t.mutants]] for t in targets],
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def with_mutation(document: Results, report: MutationReport) -> Results:
    """The document with its mutation part; an op scored under --min-score (or whose score could not be
    measured here) fails the run."""
    below = report.below_min_score()
    notes = document.notes
    verdict, code = document.verdict, document.exit_code
    if below:
        names = ", ".join(
            f"{op.op} ({op.score:.0%})" if op.score is not None else f"{op.op} (lint only: no score here)"
            for op in below
        )
        notes = (*notes, f"{MIN_SCORE_NOTE} {report.min_score:.0%}: {names}")
        verdict, code = Verdict.FAILED, int(ExitCode.GATE_FAILED)
    return msgspec.structs.replace(document, mutation=report, notes=notes, verdict=verdict, exit_code=code)
