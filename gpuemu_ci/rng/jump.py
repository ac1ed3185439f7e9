"""Jump-ahead for 128-bit GF(2)-linear generators (xorshift128+ and friends).

A state is two 64-bit words ``(s0, s1)``, read as a 128-bit vector: bit ``i`` for ``i < 64`` is bit ``i``
of ``s0``, bit ``64 + i`` is bit ``i`` of ``s1``. A linear map over GF(2) is stored by its 128 columns
(the images of the unit vectors), each a ``(lo, hi)`` pair of uint64 words.

Applying a map uses byte-wise lookup tables ("method of the four Russians"): for each of the 16 bytes of
the input the table holds the XOR of the columns selected by that byte, so one map application is 16
table lookups and XORs, vectorised with NumPy over any number of states at once.

``PowerCache`` keeps ``T^(2^k)`` for a generator step ``T``, so jumping ahead by ``2^k`` or by any
``n`` (a product of cached powers) costs a handful of table lookups. ``lane_starts`` uses it to place
many independent lanes ``2^p`` steps apart along one stream, which is how ``SeededRng.u64_array``
produces the exact sequential stream with lock-step NumPy arithmetic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

__all__ = ["Gf2Map", "PowerCache", "lane_starts", "work_buffer"]

_MASK64 = (1 << 64) - 1
_STATE_DTYPE = np.dtype("<u8")  # explicit little-endian so the byte view below is portable
_PAIR_DTYPE = np.dtype((np.void, 16))  # one 128-bit table entry moved as a single item by np.take
_BYTE_OFFSETS = (np.arange(16, dtype=np.intp) * 256)[:, None]
_APPLY_CHUNK = 1024  # states per table pass

StateStep = Callable[[int, int], tuple[int, int]]


class _WorkBuffers(threading.local):
    def __init__(self) -> None:
        self.by_name: dict[str, np.ndarray] = {}


_WORK = _WorkBuffers()


def work_buffer(name: str, size: int, dtype: np.dtype | type = np.uint64) -> np.ndarray:
    """A reusable 1-D scratch array of ``size`` elements for this thread; its contents are undefined.

    Large temporaries allocated afresh on every call are often handed back to the OS in between, and then
    cost a page fault per 4 KiB on the next call, more than the arithmetic on them. Callers must not keep
    the array past their own call or hand it to users.
    """
    kind = np.dtype(dtype)
    buf = _WORK.by_name.get(name)
    if buf is None or buf.size < size or buf.dtype != kind:
        buf = np.empty(size, dtype=kind)
        _WORK.by_name[name] = buf
    return buf[:size]


def _as_state_array(states: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(states, dtype=_STATE_DTYPE)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"states must have shape (K, 2), got {arr.shape}")
    return arr


class Gf2Map:
    """A linear map on 128-bit states over GF(2), with lookup tables for fast application."""

    __slots__ = ("_flat_table", "columns")

    def __init__(self, columns: np.ndarray) -> None:
        cols = _as_state_array(columns).copy()
        if cols.shape[0] != 128:
            raise ValueError(f"a 128-bit map needs 128 columns, got {cols.shape[0]}")
        self.columns: np.ndarray = cols
        self.columns.flags.writeable = False
        # table[g, b] = XOR of the columns 8g..8g+7 selected by the bits of byte value b.
        by_byte = cols.reshape(16, 8, 2)
        table = np.zeros((16, 256, 2), dtype=_STATE_DTYPE)
        for bit in range(8):
            width = 1 << bit
            np.bitwise_xor(table[:, :width], by_byte[:, bit][:, None, :], out=table[:, width : 2 * width])
        self._flat_table = table.reshape(4096, 2).view(_PAIR_DTYPE).reshape(4096)

    @classmethod
    def from_step(cls, step: StateStep) -> Gf2Map:
        """Build the map of a GF(2)-linear ``step(s0, s1) -> (s0', s1')`` from its action on unit vectors."""
        cols = np.empty((128, 2), dtype=_STATE_DTYPE)
        for i in range(128):
            s0, s1 = (1 << i, 0) if i < 64 else (0, 1 << (i - 64))
            cols[i] = step(s0, s1)
        return cls(cols)

    @classmethod
    def identity(cls) -> Gf2Map:
        """The identity map."""
        cols = np.zeros((128, 2), dtype=_STATE_DTYPE)
        for i in range(128):
            cols[i, i // 64] = 1 << (i % 64)
        return cls(cols)

    def apply(self, states: np.ndarray) -> np.ndarray:
        """Apply the map to each row of a ``(K, 2)`` uint64 array of states; returns a new ``(K, 2)``."""
        arr = _as_state_array(states)
        result = np.empty(arr.shape, dtype=_STATE_DTYPE)
        self._apply_into(arr, result)
        return result

    def _apply_into(self, states: np.ndarray, result: np.ndarray) -> None:
        """``result[:] = map(states)`` for C-contiguous ``(K, 2)`` little-endian uint64 arrays."""
        count = states.shape[0]
        state_bytes = states.view(np.uint8).reshape(count, 16)
        # Byte-major (16, chunk) layout: the 16 partial images are then folded by one fast XOR-reduce over
        # contiguous rows.
        for lo in range(0, count, _APPLY_CHUNK):
            hi = min(count, lo + _APPLY_CHUNK)
            width = hi - lo
            idx = work_buffer("jump.idx", 16 * width, np.intp).reshape(16, width)
            np.add(state_bytes[lo:hi].T, _BYTE_OFFSETS, out=idx)
            parts = work_buffer("jump.parts", 16 * width, _PAIR_DTYPE).reshape(16, width)
            np.take(self._flat_table, idx, out=parts, mode="clip")  # indices are always in range
            np.bitwise_xor.reduce(parts.view(_STATE_DTYPE).reshape(16, width, 2), axis=0, out=result[lo:hi])

    def apply_state(self, s0: int, s1: int) -> tuple[int, int]:
        """Apply the map to one state given as two Python ints."""
        out = self.apply(np.array([[s0 & _MASK64, s1 & _MASK64]], dtype=_STATE_DTYPE))
        return int(out[0, 0]), int(out[0, 1])

    def then(self, other: Gf2Map) -> Gf2Map:
        """The composition "first ``self``, then ``other``" (``other ∘ self``)."""
        return Gf2Map(other.apply(self.columns))


class PowerCache:
    """Lazily computed, thread-safe powers ``T^(2^k)`` of one step map ``T``."""

    def __init__(self, step: StateStep) -> None:
        self._step = step
        self._powers: list[Gf2Map] = []
        self._lock = threading.Lock()

    def power_of_two(self, k: int) -> Gf2Map:
        """Return ``T^(2^k)``."""
        if k < 0:
            raise ValueError(f"exponent 2^{k} is not a non-negative power of two")
        powers = self._powers
        if k < len(powers):
            return powers[k]
        with self._lock:
            if not self._powers:
                self._powers.append(Gf2Map.from_step(self._step))
            while len(self._powers) <= k:
                last = self._powers[-1]
                self._powers.append(last.then(last))
            return self._powers[k]

    def jump(self, s0: int, s1: int, steps: int) -> tuple[int, int]:
        """Return the state reached from ``(s0, s1)`` after ``steps`` applications of ``T``."""
        if steps < 0:
            raise ValueError(f"cannot jump a negative number of steps ({steps})")
        k = 0
        while steps:
            if steps & 1:
                s0, s1 = self.power_of_two(k).apply_state(s0, s1)
            steps >>= 1
            k += 1
        return s0, s1


def lane_starts(cache: PowerCache, s0: int, s1: int, log2_spacing: int, count: int) -> np.ndarray:
    """States ``T^(j * 2^log2_spacing) (s0, s1)`` for ``j = 0 .. count-1`` as a ``(count, 2)`` uint64 array.

    Built by doubling: the first ``h`` lanes, jumped by ``h * 2^log2_spacing``, give the next ``h``; so the
    cost is ``count`` vectorised map applications spread over ``log2(count)`` NumPy calls.
    """
    if count < 1:
        raise ValueError(f"need at least one lane, got {count}")
    starts = np.empty((count, 2), dtype=_STATE_DTYPE)
    starts[0] = (s0 & _MASK64, s1 & _MASK64)
    have = 1
    k = log2_spacing
    while have < count:
        take = min(have, count - have)
        cache.power_of_two(k)._apply_into(starts[:take], starts[have : have + take])
        have += take
        k += 1
    return starts
