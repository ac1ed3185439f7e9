"""Issue 26, items 2 and 3: what code under test does to the gate's own process and output directory cannot
reach beyond them.

- A symbolic link as `gpuemu-out` (committed in the pull request, or put there by an `inputs` hook while the
  suite runs) never makes the Action, which runs as root, write into or hand over the directory it points to:
  a root-owned victim directory keeps its files and their owner.
- An op or hook that kills its parent: the Action, out of its reach, still publishes a results document and a
  comment saying the gate process was killed, and fails the step.

The Action runs as the runner runs it, with real users (support_uids) and the loopback GitHub API.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.action.support_runner import (
    ENTRYPOINT,
    TINY_CONFIG,
    Step,
    pull_request_event,
    run_step,
    runner_env,
    write_tiny_project,
)
from tests.github.support_fake_api import FakeGitHub
from tests.hostile.support_uids import chown_tree, make_user

pytestmark = pytest.mark.slow

HEAD, BASE, MERGE = "7" * 40, "8" * 40, "9" * 40
OWNER = "gpuemu-test-owner"

HOOKED = TINY_CONFIG.replace('[ops.inputs]\nx = ["N"]\n', "", 1).replace(
    'family = "elementwise"\n', 'family = "elementwise"\ninputs = "tinyops:make_inputs"\n', 1
)

OPS = """
import os, signal
import numpy as np

def _ancestor(wanted):
    # the nearest ancestor whose command line holds `wanted` (and not action-gate, unless that is wanted)
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(bytes(1))
        if wanted in argv and (wanted == b"action-gate" or b"action-gate" not in argv):
            return pid
    raise RuntimeError(f"no ancestor runs {wanted!r}")

def _act():
    attack = os.environ.get("ATTACK")
    if attack == "swap-output":
        if not os.path.islink("gpuemu-out"):
            os.rename("gpuemu-out", "gpuemu-out.moved")
            os.symlink(os.environ["VICTIM"], "gpuemu-out")
    elif attack == "kill-parent":
        os.kill(os.getppid(), signal.SIGKILL)
    elif attack == "kill-gate":
        os.kill(_ancestor(b"action-gate"), signal.SIGKILL)
    elif attack == "kill-action":
        try:
            os.kill(_ancestor(b"action"), signal.SIGKILL)
        except PermissionError:
            raise RuntimeError("refused: the Action is out of reach") from None

def make_inputs(rng, dims, dtype, kwargs):
    if os.environ.get("WHERE") == "hook":
        _act()
    return {"x": (rng.u64_array(dims["N"]) % 7).astype(dtype)}

def scale(x):
    if os.environ.get("WHERE") == "op":
        _act()
    return (x.astype(np.float32) * np.float32(2)).astype(x.dtype)

def scale_ref(x):
    return x * 2.0

def rowsum(x):
    return x.astype(np.float32).sum(axis=-1).astype(x.dtype)

def rowsum_ref(x):
    return x.sum(axis=-1)
"""


def victim_directory(root: Path) -> Path:
    """A directory of root's with a file in it: what the link points at."""
    victim = root / "victim"
    victim.mkdir(mode=0o755)
    (victim / "secret.txt").write_text("root's own file\n")
    (victim / "sub").mkdir()
    (victim / "sub" / "deeper.txt").write_text("also root's\n")
    return victim


def ownership(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.lstat().st_uid, p.lstat().st_gid)
        for p in [directory, *directory.rglob("*")]
    }


def gate_step(fake: FakeGitHub, workspace: Path, command: list[str] | None, **extra: str) -> tuple[Step, int]:
    pr = fake.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(
        fake, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none"},
    )  # fmt: skip
    env.update(extra)
    return run_step(env, command), pr


def test_a_linked_output_dir_is_refused_before_anything_runs(fake_github: FakeGitHub, open_dir: Path) -> None:
    victim = victim_directory(open_dir)
    before = ownership(victim)
    workspace = write_tiny_project(open_dir / "ws", OPS, HOOKED)
    uid, gid = make_user(OWNER)
    chown_tree(workspace, uid, gid)
    (workspace / "gpuemu-out").symlink_to(victim)  # committed in the pull request
    step, _ = gate_step(fake_github, workspace, None)
    assert step.returncode == 2, step.describe()
    (error,) = step.messages("error")
    assert "symbolic link" in error and "output_dir" in error
    assert ownership(victim) == before
    assert sorted(p.name for p in victim.iterdir()) == ["secret.txt", "sub"]


@pytest.mark.parametrize(
    ("inputs", "says"),
    [
        (
            {"cache_dir": "cache", "setup": "true"},
            "input cache_dir: cache is or passes through a symbolic link",
        ),
        ({"output_dir": "."}, "input output_dir: . is the workspace itself"),
    ],
    ids=["linked cache_dir", "output_dir is the workspace"],
)
def test_directories_given_to_code_under_test_are_real_and_inside_the_workspace(
    fake_github: FakeGitHub, open_dir: Path, inputs: dict[str, str], says: str
) -> None:
    """The Action gives output_dir and cache_dir (recursively) to the user code under test runs as: never the
    directory a link points at, never the whole checkout (.git and its hooks included)."""
    victim = victim_directory(open_dir)
    before = ownership(victim)
    workspace = write_tiny_project(open_dir / "ws", OPS, HOOKED)
    (workspace / "cache").symlink_to(victim)
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(
        fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none", **inputs},
    )  # fmt: skip
    step = run_step(env)
    assert step.returncode == 2, step.describe()
    (error,) = step.messages("error")
    assert says in error
    assert ownership(victim) == before
    assert ownership(workspace)["."] == (0, 0)


@pytest.mark.slow
def test_a_hook_that_swaps_the_output_dir_for_a_link_hands_nothing_over(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str]
) -> None:
    victim = victim_directory(open_dir)
    before = ownership(victim)
    workspace = write_tiny_project(open_dir / "ws", OPS, HOOKED)
    uid, gid = make_user(OWNER)
    chown_tree(workspace, uid, gid)
    command = [*shared_interpreter, sys.executable, str(ENTRYPOINT)]
    step, _ = gate_step(
        fake_github, workspace, command, ATTACK="swap-output", WHERE="hook", VICTIM=str(victim)
    )
    assert (workspace / "gpuemu-out").is_symlink(), step.describe()  # the hook did run, as the owner
    assert ownership(victim) == before, step.describe()
    assert sorted(p.name for p in victim.iterdir()) == ["secret.txt", "sub"]
    assert step.returncode == 3, step.describe()
    assert any("was replaced while the code under test ran" in e for e in step.messages("error")), (
        step.describe()
    )


@pytest.mark.slow
@pytest.mark.parametrize("where", ["op", "hook"])
def test_code_that_kills_the_gate_process_cannot_silence_the_action(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str], where: str
) -> None:
    workspace = write_tiny_project(open_dir / "ws", OPS, HOOKED)
    command = [*shared_interpreter, sys.executable, str(ENTRYPOINT)]
    step, pr = gate_step(fake_github, workspace, command, ATTACK="kill-gate", WHERE=where)
    # Nothing of the gate process's own survived; the Action, whose process code under test cannot signal,
    # wrote and published what happened.
    assert step.returncode == 3, step.describe()
    (comment,) = fake_github.comments(pr)
    assert "interrupted: the gate process was killed (SIGKILL)" in comment["body"]
    document = json.loads((workspace / "gpuemu-out" / "results.json").read_text())
    assert any("the gate process was killed" in note for note in document["notes"])
    assert step.outputs["verdict"] == "incomplete"
    assert all(op["cases_total"] == 0 and op["status"] == "error" for op in document["ops"])
    assert os.path.isdir(workspace / "gpuemu-out")


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["kill-parent", "kill-action"])
def test_code_that_kills_its_parent_or_the_action_is_reported_never_passed(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str], attack: str
) -> None:
    """`os.kill(os.getppid(), SIGKILL)` from an op kills whichever process runs it (a worker, or the gate
    process: both are reported); the Action's own process is out of reach (another user) and publishes."""
    workspace = write_tiny_project(open_dir / "ws", OPS, HOOKED)
    command = [*shared_interpreter, sys.executable, str(ENTRYPOINT)]
    step, pr = gate_step(fake_github, workspace, command, ATTACK=attack, WHERE="op")
    assert step.returncode in (1, 3), step.describe()  # not 137: the Action was not killed
    (comment,) = fake_github.comments(pr)
    document = json.loads((workspace / "gpuemu-out" / "results.json").read_text())
    assert document["verdict"] != "passed" and step.outputs["verdict"] != "passed"
    text = json.dumps(document)
    if attack == "kill-action":
        assert "the Action is out of reach" in text
    else:
        assert "the gate process was killed" in text or "crashed" in text
    assert "scale" in comment["body"]
