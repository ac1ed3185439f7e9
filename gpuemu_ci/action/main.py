"""The Action's entry point (`gpuemu-ci action`, which entrypoint.py runs): read the context and inputs, run
the mode, and leave the outputs. Errors go to the CLI's one error handler.

Secrets (the token, the signing key) arrive separately from the environment (`action.secrets`: the entrypoint
re-executes itself without them) and are held in memory only. No code under test runs in this process: the
suite runs in a confined child (`action.gate_process`, `action.sandbox`), and the signing key is accepted only
by `mode: sign`, which runs no code under test at all.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import TextIO

from gpuemu_ci.action import baseline, commands, comment, gate, nightly, sign
from gpuemu_ci.action.inputs import ActionInputs, Mode
from gpuemu_ci.action.secrets import Secrets, take_secrets, without_secrets
from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.errors import UsageError
from gpuemu_ci.github.context import ActionContext

MODES_VARIABLE = "GPUEMU_ACTION_MODES"  # set by light/action.yml: the modes that variant can run
MODES: dict[Mode, Callable[[ActionStep], int]] = {
    Mode.GATE: gate.run,
    Mode.BASELINE: baseline.run,
    Mode.NIGHTLY: nightly.run,
    Mode.SIGN: sign.run,
    Mode.COMMENT: comment.run,
}


def run_action(environ: MutableMapping[str, str], stdout: TextIO, held: Secrets | None = None) -> int:
    """Runs the mode the inputs ask for; returns the gate's exit code. `held`: the secrets, when the caller
    already took them out of `environ` (else they are taken, and removed from `environ`, here)."""
    if held is None:
        held = take_secrets(environ)
    env = without_secrets(environ, held)
    for key in [k for k in environ if k not in env]:
        del environ[key]
    ctx = dataclasses.replace(ActionContext.from_env(env), token=held.token)
    inputs = ActionInputs.from_context(ctx, signing_key=held.signing_key, env=env)
    allowed = [m for m in env.get(MODES_VARIABLE, "").split(",") if m]
    if allowed and inputs.mode.value not in allowed:
        raise UsageError(
            f"input mode={inputs.mode.value!r}: this action runs modes {' and '.join(allowed)} only (it has no "
            "CUDA stack); use gpuemu/action for the modes that run the suite"
        )
    if inputs.signing_key:
        commands.add_mask(inputs.signing_key, stream=stdout)
        if inputs.mode is not Mode.SIGN:
            raise UsageError(
                f"input signing_key is refused in mode {inputs.mode.value}: this mode runs the code under test, "
                "which must never be in a process next to the key. Sign in a separate job with mode: sign "
                "(see the sign job of gpuemu-baseline.yml)"
            )
    workspace = (ctx.workspace or Path.cwd()).resolve()
    os.chdir(workspace)
    step = ActionStep.start(ctx, inputs, env, workspace, stdout)
    try:
        return MODES[inputs.mode](step)
    finally:
        step.close()
