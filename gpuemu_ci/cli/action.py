"""`gpuemu-ci action`: the GitHub Action's entry point (entrypoint.py runs it inside the container)."""

from __future__ import annotations

import os
import sys

import click


@click.command("action", hidden=True)
def action_command() -> int:
    """Run as the GitHub Action: configured by the runner's GITHUB_* and INPUT_* environment."""
    from gpuemu_ci.action.main import run_action

    return run_action(os.environ, sys.stdout)
