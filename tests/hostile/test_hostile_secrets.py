"""No code under test can find the GitHub token or the signing key (issue #14, item 1).

The Action's entrypoint runs as the runner runs it (a separate process, configured by the environment alone,
against the loopback GitHub API). Code under test - an op in its worker, an `inputs` hook in the gate
process, the setup step - runs the snoop of support_snoop.py: every /proc/*/environ and /proc/*/cmdline, its
own memory, every file of the workspace, and the Action's own process. It must find neither secret; it must
be refused the Action's environ and memory; and its control file (outside the workspace, holding both
secrets) shows the search would have found them.
"""

from __future__ import annotations

import json
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuemu_ci.attest import keys
from tests.action.support_runner import pull_request_event, run_step, runner_env, write_tiny_project
from tests.github.support_fake_api import FakeGitHub
from tests.hostile.support_snoop import SNOOP_SOURCE, write_needles

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

HEAD, BASE, MERGE = "a" * 40, "b" * 40, "c" * 40

SNOOP_CONFIG = """\
[project]
name = "snooping"

[validation]
dtypes = ["float32"]
seed = 3

[ci]
quick_dtypes = ["float32"]
quick_iterations = 2
case_timeout = 120

[[ops]]
name = "scale"
op = "tinyops:scale"
reference = "tinyops:scale_ref"
family = "elementwise"
inputs = "tinyops:make_inputs"
[ops.dims]
N = [8, 33]
"""

SNOOP_OPS = """\
import os
import numpy as np
import snoop

_DONE = set()


def _once(label):
    if label not in _DONE:
        _DONE.add(label)
        here = os.path.dirname(os.path.abspath(__file__))
        snoop.snoop(label, here, os.path.join(here, "needles.json"), os.environ["SNOOP_CONTROL"])


def make_inputs(rng, dims, dtype, kwargs):
    _once("hook")
    return {"x": (rng.u64_array(dims["N"]) % 7).astype(dtype)}


def scale(x):
    _once("op")
    return (x * np.float32(2)).astype(x.dtype)


def scale_ref(x):
    return x * 2.0
"""


@pytest.fixture
def token() -> str:
    return "ghs_" + secrets.token_hex(20)


@pytest.fixture
def fake(token: str) -> Iterator[FakeGitHub]:
    with FakeGitHub(token=token) as server:
        yield server


def snooping_workspace(tmp_path: Path, named: dict[str, str]) -> tuple[Path, Path]:
    workspace = write_tiny_project(tmp_path / "ws", SNOOP_OPS, SNOOP_CONFIG)
    (workspace / "snoop.py").write_text(SNOOP_SOURCE)
    write_needles(workspace / "needles.json", named)
    control = tmp_path / "control.txt"  # outside the workspace: the search must find what it holds
    control.write_text("\n".join(named.values()))
    return workspace, control


def reports(workspace: Path) -> dict[str, dict]:
    return {
        path.stem.split("-")[0]: json.loads(path.read_text())
        for path in (workspace / "snoop-out").glob("*.json")
    }


def assert_found_nothing(report: dict, names: set[str]) -> None:
    assert report["found"] == {}, report["found"]
    assert set(report["control_found"]) == names  # the search works: it finds the secrets where they are
    assert report["scanned"]["environ"] > 0 and report["scanned"]["cmdline"] > 0
    assert report["scanned"]["own_memory_bytes"] > 10 << 20
    assert report["scanned"]["workspace_files"] >= 4
    assert report["action_pid"] is not None
    assert not report.get("action_readable"), report  # the Action's environ and memory are refused
    assert sorted(d.split(":")[0] for d in report["denied"]) == ["environ", "mem"]
    assert int(report["capabilities"], 16) == 0  # code under test holds no capability at all


def test_an_op_a_hook_and_the_setup_step_find_no_token(fake: FakeGitHub, token: str, tmp_path: Path) -> None:
    """Gate mode on a pull request, the token given as the input and again under names a workflow might use."""
    workspace, control = snooping_workspace(tmp_path, {"token": token})
    pr = fake.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
    setup = "python -c \"import os, snoop; snoop.snoop('setup', '.', 'needles.json', os.environ['SNOOP_CONTROL'])\""
    env = runner_env(
        fake, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none", "setup": setup},
    )  # fmt: skip
    env.update(GITHUB_TOKEN=token, GH_TOKEN=token, MY_DEPLOY_TOKEN=token, SNOOP_CONTROL=str(control))
    env["ACTIONS_RUNTIME_TOKEN"] = token  # the runner's own token: not for code under test either
    step = run_step(env)
    assert step.returncode == 0, step.describe()
    seen = reports(workspace)
    assert set(seen) == {"setup", "hook", "op"}, step.describe()
    for report in seen.values():
        assert_found_nothing(report, {"token"})
    (comment,) = fake.comments(pr)  # and the Action itself still had the token to comment with
    assert "passed" in comment["body"]


def test_a_signing_key_outside_mode_sign_is_refused_before_anything_runs(
    fake: FakeGitHub, token: str, tmp_path: Path
) -> None:
    key = keys.generate().private_pem().decode()
    body = "".join(key.splitlines()[1:-1])[20:]  # the key's own bytes in base64 (after the ASN.1 header)
    workspace, control = snooping_workspace(tmp_path, {"token": token, "key": body})
    for mode in ("gate", "baseline", "nightly"):
        env = runner_env(
            fake, workspace, "push", {"ref": "refs/heads/main", "before": BASE, "after": HEAD},
            sha=HEAD, ref="refs/heads/main",
            inputs={"mode": mode, "baseline": "none", "signing_key": key, "setup": "python -c 'import snoop'"},
        )  # fmt: skip
        env["SNOOP_CONTROL"] = str(control)
        step = run_step(env)
        assert step.returncode == 2, step.describe()
        (error,) = step.messages("error")
        assert "signing_key" in error and "mode: sign" in error
        shown = [line for line in step.stdout.splitlines() if not line.startswith("::add-mask::")]
        assert "PRIVATE KEY" not in "\n".join(shown) + step.stderr  # masked first, never printed
        assert not (workspace / "snoop-out").exists()  # nothing of the code under test ran
        assert not (workspace / "gpuemu-out" / "results.json").exists()


def test_the_snoop_finds_a_secret_that_is_in_reach(fake: FakeGitHub, token: str, tmp_path: Path) -> None:
    """The negative results above mean something: a token the op can reach (here, written into the workspace
    by the workflow, as `persist-credentials: true` would) is found."""
    workspace, control = snooping_workspace(tmp_path, {"token": token})
    (workspace / ".git-credentials").write_text(
        textwrap.dedent(f"https://x-access-token:{token}@github.com\n")
    )
    env = runner_env(
        fake, workspace, "push", {"ref": "refs/heads/main", "before": BASE, "after": HEAD},
        sha=HEAD, ref="refs/heads/main", inputs={"mode": "baseline"},
    )  # fmt: skip
    env["SNOOP_CONTROL"] = str(control)
    step = run_step(env)
    assert step.returncode == 0, step.describe()
    seen = reports(workspace)
    assert set(seen) == {"hook", "op"}
    for report in seen.values():
        assert list(report["found"]) == ["token"]
        assert report["found"]["token"] == [f"workspace file {workspace / '.git-credentials'}"]
