"""Issue 26, item 1: code under test cannot change what the process holding the token later loads.

Two defences, each tested here. Code under test runs as a user who can write none of the files the Action's
process has loaded or will read (never as root, when any other user can run the interpreter). And that
process imports everything it will ever need before the first line of code under test runs: an audit hook in
it records every module imported after it starts the gate process, in every mode that runs the suite, and
there must be none.

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

from tests.action.support_runner import (
    BUGGY_SCALE,
    REPO,
    attacking_ops,
    pull_request_event,
    push_event,
    run_step,
    runner_env,
    schedule_event,
    write_tiny_project,
)
from tests.github.support_fake_api import FakeGitHub
from tests.hostile.support_hostile import attempts_in, drop_box
from tests.hostile.support_uids import chown_tree, make_user

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
@pytest.mark.parametrize("owner", ["root", "the installation's owner"])
def test_an_op_cannot_plant_code_in_the_token_holder(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str], owner: str
) -> None:
    """The workspace belongs to root (the case of the issue), or to a user who also owns gpuemu-ci's
    installation (a `pip install --user` on a self-hosted runner): either way the op runs as someone else."""
    entrypoint = install_copy(open_dir / "install")
    identity = open_dir / "install" / "gpuemu_ci" / "github" / "identity.py"
    before = digest(identity)
    loot = open_dir / "loot"
    loot.mkdir()
    loot.chmod(0o1777)  # the attacker's drop box: anyone may write, as /tmp
    workspace = write_tiny_project(open_dir / "ws", ATTACK_OPS)
    forbidden = {0}
    if owner != "root":
        uid, gid = make_user("gpuemu-test-installer")
        chown_tree(workspace, uid, gid)
        chown_tree(open_dir / "install", uid, gid)
        forbidden.add(uid)
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
        assert attempt["uid"] not in forbidden
    assert digest(identity) == before
    assert step.returncode == 0, step.describe()
    (comment,) = fake_github.comments(pr)  # the Action still had its token, and used it
    assert "passed" in comment["body"]
    assert not os.path.exists(loot / "stolen.txt")  # the planted code never ran anywhere


# Loaded by the Action's process (and its children, which it ignores) through PYTHONPATH: records each module
# the Action's process imports after it has started code under test (the setup step or the gate process).
AUDIT_HOOK = """
import os, sys
_out = os.environ.get("GPUEMU_IMPORT_AUDIT")
if _out and "action" in sys.orig_argv and "action-gate" not in sys.orig_argv:
    _started = []

    def _audit(event, args):
        # Code under test starts in the workspace (the setup step or the gate process); the Action's own
        # helpers (useradd, ctypes' ldconfig) do not.
        if event == "subprocess.Popen" and not _started and str(args[2]) == os.environ["GITHUB_WORKSPACE"]:
            _started.append(True)
            open(_out + ".armed", "w").close()
        elif event == "import" and _started:
            with open(_out, "a") as handle:
                handle.write(args[0] + chr(10))

    sys.addaudithook(_audit)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["gate", "baseline", "nightly"])
def test_the_token_holder_imports_nothing_after_code_under_test_starts(
    fake_github: FakeGitHub, tmp_path: Path, mode: str
) -> None:
    hook = tmp_path / "audit"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AUDIT_HOOK)
    workspace = write_tiny_project(tmp_path / "ws", BUGGY_SCALE)  # a failing op: comments, issues, SARIF
    if mode == "gate":
        pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
        event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
        env = runner_env(fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                         inputs={"mode": "gate", "baseline": "auto"})  # fmt: skip
    elif mode == "baseline":
        event = push_event(fake_github, before=BASE, after=HEAD)
        env = runner_env(fake_github, workspace, "push", event, sha=HEAD, ref="refs/heads/main",
                         inputs={"mode": "baseline"})  # fmt: skip
    else:
        env = runner_env(fake_github, workspace, "schedule", schedule_event(), sha=HEAD, ref="refs/heads/main",
                         inputs={"mode": "nightly", "baseline": "none"})  # fmt: skip
    audit = tmp_path / "imported-after-start.txt"
    env.update(PYTHONPATH=str(hook), GPUEMU_IMPORT_AUDIT=str(audit))
    step = run_step(env)
    assert step.returncode in (0, 1), step.describe()
    assert Path(f"{audit}.armed").exists(), step.describe()  # the hook saw the gate process start
    if mode == "gate":
        assert fake_github.comments(pr)  # publishing did happen after the run
    imported = audit.read_text().split() if audit.exists() else []
    assert imported == [], f"imported after code under test started: {imported}"


# --- issue 45, item 2: the templates, in the confinements where code under test can write the installation ----

# Jinja2 that walks the Action's objects for its secrets and prints the token into the comment it renders.
STEALING_TEMPLATE = (
    "\n{% for o in lipsum.__globals__.__builtins__.__import__('gc').get_objects() "
    "if o.__class__.__name__ == 'Secrets' %}STOLEN[{{ o.token }}]{% endfor %}\n"
)

TEMPLATE_OPS = attacking_ops(
    f"""
import json, os, pathlib
import gpuemu_ci

PLANTED = {STEALING_TEMPLATE!r}


def _tamper():
    outcomes = {{}}
    for name in ("comment.md.j2", "_body.md.j2", "summary.md.j2"):
        target = pathlib.Path(gpuemu_ci.__file__).parent / "templates" / name
        try:
            with open(target, "a") as handle:
                handle.write(PLANTED)
            outcomes[name] = "written"
        except OSError as exc:
            outcomes[name] = f"refused: {{exc.strerror}}"
    loot = pathlib.Path(os.environ["ATTACK_LOOT"])
    (loot / f"attempt-{{os.getpid()}}.json").write_text(json.dumps({{"outcomes": outcomes, "uid": os.getuid()}}))
""",
    "_tamper()",
)


@pytest.mark.slow
@pytest.mark.parametrize("confinement", ["root without capabilities", "same user"])
def test_a_template_written_by_code_under_test_is_never_rendered(
    fake_github: FakeGitHub, open_dir: Path, shared_interpreter: list[str], confinement: str
) -> None:
    """Where code under test can write gpuemu-ci's installation (root without capabilities, where no other user
    can run the interpreter; the Action running as the children's own user), an op appends a Jinja2 expression
    that finds the Action's secrets and prints the token to every template. The write succeeds, but the
    templates were compiled before the op ran: the comment holds no token and no trace of the expression. On
    the old code the Action read the templates when it rendered, after the op, and posted the token."""
    entrypoint = install_copy(open_dir / "install")
    template = open_dir / "install" / "gpuemu_ci" / "templates" / "comment.md.j2"
    loot = drop_box(open_dir)
    workspace = write_tiny_project(open_dir / "ws", TEMPLATE_OPS)
    command = [
        sys.executable,
        str(entrypoint),
    ]  # no other user can run this interpreter: root, no capabilities
    if confinement == "same user":
        uid, gid = make_user("gpuemu-test-installer")
        chown_tree(workspace, uid, gid)
        chown_tree(open_dir / "install", uid, gid)
        command = [
            *shared_interpreter,
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            *command,
        ]
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(
        fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none"},
    )  # fmt: skip
    if confinement == "same user":
        chown_tree(Path(env["GITHUB_OUTPUT"]).parent, uid, gid)
    env.update(ATTACK_LOOT=str(loot))
    step = run_step(env, command)

    attempts = attempts_in(loot)
    assert attempts, step.describe()
    assert all(set(a["outcomes"].values()) == {"written"} for a in attempts), attempts  # the write succeeded
    assert "STOLEN[" in template.read_text()
    assert step.returncode == 0, step.describe()
    (comment,) = fake_github.comments(pr)
    body = comment["body"].replace("\\", "")
    assert fake_github.token not in body and "STOLEN" not in body
    assert "passed" in body
    assert fake_github.token not in step.summary and "STOLEN" not in step.summary
