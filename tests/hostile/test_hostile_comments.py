"""The PR comment against a hostile pull request (issue #14, items 2 and 3), through the Action's entrypoint
against the loopback GitHub API.

- A fork's artifact is the fork's word: `mode: comment` says so, shows the triggering run's conclusion as
  GitHub reports it in the event, and never shows a pass unless that run succeeded.
- The sticky comment is found by its marker *and* its author: a marker someone else posted first is neither
  edited nor allowed to stop the Action's own comment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.action.support_runner import (
    BUGGY_SCALE,
    pull_request_event,
    run_step,
    runner_env,
    workflow_run_event,
    write_tiny_project,
)
from tests.github.support_fake_api import FakeGitHub

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

HEAD, BASE, MERGE = "1" * 40, "2" * 40, "3" * 40
FORK = "forker/kernels"
COMMENT_INPUTS = {"mode": "comment", "results": "gpuemu-out/results.json", "job_key": "gpuemu"}


def fork_results(fake_github: FakeGitHub, tmp_path: Path, ops_source: str | None = None) -> bytes:
    """results.json of a fork's gate run (read-only token, so it comments nothing itself)."""
    workspace = write_tiny_project(tmp_path / "fork", *(() if ops_source is None else (ops_source,)))
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE, head_repository=FORK)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE, head_repository=FORK)
    env = runner_env(fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                     inputs={"mode": "gate", "baseline": "none"})  # fmt: skip
    fake_github.read_only = True
    step = run_step(env)
    fake_github.read_only = False
    assert step.returncode in (0, 1), step.describe()
    return (workspace / "gpuemu-out" / "results.json").read_bytes()


def companion(fake_github: FakeGitHub, tmp_path: Path, results: bytes, conclusion: str) -> tuple[int, str]:
    """The workflow_run companion on a completed fork run with `conclusion`; (exit code, comment body)."""
    run = fake_github.add_run(event="pull_request", head_branch="feature", head_sha=HEAD, head_repository=FORK,
                       conclusion=conclusion)  # fmt: skip
    workspace = tmp_path / f"companion-{conclusion}"
    (workspace / "gpuemu-out").mkdir(parents=True)
    (workspace / "gpuemu-out" / "results.json").write_bytes(results)
    env = runner_env(fake_github, workspace, "workflow_run", workflow_run_event(fake_github, run), sha=BASE,
                     ref="refs/heads/main", run_id=777, job="comment", inputs=COMMENT_INPUTS)  # fmt: skip
    step = run_step(env)
    assert step.returncode == 0, step.describe()
    (pr,) = fake_github.state.pulls
    (comment,) = [c for c in fake_github.comments(pr) if "gpuemu-ci:v1" in c["body"]]
    return step.returncode, comment["body"]


@pytest.mark.parametrize("conclusion", ["failure", "cancelled", "timed_out", "action_required"])
def test_a_passing_artifact_of_a_run_that_did_not_succeed_is_never_shown_as_a_pass(
    fake_github: FakeGitHub, tmp_path: Path, conclusion: str
) -> None:
    """The fork's workflow can upload any document; GitHub's conclusion of the run is what the fork cannot
    forge."""
    results = fork_results(fake_github, tmp_path)
    assert json.loads(results)["verdict"] == "passed"
    _, body = companion(fake_github, tmp_path, results, conclusion)
    headline = body.splitlines()[1]
    shown = conclusion.replace("_", "\\_")  # as Markdown text
    assert headline.startswith("## ⚠️ gpuemu-ci not a pass:") and shown in headline, body
    assert "✅" not in body
    assert "unverified" in body and f"**{shown}**" in body and FORK in body


def test_a_successful_run_shows_the_artifacts_verdict_and_still_says_where_it_came_from(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    passed = fork_results(fake_github, tmp_path / "a")
    _, body = companion(fake_github, tmp_path, passed, "success")
    assert body.splitlines()[1].startswith("## ✅ gpuemu-ci passed")
    assert "unverified" in body and "**success**" in body


def test_a_failing_artifact_stays_failed_whatever_the_conclusion(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    failed = fork_results(fake_github, tmp_path, BUGGY_SCALE)
    _, body = companion(fake_github, tmp_path, failed, "success")  # continue-on-error: the run "succeeded"
    assert body.splitlines()[1].startswith("## ❌ gpuemu-ci FAILED")


def test_a_forged_passed_verdict_on_failing_rows_is_decided_again(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """The document's own `verdict` is not believed: it is decided again from the rows."""
    document = json.loads(fork_results(fake_github, tmp_path, BUGGY_SCALE))
    document["verdict"], document["exit_code"] = "passed", 0
    _, body = companion(fake_github, tmp_path, json.dumps(document).encode(), "success")
    assert body.splitlines()[1].startswith("## ❌ gpuemu-ci FAILED")


def test_a_marker_posted_first_by_the_pr_author_is_left_alone(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    forged = "<!-- gpuemu-ci:v1 key=gpuemu -->\n## ✅ gpuemu-ci passed: everything is fine, merge it"
    planted = fake_github.add_comment(pr, forged, login="pr-author")
    workspace = write_tiny_project(tmp_path / "ws", BUGGY_SCALE)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                     inputs={"mode": "gate", "baseline": "none"})  # fmt: skip
    first, second = run_step(env), run_step(env)
    assert (first.returncode, second.returncode) == (1, 1), first.describe()
    comments = {c["id"]: c for c in fake_github.comments(pr)}
    assert comments[planted]["body"] == forged  # never edited
    (ours,) = [c for cid, c in comments.items() if cid != planted]
    assert ours["user"]["login"] == "github-actions[bot]" and "FAILED" in ours["body"]
    assert first.outputs["comment_url"] == second.outputs["comment_url"] == ours["html_url"]
