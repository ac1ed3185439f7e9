"""Run the Action's entrypoint the way the runner runs a Docker action, for tests/action/test_entrypoint.py.

The runner starts the container with a clean environment: the ``GITHUB_*``/``RUNNER_*`` variables, one
``INPUT_<ID>`` per input of action.yml with its default filled in (``github_token`` defaults to the
job's token), fresh per-step ``GITHUB_OUTPUT``/``GITHUB_STEP_SUMMARY`` files and the workspace as the
working directory (GitHub's documentation of Docker container actions). ``run_step`` builds exactly that around
``python entrypoint.py`` and reads back what the runner would: the exit code, the outputs, the workflow
commands and the summary. Event payloads are GitHub's own examples (tests/fixtures/github-events) with
the repository, numbers and SHAs edited to the scenario.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.github.support_fake_api import FakeGitHub
from tests.github.support_runner_parsers import parse_command, parse_github_output

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "entrypoint.py"
EVENTS = REPO / "tests" / "fixtures" / "github-events"
STEP_TIMEOUT_S = 120
_COMMAND = re.compile(r"^::[a-z-]+( [^:]*)?::")  # ::stop-commands tokens (hex) are not commands
# The runner's file commands (variable -> file name in the step's directory), fresh and empty for each step.
STEP_FILES = {
    "GITHUB_ENV": "set_env",
    "GITHUB_PATH": "add_path",
    "GITHUB_OUTPUT": "set_output",
    "GITHUB_STATE": "save_state",
    "GITHUB_STEP_SUMMARY": "step_summary",
}

# Two fast numpy ops: a run of the quick suite takes a second or two.
TINY_CONFIG = """\
[project]
name = "tiny"

[validation]
dtypes = ["float32"]
seed = 7

[ci]
quick_dtypes = ["float32"]
quick_iterations = 2
thorough_iterations = 3
case_timeout = 30
parallel_jobs = 1

[[ops]]
name = "scale"
op = "tinyops:scale"
reference = "tinyops:scale_ref"
family = "elementwise"
[ops.dims]
N = [8, 33]
[ops.inputs]
x = ["N"]

[[ops]]
name = "rowsum"
op = "tinyops:rowsum"
reference = "tinyops:rowsum_ref"
family = "reduction"
[ops.dims]
M = [2, 3]
N = [8, 17]
[ops.inputs]
x = ["M", "N"]
"""

CORRECT_OPS = """\
import numpy as np

def scale(x):
    return (x.astype(np.float32) * np.float32(2)).astype(x.dtype)

def scale_ref(x):
    return x * 2.0

def rowsum(x):
    return x.astype(np.float32).sum(axis=-1).astype(x.dtype)

def rowsum_ref(x):
    return x.sum(axis=-1)
"""


def attacking_ops(attack: str, call: str) -> str:
    """CORRECT_OPS whose `scale` first runs `call` (a statement), with `attack`'s definitions above it: an op
    that does its damage, then computes correctly."""
    return attack + "\n" + CORRECT_OPS.replace("def scale(x):\n", f"def scale(x):\n    {call}\n", 1)


# The same module with `scale` broken the way tiled kernels break: the last element is never written.
BUGGY_SCALE = CORRECT_OPS.replace(
    "    return (x.astype(np.float32) * np.float32(2)).astype(x.dtype)",
    "    out = (x.astype(np.float32) * np.float32(2)).astype(x.dtype)\n    out[..., -1] = 0\n    return out",
)


def write_tiny_project(workspace: Path, ops_source: str = CORRECT_OPS, config: str = TINY_CONFIG) -> Path:
    """gpuemu.toml and tinyops.py in ``workspace`` (created if needed); returns the workspace."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "gpuemu.toml").write_text(config, encoding="utf-8")
    (workspace / "tinyops.py").write_text(ops_source, encoding="utf-8")
    return workspace


def many_failures_project(workspace: Path, ops: int) -> Path:
    """``ops`` ops that all fail on every case with a long, Markdown-hostile exception message."""
    blocks = [TINY_CONFIG.split("[[ops]]", 1)[0]]
    for i in range(ops):
        blocks.append(
            textwrap.dedent(f"""\
            [[ops]]
            name = "broken_op_{i:03d}_with_a_rather_long_name_to_fill_tables"
            op = "tinyops:broken"
            reference = "tinyops:scale_ref"
            family = "elementwise"
            [ops.dims]
            N = [8, 33]
            [ops.inputs]
            x = ["N"]
            """)
        )
    source = CORRECT_OPS + textwrap.dedent("""
        def broken(x):
            return (x * 3.0).astype(x.dtype)
        """)
    return write_tiny_project(workspace, source, "\n".join(blocks))


# --- event payloads ------------------------------------------------------------------------------


def _fixture(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((EVENTS / name).read_text(encoding="utf-8"))
    return result


def _own_repository(fake: FakeGitHub, repo: dict[str, Any]) -> None:
    owner, name = fake.repository.split("/")
    repo.update(full_name=fake.repository, name=name, id=fake.repository_id, default_branch="main")
    if isinstance(repo.get("owner"), dict):
        repo["owner"]["login"] = owner


def pull_request_event(
    fake: FakeGitHub, number: int, *, head_sha: str, base_sha: str, head_repository: str | None = None
) -> dict[str, Any]:
    """A ``pull_request`` (synchronize) payload for PR ``number`` of the fake's repository into main;
    ``head_repository`` other than the repository makes it a fork's pull request."""
    event = _fixture("pull_request.synchronize.json")
    event["number"] = number
    _own_repository(fake, event["repository"])
    pr = event["pull_request"]
    pr["number"] = number
    pr["base"].update(ref="main", sha=base_sha)
    _own_repository(fake, pr["base"]["repo"])
    pr["head"].update(ref="feature", sha=head_sha)
    head_repo = pr["head"]["repo"]
    _own_repository(fake, head_repo)
    if head_repository and head_repository != fake.repository:
        head_repo.update(full_name=head_repository, id=fake.repository_id + 1, fork=True)
        head_repo["owner"]["login"] = head_repository.split("/")[0]
        pr["head"]["label"] = f"{head_repository.split('/')[0]}:feature"
    event["after"] = head_sha
    return event


def push_event(fake: FakeGitHub, *, before: str, after: str, branch: str = "main") -> dict[str, Any]:
    """A ``push`` payload for ``branch`` of the fake's repository."""
    event = _fixture("push.branch.json")
    _own_repository(fake, event["repository"])
    event.update(ref=f"refs/heads/{branch}", before=before, after=after)
    return event


def schedule_event() -> dict[str, Any]:
    """What the runner writes to the event file of a scheduled run."""
    return {"schedule": "17 3 * * *", "workflow": ".github/workflows/gpuemu-nightly.yml"}


def workflow_run_event(
    fake: FakeGitHub, run: dict[str, Any], *, pull_requests: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A ``workflow_run`` (completed) payload about ``run``, a run the fake knows.

    For a fork's pull request GitHub sends ``pull_requests: []``; pass the PR objects otherwise.
    """
    event = _fixture("workflow_run.completed.with_pr.json")
    _own_repository(fake, event["repository"])
    payload_run = event["workflow_run"]
    for key in ("id", "event", "head_sha", "head_branch", "conclusion", "status"):
        payload_run[key] = run[key]
    payload_run["head_repository"] = copy.deepcopy(run["head_repository"])
    payload_run["repository"] = copy.deepcopy(run["repository"])
    payload_run["pull_requests"] = pull_requests or []
    return event


# --- running the step ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One workflow command the step printed (``::name props::message``)."""

    name: str
    props: dict[str, str]
    message: str


@dataclass(frozen=True)
class Step:
    """What the runner sees after the step."""

    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    summary: str
    commands: tuple[Command, ...]
    workspace: Path

    def messages(self, name: str) -> list[str]:
        """The messages of every ``::name`` command (``error``, ``warning``, ``notice``)."""
        return [c.message for c in self.commands if c.name == name]

    def out(self, name: str) -> Path:
        """A file in the default output_dir."""
        return self.workspace / "gpuemu-out" / name

    def results(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            (self.workspace / self.outputs["results_path"]).read_text(encoding="utf-8")
        )
        return result

    def describe(self) -> str:
        """For assertion messages: the tail of both streams."""
        return f"exit {self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


def action_defaults() -> dict[str, str]:
    """Each input id of action.yml with its default, as the runner fills them in."""
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    return {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}


def runner_env(
    fake: FakeGitHub,
    workspace: Path,
    event_name: str,
    event: dict[str, Any],
    *,
    sha: str,
    ref: str,
    inputs: dict[str, str] | None = None,
    run_id: int = 9001,
    job: str = "gpuemu",
    actor: str = "octocat",
) -> dict[str, str]:
    """The environment of a Docker action step (only what the runner passes, plus PATH)."""
    step_dir = workspace.parent / f"{workspace.name}-runner"
    step_dir.mkdir(exist_ok=True)
    for name in ("event.json", *STEP_FILES.values()):
        (step_dir / name).unlink(missing_ok=True)
    (step_dir / "event.json").write_text(json.dumps(event), encoding="utf-8")
    for name in STEP_FILES.values():  # a fresh empty file of each file command, as the runner makes per step
        (step_dir / name).write_text("", encoding="utf-8")
    (step_dir / "home").mkdir(exist_ok=True)
    values = action_defaults()
    values["github_token"] = fake.token  # `${{ github.token }}`
    values.update(inputs or {})
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(step_dir / "home"),
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION": "__gpuemu_action",
        "GITHUB_ACTOR": actor,
        "GITHUB_API_URL": fake.api_url,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(step_dir / "event.json"),
        "GITHUB_JOB": job,
        **{variable: str(step_dir / name) for variable, name in STEP_FILES.items()},
        "GITHUB_REF": ref,
        "GITHUB_REPOSITORY": fake.repository,
        "GITHUB_REPOSITORY_ID": str(fake.repository_id),
        "GITHUB_REPOSITORY_OWNER": fake.repository.split("/")[0],
        "GITHUB_RUN_ID": str(run_id),
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_RUN_NUMBER": "3",
        "GITHUB_SHA": sha,
        "GITHUB_WORKFLOW": "gpuemu",
        "GITHUB_WORKFLOW_REF": f"{fake.repository}/.github/workflows/gpuemu.yml@{ref}",
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_OS": "Linux",
        "RUNNER_TEMP": str(step_dir),
    }
    if event_name == "pull_request":
        env["GITHUB_BASE_REF"] = event["pull_request"]["base"]["ref"]
        env["GITHUB_HEAD_REF"] = event["pull_request"]["head"]["ref"]
    if ref.startswith("refs/heads/"):
        env["GITHUB_REF_NAME"] = ref.removeprefix("refs/heads/")
    env.update({f"INPUT_{name.upper()}": value for name, value in values.items()})
    return env


def run_step(env: dict[str, str], command: list[str] | None = None) -> Step:
    """``python entrypoint.py`` (or ``command``) with ``env`` only, in the workspace; what the runner reads
    back."""
    done = subprocess.run(
        command or [sys.executable, str(ENTRYPOINT)],
        env=env,
        cwd=Path(env["GITHUB_WORKSPACE"]),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    return step_result(env, done.returncode, done.stdout, done.stderr)


def start_step(env: dict[str, str]) -> subprocess.Popen[str]:
    """``python entrypoint.py`` started as ``run_step`` runs it, for a test that acts on it while it runs (its
    ``communicate()`` then goes to ``step_result``)."""
    return subprocess.Popen(
        [sys.executable, str(ENTRYPOINT)],
        env=env,
        cwd=Path(env["GITHUB_WORKSPACE"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def step_result(env: dict[str, str], returncode: int, stdout: str, stderr: str) -> Step:
    """What the runner reads back after a step that ended with ``returncode`` and printed ``stdout``."""
    commands = tuple(Command(*parse_command(line)) for line in stdout.splitlines() if _COMMAND.match(line))
    return Step(
        returncode=returncode,
        stdout=stdout,
        stderr=stderr,
        outputs=parse_github_output(Path(env["GITHUB_OUTPUT"]).read_text(encoding="utf-8")),
        summary=Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8"),
        commands=commands,
        workspace=Path(env["GITHUB_WORKSPACE"]),
    )
