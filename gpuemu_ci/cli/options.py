"""Options several commands share."""

from __future__ import annotations

from pathlib import Path

import click

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="gpuemu.toml to use (default: the nearest one in this or a parent directory).",
)

out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("gpuemu-out"),
    show_default=True,
    help="Directory for results.json and input snapshots.",
)
