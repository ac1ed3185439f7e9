"""The gate: config + options (+ a baseline) -> the results document. The one function behind `gpuemu-ci run`
and the Action's gate, baseline and nightly modes; it runs every stage in order and writes only files."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gpuemu_ci import __version__, corpus
from gpuemu_ci.backends.amd_gpu import has_amd_gpu
from gpuemu_ci.backends.interface import Pool
from gpuemu_ci.clock import utc_now
from gpuemu_ci.config.model import Config, OpSpec
from gpuemu_ci.diff.baseline import BaselineSource, diff_against
from gpuemu_ci.errors import ConfigError, ExitCode, UsageError
from gpuemu_ci.files import check_output_dir
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.lint.model import LintReport
from gpuemu_ci.lint.run import check_kernels
from gpuemu_ci.pipeline.environment import environment, git_info
from gpuemu_ci.pipeline.interrupt import Interruption
from gpuemu_ci.pipeline.session import DETECT, HIP_LAUNCH_UNSUPPORTED, Session
from gpuemu_ci.pipeline.settings import RunOptions, Settings, select_ops
from gpuemu_ci.pipeline.shard import Shard, plan_digest, select
from gpuemu_ci.pipeline.verdict import decide
from gpuemu_ci.progress import Observer
from gpuemu_ci.results.diff import BaselineDiff
from gpuemu_ci.results.kernels import LintStatus
from gpuemu_ci.results.model import (
    OTHER_SHARDS,
    ConfigInfo,
    GpuInfo,
    OpResult,
    OpStatus,
    Results,
    ShardInfo,
    Summary,
    ToolInfo,
    Verdict,
)
from gpuemu_ci.results.snapshots import clear_snapshots

LintRunner = Callable[[Config, Settings], LintReport]


@dataclass(frozen=True)
class GateBaseline:
    """The baseline to diff against, and whether regressions fail the gate (None: the config's policy)."""

    source: BaselineSource
    fail_on_regression: bool | None = None


def run_gate(
    config: Config,
    options: RunOptions,
    *,
    baseline: GateBaseline | None = None,
    observer: Observer | None = None,
    pool_factory: Callable[[int], Pool] | None = None,
    lint_runner: LintRunner | None = None,
    gpu: GpuInfo | str | None = DETECT,
    interruption: Interruption | None = None,
) -> Results:
    """Runs every selected op and the lint step, diffs against `baseline` when given, and decides the verdict.
    Returns the document (not yet written).

    SIGINT or SIGTERM stops the run within seconds: the document then holds the cases judged so far, marked cut
    short (`interruption.signal` says which; without an `interruption`, run_gate handles the signals itself
    while it runs on the main thread)."""
    started = time.monotonic()
    started_at = utc_now()
    settings, ops = _prepared(config, options, baseline)
    own = interruption is None
    interruption = interruption or Interruption()
    with interruption if own else contextlib.nullcontext():
        session = Session(
            config, settings, observer=observer, pool_factory=pool_factory, gpu=gpu, stop=interruption.event
        )
        with session:
            op_results, cut_short, shard = _run_ops(
                session,
                ops,
                include_kernels=not options.ops,
                started=started,
                stop=interruption.event,
                shard=options.shard,
            )
        if interruption.signal is None and shard is not None and shard.index != 1:
            lint = LintReport.disabled(f"lint runs in shard 1 of {shard.count}")
        elif interruption.signal is None:
            lint = _lint(config, settings, lint_runner, interruption.event)  # a signal kills its compiles
        if interruption.signal is not None:  # before the lint step or during it: nothing of it is kept
            lint = LintReport.disabled(f"not run: the run was interrupted by {interruption.name}")
    if interruption.signal is not None:
        op_results = _say_interrupted(op_results, interruption.name)
    ran = Ran(op_results, cut_short or interruption.signal is not None, shard, lint, session.gpu)
    notes = _notes(op_results, settings, ran.cut_short, interruption)
    results = run_document(config, settings, ran, notes, (started, started_at))
    return diffed(results, config, baseline)


@dataclass(frozen=True)
class Ran:
    """What the suite and the lint step produced."""

    ops: tuple[OpResult, ...]
    cut_short: bool
    shard: ShardInfo | None
    lint: LintReport
    gpu: GpuInfo | None


def run_document(
    config: Config, settings: Settings, ran: Ran, notes: tuple[str, ...], started: tuple[float, str]
) -> Results:
    """The results document of the run, its verdict not yet decided (that needs the baseline diff).
    `started`: (time.monotonic(), the UTC time) when the run started."""
    return Results(
        tool=ToolInfo(version=__version__),
        generator_version=GENERATOR_VERSION,
        seed=settings.seed,
        suite=settings.suite.value,
        started_at=started[1],
        finished_at=utc_now(),
        config=ConfigInfo(path=display_path(config.path), sha256=config.sha256, project=config.project.name),
        environment=environment(ran.gpu),
        git=git_info(config.root),
        verdict=Verdict.ERROR,  # decided by `diffed`, once the baseline diff is known
        exit_code=int(ExitCode.INFRASTRUCTURE),
        cut_short=ran.cut_short,
        summary=Summary(duration_s=round(time.monotonic() - started[0], 3)),
        ops=ran.ops,
        kernels=ran.lint.kernels,
        lint=ran.lint.info(),
        run=settings.run_info,
        notes=notes,
        shard=ran.shard,
        skips_allowed=settings.allow_skips,
        warn_threshold=config.policies.warn_threshold,
    )


def _prepared(
    config: Config, options: RunOptions, baseline: GateBaseline | None
) -> tuple[Settings, tuple[OpSpec, ...]]:
    """The run's settings and ops, once everything that can be refused before a case runs has been checked
    (the output directory, the kernels' sources, --dtype), and the last run's snapshots are cleared."""
    settings = Settings.resolve(config, options)
    if options.shard is not None and baseline is not None:
        raise UsageError("a shard is not diffed against a baseline: pass --baseline to `gpuemu-ci merge`")
    check_output_dir(settings.out_dir)  # a read-only or full directory is found now, not after the suite
    ops = select_ops(config, options.ops)
    if config.kernels and settings.lint:
        check_kernels(config.kernels, archs=settings.archs, root=config.root)  # before any op runs
    clear_snapshots(settings.out_dir)
    for dtype in settings.dtypes:
        if not any(dtype in op.dtypes for op in ops):
            raise ConfigError(f"--dtype {dtype!r} is not among the dtypes of the selected ops")
    return settings, ops


def _notes(
    op_results: tuple[OpResult, ...], settings: Settings, cut_short: bool, interruption: Interruption
) -> tuple[str, ...]:
    """What the document says about the run besides its verdicts: snapshots not written, and why it is partial."""
    notes: list[str] = []
    unsaved = [f.snapshot_error for op in op_results for f in op.failures if f.snapshot_error]
    if unsaved:
        notes.append(
            f"{len(unsaved)} input snapshot(s) could not be written ({unsaved[0]}); their cases still replay "
            "from the seed"
        )
    if interruption.signal is not None:
        notes.append(f"the run was interrupted by {interruption.name}; results are partial")
    elif cut_short:
        notes.append(
            f"the run was cut short after {settings.timeout_s:g} s ({settings.timeout_source}); results are partial"
        )
    return tuple(notes)


def diffed(results: Results, config: Config, baseline: GateBaseline | None) -> Results:
    """`results` diffed against `baseline` (when there is one), its verdict and exit code decided."""
    diff = None
    if baseline is not None:
        flag = config.policies.fail_on_regression
        if baseline.fail_on_regression is not None:
            flag = baseline.fail_on_regression
        diff = diff_against(baseline.source, results, config.policies, flag)
    return with_diff(results, diff, lint_unavailable=results.lint.status is LintStatus.UNAVAILABLE)


def with_diff(results: Results, diff: BaselineDiff | None, *, lint_unavailable: bool = False) -> Results:
    """`results` with its diff attached and the verdict and exit code decided (pipeline.verdict.decide)."""
    verdict, code = decide(
        results.ops,
        results.kernels,
        cut_short=results.cut_short,
        lint_unavailable=lint_unavailable,
        diff=diff,
        skips_allowed=results.skips_allowed,
    )
    notes = results.notes
    if diff is not None and diff.gate_failed:
        n = diff.regressions
        notes = (
            *notes,
            f"the gate failed on {n} regression{'s' if n != 1 else ''} against the baseline "
            "(policies.fail_on_regression)",
        )
    return msgspec.structs.replace(results, diff=diff, verdict=verdict, exit_code=int(code), notes=notes)


def _run_ops(
    session: Session,
    ops: tuple[OpSpec, ...],
    *,
    include_kernels: bool,
    started: float,
    stop: threading.Event,
    shard: Shard | None,
) -> tuple[tuple[OpResult, ...], bool, ShardInfo | None]:
    """Every op's result, in config order (launchable [[kernels]] after the ops), whether the suite timeout or
    a signal cut the run short, and (with `shard`) what this shard holds."""
    config, settings = session.config, session.settings
    deadline = started + settings.timeout_s
    if (
        include_kernels
    ):  # launchable [[kernels]] run like ops, on a GPU only (the session knows their targets)
        ops = (*ops, *config.kernel_ops)
    results: dict[str, OpResult] = {}
    runnable: list[OpSpec] = []
    for op in ops:
        if op.execution.amd_gpu:
            results[op.name] = _hip_launch_not_run(op, settings.require_gpu, has_amd_gpu())
        elif session.lacks_gpu(op) and not stop.is_set():  # (detection may have been cut short)
            results[op.name] = _no_gpu(op, settings.require_gpu)
        else:
            runnable.append(op)
            continue
        session.observer.op_finished(op.name, results[op.name].status.value, results[op.name].message or "")
    if runnable and not stop.is_set():  # stopped already (a signal while starting): no worker is started
        session.start()  # the workers boot while the cases are planned
    # The regression corpus first: pinned cases of an op run before its fuzzed ones, in every suite and shard.
    plans = [(op, corpus.planned(config, op.name) + session.plan(op)) for op in runnable]
    info = None
    if shard is not None:
        digest = plan_digest(config.sha256, settings.seed, GENERATOR_VERSION, settings.suite.value, plans)
        dtypes = [settings.dtypes_for(config, op) for op in runnable]
        mine, info = select(shard, plans, dtypes, digest)
        for op, cases in zip(runnable, mine, strict=True):
            if not cases:
                results[op.name] = _in_other_shards(op, shard)
                session.observer.op_finished(op.name, "skipped", results[op.name].message or "")
        plans = [(op, cases) for op, cases in zip(runnable, mine, strict=True) if cases]
    session.observer.suite_planned({op.name: len(cases) for op, cases in plans})
    cut_short = False
    if plans:
        ran, cut_short = session.run_ops(
            [(op, cases, None) for op, cases in plans], deadline=deadline, stop=stop
        )
        results.update(ran)
    final = tuple(_with_dtypes_not_run(results[op.name], settings.dtypes_for(config, op), op) for op in ops)
    return final, cut_short, info


def _with_dtypes_not_run(result: OpResult, ran: tuple[str, ...], op: OpSpec) -> OpResult:
    """Said in every report: "bfloat16 not run in the quick suite"."""
    left_out = tuple(d for d in op.dtypes if d not in ran)
    return msgspec.structs.replace(result, dtypes_not_run=left_out) if left_out else result


def _in_other_shards(op: OpSpec, shard: Shard) -> OpResult:
    return _not_run(op, OpStatus.SKIPPED, OTHER_SHARDS, f"none of its cases fell in shard {shard}")


def _no_gpu(op: OpSpec, require_gpu: bool) -> OpResult:
    message = "requires a GPU and none was found" + (" (--require-gpu)" if require_gpu else "")
    return _not_run(op, OpStatus.ERROR if require_gpu else OpStatus.SKIPPED, "no GPU", message)


def _hip_launch_not_run(op: OpSpec, require_gpu: bool, amd_gpu: bool) -> OpResult:
    """A HIP kernel's launch: `skipped (no AMD GPU)` where there is none (an error with --require-gpu); on a
    machine with one, an error: the launch would have to run there, and this gpuemu-ci cannot launch it."""
    if amd_gpu:
        return _not_run(op, OpStatus.ERROR, None, f"not run: {HIP_LAUNCH_UNSUPPORTED}")
    message = "a HIP kernel's launch needs an AMD GPU and none was found" + (
        " (--require-gpu)" if require_gpu else ""
    )
    return _not_run(op, OpStatus.ERROR if require_gpu else OpStatus.SKIPPED, "no AMD GPU", message)


def _not_run(op: OpSpec, status: OpStatus, skip_reason: str | None, message: str) -> OpResult:
    return OpResult(
        name=op.name,
        status=status,
        family=op.error_model.family.value if op.error_model.family else None,
        comparator=None,
        line=op.line,
        framework=op.targets.framework.value,
        interpreter=None,
        skip_reason=skip_reason,
        message=message,
        cases_total=0,
        cases_passed=0,
        cases_failed=0,
        cases_errored=0,
    )


def _lint(
    config: Config, settings: Settings, lint_runner: LintRunner | None, stop: threading.Event
) -> LintReport:
    if not config.kernels:
        return LintReport(status=LintStatus.NO_KERNELS, toolchain=None)
    if not settings.lint:
        return LintReport.disabled()
    if lint_runner is None:
        from gpuemu_ci.pipeline.lint_step import run_lint

        return run_lint(config, settings, stop)
    return lint_runner(config, settings)


def _say_interrupted(ops: tuple[OpResult, ...], signal_name: str) -> tuple[OpResult, ...]:
    """An op none of whose cases ran says that the signal stopped it, not the suite timeout."""
    return tuple(
        msgspec.structs.replace(op, message=f"no case ran (the run was interrupted by {signal_name} first)")
        if op.cases_total == 0 and (op.message or "").startswith("no case ran")
        else op
        for op in ops
    )


def display_path(path: Path) -> str:
    """The config path relative to the working directory (the repository root in Actions), so annotations
    and SARIF point at it; just its name when it lies elsewhere (no machine paths in reports)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name
