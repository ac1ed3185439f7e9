"""Whose token the Action holds: the account its comments are authored by.

The sticky comment is found again by its marker, but a marker is text anyone can post. Only comments written
by the token's own account are the Action's (a user who posts the marker first must not have their comment
edited, nor block the Action's). The account is asked of GitHub:

1. `GET /user` answers for personal and OAuth tokens;
2. GraphQL `viewer` answers for installation tokens (the workflow's GITHUB_TOKEN, GitHub Apps), for which
   `GET /user` is "Resource not accessible by integration";
3. when neither answers (GraphQL disabled on a server, a network fault), an installation token (`ghs_`) is
   taken to be the workflow's own GITHUB_TOKEN, whose comments are by `github-actions[bot]`; any other token
   gets no identity, and the comment is not posted rather than posted blindly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuemu_ci.github.client import GitHubClient, GitHubDeadlineError, GitHubError

ACTIONS_BOT_LOGIN = "github-actions[bot]"
_VIEWER_QUERY = "query { viewer { __typename login databaseId } }"


@dataclass(frozen=True)
class TokenIdentity:
    """The account behind a token; `user_id` is compared when known, else the login."""

    login: str
    user_id: int | None
    bot: bool
    source: str  # how it was found, for messages

    def authored(self, comment: Mapping[str, Any]) -> bool:
        """Whether a REST comment object was written by this account."""
        user = comment.get("user")
        if not isinstance(user, dict) or (user.get("type") == "Bot") != self.bot:
            return False
        if self.user_id is not None and isinstance(user.get("id"), int):
            return bool(user["id"] == self.user_id)
        login = user.get("login")
        return isinstance(login, str) and _plain(login) == _plain(self.login)


def _plain(login: str) -> str:
    # GraphQL names bots without the "[bot]" that REST adds; logins are case-insensitive.
    return login.lower().removesuffix("[bot]")


def token_identity(client: GitHubClient) -> TokenIdentity | None:
    """The token's account (see the module docstring); None when it cannot be known. GitHubDeadlineError when
    the client's time for the API has run out."""
    try:
        user = client.get_json("/user")
        if isinstance(user, dict) and isinstance(user.get("login"), str):
            uid = user.get("id")
            bot = user.get("type") == "Bot"
            return TokenIdentity(user["login"], uid if isinstance(uid, int) else None, bot, "GET /user")
    except GitHubDeadlineError:
        raise  # no time left for the API at all: no answer will come from the next question either
    except GitHubError:
        pass
    try:
        data = client.graphql(_VIEWER_QUERY)
        viewer = data.get("viewer") if isinstance(data, dict) else None
        if isinstance(viewer, dict) and isinstance(viewer.get("login"), str):
            uid = viewer.get("databaseId")
            bot = viewer.get("__typename") == "Bot" or viewer["login"].endswith("[bot]")
            return TokenIdentity(
                viewer["login"], uid if isinstance(uid, int) else None, bot, "GraphQL viewer"
            )
    except GitHubDeadlineError:
        raise
    except GitHubError:
        pass
    if client.installation_token:
        return TokenIdentity(ACTIONS_BOT_LOGIN, None, True, "assumed: the workflow's GITHUB_TOKEN")
    return None
