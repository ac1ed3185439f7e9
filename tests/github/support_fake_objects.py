"""JSON objects shaped like GitHub's, for the fake API (every required field of the schema).

Each builder returns what the real API returns for that schema in
``tests/fixtures/github-openapi/api.github.com.subset.json``; the tests validate every response
the fake sends against it, so a builder that drifts from GitHub's contract fails loudly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOT_LOGIN = "github-actions[bot]"
BOT_ID = 41898282  # the github-actions[bot] user id on github.com


@dataclass(frozen=True)
class Site:
    """Where the fake lives: its API root and the web root used in ``html_url``s."""

    api: str
    web: str = "https://github.example"


def user(site: Site, login: str, uid: int, kind: str = "User") -> dict[str, Any]:
    """A ``simple-user``."""
    u = f"{site.api}/users/{login}"
    return {
        "login": login,
        "id": uid,
        "node_id": f"U_{uid}",
        "avatar_url": f"{site.web}/avatars/{uid}",
        "gravatar_id": "",
        "url": u,
        "html_url": f"{site.web}/{login}",
        "followers_url": f"{u}/followers",
        "following_url": f"{u}/following{{/other_user}}",
        "gists_url": f"{u}/gists{{/gist_id}}",
        "starred_url": f"{u}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{u}/subscriptions",
        "organizations_url": f"{u}/orgs",
        "repos_url": f"{u}/repos",
        "events_url": f"{u}/events{{/privacy}}",
        "received_events_url": f"{u}/received_events",
        "type": kind,
        "site_admin": False,
    }


def bot(site: Site) -> dict[str, Any]:
    return user(site, BOT_LOGIN, BOT_ID, "Bot")


def private_user(site: Site, login: str, uid: int) -> dict[str, Any]:
    """A ``private-user``: what ``GET /user`` answers for a personal access token."""
    return {
        **user(site, login, uid),
        "user_view_type": "private",
        "name": None,
        "company": None,
        "blog": "",
        "location": None,
        "email": None,
        "hireable": None,
        "bio": None,
        "public_repos": 3,
        "public_gists": 0,
        "followers": 1,
        "following": 1,
        "created_at": "2020-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "private_gists": 0,
        "total_private_repos": 0,
        "owned_private_repos": 0,
        "disk_usage": 10,
        "collaborators": 0,
        "two_factor_authentication": True,
    }


_REPO_URL_TEMPLATES = {
    "archive_url": "/{archive_format}{/ref}",
    "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}",
    "commits_url": "/commits{/sha}",
    "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}",
    "contributors_url": "/contributors",
    "deployments_url": "/deployments",
    "downloads_url": "/downloads",
    "events_url": "/events",
    "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}",
    "git_tags_url": "/git/tags{/sha}",
    "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}",
    "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}",
    "keys_url": "/keys{/key_id}",
    "labels_url": "/labels{/name}",
    "languages_url": "/languages",
    "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers",
    "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers",
    "subscription_url": "/subscription",
    "tags_url": "/tags",
    "teams_url": "/teams",
    "trees_url": "/git/trees{/sha}",
}


def minimal_repository(site: Site, full_name: str, repo_id: int, *, fork: bool = False) -> dict[str, Any]:
    """A ``minimal-repository``."""
    owner, name = full_name.split("/")
    url = f"{site.api}/repos/{full_name}"
    repo: dict[str, Any] = {
        "id": repo_id,
        "node_id": f"R_{repo_id}",
        "name": name,
        "full_name": full_name,
        "owner": user(site, owner, repo_id + 7, "Organization"),
        "private": False,
        "html_url": f"{site.web}/{full_name}",
        "description": None,
        "fork": fork,
        "url": url,
    }
    repo.update({key: url + suffix for key, suffix in _REPO_URL_TEMPLATES.items()})
    return repo


def repository(site: Site, full_name: str, repo_id: int, *, fork: bool = False) -> dict[str, Any]:
    """A full ``repository`` (pull request heads and bases carry one)."""
    repo = minimal_repository(site, full_name, repo_id, fork=fork)
    repo.update(
        {
            "clone_url": f"{site.web}/{full_name}.git",
            "git_url": f"git://github.example/{full_name}.git",
            "ssh_url": f"git@github.example:{full_name}.git",
            "svn_url": f"{site.web}/{full_name}",
            "mirror_url": None,
            "homepage": None,
            "language": "Python",
            "license": None,
            "default_branch": "main",
            "forks": 0,
            "forks_count": 0,
            "stargazers_count": 0,
            "watchers": 0,
            "watchers_count": 0,
            "open_issues": 0,
            "open_issues_count": 0,
            "size": 100,
            "has_downloads": True,
            "has_issues": True,
            "has_projects": True,
            "has_wiki": True,
            "has_pages": False,
            "archived": False,
            "disabled": False,
            "pushed_at": "2026-01-01T00:00:00Z",
            "created_at": "2025-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    return repo


def workflow_run(
    site: Site,
    *,
    run_id: int,
    event: str,
    head_branch: str,
    head_sha: str,
    repo: dict[str, Any],
    head_repo: dict[str, Any],
    created_at: str,
    conclusion: str | None = "success",
    run_attempt: int = 1,
) -> dict[str, Any]:
    """A ``workflow-run``."""
    url = f"{repo['url']}/actions/runs/{run_id}"
    return {
        "id": run_id,
        "name": "gpuemu-baseline",
        "node_id": f"WFR_{run_id}",
        "check_suite_id": run_id * 10,
        "head_branch": head_branch,
        "head_sha": head_sha,
        "path": ".github/workflows/gpuemu-baseline.yml",
        "display_title": f"run {run_id}",
        "run_number": run_id % 1000,
        "run_attempt": run_attempt,
        "event": event,
        "status": "completed" if conclusion else "in_progress",
        "conclusion": conclusion,
        "workflow_id": 161335,
        "url": url,
        "html_url": f"{repo['html_url']}/actions/runs/{run_id}",
        "pull_requests": [],
        "created_at": created_at,
        "updated_at": created_at,
        "run_started_at": created_at,
        "jobs_url": f"{url}/jobs",
        "logs_url": f"{url}/logs",
        "check_suite_url": f"{repo['url']}/check-suites/{run_id * 10}",
        "artifacts_url": f"{url}/artifacts",
        "cancel_url": f"{url}/cancel",
        "rerun_url": f"{url}/rerun",
        "workflow_url": f"{repo['url']}/actions/workflows/161335",
        "head_commit": {
            "id": head_sha,
            "tree_id": head_sha[::-1],
            "message": "a commit",
            "timestamp": created_at,
            "author": {"name": "Octo Cat", "email": "octocat@example.com"},
            "committer": {"name": "Octo Cat", "email": "octocat@example.com"},
        },
        "repository": repo,
        "head_repository": head_repo,
        "head_repository_id": head_repo["id"],
    }


def artifact(
    *,
    api_repo_url: str,
    artifact_id: int,
    name: str,
    size: int,
    expired: bool,
    created_at: str,
    expires_at: str,
    run: dict[str, Any],
    digest: str | None,
) -> dict[str, Any]:
    """An ``artifact``."""
    url = f"{api_repo_url}/actions/artifacts/{artifact_id}"
    return {
        "id": artifact_id,
        "node_id": f"MDg6QXJ0aWZhY3Q{artifact_id}",
        "name": name,
        "size_in_bytes": size,
        "url": url,
        "archive_download_url": f"{url}/zip",
        "expired": expired,
        "created_at": created_at,
        "expires_at": expires_at,
        "updated_at": created_at,
        "digest": digest,
        "workflow_run": {
            "id": run["id"],
            "repository_id": run["repository"]["id"],
            "head_repository_id": run["head_repository"]["id"],
            "head_branch": run["head_branch"],
            "head_sha": run["head_sha"],
        },
    }


def issue_comment(
    site: Site,
    *,
    repo_full_name: str,
    comment_id: int,
    issue_number: int,
    body: str,
    author: dict[str, Any],
    created_at: str,
    updated_at: str,
) -> dict[str, Any]:
    """An ``issue-comment``."""
    api_repo = f"{site.api}/repos/{repo_full_name}"
    return {
        "id": comment_id,
        "node_id": f"IC_{comment_id}",
        "url": f"{api_repo}/issues/comments/{comment_id}",
        "html_url": f"{site.web}/{repo_full_name}/pull/{issue_number}#issuecomment-{comment_id}",
        "body": body,
        "user": author,
        "created_at": created_at,
        "updated_at": updated_at,
        "issue_url": f"{api_repo}/issues/{issue_number}",
        "author_association": "NONE",
    }


def label(site: Site, repo_full_name: str, name: str, label_id: int) -> dict[str, Any]:
    return {
        "id": label_id,
        "node_id": f"LA_{label_id}",
        "url": f"{site.api}/repos/{repo_full_name}/labels/{name}",
        "name": name,
        "description": None,
        "color": "d73a4a",
        "default": False,
    }


def issue(
    site: Site,
    *,
    repo_full_name: str,
    issue_id: int,
    number: int,
    title: str,
    body: str | None,
    state: str,
    state_reason: str | None,
    labels: list[dict[str, Any]],
    author: dict[str, Any],
    comments: int,
    created_at: str,
    updated_at: str,
    closed_at: str | None,
) -> dict[str, Any]:
    """An ``issue``."""
    url = f"{site.api}/repos/{repo_full_name}/issues/{number}"
    return {
        "id": issue_id,
        "node_id": f"I_{issue_id}",
        "url": url,
        "repository_url": f"{site.api}/repos/{repo_full_name}",
        "labels_url": f"{url}/labels{{/name}}",
        "comments_url": f"{url}/comments",
        "events_url": f"{url}/events",
        "html_url": f"{site.web}/{repo_full_name}/issues/{number}",
        "number": number,
        "state": state,
        "state_reason": state_reason,
        "title": title,
        "body": body,
        "user": author,
        "labels": labels,
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "comments": comments,
        "closed_at": closed_at,
        "created_at": created_at,
        "updated_at": updated_at,
        "author_association": "NONE",
    }


def pull_request_simple(
    site: Site,
    *,
    number: int,
    pr_id: int,
    title: str,
    head: dict[str, Any],
    base: dict[str, Any],
    author: dict[str, Any],
    created_at: str,
) -> dict[str, Any]:
    """A ``pull-request-simple``; ``head``/``base`` are ``{label, ref, sha, repo, user}``."""
    repo_full = base["repo"]["full_name"]
    url = f"{site.api}/repos/{repo_full}/pulls/{number}"
    issue_url = f"{site.api}/repos/{repo_full}/issues/{number}"
    html = f"{site.web}/{repo_full}/pull/{number}"
    links = {
        "self": url,
        "html": html,
        "issue": issue_url,
        "comments": f"{issue_url}/comments",
        "review_comments": f"{url}/comments",
        "review_comment": f"{site.api}/repos/{repo_full}/pulls/comments{{/number}}",
        "commits": f"{url}/commits",
        "statuses": f"{site.api}/repos/{repo_full}/statuses/{head['sha']}",
    }
    return {
        "url": url,
        "id": pr_id,
        "node_id": f"PR_{pr_id}",
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "issue_url": issue_url,
        "commits_url": links["commits"],
        "review_comments_url": links["review_comments"],
        "review_comment_url": links["review_comment"],
        "comments_url": links["comments"],
        "statuses_url": links["statuses"],
        "number": number,
        "state": "open",
        "locked": False,
        "title": title,
        "user": author,
        "body": None,
        "labels": [],
        "milestone": None,
        "created_at": created_at,
        "updated_at": created_at,
        "closed_at": None,
        "merged_at": None,
        "merge_commit_sha": None,
        "assignee": None,
        "head": head,
        "base": base,
        "_links": {key: {"href": href} for key, href in links.items()},
        "author_association": "CONTRIBUTOR",
        "auto_merge": None,
    }


def basic_error(message: str, status: int) -> dict[str, Any]:
    """GitHub's generic error body (``basic-error``)."""
    return {
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": str(status),
    }


def validation_error(resource: str, field: str, message: str) -> dict[str, Any]:
    """A 422 body (``validation-error``)."""
    return {
        "message": "Validation Failed",
        "errors": [{"resource": resource, "code": "custom", "field": field, "message": message}],
        "documentation_url": "https://docs.github.com/rest",
    }
