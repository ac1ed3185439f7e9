"""One sticky pull request comment per job, updated in place on every run.

The comment's first line is a hidden marker, ``<!-- gpuemu-ci:v1 key=<job> -->``; the key
separates jobs and matrix legs so they do not overwrite each other. ``upsert_comment`` lists the
PR's comments, updates the one carrying the marker, or creates it. It never leaves a second
comment behind: a create that fails with a 5xx or a dropped connection may still have landed, so
the comments are listed again before retrying; and when two legs race, the newer duplicate is
deleted after the update.

Only comments written by the token's own account count (``identity.token_identity``): a marker someone
else posted is neither edited nor allowed to block the Action's comment.

Posting is best effort: every failure (a read-only fork token's 403, a 422, rate limits,
network) comes back as a ``CommentOutcome`` with a warning, never as an exception, because a
missing comment must not fail the gate. Bodies over 60,000 UTF-8 bytes are refused without a
request (GitHub's limit is 65,536 characters; the renderer is expected to truncate first).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gpuemu_ci.github.client import (
    BodyCap,
    GitHubClient,
    GitHubError,
    GitHubForbiddenError,
    GitHubNetworkError,
    GitHubServerError,
)
from gpuemu_ci.github.context import ActionContext
from gpuemu_ci.github.identity import TokenIdentity, token_identity
from gpuemu_ci.render.markdown import comment_marker

MAX_COMMENT_BYTES = 60_000
# 100 comments a page, each up to 65,536 characters (up to 4 UTF-8 bytes each) with its metadata; pulls alike.
COMMENTS_PAGE = BodyCap(32 << 20, "a page of the pull request's comments")
PULLS_PAGE = BodyCap(32 << 20, "a page of the repository's pull requests")
_MARKER_NEUTRAL = "<!-- gpuemu-ci (quoted):"
_ATTEMPTS = 3

log = logging.getLogger(__name__)


class CommentAction(Enum):
    """What ``upsert_comment`` did."""

    CREATED = "created"
    UPDATED = "updated"
    FAILED = "failed"


@dataclass(frozen=True)
class CommentOutcome:
    """The result of posting; ``url`` is the comment's page (for the ``comment_url`` output)."""

    action: CommentAction
    url: str | None = None
    comment_id: int | None = None
    warning: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the comment was posted, updated or deliberately left alone; False only when posting it
        failed."""
        return self.action is not CommentAction.FAILED


def compose_body(body: str, key: str) -> str:
    """The text actually posted: the marker line, then ``body`` with any forged marker defused."""
    return f"{comment_marker(key)}\n{body.replace('<!-- gpuemu-ci:', _MARKER_NEUTRAL)}"


def upsert_comment(
    client: GitHubClient,
    repo: str,
    pr: int,
    body: str,
    key: str,
    *,
    author: TokenIdentity | None = None,
) -> CommentOutcome:
    """Create or update the single comment of job ``key`` on pull request ``pr`` of ``repo``.

    Only comments by ``author`` (default: the token's own account, asked of GitHub) are candidates.
    Never raises for API failures.
    """
    if not isinstance(pr, int) or isinstance(pr, bool) or pr < 1:
        return CommentOutcome(CommentAction.FAILED, warning=f"no pull request to comment on (got {pr!r})")
    text = compose_body(body, key)
    size = len(text.encode("utf-8"))
    if size > MAX_COMMENT_BYTES:
        return CommentOutcome(
            CommentAction.FAILED,
            warning=(
                f"the PR comment is {size:,} bytes, over the {MAX_COMMENT_BYTES:,}-byte budget "
                "(GitHub refuses more than 65,536 characters); it was not posted"
            ),
        )
    marker = comment_marker(key)
    base = f"/repos/{repo}/issues"
    try:
        author = author or token_identity(client)
    except GitHubError as exc:
        return CommentOutcome(CommentAction.FAILED, warning=f"could not post the PR comment: {exc.message}")
    if author is None:
        return CommentOutcome(
            CommentAction.FAILED,
            warning=(
                "could not find out which account the github_token belongs to (GET /user and GraphQL viewer "
                "both failed), so the Action's own comment cannot be told from a copy of its marker; no "
                "comment was posted"
            ),
        )
    try:
        for _ in range(_ATTEMPTS):
            existing = _find(client, base, pr, marker, author)
            if existing:
                keep = existing[0]
                updated = client.patch_json(f"{base}/comments/{keep['id']}", {"body": text})
                _delete_duplicates(client, base, keep, existing[1:])
                return _outcome(CommentAction.UPDATED, updated)
            try:
                created = client.post_json(f"{base}/{pr}/comments", {"body": text})
            except (GitHubServerError, GitHubNetworkError) as exc:
                # The comment may exist now; look again rather than post twice.
                log.warning("creating the PR comment failed (%s); checking whether it landed", exc.message)
                continue
            return _settle_race(client, base, pr, marker, author, created, text)
        return CommentOutcome(
            CommentAction.FAILED, warning="could not post the PR comment: GitHub kept failing"
        )
    except GitHubForbiddenError as exc:
        return CommentOutcome(
            CommentAction.FAILED,
            warning=(
                f"could not post the PR comment: {exc.api_message or exc.message}. The token needs "
                "`pull-requests: write`; pull requests from forks only get a read-only token, so use the "
                "gpuemu-fork-comment workflow (workflow_run) to comment on them. The results are in the "
                "step summary and the uploaded report."
            ),
        )
    except GitHubError as exc:
        return CommentOutcome(CommentAction.FAILED, warning=f"could not post the PR comment: {exc.message}")


def resolve_pull_request(client: GitHubClient, ctx: ActionContext) -> int | None:
    """The PR a ``workflow_run`` event is about, from trusted data only.

    GitHub fills ``workflow_run.pull_requests`` for same-repository PRs but leaves it empty for
    forks; then the open PR whose head is ``<fork owner>:<branch>`` at the run's head SHA is
    looked up. Returns None when there is none. Raises ``GitHubError`` if the lookup fails.
    """
    if ctx.pr_number is not None:
        return ctx.pr_number
    run = ctx.triggering_run
    if run is None or not run.head_repository or not run.head_branch or not run.head_sha:
        return None
    head = f"{run.head_repository.split('/')[0]}:{run.head_branch}"
    pulls = client.paginate(
        f"/repos/{ctx.repository}/pulls", {"head": head, "state": "open"}, max_pages=3, cap=PULLS_PAGE
    )
    for pull in pulls:
        if not isinstance(pull, dict):
            continue
        head_field = pull.get("head")
        head_obj: Mapping[str, Any] = head_field if isinstance(head_field, dict) else {}
        number = pull.get("number")
        if head_obj.get("sha") == run.head_sha and isinstance(number, int):
            return number
    return None


def _find(
    client: GitHubClient, base: str, pr: int, marker: str, author: TokenIdentity
) -> list[Mapping[str, Any]]:
    """Comments of this job by the token's own account, the one to keep first."""
    matches = []
    for comment in client.paginate(f"{base}/{pr}/comments", cap=COMMENTS_PAGE):
        if not isinstance(comment, dict) or not isinstance(comment.get("id"), int):
            continue
        body = comment.get("body")
        if isinstance(body, str) and body.split("\n", 1)[0].strip() == marker and author.authored(comment):
            matches.append(comment)
    return sorted(matches, key=lambda c: (str(c.get("created_at", "")), c["id"]))


def _settle_race(
    client: GitHubClient,
    base: str,
    pr: int,
    marker: str,
    author: TokenIdentity,
    created: Mapping[str, Any],
    text: str,
) -> CommentOutcome:
    """After a create, keep the oldest comment of this job if a concurrent run made one too."""
    try:
        existing = _find(client, base, pr, marker, author)
    except GitHubError:
        return _outcome(CommentAction.CREATED, created)
    if not existing or existing[0].get("id") == created.get("id"):
        return _outcome(CommentAction.CREATED, created)
    keep = existing[0]
    updated = client.patch_json(f"{base}/comments/{keep['id']}", {"body": text})
    _delete_duplicates(client, base, keep, existing[1:])
    return _outcome(CommentAction.UPDATED, updated)


def _delete_duplicates(
    client: GitHubClient, base: str, keep: Mapping[str, Any], duplicates: list[Mapping[str, Any]]
) -> None:
    # `_find` returns only the token's own comments: someone else's comment that quotes the marker stays.
    for comment in duplicates:
        try:
            client.delete(f"{base}/comments/{comment['id']}")
        except GitHubError as exc:  # cosmetic: the kept comment is already current
            log.warning("could not delete duplicate comment %s: %s", comment["id"], exc.message)


def _outcome(action: CommentAction, comment: Any) -> CommentOutcome:
    data = comment if isinstance(comment, dict) else {}
    url = data.get("html_url")
    cid = data.get("id")
    return CommentOutcome(
        action, url if isinstance(url, str) else None, cid if isinstance(cid, int) else None
    )
