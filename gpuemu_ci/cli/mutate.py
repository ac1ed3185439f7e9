"""`gpuemu-ci mutate`: plant known bugs in the ops' Triton kernels and the [[kernels]]' CUDA sources, and report
which ones the suite (or, where no GPU runs a CUDA kernel, the lint) lets through."""

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
from gpuemu_ci.mutate.plan import operator_names
from gpuemu_ci.mutate.run import MutateOptions, run_mutation
from gpuemu_ci.pipeline.settings import RunOptions
from gpuemu_ci.pipeline.shard import Shard
from gpuemu_ci.progress import StderrReporter
from gpuemu_ci.render.mutation import mutation_lines
from gpuemu_ci.render.summary import print_summary
from gpuemu_ci.results.codec import to_json, write_results


@click.command("mutate")
@config_option
@op_option
@click.option(
    "--max-mutants",
    type=click.IntRange(1),
    help="At most this many mutants per op, chosen from the seed with every operator represented (default: all).",
)
@click.option(
    "--operator",
    "operators",
    multiple=True,
    type=click.Choice(operator_names()),
    help="Only this mutation operator (repeatable; default: all).",
)
@click.option(
    "--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed (default: validation.seed, else 0)."
)
@click.option(
    "--suite",
    type=click.Choice([s.value for s in Suite]),
    default="quick",
    show_default=True,
    help="The suite each mutant runs.",
)
@iterations_option
@jobs_option
@click.option(
    "--shard",
    "shard_text",
    metavar="K/N",
    help="Run only shard K of N of the mutants (every Nth of each op's plan from the Kth); the others are `not run`.",
)
@click.option(
    "--budget",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds for the whole run; mutants not started by then are `not run` (default: ci.thorough_timeout).",
)
@click.option(
    "--min-score",
    type=click.FloatRange(0, 100),
    help="Fail (exit 1) when an op's mutation score is under this percentage.",
)
@click.option(
    "--cache",
    "cache_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of cached mutant verdicts (default: <out>/mutate-cache).",
)
@click.option("--no-cache", is_flag=True, help="Run every mutant, keeping no verdict.")
@out_option()
@json_option
def mutate_command(
    config_path: Path | None,
    ops: tuple[str, ...],
    max_mutants: int | None,
    operators: tuple[str, ...],
    seed: int | None,
    suite: str,
    iterations: int | None,
    jobs: int | None,
    shard_text: str | None,
    budget: float | None,
    min_score: float | None,
    cache_dir: Path | None,
    no_cache: bool,
    out_dir: Path,
    as_json: bool,
) -> int:
    """Plant known bugs (mutants) in the ops' Triton kernels and the [[kernels]]' CUDA sources, run each through
    the op's suite, and report the mutation score and every survivor with what the config likely lacks to
    kill it.

    The original suite runs first: an op that fails it is not scored. Mutants run in the usual isolated
    workers with the kernel changed in memory; your files are never written. A CUDA mutant is compiled and
    linted first; where no GPU runs its cases, what the lint cannot judge is `not run`."""
    shard = Shard.parse(shard_text) if shard_text is not None else None
    config = load_config(config_path)
    out = out_dir.resolve()
    options = MutateOptions(
        run=RunOptions(
            suite=Suite(suite),
            seed=seed,
            ops=ops,
            iterations=iterations,
            out_dir=out,
            jobs=jobs,
            lint=None,  # [ci] lint: the CUDA mutants are judged by compiling them
            timeout_s=budget,
            shard=shard,
        ),
        max_mutants=max_mutants,
        operators=operators,
        cache_dir=None if no_cache else (cache_dir or out / "mutate-cache"),
        min_score=min_score / 100 if min_score is not None else None,
    )
    with StderrReporter() as reporter:
        results = run_mutation(config, options, observer=reporter)
        path = write_results(out, results)
    print_summary(results, path)
    if results.mutation is not None:
        for line in mutation_lines(results.mutation):
            click.echo(line, err=True)
    if as_json:
        sys.stdout.buffer.write(to_json(results))
        sys.stdout.flush()
    return results.exit_code
