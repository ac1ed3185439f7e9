"""The bounds every exchange with GitHub keeps, in time and in bytes.

Time: each attempt of a request has a deadline from connecting to its last byte (`GitHubClient`'s `deadline`,
downloads `download_deadline`), total time rather than an idle gap between two reads, which a server
trickling a byte at a time never opens. On top of those, all of one client's API work (every attempt, and
every wait before a retry) shares one budget, `ApiBudget`: the Action's `api_timeout`. A request that meets
an empty budget is not sent; one the budget cuts short is abandoned and not retried.

Bytes: each answer is read as a stream up to the cap of its endpoint (`BodyCap`): a page of comments or of
issues can be large, a page of the artifact list is small, an artifact download has a cap of its own. An
answer over its cap is a `GitHubAnswerTooLargeError` naming what was being fetched, and what was read is
dropped; the connection is closed instead of being read to its end. An error answer is read only as far as
its message can go (`ERROR_BODY_BYTES`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuemu_ci.github.api_errors import GitHubDeadlineError

DEFAULT_TOTAL_S = (
    300.0  # all of one step's API work: well inside a job's budget, far above a healthy API's need
)
ERROR_BODY_BYTES = 64 << 10  # what is read of an error answer: its message fits in far less


@dataclass(frozen=True)
class BodyCap:
    """The most an endpoint's answer may hold, and what it is, for the message when it holds more."""

    limit: int
    what: str

    def describe(self) -> str:
        """``the 8 MiB cap on a page of the artifact list``."""
        return f"the {_size(self.limit)} cap on {self.what}"


API_ANSWER = BodyCap(8 << 20, "an API answer")  # one object: a run, a comment, an issue, a GraphQL answer


class ApiBudget:
    """The seconds one client may spend on GitHub in all: its attempts, measured, and its waits before a
    retry, as asked for. `source` names where the figure was set, for the message when it runs out."""

    def __init__(self, total_s: float, source: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self.source = source
        self.spent_s = 0.0
        self._clock = clock

    def remaining(self) -> float:
        """Seconds left of the budget (negative once overspent)."""
        return self.total_s - self.spent_s

    def spend(self, seconds: float) -> None:
        """Counts `seconds` against the budget (a negative figure counts as none)."""
        self.spent_s += max(0.0, seconds)

    def attempt_seconds(self, per_attempt_s: float, what: str) -> tuple[float, bool]:
        """How long the next attempt may take: (seconds, whether the budget rather than the attempt's own
        deadline sets it). A GitHubDeadlineError when nothing is left."""
        left = self.remaining()
        if left <= 0:
            raise self.ran_out(what)
        return min(per_attempt_s, left), left < per_attempt_s

    def ran_out(self, what: str) -> GitHubDeadlineError:
        """The error to raise when the budget is spent before `what` could be sent; it names the budget and
        where it was set."""
        source = f" ({self.source})" if self.source else ""
        return GitHubDeadlineError(
            what, f"the {self.total_s:g} s allowed for GitHub API work in all{source} ran out; not sent again"
        )

    def timed(self) -> _Stopwatch:
        """A context that spends the time spent inside it."""
        return _Stopwatch(self)


class _Stopwatch:
    def __init__(self, budget: ApiBudget) -> None:
        self.budget = budget
        self.started = 0.0

    def __enter__(self) -> None:
        self.started = self.budget._clock()

    def __exit__(self, *exc: object) -> None:
        self.budget.spend(self.budget._clock() - self.started)


def _size(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count:,}-byte"
