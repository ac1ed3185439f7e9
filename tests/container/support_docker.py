"""Run the Action's image the way GitHub's runner runs a Docker container action, for tests/container.

What the runner does (actions/runner, src/Runner.Worker/Handlers/ContainerActionHandler.cs and
Container/DockerCommandManager.cs, DockerRun): it lays out the job's directories on the host (the workspace,
owned by the runner's user, uid 1001 on GitHub's hosted runners; ``_temp`` with ``_github_home``,
``_github_workflow`` holding ``event.json``, and ``_runner_file_commands`` holding one fresh file per file
command and step), mounts them at ``/github/workspace``, ``/github/runner_temp``, ``/github/home``,
``/github/workflow`` and ``/github/file_commands`` next to the Docker socket, translates every path in the
step's environment to those mount points, and runs

    docker run --name N --label L --workdir /github/workspace --rm -e NAME... -e GITHUB_ACTIONS=true
      -e CI=true --network NETWORK -v SRC:DST... IMAGE

with each variable passed by name (``-e NAME``: the value comes from the docker client's environment). The
job's network here is the host's, so the fake GitHub API on 127.0.0.1 answers the container. The container
runs as root, the image's default, as on GitHub.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.action.support_runner import Command, Step, action_defaults
from tests.github.support_fake_api import FakeGitHub
from tests.github.support_runner_parsers import parse_command, parse_github_output

IMAGE_VARIABLE = "GPUEMU_CONTAINER_IMAGE"
IMAGE = os.environ.get(IMAGE_VARIABLE, "")
RUNNER_UID = 1001  # the `runner` user of GitHub's hosted images, who owns the workspace
STEP_TIMEOUT_S = 600
LABEL = "gpuemu-ci-container-tests"
_COMMAND = re.compile(r"^::[a-z-]+( [^:]*)?::")  # a workflow command line (::stop-commands tokens are not)

needs_image = pytest.mark.skipif(
    not IMAGE or shutil.which("docker") is None,
    reason=f"{IMAGE_VARIABLE} is not set (or no docker client): these tests run the Action's image through a "
    "Docker daemon; .ci/container builds the image, starts a daemon and runs them",
)


def chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


@dataclass(frozen=True)
class Job:
    """One job's directories on the host, as the runner lays them out under its work folder."""

    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "work" / "kernels" / "kernels"

    @property
    def temp(self) -> Path:
        return self.root / "work" / "_temp"

    def mounts(self) -> list[tuple[Path, str]]:
        socket = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
        return [
            (Path(socket), "/var/run/docker.sock"),
            (self.temp, "/github/runner_temp"),
            (self.temp / "_github_home", "/github/home"),
            (self.temp / "_github_workflow", "/github/workflow"),
            (self.temp / "_runner_file_commands", "/github/file_commands"),
            (self.workspace, "/github/workspace"),
        ]


@dataclass(frozen=True)
class PreparedStep:
    """A `docker run` ready to start, and where the runner reads the step's results back."""

    name: str
    argv: list[str]
    env: dict[str, str]
    output_file: Path
    summary_file: Path
    workspace: Path


def prepare_step(
    job: Job,
    fake: FakeGitHub,
    event_name: str,
    event: dict[str, Any],
    *,
    sha: str,
    ref: str,
    inputs: dict[str, str] | None = None,
    run_id: int = 9001,
    workspace_owner: int = RUNNER_UID,
) -> PreparedStep:
    """The runner's preparation of one container step: directories, event file, fresh file-command files,
    ownership, the environment with container paths, and the `docker run` command line."""
    for folder in ("_github_home", "_github_workflow", "_runner_file_commands"):
        (job.temp / folder).mkdir(parents=True, exist_ok=True)
    job.workspace.mkdir(parents=True, exist_ok=True)
    (job.temp / "_github_workflow" / "event.json").write_text(json.dumps(event), encoding="utf-8")
    step_id = uuid.uuid4()
    files = {
        kind: f"{kind}_{step_id}"
        for kind in ("set_output", "step_summary", "set_env", "add_path", "save_state")
    }
    for name in files.values():
        (job.temp / "_runner_file_commands" / name).write_text("", encoding="utf-8")
    chown_tree(job.temp, RUNNER_UID)
    chown_tree(job.workspace, workspace_owner)

    values = action_defaults()
    values["github_token"] = fake.token  # `${{ github.token }}`
    values.update(inputs or {})
    owner, _ = fake.repository.split("/")
    commands = "/github/file_commands/"
    env = {
        "HOME": "/github/home",
        "GITHUB_ACTION": "__gpuemu_action",
        "GITHUB_ACTION_PATH": "",
        "GITHUB_ACTION_REPOSITORY": "gpuemu/gpuemu-ci",
        "GITHUB_ACTOR": "octocat",
        "GITHUB_ACTOR_ID": "583231",
        "GITHUB_API_URL": fake.api_url,
        "GITHUB_GRAPHQL_URL": f"{fake.api_url}/graphql",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": "/github/workflow/event.json",
        "GITHUB_JOB": "gpuemu",
        "GITHUB_OUTPUT": commands + files["set_output"],
        "GITHUB_STEP_SUMMARY": commands + files["step_summary"],
        "GITHUB_ENV": commands + files["set_env"],
        "GITHUB_PATH": commands + files["add_path"],
        "GITHUB_STATE": commands + files["save_state"],
        "GITHUB_REF": ref,
        "GITHUB_REF_NAME": ref.removeprefix("refs/heads/").removeprefix("refs/pull/"),
        "GITHUB_REF_TYPE": "branch",
        "GITHUB_REPOSITORY": fake.repository,
        "GITHUB_REPOSITORY_ID": str(fake.repository_id),
        "GITHUB_REPOSITORY_OWNER": owner,
        "GITHUB_REPOSITORY_OWNER_ID": "9919",
        "GITHUB_RETENTION_DAYS": "90",
        "GITHUB_RUN_ID": str(run_id),
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_RUN_NUMBER": "3",
        "GITHUB_SHA": sha,
        "GITHUB_TRIGGERING_ACTOR": "octocat",
        "GITHUB_WORKFLOW": "gpuemu",
        "GITHUB_WORKFLOW_REF": f"{fake.repository}/.github/workflows/gpuemu.yml@{ref}",
        "GITHUB_WORKFLOW_SHA": sha,
        "GITHUB_WORKSPACE": "/github/workspace",
        "RUNNER_ARCH": "X64",
        "RUNNER_ENVIRONMENT": "github-hosted",
        "RUNNER_NAME": "GitHub Actions 2",
        "RUNNER_OS": "Linux",
        "RUNNER_TEMP": "/github/runner_temp",
        "RUNNER_TOOL_CACHE": "/opt/hostedtoolcache",
        # The runner hands every container step its runtime credentials too: secrets the code under test
        # must not see, like the token.
        "ACTIONS_RUNTIME_URL": f"{fake.api_url}/_runtime/",
        "ACTIONS_RUNTIME_TOKEN": "fake-actions-runtime-token",
        "ACTIONS_RESULTS_URL": f"{fake.api_url}/_results/",
    }
    if event_name in ("pull_request", "pull_request_target"):
        env["GITHUB_BASE_REF"] = event["pull_request"]["base"]["ref"]
        env["GITHUB_HEAD_REF"] = event["pull_request"]["head"]["ref"]
    env.update({f"INPUT_{name.upper()}": value for name, value in values.items()})

    name = f"gpuemu-test-{step_id.hex[:12]}"
    argv = ["docker", "run", "--name", name, "--label", LABEL, "--workdir", "/github/workspace", "--rm"]
    for key in env:
        argv += ["-e", key]
    argv += ["-e", "GITHUB_ACTIONS=true", "-e", "CI=true", "--network", "host"]
    for source, target in job.mounts():
        argv += ["-v", f"{source}:{target}"]
    argv.append(IMAGE)
    client_env = {k: v for k, v in os.environ.items() if k in ("PATH", "DOCKER_HOST")} | env
    return PreparedStep(
        name=name,
        argv=argv,
        env=client_env,
        output_file=job.temp / "_runner_file_commands" / files["set_output"],
        summary_file=job.temp / "_runner_file_commands" / files["step_summary"],
        workspace=job.workspace,
    )


def start(step: PreparedStep) -> subprocess.Popen[str]:
    return subprocess.Popen(
        step.argv, env=step.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(step: PreparedStep, process: subprocess.Popen[str], timeout: float = STEP_TIMEOUT_S) -> Step:
    """Waits for the container; what the runner reads back: exit code, outputs, commands, summary."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(["docker", "kill", step.name], capture_output=True, check=False, env=step.env)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"the container ran past {timeout} s\n{stdout[-3000:]}\n{stderr[-3000:]}"
        ) from None
    commands = tuple(Command(*parse_command(line)) for line in stdout.splitlines() if _COMMAND.match(line))
    return Step(
        returncode=process.returncode,
        stdout=stdout,
        stderr=stderr,
        outputs=parse_github_output(step.output_file.read_text(encoding="utf-8")),
        summary=step.summary_file.read_text(encoding="utf-8"),
        commands=commands,
        workspace=step.workspace,
    )


def run_step(step: PreparedStep) -> Step:
    return finish(step, start(step))


def in_image(*command: str) -> subprocess.CompletedProcess[str]:
    """A command in a throwaway container of the image, without network (for what the image holds)."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", command[0], IMAGE, *command[1:]],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
