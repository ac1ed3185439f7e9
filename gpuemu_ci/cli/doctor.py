"""`gpuemu-ci doctor`: read a gpuemu.toml written for upstream gpuemu and say what gpuemu-ci will do with it
that upstream did not (docs/migrating.md explains each point). Writes nothing; exit 0 when the config loads,
2 with the loader's message (which names the fix) when it does not."""

from __future__ import annotations

from pathlib import Path

import click

from gpuemu_ci.cli.options import config_option
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, ExecutionMode, OpSpec
from gpuemu_ci.errors import ExitCode
from gpuemu_ci.oracle.tolerance_hint import advice

MODES = {
    ExecutionMode.CALLABLE: "the reference is called in the judge's worker process",
    ExecutionMode.CLIENT: "client_side: the reference is called in the judge's worker process (not in your "
    "client); the op is run by the gate",
    ExecutionMode.SCRIPT: "script_based: the reference script runs as a subprocess over upstream's JSON protocol "
    "(one process kept warm when it defines reference(), else one per case); the op is run by the gate, never "
    "replaced by the reference or the first input",
    ExecutionMode.DAEMON: "daemon_orchestrated: one warm reference process per worker serves every case; the op is "
    "run by the gate",
}


def op_lines(op: OpSpec) -> list[str]:
    """What `gpuemu-ci doctor` says of one op: what it runs and how its target resolves, one line each."""
    targets = op.targets
    lines = [f"op {op.name!r}:"]
    if targets.op_script:
        lines.append(f"  runs op_script {targets.op_script}")
    elif ":" not in targets.op and not targets.op.endswith(".py"):
        lines.append(
            f"  runs {targets.op}.{op.name}(...): the function named like the op in `module` (to call another: "
            f'module = "{targets.op}:FUNCTION")'
        )
    else:
        lines.append(f"  runs {targets.op}")
    lines.append(f"  inputs as {targets.framework.value} arrays; {MODES[targets.execution_mode]}")
    if op.error_model.family is None:
        tolerances = ", ".join(f"{d} atol={t.atol:g} rtol={t.rtol:g}" for d, t in op.error_model.tolerances)
        lines.append(
            "  judged by allclose against the float64 reference"
            + (f" ({tolerances})" if tolerances else " (gpuemu-ci's per-dtype defaults)")
            + f"; fixed tolerances flag correct kernels on gpuemu-ci's wider inputs: {advice(op)}"
        )
    else:
        lines.append(f"  judged by the {op.error_model.family.value} error bound")
    lines.append(
        f"  dtypes {', '.join(op.dtypes)}; invariants {', '.join(op.error_model.invariants.enabled()) or 'none'}"
    )
    return lines


def report(config: Config) -> list[str]:
    """Every line `gpuemu-ci doctor` prints for `config`: the config's notes, the seed, and each op's
    lines."""
    lines = [f"gpuemu-ci doctor: {config.path}"]
    lines += [f"note: {note}" for note in config.notes]
    if config.validation.seed == 0:
        lines.append(
            "validation.seed = 0: a fresh master seed every run, as upstream documents (printed and recorded, "
            "so each failure replays); give another seed for the same cases every run"
        )
    elif config.validation.seed is None:
        lines.append("no validation.seed: the master seed is 0, the same cases every run")
    for op in config.ops:
        lines += op_lines(op)
    for kernel in config.kernels:
        what = (
            "validated through CuPy on a GPU and linted"
            if kernel.launch
            else "linted (compiled with nvcc/ptxas)"
        )
        lines.append(
            f"kernel {kernel.name!r}: {what}; `reference` is not run for a kernel without [kernels.launch]"
        )
    lines.append(
        "commands: `gpuemu X` is `gpuemu-ci X` (test, validate, fuzz, baseline TAG, diff --baseline TAG, lint "
        "--ptx, minimize SEED); a failing gate exits 1 (upstream's test and fuzz exited 0)"
    )
    return lines


@click.command("doctor")
@config_option
def doctor_command(config_path: Path | None) -> int:
    """Read a gpuemu.toml written for upstream gpuemu and say what gpuemu-ci will do differently (nothing is run
    or written). A config that does not load is exit 2 with what to change."""
    config = load_config(config_path)
    for line in report(config):
        click.echo(line)
    return int(ExitCode.PASSED)
