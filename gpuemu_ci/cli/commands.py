"""Every subcommand, in one list: cli/main.py registers them."""

from __future__ import annotations

import importlib

import click

# (module, attribute): a module that is missing is skipped so a partial install still starts.
COMMANDS = (
    ("gpuemu_ci.cli.run", "run_command"),
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
)


def all_commands() -> list[click.Command]:
    found = []
    for module_name, attribute in COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        command = getattr(module, attribute, None)
        if command is not None:
            found.append(command)
    return found
