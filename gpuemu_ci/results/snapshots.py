"""Input snapshots: the exact inputs of a failing case as an .npz named by its hash, with the metadata to rebuild
and replay the case."""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from gpuemu_ci.errors import InfraError, UsageError
from gpuemu_ci.files import atomic_write, read_bounded
from gpuemu_ci.results.base import check_seed
from gpuemu_ci.results.codec import encode_extra

SNAPSHOT_DIR = "snapshots"


def clear_snapshots(out_dir: Path) -> None:
    """Remove the snapshots an earlier run left in `out_dir`: results.json names only this run's."""
    folder = out_dir / SNAPSHOT_DIR
    if folder.is_dir():
        for pattern in (
            "*.npz",
            "*.png",
        ):  # the inputs, and the error maps beside them (results/error_map.py)
            for path in folder.glob(pattern):
                path.unlink(missing_ok=True)


MAX_CASE_SNAPSHOT_BYTES = (
    256 << 20
)  # a failing case's inputs larger than this replay from the seed, not a file


def write_case_snapshot(
    out_dir: Path, logical: Mapping[str, np.ndarray], metadata: dict[str, Any]
) -> tuple[str | None, str | None]:
    """The snapshot of a case that did not pass: (its path under `out_dir`, None), (None, why it could not be
    written), or (None, None) for inputs over MAX_CASE_SNAPSHOT_BYTES (a large case's gigabytes are not
    copied to disk: its seed replays it). A full or read-only disk costs the snapshot, never the verdict."""
    if sum(a.nbytes for a in logical.values()) > MAX_CASE_SNAPSHOT_BYTES:
        return None, None
    try:
        return write_snapshot(out_dir, dict(logical), metadata), None
    except OSError as exc:
        return None, f"{exc.strerror or exc}"


def write_snapshot(out_dir: Path, arrays: dict[str, np.ndarray], metadata: dict[str, Any]) -> str:
    """An .npz of the case's logical inputs plus its metadata; named by the hash of its content. Returns the
    path relative to out_dir."""
    payload: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for name, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        dtypes[name] = contiguous.dtype.name if contiguous.dtype.name != "bfloat16" else "bfloat16"
        # bfloat16 is stored as its raw uint16 bits: .npz has no bfloat16 type.
        payload[f"input:{name}"] = contiguous.view(np.uint16) if dtypes[name] == "bfloat16" else contiguous
    meta = dict(metadata, input_dtypes=dtypes)
    payload["__metadata__"] = np.frombuffer(
        json.dumps(meta, default=encode_extra).encode("utf-8"), dtype=np.uint8
    )
    buffer = io.BytesIO()
    # Uncompressed: random mantissas barely compress (about 7%) and zlib costs 30 times the write; artifact
    # uploads compress anyway.
    np.savez(buffer, **payload)  # type: ignore[arg-type]  # numpy's stub types **kwds as its bool flag
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    relative = f"{SNAPSHOT_DIR}/{digest}.npz"
    atomic_write(out_dir / relative, data)
    return relative


MAX_SNAPSHOT_FILE_BYTES = 2 << 30  # a snapshot file is read whole; the gate never writes one near this
# What its members may inflate to, together (each one's size as the zip directory declares it, checked before
# anything is inflated): what a stored snapshot of the largest file holds. A deflated member of a few MB can
# declare gigabytes of zeros; reading one inflated it whole and the OOM killer ended replay, corpus add or the
# gate.
MAX_SNAPSHOT_INFLATED_BYTES = MAX_SNAPSHOT_FILE_BYTES
MAX_SNAPSHOT_METADATA_BYTES = 16 << 20  # JSON of a few kilobytes, written by `write_snapshot`
_NUMERIC_KINDS = frozenset("biufc")  # bool, ints, floats, complex: no objects, strings or structured types


class SnapshotLayout(msgspec.Struct, forbid_unknown_fields=True):
    """An input's memory layout as a snapshot records it (and the broadcast dim of a stride-0 one)."""

    layout: str
    broadcast_dim: int | None = None


class SnapshotMeta(msgspec.Struct):
    """The metadata of a snapshot, as written by `write_snapshot`; checked field by field on reading."""

    op: str
    case_seed: Annotated[int, msgspec.Meta(ge=0)]
    dtype: str
    mode: str
    size_class: str | None = None  # typical, boundary, tile or large (plan.model.SizeClass)
    dims: dict[str, Annotated[int, msgspec.Meta(ge=0)]] = {}
    kwargs: dict[str, Any] = {}
    layouts: dict[str, SnapshotLayout] = {}
    input_order: list[str] = []
    input_dtypes: dict[str, str] = {}
    strides: dict[str, list[int]] | None = None  # a capture of a real call (gpuemu_ci.shadow): its strides
    case_index: int | None = None
    master_seed: int | None = None
    generator_version: str | None = None

    def __post_init__(self) -> None:
        check_seed(self.case_seed, "case_seed")


def read_snapshot(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The inputs and metadata of a snapshot file, which may come from anywhere: a UsageError (exit 2) for
    anything but a regular .npz within the size cap whose members are plain numeric arrays, stored or
    deflated, each exactly as large as its header says, and whose metadata has the fields and types
    `write_snapshot` writes. Nothing is allocated before the headers are checked against the file."""
    import ml_dtypes

    what = f"snapshot {path}"
    data = read_bounded(path, "snapshot", MAX_SNAPSHOT_FILE_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            arrays: dict[str, np.ndarray] = {}
            meta_bytes: bytes | None = None
            for info in _members(archive):
                key = info.filename.removesuffix(".npy")
                array = _read_member(archive, info)
                if key == "__metadata__":
                    meta_bytes = array.tobytes()
                else:
                    arrays[key.split(":", 1)[1]] = array
        if meta_bytes is None:
            raise ValueError("it has no metadata")
        meta = msgspec.json.decode(meta_bytes, type=SnapshotMeta)  # the fields gpuemu-ci reads, checked
        raw = msgspec.json.decode(meta_bytes)  # returned whole: captures carry more than the checked fields
        if not isinstance(raw, dict):
            raise ValueError("its metadata is not an object")
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, msgspec.DecodeError, RecursionError) as exc:
        raise UsageError(f"{what} is not a readable gpuemu-ci snapshot: {exc}") from None
    except MemoryError:  # within the caps, but more than this machine has free
        raise InfraError(f"{what}: not enough memory to read its arrays") from None
    for name, dtype in meta.input_dtypes.items():
        if dtype == "bfloat16" and name in arrays:
            if arrays[name].dtype != np.uint16:
                raise UsageError(f"{what}: input {name!r} is bfloat16 but not stored as uint16 bits")
            arrays[name] = arrays[name].view(ml_dtypes.bfloat16)
    order = meta.input_order or list(arrays)
    missing = [name for name in order if name not in arrays]
    if missing:
        raise UsageError(f"{what} lists inputs {missing} that it does not hold")
    return {name: arrays[name] for name in order}, raw


def _members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The members read (`__metadata__.npy`, `input:*.npy`), after checking what they declare: stored or
    deflated, and, inflated, within the caps (nothing is inflated before)."""
    wanted = []
    for info in archive.infolist():
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(f"member {info.filename!r} uses compression method {info.compress_type}")
        key = info.filename.removesuffix(".npy")
        if info.filename.endswith(".npy") and (key == "__metadata__" or key.startswith("input:")):
            wanted.append(info)
    for info in wanted:
        if info.filename == "__metadata__.npy" and info.file_size > MAX_SNAPSHOT_METADATA_BYTES:
            raise ValueError(
                f"its metadata declares {info.file_size:,} bytes, over the {MAX_SNAPSHOT_METADATA_BYTES:,} read "
                "at most"
            )
    declared = sum(info.file_size for info in wanted)
    if declared > MAX_SNAPSHOT_INFLATED_BYTES:
        largest = max(wanted, key=lambda info: info.file_size)
        raise ValueError(
            f"its members declare {declared:,} bytes inflated (member {largest.filename!r}: {largest.file_size:,}, "
            f"from {largest.compress_size:,} stored), over the {MAX_SNAPSHOT_INFLATED_BYTES:,} read at most"
        )
    return wanted


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One .npy member, after checking its header: a numeric dtype and exactly the bytes the shape needs."""
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"member {info.filename!r} has .npy version {version}")
        if dtype.kind not in _NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None:
            raise ValueError(f"member {info.filename!r} holds {dtype}, not numbers")
        count = math.prod(shape)
        header = member.tell()
        if count * dtype.itemsize != info.file_size - header:
            raise ValueError(
                f"member {info.filename!r} claims shape {shape} of {dtype} ({count * dtype.itemsize:,} bytes) "
                f"but holds {info.file_size - header:,}"
            )
        raw = member.read(info.file_size - header)
    array = np.frombuffer(raw, dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C")
