"""Every subcommand, in one list: cli/main.py registers them."""

from __future__ import annotations

import importlib

import click

# (module, attribute) of every subcommand, imported when the CLI starts.
COMMANDS = (
    ("gpuemu_ci.cli.run", "run_command"),
    ("gpuemu_ci.cli.mutate", "mutate_command"),
    ("gpuemu_ci.cli.merge", "merge_command"),
    ("gpuemu_ci.cli.replay", "replay_command"),
    ("gpuemu_ci.cli.replay", "minimize_command"),
    ("gpuemu_ci.cli.calibrate", "calibrate_command"),
    ("gpuemu_ci.cli.lint", "lint_command"),
    ("gpuemu_ci.cli.baseline", "baseline_group"),
    ("gpuemu_ci.cli.baseline", "diff_command"),
    ("gpuemu_ci.cli.render", "render_command"),
    ("gpuemu_ci.cli.sign", "keygen_command"),
    ("gpuemu_ci.cli.sign", "sign_command"),
    ("gpuemu_ci.cli.sign", "verify_command"),
    ("gpuemu_ci.cli.init", "init_command"),
    ("gpuemu_ci.cli.corpus", "corpus_group"),
    ("gpuemu_ci.cli.action", "action_command"),
    ("gpuemu_ci.action.gate_process", "action_gate_command"),
)


def all_commands() -> list[click.Command]:
    return [getattr(importlib.import_module(module), attribute) for module, attribute in COMMANDS]
