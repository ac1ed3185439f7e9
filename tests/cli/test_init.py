"""`gpuemu-ci init`: a starter that runs and passes, the workflows, and never a silent overwrite."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuemu_ci.cli.init import template_files
from tests.action.support_files import STARTER, TEMPLATE_NAMES, TEMPLATES
from tests.support_cli import CliResult

WORKFLOW_FILES = [f".github/workflows/{name}" for name in TEMPLATE_NAMES]
STARTER_FILES = ["gpuemu.toml", "gpuemu_ops/__init__.py", "gpuemu_ops/example.py", "gpuemu_ops/reference.py"]


def gpuemu(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, started away from the repository checkout."""
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@dataclass(frozen=True)
class Outcome:
    code: int
    stderr: str


@pytest.fixture
def init(cli: Callable[..., CliResult]) -> Callable[..., Outcome]:
    """`gpuemu-ci init ARGS` in this process (the same code path, without a second interpreter)."""

    def run(*args: str, cwd: Path) -> Outcome:
        result = cli("init", *args, cwd=cwd)
        return Outcome(result.code, result.stderr)

    return run


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory with no gpuemu files: templates must come from the installed package."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


@pytest.mark.slow
def test_init_writes_the_starter_and_the_four_workflows(tmp_path: Path, elsewhere: Path) -> None:
    target = tmp_path / "repo"
    result = gpuemu("init", "--dir", str(target), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert files_under(target) == sorted([*STARTER_FILES, *WORKFLOW_FILES, ".gitignore"])
    for (
        name
    ) in TEMPLATE_NAMES:  # not a git repository: the baseline workflow keeps `main`, and says it guessed
        assert (target / ".github/workflows" / name).read_bytes() == (TEMPLATES / name).read_bytes()
    assert "edit its `branches:`" in result.stderr
    assert (target / "gpuemu.toml").read_bytes() == (STARTER / "gpuemu.toml").read_bytes()
    assert files_under(elsewhere) == [], "init wrote into the working directory instead of --dir"
    for name in STARTER_FILES + WORKFLOW_FILES:
        assert name in result.stderr, f"{name} not listed in the output"


@pytest.mark.slow
def test_initialised_repository_runs_and_passes(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    target = tmp_path / "repo"
    assert init("--dir", str(target), "--no-workflows", cwd=elsewhere).code == 0
    run = gpuemu("run", "--out", "gpuemu-out", cwd=target)
    assert run.returncode == 0, run.stderr
    results = json.loads((target / "gpuemu-out" / "results.json").read_text(encoding="utf-8"))
    assert results["verdict"] == "passed"
    assert [op["name"] for op in results["ops"]] == ["silu"]
    # Passing means it ran: cases were executed, in more than one dtype.
    assert results["summary"]["cases_total"] > 0
    assert len(results["ops"][0]["dtypes"]) >= 2


@pytest.mark.slow
def test_the_starter_op_catches_a_broken_kernel(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    """The example is a real gate: drop the tail tile, as buggy kernels do, and it fails."""
    target = tmp_path / "repo"
    assert init("--dir", str(target), "--no-workflows", cwd=elsewhere).code == 0
    example = target / "gpuemu_ops" / "example.py"
    source = example.read_text(encoding="utf-8")
    broken = source.replace("range(0, flat.size, BLOCK)", "range(0, flat.size - BLOCK + 1, BLOCK)")
    assert broken != source
    example.write_text(broken)
    run = gpuemu("run", "--out", "gpuemu-out", "--dtype", "float32", cwd=target)
    assert run.returncode == 1, run.stderr
    assert "silu" in run.stderr


def test_init_refuses_to_overwrite_and_writes_nothing(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    target = tmp_path / "repo"
    target.mkdir()
    (target / "gpuemu.toml").write_text("# mine\n")
    result = init("--dir", str(target), cwd=elsewhere)
    assert result.code == 2
    assert "gpuemu.toml" in result.stderr and "--force" in result.stderr
    assert "Traceback" not in result.stderr
    assert files_under(target) == ["gpuemu.toml"], "nothing else may be written when init refuses"
    assert (target / "gpuemu.toml").read_text() == "# mine\n"


def test_init_force_replaces_existing_files(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    target = tmp_path / "repo"
    (target / ".github" / "workflows").mkdir(parents=True)
    (target / ".github" / "workflows" / "gpuemu-pr.yml").write_text("name: mine\n")
    (target / ".github" / "workflows" / "other.yml").write_text("name: other\n")
    result = init("--dir", str(target), "--force", cwd=elsewhere)
    assert result.code == 0, result.stderr
    assert (target / ".github/workflows/gpuemu-pr.yml").read_bytes() == (
        TEMPLATES / "gpuemu-pr.yml"
    ).read_bytes()
    assert (target / ".github/workflows/other.yml").read_text() == "name: other\n", "unrelated files stay"
    assert "replaced" in result.stderr


def test_no_workflows_leaves_github_workflows_alone(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    target = tmp_path / "repo"
    (target / ".github" / "workflows").mkdir(parents=True)
    (target / ".github" / "workflows" / "gpuemu-pr.yml").write_text("name: mine\n")
    result = init("--dir", str(target), "--no-workflows", cwd=elsewhere)
    assert result.code == 0, result.stderr
    assert (target / ".github/workflows/gpuemu-pr.yml").read_text() == "name: mine\n"
    assert sorted(set(files_under(target)) - {".github/workflows/gpuemu-pr.yml"}) == sorted(
        [*STARTER_FILES, ".gitignore"]
    )


def test_init_into_the_working_directory_by_default(init: Callable[..., Outcome], elsewhere: Path) -> None:
    result = init("--no-workflows", cwd=elsewhere)
    assert result.code == 0, result.stderr
    assert files_under(elsewhere) == sorted([*STARTER_FILES, ".gitignore"])


def test_dir_that_is_a_file_is_a_usage_error(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = init("--dir", str(not_a_dir), cwd=elsewhere)
    assert result.code == 2
    assert "Traceback" not in result.stderr and "file" in result.stderr


def test_a_directory_in_the_way_is_an_error_even_with_force(
    init: Callable[..., Outcome], tmp_path: Path, elsewhere: Path
) -> None:
    target = tmp_path / "repo"
    (target / "gpuemu.toml").mkdir(parents=True)
    result = init("--dir", str(target), "--force", cwd=elsewhere)
    assert result.code == 2
    assert "gpuemu.toml" in result.stderr and "Traceback" not in result.stderr
    assert files_under(target) == []


def test_template_files_come_from_the_package() -> None:
    names = sorted(f.relative.as_posix() for f in template_files())
    assert names == sorted(STARTER_FILES + WORKFLOW_FILES)
    assert sorted(f.relative.as_posix() for f in template_files(workflows=False)) == sorted(STARTER_FILES)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_baseline_workflow_runs_on_the_remotes_default_branch(
    init: Callable[..., Outcome], tmp_path: Path
) -> None:
    upstream = tmp_path / "upstream.git"
    git("init", "--bare", "--initial-branch", "trunk", str(upstream), cwd=tmp_path)
    seed = tmp_path / "seed"
    git("init", "--initial-branch", "trunk", str(seed), cwd=tmp_path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--allow-empty", "-m", "start", cwd=seed)
    git("push", str(upstream), "trunk", cwd=seed)
    clone = tmp_path / "clone"
    git("clone", str(upstream), str(clone), cwd=tmp_path)
    git("switch", "-c", "feature/adopt-gpuemu", cwd=clone)  # init runs on a feature branch, as it would

    outcome = init("--dir", str(clone), cwd=clone)
    assert outcome.code == 0, outcome.stderr
    workflow = (clone / ".github/workflows/gpuemu-baseline.yml").read_text()
    assert "branches: [trunk]" in workflow and "branches: [main]" not in workflow
    assert "push to `trunk` (the remote's default branch)" in outcome.stderr
    assert "edit its `branches:`" not in outcome.stderr


def test_outputs_are_git_ignored_once(init: Callable[..., Outcome], tmp_path: Path) -> None:
    target = tmp_path / "repo"
    target.mkdir()
    (target / ".gitignore").write_text("*.pyc\ngpuemu-out\n")  # no final newline issue, one entry present
    outcome = init("--dir", str(target), "--no-workflows", cwd=tmp_path)
    assert outcome.code == 0, outcome.stderr
    assert (target / ".gitignore").read_text() == "*.pyc\ngpuemu-out\n# gpuemu-ci outputs\ngpuemu-captures/\n"
    assert ".gitignore: added gpuemu-captures/" in outcome.stderr
    assert init("--dir", str(target), "--no-workflows", "--force", cwd=tmp_path).code == 0
    assert (target / ".gitignore").read_text().count("gpuemu-captures/") == 1  # not added twice


def test_the_starter_lists_every_family(tmp_path: Path) -> None:
    from gpuemu_ci.config.model import Family

    starter = (STARTER / "gpuemu.toml").read_text()
    comment = starter[starter.index("# The family picks") : starter.index('family = "')]
    for family in Family:
        assert family.value in comment, f"the starter does not mention the {family.value} family"


def _parentheses_nest(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth > 1:
            return True
    return False


@pytest.mark.parametrize("repository", ["git, no remote", "no git"])
def test_init_says_where_to_push_without_nested_parentheses(
    init: Callable[..., Outcome], tmp_path: Path, repository: str
) -> None:
    """The "Next:" lines name the branch and how it was found in one plain parenthesis (issue #27)."""
    assert _parentheses_nest("a (b (c))") and not _parentheses_nest("a (b) (c)")
    target = tmp_path / "repo"
    target.mkdir()
    if repository == "git, no remote":
        subprocess.run(["git", "init", "-q", "-b", "trunk", str(target)], check=True)
    outcome = init(cwd=target)
    assert outcome.code == 0, outcome.stderr
    (line,) = [line for line in outcome.stderr.splitlines() if "commit and push to" in line]
    assert not _parentheses_nest(outcome.stderr), outcome.stderr
    if repository == "git, no remote":
        assert "`trunk` (the current branch; the repository has no remote yet)" in line
    else:
        assert "`main` (a guess; no remote default branch was found)" in line
