"""GitHub's documented retry rules, separate from the HTTP plumbing that applies them.

From "Rate limits for the REST API" (docs.github.com):

- 429, or 403 with a rate-limit signal: if ``Retry-After`` is present, wait that long; else if
  ``x-ratelimit-remaining`` is 0, wait until ``x-ratelimit-reset`` (epoch seconds); else (a
  secondary limit without headers) wait at least one minute, and longer on each repeat;
- 5xx: back off exponentially (``Retry-After`` wins when sent).

The total wait of one logical request is bounded: a wait that would pass ``max_total_wait``
fails at once rather than sleeping first and failing after.
"""

from __future__ import annotations

import email.utils
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import httpx

from gpuemu_ci.github.api_errors import GitHubRateLimitError, GitHubServerError

SERVER_ERRORS = frozenset({500, 502, 503, 504})
SECONDARY_MIN_WAIT = 60.0  # "wait for at least one minute before retrying"
BACKOFF_CAP = 60.0

log = logging.getLogger(__name__)


class RetryKind(Enum):
    """Why a request is retried."""

    RATE_LIMIT = "rate limit"
    SERVER = "server error"
    NETWORK = "network error"


@dataclass(frozen=True)
class Decision:
    """Retry after ``delay`` seconds, for the reason ``kind``."""

    kind: RetryKind
    delay: float
    header_less_secondary: bool = False


@dataclass
class RetryState:
    """Bookkeeping for one logical request across its attempts."""

    attempt: int = 0
    waited: float = 0.0
    header_less_secondary: int = 0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry; ``sleep``/``clock``/``jitter`` are injectable for tests."""

    max_retries: int
    max_total_wait: float
    sleep: Callable[[float], None]
    clock: Callable[[], float]
    jitter: Callable[[], float]

    def classify(self, response: httpx.Response, state: RetryState) -> Decision | None:
        """The retry a response calls for, or None when it is final."""
        status = response.status_code
        headers = response.headers
        retry_after = parse_retry_after(headers.get("retry-after"), self.clock)
        if status == 429 or (status == 403 and is_rate_limited_403(response)):
            if retry_after is not None:
                return Decision(RetryKind.RATE_LIMIT, retry_after)
            reset = _int_or_none(headers.get("x-ratelimit-reset"))
            if headers.get("x-ratelimit-remaining") == "0" and reset is not None:
                # One second of slack: the reset time is whole seconds and clocks differ.
                return Decision(RetryKind.RATE_LIMIT, max(0.0, reset - self.clock()) + 1.0)
            delay = SECONDARY_MIN_WAIT * 2**state.header_less_secondary
            return Decision(RetryKind.RATE_LIMIT, delay, header_less_secondary=True)
        if status in SERVER_ERRORS:
            delay = retry_after if retry_after is not None else self.backoff(state.attempt)
            return Decision(RetryKind.SERVER, delay)
        return None

    def backoff(self, attempt: int) -> float:
        """1, 2, 4 ... seconds (capped), stretched by up to 25% of jitter."""
        return min(BACKOFF_CAP, 2.0**attempt) * (1.0 + 0.25 * self.jitter())

    def network_retry(self, state: RetryState) -> Decision:
        """The retry after a dropped connection: exponential backoff."""
        return Decision(RetryKind.NETWORK, self.backoff(state.attempt))

    def exhausted(self, state: RetryState) -> bool:
        """True when no retries are left."""
        return state.attempt >= self.max_retries

    def pause(
        self,
        state: RetryState,
        decision: Decision,
        what: str,
        status: int | None = None,
        *,
        budget_left: float = float("inf"),
    ) -> None:
        """Sleep before the next attempt, or raise now if the wait would exceed the retry budget or
        `budget_left`, what is left of the client's time in all."""
        shown = f"{status} " if status is not None else ""
        allowed = min(self.max_total_wait - state.waited, budget_left)
        if decision.delay > allowed:
            error = GitHubRateLimitError if decision.kind is RetryKind.RATE_LIMIT else GitHubServerError
            raise error(
                what,
                f"{shown}{decision.kind.value}; GitHub asks to wait {decision.delay:.0f} s, over the "
                f"remaining retry budget of {max(0.0, allowed):.0f} s",
                status=status,
            )
        log.warning(
            "%s: %s%s, retrying in %.1f s (retry %d of %d)",
            what,
            shown,
            decision.kind.value,
            decision.delay,
            state.attempt + 1,
            self.max_retries,
        )
        self.sleep(decision.delay)
        state.waited += decision.delay
        state.attempt += 1
        if decision.header_less_secondary:
            state.header_less_secondary += 1


def api_message(response: httpx.Response) -> tuple[str, str]:
    """``message`` and ``documentation_url`` of a GitHub error body ("" when absent)."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return "", ""
    if not isinstance(body, dict):
        return "", ""
    message = body.get("message")
    doc = body.get("documentation_url")
    return (message if isinstance(message, str) else ""), (doc if isinstance(doc, str) else "")


def is_rate_limited_403(response: httpx.Response) -> bool:
    """A 403 is a rate limit when it says so; otherwise it is a permission error."""
    if "retry-after" in response.headers or response.headers.get("x-ratelimit-remaining") == "0":
        return True
    message, _ = api_message(response)
    return "rate limit" in message.lower()


def parse_retry_after(value: str | None, clock: Callable[[], float]) -> float | None:
    """Retry-After is delay-seconds or an HTTP-date (RFC 9110 §10.2.3); None if unusable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - clock())


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
