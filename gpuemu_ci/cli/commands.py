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
    ("gpuemu_ci.cli.add", "add_command"),
    ("gpuemu_ci.cli.corpus", "corpus_group"),
    ("gpuemu_ci.cli.action", "action_command"),
    ("gpuemu_ci.action.gate_process", "action_gate_command"),
    # Upstream gpuemu's commands (cli/upstream.py): the ones that carry over, and what to run for the others.
    ("gpuemu_ci.cli.upstream", "test_command"),
    ("gpuemu_ci.cli.upstream", "validate_command"),
    ("gpuemu_ci.cli.upstream", "fuzz_command"),
    ("gpuemu_ci.cli.upstream", "version_command"),
    ("gpuemu_ci.cli.upstream", "daemon_command"),
    ("gpuemu_ci.cli.upstream", "did_you_mean_commands"),
    ("gpuemu_ci.cli.doctor", "doctor_command"),
)


def all_commands() -> list[click.Command]:
    """Every click command of `gpuemu-ci`, imported from `COMMANDS` (a new command is one line there)."""
    found: list[click.Command] = []
    for module, attribute in COMMANDS:
        value = getattr(importlib.import_module(module), attribute)
        found.extend(value if isinstance(value, list) else [value])
    return found
