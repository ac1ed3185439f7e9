"""Who code under test may run as: a uid that can change nothing the Action's own process (which holds the
token) has loaded or will read, never root.

Two questions, answered from the mode bits of the real files:
- `first_writable`: can this uid change a file this process has loaded (a module, a shared library it has
  mapped) or replace one by renaming a directory above it? Python modules are read again when imported,
  and a shared library's pages are read from the file again after eviction, so either would run the writer's
  code in the token's process.
- `can_execute` / `can_enter`: can this uid run the interpreter and reach the workspace at all?

`dedicated_user` is the uid used when the workspace's owner cannot be used (root, or a user who can write
the installation): the system user `gpuemu-sandbox`, created with `useradd` when it does not exist, else a
fixed high uid without a passwd entry.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

SANDBOX_USER = "gpuemu-sandbox"
# Below 65534 (nobody), so that it exists in a container's default user namespace map (0-65535).
FALLBACK_UID = 64_999


def dedicated_user() -> tuple[int, int]:
    """(uid, gid) of the sandbox user, created when needed (this process is root)."""
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam(SANDBOX_USER)
        return entry.pw_uid, entry.pw_gid
    useradd = shutil.which("useradd") or next(
        (p for p in ("/usr/sbin/useradd", "/sbin/useradd") if os.access(p, os.X_OK)), None
    )
    if useradd is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", SANDBOX_USER],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
                check=False,
            )  # fmt: skip
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(SANDBOX_USER)
            return entry.pw_uid, entry.pw_gid
    return _free_id(FALLBACK_UID)


def _free_id(start: int) -> tuple[int, int]:
    """The highest uid at or below `start` that no user has, with the same number as its gid."""
    for number in range(start, 1000, -1):
        try:
            pwd.getpwuid(number)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(number)
            continue
        except KeyError:
            return number, number
    return start, start


def _allows(info: os.stat_result, uid: int, gid: int, owner_bit: int, group_bit: int, other_bit: int) -> bool:
    if uid == 0:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & owner_bit)
    if info.st_gid == gid:
        return bool(info.st_mode & group_bit)
    return bool(info.st_mode & other_bit)


def _search_path(path: Path, uid: int, gid: int) -> bool:
    try:
        return all(
            _allows(p.stat(), uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH) for p in path.parents
        )
    except OSError:
        return False


def can_execute(path: Path, uid: int, gid: int) -> bool:
    """Whether `uid` (group `gid`, no others) may run `path`: search permission on every directory above it
    and execute permission on the file itself."""
    try:
        target = path.resolve(strict=True)
        info = target.stat()
    except OSError:
        return False
    return _search_path(target, uid, gid) and _allows(
        info, uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH
    )


def can_enter(directory: Path, uid: int, gid: int) -> bool:
    """Whether `uid` may make `directory` its working directory (search permission on it and above)."""
    try:
        target = directory.resolve(strict=True)
        info = target.stat()
    except OSError:
        return False
    return _search_path(target, uid, gid) and _allows(
        info, uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH
    )


def loaded_files() -> set[Path]:
    """Every file this process has loaded: its modules' sources and bytecode, and every file it has mapped
    (the interpreter, its shared libraries and extension modules)."""
    found: set[Path] = set()
    for module in list(sys.modules.values()):
        for name in (
            getattr(module, "__file__", None),
            getattr(getattr(module, "__spec__", None), "cached", None),
        ):
            if isinstance(name, str) and os.path.isabs(name):
                found.add(Path(name))
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(" (deleted)"):
                found.add(Path(parts[5]))
    found.update(Path(entry) for entry in sys.path if entry and os.path.isabs(entry))
    return found


def package_files() -> set[Path]:
    """Every file of gpuemu-ci's own package (modules not imported yet, the report templates)."""
    import gpuemu_ci

    top = Path(gpuemu_ci.__file__).resolve().parent
    found = {top}
    for root, dirs, files in os.walk(top, followlinks=False):
        found.update(Path(root, name) for name in (*dirs, *files) if name != "__pycache__")
    return found


def first_writable(uid: int, gid: int, paths: set[Path] | None = None) -> Path | None:
    """A loaded file (or a directory above one) that `uid` could change or replace; None when there is none.
    Its owner can always change a file (chmod first). A directory with the sticky bit (/tmp) lets nobody
    replace another user's entries, so it does not count; a symbolic link is judged by what it points to."""
    checked: set[Path] = set()
    for path in sorted(paths if paths is not None else loaded_files() | package_files()):
        with contextlib.suppress(OSError):
            path = path.resolve()
        for candidate in (path, *path.parents):
            if candidate in checked:
                continue
            checked.add(candidate)
            try:
                info = candidate.lstat()
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            if info.st_uid == uid and uid != 0:
                return candidate
            if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX:
                continue
            if _allows(info, uid, gid, stat.S_IWUSR, stat.S_IWGRP, stat.S_IWOTH):
                return candidate
    return None
