"""Where a Triton kernel may read and write: the memory of its tensor arguments, element by element.

Every launch collects its arguments' views (`Allocation`: the view's elements and the buffer they live in).
`Memory.check` takes the addresses of a load's, store's or atomic's active lanes (one NumPy array) and says
whether each lane hits an element of some argument; the first lane that does not is described against the
argument it is nearest to: past its end, before its start, or inside its buffer but between its elements
(the padding of a row-padded slice is in bounds of the buffer, not of the tensor the op was given).

`Memory.writers` is the launch's shadow of which program last wrote each element (the program-order check,
`order.py`), indexed by the same lookup.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Shadows (one int32 per element) are kept only for buffers up to this many elements; larger ones are
# bounds-checked but not watched for races between programs.
MAX_SHADOW_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class Allocation:
    """A kernel argument's view: `base` is the address of element 0, strides are in elements."""

    name: str
    base: int
    itemsize: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    buffer_start: int
    buffer_end: int
    start: int = 0  # byte extent of the view's elements: [start, end)
    end: int = 0
    dense: bool = True  # every itemsize step in [start, end) is an element
    exact: bool = True  # membership is decidable by greedy decomposition (no overlapping strides)

    @staticmethod
    def of(name: str, tensor: Any) -> Allocation:
        """The allocation of a framework tensor argument (`name`: the kernel's argument it was passed as)."""
        shape = tuple(int(s) for s in tensor.shape)
        strides = tuple(int(s) for s in tensor.stride())
        itemsize = int(tensor.element_size())
        base = int(tensor.data_ptr())
        storage = tensor.untyped_storage()
        buffer_start = int(storage.data_ptr())
        buffer_end = buffer_start + int(storage.nbytes())
        numel = int(np.prod(shape)) if shape else 1
        if numel == 0:
            return Allocation(name, base, itemsize, shape, strides, buffer_start, buffer_end, base, base)
        low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
        high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
        start, end = base + low * itemsize, base + (high + 1) * itemsize
        moving = sorted((s, n) for n, s in zip(shape, strides, strict=True) if n > 1)
        dense, expected = True, 1
        for s, n in moving:
            dense = dense and s == expected
            expected *= n
        exact = all(s > 0 for s, _ in moving)
        span = 0
        for s, n in moving:  # ascending strides: each must step over everything the smaller ones reach
            exact = exact and s > span
            span += (n - 1) * s
        return Allocation(
            name, base, itemsize, shape, strides, buffer_start, buffer_end, start, end, dense, exact
        )

    def contains(self, addresses: np.ndarray) -> np.ndarray:
        """Which addresses (uint64) are the address of one of this view's elements."""
        inside = (addresses >= np.uint64(self.start)) & (addresses < np.uint64(self.end))
        if self.start == self.end or not inside.any():
            return inside
        offset = _signed(addresses) - np.int64(self.base)
        inside &= offset % self.itemsize == 0
        if self.dense or not self.exact:
            return inside  # a layout with overlapping strides: its extent is all that is checked
        element = offset // self.itemsize
        for s, n in sorted(
            ((s, n) for n, s in zip(self.shape, self.strides, strict=True) if n > 1), reverse=True
        ):
            index = element // s
            inside &= (index >= 0) & (index < n)
            element = element - index * s
        return np.asarray(inside & (element == 0))

    def describe(self) -> str:
        """The argument, its shape and strides, as a finding names it."""
        return f"`{self.name}` (shape {list(self.shape)}, strides {list(self.strides)})"


def element_index(addresses: np.ndarray, start: int, itemsize: int) -> np.ndarray:
    """(address - start) // itemsize as intp, for addresses at or after `start` in one buffer: computed in int64
    (every address of a process's memory is below 2**63), since NumPy's uint64 division and its cast to intp
    are several times slower than the subtraction itself."""
    offsets: np.ndarray = np.subtract(_signed(addresses), np.int64(start))
    if itemsize & (itemsize - 1) == 0:
        np.right_shift(offsets, itemsize.bit_length() - 1, out=offsets)
    else:
        np.floor_divide(offsets, itemsize, out=offsets)
    return offsets


def _signed(addresses: np.ndarray) -> np.ndarray:
    """Addresses as int64 (a view of uint64 ones: the same values, as every address is below 2**63)."""
    return addresses.view(np.int64) if addresses.dtype == np.uint64 else addresses.astype(np.int64)


def aligned(addresses: np.ndarray, base: int, itemsize: int) -> bool:
    """Whether every address is a whole number of items from `base` (uint64 arithmetic, wrapping)."""
    if itemsize == 1:
        return True
    offsets = addresses - np.uint64(base)
    if itemsize & (itemsize - 1) == 0:  # a power of two divides 2**64: the low bits decide, whatever wraps
        return not int(np.bitwise_or.reduce(offsets)) & (itemsize - 1)
    return not (offsets % np.uint64(itemsize)).any()


class Lanes:
    """An access's active addresses (flat uint64), with what the bounds check, the placing in buffers and the
    gather ask of them computed once: their lowest and highest address and the bits set in any of them."""

    __slots__ = ("_any_bits", "_bounds", "addresses")

    def __init__(self, addresses: np.ndarray) -> None:
        self.addresses = addresses
        self._bounds: tuple[int, int] | None = None
        self._any_bits: int | None = None

    @property
    def size(self) -> int:
        """How many lanes."""
        return int(self.addresses.size)

    def bounds(self) -> tuple[int, int]:
        """The lowest and highest address of the lanes (computed once)."""
        if self._bounds is None:
            self._bounds = (int(self.addresses.min()), int(self.addresses.max()))
        return self._bounds

    def aligned(self, base: int, itemsize: int) -> bool:
        """Whether every address is a whole number of items from `base`."""
        if itemsize & (itemsize - 1) == 0 and base % itemsize == 0:  # then the addresses' low bits decide
            if self._any_bits is None:
                self._any_bits = int(np.bitwise_or.reduce(self.addresses))
            return not self._any_bits & (itemsize - 1)
        return aligned(self.addresses, base, itemsize)


def _lanes(addresses: np.ndarray | Lanes) -> Lanes:
    return addresses if isinstance(addresses, Lanes) else Lanes(addresses)


@dataclass(frozen=True)
class Violation:
    """The first active lane of an access that hit no argument's element, in words."""

    lane: int  # flat index in the access's block
    lanes_out: int  # how many active lanes were out
    address: int
    where: str  # "3 elements past the end of `y` (...)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass
class Memory:
    """One launch's arguments and the shadows of who wrote what."""

    allocations: list[Allocation]
    shadows: dict[int, np.ndarray] = field(default_factory=dict)  # buffer_start -> writer program per element
    _items: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def check(self, active: np.ndarray | Lanes, of: str | None = None) -> Violation | None:
        """None when every address (a flat uint64 array of active lanes) is an element of the argument the
        pointers were made from (`of`, its name), or of any argument when that is not known."""
        lanes = _lanes(active)
        if lanes.size == 0:
            return None
        addresses = lanes.addresses
        own = [a for a in self.allocations if a.name == of]
        allocations = own or self.allocations
        low, high = lanes.bounds()
        for a in allocations:  # the common case: one dense argument holds them all
            if a.dense and a.start <= low and high < a.end:
                if lanes.aligned(a.base, a.itemsize):
                    return None
                break
        covered = np.zeros(addresses.shape, dtype=bool)
        for a in allocations:
            covered |= a.contains(addresses)
        if covered.all():
            return None
        out = np.flatnonzero(~covered)
        lane = int(out[0])
        address = int(addresses[lane])
        return Violation(lane, int(out.size), address, self._where(address, allocations))

    def _where(self, address: int, allocations: list[Allocation]) -> str:
        if not allocations:
            return f"address {address:#x}: the kernel has no tensor arguments"
        for a in allocations:
            if a.buffer_start <= address < a.buffer_end and a.start <= address < a.end:
                element = (address - a.base) / a.itemsize
                return (
                    f"element offset {element:g} of {a.describe()}: inside its extent but not one of its "
                    "elements (the gap between rows of a strided view, or a misaligned address)"
                )
        for a in allocations:
            if a.buffer_start <= address < a.buffer_end:
                element = (address - a.base) // a.itemsize
                return (
                    f"element offset {element} of {a.describe()}: in bounds of the buffer that holds it, "
                    "not of the tensor the kernel was given (the padding or the rest of a larger buffer)"
                )

        def distance(a: Allocation) -> int:
            return a.start - address if address < a.start else address - a.end + 1

        nearest = min(allocations, key=distance)
        element = (address - nearest.base) // nearest.itemsize
        if address >= nearest.end:
            past = (address - nearest.end) // nearest.itemsize + 1
            return (
                f"element offset {element} of {nearest.describe()}: {_plural(past, 'element')} past its end"
            )
        before = (nearest.start - address + nearest.itemsize - 1) // nearest.itemsize
        return (
            f"element offset {element} of {nearest.describe()}: {_plural(before, 'element')} before its start"
        )

    def locate(
        self, active: np.ndarray | Lanes
    ) -> tuple[list[tuple[Allocation, np.ndarray, np.ndarray]], bool]:
        """The addresses (all in bounds) grouped by the buffer they fall in: (allocation, which lanes, element
        index in that buffer's shadow); the flag says whether every lane was placed in a watched buffer."""
        given = _lanes(active)
        addresses = given.addresses
        if addresses.size:  # the common case: the first buffer the lanes reach holds them all
            low, high = given.bounds()
            for a in self.allocations:
                if a.buffer_start <= high and low < a.buffer_end:
                    if not (a.buffer_start <= low and high < a.buffer_end):
                        break  # lanes in several buffers: placed one buffer at a time below
                    if (a.buffer_end - a.buffer_start) // a.itemsize > MAX_SHADOW_ELEMENTS:
                        return [], True
                    index = element_index(addresses, a.buffer_start, a.itemsize)
                    return [(a, np.ones(addresses.shape, dtype=bool), index)], True
        groups = []
        placed = np.zeros(addresses.shape, dtype=bool)
        seen: set[int] = set()
        for a in self.allocations:
            if a.buffer_start in seen:
                continue
            seen.add(a.buffer_start)
            lanes = ~placed & (addresses >= np.uint64(a.buffer_start)) & (addresses < np.uint64(a.buffer_end))
            if not lanes.any():
                continue
            placed |= lanes
            if (a.buffer_end - a.buffer_start) // a.itemsize > MAX_SHADOW_ELEMENTS:
                continue
            groups.append((a, lanes, element_index(addresses[lanes], a.buffer_start, a.itemsize)))
        return groups, bool(placed.all())

    def items(self, a: Allocation) -> np.ndarray | None:
        """The buffer that holds `a` as unsigned integers of its item size (its items' bits, to gather and
        scatter lanes by element index), from its start; None for an item size NumPy has no such type for, or a
        buffer that is not a whole number of items (every aligned address in it is then an item of the view)."""
        key = (a.buffer_start, a.itemsize)
        found = self._items.get(key)
        if found is None:
            size = a.buffer_end - a.buffer_start
            if a.itemsize not in (1, 2, 4, 8) or size % a.itemsize:
                return None
            count = size // a.itemsize
            raw = (ctypes.c_uint8 * (count * a.itemsize)).from_address(a.buffer_start)
            found = self._items[key] = np.ctypeslib.as_array(raw).view(f"u{a.itemsize}")
        return found

    def shadow(self, a: Allocation) -> np.ndarray:
        """Which program last wrote each element of the allocation's buffer in this launch (-1: none), made on
        first use."""
        found = self.shadows.get(a.buffer_start)
        if found is None:
            found = np.full((a.buffer_end - a.buffer_start) // a.itemsize + 1, -1, dtype=np.int64)
            self.shadows[a.buffer_start] = found
        return found
