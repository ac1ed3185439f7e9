"""The repository a local clone belongs to, from its `origin` remote: what `sign` binds a report to when it
runs outside GitHub Actions and no --repo is given (a developer signing a run of their own clone)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# A hosted remote only: https://github.com/owner/name(.git), git@github.com:owner/name(.git),
# ssh://git@host/owner/name. A local path or file:// remote (a clone of a clone) names no repository.
_OWNER_NAME = re.compile(
    r"^(?:(?:https?|ssh|git)://(?:[^@/]+@)?[^/:]+(?::\d+)?/|[^@/:]+@[^/:]+:)"
    r"([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


def repo_of_origin(where: Path) -> str | None:
    """`owner/name` of the `origin` remote of the git repository around `where`; None when there is no git,
    no repository, no origin, or a URL that does not end in owner/name."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(
            [git, "-C", str(where), "remote", "get-url", "origin"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _OWNER_NAME.search(done.stdout.strip()) if done.returncode == 0 else None
    return f"{match.group(1)}/{match.group(2)}" if match else None
