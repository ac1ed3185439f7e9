"""`sign` outside GitHub Actions takes the repository from the clone's origin remote, and only from a hosted one:
a clone of a local clone (origin a path) names no repository, so the usual error asks for --repo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuemu_ci.attest.origin import repo_of_origin


@pytest.mark.parametrize(
    ("url", "repo"),
    [
        ("https://github.com/owner/name.git", "owner/name"),
        ("git@github.com:owner/name.git", "owner/name"),
        ("ssh://git@github.example:2222/team/kernels", "team/kernels"),
        ("/home/someone/gpuemu-ci", None),
        ("file:///srv/git/owner/name.git", None),
    ],
)
def test_the_origin_remote_names_the_repository(tmp_path: Path, url: str, repo: str | None) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", url], check=True)
    assert repo_of_origin(tmp_path) == repo


def test_no_repository_or_no_origin_is_none(tmp_path: Path) -> None:
    assert repo_of_origin(tmp_path) is None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert repo_of_origin(tmp_path) is None
