"""`gpuemu-ci baseline create` and `gpuemu-ci diff`: make a baseline file, compare a run with one."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.baseline import baseline_of, load_baseline
from gpuemu_ci.diff.classify import baseline_info, compare
from gpuemu_ci.diff.render import render_text
from gpuemu_ci.errors import ExitCode
from gpuemu_ci.files import atomic_write, cannot_write
from gpuemu_ci.results.codec import read_results, to_json
from gpuemu_ci.results.model import Verdict

_path = click.Path(dir_okay=False, path_type=Path)


@click.group("baseline")
def baseline_group() -> None:
    """Baselines: the results of a run on the target branch that later runs are compared with."""


@baseline_group.command("create")
@click.option(
    "--from",
    "source",
    required=True,
    type=_path,
    metavar="RESULTS",
    help="results.json of a run on the target branch.",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Where to write baseline.json ('-' for stdout).",
)
def create_command(source: Path, output: Path) -> int:
    """Trim a results.json into a baseline.json: the same document without its failure records (per op x dtype
    status, worst headroom and case counts; per kernel x arch metrics; seed, config hash, versions, toolchain
    and git commit)."""
    baseline = baseline_of(read_results(source))
    data = to_json(baseline)
    if str(output) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        try:
            atomic_write(output, data)
        except OSError as exc:
            raise cannot_write(output, exc) from None
    pairs = sum(len(op.dtypes) for op in baseline.ops)
    entries = sum(len(k.entries) for k in baseline.kernels)
    commit = baseline.tested_commit
    where = "stdout" if str(output) == "-" else str(output)
    click.echo(
        f"gpuemu-ci baseline: {len(baseline.ops)} ops ({pairs} op x dtype results), "
        f"{len(baseline.kernels)} kernels ({entries} entry x arch metrics)"
        + (f", commit {commit[:12]}" if commit else ", no git commit recorded")
        + f" -> {where}",
        err=True,
    )
    if baseline.cut_short:
        click.echo(
            "gpuemu-ci baseline: warning: the run was cut short by its timeout; what it did not reach "
            "will show up as new in later diffs",
            err=True,
        )
    if baseline.verdict is not Verdict.PASSED:
        click.echo(
            f"gpuemu-ci baseline: note: the run's verdict was {baseline.verdict.value}; what failed in it "
            "cannot be flagged as a regression later",
            err=True,
        )
    return int(ExitCode.PASSED)


@click.command("diff")
@click.argument("baseline", type=_path)
@click.argument("current", type=_path)
@click.option("--json", "as_json", is_flag=True, help="Print the diff (JSON) on stdout.")
@click.option(
    "--fail-on-regression/--no-fail-on-regression",
    "fail_flag",
    default=None,
    help="Exit 1 on a regression (default: policies.fail_on_regression, which defaults to on).",
)
@click.option(
    "--config",
    "config_path",
    type=_path,
    help="gpuemu.toml whose [policies] set the thresholds (default: built-in defaults).",
)
def diff_command(
    baseline: Path, current: Path, as_json: bool, fail_flag: bool | None, config_path: Path | None
) -> int:
    """Compare CURRENT (a results.json) with BASELINE (a results.json or baseline.json).

    Exit 0: no regression fails the gate; 1: a regression does; 2: an input or the config cannot be read.
    The table goes to stderr; --json prints the same classification as JSON on stdout."""
    policies = _policies(config_path)
    base = load_baseline(baseline)
    now = read_results(current, "current results")
    flag = policies.fail_on_regression if fail_flag is None else fail_flag
    diff = compare(base, now, policies, fail_on_regression=flag, info=baseline_info(base, str(baseline)))
    click.echo(render_text(diff), err=True)
    if as_json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(diff), indent=2) + b"\n")
        sys.stdout.flush()
    return int(ExitCode.GATE_FAILED if diff.gate_failed else ExitCode.PASSED)


def _policies(config_path: Path | None) -> Policies:
    if config_path is None:
        return Policies()
    from gpuemu_ci.config.load import load_config

    return load_config(config_path).policies
