"""`gpuemu-ci action`: the GitHub Action's entry point (entrypoint.py runs it inside the container)."""

from __future__ import annotations

import os
import sys

import click

# The re-executed image runs as `python -P -m gpuemu_ci action`: -P keeps the working directory (the
# workspace, the code under test) off sys.path, so nothing of the workspace is imported by the process
# that holds the token.
REEXEC_ARGV = ["-P", "-m", "gpuemu_ci", "action"]


@click.command("action", hidden=True)
def action_command() -> int:
    """Run as the GitHub Action: configured by the runner's GITHUB_* and INPUT_* environment."""
    from gpuemu_ci.action import sandbox, secrets
    from gpuemu_ci.action.main import run_action

    if not secrets.reexecuted(os.environ):
        secrets.reexec_without_secrets(os.environ, REEXEC_ARGV)  # does not return
    sandbox.harden_self()
    held = secrets.receive(os.environ)
    return run_action(os.environ, sys.stdout, held)
