"""docs/onboarding.md as a user follows it, on a kernel library the tests ship as a stand-in for one installed from
PyPI (tests/fixtures/onboard): its commands run as the page writes them, the reference is the one the page
shows, the printed lines are the page's, and the gate ends green. Then the same from a pytest run's recording."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_transcripts import unmatched

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "onboarding.md"
FIXTURE = REPO / "tests" / "fixtures" / "onboard"

pytest.importorskip("torch")
pytest.importorskip("triton")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def commands() -> list[str]:
    return [line for block in blocks("bash") for line in block.splitlines() if line.strip()]


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command of the page, in the user's shell: `gpuemu-ci` and `python` are this environment's."""
    args = shlex.split(command)
    assignments = {}
    while (
        "=" in args[0] and args[0].split("=", 1)[0].isidentifier()
    ):  # `NAME=value command`, as a shell reads it
        name, value = args.pop(0).split("=", 1)
        assignments[name] = value
    if args[0] == "gpuemu-ci":
        args = [sys.executable, "-m", "gpuemu_ci", *args[1:]]
    elif args[0] in ("python", "python3"):
        args[0] = sys.executable
    env = {**os.environ, "GPUEMU_USER_CONFIG": "none", "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd)])}
    env.pop("TRITON_INTERPRET", None)
    env.update(assignments)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.slow
def test_the_page_takes_a_kernel_it_never_saw_to_a_green_gate(tmp_path: Path) -> None:
    add, gate, record, add_from_calls = commands()
    root = workspace(tmp_path)
    done = run(add, root)
    assert done.returncode == 0, done.stderr
    printed = (done.stdout + done.stderr).splitlines()
    assert unmatched(tuple(blocks("text")[0].splitlines()), printed) == [], printed
    entry = blocks("toml")[0]
    assert entry.strip() in (root / "gpuemu.toml").read_text(), (root / "gpuemu.toml").read_text()
    # The page's reference, written where the command said: the user's one edit.
    (root / "gpuemu_refs" / "rms_norm.py").write_text(blocks("python")[0], encoding="utf-8")
    done = run(gate, root)
    assert done.returncode == 0, done.stderr
    assert unmatched(tuple(blocks("text")[1].splitlines()), done.stderr.splitlines()) == [], done.stderr

    # The same op recorded from the library's own tests, into a new config.
    other = workspace(tmp_path / "again")
    done = run(record, other)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (other / "gpuemu-calls.jsonl").read_text().count("\n") >= 2
    done = run(add_from_calls, other)
    assert done.returncode == 0, done.stderr
    assert 'weight = { dims = ["D"], layouts = ["contiguous"] }' in (other / "gpuemu.toml").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "acme_kernels.rmsnorm"], "must look like 'package.module:function'"),
        (["add", "acme_kernels.rmsnorm:rms_norm"], "give the command that calls the op after `--`"),
        (["add", "acme_kernels.rmsnorm:rms_norm", "--", "bash", "run.sh"], "is not a Python command"),
        (
            ["add", "acme_kernels.rmsnorm:rms_norm", "--calls", "missing.jsonl"],
            "cannot read the recorded calls",
        ),
    ],
)
def test_bad_input_is_a_usage_error_that_says_what_to_give(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = run(shlex.join(["gpuemu-ci", *args]), workspace(tmp_path))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_command_that_never_calls_the_op_says_so(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    (root / "other.py").write_text("print('no kernel here')\n")
    done = run("gpuemu-ci add acme_kernels.rmsnorm:rms_norm -- python other.py", root)
    assert done.returncode == 2 and "no call of acme_kernels.rmsnorm:rms_norm was recorded" in done.stderr
    assert not (root / "gpuemu.toml").exists()


@pytest.mark.slow
def test_an_op_already_in_the_config_is_not_added_twice(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    assert run("gpuemu-ci add acme_kernels.rmsnorm:rms_norm -- python demo.py", root).returncode == 0
    before = (root / "gpuemu.toml").read_text()
    done = run("gpuemu-ci add acme_kernels.rmsnorm:rms_norm -- python demo.py", root)
    assert done.returncode == 2 and "already has an op named 'rms_norm'" in done.stderr
    assert (root / "gpuemu.toml").read_text() == before
