"""`gpuemu-ci merge`: the results of a suite's shards -> the results.json the unsharded run would have written."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.baseline import BaselineSource, diff_against
from gpuemu_ci.errors import UsageError
from gpuemu_ci.files import atomic_write
from gpuemu_ci.mutate.run import with_mutation
from gpuemu_ci.pipeline.gate import with_diff
from gpuemu_ci.render.mutation import mutation_lines
from gpuemu_ci.render.summary import print_summary
from gpuemu_ci.results.codec import read_results, to_json
from gpuemu_ci.results.kernels import LintStatus
from gpuemu_ci.results.merge import Shard, merge_mutation_shards, merge_shards
from gpuemu_ci.results.model import Results
from gpuemu_ci.results.snapshots import clear_snapshots

_path = click.Path(dir_okay=False, path_type=Path)


@click.command("merge")
@click.argument("shards", nargs=-1, required=True, type=_path)
@click.option(
    "-o",
    "--output",
    type=_path,
    default=Path("gpuemu-out/results.json"),
    show_default=True,
    help="Where to write the merged results.json (input snapshots of its failures go next to it).",
)
@click.option(
    "--config", "config_path", type=_path, help="gpuemu.toml whose [policies] judge the baseline diff."
)
@click.option(
    "--baseline", "baseline_path", type=_path, help="Diff against this baseline, as `run --baseline`."
)
@click.option(
    "--fail-on-regression/--no-fail-on-regression",
    "fail_on_regression",
    default=None,
    help="With --baseline: whether a regression fails the gate (default: policies.fail_on_regression).",
)
@click.option("--json", "as_json", is_flag=True, help="Also print the merged results.json on stdout.")
def merge_command(
    shards: tuple[Path, ...],
    output: Path,
    config_path: Path | None,
    baseline_path: Path | None,
    fail_on_regression: bool | None,
    as_json: bool,
) -> int:
    """Merge the results.json of every shard (`gpuemu-ci run --shard K/N`, or `gpuemu-ci mutate --shard K/N`)
    into the document of the whole suite (or of the whole mutate run).

    Exit codes are the gate's (0 passed, 1 failed, 3 incomplete or could not run); 2 when the files are not
    the N shards of one run (another config, seed or generator version, a shard missing or given twice)."""
    if fail_on_regression is not None and baseline_path is None:
        raise UsageError("--fail-on-regression/--no-fail-on-regression need --baseline")
    parts = [Shard(str(path), read_results(path, "shard results")) for path in shards]
    mutate = parts[0].results.mutation is not None
    merged = merge_mutation_shards(parts) if mutate else merge_shards(parts)
    policies = _policies(config_path, merged)
    diff = None
    if baseline_path is not None:
        flag = policies.fail_on_regression if fail_on_regression is None else fail_on_regression
        diff = diff_against(BaselineSource(path=baseline_path), merged, policies, flag)
    merged = with_diff(merged, diff, lint_unavailable=merged.lint.status is LintStatus.UNAVAILABLE)
    if merged.mutation is not None:
        merged = with_mutation(merged, merged.mutation)
    _copy_snapshots(merged, shards, output.parent)
    atomic_write(output, to_json(merged))
    print_summary(merged, output)
    if merged.mutation is not None:
        for line in mutation_lines(merged.mutation):
            click.echo(line, err=True)
    if as_json:
        sys.stdout.buffer.write(to_json(merged))
        sys.stdout.flush()
    return merged.exit_code


def _policies(config_path: Path | None, merged: Results) -> Policies:
    if config_path is None:
        return Policies()
    from gpuemu_ci.config.load import load_config

    config = load_config(config_path)
    if config.sha256 != merged.config.sha256:
        raise UsageError(f"{config_path} is not the config the shards ran (its sha256 differs)")
    return config.policies


def _copy_snapshots(merged: Results, shards: tuple[Path, ...], out_dir: Path) -> None:
    """The input snapshots and error maps of the recorded failures, from the shard that wrote each, next to the
    output (the snapshots an earlier merge left there are removed first, as a run does)."""
    failures = [f for op in merged.ops for f in op.failures]
    wanted = {f.snapshot for f in failures if f.snapshot} | {f.error_map for f in failures if f.error_map}
    if all(out_dir.resolve() != p.parent.resolve() for p in shards):
        clear_snapshots(out_dir)
    for name in sorted(wanted):
        target = out_dir / name
        source = next((p.parent / name for p in shards if (p.parent / name).is_file()), None)
        if source is None:
            if not target.is_file():
                click.echo(f"gpuemu-ci: warning: {name} is in none of the shards' directories", err=True)
            continue
        if source.resolve() != target.resolve():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
