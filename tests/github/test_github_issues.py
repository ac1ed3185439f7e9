"""Nightly issues: one per failing op, updated while it fails, closed when it passes again."""

from __future__ import annotations

from gpuemu_ci.github.client import GitHubClient
from gpuemu_ci.github.issues import (
    MAX_ISSUE_BYTES,
    NIGHTLY_LABEL,
    IssueAction,
    NightlyOp,
    issue_body,
    nightly_marker,
    sync_nightly_issues,
)
from gpuemu_ci.render.text import clip_utf8
from gpuemu_ci.results.model import OpStatus
from tests.github.support_fake_api import Failure, FakeGitHub

RUN_1 = "https://github.example/octo-org/kernels/actions/runs/1"
RUN_2 = "https://github.example/octo-org/kernels/actions/runs/2"
RUN_3 = "https://github.example/octo-org/kernels/actions/runs/3"
REPLAY = "gpuemu-ci replay --op softmax --seed 0x5eed"


def failing(name: str, details: str = f"seed 0x5eed\n\n```\n{REPLAY}\n```") -> NightlyOp:
    return NightlyOp(name, OpStatus.FAILED, details)


def test_open_update_close_cycle(fake_github: FakeGitHub, client: GitHubClient) -> None:
    repo = fake_github.repository
    opened = sync_nightly_issues(
        client, repo, [failing("softmax"), NightlyOp("gelu", OpStatus.PASSED)], run_url=RUN_1
    )
    assert [(o.op, o.action) for o in opened] == [
        ("softmax", IssueAction.OPENED),
        ("gelu", IssueAction.UNCHANGED),
    ]
    (issue,) = fake_github.issues()
    assert issue["title"] == "gpuemu-ci nightly: `softmax` fails"
    assert issue["body"].split("\n", 1)[0] == nightly_marker("softmax")
    assert REPLAY in issue["body"] and RUN_1 in issue["body"]
    assert [label["name"] for label in issue["labels"]] == [NIGHTLY_LABEL]
    assert opened[0].number == issue["number"] and opened[0].url == issue["html_url"]

    again = sync_nightly_issues(client, repo, [failing("softmax")], run_url=RUN_2)
    assert again[0].action is IssueAction.UPDATED and again[0].number == issue["number"]
    (still,) = fake_github.issues()
    assert RUN_2 in still["body"] and RUN_1 not in still["body"]

    fixed = sync_nightly_issues(client, repo, [NightlyOp("softmax", OpStatus.PASSED)], run_url=RUN_3)
    assert fixed[0].action is IssueAction.CLOSED
    (closed,) = fake_github.issues()
    assert closed["state"] == "closed" and closed["state_reason"] == "completed"
    (comment,) = fake_github.comments(closed["number"])
    assert RUN_3 in comment["body"] and "passes again" in comment["body"]


def test_an_op_that_did_not_run_keeps_its_issue_open(fake_github: FakeGitHub, client: GitHubClient) -> None:
    repo = fake_github.repository
    sync_nightly_issues(client, repo, [failing("matmul")])
    outcome = sync_nightly_issues(client, repo, [NightlyOp("matmul", OpStatus.SKIPPED)])
    assert outcome[0].action is IssueAction.UNCHANGED and outcome[0].number is not None
    assert [i["state"] for i in fake_github.issues()] == ["open"]


def test_one_issue_per_op_and_a_recurrence_opens_a_new_one(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    repo = fake_github.repository
    sync_nightly_issues(client, repo, [failing("a"), failing("b")])
    sync_nightly_issues(client, repo, [failing("a"), NightlyOp("b", OpStatus.PASSED)])
    sync_nightly_issues(client, repo, [failing("a"), failing("b")])
    states = sorted((i["title"], i["state"]) for i in fake_github.issues())
    assert states == [
        ("gpuemu-ci nightly: `a` fails", "open"),
        ("gpuemu-ci nightly: `b` fails", "closed"),
        ("gpuemu-ci nightly: `b` fails", "open"),
    ]


def test_pull_requests_and_unmarked_issues_are_left_alone(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    pr = fake_github.add_pull()
    human = fake_github.add_issue("softmax is slow", "not a gpuemu issue", [NIGHTLY_LABEL])
    outcomes = sync_nightly_issues(client, fake_github.repository, [NightlyOp("softmax", OpStatus.PASSED)])
    assert outcomes[0].action is IssueAction.UNCHANGED
    assert fake_github.state.issues[human]["state"] == "open"
    assert fake_github.state.issues[pr]["state"] == "open"


def test_unchanged_body_is_not_rewritten(fake_github: FakeGitHub, client: GitHubClient) -> None:
    repo = fake_github.repository
    sync_nightly_issues(client, repo, [failing("softmax")], run_url=RUN_1)
    outcome = sync_nightly_issues(client, repo, [failing("softmax")], run_url=RUN_1)
    assert outcome[0].action is IssueAction.UNCHANGED
    assert fake_github.api_calls("PATCH") == []


def test_create_that_landed_despite_a_502_is_not_opened_twice(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    fake_github.fail("POST", r"/issues$", Failure.applied_then_server_error(502))
    outcome = sync_nightly_issues(client, fake_github.repository, [failing("softmax")])
    assert outcome[0].action is IssueAction.OPENED and outcome[0].number is not None
    assert len(fake_github.issues()) == 1


def test_without_issues_permission_every_outcome_is_a_warning(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    fake_github.read_only = True
    outcomes = sync_nightly_issues(
        client, fake_github.repository, [failing("a"), NightlyOp("b", OpStatus.SKIPPED)]
    )
    assert outcomes[0].action is IssueAction.FAILED
    assert outcomes[0].warning is not None and "Resource not accessible by integration" in outcomes[0].warning
    assert outcomes[1].action is IssueAction.UNCHANGED
    assert fake_github.issues() == []


def test_listing_failure_is_reported_per_op(fake_github: FakeGitHub, client: GitHubClient) -> None:
    fake_github.fail("GET", r"/issues$", Failure.server_error(500), times=10)
    outcomes = sync_nightly_issues(client, fake_github.repository, [failing("a")])
    assert outcomes[0].action is IssueAction.FAILED
    assert outcomes[0].warning is not None and "could not list the nightly issues" in outcomes[0].warning


def test_huge_details_are_truncated_to_the_budget() -> None:
    body = issue_body(failing("softmax", "ü" * 50_000), RUN_1)
    assert len(body.encode("utf-8")) <= MAX_ISSUE_BYTES
    assert "truncated" in body and body.endswith("closed when it passes again.")
    assert body.startswith(nightly_marker("softmax") + "\n")


def test_truncate_utf8_never_splits_a_character() -> None:
    text = "€" * 10  # 3 bytes each
    cut = clip_utf8(text, 20, note="…")
    assert len(cut.encode()) <= 20 and cut.endswith("…")
    assert cut == "€" * 5 + "…"  # 15 bytes of whole characters, then the 3-byte note
    assert clip_utf8("short", 20) == "short"


def test_a_flood_of_new_failures_opens_at_most_max_opened(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    ops = [failing(f"op{i}") for i in range(5)]
    outcomes = sync_nightly_issues(client, fake_github.repository, ops, max_opened=3)
    assert [o.action for o in outcomes] == [IssueAction.OPENED] * 3 + [IssueAction.FAILED] * 2
    assert outcomes[4].warning is not None and "over 3 new failures" in outcomes[4].warning
    assert len(fake_github.issues()) == 3
    later = sync_nightly_issues(client, fake_github.repository, ops, run_url=RUN_2, max_opened=3)
    # existing issues are updated without counting against the cap; the two left out open now
    assert [o.action for o in later] == [IssueAction.UPDATED] * 3 + [IssueAction.OPENED] * 2
    assert len(fake_github.issues()) == 5
