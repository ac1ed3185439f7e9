"""Moving arrays between the pool and a worker without JSON, base64 or pickled array data.

Inputs: the parent copies the whole memory region behind each input (its base buffer, so NaN-poisoned gaps
between rows and past the view come along) into a shared-memory arena, and the worker rebuilds the identical
view (same byte offset from an aligned region start, same shape, same byte strides, stride 0 included) over
that arena. Outputs: written by the worker into the arena behind the inputs (the parent copies them out);
when they do not fit, small ones ride inside the reply message and large ones follow it as raw frames.

Shared-memory names never outlive a case: the parent unlinks a segment as soon as the worker has answered
the first case that used it (or died trying), the memory itself staying mapped in both processes. The worker
attaches without registering with multiprocessing's resource tracker, which would otherwise unlink the
parent's segment (and warn) when the worker exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import secrets
import struct
import tempfile
from collections.abc import Mapping, Sequence
from multiprocessing import shared_memory
from multiprocessing.connection import Connection

import ml_dtypes
import numpy as np

from gpuemu_ci.backends.protocol import (
    HEADER_BYTES,
    LOADED_AT_OFFSET,
    RESCUE_OFFSET,
    STAGE_OFFSET,
    ArenaRef,
    ArrayDesc,
    OutputDesc,
    Stage,
)

ALIGN = 64  # every region starts on a cache-line boundary, like allocator memory does
SHM_PREFIX = "gpuemu_"
_ML_FLOATS = frozenset(
    np.dtype(getattr(ml_dtypes, n))
    for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(ml_dtypes, n)
)


@functools.lru_cache(maxsize=256)
def resolve_dtype(name: str) -> np.dtype:
    """The dtype for a name produced by `str(dtype)`, ml_dtypes names included."""
    if hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def is_float_like(dtype: np.dtype) -> bool:
    """Real floating dtypes, NumPy's and ml_dtypes' (bfloat16, float8)."""
    return dtype.kind == "f" or dtype in _ML_FLOATS


def _bounds(address: int, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, int]:
    """[lo, hi) byte addresses an array touches; empty arrays touch nothing."""
    if any(n == 0 for n in shape):
        return address, address
    lo = hi = address
    for n, s in zip(shape, strides, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + itemsize


def memory_region(arr: np.ndarray) -> tuple[int, int, int]:
    """(start address, byte length, byte offset of arr's first element) of the memory to ship for `arr`.

    That is the span of the allocation the view was cut from (found through `.base`), so out-of-view bytes a
    careless kernel might read (padding, the gaps of a strided view) travel with it. Falls back to the view's
    own span when the base cannot be trusted to contain it.
    """
    address = arr.__array_interface__["data"][0]
    own_lo, own_hi = _bounds(address, arr.shape, arr.strides, arr.itemsize)
    if own_hi == own_lo:  # empty view: nothing to copy
        return address, 0, 0
    root: object = arr
    while True:
        base = getattr(root, "base", None)
        if isinstance(base, np.ndarray):
            root = base
        elif base is not None and isinstance(getattr(base, "base", None), np.ndarray):
            root = base.base  # as_strided wraps its source in a helper object
        else:
            break
    lo, hi = own_lo, own_hi
    if root is not arr and isinstance(root, np.ndarray):
        r_addr = root.__array_interface__["data"][0]
        r_lo, r_hi = _bounds(r_addr, root.shape, root.strides, root.itemsize)
        if r_lo <= own_lo and own_hi <= r_hi:
            lo, hi = r_lo, r_hi
    return lo, hi - lo, address - lo


def _raw_bytes(address: int, nbytes: int) -> np.ndarray:
    """A read-only uint8 view of `nbytes` of process memory starting at `address`."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    buf = (ctypes.c_char * nbytes).from_address(address)
    view = np.frombuffer(memoryview(buf), dtype=np.uint8)
    view.flags.writeable = False
    return view


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_inputs(inputs: Mapping[str, np.ndarray]) -> tuple[tuple[ArrayDesc, ...], int, tuple[int, ...]]:
    """Place each input's region in the arena. Returns (descriptors, arena bytes needed, source addresses)."""
    descs: list[ArrayDesc] = []
    sources: list[int] = []
    offset = HEADER_BYTES
    for name, arr in inputs.items():
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"input {name!r} is {type(arr).__name__}, not a numpy array")
        if arr.dtype.hasobject:
            raise TypeError(f"input {name!r} has object dtype")
        lo, nbytes, data_offset = memory_region(arr)
        descs.append(
            ArrayDesc(
                name=name,
                dtype=dtype_name(arr.dtype),
                shape=tuple(arr.shape),
                strides=tuple(arr.strides),
                region_offset=offset,
                region_nbytes=nbytes,
                data_offset=data_offset,
            )
        )
        sources.append(lo)
        offset = _align(offset + nbytes)
    return tuple(descs), offset, tuple(sources)


def _shm_has_room(size: int) -> bool:
    """Whether /dev/shm (where Linux keeps POSIX shared memory) can hold `size` more bytes with room to
    spare; a container's default is 64 MiB, and touching pages past a full tmpfs kills with SIGBUS."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return True  # not Linux: no tmpfs to fill
    return size <= st.f_bavail * st.f_frsize // 2


class Arena:
    """Parent side of one shared segment: created, owned and unlinked by the parent. POSIX shared memory
    normally; a temporary file (page cache) when /dev/shm is too small for it."""

    def __init__(self, size: int) -> None:
        size = max(size, 1 << 20)
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self.name = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(6)}"
        self.size = size
        self.path: str | None = None
        self._shm: shared_memory.SharedMemory | None = None
        self._mm: mmap.mmap | None = None
        if _shm_has_room(size):
            self._shm = shared_memory.SharedMemory(name=self.name, create=True, size=size)
            assert self._shm.buf is not None
            buffer: memoryview | mmap.mmap = self._shm.buf
        else:
            fd, self.path = tempfile.mkstemp(prefix=self.name)
            try:
                os.ftruncate(fd, size)
                self._mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            buffer = self._mm
        self._linked = True
        self.u8: np.ndarray | None = np.frombuffer(buffer, dtype=np.uint8)

    def ref(self) -> ArenaRef:
        """What the worker needs to map this arena."""
        return ArenaRef(self.name, self.size, self.path)

    @property
    def linked(self) -> bool:
        return self._linked

    def write_inputs(
        self, inputs: Mapping[str, np.ndarray], descs: Sequence[ArrayDesc], sources: Sequence[int]
    ) -> None:
        assert self.u8 is not None
        for desc, address in zip(descs, sources, strict=True):
            src = _raw_bytes(address, desc.region_nbytes)
            self.u8[desc.region_offset : desc.region_offset + desc.region_nbytes] = src
        self.set_stage(Stage.IDLE)

    def stage(self) -> Stage:
        assert self.u8 is not None
        value = struct.unpack_from("<q", self.u8.data, STAGE_OFFSET)[0]
        try:
            return Stage(value)
        except ValueError:
            return Stage.IDLE

    def set_stage(self, stage: Stage) -> None:
        assert self.u8 is not None
        struct.pack_into("<qdqq", self.u8.data, STAGE_OFFSET, int(stage), 0.0, 0, 0)

    def loaded_at(self) -> float:
        """time.monotonic() at which the worker finished loading the case's targets (0.0: not yet)."""
        assert self.u8 is not None
        return struct.unpack_from("<d", self.u8.data, LOADED_AT_OFFSET)[0]

    def rescued(self) -> bytes | None:
        """Results the worker saved before its last user call (read after it died), or None."""
        assert self.u8 is not None
        offset, length = struct.unpack_from("<qq", self.u8.data, RESCUE_OFFSET)
        if length <= 0 or offset < HEADER_BYTES or offset + length > self.size:
            return None
        return self.u8[offset : offset + length].tobytes()

    def read_outputs(self, descs: Sequence[OutputDesc]) -> tuple[np.ndarray, ...]:
        """Copies of outputs the worker wrote into the arena."""
        assert self.u8 is not None
        out = []
        for d in descs:
            if d.arena_offset < HEADER_BYTES or d.arena_offset + d.nbytes > self.size:
                raise EOFError(f"output at {d.arena_offset} (+{d.nbytes}) lies outside the arena")
            raw = self.u8[d.arena_offset : d.arena_offset + d.nbytes].copy()
            out.append(raw.view(resolve_dtype(d.dtype)).reshape(d.shape))
        return tuple(out)

    def unlink(self) -> None:
        """Remove the segment's name (the memory stays mapped while anyone has it)."""
        if not self._linked:
            return
        self._linked = False
        with contextlib.suppress(FileNotFoundError):
            if self._shm is not None:
                self._shm.unlink()
            elif self.path is not None:
                os.unlink(self.path)

    def close(self) -> None:
        self.unlink()
        self.u8 = None  # drop the exported buffer before closing the mapping
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None


# ---- worker side ---------------------------------------------------------------------------------------


def attach(ref: ArenaRef) -> mmap.mmap:
    """Map the parent's segment without telling the resource tracker (the parent owns it)."""
    if ref.path is not None:
        fd = os.open(ref.path, os.O_RDWR)
        try:
            return mmap.mmap(fd, ref.size)
        finally:
            os.close(fd)
    import _posixshmem  # what multiprocessing.shared_memory itself uses on POSIX (3.10 to 3.14)

    fd = _posixshmem.shm_open("/" + ref.name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, ref.size)
    finally:
        os.close(fd)


def view_input(buffer: mmap.mmap | np.ndarray, desc: ArrayDesc) -> np.ndarray:
    """Rebuild the caller's view over the arena: same shape, byte strides and offset into its region."""
    dtype = resolve_dtype(desc.dtype)
    if desc.region_nbytes == 0:
        return np.lib.stride_tricks.as_strided(np.empty(0, dtype), desc.shape, desc.strides)
    return np.ndarray(
        desc.shape,
        dtype=dtype,
        buffer=buffer,
        offset=desc.region_offset + desc.data_offset,
        strides=desc.strides,
    )


def write_stage(u8: np.ndarray, stage: Stage) -> None:
    struct.pack_into("<q", u8.data, STAGE_OFFSET, int(stage))


def write_loaded_at(u8: np.ndarray, when: float) -> None:
    struct.pack_into("<d", u8.data, LOADED_AT_OFFSET, when)


def write_rescue(u8: np.ndarray, start: int, blob: bytes) -> int | None:
    """Save `blob` in the arena at `start` (64-byte aligned) for the parent to read if we die; returns where
    it ends, or None when it does not fit. The length is written last: a half-written blob is never read."""
    start = _align(start)
    if start + len(blob) > u8.size:
        return None
    struct.pack_into("<qq", u8.data, RESCUE_OFFSET, 0, 0)
    u8[start : start + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    struct.pack_into("<qq", u8.data, RESCUE_OFFSET, start, len(blob))
    return start + len(blob)


def span(arrays: Sequence[np.ndarray]) -> int:
    """Arena bytes `place_outputs` needs for these arrays (each aligned)."""
    return sum(_align(a.nbytes) for a in arrays)


def place_outputs(
    u8: np.ndarray, start: int, arrays: Sequence[np.ndarray]
) -> tuple[list[OutputDesc], int] | None:
    """Write C-contiguous arrays into the arena from `start`: (descriptors, end), or None if they do not
    fit."""
    offsets = []
    cursor = _align(start)
    for arr in arrays:
        offsets.append(cursor)
        cursor = _align(cursor + arr.nbytes)
    if cursor > u8.size:
        return None
    descs = []
    for arr, offset in zip(arrays, offsets, strict=True):
        if arr.nbytes:
            u8[offset : offset + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        descs.append(OutputDesc(dtype_name(arr.dtype), tuple(arr.shape), arr.nbytes, offset))
    return descs, cursor


# ---- output frames --------------------------------------------------------------------------------------


INLINE_LIMIT = 256 * 1024  # outputs up to this many bytes in total ride inside the reply message
_DTYPE_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype) -> str:
    """str(dtype), cached (NumPy computes it slowly)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def describe(arr: np.ndarray) -> OutputDesc:
    return OutputDesc(dtype=dtype_name(arr.dtype), shape=tuple(arr.shape), nbytes=arr.nbytes)


def pack_inline(arrays: Sequence[np.ndarray]) -> bytes:
    """Small outputs as one byte string (C order, concatenated)."""
    return b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)


def unpack_inline(payload: bytes, descs: Sequence[OutputDesc]) -> tuple[np.ndarray, ...]:
    """Writable arrays (copies) from `pack_inline` bytes."""
    out: list[np.ndarray] = []
    offset = 0
    for desc in descs:
        if offset + desc.nbytes > len(payload):
            raise EOFError("inline output payload is shorter than its descriptors")
        flat = np.frombuffer(payload, dtype=np.uint8, count=desc.nbytes, offset=offset)
        out.append(flat.copy().view(resolve_dtype(desc.dtype)).reshape(desc.shape))
        offset += desc.nbytes
    return tuple(out)


def send_arrays(conn: Connection, arrays: Sequence[np.ndarray]) -> None:
    """One raw frame per array (C order); the receiver knows shapes from the reply."""
    for arr in arrays:
        arr = np.ascontiguousarray(arr)
        conn.send_bytes(arr.reshape(-1).view(np.uint8).data if arr.size else b"")


def recv_arrays(conn: Connection, descs: Sequence[OutputDesc]) -> tuple[np.ndarray, ...]:
    """Receive frames straight into fresh writable buffers (one copy, by the kernel)."""
    out: list[np.ndarray] = []
    for desc in descs:
        buf = bytearray(desc.nbytes)
        got = conn.recv_bytes_into(buf) if desc.nbytes else len(conn.recv_bytes())
        if got != desc.nbytes:
            raise EOFError(f"output frame has {got} bytes, expected {desc.nbytes}")
        out.append(np.frombuffer(buf, dtype=resolve_dtype(desc.dtype)).reshape(desc.shape))
    return tuple(out)
