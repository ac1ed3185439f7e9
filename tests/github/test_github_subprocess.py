"""The GitHub layer in a separate process, configured only by the environment the runner gives a
Docker action, against the fake API on 127.0.0.1 (the setup the entrypoint tests use)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.github.support_fake_api import FakeGitHub
from tests.github.support_runner_parsers import parse_command, parse_github_output

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "github-events"

# A miniature entrypoint: context from the environment, one comment, outputs, annotations.
SCRIPT = """
import os, sys
from gpuemu_ci.github.client import GitHubClient
from gpuemu_ci.action.commands import set_outputs
from gpuemu_ci.render.annotations import Annotation, Level, format_annotations
from gpuemu_ci.github.comments import upsert_comment
from gpuemu_ci.github.context import ActionContext

ctx = ActionContext.from_env(os.environ)
with GitHubClient(ctx.token, ctx.api_url, max_total_wait=0) as gh:
    body = "## gpuemu-ci\\nrun " + ctx.input("seed")
    outcome = upsert_comment(gh, ctx.repository, ctx.pr_number, body, ctx.job)
set_outputs(os.environ["GITHUB_OUTPUT"], {"comment_url": outcome.url, "fork": ctx.is_fork})
if outcome.warning:
    sys.stdout.write(format_annotations([Annotation(Level.WARNING, "PR comment", outcome.warning)]))
"""


def run_step(
    fake: FakeGitHub, tmp_path: Path, pr: int, *, fork: bool, seed: str
) -> tuple[dict[str, str], str]:
    event: dict[str, Any] = json.loads((EVENTS / "pull_request.synchronize.json").read_text(encoding="utf-8"))
    event["number"] = event["pull_request"]["number"] = pr
    event["repository"].update(full_name=fake.repository, id=fake.repository_id)
    event["pull_request"]["base"]["repo"]["full_name"] = fake.repository
    head = "forker/kernels" if fork else fake.repository
    event["pull_request"]["head"]["repo"]["full_name"] = head
    (tmp_path / "event.json").write_text(json.dumps(event), encoding="utf-8")
    output = tmp_path / "output"
    output.write_text("", encoding="utf-8")
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": fake.repository,
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        "GITHUB_API_URL": fake.api_url,
        "GITHUB_JOB": "gate",
        "GITHUB_OUTPUT": str(output),
        "INPUT_GITHUB_TOKEN": fake.token,
        "INPUT_SEED": seed,
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return parse_github_output(output.read_text(encoding="utf-8")), done.stdout


def test_two_runs_leave_one_comment(fake_github: FakeGitHub, tmp_path: Path) -> None:
    pr = fake_github.add_pull()
    first, _ = run_step(fake_github, tmp_path, pr, fork=False, seed="1")
    second, stdout = run_step(fake_github, tmp_path, pr, fork=False, seed="2")
    (comment,) = fake_github.comments(pr)
    assert comment["body"].endswith("run 2")
    assert first["comment_url"] == second["comment_url"] == comment["html_url"]
    assert second["fork"] == "false" and stdout == ""


def test_fork_with_a_read_only_token_warns_and_exits_zero(fake_github: FakeGitHub, tmp_path: Path) -> None:
    pr = fake_github.add_pull(head_repository="forker/kernels")
    fake_github.read_only = True
    outputs, stdout = run_step(fake_github, tmp_path, pr, fork=True, seed="1")
    assert outputs == {"comment_url": "", "fork": "true"}
    (line,) = stdout.splitlines()
    name, props, message = parse_command(line)
    assert (name, props["title"]) == ("warning", "PR comment")
    assert "Resource not accessible by integration" in message
    assert fake_github.comments(pr) == []
