"""Options several commands share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="gpuemu.toml to use (default: the nearest one in this or a parent directory).",
)


def out_option(help_text: str = "Directory for results.json and input snapshots.") -> Callable[[F], F]:
    """`--out DIR` (default gpuemu-out)."""
    option: Callable[[F], F] = click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("gpuemu-out"),
        show_default=True,
        help=help_text,
    )
    return option


# Upstream gpuemu's `--format text|json` on lint and diff: json is the command's --json.
format_option = click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    help="json: as --json (upstream's flag).",
)
op_option = click.option("--op", "ops", multiple=True, help="Only this op (repeatable).")
iterations_option = click.option(
    "--iterations", type=click.IntRange(1), help="Cases per op and dtype (overrides the suite's)."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Also print results.json on stdout.")
jobs_option = click.option(
    "--jobs",
    type=click.IntRange(1),
    help="Cases computed at once, one worker process each (default: ci.parallel_jobs, else the cores available).",
)
