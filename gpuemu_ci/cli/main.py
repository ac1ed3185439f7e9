"""The `gpuemu-ci` command: a click group. Catches GpuemuError once and turns it into its exit code."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

import click

from gpuemu_ci import __version__
from gpuemu_ci.errors import ExitCode, GpuemuError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuemu-ci")
def cli() -> None:
    """gpuemu-ci: a correctness gate for GPU kernels.

    Exit codes (every command): 0 passed, 1 gate failed, 2 usage or config error, 3 infrastructure error
    (could not run). `verify` has its own codes, see `gpuemu-ci verify --help`.
    """


def _register() -> None:
    from gpuemu_ci.cli import commands

    for command in commands.all_commands():
        cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI and returns the exit code (never raises for user errors)."""
    _register()
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None, prog_name="gpuemu-ci", standalone_mode=False
        )
    except GpuemuError as exc:
        click.echo(f"gpuemu-ci: error: {exc.diagnostics()}", err=True)
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("gpuemu-ci: aborted", err=True)
        return int(ExitCode.INFRASTRUCTURE)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE) if exc.exit_code == 2 else int(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("gpuemu-ci: interrupted", err=True)
        return 130
    except Exception as exc:  # a bug in gpuemu-ci itself: say so plainly, exit 3
        if os.environ.get("GPUEMU_DEBUG"):
            traceback.print_exc()
        click.echo(
            f"gpuemu-ci: internal error: {type(exc).__name__}: {exc} (set GPUEMU_DEBUG=1 for a "
            "traceback and please report it)",
            err=True,
        )
        return int(ExitCode.INFRASTRUCTURE)
    if isinstance(result, int):
        return result
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
