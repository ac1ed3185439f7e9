"""`gpuemu-ci run`: parse options -> pipeline -> results.json -> exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuemu_ci.cli.summary import print_summary
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, Suite
from gpuemu_ci.dtypes import canonical
from gpuemu_ci.errors import UsageError
from gpuemu_ci.pipeline import RunOptions, run_pipeline
from gpuemu_ci.progress import StderrReporter
from gpuemu_ci.results.io import dumps, write_results

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="gpuemu.toml to use (default: the nearest one in this or a parent directory).",
)


@click.command("run")
@config_option
@click.option(
    "--suite",
    type=click.Choice([s.value for s in Suite]),
    default="quick",
    show_default=True,
    help="quick: few cases per op, ci.quick_dtypes; thorough/nightly: many cases, all dtypes.",
)
@click.option(
    "--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed (default: validation.seed, else 0)."
)
@click.option("--op", "ops", multiple=True, help="Only this op (repeatable).")
@click.option("--dtype", "dtype_names", multiple=True, help="Only this dtype (repeatable).")
@click.option("--iterations", type=click.IntRange(1), help="Cases per op and dtype (overrides the suite's).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("gpuemu-out"),
    show_default=True,
    help="Directory for results.json and input snapshots.",
)
@click.option("--json", "as_json", is_flag=True, help="Also print results.json on stdout.")
@click.option("--jobs", type=click.IntRange(1), help="Ops run in parallel (default: ci.parallel_jobs).")
@click.option(
    "--require-gpu/--no-require-gpu",
    default=None,
    help="Ops that need a GPU are an error (not skipped) when none is present.",
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
    lint: bool | None,
    archs: tuple[str, ...],
    timeout: float | None,
    baseline_path: Path | None,
) -> int:
    """Fuzz every op against its fp64 reference, lint the kernels, and write results.json."""
    config = load_config(config_path)
    dtypes = []
    for name in dtype_names:
        resolved = canonical(name)
        if resolved is None:
            raise UsageError(f"--dtype {name!r} is not a dtype gpuemu-ci knows")
        dtypes.append(resolved)
    options = RunOptions(
        suite=Suite(suite),
        seed=seed,
        ops=ops,
        dtypes=tuple(dtypes),
        iterations=iterations,
        out_dir=out_dir.resolve(),
        jobs=jobs,
        require_gpu=require_gpu,
        lint=lint,
        archs=archs,
        timeout_s=timeout,
    )
    document = run_pipeline(config, options, StderrReporter()).to_json()
    document = attach_diff(document, baseline_path, config)
    path = write_results(options.out_dir, document)
    print_summary(document, path)
    if as_json:
        sys.stdout.write(dumps(document))
    return int(document["exit_code"])


def attach_diff(document: dict[str, Any], baseline_path: Path | None, config: Config) -> dict[str, Any]:
    """Adds the baseline diff (and its effect on the exit code) when a baseline is given."""
    if baseline_path is None:
        return document
    from gpuemu_ci.diff.apply import apply_baseline

    return apply_baseline(document, baseline_path, config.policies)
