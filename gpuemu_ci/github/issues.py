"""Nightly bookkeeping: one open issue per failing op, closed when the op passes again.

Each issue carries the label ``gpuemu-nightly`` and the hidden first line
``<!-- gpuemu-ci:nightly op=<name> -->``. ``sync_nightly_issues`` lists the open issues with the
label once, then for every op of the nightly run:

- failed: update the op's open issue with the latest details (seed, replay command, run link),
  or open one;
- passed: comment with the passing run and close the issue as completed;
- not run (skipped, no GPU, timed out before it): leave the issue alone, since nothing that did
  not run counts as fixed.

A failure that recurs after its issue was closed opens a new issue. Like comments, this is best
effort: API failures come back as ``IssueOutcome``s with a warning and never raise. The token
needs ``issues: write``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gpuemu_ci.github.client import (
    BodyCap,
    GitHubClient,
    GitHubError,
    GitHubNetworkError,
    GitHubServerError,
)
from gpuemu_ci.render.markdown import comment_key
from gpuemu_ci.render.text import clip_utf8
from gpuemu_ci.results.model import OpStatus

NIGHTLY_LABEL = "gpuemu-nightly"
MAX_ISSUE_BYTES = 60_000
_ATTEMPTS = 3
_TRUNCATED = "\n\n… (truncated: the full details are in the run's report)"
# 100 issues a page, each body up to 65,536 characters (up to 4 UTF-8 bytes each) with its metadata.
ISSUES_PAGE = BodyCap(32 << 20, "a page of the repository's issues")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NightlyOp:
    """One op of the nightly run; ``details`` is the Markdown shown in its issue when it fails."""

    name: str
    status: OpStatus  # FAILED opens (or updates) its issue, PASSED closes it; skipped or errored leave it
    details: str = ""


class IssueAction(Enum):
    """What ``sync_nightly_issues`` did for one op."""

    OPENED = "opened"
    UPDATED = "updated"
    CLOSED = "closed"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@dataclass(frozen=True)
class IssueOutcome:
    """What happened to the issue of one op."""

    op: str
    action: IssueAction
    number: int | None = None
    url: str | None = None
    warning: str | None = None


def nightly_marker(op: str) -> str:
    """The hidden first line that identifies the issue of ``op``."""
    return f"<!-- gpuemu-ci:nightly op={comment_key(op)} -->"


def issue_title(op: str) -> str:
    """The title of the issue of ``op``."""
    return f"gpuemu-ci nightly: `{op[:150]}` fails"


def issue_body(op: NightlyOp, run_url: str | None) -> str:
    """The issue text: marker, the op's details, the run link; at most ``MAX_ISSUE_BYTES``."""
    footer = "\n\n---\n"
    if run_url:
        footer += f"Latest failing nightly run: {run_url}\n\n"
    footer += f"Managed by gpuemu-ci: updated while `{op.name}` keeps failing, closed when it passes again."
    head = nightly_marker(op.name) + "\n"
    budget = MAX_ISSUE_BYTES - len(head.encode()) - len(footer.encode())
    return head + clip_utf8(op.details or f"`{op.name}` failed.", budget, _TRUNCATED) + footer


def sync_nightly_issues(
    client: GitHubClient,
    repo: str,
    ops: Sequence[NightlyOp],
    *,
    run_url: str | None = None,
    label: str = NIGHTLY_LABEL,
    max_opened: int = 10,
) -> list[IssueOutcome]:
    """Open, update or close one issue per op of ``repo``; one outcome per op, in order.

    At most ``max_opened`` new issues are opened per run: when many ops start failing at once
    the cause is usually shared (a driver, a toolchain), and a flood of issues helps nobody.
    """
    try:
        open_issues = _open_issues(client, repo, label)
    except GitHubError as exc:
        warning = f"could not list the nightly issues: {exc.message}"
        return [
            IssueOutcome(
                op.name,
                IssueAction.UNCHANGED if not _decided(op) else IssueAction.FAILED,
                warning=None if not _decided(op) else warning,
            )
            for op in ops
        ]
    outcomes = []
    opened = 0
    for op in ops:
        issue = open_issues.get(nightly_marker(op.name))
        if op.status is OpStatus.FAILED and issue is None:
            if opened >= max_opened:
                warning = f"no issue opened for {op.name}: over {max_opened} new failures in one run"
                outcomes.append(IssueOutcome(op.name, IssueAction.FAILED, warning=warning))
                continue
            opened += 1
        try:
            outcomes.append(_sync_one(client, repo, op, issue, run_url, label))
        except GitHubError as exc:
            outcomes.append(
                IssueOutcome(
                    op.name, IssueAction.FAILED, warning=f"nightly issue for {op.name}: {exc.message}"
                )
            )
    return outcomes


def _sync_one(
    client: GitHubClient,
    repo: str,
    op: NightlyOp,
    issue: Mapping[str, Any] | None,
    run_url: str | None,
    label: str,
) -> IssueOutcome:
    if not _decided(op) or (op.status is OpStatus.PASSED and issue is None):
        return _outcome(op.name, IssueAction.UNCHANGED, issue)
    if op.status is OpStatus.PASSED:
        assert issue is not None
        where = f"in the nightly run {run_url}" if run_url else "in the latest nightly run"
        client.post_json(
            f"/repos/{repo}/issues/{issue['number']}/comments",
            {"body": f"`{op.name}` passes again {where}. Closing."},
        )
        closed = client.patch_json(
            f"/repos/{repo}/issues/{issue['number']}", {"state": "closed", "state_reason": "completed"}
        )
        return _outcome(op.name, IssueAction.CLOSED, closed)
    body = issue_body(op, run_url)
    if issue is not None:
        if issue.get("body") == body:
            return _outcome(op.name, IssueAction.UNCHANGED, issue)
        updated = client.patch_json(f"/repos/{repo}/issues/{issue['number']}", {"body": body})
        return _outcome(op.name, IssueAction.UPDATED, updated)
    return _open(client, repo, op, body, label)


def _open(client: GitHubClient, repo: str, op: NightlyOp, body: str, label: str) -> IssueOutcome:
    request = {"title": issue_title(op.name), "body": body, "labels": [label]}
    for _ in range(_ATTEMPTS):
        try:
            created = client.post_json(f"/repos/{repo}/issues", request)
        except (GitHubServerError, GitHubNetworkError) as exc:
            # The issue may exist now; look before opening a second one.
            log.warning(
                "opening the issue for %s failed (%s); checking whether it landed", op.name, exc.message
            )
            landed = _open_issues(client, repo, label).get(nightly_marker(op.name))
            if landed is not None:
                return _outcome(op.name, IssueAction.OPENED, landed)
            continue
        return _outcome(op.name, IssueAction.OPENED, created)
    return IssueOutcome(op.name, IssueAction.FAILED, warning=f"could not open the issue for {op.name}")


def _open_issues(client: GitHubClient, repo: str, label: str) -> dict[str, Mapping[str, Any]]:
    """Open, labelled, non-PR issues by marker line (the oldest wins if there are copies)."""
    found: dict[str, Mapping[str, Any]] = {}
    items = client.paginate(
        f"/repos/{repo}/issues",
        {"state": "open", "labels": label, "sort": "created", "direction": "asc"},
        cap=ISSUES_PAGE,
    )
    for item in items:
        if not isinstance(item, dict) or "pull_request" in item or not isinstance(item.get("number"), int):
            continue
        body = item.get("body")
        if isinstance(body, str):
            found.setdefault(body.split("\n", 1)[0].strip(), item)
    return found


def _outcome(op: str, action: IssueAction, issue: Mapping[str, Any] | None) -> IssueOutcome:
    if issue is None:
        return IssueOutcome(op, action)
    number = issue.get("number")
    url = issue.get("html_url")
    return IssueOutcome(
        op, action, number if isinstance(number, int) else None, url if isinstance(url, str) else None
    )


def _decided(op: NightlyOp) -> bool:
    """Whether the run judged the op (an op that was skipped or errored says nothing about its issue)."""
    return op.status in (OpStatus.FAILED, OpStatus.PASSED)
