"""Placing an access's lanes in the buffers of a launch's arguments (gpuemu_ci/triton_cpu/memory.py), which the
race checks key their shadows on: every lane in the buffer that holds it, with its element index there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpuemu_ci.triton_cpu.memory import Allocation, Memory, element_index  # noqa: E402


def _addresses(t: Any, elements: list[int]) -> np.ndarray:
    return np.array([t.data_ptr() + e * t.element_size() for e in elements], dtype=np.uint64)


def _placed(memory: Memory, addresses: np.ndarray) -> list[tuple[str, list[int], list[int]]]:
    groups, all_placed = memory.locate(addresses)
    assert all_placed
    return [(a.name, np.flatnonzero(lanes).tolist(), index.tolist()) for a, lanes, index in groups]


def test_lanes_in_one_argument_are_placed_in_its_buffer_with_their_element_index() -> None:
    x, y = torch.zeros(64), torch.zeros(32, dtype=torch.float64)
    memory = Memory([Allocation.of("x", x), Allocation.of("y", y)])
    assert _placed(memory, _addresses(y, [5, 0, 31])) == [("y", [0, 1, 2], [5, 0, 31])]
    assert _placed(memory, _addresses(x, [63, 1])) == [("x", [0, 1], [63, 1])]


def test_a_view_is_placed_in_the_buffer_it_shares_under_the_first_argument_listed_on_it() -> None:
    base = torch.zeros(100)
    view = base[10:20]
    memory = Memory([Allocation.of("whole", base), Allocation.of("part", view)])
    assert _placed(memory, _addresses(view, [0, 9])) == [("whole", [0, 1], [10, 19])]


def test_lanes_spread_over_two_arguments_are_split_between_their_buffers() -> None:
    x, y = torch.zeros(16), torch.zeros(16)
    memory = Memory([Allocation.of("x", x), Allocation.of("y", y)])
    addresses = np.concatenate([_addresses(y, [3]), _addresses(x, [4, 5]), _addresses(y, [6])])
    assert sorted(_placed(memory, addresses)) == [("x", [1, 2], [4, 5]), ("y", [0, 3], [3, 6])]


# ---- the bounds check's fast path (one dense argument holds the lowest and highest lane) must not be fooled


def test_a_misaligned_lane_between_the_lowest_and_highest_is_out_of_bounds() -> None:
    x = torch.zeros(16)
    memory = Memory([Allocation.of("x", x)])
    addresses = _addresses(x, list(range(16)))
    assert memory.check(addresses, "x") is None
    addresses[5] += np.uint64(2)  # half an element in: between two elements of x
    violation = memory.check(addresses, "x")
    assert violation is not None and (violation.lane, violation.lanes_out) == (5, 1)
    assert "not one of its elements" in violation.where


def test_a_lane_in_the_padding_of_a_row_padded_view_is_out_of_bounds() -> None:
    padded = torch.zeros(4, 10)
    view = padded[:, :8]  # rows of 8 elements 10 apart: not dense
    memory = Memory([Allocation.of("view", view)])
    inside = [r * 10 + c for r in range(4) for c in range(8)]
    assert memory.check(_addresses(padded, inside), "view") is None
    violation = memory.check(_addresses(padded, [*inside[:8], 9, *inside[8:]]), "view")  # row 0's padding
    assert violation is not None and (violation.lane, violation.lanes_out) == (8, 1)


def test_alignment_is_judged_from_the_arguments_base_not_from_the_addresses_bits() -> None:
    # A view whose element 0 is not at a multiple of its item size (the addresses' low bits alone would say
    # every lane is misaligned): the exact arithmetic decides.
    odd = Allocation("odd", 1001, 4, (8,), (1,), 1001, 1033, 1001, 1033)
    memory = Memory([odd])
    lanes = np.array([1001 + 4 * k for k in range(8)], dtype=np.uint64)
    assert memory.check(lanes, "odd") is None
    lanes[3] += np.uint64(2)
    violation = memory.check(lanes, "odd")
    assert violation is not None and violation.lane == 3
    # Lanes whose own low bits are clear, each 3 bytes past an element: all out.
    violation = memory.check(np.array([1004, 1008], dtype=np.uint64), "odd")
    assert violation is not None and (violation.lane, violation.lanes_out) == (0, 2)


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8, 12])
def test_element_indices_are_those_of_unsigned_division(itemsize: int) -> None:
    rng = np.random.default_rng(itemsize)
    start = (1 << 46) + 64
    addresses = (start + itemsize * rng.integers(0, 1 << 20, 1000)).astype(np.uint64)
    expected = ((addresses - np.uint64(start)) // np.uint64(itemsize)).astype(np.intp)
    assert np.array_equal(element_index(addresses, start, itemsize), expected)


def test_lanes_spread_over_two_arguments_are_in_bounds_when_the_pointer_may_be_either() -> None:
    x, y = torch.zeros(16), torch.zeros(16)
    memory = Memory([Allocation.of("x", x), Allocation.of("y", y)])
    addresses = np.concatenate([_addresses(x, [0, 15]), _addresses(y, [0, 15])])
    assert memory.check(addresses, None) is None  # a pointer of unknown origin: any argument
    assert memory.check(addresses, "x") is not None  # made from x: y's memory is out of x's bounds
