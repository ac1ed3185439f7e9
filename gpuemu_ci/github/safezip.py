"""Unpack an untrusted zip archive (a downloaded artifact) without letting it escape its directory.

Artifacts are produced by code that ran in CI, possibly a fork's. Entries with absolute paths,
drive letters, backslashes or ``..`` are refused, as are symlinks, special files, encrypted and
duplicate entries. Only stored and deflated entries are read (what GitHub's artifact zips hold):
``zipfile`` inflates bzip2 and LZMA input without an output limit, so a kilobyte of it can fill
memory before any cap is checked, whereas deflate is inflated a bounded chunk at a time. Sizes are
capped on the bytes actually decompressed, not on the sizes the archive claims, so a zip bomb stops
at the cap.
"""

from __future__ import annotations

import re
import stat
import struct
import zipfile
from pathlib import Path, PurePosixPath

from gpuemu_ci.errors import InfraError

DEFAULT_MAX_ENTRIES = 10_000
# zipfile inflates deflate with a bound on the output of each call; bzip2, LZMA and the rest it does not.
ACCEPTED_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_CHUNK = 64 * 1024
_DRIVE = re.compile(r"^[A-Za-z]:")


class ArtifactError(InfraError):
    """An artifact could not be used."""


class ArtifactTooLargeError(ArtifactError):
    """The artifact, or one of its files, is over the size cap."""


class UnsafeArtifactError(ArtifactError):
    """The zip is corrupt or has an entry that could write outside the target directory."""


def extract_zip_safely(
    zip_path: Path,
    dest: Path,
    *,
    max_total_bytes: int,
    max_file_bytes: int,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> list[Path]:
    """Unpack ``zip_path`` into the new directory ``dest``; return the files written.

    Refuses (``UnsafeArtifactError``) absolute names, drive letters, backslashes, ``..``,
    symlinks and other special files, encrypted or duplicate entries; caps (``ArtifactTooLargeError``)
    the entry count and the decompressed bytes per file and in total.
    """
    _check_directory_size(zip_path, max_entries)
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UnsafeArtifactError(f"{zip_path.name} is not a readable zip archive: {exc}") from exc
    written: list[Path] = []
    with archive:
        infos = archive.infolist()
        if len(infos) > max_entries:
            raise ArtifactTooLargeError(
                f"the archive has {len(infos):,} entries, over the {max_entries:,} cap"
            )
        dest.mkdir(parents=True)
        root = dest.resolve()
        total = 0
        for info in infos:
            relative = _safe_member_path(info)
            target = root.joinpath(*relative.parts)
            if not target.resolve().is_relative_to(root):
                raise UnsafeArtifactError(f"archive entry {info.filename!r} resolves outside the target")
            try:
                (target if info.is_dir() else target.parent).mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # "a/b" after a file "a", or a file "a" after "a/"
                raise UnsafeArtifactError(
                    f"archive entry {info.filename!r} clashes with another entry"
                ) from exc
            if info.is_dir():
                continue
            total += _extract_member(archive, info, target, max_file_bytes, max_total_bytes - total)
            written.append(target)
    return written


_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
CENTRAL_BYTES_PER_ENTRY = 1024  # a directory entry is 46 bytes plus its name and extras: generous


def _check_directory_size(zip_path: Path, max_entries: int) -> None:
    """Refuse, before `zipfile` builds an object per entry, an archive whose end record declares more entries
    than `max_entries` or a central directory larger than they could need (zipfile reads the whole directory
    into memory, whatever count it claims)."""
    try:
        with zip_path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - (_EOCD.size + 0xFFFF)))
            tail = handle.read()
            at = tail.rfind(b"PK\x05\x06")
            if at < 0 or len(tail) - at < _EOCD.size:
                return  # not a zip: zipfile says so in its own words
            _, _, _, _, entries, directory, _, _ = _EOCD.unpack_from(tail, at)
            locator_at = at - _ZIP64_LOCATOR.size
            if locator_at >= 0 and tail[locator_at : locator_at + 4] == b"PK\x06\x07":
                _, _, offset, _ = _ZIP64_LOCATOR.unpack_from(tail, locator_at)
                handle.seek(offset)
                record = handle.read(_ZIP64_EOCD.size)
                if len(record) == _ZIP64_EOCD.size and record[:4] == b"PK\x06\x06":
                    fields = _ZIP64_EOCD.unpack(record)
                    entries, directory = fields[7], fields[8]
    except OSError as exc:
        raise UnsafeArtifactError(f"{zip_path.name} cannot be read: {exc.strerror or exc}") from exc
    if entries > max_entries or directory > max_entries * CENTRAL_BYTES_PER_ENTRY:
        raise ArtifactTooLargeError(
            f"the archive declares {entries:,} entries in a {directory:,}-byte directory, over the cap of "
            f"{max_entries:,} entries"
        )


def _safe_member_path(info: zipfile.ZipInfo) -> PurePosixPath:
    name = info.filename
    if not name or "\x00" in name or "\\" in name:
        raise UnsafeArtifactError(f"archive entry {name!r} has a forbidden character")
    if name.startswith("/") or _DRIVE.match(name):
        raise UnsafeArtifactError(f"archive entry {name!r} is an absolute path")
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if ".." in parts:
        raise UnsafeArtifactError(f"archive entry {name!r} climbs out of the target with '..'")
    if not parts:
        raise UnsafeArtifactError(f"archive entry {name!r} has an empty name")
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        what = "a symlink" if kind == stat.S_IFLNK else "a special file"
        raise UnsafeArtifactError(f"archive entry {name!r} is {what}")
    if info.flag_bits & 0x1:
        raise UnsafeArtifactError(f"archive entry {name!r} is encrypted")
    if info.compress_type not in ACCEPTED_METHODS and not info.is_dir():
        raise UnsafeArtifactError(
            f"archive entry {name!r} uses compression method {info.compress_type}; only stored and deflated "
            "entries are read (GitHub's artifacts use those)"
        )
    return PurePosixPath(*parts)


def _extract_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, max_file: int, budget: int
) -> int:
    limit = min(max_file, budget)
    size = 0
    try:
        with archive.open(info) as src, target.open("xb") as dst:
            while chunk := src.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    cap = "per-file" if max_file <= budget else "total"
                    raise ArtifactTooLargeError(
                        f"archive entry {info.filename!r} unpacks past the {cap} cap of {limit:,} bytes"
                    )
                dst.write(chunk)
    except FileExistsError as exc:
        raise UnsafeArtifactError(f"archive entry {info.filename!r} appears twice") from exc
    except (IsADirectoryError, NotADirectoryError) as exc:
        raise UnsafeArtifactError(f"archive entry {info.filename!r} clashes with another entry") from exc
    except OSError as exc:
        raise ArtifactError(f"cannot write archive entry {info.filename!r}: {exc.strerror or exc}") from exc
    except (zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
        raise UnsafeArtifactError(f"archive entry {info.filename!r} is corrupt: {exc}") from exc
    return size
