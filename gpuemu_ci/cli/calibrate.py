"""`gpuemu-ci calibrate`: the worst headroom per op, dtype and shape class (pipeline/calibrate.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from gpuemu_ci.cli.options import config_option
from gpuemu_ci.config.load import load_config
from gpuemu_ci.errors import ExitCode
from gpuemu_ci.pipeline.calibrate import calibrate
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions, select_ops


@click.command("calibrate")
@config_option
@click.option("--op", "op_names", multiple=True, help="Only this op (repeatable); default: every op.")
@click.option("--iterations", type=click.IntRange(1), default=48, show_default=True, help="Cases per dtype.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed.")
@click.option(
    "--percentile",
    type=click.FloatRange(0, 100, min_open=True),
    help="Also print atol/rtol at this percentile of the observed errors (opt-in; not a bound).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON on stdout.")
def calibrate_command(
    config_path: Path | None,
    op_names: tuple[str, ...],
    iterations: int,
    seed: int | None,
    percentile: float | None,
    as_json: bool,
) -> int:
    """Run each op's cases and report the worst headroom per dtype and shape class."""
    config = load_config(config_path)
    ops = select_ops(config, op_names)
    with Session(config, RunOptions(seed=seed, jobs=1)) as session:
        result = calibrate(session, ops, iterations, percentile)
    for row in result.rows:
        line = (
            f"{row.op:<20} {row.dtype:<9} {row.shape_class:<18} cases {row.cases:>4}  "
            f"worst headroom {row.worst_headroom or 0.0:.3g}"
        )
        if percentile is not None and row.meaningless:
            line += f"  p{percentile:g}: no meaningful atol/rtol ({row.meaningless}); keep the error bound"
        elif percentile is not None:
            line += f"  p{percentile:g} atol {row.atol or 0.0:.3g} rtol {row.rtol or 0.0:.3g} (not a bound)"
        click.echo(line, err=True)
    if as_json:
        rows = [
            {
                k: v
                for k, v in dataclasses.asdict(row).items()
                if percentile is not None or k not in _QUANTILES
            }
            for row in result.rows
        ]
        click.echo(json.dumps(rows, indent=2))
    for note in result.notes:
        click.echo(f"gpuemu-ci: {note}", err=True)
    for skipped in result.skipped:
        click.echo(f"gpuemu-ci: not measured here: {skipped}", err=True)
    if result.unusable:
        click.echo(
            f"gpuemu-ci: {result.unusable} cases failed or could not be judged: calibrate on a correct kernel",
            err=True,
        )
        return int(ExitCode.GATE_FAILED)
    if not result.rows:
        click.echo("gpuemu-ci: nothing was measured: no case could be run here", err=True)
        return int(ExitCode.INFRASTRUCTURE)
    if result.skipped and not config.ci.allow_skips:
        click.echo(
            "gpuemu-ci: the calibration is incomplete: what was not measured here never counts "
            "(`[ci] allow_skips = true` accepts it)",
            err=True,
        )
        return int(ExitCode.INFRASTRUCTURE)
    return int(ExitCode.PASSED)


_QUANTILES = ("percentile", "atol", "rtol", "meaningless")
