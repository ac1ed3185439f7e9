"""Placing an access's lanes in the buffers of a launch's arguments (gpuemu_ci/triton_cpu/memory.py), which the
race checks key their shadows on: every lane in the buffer that holds it, with its element index there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpuemu_ci.triton_cpu.memory import Allocation, Memory  # noqa: E402


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
