"""The Action's entry point (`gpuemu-ci action`, which entrypoint.py runs): read the context and inputs, run
the mode, and leave the outputs. Errors go to the CLI's one error handler.

Secrets (the token, the signing key) are read once and removed from the process environment before any
code under test runs, since the op workers inherit it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TextIO

from gpuemu_ci.action import baseline, commands, comment, gate, nightly, sign
from gpuemu_ci.action.inputs import ActionInputs, Mode
from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.github.context import ActionContext

SECRET_INPUTS = ("github_token", "signing_key")

MODES: dict[Mode, Callable[[ActionStep], int]] = {
    Mode.GATE: gate.run,
    Mode.BASELINE: baseline.run,
    Mode.NIGHTLY: nightly.run,
    Mode.SIGN: sign.run,
    Mode.COMMENT: comment.run,
}


def run_action(environ: MutableMapping[str, str], stdout: TextIO) -> int:
    """Runs the mode the inputs ask for; returns the gate's exit code."""
    env: Mapping[str, str] = dict(environ)
    ctx = ActionContext.from_env(env)
    scrub_secrets(environ)
    inputs = ActionInputs.from_context(ctx)
    if inputs.signing_key:
        commands.add_mask(inputs.signing_key, stream=stdout)
    workspace = (ctx.workspace or Path.cwd()).resolve()
    os.chdir(workspace)
    step = ActionStep(ctx, inputs, env, workspace, stdout)
    try:
        return MODES[inputs.mode](step)
    finally:
        step.close()


def scrub_secrets(environ: MutableMapping[str, str]) -> None:
    """Remove the secret inputs from the process environment, which the op workers inherit."""
    for name in SECRET_INPUTS:
        for key in (f"INPUT_{name.upper()}", f"INPUT_{name.upper().replace('_', '-')}"):
            environ.pop(key, None)
    environ.pop("GITHUB_TOKEN", None)
