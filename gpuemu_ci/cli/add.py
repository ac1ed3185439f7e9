"""`gpuemu-ci add pkg.mod:func -- COMMAND`: register an op from its real calls.

COMMAND (a Python script, `python -m MODULE` or `pytest ...`: what calls the op, such as its tests or an
example) runs with the op's calls recorded (onboard/record.py); their shapes, dtypes, strides and values become
an `[[ops]]` entry appended to gpuemu.toml (onboard/infer.py, onboard/write.py), and a reference module is
written for the user to fill in. Calls recorded elsewhere (`pytest --gpuemu-record pkg.mod:func`) are read with
`--calls FILE` instead of a command.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import msgspec

from gpuemu_ci.backends.gpu import detect_gpu
from gpuemu_ci.config.load import CONFIG_NAME, load_config
from gpuemu_ci.config.model import Family
from gpuemu_ci.errors import ConfigError, GpuemuError, UsageError
from gpuemu_ci.onboard.facts import DECODER, CallFacts
from gpuemu_ci.onboard.infer import infer
from gpuemu_ci.onboard.record import RECORD_FILE, RECORD_TARGET, split_target
from gpuemu_ci.onboard.write import write_op

PYTHON_NAMES = ("python", "python3")


def python_argv(command: tuple[str, ...]) -> list[str]:
    """The interpreter arguments of COMMAND: `python X.py ...`, `python -m M ...` or `pytest ...`."""
    if not command:
        raise UsageError("give the command that calls the op after `--` (or --calls FILE)")
    program = Path(command[0]).name
    if program == "pytest":
        return ["-m", "pytest", *command[1:]]
    if program in PYTHON_NAMES or program.startswith("python3."):
        rest = list(command[1:])
        if (rest[:1] == ["-m"] and len(rest) > 1) or (rest and rest[0].endswith(".py")):
            return rest
    raise UsageError(
        f"`{' '.join(command)}` is not a Python command gpuemu-ci can record: give `python SCRIPT.py ...`, "
        "`python -m MODULE ...` or `pytest ...` (it runs with this interpreter, so the op's calls can be seen)"
    )


def record_calls(target: str, command: tuple[str, ...], cwd: Path) -> list[CallFacts]:
    """Run COMMAND with the calls of `target` recorded; the calls it made (whatever its exit status)."""
    argv = python_argv(command)
    with tempfile.TemporaryDirectory(prefix="gpuemu-add-") as scratch:
        log = Path(scratch) / "calls.jsonl"
        env = {**os.environ, RECORD_TARGET: target, RECORD_FILE: str(log)}
        if detect_gpu() is None and "TRITON_INTERPRET" not in env:
            # As the gate runs ops here: Triton kernels in Triton's CPU interpreter (read when triton is imported).
            env["TRITON_INTERPRET"] = "1"
            click.echo(
                "gpuemu-ci: no GPU: Triton kernels run in Triton's CPU interpreter while recording", err=True
            )
        click.echo(f"gpuemu-ci: recording the calls of {target} in: {' '.join(command)}", err=True)
        done = subprocess.run([sys.executable, "-m", "gpuemu_ci.onboard.record", *argv], cwd=cwd, env=env)
        calls = read_calls(log) if log.exists() else []
    if done.returncode != 0:
        click.echo(f"gpuemu-ci: the command exited {done.returncode}", err=True)
    return calls


def read_calls(path: Path) -> list[CallFacts]:
    """The calls recorded in `path` (one JSON line each, as `--gpuemu-record` or `gpuemu-ci add -- COMMAND`
    writes them); a file that cannot be read, or a line that is not a recorded call, is a UsageError naming
    the file and line."""
    calls = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read the recorded calls {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                calls.append(DECODER.decode(line))
            except msgspec.DecodeError as exc:
                raise UsageError(f"{path}:{number}: not a recorded call ({exc})") from None
    return calls


@click.command("add", context_settings={"ignore_unknown_options": True})
@click.argument("target")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--name", default=None, help="The op's name in gpuemu.toml (default: the function's name).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(CONFIG_NAME),
    show_default=True,
    help="The gpuemu.toml to add the op to (created when missing).",
)
@click.option(
    "--family",
    type=click.Choice([f.value for f in Family]),
    default=None,
    help="The op's family: its error model (see the gpuemu.toml reference).",
)
@click.option(
    "--like",
    default=None,
    metavar="FUNCTION",
    help="A function the op mirrors (torch.nn.functional.rms_norm): the reference calls it in float64.",
)
@click.option(
    "--calls",
    "calls_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Calls recorded elsewhere (pytest --gpuemu-record), instead of a command.",
)
def add_command(
    target: str,
    command: tuple[str, ...],
    name: str | None,
    config_path: Path,
    family: str | None,
    like: str | None,
    calls_file: Path | None,
) -> int:
    """Add an op to gpuemu.toml from its real calls: `gpuemu-ci add pkg.mod:func -- pytest tests/`.

    The command (a Python script, `python -m MODULE` or `pytest`) runs with the op's calls recorded; the
    dims shared across inputs, dtypes, index inputs, parameters and plain arguments they show become an
    [[ops]] entry, and a reference module is written for you to fill in."""
    command = tuple(c for c in command if c != "--") if command[:1] == ("--",) else command
    try:
        _, function = split_target(target)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    op_name = name or function.split(".")[-1].removesuffix("apply").strip("_.") or function
    config_path = config_path.resolve()
    if config_path.exists():
        existing = load_config(config_path)
        if any(op.name == op_name for op in existing.ops):
            raise UsageError(f"{config_path} already has an op named {op_name!r}: give another with --name")
    if calls_file is not None and command:
        raise UsageError("give either --calls FILE or a command, not both")
    calls = read_calls(calls_file) if calls_file is not None else record_calls(target, command, Path.cwd())
    draft = infer(op_name, target, calls)
    backup = config_path.read_bytes() if config_path.exists() else None
    config, reference = write_op(config_path, draft, family, like)
    try:
        load_config(config)
    except GpuemuError as exc:  # our own entry does not load: put the file back, and say so
        if backup is None:
            config.unlink()
        else:
            config.write_bytes(backup)
        raise ConfigError(
            f"the entry gpuemu-ci add wrote does not load (a bug, please report it): {exc}"
        ) from None
    shown = os.path.relpath(config)
    click.echo(
        f"gpuemu-ci: added op {op_name!r} to {shown} from {draft.calls} recorded kind(s) of call:\n"
        f"  dims {', '.join(f'{d.name}={d.expr or list(d.sizes)}' for d in draft.dims)}; "
        f"inputs {', '.join(i.name for i in draft.inputs)}; dtypes {', '.join(draft.dtypes)}",
        err=True,
    )
    for note in draft.notes:
        click.echo(f"  note: {note}", err=True)
    steps = [] if like else [f"write the float64 reference in {os.path.relpath(reference)}"]
    if family is None:
        steps.append("set `family` (the error model) in the entry")
    steps.append(f"gpuemu-ci run --config {shlex.quote(shown)} --op {shlex.quote(op_name)}")
    click.echo("next: " + "; then ".join(steps), err=True)
    return 0
