"""`gpuemu-ci init`: write a starter gpuemu.toml, an example op package and the GitHub workflows.

The files come from the installed package (``gpuemu_ci/templates/starter`` and
``gpuemu_ci/templates/workflows``, read with importlib.resources), never from the working
directory, so `pip install gpuemu-ci && gpuemu-ci init` works in any repository. Existing files
are never replaced without ``--force``: the command checks every target first and writes nothing
when one exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import click

from gpuemu_ci.errors import InfraError, UsageError

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; only the annotation needs it
    from importlib.resources.abc import Traversable

# Only these suffixes are templates; anything else in the package folder (caches) is not copied.
_TEMPLATE_SUFFIXES = frozenset({".toml", ".py", ".yml"})
WORKFLOWS_DIR = PurePosixPath(".github/workflows")


@dataclass(frozen=True)
class TemplateFile:
    """One file `init` writes: its path relative to the target directory and its bytes."""

    relative: PurePosixPath
    content: bytes


@dataclass(frozen=True)
class InitResult:
    """What `write_starter` wrote, relative to ``target``."""

    target: Path
    written: tuple[PurePosixPath, ...]
    replaced: tuple[PurePosixPath, ...]


def template_files(*, workflows: bool = True) -> tuple[TemplateFile, ...]:
    """The starter files (gpuemu.toml, gpuemu_ops/) and, with ``workflows``, the four workflows.

    Raises InfraError when the installed package lacks its templates (a broken install).
    """
    root = resources.files("gpuemu_ci") / "templates"
    files = list(_walk(root / "starter", PurePosixPath()))
    if workflows:
        files += [
            TemplateFile(WORKFLOWS_DIR / item.relative, item.content)
            for item in _walk(root / "workflows", PurePosixPath())
        ]
    names = {f.relative.as_posix() for f in files}
    missing = {"gpuemu.toml"} - names
    if workflows and not any(name.startswith(f"{WORKFLOWS_DIR}/") for name in names):
        missing.add(f"{WORKFLOWS_DIR}/*.yml")
    if missing:
        raise InfraError(
            f"the installed gpuemu-ci lacks its templates ({', '.join(sorted(missing))} under "
            "gpuemu_ci/templates): reinstall it with `pip install --force-reinstall gpuemu-ci`"
        )
    return tuple(sorted(files, key=lambda f: f.relative.as_posix()))


def write_starter(target: Path, *, force: bool = False, workflows: bool = True) -> InitResult:
    """Write the starter files into ``target`` (created if missing).

    Without ``force``, raises UsageError (exit 2) naming every file that already exists, and
    writes nothing. A target that is a directory where a file belongs is an error even with
    ``force``.
    """
    files = template_files(workflows=workflows)
    if target.exists() and not target.is_dir():
        raise UsageError(f"--dir {target} is a file, not a directory")
    existing = [f.relative for f in files if (target / f.relative).exists()]
    blocked = [rel for rel in existing if not (target / rel).is_file()]
    if blocked:
        raise UsageError(
            f"cannot write {', '.join(str(rel) for rel in blocked)} in {target}: a directory or other "
            "non-file is in the way; move it and run `gpuemu-ci init` again"
        )
    if existing and not force:
        raise UsageError(
            f"{len(existing)} file(s) already exist in {target}: "
            f"{', '.join(str(rel) for rel in existing)}. Nothing was written; run `gpuemu-ci init "
            "--force` to replace them, or `--no-workflows` to leave .github/workflows alone"
        )
    for item in files:
        path = target / item.relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(item.content)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return InitResult(target, tuple(f.relative for f in files), tuple(existing))


@click.command("init")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Repository root to write into (created if missing).",
)
@click.option("--force", is_flag=True, help="Replace files that already exist.")
@click.option(
    "--no-workflows",
    "no_workflows",
    is_flag=True,
    help="Write only gpuemu.toml and gpuemu_ops/, not .github/workflows/.",
)
def init_command(directory: Path, force: bool, no_workflows: bool) -> int:
    """Write a starter gpuemu.toml with an example op (gpuemu_ops/) and the GitHub workflows.

    The example passes as written: run `gpuemu-ci run` next, then register your own ops.
    Existing files are kept unless --force is given (exit 2, nothing written).
    """
    result = write_starter(directory, force=force, workflows=not no_workflows)
    echo = click.echo
    echo(f"gpuemu-ci: wrote {len(result.written)} file(s) in {directory}:", err=True)
    for rel in result.written:
        note = " (replaced)" if rel in result.replaced else ""
        echo(f"  {rel}{note}", err=True)
    echo("Next:", err=True)
    echo(
        "  gpuemu-ci run                  check the example op, then register your own in gpuemu.toml",
        err=True,
    )
    if not no_workflows:
        echo(
            "  commit and push to the default branch: gpuemu-baseline.yml uploads the baseline that\n"
            "  gpuemu-pr.yml compares pull requests with (it runs on pushes to `main`: edit its\n"
            "  `branches:` if your default branch has another name)",
            err=True,
        )
    return 0


def _walk(folder: Traversable, prefix: PurePosixPath) -> list[TemplateFile]:
    if not folder.is_dir():
        return []
    found: list[TemplateFile] = []
    for entry in folder.iterdir():
        if entry.is_dir():
            if entry.name != "__pycache__":
                found += _walk(entry, prefix / entry.name)
        elif PurePosixPath(entry.name).suffix in _TEMPLATE_SUFFIXES:
            found.append(TemplateFile(prefix / entry.name, entry.read_bytes()))
    return found
