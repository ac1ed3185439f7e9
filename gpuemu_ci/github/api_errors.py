"""The errors of the GitHub layer: one ``InfraError`` subclass per way a request can fail.

Messages name the request (method and path, or only the host for storage URLs) and GitHub's
answer; they never contain the token or a signed URL. ``hint`` adds what a user can do.
"""

from __future__ import annotations

from gpuemu_ci.errors import InfraError


class GitHubError(InfraError):
    """A GitHub API request failed; ``status`` is the HTTP status (None for network failures)."""

    hint = ""

    def __init__(
        self,
        what: str,
        detail: str,
        *,
        status: int | None = None,
        api_message: str = "",
        documentation_url: str = "",
    ) -> None:
        message = f"GitHub API {what} failed: {detail}"
        if self.hint:
            message += f" ({self.hint})"
        super().__init__(message)
        self.status = status
        self.api_message = api_message
        self.documentation_url = documentation_url


class GitHubAuthError(GitHubError):
    """401: the token is missing, expired or invalid."""

    hint = "check the github_token input"


class GitHubForbiddenError(GitHubError):
    """403 that is not a rate limit: the token lacks a permission (read-only fork tokens)."""

    hint = (
        "the token lacks a permission: grant it in the workflow's `permissions:` block; pull requests "
        "from forks only get a read-only token"
    )


class GitHubNotFoundError(GitHubError):
    """404: the resource does not exist or the token cannot see it."""


class GitHubGoneError(GitHubError):
    """410: the resource existed but is gone (an expired artifact, a deleted issue)."""


class GitHubValidationError(GitHubError):
    """422: GitHub rejected the request body (for example a comment over 65,536 characters)."""


class GitHubRateLimitError(GitHubError):
    """Rate limited, and waiting longer was not allowed by the retry budget."""


class GitHubServerError(GitHubError):
    """5xx after the allowed retries (or once, for a request that must not be resent)."""


class GitHubNetworkError(GitHubError):
    """The connection failed (DNS, refused, reset, timeout) after the allowed retries."""


class GitHubDeadlineError(GitHubNetworkError):
    """The time allowed for the client's API work in all ran out (limits.ApiBudget): nothing more is sent."""


class GitHubAnswerTooLargeError(GitHubError):
    """An answer held more than its endpoint's cap (limits.BodyCap); what was received is discarded."""


class GitHubDownloadTooLargeError(GitHubAnswerTooLargeError):
    """A download exceeded the caller's byte cap; what was received is discarded."""


ERRORS_BY_STATUS: dict[int, type[GitHubError]] = {
    401: GitHubAuthError,
    403: GitHubForbiddenError,
    404: GitHubNotFoundError,
    410: GitHubGoneError,
    422: GitHubValidationError,
}
