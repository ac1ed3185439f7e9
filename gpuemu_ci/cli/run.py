"""`gpuemu-ci run`: parse options -> the gate -> results.json -> exit code."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuemu_ci.cli.options import (
    config_option,
    iterations_option,
    jobs_option,
    json_option,
    op_option,
    out_option,
)
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Suite
from gpuemu_ci.diff.baseline import BaselineSource
from gpuemu_ci.dtypes import canonical
from gpuemu_ci.errors import Interrupted, UsageError
from gpuemu_ci.pipeline.gate import GateBaseline, run_gate
from gpuemu_ci.pipeline.interrupt import Interruption
from gpuemu_ci.pipeline.settings import RunOptions
from gpuemu_ci.pipeline.shard import Shard
from gpuemu_ci.progress import StderrReporter
from gpuemu_ci.render.summary import print_summary
from gpuemu_ci.render.timings import profile_table
from gpuemu_ci.results.codec import to_json, write_results


@click.command("run")
@config_option
@click.option(
    "--suite",
    type=click.Choice([s.value for s in Suite]),
    default="quick",
    show_default=True,
    help="quick: 16 cases per op for its first dtype, 8 for each other (ci.quick_dtypes narrows the dtypes); "
    "thorough/nightly: 100 per op and dtype, plus the large sizes.",
)
@click.option(
    "--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed (default: validation.seed, else 0)."
)
@op_option
@click.option("--dtype", "dtype_names", multiple=True, help="Only this dtype (repeatable).")
@iterations_option
@out_option()
@json_option
@jobs_option
@click.option(
    "--shard",
    "shard_text",
    metavar="K/N",
    help="Run only shard K of N: a deterministic 1/N of the cases, balanced by cost (`gpuemu-ci merge` joins them).",
)
@click.option(
    "--require-gpu/--no-require-gpu",
    default=None,
    help="Ops that need a GPU are an error (not skipped) when none is present.",
)
@click.option(
    "--allow-skips/--no-allow-skips",
    default=None,
    help="Let a run whose ops or cases were skipped (no GPU, Triton's interpreter on bf16, too large for this "
    'machine) pass, as "passed with N skipped" (default: ci.allow_skips; otherwise such a run exits 3).',
)
@click.option("--lint/--no-lint", default=None, help="Lint [[kernels]] (default: ci.lint).")
@click.option("--arch", "archs", multiple=True, help="Lint for this arch (repeatable; overrides config).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds for the whole run (default: ci.thorough_timeout).",
)
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Diff against this baseline (results.json or baseline.json).",
)
@click.option(
    "--fail-on-regression/--no-fail-on-regression",
    "fail_on_regression",
    default=None,
    help="With --baseline: whether a regression fails the gate (default: policies.fail_on_regression).",
)
@click.option(
    "--profile",
    is_flag=True,
    help="Print where each op's seconds went (input generation, op and reference calls, judging, Triton launch "
    "preparation, worker start-up, transport, explaining failures); results.json records it either way "
    "(ops[].timings).",
)
def run_command(
    config_path: Path | None,
    suite: str,
    seed: int | None,
    ops: tuple[str, ...],
    dtype_names: tuple[str, ...],
    iterations: int | None,
    out_dir: Path,
    as_json: bool,
    jobs: int | None,
    require_gpu: bool | None,
    allow_skips: bool | None,
    lint: bool | None,
    archs: tuple[str, ...],
    timeout: float | None,
    baseline_path: Path | None,
    fail_on_regression: bool | None,
    shard_text: str | None,
    profile: bool = False,
) -> int:
    """Fuzz every op against its fp64 reference, lint the kernels, and write results.json.

    SIGINT or SIGTERM stops the run within seconds; the cases judged so far are written, marked cut short,
    and the command exits 130 or 143."""
    shard = Shard.parse(shard_text) if shard_text is not None else None
    if shard is not None and baseline_path is not None:
        raise UsageError(
            "--shard and --baseline: diff the merged results instead (gpuemu-ci merge --baseline)"
        )
    config = load_config(config_path)
    for note in config.notes:  # inputs read from the code, defaults files not read: said, never silent
        click.echo(f"gpuemu-ci: note: {note}", err=True)
    if fail_on_regression is not None and baseline_path is None:
        raise UsageError("--fail-on-regression/--no-fail-on-regression need --baseline")
    options = RunOptions(
        suite=Suite(suite),
        seed=seed,
        ops=ops,
        dtypes=tuple(_dtype(name) for name in dtype_names),
        iterations=iterations,
        out_dir=out_dir.resolve(),
        jobs=jobs,
        require_gpu=require_gpu,
        allow_skips=allow_skips,
        lint=lint,
        archs=archs,
        timeout_s=timeout,
        shard=shard,
    )
    baseline = None
    if baseline_path is not None:
        baseline = GateBaseline(BaselineSource(path=baseline_path), fail_on_regression)
    with Interruption() as interruption, StderrReporter() as reporter:
        results = run_gate(config, options, baseline=baseline, observer=reporter, interruption=interruption)
        path = write_results(options.out_dir, results)
    print_summary(results, path)
    if profile:
        click.echo(profile_table(results), err=True)
    if as_json:
        sys.stdout.buffer.write(to_json(results))
        sys.stdout.flush()
    if interruption.signal is not None:
        raise Interrupted(
            f"interrupted by {interruption.name}: the cases judged so far are in {path} (cut short)",
            interruption.signal,
        )
    return results.exit_code


def _dtype(name: str) -> str:
    resolved = canonical(name)
    if resolved is None:
        raise UsageError(f"--dtype {name!r} is not a dtype gpuemu-ci knows")
    return resolved
