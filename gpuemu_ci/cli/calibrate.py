"""`gpuemu-ci calibrate`: the worst headroom per op, dtype and shape class, from correct runs of the op.

Headroom is error / allowed; the default bound keeps correct kernels at or below 1/c of failing. Percentile
atol/rtol are offered only on explicit request (--percentile): they are quantiles of the errors seen at these
shapes, not bounds, and do not transfer to other shapes or magnitudes (research oracles.md §4.4).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import click
import numpy as np

from gpuemu_ci.cli.run import config_option
from gpuemu_ci.config.load import load_config
from gpuemu_ci.errors import ExitCode
from gpuemu_ci.pipeline.op_runner import OpRunner
from gpuemu_ci.pipeline.records import json_float
from gpuemu_ci.pipeline.run import RunOptions, master_seed, select_ops
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.progress import Silent


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
    from gpuemu_ci.backends import WorkerPool

    config = load_config(config_path)
    ops = select_ops(config, op_names)
    master = master_seed(config, RunOptions(seed=seed))
    rows = []
    failures = 0
    pool = WorkerPool(1, root=config.root)
    try:
        for op in ops:
            runner = OpRunner(config, op, pool, Path("gpuemu-out"), master, Silent())
            groups: dict[tuple[str, str, str], list[tuple[float, float, float]]] = defaultdict(list)
            for ref in plan_op(op, master, op.dtypes, iterations):
                outcome = runner.run_case(ref)
                if outcome.verdict is None or outcome.verdict.stats is None:
                    failures += 1
                    continue
                if not outcome.verdict.passed:
                    failures += 1
                stats = outcome.verdict.stats
                shape_class = ("tile-multiple" if outcome.inputs.stratum.aligned else "boundary") + " dims"
                reference = outcome.run.reference.outputs[0] if outcome.run.reference.outputs else None
                rel = 0.0
                if reference is not None and stats.max_abs_error is not None:
                    scale = float(np.nanmax(np.abs(reference))) if np.size(reference) else 0.0
                    rel = stats.max_abs_error / scale if scale > 0 else 0.0
                groups[(outcome.inputs.dtype, shape_class, stats.comparator.value)].append(
                    (stats.headroom or 0.0, stats.max_abs_error or 0.0, rel)
                )
            for (dtype, shape_class, comparator), values in sorted(groups.items()):
                headrooms = [v[0] for v in values]
                row = {
                    "op": op.name,
                    "dtype": dtype,
                    "shape_class": shape_class,
                    "cases": len(values),
                    "comparator": comparator,
                    "worst_headroom": json_float(max(headrooms)),
                }
                if percentile is not None:
                    row["percentile"] = percentile
                    row["atol"] = json_float(float(np.percentile([v[1] for v in values], percentile)))
                    row["rtol"] = json_float(float(np.percentile([v[2] for v in values], percentile)))
                rows.append(row)
    finally:
        pool.close()
    for row in rows:
        line = (
            f"{row['op']:<20} {row['dtype']:<9} {row['shape_class']:<18} cases {row['cases']:>4}  "
            f"worst headroom {row['worst_headroom']:.3g}"
        )
        if percentile is not None:
            line += f"  p{percentile:g} atol {row['atol']:.3g} rtol {row['rtol']:.3g} (not a bound)"
        click.echo(line, err=True)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    if failures:
        click.echo(
            f"gpuemu-ci: {failures} cases failed or could not be judged: calibrate on a correct kernel",
            err=True,
        )
        return int(ExitCode.GATE_FAILED)
    return int(ExitCode.PASSED)
