"""`gpuemu-ci init` in a repository whose kernels use torch or Triton: the workflows it writes install them
with the Action's `setup:` input (the image has neither); a NumPy-only repository gets the templates as they
are."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest
import yaml

from gpuemu_ci.cli.stack import CPU_WHEELS, detect_stack
from tests.action.support_files import ACTIONLINT_MISSING, TEMPLATES, tool_or_skip
from tests.support_cli import CliResult

REPO = Path(__file__).resolve().parents[2]
RUNS_OPS = {"gpuemu-pr.yml": "gpuemu", "gpuemu-baseline.yml": "baseline", "gpuemu-nightly.yml": "nightly"}


def action_step(workflow: Path, job: str) -> dict[str, object]:
    data = yaml.safe_load(workflow.read_text(encoding="utf-8"))
    (step,) = [s for s in data["jobs"][job]["steps"] if str(s.get("uses", "")).startswith("gpuemu/action@")]
    inputs: dict[str, object] = step["with"]
    return inputs


def kernels_of(example: str, target: Path) -> Path:
    """A repository holding an example's kernels package, not yet its gpuemu.toml (what `init` writes)."""
    package = next(p for p in (REPO / "examples" / example).iterdir() if (p / "__init__.py").is_file())
    shutil.copytree(package, target / package.name)
    return target


def init_in(cli: Callable[..., CliResult], target: Path) -> CliResult:
    result = cli("init", "--dir", str(target))
    assert result.code == 0, result.output
    return result


def test_the_triton_example_gets_torch_and_triton_installed(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    target = tmp_path / "repo"
    kernels_of("triton", target)
    result = init_in(cli, target)
    command = f"pip install --extra-index-url {CPU_WHEELS} torch triton"
    for name, job in RUNS_OPS.items():
        assert action_step(target / ".github/workflows" / name, job)["setup"] == command, name
    # The comment workflow runs no ops: nothing to install there.
    fork = target / ".github/workflows/gpuemu-fork-comment.yml"
    assert fork.read_bytes() == (TEMPLATES / "gpuemu-fork-comment.yml").read_bytes()
    assert (
        "Found torch (imported in triton_kernels/reference.py) and Triton (in triton_kernels/rmsnorm.py)"
        in (result.stderr)
    )
    assert command in result.stderr


def test_the_torch_example_gets_torch_only(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    target = tmp_path / "repo"
    kernels_of("torch", target)
    init_in(cli, target)
    for name, job in RUNS_OPS.items():
        assert action_step(target / ".github/workflows" / name, job)["setup"] == (
            f"pip install --extra-index-url {CPU_WHEELS} torch"
        )


def test_a_numpy_repository_gets_the_templates_unchanged(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    target = tmp_path / "repo"
    kernels_of("quickstart", target)
    result = init_in(cli, target)
    for name in RUNS_OPS:
        assert (target / ".github/workflows" / name).read_bytes() == (TEMPLATES / name).read_bytes()
    assert "Found" not in result.stderr


def test_the_written_workflows_pass_actionlint(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    binary = tool_or_skip("actionlint", ACTIONLINT_MISSING)
    target = tmp_path / "repo"
    kernels_of("triton", target)
    init_in(cli, target)
    subprocess.run(["git", "init", "-q", str(target)], check=True, capture_output=True)
    files = sorted(str(p) for p in (target / ".github/workflows").glob("*.yml"))
    done = subprocess.run(
        [binary, "-no-color", "-oneline", *files], cwd=target, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("source", "torch", "triton"),
    [
        ("import torch.nn.functional as F\n", True, False),
        ("from torch import nn\n", True, False),
        ("import triton\nimport triton.language as tl\n", False, True),
        ("from triton import jit\n", False, True),
        ("import numpy as np\n# import torch is only a comment here\ntext = 'import triton'\n", False, False),
        ("from .torch import helper\n", False, False),  # a local module named torch, not the framework
        # A file that does not parse is read as text: a broken file must not hide the stack.
        ("import torch\ndef broken(:\n", True, False),
        ("@triton.jit\ndef kernel(x_ptr\n", False, True),
    ],
)
def test_what_counts_as_torch_and_triton(source: str, torch: bool, triton: bool, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ops.py").write_text(source)
    stack = detect_stack(tmp_path)
    assert (stack.torch is not None, stack.triton is not None) == (torch, triton)
    # Triton's kernels launch on torch tensors: the workflows install torch with it
    assert stack.packages() == (("torch", "triton") if triton else ("torch",) if torch else ())


def test_other_peoples_code_is_not_scanned(tmp_path: Path) -> None:
    for folder in (".venv/lib", "venv/lib", "node_modules/x", "build/lib", ".git/hooks"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "uses_torch.py").write_text("import torch\n")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "ops.py").write_text("import numpy\n")
    assert not detect_stack(tmp_path).needs_setup
    (tmp_path / "ops.py").write_text("import torch\n")
    assert detect_stack(tmp_path).torch == PurePosixPath("ops.py")


def test_no_workflows_means_no_scan_and_no_setup(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    target = tmp_path / "repo"
    kernels_of("torch", target)
    result = cli("init", "--dir", str(target), "--no-workflows")
    assert result.code == 0, result.output
    assert not (target / ".github").exists()
    assert "Found" not in result.stderr
