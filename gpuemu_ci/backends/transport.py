"""The op's outputs crossing from the op's process to the judge's, once, through shared memory.

An arena is an anonymous shared-memory file (`memfd_create` on Linux; an unlinked temporary file elsewhere)
owned by the parent, which never maps it: it hands the file descriptor to the op's worker with the case, and
later to the judge's. The op's worker maps it only after the op returned, writes the outputs (C order, each
64-byte aligned), and unmaps it before replying; the judge maps it, copies the outputs out and unmaps it. No
name exists in /dev/shm, so nothing outlives the processes, whatever kills them.

Also here: the memory region an input view was cut from (its base allocation, gaps and padding included),
which the frameworks copy to a device and the op's worker checks for writes.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import tempfile
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from gpuemu_ci.backends.protocol import OutputDesc

ALIGN = 64  # every output starts on a cache-line boundary, like allocator memory does
MAX_NDIM = 64
_ML_FLOATS = frozenset(
    np.dtype(getattr(ml_dtypes, n))
    for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(ml_dtypes, n)
)


@functools.lru_cache(maxsize=256)
def resolve_dtype(name: str) -> np.dtype:
    """The dtype for a name produced by `str(dtype)`, ml_dtypes names included."""
    if hasattr(ml_dtypes, name):
        extension: np.dtype = np.dtype(getattr(ml_dtypes, name))
        return extension
    return np.dtype(name)


def is_float_like(dtype: np.dtype) -> bool:
    """Real floating dtypes, NumPy's and ml_dtypes' (bfloat16, float8)."""
    return dtype.kind == "f" or dtype in _ML_FLOATS


_DTYPE_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype) -> str:
    """str(dtype), cached (NumPy computes it slowly)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def span(arrays: Sequence[np.ndarray]) -> int:
    """Arena bytes `place_outputs` needs for these arrays (each aligned)."""
    return sum(_align(a.nbytes) for a in arrays)


# ---- the parent's side: arenas it owns but never maps ------------------------------------------------------


class Arena:
    """An anonymous shared-memory file; `fd` is handed to workers, which map it themselves."""

    def __init__(self, size: int) -> None:
        self.size = 0
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("gpuemu-arena", getattr(os, "MFD_CLOEXEC", 0))
        else:  # no memfd: a temporary file with no name left once it is open
            self.fd, path = tempfile.mkstemp(prefix="gpuemu-arena-")
            os.unlink(path)
        self.resize(size)

    def resize(self, size: int) -> None:
        """Give the arena at least `size` bytes (untouched pages cost no memory)."""
        size = max(size, 1 << 16)
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        os.ftruncate(self.fd, size)
        self.size = size

    def close(self) -> None:
        """Closes the arena's descriptor; safe to call more than once."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def check_outputs(descs: Sequence[OutputDesc], arena_size: int) -> None:
    """Raises ValueError unless every descriptor names a real array lying inside the arena (a worker's reply
    is not trusted)."""
    for desc in descs:
        try:
            dtype = resolve_dtype(desc.dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"output dtype {desc.dtype!r} is not a dtype: {exc}") from None
        if dtype.hasobject or dtype.itemsize == 0:
            raise ValueError(f"output dtype {desc.dtype!r} cannot cross processes")
        if len(desc.shape) > MAX_NDIM or any(n < 0 for n in desc.shape):
            raise ValueError(f"output shape {desc.shape} is not a shape")
        if desc.nbytes != math.prod(desc.shape) * dtype.itemsize:
            raise ValueError(
                f"output of shape {desc.shape} and dtype {desc.dtype} cannot have {desc.nbytes} bytes"
            )
        if desc.offset < 0 or desc.offset % ALIGN or desc.offset + desc.nbytes > arena_size:
            raise ValueError(f"output at {desc.offset} (+{desc.nbytes} bytes) lies outside the arena")


# ---- the workers' side -------------------------------------------------------------------------------------


def map_arena(fd: int, size: int) -> mmap.mmap:
    """Map an arena received from the parent, and close the descriptor (the mapping keeps it alive)."""
    try:
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def place_outputs(arena: mmap.mmap, start: int, arrays: Sequence[np.ndarray]) -> tuple[list[OutputDesc], int]:
    """Write C-contiguous arrays into the arena from `start`: (descriptors, end). The caller checked that
    `start + span(arrays)` fits."""
    u8 = np.frombuffer(arena, dtype=np.uint8)
    descs = []
    cursor = _align(start)
    for arr in arrays:
        if arr.nbytes:
            u8[cursor : cursor + arr.nbytes] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        descs.append(OutputDesc(dtype_name(arr.dtype), tuple(arr.shape), arr.nbytes, cursor))
        cursor = _align(cursor + arr.nbytes)
    del u8  # no exported buffer may outlive the call: the caller closes the mapping
    return descs, cursor


def read_outputs(arena: mmap.mmap, descs: Sequence[OutputDesc]) -> tuple[np.ndarray, ...]:
    """Private copies of outputs written into the arena."""
    u8 = np.frombuffer(arena, dtype=np.uint8)
    out = []
    for d in descs:
        if d.offset < 0 or d.offset + d.nbytes > u8.size:
            raise ValueError(f"output at {d.offset} (+{d.nbytes}) lies outside the arena")
        raw = u8[d.offset : d.offset + d.nbytes].copy()
        out.append(raw.view(resolve_dtype(d.dtype)).reshape(d.shape))
    del u8
    return tuple(out)


# ---- the memory behind an input view -----------------------------------------------------------------------


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
    """(start address, byte length, byte offset of arr's first element) of the memory behind `arr`.

    That is the span of the allocation the view was cut from (found through `.base`), so out-of-view bytes a
    careless kernel might read or write (padding, the gaps of a strided view) belong to it. Falls back to the
    view's own span when the base cannot be trusted to contain it.
    """
    address = arr.__array_interface__["data"][0]
    own_lo, own_hi = _bounds(address, arr.shape, arr.strides, arr.itemsize)
    if own_hi == own_lo:  # empty view: nothing behind it
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


def region_of(arr: np.ndarray) -> tuple[np.ndarray | None, int]:
    """A writable uint8 array over the memory behind `arr` (this process owns it) and the byte offset of
    its first element; (None, 0) for an empty view."""
    address, nbytes, offset = memory_region(arr)
    if nbytes == 0:
        return None, 0
    buffer = (ctypes.c_char * nbytes).from_address(address)
    return np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8), offset
