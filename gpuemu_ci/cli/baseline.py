"""`gpuemu-ci baseline create` and `gpuemu-ci diff`: make a baseline file, compare a run with one."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.apply import diff_snapshots
from gpuemu_ci.diff.baseline import BaselineError, create_baseline, load_snapshot, read_document
from gpuemu_ci.diff.fields import FormatError
from gpuemu_ci.diff.gate import diff_exit_code
from gpuemu_ci.diff.gate import fail_on_regression as effective_flag
from gpuemu_ci.diff.render import render_text
from gpuemu_ci.errors import ExitCode, GpuemuError
from gpuemu_ci.results.io import atomic_write_bytes, dumps

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
@click.pass_context
def create_command(ctx: click.Context, source: Path, output: Path) -> None:
    """Trim a results.json into a baseline.json: per op x dtype status, worst headroom and case counts; per
    kernel x arch metrics; seed, config hash, versions, toolchain and git commit."""
    try:
        baseline = create_baseline(read_document(source, "results"))
    except BaselineError as exc:
        _fail(ctx, exc.message, ExitCode.USAGE)
        return
    except FormatError as exc:
        _fail(ctx, f"{source} is not a usable gpuemu-ci results document: {exc}", ExitCode.USAGE)
        return
    text = dumps(baseline)
    if str(output) == "-":
        sys.stdout.write(text)
    else:
        try:
            atomic_write_bytes(output, text.encode("utf-8"))
        except OSError as exc:
            _fail(ctx, f"cannot write {output}: {exc.strerror or exc}", ExitCode.USAGE)
            return
    pairs = sum(len(op.get("dtypes") or []) for op in baseline["ops"])
    entries = sum(len(k.get("entries") or []) for k in baseline["kernels"])
    commit = (baseline.get("git") or {}).get("commit")
    where = "stdout" if str(output) == "-" else str(output)
    click.echo(
        f"gpuemu-ci baseline: {len(baseline['ops'])} ops ({pairs} op x dtype results), "
        f"{len(baseline['kernels'])} kernels ({entries} entry x arch metrics)"
        + (f", commit {commit[:12]}" if commit else ", no git commit recorded")
        + f" -> {where}",
        err=True,
    )
    run = baseline.get("run") or {}
    if run.get("cut_short"):
        click.echo(
            "gpuemu-ci baseline: warning: the run was cut short by its timeout; what it did not reach "
            "will show up as new in later diffs",
            err=True,
        )
    if run.get("verdict") not in (None, "passed"):
        click.echo(
            f"gpuemu-ci baseline: note: the run's verdict was {run.get('verdict')}; what failed in it "
            "cannot be flagged as a regression later",
            err=True,
        )
    ctx.exit(int(ExitCode.PASSED))


@click.command("diff")
@click.argument("baseline", type=_path)
@click.argument("current", type=_path)
@click.option("--json", "as_json", is_flag=True, help="Print the diff section (JSON) on stdout.")
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
@click.pass_context
def diff_command(
    ctx: click.Context,
    baseline: Path,
    current: Path,
    as_json: bool,
    fail_flag: bool | None,
    config_path: Path | None,
) -> None:
    """Compare CURRENT (a results.json) with BASELINE (a results.json or baseline.json).

    Exit 0: no regression fails the gate; 1: a regression does; 2: an input or the config cannot be read.
    The table goes to stderr; --json prints the same classification as JSON on stdout."""
    try:
        policies = _policies(config_path)
        base, source = load_snapshot(baseline, "baseline")
        now, _ = load_snapshot(current, "current results")
    except GpuemuError as exc:
        _fail(ctx, exc.diagnostics(), exc.exit_code)
        return
    diff = diff_snapshots(base, source, str(baseline), now, policies, effective_flag(policies, fail_flag))
    data = diff.to_json()
    click.echo(render_text(data), err=True)
    if as_json:
        sys.stdout.write(dumps(data))
    ctx.exit(int(diff_exit_code(diff)))


def _policies(config_path: Path | None) -> Policies:
    if config_path is None:
        return Policies()
    from gpuemu_ci.config.load import load_config

    return load_config(config_path).policies


def _fail(ctx: click.Context, message: str, code: ExitCode) -> None:
    click.echo(f"gpuemu-ci: error: {message}", err=True)
    ctx.exit(int(code))
