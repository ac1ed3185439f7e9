"""`gpuemu-ci corpus add` and `gpuemu-ci corpus list`: the regression corpus every gate run replays first."""

from __future__ import annotations

from pathlib import Path

import click

from gpuemu_ci import corpus
from gpuemu_ci.cli.options import config_option
from gpuemu_ci.config.load import load_config
from gpuemu_ci.errors import ExitCode


@click.group("corpus")
def corpus_group() -> None:
    """The regression corpus: failing cases pinned next to gpuemu.toml, replayed by every run before fuzzing."""


@corpus_group.command("add")
@config_option
@click.argument(
    "sources", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
def add_command(config_path: Path | None, sources: tuple[Path, ...]) -> int:
    """Pin SOURCES: captures or snapshots (.npz), or every recorded failure of a results.json."""
    config = load_config(config_path)
    added = corpus.add(config, list(sources))
    for case in added:
        click.echo(f"pinned {case.op}: {case.path}", err=True)
    click.echo(f"gpuemu-ci corpus: {len(added)} case(s) added to {corpus.corpus_dir(config)}", err=True)
    return int(ExitCode.PASSED)


@corpus_group.command("list")
@config_option
def list_command(config_path: Path | None) -> int:
    """List the pinned cases, one per line: op and snapshot path. No corpus declared in gpuemu.toml is a config
    error (exit 2), like `corpus add`; a declared corpus with no case says so on stderr (exit 0)."""
    config = load_config(config_path)
    directory = corpus.corpus_dir(config)
    pinned = corpus.cases(config)
    for case in pinned:
        click.echo(f"{case.op}\t{case.path}")
    if not pinned:
        click.echo(
            f"gpuemu-ci corpus: no pinned case in {directory} (`gpuemu-ci corpus add` pins some)", err=True
        )
    return int(ExitCode.PASSED)
