"""A thin GitHub REST client over httpx: the only module in gpuemu-ci that opens sockets.

What it adds to httpx, following GitHub's documentation ("Best practices for using the REST
API", "Rate limits for the REST API"):

- the ``X-GitHub-Api-Version``, ``Accept`` and ``User-Agent`` headers on every API request;
- ``Link: <...>; rel="next"`` pagination, refusing links that leave the API host;
- retries: 429 and rate-limited 403 wait for ``Retry-After``, else until ``x-ratelimit-reset``
  when ``x-ratelimit-remaining`` is 0, else at least a minute doubling each time; 5xx and
  dropped connections back off exponentially. Every wait goes through the injected ``sleep`` and
  the total is bounded by ``max_total_wait``: a wait that would exceed it fails at once;
- non-idempotent requests (POST) are not resent after a 5xx or a connection lost mid-request,
  since GitHub may have applied them; callers that can check (comments, issues) re-check instead;
- artifact downloads follow the 302 to the storage host with a separate, token-less client;
- bounds (limits.py): each attempt has a deadline counting total time (``deadline``; downloads
  ``download_deadline``), not only httpx's per-read timeout, which a server trickling a byte at a time never
  trips; all of the client's work, retries and their waits included, shares one budget (``total_deadline``);
  each answer is read as a stream up to its endpoint's cap (``cap``; downloads ``max_bytes``);
- a signal held back by the process (``stop_requested``: the Action's SIGTERM) ends a request or a wait at
  once, as ``Interrupted`` (exchange.py);
- every failure is a ``GitHubError`` (an ``InfraError``) whose message names the request and the
  API's answer, and never contains the token.
"""

from __future__ import annotations

import functools
import logging
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from gpuemu_ci import __version__
from gpuemu_ci.errors import UsageError
from gpuemu_ci.github import exchange
from gpuemu_ci.github.api_errors import (
    ERRORS_BY_STATUS,
    GitHubAnswerTooLargeError,
    GitHubAuthError,
    GitHubDeadlineError,
    GitHubDownloadTooLargeError,
    GitHubError,
    GitHubForbiddenError,
    GitHubGoneError,
    GitHubNetworkError,
    GitHubNotFoundError,
    GitHubRateLimitError,
    GitHubServerError,
    GitHubValidationError,
)
from gpuemu_ci.github.exchange import DeadlineExceeded
from gpuemu_ci.github.limits import API_ANSWER, DEFAULT_TOTAL_S, ApiBudget, BodyCap
from gpuemu_ci.github.retry import Decision, RetryKind, RetryPolicy, RetryState, api_message

__all__ = [
    "ACCEPT",
    "API_VERSION",
    "DEFAULT_API_URL",
    "BodyCap",
    "GitHubAnswerTooLargeError",
    "GitHubAuthError",
    "GitHubClient",
    "GitHubDeadlineError",
    "GitHubDownloadTooLargeError",
    "GitHubError",
    "GitHubForbiddenError",
    "GitHubGoneError",
    "GitHubNetworkError",
    "GitHubNotFoundError",
    "GitHubRateLimitError",
    "GitHubServerError",
    "GitHubValidationError",
]


API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"
DEFAULT_API_URL = "https://api.github.com"
USER_AGENT = f"gpuemu-ci/{__version__}"

_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"})
_LINK_NEXT = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?')
_NOT_RESENT = "not resent: GitHub may have applied it"

log = logging.getLogger(__name__)


class GitHubClient:
    """A GitHub REST client for one token and one API root (``GITHUB_API_URL`` on GHES).

    ``transport`` lets tests substitute an httpx transport; ``sleep`` and ``clock`` let them
    observe requested waits without waiting (the default sleep ends early when ``stop_requested`` names a
    signal). ``total_source`` says where ``total_deadline`` was set, for the message when it runs out. Use as
    a context manager or call ``close()``.
    """

    def __init__(
        self,
        token: str,
        api_url: str = DEFAULT_API_URL,
        *,
        graphql_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        max_retries: int = 4,
        max_total_wait: float = 300.0,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        deadline: float = 60.0,
        download_deadline: float = 180.0,
        total_deadline: float = DEFAULT_TOTAL_S,
        total_source: str = "",
        stop_requested: Callable[[], int | None] = exchange.never,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
            raise UsageError("the GitHub token contains characters that cannot be sent in an HTTP header")
        parts = urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"the GitHub API URL {api_url!r} is not an http(s) URL")
        self.api_url = api_url.rstrip("/")
        self.graphql_url = graphql_url or default_graphql_url(self.api_url)
        self._origin = (parts.scheme, parts.netloc.lower())
        self._base_path = parts.path.rstrip("/")
        self._authenticated = bool(token)
        # An installation token: the workflow's GITHUB_TOKEN or a GitHub App's (GitHub's `ghs_` prefix).
        self.installation_token = token.startswith("ghs_")
        self._stop_requested = stop_requested
        if sleep is None:
            sleep = functools.partial(exchange.pause, stop_requested=stop_requested)
        self.policy = RetryPolicy(max_retries, max_total_wait, sleep, clock, jitter)
        self.budget = ApiBudget(total_deadline, total_source)
        headers = {"Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION, "User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._headers = headers
        self._transport = transport
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self.deadline = deadline
        self.download_deadline = download_deadline
        self._http = self._api_client()
        self._storage_client: httpx.Client | None = None  # made on the first download

    def __repr__(self) -> str:
        return f"GitHubClient(api_url={self.api_url!r}, authenticated={self._authenticated})"

    def _api_client(self) -> httpx.Client:
        # Redirects are followed by hand so that the token never reaches another host.
        return httpx.Client(
            headers=self._headers, transport=self._transport, timeout=self._timeout, follow_redirects=False
        )

    def close(self) -> None:
        """Close both connection pools."""
        self._http.close()
        if self._storage_client is not None:
            self._storage_client.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        ok: tuple[int, ...] = (200,),
        idempotent: bool | None = None,
        cap: BodyCap = API_ANSWER,
    ) -> httpx.Response:
        """Send one API request with retries; return the response when its status is in ``ok``.

        ``path`` is relative to the API root (``/repos/o/r/...``) or an absolute URL on the API
        host (pagination links, ``archive_download_url``). ``idempotent`` defaults by method. ``cap``: the
        most the answer may hold (GitHubAnswerTooLargeError past it).
        """
        method = method.upper()
        resend_ok = method in _IDEMPOTENT if idempotent is None else idempotent
        url = self._url(path)
        what = f"{method} {urlsplit(url).path}"
        state = RetryState()
        while True:
            seconds, budget_bound = self.budget.attempt_seconds(self.deadline, what)
            try:
                send = functools.partial(
                    exchange.read_answer, self._http, method, url, params=params, json=json, ok=ok, cap=cap,
                    what=what,
                )  # fmt: skip
                with self.budget.timed():
                    response = exchange.bounded(
                        seconds, send, self._abandon_api_requests, self._stop_requested
                    )
            except httpx.TransportError as exc:
                if budget_bound and isinstance(exc, DeadlineExceeded):
                    raise self.budget.ran_out(what) from exc
                # A refused connection never reached GitHub, so it is safe to resend anything.
                safe = resend_ok or isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if not safe or self.policy.exhausted(state):
                    raise GitHubNetworkError(what, _describe_transport_error(exc)) from exc
                self._pause(state, self.policy.network_retry(state), what)
                continue
            except (httpx.HTTPError, httpx.InvalidURL) as exc:  # protocol errors: not worth a retry
                raise GitHubNetworkError(what, _describe_transport_error(exc)) from exc
            if response.status_code in ok:
                return response
            decision = self.policy.classify(response, state)
            retryable = decision is not None and (decision.kind is RetryKind.RATE_LIMIT or resend_ok)
            if decision is None or not retryable or self.policy.exhausted(state):
                note = ""
                if decision is not None:
                    note = f"gave up after {state.attempt} retries" if retryable else _NOT_RESENT
                raise _error_for(what, response, decision, note)
            self._pause(state, decision, what, response.status_code)

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET and decode a JSON body."""
        return _decode(self.request("GET", path, params=params))

    def post_json(self, path: str, body: Any, *, idempotent: bool = False) -> Any:
        """POST a JSON body, expecting 201 or 200; not resent after a 5xx unless ``idempotent``."""
        return _decode(self.request("POST", path, json=body, ok=(200, 201), idempotent=idempotent))

    def patch_json(self, path: str, body: Any) -> Any:
        """PATCH a JSON body (idempotent: same body, same result), expecting 200."""
        return _decode(self.request("PATCH", path, json=body))

    def delete(self, path: str) -> None:
        """DELETE a resource, expecting 204."""
        self.request("DELETE", path, ok=(204,))

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None) -> Any:
        """POST a GraphQL query to the API host's GraphQL endpoint; its `data`, or a GitHubError naming the
        first of its `errors`."""
        body = {"query": query, "variables": dict(variables or {})}
        answer = _decode(self.request("POST", self.graphql_url, json=body, idempotent=True))
        errors = answer.get("errors") if isinstance(answer, dict) else None
        if errors or not isinstance(answer, dict):
            first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
            raise GitHubError("POST graphql", str(first.get("message", "no data in the answer"))[:300])
        return answer.get("data")

    def paginate(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        item_key: str | None = None,
        max_pages: int = 100,
        cap: BodyCap = API_ANSWER,
    ) -> Iterator[Any]:
        """Yield the items of every page, following ``Link: rel="next"``.

        ``item_key`` names the list inside a wrapping object (``"artifacts"``); None means the
        body is the list. At most ``max_pages`` pages are read (GitHub itself caps filtered
        listings at 1,000 results), each of at most ``cap``.
        """
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        url: str | None = path
        pages = 0
        while url is not None:
            response = self.request("GET", url, params=query, cap=cap)
            data = _decode(response)
            items = data.get(item_key) if item_key is not None and isinstance(data, dict) else data
            if not isinstance(items, list):
                raise GitHubError(f"GET {urlsplit(str(response.url)).path}", "the response is not a list")
            yield from items
            pages += 1
            url = _next_link(response.headers.get("link"))
            if url is not None and pages >= max_pages:
                log.warning("stopped paginating %s after %d pages", path, pages)
                return
            query = None  # the next link carries the whole query

    def download(self, path: str, dest: Path, *, max_bytes: int) -> int:
        """Fetch an endpoint that answers 302 to a pre-signed storage URL; stream it into ``dest``.

        The storage request carries no ``Authorization`` header (a separate client). Returns the
        number of bytes written. Raises ``GitHubGoneError`` for 410 (an expired artifact) and
        ``GitHubDownloadTooLargeError`` past ``max_bytes``.
        """
        response = self.request("GET", path, ok=(200, 302), cap=BodyCap(max_bytes, "the download"))
        if response.status_code == 200:  # not in GitHub's description, but harmless to accept
            return exchange.write_capped(dest, [response.content], max_bytes, "the download")
        location = response.headers.get("location")
        if not location:
            raise GitHubError(f"GET {urlsplit(str(response.url)).path}", "302 without a Location header")
        return self._fetch_storage(urljoin(str(response.url), location), dest, max_bytes)

    # -- internals ------------------------------------------------------------------------

    def _pause(self, state: RetryState, decision: Decision, what: str, status: int | None = None) -> None:
        """Wait before the next attempt, within both the retry budget and what is left of the total."""
        self.policy.pause(state, decision, what, status, budget_left=self.budget.remaining())
        self.budget.spend(decision.delay)

    def _abandon_api_requests(self) -> None:
        # Closing the pool ends the stuck read in the request's thread; later requests get a fresh pool.
        stuck, self._http = self._http, self._api_client()
        stuck.close()

    def _abandon_downloads(self) -> None:
        stuck, self._storage_client = self._storage_client, None
        if stuck is not None:
            stuck.close()

    def _storage(self) -> httpx.Client:
        # A separate client with no default headers: pre-signed storage URLs must not get the token.
        if self._storage_client is None:
            self._storage_client = httpx.Client(
                headers={"User-Agent": USER_AGENT},
                transport=self._transport,
                timeout=self._timeout,
                follow_redirects=True,
            )
        return self._storage_client

    def _fetch_storage(self, url: str, dest: Path, max_bytes: int) -> int:
        # Only the host is named in messages: the query string is a signature.
        what = f"download from {urlsplit(url).netloc}"
        state = RetryState()
        while True:
            seconds, budget_bound = self.budget.attempt_seconds(self.download_deadline, what)
            try:
                attempt = functools.partial(
                    exchange.download_once, self._storage(), url, dest, max_bytes, what
                )
                with self.budget.timed():
                    response, written = exchange.bounded(
                        seconds, attempt, self._abandon_downloads, self._stop_requested
                    )
                if written is not None:
                    return written
            except httpx.TransportError as exc:
                if budget_bound and isinstance(exc, DeadlineExceeded):
                    raise self.budget.ran_out(what) from exc
                if self.policy.exhausted(state):
                    raise GitHubNetworkError(what, _describe_transport_error(exc)) from exc
                self._pause(state, self.policy.network_retry(state), what)
                continue
            except (httpx.HTTPError, httpx.InvalidURL) as exc:  # too many redirects, bad URL
                raise GitHubNetworkError(what, _describe_transport_error(exc)) from exc
            except OSError as exc:
                raise GitHubError(what, f"cannot write {dest}: {exc.strerror or exc}") from exc
            decision = self.policy.classify(response, state)
            if decision is None or self.policy.exhausted(state):
                raise GitHubError(what, f"{response.status_code}", status=response.status_code)
            self._pause(state, decision, what, response.status_code)

    def _url(self, path: str) -> str:
        if "://" not in path:
            return f"{self.api_url}/{path.lstrip('/')}"
        parts = urlsplit(path)
        if path == self.graphql_url and (parts.scheme, parts.netloc.lower()) == self._origin:
            return path
        if (parts.scheme, parts.netloc.lower()) != self._origin or not parts.path.startswith(self._base_path):
            # A Link or download URL pointing elsewhere must not receive the token.
            raise GitHubError("request", f"refusing to send the token to {parts.netloc or path}")
        return path


def default_graphql_url(api_url: str) -> str:
    """GitHub's GraphQL endpoint beside a REST root: api.github.com/graphql, or HOST/api/graphql on a GitHub
    Enterprise Server (whose REST root is HOST/api/v3)."""
    root = api_url.rstrip("/")
    if root.endswith("/api/v3"):
        return root.removesuffix("/v3") + "/graphql"
    return root + "/graphql"


def _error_for(what: str, response: httpx.Response, decision: Decision | None, note: str) -> GitHubError:
    status = response.status_code
    message, doc = api_message(response)
    detail = f"{status} {response.reason_phrase}".rstrip()
    if message:
        detail += f": {message[:300]}"
    if note:
        detail += f" ({note})"
    if decision is not None and decision.kind is RetryKind.RATE_LIMIT:
        cls: type[GitHubError] = GitHubRateLimitError
    elif status >= 500:
        cls = GitHubServerError
    else:
        cls = ERRORS_BY_STATUS.get(status, GitHubError)
    return cls(what, detail, status=status, api_message=message, documentation_url=doc)


def _decode(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (ValueError, UnicodeDecodeError) as exc:
        path = urlsplit(str(response.url)).path
        raise GitHubError(f"{response.request.method} {path}", "the response is not JSON") from exc


def _next_link(header: str | None) -> str | None:
    if not header:
        return None
    for part in header.split(","):
        match = _LINK_NEXT.search(part)
        if match:
            return match.group(1)
    return None


def _describe_transport_error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
