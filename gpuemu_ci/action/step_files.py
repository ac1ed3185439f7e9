"""The step's file commands (`GITHUB_ENV`, `GITHUB_PATH`, `GITHUB_OUTPUT`, `GITHUB_STATE`, `GITHUB_STEP_SUMMARY`)
and its event payload (`GITHUB_EVENT_PATH`): out of reach of code under test, and holding only the Action's own
lines when the runner reads them.

On a GitHub-hosted runner the files, and the directories they are in, belong to the runner's user, uid 1001,
who is also the workspace's owner and so the user code under test runs as. A line appended to `GITHUB_ENV`
(`LD_PRELOAD=...`) or `GITHUB_PATH` would reach every later step of the job; one in `GITHUB_OUTPUT`, the
step's outputs; an edited event payload, every later step that reads it. Removing the variables from the
children's environment does not hide the files, whose names the runner's layout gives away. So:

- `hold`, before any code under test starts: each file is opened (without following a link, by its directory,
  which is opened too), its identity (device, inode, owner, mode) and its content recorded;
- `protect`: each is given to an owner and a mode that the children's user cannot write (root, read-only, when
  the children run as another uid; uid `nobody` when they run as root without capabilities, who would
  otherwise own it). The Action running unprivileged, as the children's own user, cannot do this; there the
  next step is what stands;
- `restore`, once everything the code under test started is dead: a file that is no longer the same inode with
  the same content (written, replaced, renamed away, linked) is put back as it was, and a warning says so;
- `commit`, when the step ends: the Action's own lines (outputs, summary) are appended to what each file held
  before, in a file re-created by rename in the held directory; owners and modes as they were.

Nothing here ever follows a link: the Action runs as root, and a link planted where a file was would otherwise
make it write through to a file of root's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuemu_ci.errors import InfraError

COMMAND_FILES = ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")
EVENT_FILE = "GITHUB_EVENT_PATH"
HELD_VARIABLES = (*COMMAND_FILES, EVENT_FILE)
MAX_HELD_BYTES = 64 << 20  # an event payload is at most 25 MB; a step's command files start empty
NOBODY = 65534
_READ_ONLY = 0o444


@dataclass
class HeldFile:
    """One file as it was before code under test ran, with the lines the Action adds to it."""

    variable: str
    shown: str  # the path as the runner gave it
    directory: int  # descriptor of the directory it is in
    name: str
    handle: int | None  # descriptor of the file itself (None: it did not exist)
    device: int = 0
    inode: int = 0
    mode: int = 0o644
    uid: int = -1
    gid: int = -1
    directory_id: tuple[int, int] = (0, 0)
    content: bytes = b""
    added: list[bytes] = field(default_factory=list)
    protected: bool = False
    tampered: str = ""  # what was found changed, when something was

    def identity_at_path(self) -> os.stat_result | None:
        """The stat of what its path names now (not following a link), or None when nothing is there."""
        try:
            return os.stat(self.name, dir_fd=self.directory, follow_symlinks=False)
        except OSError:
            return None

    def intact(self) -> str:
        """ "" when the path still holds the held inode with the held content; else what changed."""
        if not _same_directory(self):
            return "its directory was replaced"
        now = self.identity_at_path()
        if self.handle is None:
            return "" if now is None else "a file was created where there was none"
        if now is None:
            return "it was removed or renamed"
        if stat.S_ISLNK(now.st_mode):
            return "it was replaced by a symbolic link"
        if (now.st_dev, now.st_ino) != (self.device, self.inode):
            return "it was replaced by another file"
        if _read_all(self.handle, self.shown) != self.content:
            return "it was written to"
        return ""


class StepFiles:
    """The held files of one step (see the module docstring)."""

    def __init__(self, held: dict[str, HeldFile]) -> None:
        self.held = held

    @classmethod
    def hold(cls, env: Mapping[str, str]) -> StepFiles:
        """Opens the runner's command files (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, ...) and the event file named
        in `env` before code under test runs, so what the Action writes goes to those files even if code under
        test replaces their paths."""
        held = {}
        for variable in HELD_VARIABLES:
            path = env.get(variable, "")
            if path:
                held[variable] = _hold(variable, path)
        return cls(held)

    def path_of(self, variable: str) -> str | None:
        """The path the runner gave for `variable`, or None when it was not set."""
        held = self.held.get(variable)
        return None if held is None else held.shown

    def used(self, variable: str) -> int:
        """Bytes the file holds now, with the Action's own lines counted (for the summary's size limit)."""
        held = self.held.get(variable)
        return 0 if held is None else len(held.content) + sum(len(chunk) for chunk in held.added)

    def add(self, variable: str, data: bytes) -> bool:
        """Queue the Action's own `data` for the file; False when the runner gave no such file."""
        held = self.held.get(variable)
        if held is None:
            return False
        held.added.append(data)
        return True

    def protect(self, children_uid: int) -> None:
        """Make every held file unwritable by `children_uid` (this process must be root, and they another user
        or root without capabilities). Nothing to do for a file that did not exist: `restore` removes one a
        child creates."""
        if os.geteuid() != 0:
            return
        owner = NOBODY if children_uid == 0 else 0
        for held in self.held.values():
            if held.handle is None:
                continue
            try:
                os.fchown(held.handle, owner, -1)
                os.fchmod(held.handle, _READ_ONLY)
            except OSError as exc:
                raise InfraError(
                    f"could not take {held.variable} ({held.shown}) out of the code under test's reach: "
                    f"{exc.strerror}"
                ) from None
            held.protected = True

    def restore(self) -> list[str]:
        """Put back every file the code under test changed, as it was; returns what was found changed, one
        sentence each. Call it once nothing the code under test started is alive."""
        found = []
        for held in self.held.values():
            what = held.intact()
            if what:
                held.tampered = what
                found.append(f"{held.variable} ({held.shown}): {what}")
                _rewrite(held, with_added=False)
            elif held.protected:
                _give_back(held)
        return found

    def commit(self) -> None:
        """Write the Action's own lines after what each file held (re-created, so nothing else's lines can be
        in it); owners and modes as they were."""
        for held in self.held.values():
            if held.added:
                _rewrite(held, with_added=True)
            elif held.protected:
                _give_back(held)

    def close(self) -> None:
        """Closes every descriptor held; safe to call more than once."""
        for held in self.held.values():
            for fd in (held.handle, held.directory):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        self.held = {}


def _hold(variable: str, path: str) -> HeldFile:
    parent, name = os.path.split(os.path.abspath(path))
    if not name:
        raise InfraError(f"{variable}={path!r} names no file")
    try:
        directory = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InfraError(f"cannot open the directory of {variable} ({path}): {exc.strerror}") from None
    info = os.fstat(directory)
    held = HeldFile(variable, path, directory, name, None, directory_id=(info.st_dev, info.st_ino))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        held.handle = os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        return held  # created when the Action writes to it
    except OSError as exc:  # ELOOP: a symbolic link where the runner's file should be
        os.close(directory)
        raise InfraError(f"{variable} ({path}) cannot be used: {exc.strerror}") from None
    info = os.fstat(held.handle)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_HELD_BYTES:
        os.close(held.handle)
        os.close(directory)
        raise InfraError(f"{variable} ({path}) is not a regular file of at most {MAX_HELD_BYTES:,} bytes")
    held.device, held.inode = info.st_dev, info.st_ino
    held.mode, held.uid, held.gid = stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid
    held.content = _read_all(held.handle, path)
    return held


def _read_all(fd: int, shown: str) -> bytes:
    size = os.fstat(fd).st_size
    if size > MAX_HELD_BYTES:
        return b"\0" * (MAX_HELD_BYTES + 1)  # differs from anything held: it was written to
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
        if offset > MAX_HELD_BYTES:
            break
    return b"".join(chunks)


def _same_directory(held: HeldFile) -> bool:
    """Whether the runner's path to the directory still leads to the directory held (not to one put in its
    place): what the runner will read is what is there."""
    try:
        info = os.stat(os.path.dirname(os.path.abspath(held.shown)))
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == held.directory_id


def _rewrite(held: HeldFile, *, with_added: bool) -> None:
    """Re-create the file as it was (`with_added`: plus the Action's lines): a new inode put in place by rename,
    which replaces a file, or a link, at that name without following it. A file that did not exist and gets no
    line is removed again."""
    if not _same_directory(held):
        raise InfraError(
            f"the directory of {held.variable} ({held.shown}) was replaced while the code under test ran; the "
            "Action cannot put the file back where the runner will read it, so the step fails"
        )
    data = held.content + (b"".join(held.added) if with_added else b"")
    if held.handle is None and not data:
        _clear_name(held)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(held.name, dir_fd=held.directory)
        return
    temporary = f".{held.name}.gpuemu-{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, held.mode if held.handle is not None else 0o644, dir_fd=held.directory)
        try:
            _write_all(fd, data)
            if held.handle is not None and os.geteuid() == 0:
                os.fchown(fd, held.uid, held.gid)
            os.fchmod(fd, held.mode if held.handle is not None else 0o644)
            os.fsync(fd)
        finally:
            os.close(fd)
        _clear_name(held)
        os.rename(temporary, held.name, src_dir_fd=held.directory, dst_dir_fd=held.directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=held.directory)
        raise InfraError(f"could not write {held.variable} ({held.shown}): {exc.strerror}") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _clear_name(held: HeldFile) -> None:
    """A directory put where the file was (rename cannot replace it by a file): removed, without following."""
    info = held.identity_at_path()
    if info is not None and stat.S_ISDIR(info.st_mode):
        shutil.rmtree(held.name, dir_fd=held.directory)


def _give_back(held: HeldFile) -> None:
    """The untouched file's own owner and mode again (`protect` changed them)."""
    if held.handle is None:
        return
    with contextlib.suppress(OSError):
        os.fchown(held.handle, held.uid, held.gid)
        os.fchmod(held.handle, held.mode)
    held.protected = False
