"""Upstream gpuemu's commands, as `gpuemu-ci` subcommands: those whose meaning carries over run the gate
(`test`, `validate`, `fuzz`; `baseline TAG`, `diff --baseline TAG`, `lint --ptx` and `minimize SEED` are
options of our own commands), and those that differ say what to run instead, exit 2 (docs/migrating.md).

There is no `gpuemu` executable: upstream's Rust CLI installs one (cargo), and two tools answering to one name
on PATH would make the same CI line mean different gates depending on PATH order."""

from __future__ import annotations

from pathlib import Path

import click

from gpuemu_ci import __version__
from gpuemu_ci.cli.options import config_option, out_option
from gpuemu_ci.cli.run import run_command
from gpuemu_ci.errors import ExitCode, UsageError

_ANY_ARGS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.command("test")
@config_option
@click.option("--quick", is_flag=True, help="The quick suite (the default).")
@click.option("--thorough", is_flag=True, help="The thorough suite.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed.")
@out_option()
@click.pass_context
def test_command(
    ctx: click.Context, config_path: Path | None, quick: bool, thorough: bool, seed: int | None, out_dir: Path
) -> int:
    """Upstream's `gpuemu test`: `gpuemu-ci run` (--thorough: the thorough suite). Unlike upstream, a failure
    exits 1."""
    if quick and thorough:
        raise UsageError("--quick and --thorough: choose one")
    suite = "thorough" if thorough else "quick"
    return int(ctx.invoke(run_command, config_path=config_path, suite=suite, seed=seed, out_dir=out_dir))


@click.command("validate")
@config_option
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed.")
@out_option()
@click.pass_context
def validate_command(ctx: click.Context, config_path: Path | None, seed: int | None, out_dir: Path) -> int:
    """Upstream's validate step: `gpuemu-ci run` (the quick suite)."""
    return int(ctx.invoke(run_command, config_path=config_path, seed=seed, out_dir=out_dir))


@click.command("fuzz")
@config_option
@click.option("-o", "--op", "ops", multiple=True, help="Only this op (repeatable; upstream takes one).")
@click.option(
    "-i",
    "--iterations",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Cases per op and dtype (upstream: per op, its dtypes drawn at random).",
)
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed.")
@click.option("--fail-fast", is_flag=True, hidden=True, help="Upstream's flag; refused (every case runs).")
@out_option()
@click.pass_context
def fuzz_command(
    ctx: click.Context,
    config_path: Path | None,
    ops: tuple[str, ...],
    iterations: int,
    seed: int | None,
    fail_fast: bool,
    out_dir: Path,
) -> int:
    """Upstream's `gpuemu fuzz`: `gpuemu-ci run --iterations N`: N cases per op and dtype."""
    if fail_fast:
        raise UsageError(
            "--fail-fast: gpuemu-ci runs every case of the suite and records each failure with its replay "
            "command; drop the flag (use --iterations to bound the run)"
        )
    return int(
        ctx.invoke(
            run_command,
            config_path=config_path,
            ops=ops,
            iterations=iterations,
            seed=seed,
            out_dir=out_dir,
        )
    )


@click.command("version")
def version_command() -> int:
    """Upstream's `gpuemu version` (same as --version)."""
    click.echo(f"gpuemu-ci {__version__}")
    return int(ExitCode.PASSED)


@click.command("daemon", context_settings=_ANY_ARGS, hidden=True)
@click.argument("action", required=False)
@click.argument("rest", nargs=-1, type=click.UNPROCESSED)
def daemon_command(action: str | None, rest: tuple[str, ...]) -> int:
    """Upstream's daemon: gpuemu-ci has none (every command runs in its own process); `start`, `stop` and
    `status` succeed without doing anything, so that CI scripts written for upstream keep working."""
    if action in ("start", "stop", "status"):
        click.echo(
            f"gpuemu-ci: note: `daemon {action}` does nothing: gpuemu-ci runs no daemon; each command runs "
            "the ops itself (in isolated worker processes)",
            err=True,
        )
        return int(ExitCode.PASSED)
    raise UsageError(
        f"`daemon {action or ''}`".rstrip()
        + ": gpuemu-ci runs no daemon (start, stop and status are accepted and do nothing); its logs are on "
        "stderr of each command"
    )


# Upstream commands whose meaning differs: what to run instead.
DID_YOU_MEAN = {
    "reproduce": "gpuemu-ci replay --op OP --seed SEED (re-runs the op and the reference on the case; "
    "upstream's only printed the stored failure), or gpuemu-ci replay gpuemu-out/results.json for every "
    "failure",
    "ci": "gpuemu-ci run (exit 1 when the gate fails), then gpuemu-ci render FORMAT gpuemu-out/results.json for "
    "sarif, junit, comment (PR comment) or summary",
    "report": "gpuemu-ci render FORMAT gpuemu-out/results.json (sarif, junit, comment, summary, html); "
    "gpuemu-ci sign for a signed report",
    "failures": "gpuemu-ci render summary gpuemu-out/results.json (each failure with its replay command)",
    "artifacts": "gpuemu-ci lint --json (per kernel and arch metrics from ptxas)",
    "coverage": "gpuemu-ci render summary gpuemu-out/results.json (the coverage of each op: dtypes, shapes, "
    "layouts and values)",
    "debug": "gpuemu-ci replay --op OP --seed SEED, or gpuemu-ci minimize SEED",
}


def _did_you_mean(name: str, instead: str) -> click.Command:
    @click.command(
        name,
        context_settings=_ANY_ARGS,
        hidden=True,
        add_help_option=False,
        help=f"Upstream's `{name}`; in gpuemu-ci: {instead}",
    )
    @click.argument("rest", nargs=-1, type=click.UNPROCESSED)
    def command(rest: tuple[str, ...]) -> int:
        raise UsageError(f"`{name}` is upstream gpuemu's command; in gpuemu-ci run: {instead}")

    return command


did_you_mean_commands = [_did_you_mean(name, instead) for name, instead in DID_YOU_MEAN.items()]
