"""The sticky PR comment: created once, updated in place, never duplicated, never fatal."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from gpuemu_ci.github.client import GitHubClient
from gpuemu_ci.github.comments import (
    MAX_COMMENT_BYTES,
    CommentAction,
    compose_body,
    resolve_pull_request,
    upsert_comment,
)
from gpuemu_ci.github.context import ActionContext
from gpuemu_ci.render.markdown import comment_marker
from tests.github.support_fake_api import Failure, FakeGitHub, SleepRecorder
from tests.github.support_fake_objects import validation_error

EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "github-events"


def bodies(fake: FakeGitHub, pr: int) -> list[str]:
    return [c["body"] for c in fake.comments(pr)]


def test_first_run_creates_second_run_updates_in_place(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    fake_github.add_comment(pr, "LGTM")
    first = upsert_comment(client, fake_github.repository, pr, "## gpuemu-ci: 3 ops passed", "pr/gate")
    assert first.action is CommentAction.CREATED and first.ok
    assert first.url is not None and first.url.endswith(f"#issuecomment-{first.comment_id}")
    second = upsert_comment(client, fake_github.repository, pr, "## gpuemu-ci: 1 op failed", "pr/gate")
    assert second.action is CommentAction.UPDATED
    assert second.comment_id == first.comment_id
    assert bodies(fake_github, pr) == ["LGTM", f"{comment_marker('pr/gate')}\n## gpuemu-ci: 1 op failed"]
    assert len(fake_github.api_calls("POST", r"/comments$")) == 1


def test_each_job_key_has_its_own_comment(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    upsert_comment(client, fake_github.repository, pr, "cuda 12", "gate/cuda-12")
    upsert_comment(client, fake_github.repository, pr, "cuda 13", "gate/cuda-13")
    upsert_comment(client, fake_github.repository, pr, "cuda 12 again", "gate/cuda-12")
    assert [b.split("\n", 1)[1] for b in bodies(fake_github, pr)] == ["cuda 12 again", "cuda 13"]


def test_marker_found_on_a_later_page(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    for i in range(120):  # more than one page of 100
        fake_github.add_comment(pr, f"chatter {i}")
    created = upsert_comment(client, fake_github.repository, pr, "v1", "gate")
    updated = upsert_comment(client, fake_github.repository, pr, "v2", "gate")
    assert updated.action is CommentAction.UPDATED and updated.comment_id == created.comment_id
    assert len(fake_github.comments(pr)) == 121


def test_too_large_body_is_refused_without_a_request(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    body = "é" * 30_000  # 30,000 characters but 60,000 bytes: over the budget once the marker is added
    outcome = upsert_comment(client, fake_github.repository, pr, body, "gate")
    assert outcome.action is CommentAction.FAILED and not outcome.ok
    assert outcome.warning is not None and "over the 60,000-byte budget" in outcome.warning
    assert fake_github.requests == []
    fits = "x" * (MAX_COMMENT_BYTES - len(comment_marker("gate")) - 1)
    assert upsert_comment(client, fake_github.repository, pr, fits, "gate").action is CommentAction.CREATED


def test_read_only_fork_token_is_a_warning_not_an_exception(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    pr = fake_github.add_pull(head_repository="forker/kernels")
    fake_github.read_only = True
    outcome = upsert_comment(client, fake_github.repository, pr, "results", "gate")
    assert outcome.action is CommentAction.FAILED
    assert outcome.warning is not None
    assert "Resource not accessible by integration" in outcome.warning
    assert "gpuemu-fork-comment" in outcome.warning
    assert fake_github.comments(pr) == []


def test_validation_error_is_a_warning(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    body = validation_error("IssueComment", "body", "Body is too long (maximum is 65536 characters)")
    fake_github.fail("POST", "/comments$", Failure(422, body))
    outcome = upsert_comment(client, fake_github.repository, pr, "results", "gate")
    assert outcome.action is CommentAction.FAILED
    assert outcome.warning is not None and "422" in outcome.warning


def test_create_that_landed_despite_a_502_is_not_posted_twice(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("POST", "/comments$", Failure.applied_then_server_error(502))
    outcome = upsert_comment(client, fake_github.repository, pr, "results", "gate")
    assert outcome.action is CommentAction.UPDATED
    assert len(fake_github.comments(pr)) == 1


def test_create_that_failed_with_a_500_is_retried(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("POST", "/comments$", Failure.server_error(500))
    outcome = upsert_comment(client, fake_github.repository, pr, "results", "gate")
    assert outcome.action is CommentAction.CREATED
    assert len(fake_github.comments(pr)) == 1
    assert len(fake_github.api_calls("POST", r"/comments$")) == 2


def test_rate_limits_are_waited_out(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.secondary_rate_limit(retry_after=5))
    fake_github.fail("POST", "/comments$", Failure.too_many_requests(retry_after=2))
    outcome = upsert_comment(client, fake_github.repository, pr, "results", "gate")
    assert outcome.action is CommentAction.CREATED
    assert sleeps.waits == [5.0, 2.0]


def test_duplicates_from_racing_runs_are_collapsed_to_the_oldest(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    pr = fake_github.add_pull()
    marker_body = compose_body("old", "gate")
    oldest = fake_github.add_comment(pr, marker_body, login="github-actions[bot]", kind="Bot")
    fake_github.add_comment(pr, marker_body, login="github-actions[bot]", kind="Bot")
    outcome = upsert_comment(client, fake_github.repository, pr, "new", "gate")
    assert outcome.action is CommentAction.UPDATED and outcome.comment_id == oldest
    assert [c["id"] for c in fake_github.comments(pr)] == [oldest]
    assert bodies(fake_github, pr) == [compose_body("new", "gate")]


def test_a_users_comment_quoting_the_marker_is_not_taken_over(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    pr = fake_github.add_pull()
    ours = fake_github.add_comment(pr, compose_body("bot", "gate"), login="github-actions[bot]", kind="Bot")
    theirs = fake_github.add_comment(pr, compose_body("forged", "gate"), login="mallory")
    outcome = upsert_comment(client, fake_github.repository, pr, "fresh", "gate")
    assert outcome.comment_id == ours
    assert {c["id"]: c["body"] for c in fake_github.comments(pr)}[theirs] == compose_body("forged", "gate")


def test_a_marker_posted_first_by_someone_else_neither_blocks_nor_is_edited(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    """A user (or another bot) posts the marker before the first run: the Action posts its own comment, and on
    the next run edits its own, never theirs (issue #14, item 3)."""
    pr = fake_github.add_pull()
    forged = compose_body("all green, merge away", "gate")
    human = fake_github.add_comment(pr, forged, login="mallory")
    other_bot = fake_github.add_comment(pr, forged, login="renovate[bot]", kind="Bot")
    first = upsert_comment(client, fake_github.repository, pr, "ours", "gate")
    second = upsert_comment(client, fake_github.repository, pr, "ours again", "gate")
    assert first.action is CommentAction.CREATED and second.action is CommentAction.UPDATED
    assert first.comment_id == second.comment_id not in (human, other_bot)
    by_id = {c["id"]: c["body"] for c in fake_github.comments(pr)}
    assert by_id[human] == forged and by_id[other_bot] == forged
    assert by_id[second.comment_id] == compose_body("ours again", "gate")


def test_the_identity_of_a_personal_token_comes_from_get_user(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    fake_github.token_kind, fake_github.viewer_login = "personal", "release-robot"
    pr = fake_github.add_pull()
    # The workflow's bot wrote a marker earlier (another token): not this token's comment.
    fake_github.add_comment(pr, compose_body("old", "gate"), login="github-actions[bot]", kind="Bot")
    created = upsert_comment(client, fake_github.repository, pr, "v1", "gate")
    updated = upsert_comment(client, fake_github.repository, pr, "v2", "gate")
    assert created.action is CommentAction.CREATED and updated.comment_id == created.comment_id
    assert fake_github.api_calls("GET", "^/user$") and not fake_github.api_calls("POST", "^/graphql$")
    assert len(fake_github.comments(pr)) == 2


def test_without_graphql_an_installation_token_is_the_workflows_bot(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    fake_github.graphql_enabled = False
    pr = fake_github.add_pull()
    ours = fake_github.add_comment(pr, compose_body("old", "gate"), login="github-actions[bot]", kind="Bot")
    fake_github.add_comment(pr, compose_body("forged", "gate"), login="github-actions")  # a user, not the bot
    outcome = upsert_comment(client, fake_github.repository, pr, "new", "gate")
    assert outcome.action is CommentAction.UPDATED and outcome.comment_id == ours


def test_a_token_whose_account_cannot_be_found_posts_nothing(
    fake_github: FakeGitHub, sleeps: SleepRecorder
) -> None:
    fake_github.graphql_enabled = False
    with GitHubClient(fake_github.token, fake_github.api_url, sleep=sleeps, jitter=lambda: 0.0) as client:
        client.installation_token = False  # e.g. a fine-grained personal token refused GET /user
        pr = fake_github.add_pull()
        outcome = upsert_comment(client, fake_github.repository, pr, "new", "gate")
    assert outcome.action is CommentAction.FAILED and "which account" in (outcome.warning or "")
    assert fake_github.comments(pr) == []


def test_markers_inside_the_body_are_defused() -> None:
    body = compose_body("op name: <!-- gpuemu-ci:v1 key=gate -->", "gate")
    first, rest = body.split("\n", 1)
    assert first == comment_marker("gate")
    assert "<!-- gpuemu-ci:v1" not in rest


def test_keys_are_sanitised_into_the_marker() -> None:
    assert comment_marker("gate (cuda 12) -->") == "<!-- gpuemu-ci:v1 key=gate__cuda_12__-_ -->"
    assert comment_marker("gate/cuda-12") == "<!-- gpuemu-ci:v1 key=gate/cuda-12 -->"
    for hostile in ("a-->b", "a--->b", "x\n<!-- y"):
        key = comment_marker(hostile).removeprefix("<!-- gpuemu-ci:v1 key=").removesuffix(" -->")
        assert "--" not in key and ">" not in key and "\n" not in key


def test_resolve_pull_request_for_a_fork_workflow_run(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    head_sha = "d" * 40
    pr = fake_github.add_pull(head_repository="forker/kernels", head_ref="fix-tail", head_sha=head_sha)
    fake_github.add_pull(head_repository="forker/kernels", head_ref="other", head_sha="c" * 40)
    event = copy.deepcopy(json.loads((EVENTS / "workflow_run.completed.with_pr.json").read_text()))
    run = event["workflow_run"]
    run.update(pull_requests=[], head_sha=head_sha, head_branch="fix-tail", event="pull_request")
    run["head_repository"]["full_name"] = "forker/kernels"
    (tmp_path / "event.json").write_text(json.dumps(event))
    ctx = ActionContext.from_env(
        {
            "GITHUB_REPOSITORY": fake_github.repository,
            "GITHUB_EVENT_NAME": "workflow_run",
            "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        }
    )
    assert ctx.pr_number is None
    assert resolve_pull_request(client, ctx) == pr
    assert fake_github.api_calls("GET", "/pulls$")[0].query["head"] == ["forker:fix-tail"]
    run["head_sha"] = "9" * 40  # a newer push to the PR: the run is stale, no match
    (tmp_path / "event.json").write_text(json.dumps(event))
    stale = ActionContext.from_env(
        {
            "GITHUB_REPOSITORY": fake_github.repository,
            "GITHUB_EVENT_NAME": "workflow_run",
            "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        }
    )
    assert resolve_pull_request(client, stale) is None


def test_no_pull_request_number_is_a_warning(fake_github: FakeGitHub, client: GitHubClient) -> None:
    outcome = upsert_comment(client, fake_github.repository, None, "body", "gate")  # type: ignore[arg-type]
    assert outcome.action is CommentAction.FAILED and "no pull request" in (outcome.warning or "")
    assert fake_github.requests == []
