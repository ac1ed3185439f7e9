"""Request handlers of the fake GitHub API (see ``fake_api.py``); each returns (status, body, headers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tests.github import support_fake_objects as obj
from tests.github.support_fake_http import Recorded, Reply

if TYPE_CHECKING:
    from tests.github.support_fake_api import FakeGitHub

COMMENT_LIMIT = 65_536


def _q(request: Recorded, name: str, default: str | None = None) -> str | None:
    values = request.query.get(name)
    return values[0] if values else default


def _page(fake: FakeGitHub, request: Recorded, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
    per_page = max(1, min(100, int(_q(request, "per_page", "30") or 30)))
    page = max(1, int(_q(request, "page", "1") or 1))
    last = max(1, -(-len(items) // per_page))
    query = {k: v[0] for k, v in request.query.items() if k != "page"}
    link = fake.link_header(request.path, query, page, last)
    return items[(page - 1) * per_page : page * per_page], ({"Link": link} if link else {})


def _json_body(request: Recorded) -> dict[str, Any] | None:
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _not_found() -> Reply:
    return 404, obj.basic_error("Not Found", 404), {}


def _bad_body(resource: str, field: str, message: str) -> Reply:
    return 422, obj.validation_error(resource, field, message), {}


def _newest_first(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda i: (i["created_at"], i["id"]), reverse=True)


# -- actions ---------------------------------------------------------------------------------


def list_artifacts(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    name = _q(request, "name")
    items = [a for a in fake.state.artifacts.values() if name is None or a["name"] == name]
    page, headers = _page(fake, request, _newest_first(items))
    return 200, {"total_count": len(items), "artifacts": page}, headers


def download_artifact(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    artifact = fake.state.artifacts.get(int(params["artifact_id"]))
    if artifact is None or params["archive_format"] != "zip":
        return _not_found()
    if artifact["expired"]:
        return 410, obj.basic_error("Artifact has expired", 410), {}
    return 302, None, {"Location": fake.blob_location(artifact["id"])}


def list_runs(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    filters = {key: _q(request, key) for key in ("branch", "event", "head_sha")}
    status = _q(request, "status")
    items = [
        r
        for r in fake.state.runs.values()
        if all(
            value is None or r[key if key != "branch" else "head_branch"] == value
            for key, value in filters.items()
        )
        and (status is None or status in (r["status"], r["conclusion"]))
    ]
    page, headers = _page(fake, request, _newest_first(items))
    return 200, {"total_count": len(items), "workflow_runs": page}, headers


def get_run(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    run = fake.state.runs.get(int(params["run_id"]))
    return (200, run, {}) if run is not None else _not_found()


def list_run_artifacts(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    run_id = int(params["run_id"])
    if run_id not in fake.state.runs:
        return _not_found()
    name = _q(request, "name")
    items = [
        a
        for a in fake.state.artifacts.values()
        if a["workflow_run"]["id"] == run_id and (name is None or a["name"] == name)
    ]
    page, headers = _page(fake, request, _newest_first(items))
    return 200, {"total_count": len(items), "artifacts": page}, headers


# -- issue comments --------------------------------------------------------------------------


def list_comments(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    number = int(params["issue_number"])
    if number not in fake.state.issues:
        return _not_found()
    page, headers = _page(fake, request, fake.comments(number))
    return 200, page, headers


def create_comment(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    number = int(params["issue_number"])
    if number not in fake.state.issues:
        return _not_found()
    body = _json_body(request)
    if body is None or not isinstance(body.get("body"), str):
        return _bad_body("IssueComment", "body", "body is missing")
    if len(body["body"]) > COMMENT_LIMIT:
        return _bad_body("IssueComment", "body", f"Body is too long (maximum is {COMMENT_LIMIT} characters)")
    comment = fake._create_comment(number, body["body"], fake.viewer())
    return 201, comment, {"Location": comment["url"]}


def update_comment(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    comment = fake.state.comments.get(int(params["comment_id"]))
    if comment is None:
        return _not_found()
    body = _json_body(request)
    if body is None or not isinstance(body.get("body"), str):
        return _bad_body("IssueComment", "body", "body is missing")
    if len(body["body"]) > COMMENT_LIMIT:
        return _bad_body("IssueComment", "body", f"Body is too long (maximum is {COMMENT_LIMIT} characters)")
    comment["body"] = body["body"]
    comment["updated_at"] = fake._now()
    return 200, comment, {}


def delete_comment(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    comment = fake.state.comments.pop(int(params["comment_id"]), None)
    if comment is None:
        return _not_found()
    number = int(comment["issue_url"].rsplit("/", 1)[1])
    fake.state.issues[number]["comments"] -= 1
    return 204, None, {}


# -- issues and pulls ------------------------------------------------------------------------


def list_issues(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    state = _q(request, "state", "open")
    wanted = {name for name in (_q(request, "labels") or "").split(",") if name}
    items = [
        i
        for i in fake.state.issues.values()
        if (state == "all" or i["state"] == state) and wanted <= {label["name"] for label in i["labels"]}
    ]
    ordered = _newest_first(items)
    if _q(request, "direction") == "asc":
        ordered.reverse()
    page, headers = _page(fake, request, ordered)
    return 200, page, headers


def create_issue(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    body = _json_body(request)
    if body is None or not isinstance(body.get("title"), str) or not body["title"]:
        return _bad_body("Issue", "title", "title is missing")
    text = body.get("body")
    if isinstance(text, str) and len(text) > COMMENT_LIMIT:
        return _bad_body("Issue", "body", f"Body is too long (maximum is {COMMENT_LIMIT} characters)")
    labels = [name for name in body.get("labels") or [] if isinstance(name, str)]
    number = fake._next_number()
    issue = fake._issue_record(number, body["title"], text, labels, obj.bot(fake.site))
    fake.state.issues[number] = issue
    return 201, issue, {"Location": issue["url"]}


def update_issue(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    issue = fake.state.issues.get(int(params["issue_number"]))
    if issue is None:
        return _not_found()
    body = _json_body(request)
    if body is None:
        return _bad_body("Issue", "body", "the request body is not a JSON object")
    if isinstance(body.get("body"), str) and len(body["body"]) > COMMENT_LIMIT:
        return _bad_body("Issue", "body", f"Body is too long (maximum is {COMMENT_LIMIT} characters)")
    for key in ("title", "body"):
        if isinstance(body.get(key), str):
            issue[key] = body[key]
    if body.get("state") in ("open", "closed"):
        issue["state"] = body["state"]
        closed = body["state"] == "closed"
        issue["closed_at"] = fake._now() if closed else None
        issue["state_reason"] = body.get("state_reason") or ("completed" if closed else "reopened")
    issue["updated_at"] = fake._now()
    return 200, issue, {}


def list_pulls(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    state = _q(request, "state", "open")
    head = _q(request, "head")
    items = [
        p
        for p in fake.state.pulls.values()
        if (state == "all" or p["state"] == state) and (head is None or p["head"]["label"] == head)
    ]
    page, headers = _page(fake, request, _newest_first(items))
    return 200, page, headers


# (method, path regex after /repos/{owner}/{repo}, OpenAPI path template suffix, handler)
# -- the token's own account -------------------------------------------------------------------


def get_authenticated_user(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    if fake.token_kind == "personal":
        return 200, obj.private_user(fake.site, fake.viewer()["login"], fake.viewer()["id"]), {}
    # Installation tokens (GITHUB_TOKEN, GitHub Apps) are refused, as GitHub does.
    return 403, obj.basic_error("Resource not accessible by integration", 403), {}


def graphql(fake: FakeGitHub, params: dict[str, str], request: Recorded) -> Reply:
    """Only the `viewer` query gpuemu-ci sends; GraphQL answers 200 with `errors` for anything else."""
    body = _json_body(request) or {}
    query = body.get("query")
    if not fake.graphql_enabled:
        return 404, obj.basic_error("Not Found", 404), {}
    if not isinstance(query, str) or "viewer" not in query:
        return 200, {"errors": [{"message": "Field is not supported by the fake"}]}, {}
    viewer = fake.viewer()
    login = viewer["login"]
    return (
        200,
        {"data": {"viewer": {"__typename": viewer["type"], "login": login, "databaseId": viewer["id"]}}},
        {},
    )


# Paths outside /repos/{owner}/{repo}: (method, absolute regex, template, handler)
ABSOLUTE_ROUTES: list[tuple[str, str, str, Callable[..., Reply]]] = [
    ("GET", r"/user", "/user", get_authenticated_user),
    ("POST", r"/graphql", "graphql", graphql),
]

ROUTES: list[tuple[str, str, str, Callable[..., Reply]]] = [
    ("GET", r"/actions/artifacts", "/actions/artifacts", list_artifacts),
    (
        "GET",
        r"/actions/artifacts/(?P<artifact_id>\d+)/(?P<archive_format>[^/]+)",
        "/actions/artifacts/{artifact_id}/{archive_format}",
        download_artifact,
    ),
    ("GET", r"/actions/runs", "/actions/runs", list_runs),
    ("GET", r"/actions/runs/(?P<run_id>\d+)", "/actions/runs/{run_id}", get_run),
    (
        "GET",
        r"/actions/runs/(?P<run_id>\d+)/artifacts",
        "/actions/runs/{run_id}/artifacts",
        list_run_artifacts,
    ),
    ("GET", r"/issues", "/issues", list_issues),
    ("POST", r"/issues", "/issues", create_issue),
    ("PATCH", r"/issues/(?P<issue_number>\d+)", "/issues/{issue_number}", update_issue),
    (
        "GET",
        r"/issues/(?P<issue_number>\d+)/comments",
        "/issues/{issue_number}/comments",
        list_comments,
    ),
    (
        "POST",
        r"/issues/(?P<issue_number>\d+)/comments",
        "/issues/{issue_number}/comments",
        create_comment,
    ),
    (
        "PATCH",
        r"/issues/comments/(?P<comment_id>\d+)",
        "/issues/comments/{comment_id}",
        update_comment,
    ),
    (
        "DELETE",
        r"/issues/comments/(?P<comment_id>\d+)",
        "/issues/comments/{comment_id}",
        delete_comment,
    ),
    ("GET", r"/pulls", "/pulls", list_pulls),
]
