"""Issue 45, item 2: the Action (root, with the token) reads nothing through a link, reads what it needs before
code under test can change it, and never quotes a file it read into the comment.

- An op replaces the downloaded baseline (in the output directory, which the code under test's user owns) by a
  link to a file of root's (directory 0700, file 0600). The old Action read the baseline after the suite ran,
  through the link, and its error quoted the file ("Invalid enum value 'SECRET-…'") in the PR comment. Now the
  baseline is read before the suite runs: the diff is against the real one, and the secret goes nowhere.
- A pull request commits a link as the `baseline` input's file: refused (not read), said plainly.
- A baseline whose values are wrong is reported by where it is wrong, not by what it holds.

The Action runs as the runner runs it: as root, the workspace the runner user's, code under test as that user
(support_uids.shared_interpreter), against the loopback GitHub API.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.action.support_runner import (
    ENTRYPOINT,
    Step,
    attacking_ops,
    pull_request_event,
    push_event,
    run_step,
    runner_env,
    write_tiny_project,
)
from tests.github.support_fake_api import FakeGitHub
from tests.hostile.support_hostile import attempts_in, drop_box
from tests.hostile.support_uids import chown_tree, make_user

pytestmark = pytest.mark.slow  # whole Action steps with real users

HEAD, BASE, MERGE = "a1" * 20, "b2" * 20, "c3" * 20
SECRET = "SECRET-7f3a9c"

OPS = attacking_ops(
    """
import json, os, pathlib

def _swap_the_baseline():
    if not os.environ.get("SECRET_PATH"):
        return
    found = sorted(pathlib.Path("gpuemu-out", ".baseline").rglob("*.json"))
    outcomes = []
    for path in found:
        try:
            path.unlink()
            path.symlink_to(os.environ["SECRET_PATH"])
            outcomes.append(f"linked {path}")
        except OSError as exc:
            outcomes.append(f"refused {path}: {exc.strerror}")
    loot = pathlib.Path(os.environ["ATTACK_LOOT"])
    (loot / f"attempt-{os.getpid()}.json").write_text(json.dumps({"outcomes": outcomes, "uid": os.getuid()}))
""",
    "_swap_the_baseline()",
)


def baseline_files(fake: FakeGitHub, root: Path) -> dict[str, bytes]:
    """What the baseline workflow uploads, made by a real baseline step on main."""
    main = write_tiny_project(root / "main")
    event = push_event(fake, before="0" * 40, after=BASE)
    step = run_step(
        runner_env(fake, main, "push", event, sha=BASE, ref="refs/heads/main", inputs={"mode": "baseline"})
    )
    assert step.returncode == 0, step.describe()
    return {name: (main / "gpuemu-out" / name).read_bytes() for name in ("baseline.json", "results.json")}


def with_secret(document: bytes) -> bytes:
    """The document with a secret where a status goes (what a file of root's could hold)."""
    data: dict[str, Any] = json.loads(document)
    data["ops"][0]["status"] = SECRET
    return json.dumps(data).encode()


def root_only_secret(root: Path, content: bytes) -> Path:
    folder = root / "secret"
    folder.mkdir(mode=0o700)
    secret = folder / "baseline.json"
    secret.write_bytes(content)
    secret.chmod(0o600)
    return secret


def gate_step(
    fake: FakeGitHub, workspace: Path, command: list[str], inputs: dict[str, str], **extra: str
) -> tuple[Step, int]:
    pr = fake.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(
        fake, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", **inputs},
    )  # fmt: skip
    uid, gid = make_user("gpuemu-test-runner")
    chown_tree(workspace, uid, gid)
    chown_tree(Path(env["GITHUB_OUTPUT"]).parent, uid, gid)
    env.update(extra)
    return run_step(env, command), pr


def test_a_downloaded_baseline_swapped_for_a_link_is_never_read(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str]
) -> None:
    files = baseline_files(fake_github, open_dir)
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    fake_github.add_artifact(run, "gpuemu-baseline", files)
    secret = root_only_secret(open_dir, with_secret(files["baseline.json"]))
    loot = drop_box(open_dir)
    workspace = write_tiny_project(open_dir / "ws", OPS)
    step, pr = gate_step(
        fake_github, workspace, [*shared_interpreter, sys.executable, str(ENTRYPOINT)], {"baseline": "auto"},
        SECRET_PATH=str(secret), ATTACK_LOOT=str(loot),
    )  # fmt: skip
    attempts = attempts_in(loot)
    assert attempts and any(o.startswith("linked") for a in attempts for o in a["outcomes"]), step.describe()
    (comment,) = fake_github.comments(pr)
    assert SECRET not in comment["body"] and SECRET not in step.stdout and SECRET not in step.summary
    diff = step.results()["diff"]
    assert diff["status"] == "compared", diff["message"]  # against the baseline as downloaded
    assert step.returncode == 0, step.describe()


@pytest.mark.parametrize("kind", ["a link to a file of root's", "a file with a secret in a value"])
def test_the_baseline_input_is_never_read_through_a_link_nor_quoted(
    fake_github: FakeGitHub, open_dir: Path, kind: str
) -> None:
    files = baseline_files(fake_github, open_dir)
    workspace = write_tiny_project(open_dir / "ws")
    if kind.startswith("a link"):  # committed in the pull request
        (workspace / "base.json").symlink_to(root_only_secret(open_dir, with_secret(files["baseline.json"])))
    else:
        (workspace / "base.json").write_bytes(with_secret(files["baseline.json"]))
    step, pr = gate_step(fake_github, workspace, [sys.executable, str(ENTRYPOINT)], {"baseline": "base.json"})
    assert step.returncode == 0, step.describe()
    (comment,) = fake_github.comments(pr)
    body = comment["body"].replace("\\", "")
    assert SECRET not in body and SECRET not in step.stdout and SECRET not in step.summary
    diff = step.results()["diff"]
    assert diff["status"] == "unreadable", diff["message"]
    if kind.startswith("a link"):
        assert "is, or passes through, a symbolic link: not read" in diff["message"]
    else:
        assert "Invalid enum value - at `$.ops[0].status`" in diff["message"]
    assert "baseline unreadable" in body
