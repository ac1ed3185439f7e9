"""`gpuemu-ci baseline create` and `gpuemu-ci diff`: make a baseline file, compare a run with one."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from gpuemu_ci.cli.options import format_option
from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.baseline import baseline_of, load_baseline, tagged_baseline
from gpuemu_ci.diff.classify import baseline_info, compare
from gpuemu_ci.errors import ExitCode, UsageError
from gpuemu_ci.files import atomic_write, cannot_write
from gpuemu_ci.render.baseline_diff import render_text
from gpuemu_ci.results.codec import read_results, to_json
from gpuemu_ci.results.model import Verdict

_path = click.Path(dir_okay=False, path_type=Path)


DEFAULT_RESULTS = Path("gpuemu-out") / "results.json"


def tag_file(tag: str, config_path: Path | None = None) -> Path:
    """The baseline TAG beside the config (found from the working directory), else in the working directory."""
    if config_path is None:
        from gpuemu_ci.config.load import find_config
        from gpuemu_ci.errors import ConfigError

        try:
            config_path = find_config()
        except ConfigError:
            config_path = Path.cwd() / "gpuemu.toml"
    return tagged_baseline(config_path.resolve().parent, tag)


class _TaggingGroup(click.Group):
    """`baseline TAG` (upstream's form) reads as `baseline tag TAG`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["tag", *args]
        return super().parse_args(ctx, args)


@click.group("baseline", cls=_TaggingGroup)
def baseline_group() -> None:
    """Baselines: the results of a run on the target branch that later runs are compared with.

    `gpuemu-ci baseline TAG` (upstream's form) saves the last run's results as the baseline TAG, for
    `gpuemu-ci diff --baseline TAG`."""


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
    return _write_baseline(source, output)


@baseline_group.command("tag", hidden=True)
@click.argument("tag")
@click.option(
    "--from", "source", type=_path, default=DEFAULT_RESULTS, show_default=True, help="results.json of a run."
)
@click.option("--config", "config_path", type=_path, help="gpuemu.toml beside which .gpuemu/ is kept.")
def tag_command(tag: str, source: Path, config_path: Path | None) -> int:
    """Save a run's results as the baseline TAG (.gpuemu/baselines/TAG.json beside gpuemu.toml)."""
    target = tag_file(tag, config_path)
    if not source.is_file():
        raise UsageError(
            f"no results to save as baseline {tag!r}: {source} does not exist (run `gpuemu-ci test` or "
            "`gpuemu-ci run` first)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    return _write_baseline(source, target)


def _write_baseline(source: Path, output: Path) -> int:
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
@click.argument("baseline", type=_path, required=False)
@click.argument("current", type=_path, required=False)
@click.option(
    "--baseline",
    "baseline_tag",
    metavar="TAG",
    help="Upstream's form: the baseline saved by `gpuemu-ci baseline TAG` (or a file); CURRENT defaults to "
    "gpuemu-out/results.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the diff (JSON) on stdout.")
@format_option
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
    baseline: Path | None,
    current: Path | None,
    baseline_tag: str | None,
    as_json: bool,
    output_format: str | None,
    fail_flag: bool | None,
    config_path: Path | None,
) -> int:
    """Compare CURRENT (a results.json) with BASELINE (a results.json or baseline.json), or, upstream's form,
    `diff --baseline TAG` the last run (gpuemu-out/results.json) with the baseline TAG.

    Exit 0: no regression fails the gate; 1: a regression does; 2: an input or the config cannot be read.
    The table goes to stderr; --json prints the same classification as JSON on stdout."""
    as_json = as_json or output_format == "json"
    if baseline_tag is not None:
        if current is not None:
            raise UsageError("--baseline TAG takes at most one file, CURRENT")
        current = baseline or DEFAULT_RESULTS
        given = Path(baseline_tag)
        baseline = (
            given if given.suffix == ".json" and given.is_file() else tag_file(baseline_tag, config_path)
        )
        if not baseline.is_file():
            raise UsageError(
                f"no baseline {baseline_tag!r} ({baseline} does not exist); save one with "
                f"`gpuemu-ci baseline {baseline_tag}` after a run"
            )
    if baseline is None or current is None:
        raise UsageError("give BASELINE and CURRENT (results files), or --baseline TAG")
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
