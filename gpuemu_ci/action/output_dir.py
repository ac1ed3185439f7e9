"""The Action's output directory, which code under test can write to: made sure of before the code runs, checked
again after, and never followed through a symbolic link.

The Action runs as root. Were `gpuemu-out` (or a directory above it in the workspace) a symbolic link, to a
directory of root's, then giving it to the children's user, writing results into it and handing it to the
workspace's owner would all act on that other directory. So: a link anywhere from the workspace down to the
output directory is refused before anything runs (`checked`); the directory's identity is pinned then
(`PinnedDir`), and after the code under test is done (and everything it started is dead) nothing is written
or handed over unless the same directory is still there, at the same real path. Handing over changes owners
with `lchown`, walks without following links, and skips hard links to files elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.errors import InfraError, UsageError


def checked(directory: Path, workspace: Path, what: str) -> Path:
    """`directory` (absolute, not yet resolved) as a real path; a UsageError naming `what` (e.g. "input
    output_dir: gpuemu-out") when a component of it below the workspace, or the directory itself, is a
    symbolic link, or when it is the workspace itself (which would give the whole checkout away)."""
    root = workspace.resolve()
    absolute = Path(os.path.normpath(directory))
    try:
        below = absolute.relative_to(root).parts
        start = root
    except ValueError:
        below, start = (absolute.name,), absolute.parent
    if not below:
        raise UsageError(f"{what} is the workspace itself; name a directory inside it")
    current = start
    for part in below:
        current = current / part
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(os.lstat(current).st_mode):
                raise UsageError(
                    f"{what} is or passes through a symbolic link ({current.name}); the Action writes, and gives "
                    "to other users, only real directories"
                )
    return start.joinpath(*below).resolve()


@dataclass(frozen=True)
class PinnedDir:
    """A directory as it was before code under test ran: its real path and its inode."""

    path: Path
    device: int
    inode: int

    @classmethod
    def pin(cls, path: Path) -> PinnedDir:
        """Records the directory's identity (device, inode) now; InfraError when `path` is not a directory (a
        link to one counts as not)."""
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise InfraError(f"the output directory {path} is not a directory")
        return cls(path, info.st_dev, info.st_ino)

    def intact(self) -> bool:
        """Whether the same directory is still at the same real path (not a link, not another directory)."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return False
        same = stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) == (self.device, self.inode)
        return same and Path(os.path.realpath(self.path)) == self.path

    def check(self, shown: str) -> None:
        """Raises InfraError when the directory was replaced since it was pinned (`shown` is its path as the
        user gave it)."""
        if not self.intact():
            raise InfraError(
                f"the output directory {shown} was replaced while the code under test ran (by a symbolic link or "
                "another directory); nothing was written into it or handed over through it"
            )


def lchown_tree(top: Path, uid: int, gid: int) -> None:
    """Give `top` and everything below it to `uid`:`gid` without following a link: links are changed
    themselves and not descended into, and a file with other hard links (one that lives elsewhere too) is
    left alone."""
    try:
        if stat.S_ISLNK(os.lstat(top).st_mode):
            return
        os.chown(top, uid, gid, follow_symlinks=False)
    except OSError:
        return
    for root, dirs, files in os.walk(top, followlinks=False):
        for name in (*dirs, *files):
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                    continue
                os.chown(path, uid, gid, follow_symlinks=False)


def hand_over(directory: Path, workspace: Path, pinned: PinnedDir | None = None) -> None:
    """Docker actions run as root: give the outputs to the workspace's owner so later steps can touch them.
    Nothing when `directory` is a link, or is no longer the directory `pinned` before code under test ran."""
    if not hasattr(os, "chown") or os.geteuid() != 0:
        return
    try:
        if stat.S_ISLNK(os.lstat(directory).st_mode) or not stat.S_ISDIR(os.lstat(directory).st_mode):
            return
    except OSError:
        return
    if pinned is not None and not (pinned.intact() and Path(os.path.realpath(directory)) == pinned.path):
        return
    owner = workspace.stat()
    try:  # an output_dir like out/gpuemu also made `out`, which later steps must be able to clean
        parts = Path(os.path.realpath(directory)).relative_to(workspace.resolve()).parts
    except ValueError:
        parts = ()
    for i in range(1, len(parts)):
        with contextlib.suppress(OSError):
            os.chown(workspace.joinpath(*parts[:i]), owner.st_uid, owner.st_gid, follow_symlinks=False)
    lchown_tree(directory, owner.st_uid, owner.st_gid)
