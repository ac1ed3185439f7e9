"""Real users for the hostile tests that need code under test to run as someone other than root.

Two things stand in the way on a developer's machine or a CI runner (both run the tests as root): the test's
temporary directories are private to root, and the interpreter may live under root's private home (pyenv in
/root), where no other user can run it. So:

- `make_open_dir` makes a temporary directory every user can enter (and nothing else under it is shared);
- `shared_interpreter_command` is a command prefix that runs a command in a mount namespace of its own where every
  private directory above the interpreter is replaced by a world-searchable tmpfs holding just the
  interpreter's tree (bind-mounted, read-only as before: root-owned files stay root's). This is the machine
  as the Action's image is: Python installed where every user can run it. Nothing outside the namespace
  changes.
- `make_user` creates a system user with `useradd` (the test needs real uids), once per name.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_SCRIPT = """
set -e
while [ "$1" != "--" ]; do
  blocked="$1"; keep="$2"; stash="$3"; shift 3
  mount --bind "$blocked/$keep" "$stash"
  mount -t tmpfs -o mode=0755 tmpfs "$blocked"
  mkdir -p "$blocked/$keep"
  mount --bind "$stash" "$blocked/$keep"
done
shift
exec "$@"
"""


def _searchable_by_all(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXOTH)


def _private_ancestors(path: Path) -> list[tuple[Path, str]]:
    """(the private directory, the name of the entry below it on the way to `path`) for each directory above
    `path` that other users cannot search."""
    path = path.resolve()
    found = []
    for parent in reversed(path.parents):
        if not _searchable_by_all(parent):
            below = path.relative_to(parent).parts[0]
            found.append((parent, below))
    return found


def make_open_dir() -> Path:
    """A temporary directory that every user can enter (the caller removes it)."""
    root_only()
    path = Path(tempfile.mkdtemp(prefix="gpuemu-hostile-"))
    path.chmod(0o755)
    return path


def shared_interpreter_command(stash_root: Path) -> list[str]:
    """The command prefix (see the module docstring); skips when mount namespaces are not available."""
    root_only()
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.decode(errors='replace').strip()}")
    specs: list[str] = []
    seen: set[Path] = set()
    for needed in (Path(sys.executable), Path(sys.base_prefix), Path(sys.prefix)):
        for blocked, keep in _private_ancestors(needed):
            if blocked in seen:
                continue
            seen.add(blocked)
            stash = Path(tempfile.mkdtemp(prefix="stash-", dir=stash_root))
            specs += [str(blocked), keep, str(stash)]
    return ["unshare", "--mount", "sh", "-c", _SCRIPT, "sh", *specs, "--"]


def root_only() -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root: the test creates users and runs code as them")


def make_user(name: str) -> tuple[int, int]:
    """(uid, gid) of system user `name`, created with useradd if it does not exist yet."""
    root_only()
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            pytest.skip("useradd is not installed")
        subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True, capture_output=True,
        )  # fmt: skip
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def chown_tree(top: Path, uid: int, gid: int) -> None:
    os.chown(top, uid, gid)
    for path in top.rglob("*"):
        os.chown(path, uid, gid, follow_symlinks=False)
