"""A fake GitHub REST API: real HTTP servers on 127.0.0.1, in threads, stdlib only.

Two servers, as on github.com: the API, and a "storage" host that the artifact download
redirects to and that must never see the token. Usable in-process (``GitHubClient`` pointed at
``fake.api_url``) and from a subprocess (``GITHUB_API_URL=fake.api_url``).

Served operations (names as in GitHub's OpenAPI description): list artifacts for a repository,
download an artifact (302 or 410), list workflow runs, get a workflow run, list a run's artifacts,
list/create issue comments, update/delete an issue comment, list/create/update issues, list pull
requests. Lists paginate with ``per_page``/``page`` and ``Link`` headers.

Stricter than GitHub on purpose: every API request must carry ``Authorization: Bearer <token>``
and ``X-GitHub-Api-Version``. Failures are injected per request with ``fail(...)``; every
response is recorded in ``responses``, and ``check_responses_against_openapi()`` validates them
against GitHub's published description (the ``fake_github`` fixture does so after every test).

Other test packages import it as ``from tests.github.support_fake_api import FakeGitHub, Failure``.
"""

from __future__ import annotations

import io
import re
import secrets
import threading
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from tests.github import support_fake_objects as obj
from tests.github import support_fake_routes as routes
from tests.github.support_fake_http import LoopbackServer, Recorded, RecordedResponse, Reply, Streamed
from tests.github.support_openapi import contract

API_VERSION = "2022-11-28"
_EPOCH = datetime(2026, 3, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Failure:
    """An injected error response. ``apply_first`` performs the operation, then fails anyway."""

    status: int
    body: dict[str, Any] | Streamed
    headers: tuple[tuple[str, str], ...] = ()
    apply_first: bool = False

    @classmethod
    def huge(cls, body: Streamed) -> Failure:
        """A 200 whose body is streamed (support_fake_http.Streamed): far larger than any real answer."""
        return cls(200, body, (("Content-Type", "application/json; charset=utf-8"),))

    @classmethod
    def server_error(cls, status: int = 500) -> Failure:
        return cls(status, obj.basic_error("Server Error", status))

    @classmethod
    def applied_then_server_error(cls, status: int = 502) -> Failure:
        return cls(status, obj.basic_error("Bad Gateway", status), apply_first=True)

    @classmethod
    def too_many_requests(cls, retry_after: int = 7) -> Failure:
        return cls(429, obj.basic_error("Too many requests", 429), (("Retry-After", str(retry_after)),))

    @classmethod
    def secondary_rate_limit(cls, retry_after: int | None = None) -> Failure:
        message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
        headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
        return cls(403, obj.basic_error(message, 403), headers)

    @classmethod
    def primary_rate_limit(cls, reset_epoch: int) -> Failure:
        headers = (("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", str(reset_epoch)))
        return cls(403, obj.basic_error("API rate limit exceeded for installation.", 403), headers)

    @classmethod
    def gone(cls) -> Failure:
        return cls(410, obj.basic_error("Artifact has expired", 410))

    @classmethod
    def read_only(cls) -> Failure:
        return cls(403, obj.basic_error("Resource not accessible by integration", 403))


class SleepRecorder:
    """An injected ``sleep``: records the waits the client asks for, and does not wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@dataclass
class _Injected:
    method: str
    pattern: re.Pattern[str]
    failure: Failure
    remaining: int


@dataclass
class _State:
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    artifacts: dict[int, dict[str, Any]] = field(default_factory=dict)
    blobs: dict[int, bytes] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)


def make_zip(files: Mapping[str, bytes]) -> bytes:
    """A zip archive holding ``files`` (name -> content), as upload-artifact produces."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


class FakeGitHub:
    """The fake API and storage servers plus their state; use as a context manager."""

    def __init__(
        self,
        repository: str = "octo-org/kernels",
        repository_id: int = 4242,
        token: str = "ghs_fake0123456789",
    ) -> None:
        self.repository = repository
        self.repository_id = repository_id
        self.token = token
        self.read_only = False
        # Whose token it is: "installation" (GITHUB_TOKEN: GET /user refused, GraphQL viewer answers) or
        # "personal" (GET /user answers); the account is github-actions[bot] unless `viewer_login` is set.
        self.token_kind = "installation"
        self.viewer_login: str | None = None
        self.graphql_enabled = True
        self.requests: list[Recorded] = []
        self.storage_requests: list[Recorded] = []
        self.responses: list[RecordedResponse] = []
        self.state = _State()
        self._injected: list[_Injected] = []
        self._lock = threading.RLock()
        self._ids = 1000
        self._ticks = 0
        self._api = LoopbackServer(self._handle_api, on_response=self.responses.append)
        self._storage = LoopbackServer(self._handle_storage)
        self.site = obj.Site(api=self._api.url)
        self.repo = obj.minimal_repository(self.site, repository, repository_id)
        self._routes = self._build_routes()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return self._api.url

    @property
    def storage_url(self) -> str:
        return self._storage.url

    def __enter__(self) -> FakeGitHub:
        self._api.start()
        self._storage.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._api.stop()
        self._storage.stop()

    # -- scenario setup -------------------------------------------------------------------

    def fail(self, method: str, path_regex: str, failure: Failure, times: int = 1) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path_regex`` with ``failure``.

        Paths of the storage host start with ``/blob/``.
        """
        with self._lock:
            self._injected.append(_Injected(method.upper(), re.compile(path_regex), failure, times))

    def add_run(
        self,
        *,
        event: str,
        head_branch: str,
        head_sha: str,
        head_repository: str | None = None,
        conclusion: str | None = "success",
    ) -> dict[str, Any]:
        """A workflow run; ``head_repository`` other than the repository makes it a fork's run."""
        with self._lock:
            run_id = self._next_id()
            head = self.repo
            if head_repository and head_repository != self.repository:
                head = obj.minimal_repository(
                    self.site, head_repository, self.repository_id + run_id, fork=True
                )
            run = obj.workflow_run(
                self.site,
                run_id=run_id,
                event=event,
                head_branch=head_branch,
                head_sha=head_sha,
                repo=self.repo,
                head_repo=head,
                created_at=self._now(),
                conclusion=conclusion,
            )
            self.state.runs[run_id] = run
            return run

    def add_artifact(
        self,
        run: dict[str, Any],
        name: str = "gpuemu-baseline",
        files: Mapping[str, bytes] | None = None,
        *,
        zip_bytes: bytes | None = None,
        expired: bool = False,
        size_in_bytes: int | None = None,
    ) -> dict[str, Any]:
        """An artifact of ``run`` holding ``files`` (or the raw ``zip_bytes``)."""
        data = zip_bytes if zip_bytes is not None else make_zip(files or {"results.json": b"{}"})
        with self._lock:
            artifact_id = self._next_id()
            created = self._now()
            expires = (datetime.fromisoformat(created.replace("Z", "+00:00")) + timedelta(days=90)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            artifact = obj.artifact(
                api_repo_url=self.repo["url"],
                artifact_id=artifact_id,
                name=name,
                size=len(data) if size_in_bytes is None else size_in_bytes,
                expired=expired,
                created_at=created,
                expires_at=expires,
                run=run,
                digest=None,
            )
            self.state.artifacts[artifact_id] = artifact
            self.state.blobs[artifact_id] = data
            return artifact

    def expire(self, artifact: Mapping[str, Any]) -> None:
        """Expire an artifact after it was listed (the download then answers 410)."""
        with self._lock:
            self.state.artifacts[artifact["id"]]["expired"] = True

    def add_pull(
        self,
        *,
        head_ref: str = "feature",
        head_sha: str = "a" * 40,
        base_ref: str = "main",
        base_sha: str = "b" * 40,
        head_repository: str | None = None,
    ) -> int:
        """Open a pull request; returns its number (issues and PRs share numbers)."""
        with self._lock:
            number = self._next_number()
            head_full = head_repository or self.repository
            fork = head_full != self.repository
            head_repo = obj.repository(self.site, head_full, self.repository_id + number, fork=fork)
            base_repo = obj.repository(self.site, self.repository, self.repository_id)
            author = obj.user(self.site, head_full.split("/")[0], 500 + number)
            side = {"user": author}
            self.state.pulls[number] = obj.pull_request_simple(
                self.site,
                number=number,
                pr_id=self._next_id(),
                title=f"PR {number}",
                head={"label": f"{head_full.split('/')[0]}:{head_ref}", "ref": head_ref, "sha": head_sha}
                | {"repo": head_repo}
                | side,
                base={
                    "label": f"{self.repository.split('/')[0]}:{base_ref}",
                    "ref": base_ref,
                    "sha": base_sha,
                }
                | {"repo": base_repo}
                | side,
                author=author,
                created_at=self._now(),
            )
            self.state.issues[number] = self._issue_record(number, f"PR {number}", None, [], author)
            self.state.issues[number]["pull_request"] = {
                "url": self.state.pulls[number]["url"],
                "html_url": self.state.pulls[number]["html_url"],
                "diff_url": self.state.pulls[number]["diff_url"],
                "patch_url": self.state.pulls[number]["patch_url"],
                "merged_at": None,
            }
            return number

    def add_comment(self, number: int, body: str, *, login: str = "octocat", kind: str = "User") -> int:
        """A comment written on issue or PR ``number`` by ``login`` (github-actions[bot] is the token's own
        account, with its real id); returns its id."""
        with self._lock:
            author = (
                obj.bot(self.site) if login == obj.BOT_LOGIN else obj.user(self.site, login, 583231, kind)
            )
            result: int = self._create_comment(number, body, author)["id"]
            return result

    def add_issue(self, title: str, body: str, labels: list[str], *, state: str = "open") -> int:
        with self._lock:
            number = self._next_number()
            record = self._issue_record(number, title, body, labels, obj.bot(self.site))
            record["state"] = state
            self.state.issues[number] = record
            return number

    # -- inspection -----------------------------------------------------------------------

    def comments(self, number: int) -> list[dict[str, Any]]:
        """The comments on issue/PR ``number``, oldest first."""
        with self._lock:
            return [c for c in self.state.comments.values() if c["issue_url"].endswith(f"/issues/{number}")]

    def issues(self) -> list[dict[str, Any]]:
        """Every issue that is not a pull request."""
        with self._lock:
            return [i for i in self.state.issues.values() if "pull_request" not in i]

    def check_responses_against_openapi(self) -> int:
        """Validate every API response sent so far against GitHub's OpenAPI description.

        Raises ``jsonschema.ValidationError`` (or ``AssertionError`` for an undocumented success
        status) on the first mismatch; returns the number of responses checked. Responses to
        requests that matched no operation (401, 404) are checked as ``basic-error``.
        """
        spec = contract()
        for response in self.responses:
            if response.template == "graphql":  # not part of the REST description
                continue
            template = response.template or "/repos/{owner}/{repo}/issues"
            status = response.status if response.template else max(response.status, 400)
            spec.validate(template, response.method, status, response.body, response.headers)
        return len(self.responses)

    def api_calls(self, method: str | None = None, path_regex: str = "") -> list[Recorded]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if (method is None or r.method == method) and pattern.search(r.path)]

    # -- internals: state -----------------------------------------------------------------

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _next_number(self) -> int:
        return max([0, *self.state.issues]) + 1

    def _now(self) -> str:
        # A deterministic clock: each new object is one minute newer than the last.
        self._ticks += 1
        return (_EPOCH + timedelta(minutes=self._ticks)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _issue_record(
        self, number: int, title: str, body: str | None, labels: list[str], author: dict[str, Any]
    ) -> dict[str, Any]:
        now = self._now()
        return obj.issue(
            self.site,
            repo_full_name=self.repository,
            issue_id=self._next_id(),
            number=number,
            title=title,
            body=body,
            state="open",
            state_reason=None,
            labels=[obj.label(self.site, self.repository, name, 7000 + i) for i, name in enumerate(labels)],
            author=author,
            comments=0,
            created_at=now,
            updated_at=now,
            closed_at=None,
        )

    def _create_comment(self, number: int, body: str, author: dict[str, Any]) -> dict[str, Any]:
        now = self._now()
        comment = obj.issue_comment(
            self.site,
            repo_full_name=self.repository,
            comment_id=self._next_id(),
            issue_number=number,
            body=body,
            author=author,
            created_at=now,
            updated_at=now,
        )
        self.state.comments[comment["id"]] = comment
        self.state.issues[number]["comments"] += 1
        return comment

    # -- internals: HTTP ------------------------------------------------------------------

    def viewer(self) -> dict[str, Any]:
        """The account the token belongs to (the author of the comments it posts)."""
        if self.viewer_login is None:
            return obj.bot(self.site)
        return obj.user(
            self.site, self.viewer_login, 7_000_001, "User" if self.token_kind == "personal" else "Bot"
        )

    def _build_routes(self) -> list[tuple[str, re.Pattern[str], str, Callable[..., Reply]]]:
        prefix = re.escape(f"/repos/{self.repository}")
        return [
            *(
                (method, re.compile(f"^{regex}$"), template, handler)
                for method, regex, template, handler in routes.ABSOLUTE_ROUTES
            ),
            *(
                (method, re.compile(f"^{prefix}{regex}$"), "/repos/{owner}/{repo}" + template, handler)
                for method, regex, template, handler in routes.ROUTES
            ),
        ]

    def _take_failure(self, method: str, path: str) -> Failure | None:
        with self._lock:
            for injected in self._injected:
                if injected.remaining > 0 and injected.method == method and injected.pattern.search(path):
                    injected.remaining -= 1
                    return injected.failure
        return None

    def _handle_api(self, request: Recorded) -> tuple[str, Reply]:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return "", (401, obj.basic_error("Bad credentials", 401), {})
        if request.headers.get("x-github-api-version") != API_VERSION:
            return "", (400, obj.basic_error("X-GitHub-Api-Version header missing or wrong", 400), {})
        for method, pattern, template, handler in self._routes:
            match = pattern.match(request.path)
            if method != request.method or match is None:
                continue
            failure = self._take_failure(request.method, request.path)
            if failure is not None and not failure.apply_first:
                return template, (failure.status, failure.body, dict(failure.headers))
            if self.read_only and request.method != "GET" and template != "graphql":  # a query reads
                failure = Failure.read_only()
                return template, (failure.status, failure.body, {})
            with self._lock:
                reply = handler(self, match.groupdict(), request)
            if failure is not None:
                return template, (failure.status, failure.body, dict(failure.headers))
            return template, reply
        return "", (404, obj.basic_error("Not Found", 404), {})

    def _handle_storage(self, request: Recorded) -> tuple[str, Reply]:
        self.storage_requests.append(request)
        if "authorization" in request.headers:
            return "", (400, {"error": "storage refuses requests that carry an Authorization header"}, {})
        failure = self._take_failure(request.method, request.path)
        if failure is not None:
            return "", (failure.status, failure.body, dict(failure.headers))
        match = re.fullmatch(r"/blob/(\d+)", request.path)
        if request.method != "GET" or match is None or int(match.group(1)) not in self.state.blobs:
            return "", (404, {"error": "no such blob"}, {})
        return "", (200, self.state.blobs[int(match.group(1))], {"Content-Type": "application/zip"})

    def link_header(self, path: str, query: Mapping[str, str], page: int, last: int) -> str:
        """GitHub's ``Link`` header for page ``page`` of ``last``."""

        def url(n: int) -> str:
            return f"{self.api_url}{path}?{urlencode({**query, 'page': str(n)})}"

        rels = []
        if page < last:
            rels += [f'<{url(page + 1)}>; rel="next"', f'<{url(last)}>; rel="last"']
        if page > 1:
            rels += [f'<{url(1)}>; rel="first"', f'<{url(page - 1)}>; rel="prev"']
        return ", ".join(rels)

    def blob_location(self, artifact_id: int) -> str:
        # Like a pre-signed blob URL: the signature is the credential, no header is needed.
        signature = secrets.token_urlsafe(12)
        return f"{self.storage_url}/blob/{artifact_id}?sig={signature}&se=2026-03-01T00%3A01%3A00Z"
