"""Issue 45, item 1: code under test cannot write the runner's file commands or the event payload.

The layout of a GitHub-hosted runner: the workspace, the step's file-command files (set_env, add_path,
set_output, save_state, step_summary) and the directory they are in, and the event payload all belong to the
runner's user (uid 1001 there; a real user here), which is also the user the Action runs code under test as.
An op appends a line to one of the files (and, where that is refused, puts a file of its own in its place: the
directory is its user's), the classic GITHUB_ENV injection (`LD_PRELOAD=...` for every later step of the job).

After the step each file holds only what it held before plus the Action's own lines, with its owner and mode,
the step fails (exit 3) saying which file was changed, and the comment says the run is not a pass. On the old
code the op's line stayed in the file and the step passed.

The Action runs as the runner runs it: as root, the workspace another user's, with an interpreter every user
can run (support_uids.shared_interpreter: code under test runs as the workspace's owner), or as root without
capabilities (no other user can run the interpreter), or as that user itself (the Action unprivileged).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tests.action.support_runner import (
    ENTRYPOINT,
    STEP_FILES,
    TINY_CONFIG,
    Step,
    attacking_ops,
    pull_request_event,
    run_step,
    runner_env,
    write_tiny_project,
)
from tests.github.support_fake_api import FakeGitHub
from tests.github.support_runner_parsers import parse_github_output
from tests.hostile.support_hostile import attempts_in, drop_box
from tests.hostile.support_uids import chown_tree, make_user

pytestmark = pytest.mark.slow  # whole Action steps with real users

HEAD, BASE, MERGE = "4" * 40, "5" * 40, "6" * 40
RUNNER_USER = "gpuemu-test-runner"

# What the op adds to each file: harmless stand-ins for what an attacker would.
PLANTED = {
    "GITHUB_ENV": "LD_PRELOAD=/tmp/gpuemu-planted.so\n",
    "GITHUB_PATH": "/tmp/gpuemu-planted-bin\n",
    "GITHUB_OUTPUT": "planted=yes\n",
    "GITHUB_STATE": "planted=yes\n",
    "GITHUB_STEP_SUMMARY": "PLANTED SUMMARY LINE\n",
    "GITHUB_EVENT_PATH": '{"planted": true}\n',
}
FILE_OF = {**STEP_FILES, "GITHUB_EVENT_PATH": "event.json"}

OPS = attacking_ops(
    """
import json, os, pathlib

def _attack():
    target = pathlib.Path(os.environ["ATTACK_DIR"]) / os.environ["ATTACK_FILE"]
    planted = os.environ["ATTACK_LINE"]
    outcomes = {"uid": os.getuid(), "variables": sorted(k for k in os.environ if k in (
        "GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STATE", "GITHUB_STEP_SUMMARY", "GITHUB_EVENT_PATH"))}
    try:
        with open(target, "a") as handle:
            handle.write(planted)
        outcomes["append"] = "written"
    except OSError as exc:
        outcomes["append"] = f"refused: {exc.strerror}"
    try:  # the directory is the runner user's: a file of our own in its place
        own = target.with_name(target.name + ".planted")
        old = target.read_text() if target.exists() else ""
        own.write_text(old + planted)
        os.replace(own, target)
        outcomes["replace"] = "written"
    except OSError as exc:
        outcomes["replace"] = f"refused: {exc.strerror}"
    # The other channel: a workflow command on the gate process's stdout, which is the step's log (a pipe of
    # root's, out of reach of another user).
    try:
        with open(f"/proc/{_ancestor(b'action-gate')}/fd/1", "w") as log:
            log.write("::set-output name=planted::yes" + chr(10))
        outcomes["log"] = "written"
    except OSError as exc:
        outcomes["log"] = f"refused: {exc.strerror}"
    loot = pathlib.Path(os.environ["ATTACK_LOOT"])
    (loot / f"attempt-{os.getpid()}.json").write_text(json.dumps(outcomes))

def _ancestor(wanted):
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if wanted in f.read().split(bytes(1)):
                return pid
    raise RuntimeError(f"no ancestor runs {wanted!r}")

""",
    "_attack()",
)

ONE_OP = TINY_CONFIG.split('\n[[ops]]\nname = "rowsum"', 1)[0].replace(
    "quick_iterations = 2", "quick_iterations = 1"
)


def attack_step(
    fake: FakeGitHub, root: Path, variable: str, confinement: str, shared_interpreter: list[str]
) -> tuple[Step, dict[str, str], Path, dict[str, tuple[bytes, int, int, int]], int]:
    """Run the Action on a pull request whose op attacks the file of `variable`; (the step, its environment,
    the loot directory, every held file's (content, uid, gid, mode) before the step, the pull request)."""
    uid, gid = make_user(RUNNER_USER)
    loot = drop_box(root)
    workspace = write_tiny_project(root / "ws", OPS, ONE_OP)
    pr = fake.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(
        fake, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none"},
    )  # fmt: skip
    step_dir = Path(env["GITHUB_OUTPUT"]).parent
    chown_tree(workspace, uid, gid)
    chown_tree(step_dir, uid, gid)  # the runner's user owns the step's files and their directory
    before = {
        name: (path.read_bytes(), path.stat().st_uid, path.stat().st_gid, stat.S_IMODE(path.stat().st_mode))
        for name, path in ((v, Path(env[v])) for v in FILE_OF)
    }
    env.update(
        ATTACK_DIR=str(step_dir),
        ATTACK_FILE=FILE_OF[variable],
        ATTACK_LINE=PLANTED[variable],
        ATTACK_LOOT=str(loot),
    )
    command = [*shared_interpreter, sys.executable, str(ENTRYPOINT)]
    if confinement == "root without capabilities":
        command = [sys.executable, str(ENTRYPOINT)]  # no other user can run this interpreter here
    elif confinement == "same user":  # the Action itself unprivileged, as the runner's user
        command = [*shared_interpreter, "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                   sys.executable, str(ENTRYPOINT)]  # fmt: skip
    return run_step(env, command), env, loot, before, pr


@pytest.mark.parametrize("variable", list(FILE_OF))
def test_code_under_test_cannot_write_the_runners_files(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str], variable: str
) -> None:
    check_attack(fake_github, open_dir, variable, "other user", shared_interpreter)


@pytest.mark.parametrize("confinement", ["root without capabilities", "same user"])
def test_in_the_fallback_confinements_too(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str], confinement: str
) -> None:
    check_attack(fake_github, open_dir, "GITHUB_ENV", confinement, shared_interpreter)


def check_attack(
    fake: FakeGitHub, root: Path, variable: str, confinement: str, shared_interpreter: list[str]
) -> None:
    step, env, loot, before, pr = attack_step(fake, root, variable, confinement, shared_interpreter)
    planted = PLANTED[variable]
    for name, (content, owner, group, mode) in before.items():
        path = Path(env[name])
        now = path.read_bytes()
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode), name
        assert planted.encode() not in now, (name, now)
        assert now.startswith(content), name  # what the runner had put there stays
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (owner, group, mode), name
        if name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_EVENT_PATH"):
            assert now == content, name  # the Action writes nothing there
    attempts = attempts_in(loot)
    assert attempts, step.describe()
    uid = make_user(RUNNER_USER)[0]
    for attempt in attempts:
        assert attempt["variables"] == []  # none of the paths is in the children's environment
        if confinement != "root without capabilities":
            assert attempt["uid"] == uid
        if confinement != "same user":
            assert attempt["append"].startswith("refused"), attempt  # the file is not theirs while they run
        if confinement == "root without capabilities":
            assert attempt["replace"].startswith("refused"), (
                attempt
            )  # nor the directory (the runner's user's)
    changed = any("written" in (attempt["append"], attempt["replace"]) for attempt in attempts)
    if any(attempt["log"] == "written" for attempt in attempts):
        assert_shown_never_obeyed(step.stdout, "::set-output name=planted::yes")
    outputs = parse_github_output(Path(env["GITHUB_OUTPUT"]).read_text())
    assert "planted" not in outputs
    assert "gpuemu-ci" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()  # the Action's own summary is there
    (comment,) = fake.comments(pr)
    errors = [m for m in step.messages("error") if "the code under test changed" in m]
    if not changed:  # every write was refused: nothing to put back, and the run is judged as it ran
        assert step.returncode == 0 and outputs["verdict"] == "passed" and not errors, step.describe()
        return
    # What it changed was put back; the run is not a pass, and every report says why.
    assert step.returncode == 3 and outputs["verdict"] == "error", step.describe()
    (error,) = errors
    assert variable in error
    assert f"changed the runner's {variable}" in comment["body"].replace("\\", "")
    assert not any(path.name.endswith(".planted") for path in Path(env["GITHUB_OUTPUT"]).parent.iterdir())
    assert os.path.exists(env["GITHUB_EVENT_PATH"])


def assert_shown_never_obeyed(log: str, planted: str) -> None:
    """`planted` is in the log, but only where the runner obeys no workflow command: between
    `::stop-commands::TOKEN` and `::TOKEN::`."""
    lines = log.splitlines()
    assert planted in lines
    stopped_by = None
    for line in lines:
        if stopped_by is None and line.startswith("::stop-commands::"):
            stopped_by = f"::{line.removeprefix('::stop-commands::')}::"
        elif stopped_by is not None and line == stopped_by:
            stopped_by = None
        elif line == planted:
            assert stopped_by is not None, "a workflow command of the code under test reached the runner"
