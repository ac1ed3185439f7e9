"""`gpuemu-ci init`: write a starter gpuemu.toml, an example op package and the GitHub workflows.

The files come from the installed package (``gpuemu_ci/templates/starter`` and
``gpuemu_ci/templates/workflows``, read with importlib.resources), never from the working
directory, so `pip install gpuemu-ci && gpuemu-ci init` works in any repository. Existing files
are never replaced without ``--force``: the command checks every target first and writes nothing
when one exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import click

from gpuemu_ci.cli.stack import Stack, detect_stack, with_setup
from gpuemu_ci.errors import InfraError, UsageError
from gpuemu_ci.files import cannot_write

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; only the annotation needs it
    from importlib.resources.abc import Traversable

# Only these suffixes are templates; anything else in the package folder (caches) is not copied.
_TEMPLATE_SUFFIXES = frozenset({".toml", ".py", ".yml"})
WORKFLOWS_DIR = PurePosixPath(".github/workflows")
BASELINE_WORKFLOW = WORKFLOWS_DIR / "gpuemu-baseline.yml"
TEMPLATE_BRANCH = re.compile(rb"branches: \[main\]")  # the one line of the baseline template that names it
IGNORED = ("gpuemu-out/", "gpuemu-captures/")  # what `run` and shadow checking write: never committed


@dataclass(frozen=True)
class DefaultBranch:
    """The branch the baseline workflow runs on, and how it was found (said to the user)."""

    name: str
    source: str
    certain: bool


def default_branch(target: Path) -> DefaultBranch:
    """The repository's default branch: the remote's (origin/HEAD), else the current branch of a repository
    with no remote yet, else `main`."""
    git = shutil.which("git")
    if git is not None and target.is_dir():

        def ref(name: str) -> str | None:
            try:
                done = subprocess.run(
                    [git, "-C", str(target), "symbolic-ref", "--quiet", "--short", name],
                    capture_output=True,
                    text=True,
                    timeout=10,
                )
            except (OSError, subprocess.SubprocessError):
                return None
            return done.stdout.strip() or None if done.returncode == 0 else None

        remote_head = ref("refs/remotes/origin/HEAD")
        if remote_head is not None:
            return DefaultBranch(remote_head.removeprefix("origin/"), "the remote's default branch", True)
        current = ref("HEAD")
        if current is not None and not _has_remote(git, target):
            return DefaultBranch(current, "the current branch; the repository has no remote yet", True)
    return DefaultBranch("main", "a guess; no remote default branch was found", False)


def _has_remote(git: str, target: Path) -> bool:
    try:
        done = subprocess.run([git, "-C", str(target), "remote"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(done.stdout.strip())


def with_branch(content: bytes, branch: str) -> bytes:
    """The baseline workflow running on pushes to `branch` (quoted when YAML needs it)."""
    plain = re.fullmatch(r"[A-Za-z0-9._/-]+", branch) is not None
    name = branch if plain else '"' + branch.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return TEMPLATE_BRANCH.sub(b"branches: [" + name.encode() + b"]", content, count=1)


def ignore_outputs(target: Path) -> tuple[str, ...]:
    """Add gpuemu-ci's output folders to `.gitignore` (created if missing); returns the lines added."""
    path = target / ".gitignore"
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    present = {line.strip().lstrip("/") for line in text.splitlines()}
    missing = tuple(entry for entry in IGNORED if entry not in present and entry.rstrip("/") not in present)
    if missing:
        prefix = "" if not text or text.endswith("\n") else "\n"
        try:
            with path.open("a", encoding="utf-8") as handle:
                handle.write(prefix + "# gpuemu-ci outputs\n" + "".join(f"{entry}\n" for entry in missing))
        except OSError as exc:
            raise cannot_write(path, exc) from exc
    return missing


# Alternatives to a default workflow, copied by hand (docs/action.md): gpuemu-pr-sharded.yml replaces gpuemu-pr.yml.
ALTERNATIVE_WORKFLOWS = frozenset({"gpuemu-pr-sharded.yml"})


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
    ignored: tuple[str, ...] = ()  # lines added to .gitignore
    branch: DefaultBranch | None = None  # the baseline workflow's branch (None: no workflows written)
    stack: Stack = field(
        default_factory=Stack
    )  # torch/Triton found in the sources: the workflows install them with `setup:`


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
            if item.relative.name not in ALTERNATIVE_WORKFLOWS
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
    branch = default_branch(target) if workflows else None
    # Scanned before writing, without the starter's own files: the stack is the repository's.
    stack = detect_stack(target, ignore=frozenset(f.relative for f in files)) if workflows else Stack()
    for item in files:
        path = target / item.relative
        content = item.content
        if branch is not None and item.relative == BASELINE_WORKFLOW:
            content = with_branch(content, branch.name)
        if item.relative.parent == WORKFLOWS_DIR:
            content = with_setup(content, stack)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        except OSError as exc:
            raise cannot_write(path, exc) from exc
    ignored = ignore_outputs(target)
    return InitResult(target, tuple(f.relative for f in files), tuple(existing), ignored, branch, stack)


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
    Existing files are kept unless --force is given (exit 2, nothing written). When the repository's Python
    files import torch or Triton, the workflows install them with the Action's `setup:` input.
    """
    result = write_starter(directory, force=force, workflows=not no_workflows)
    echo = click.echo
    echo(f"gpuemu-ci: wrote {len(result.written)} file(s) in {directory}:", err=True)
    for rel in result.written:
        note = " (replaced)" if rel in result.replaced else ""
        echo(f"  {rel}{note}", err=True)
    if result.ignored:
        echo(f"  .gitignore: added {', '.join(result.ignored)}", err=True)
    if result.stack.needs_setup:
        echo(
            f"Found {result.stack.describe()}: the workflows install {' and '.join(result.stack.packages())} "
            f"before the gate (`setup: {result.stack.setup_command()}`)",
            err=True,
        )
    if result.stack.truncated:
        echo(
            "  (more Python files than init scans: if your ops use torch or Triton and the line above is missing, "
            "add the `setup:` input yourself; see The user's stack in the Action docs)",
            err=True,
        )
    echo("Next:", err=True)
    echo(
        "  gpuemu-ci run                  check the example op, then register your own in gpuemu.toml",
        err=True,
    )
    if result.branch is not None:
        branch = result.branch
        echo(
            f"  commit and push to `{branch.name}` ({branch.source}): gpuemu-baseline.yml uploads the\n"
            "  baseline that gpuemu-pr.yml compares pull requests with"
            + (
                ""
                if branch.certain
                else f";\n  edit its `branches:` if your default branch is not `{branch.name}`"
            ),
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
