"""The `gpuemu-ci` command: a click group, and the one place where errors become messages and exit codes.

Commands return an exit code or raise; `main()` prints a `GpuemuError` once, in one format (on stderr, plus a
workflow-command annotation when running in GitHub Actions), and returns its code.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from types import FrameType

import click

from gpuemu_ci import __version__, early_signals
from gpuemu_ci.errors import AlreadyReported, ExitCode, GpuemuError, InfraError, Interrupted, UsageError
from gpuemu_ci.files import is_callers_fault

INTERRUPTED = 130  # 128 + SIGINT, as shells report it


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


class _Terminated(BaseException):
    """SIGTERM outside a run (a run handles it itself: pipeline/interrupt.py): unwind, so that every worker
    is stopped on the way out, then exit 143."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


# Commands that write what they found when interrupted: a signal held back while the process started is
# handed to their run (pipeline/interrupt.py), which stops before its first case and writes that no case ran.
RESULT_WRITING_COMMANDS = frozenset({"run", "action", "action-gate"})


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI and returns the exit code (never raises for user errors)."""
    _register()
    on_main_thread = threading.current_thread() is threading.main_thread()
    args = list(argv) if argv is not None else sys.argv[1:]
    holding = on_main_thread and early_signals.installed()
    if holding and args and args[0] in RESULT_WRITING_COMMANDS:
        previous = None  # signals stay held until the run takes them over, so none is lost before it
    else:
        if holding:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            held = early_signals.take()
            if held is not None:  # arrived while the CLI was importing: nothing was done yet
                return report_error(_interrupted(held))
        previous = signal.signal(signal.SIGTERM, _terminate) if on_main_thread else None
    try:
        code = _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    held = early_signals.take() if holding else None
    if held is not None and code != 128 + held:  # arrived after the run had finished or before it began
        return report_error(_interrupted(held))
    return code


def _interrupted(signum: int) -> Interrupted:
    return Interrupted("interrupted" if signum == signal.SIGINT else "terminated", signum)


def _main(argv: Sequence[str] | None) -> int:
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None, prog_name="gpuemu-ci", standalone_mode=False
        )
    except GpuemuError as exc:
        return report_error(exc)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        return report_error(Interrupted("aborted", signal.SIGINT))
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE) if exc.exit_code == 2 else int(exc.exit_code)
    except KeyboardInterrupt:
        return report_error(Interrupted("interrupted", signal.SIGINT))
    except _Terminated:
        return report_error(Interrupted("terminated", signal.SIGTERM))
    except OSError as exc:  # a path the user gave that cannot be used, or the machine out of room
        return report_error(os_error(exc))
    except Exception as exc:  # a bug in gpuemu-ci itself: say so plainly, exit 3
        if os.environ.get("GPUEMU_DEBUG"):
            traceback.print_exc()
        return report_error(
            GpuemuError(
                f"internal error: {type(exc).__name__}: {exc} (set GPUEMU_DEBUG=1 for a traceback and please "
                "report it)"
            )
        )
    return result if isinstance(result, int) else int(ExitCode.PASSED)


def os_error(exc: OSError) -> GpuemuError:
    """An OSError as a message: what failed on which path (cut to 200 characters), and the exit code it means."""
    name = str(exc.filename) if exc.filename is not None else None
    where = f" {name[:200]}{'…' if len(name) > 200 else ''}" if name else ""
    text = f"cannot use{where}: {exc.strerror or exc}"
    return UsageError(text) if is_callers_fault(exc) else InfraError(text)


def report_error(error: GpuemuError) -> int:
    """Prints the error (and, in GitHub Actions, an `::error` annotation) and returns its exit code."""
    if isinstance(error, AlreadyReported):
        return int(error.exit_code)
    # A message may quote a path or an op's text that is not valid UTF-8: shown as escapes, never a crash.
    message = f"gpuemu-ci: error: {error.diagnostics()}".encode("utf-8", "backslashreplace").decode("utf-8")
    click.echo(message, err=True)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from gpuemu_ci.action.commands import format_command

        sys.stdout.write(format_command("error", message) + "\n")
        sys.stdout.flush()
    return int(error.exit_code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
