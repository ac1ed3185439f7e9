"""The orchestrator: config + options -> results document. Calls each stage in order; writes only files."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuemu_ci import __version__
from gpuemu_ci.config.model import Config, Framework, OpSpec, Suite
from gpuemu_ci.errors import ConfigError, ExitCode
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.pipeline.environment import environment, git_info
from gpuemu_ci.pipeline.op_runner import OpRunner
from gpuemu_ci.plan.expand import plan_op, suite_dtypes
from gpuemu_ci.progress import Observer, Silent
from gpuemu_ci.results.model import OpResult, OpStatus, RunDocument, Summary, Verdict

DEFAULT_SEED = 0  # a fixed master seed: the same config replays the same suite unless a seed is given


@dataclass(frozen=True)
class RunOptions:
    suite: Suite = Suite.QUICK
    seed: int | None = None
    ops: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    iterations: int | None = None
    out_dir: Path = Path("gpuemu-out")
    jobs: int | None = None
    require_gpu: bool | None = None
    lint: bool | None = None
    archs: tuple[str, ...] = ()
    timeout_s: float | None = None  # overrides ci.thorough_timeout
    run_context: dict[str, Any] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


def master_seed(config: Config, options: RunOptions) -> int:
    """--seed, else a fresh random seed for the nightly suite (recorded in the results), else the config's."""
    if options.seed is not None:
        return options.seed
    if options.suite is Suite.NIGHTLY:
        import secrets

        return secrets.randbits(64)
    if config.validation.seed is not None:
        return config.validation.seed
    return DEFAULT_SEED


def select_ops(config: Config, names: Sequence[str]) -> tuple[OpSpec, ...]:
    if not names:
        return config.ops
    known = {op.name: op for op in config.ops}
    missing = [n for n in names if n not in known]
    if missing:
        import difflib

        hint = difflib.get_close_matches(missing[0], list(known), n=1)
        raise ConfigError(
            f"--op {missing[0]!r} is not an op in {config.path.name}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f". Ops: {', '.join(known) or 'none'}."
        )
    return tuple(known[n] for n in names)


def needs_gpu(op: OpSpec) -> bool:
    return op.execution.require_gpu or op.targets.framework is Framework.CUPY


def run_pipeline(
    config: Config,
    options: RunOptions,
    observer: Observer | None = None,
    pool_factory: Callable[[int], Any] | None = None,
    lint_runner: Callable[[Config, RunOptions], tuple[list[dict[str, Any]], dict[str, Any], bool]]
    | None = None,
    gpu: dict[str, Any] | str | None = "detect",
) -> RunDocument:
    """Runs every selected op (and the lint step) and returns the results document (not yet written)."""
    observer = observer or Silent()
    started = time.monotonic()
    started_at = _now()
    seed = master_seed(config, options)
    ops = select_ops(config, options.ops)
    for dtype in options.dtypes:
        if not any(dtype in op.dtypes for op in ops):
            raise ConfigError(f"--dtype {dtype!r} is not among the dtypes of the selected ops")
    iterations = options.iterations or (
        config.ci.quick_iterations if options.suite is Suite.QUICK else config.ci.thorough_iterations
    )
    jobs = max(1, options.jobs or config.ci.parallel_jobs)
    require_gpu = config.ci.require_gpu if options.require_gpu is None else options.require_gpu
    timeout = options.timeout_s or config.ci.thorough_timeout
    deadline = started + timeout

    if gpu == "detect":
        from gpuemu_ci.backends import detect_gpu

        detected = detect_gpu()
        gpu_info = detected.to_json() if detected is not None else None
    else:
        gpu_info = gpu  # type: ignore[assignment]
    notes: list[str] = []
    results: dict[str, OpResult] = {}
    runnable: list[tuple[OpSpec, list]] = []
    targets: dict[str, Any] = {}
    if not options.ops:  # launchable [[kernels]] run like ops, on a GPU only
        for kernel in config.kernels:
            if kernel.launch is not None and kernel.op is not None:
                from gpuemu_ci.backends.cuda import kernel_target

                ops = (*ops, replace(kernel.op, execution=replace(kernel.op.execution, require_gpu=True)))
                targets[kernel.op.name] = kernel_target(kernel, config.root)
    for op in ops:
        if needs_gpu(op) and gpu_info is None:
            reason = "no GPU"
            status = OpStatus.ERROR if require_gpu else OpStatus.SKIPPED
            message = "requires a GPU and none was found" + (" (--require-gpu)" if require_gpu else "")
            results[op.name] = OpResult(
                op.name,
                status,
                op.error_model.family.value if op.error_model.family else None,
                None,
                op.line,
                op.targets.framework.value,
                None,
                reason,
                message,
                0,
                0,
                0,
                0,
            )
            observer.op_finished(op.name, status.value, message)
            continue
        dtypes = suite_dtypes(op, config, options.suite, options.dtypes)
        runnable.append((op, plan_op(op, seed, dtypes, iterations)))

    cut_short = False
    if runnable:
        pool = _make_pool(pool_factory, jobs, config, options)
        try:

            def run_one(item: tuple[OpSpec, list]) -> tuple[str, OpResult, bool]:
                op, cases = item
                runner = OpRunner(
                    config, op, pool, options.out_dir, seed, observer, deadline, targets.get(op.name)
                )
                return op.name, runner.run(cases), runner.cut_short

            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="gpuemu-op") as executor:
                for name, result, short in executor.map(run_one, runnable):
                    results[name] = result
                    cut_short = cut_short or short
        finally:
            pool.close()

    kernels: list[dict[str, Any]] = []
    lint_info: dict[str, Any] = {"status": "no_kernels", "toolchain": None}
    lint_infra_error = False
    lint_enabled = config.ci.lint if options.lint is None else options.lint
    if config.kernels and not lint_enabled:
        lint_info = {"status": "disabled", "toolchain": None}
    elif config.kernels:
        if lint_runner is None:
            from gpuemu_ci.pipeline.lint_step import run_lint

            lint_runner = run_lint
        kernels, lint_info, lint_infra_error = lint_runner(config, options)

    ordered = tuple(results[op.name] for op in ops)
    summary = _summary(ordered, kernels, time.monotonic() - started)
    verdict, exit_code = decide(ordered, kernels, cut_short, lint_infra_error)
    if cut_short:
        notes.append(f"the run was cut short after {timeout:g} s (ci.thorough_timeout); results are partial")
    return RunDocument(
        tool_version=__version__,
        generator_version=GENERATOR_VERSION,
        seed=seed,
        suite=options.suite.value,
        started_at=started_at,
        finished_at=_now(),
        config={"path": _display_path(config.path), "sha256": config.sha256, "project": config.project.name},
        environment=environment(gpu_info),
        git=git_info(config.root),
        verdict=verdict,
        exit_code=int(exit_code),
        cut_short=cut_short,
        summary=summary,
        ops=ordered,
        kernels=tuple(kernels),
        lint=lint_info,
        run=options.run_context,
        notes=tuple(notes),
    )


def _make_pool(
    pool_factory: Callable[[int], Any] | None, jobs: int, config: Config, options: RunOptions
) -> Any:
    if pool_factory is not None:
        return pool_factory(jobs)
    from gpuemu_ci.backends import WorkerPool

    return WorkerPool(jobs, root=config.root, env=options.extra_env or None)


def decide(
    ops: Sequence[OpResult],
    kernels: Sequence[dict[str, Any]],
    cut_short: bool,
    lint_infra_error: bool = False,
) -> tuple[Verdict, ExitCode]:
    """0 passed, 1 gate failed, 2 config (an op or reference that does not load), 3 nothing ran / could not run.

    Never 0 when nothing ran or when the run was cut short."""
    if any(op.import_error for op in ops):
        return Verdict.ERROR, ExitCode.USAGE
    failed = any(op.status is OpStatus.FAILED for op in ops) or any(
        k.get("status") == "failed" for k in kernels
    )
    if failed:
        return Verdict.FAILED, ExitCode.GATE_FAILED
    if cut_short:
        return Verdict.INCOMPLETE, ExitCode.INFRASTRUCTURE
    if (
        lint_infra_error
        or any(op.status is OpStatus.ERROR for op in ops)
        or any(k.get("status") == "error" for k in kernels)
    ):
        return Verdict.ERROR, ExitCode.INFRASTRUCTURE
    executed = sum(op.cases_total for op in ops) + sum(1 for k in kernels if k.get("status") == "passed")
    if executed == 0:
        return Verdict.ERROR, ExitCode.INFRASTRUCTURE
    return Verdict.PASSED, ExitCode.PASSED


def _summary(ops: Sequence[OpResult], kernels: Sequence[dict[str, Any]], duration: float) -> Summary:
    def count(status: OpStatus) -> int:
        return sum(1 for op in ops if op.status is status)

    return Summary(
        ops_total=len(ops),
        ops_passed=count(OpStatus.PASSED),
        ops_failed=count(OpStatus.FAILED),
        ops_skipped=count(OpStatus.SKIPPED),
        ops_errored=count(OpStatus.ERROR),
        cases_total=sum(op.cases_total for op in ops),
        cases_failed=sum(op.cases_failed for op in ops),
        cases_errored=sum(op.cases_errored for op in ops),
        duration_s=round(duration, 3),
        kernels_total=len(kernels),
        kernels_failed=sum(1 for k in kernels if k.get("status") == "failed"),
    )


def _display_path(path: Path) -> str:
    """The config path relative to the working directory (the repository root in Actions), so annotations
    and SARIF point at it; just its name when it lies elsewhere (no machine paths in reports)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.name


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
