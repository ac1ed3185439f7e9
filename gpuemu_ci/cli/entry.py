"""The `gpuemu-ci` console script: hold signals first, then import the CLI (see early_signals.py)."""

from __future__ import annotations

from gpuemu_ci import early_signals


def main() -> int:
    """The `gpuemu-ci` console script: installs the early signal handlers before anything heavy is imported,
    keeps the working directory off `sys.path`, then runs the CLI and returns its exit code."""
    early_signals.install()
    from gpuemu_ci.launch import keep_working_directory_off_path

    keep_working_directory_off_path()  # a stray `:` in PYTHONPATH put it there
    from gpuemu_ci.cli.main import main as cli_main

    return cli_main()
