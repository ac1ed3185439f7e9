"""Files the gate writes and the untrusted files it reads: atomic writes, and reads with a size cap that refuse
anything but a regular file (a FIFO or /dev/zero would otherwise hang or fill memory)."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO, NoReturn

from gpuemu_ci.errors import GpuemuError, InfraError, UsageError

MAX_DOCUMENT_BYTES = 256 << 20  # results.json, baselines, reports: far above any real document
MAX_HASHED_BYTES = 4 << 30  # a file whose digest is checked (verify --artifact)
# What the output directory must be able to take before a run starts: results.json and a few snapshots.
OUTPUT_PROBE_BYTES = 1 << 20
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# A path that cannot be used is the caller's to fix (exit 2); any other failure (no room, an I/O error) is the
# machine's (exit 3). One table for every command, so that a full disk is exit 3 whichever command met it.
USAGE_ERRNOS = frozenset(
    {errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.ELOOP,
     errno.EROFS, errno.EEXIST, errno.EINVAL}
)  # fmt: skip


def is_callers_fault(exc: OSError) -> bool:
    """Whether an OSError is the caller's to fix (a path that cannot be used: exit 2), not the machine's."""
    return exc.errno in USAGE_ERRNOS


def cannot_write(path: Path, exc: OSError) -> GpuemuError:
    """A failed write of `path` as the error it is: a path that cannot be written is a UsageError (exit 2); a full
    disk, a quota, a file size limit or an I/O error is an InfraError (exit 3)."""
    text = f"cannot write {path}: {exc.strerror or exc}"
    return UsageError(text) if is_callers_fault(exc) else InfraError(text)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, exclusive: bool = False) -> None:
    """Write `data` to `path` through a temporary file in the same directory, so a reader never sees half a
    file. The temporary file is created private (0600, as mkstemp does) and given `mode` before it becomes
    `path`, so a secret is never readable by others, not even for a moment. `exclusive`: refuse (with
    FileExistsError) when `path` exists, instead of replacing it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode & ~_umask())
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            os.link(temp, path)  # atomic create-if-absent: fails when path exists
            os.unlink(temp)
        else:
            os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _open_regular(path: Path, what: str, limit: int) -> BinaryIO:
    """`path` opened for reading when it is a regular file of at most `limit` bytes (opened without blocking,
    so a FIFO cannot hang the open); a UsageError (exit 2) naming `what` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UsageError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    handle = os.fdopen(fd, "rb")
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        handle.close()
        raise UsageError(f"{what} {path} is not a regular file")
    if info.st_size > limit:
        handle.close()
        raise UsageError(f"{what} {path} is {info.st_size:,} bytes; more than the {limit:,} read at most")
    return handle


def read_bounded(path: Path, what: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; a UsageError (exit 2) naming `what` otherwise."""
    with _open_regular(path, what, limit) as handle:
        return _read_capped(handle, path, what, limit)


def _read_capped(handle: BinaryIO, path: Path, what: str, limit: int) -> bytes:
    # As much as the file holds (a read of `limit` bytes would reserve them all up front), then whatever it
    # grew by since, up to the cap.
    data = handle.read(os.fstat(handle.fileno()).st_size + 1)
    while len(data) <= limit and (more := handle.read(min(1 << 20, limit + 1 - len(data)))):
        data += more
    if len(data) > limit:
        raise UsageError(f"{what} {path} grew past the {limit:,} bytes read at most")
    return data


class NotBeneath(UsageError):
    """`read_beneath` refused a file: missing, a link on the way, not a regular file, or another user's."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def read_beneath(
    root: Path,
    relative: Path | str,
    what: str,
    *,
    limit: int = MAX_DOCUMENT_BYTES,
    owners: Collection[int] | None = None,
) -> bytes:
    """The bytes of the regular file `relative` below the directory `root`, reached without following any
    symbolic link: each directory is opened from the one above it, and the file itself, with O_NOFOLLOW. It
    must be owned by one of `owners` (when given) and hold at most `limit` bytes. What a process that holds a
    secret reads from a place that code under test could write (the Action, after the suite ran): a link
    planted there would otherwise make it read, as root, a file of root's. NotBeneath (exit 2) otherwise."""
    parts = Path(relative).parts
    shown = root / relative
    if not parts or Path(relative).is_absolute() or ".." in parts:
        raise NotBeneath(f"{what} {shown} is not a path inside {root}")
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise NotBeneath(f"cannot read {what} {shown}: {exc.strerror}", missing=True) from None
    try:
        for part in parts[:-1]:
            step = os.open(part, flags | os.O_DIRECTORY, dir_fd=current)
            os.close(current)
            current = step
        fd = os.open(parts[-1], flags | getattr(os, "O_NONBLOCK", 0), dir_fd=current)
    except FileNotFoundError:
        raise NotBeneath(f"{what} not found: {shown}", missing=True) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotBeneath(f"{what} {shown} is, or passes through, a symbolic link: not read") from None
        raise NotBeneath(f"cannot read {what} {shown}: {exc.strerror}") from None
    finally:
        os.close(current)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotBeneath(f"{what} {shown} is not a regular file: not read")
    with os.fdopen(fd, "rb") as handle:
        if owners is not None and info.st_uid not in owners:
            raise NotBeneath(
                f"{what} {shown} belongs to uid {info.st_uid}, not to whoever wrote it: not read"
            )
        if info.st_size > limit:
            raise NotBeneath(
                f"{what} {shown} is {info.st_size:,} bytes; more than the {limit:,} read at most"
            )
        return _read_capped(handle, shown, what, limit)


def sha256_of_file(path: Path, what: str, limit: int = MAX_HASHED_BYTES) -> str:
    """The sha256 (hex) of a regular file of at most `limit` bytes, read in chunks; a UsageError otherwise."""
    digest = hashlib.sha256()
    total = 0
    with _open_regular(path, what, limit) as handle:
        while chunk := handle.read(1 << 20):
            total += len(chunk)
            if total > limit:
                raise UsageError(f"{what} {path} grew past the {limit:,} bytes read at most")
            digest.update(chunk)
    return digest.hexdigest()


def check_output_dir(path: Path, what: str = "output directory") -> None:
    """Create `path` when needed and prove that it takes files (a megabyte, written and synced), so that a
    read-only or full directory is found before a run, not after it. A read-only or unusable directory is a
    UsageError (exit 2); a full disk an InfraError (exit 3)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".gpuemu-probe.")
    except OSError as exc:
        _refuse(path, what, exc)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"\0" * OUTPUT_PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        _refuse(path, what, exc)
    finally:
        Path(probe).unlink(missing_ok=True)


def _refuse(path: Path, what: str, exc: OSError) -> NoReturn:
    reason = exc.strerror or str(exc)
    if exc.errno in _NO_SPACE:
        raise InfraError(
            f"the {what} {path} has no room ({reason}): results.json could not be written; nothing was run"
        ) from None
    raise UsageError(f"the {what} {path} cannot take files ({reason}); nothing was run") from None
