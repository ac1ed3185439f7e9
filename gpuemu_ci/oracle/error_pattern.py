"""The one-line shape of a failing case's errors: which part of the output is over its allowance.

Read from the error map (error / allowance per element, oracle/compare.py): for each axis of the output, the
indices along it that hold an element over the allowance. An axis where those are a run at its end, a run at its
start, one index, or every k-th index narrows the description ("only in cols 1024–1087 of 1088"); where the
kernel's tile along an axis is known (the programs that stored the output, triton_cpu/where.py), a run inside the
last partial tile says so. When no axis narrows it, the errors are "everywhere" (all elements) or "scattered".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AxisPattern:
    """Where along one axis the elements over the allowance lie."""

    axis: int
    text: str  # "cols 1024–1087 of 1088"
    share: float  # the share of the axis's indices that hold one (smaller narrows more)


def axis_label(axis: int, ndim: int, dims: Mapping[str, int], size: int) -> tuple[str, str]:
    """(`cols` / `rows` for the last two axes, `axis k` before them; how many: `1088`, or `N=1088` when only one
    of the case's dims has that size)."""
    word = "cols" if axis == ndim - 1 else "rows" if axis == ndim - 2 else f"axis {axis}"
    named = [name for name, value in sorted(dims.items()) if value == size]
    return word, f"{named[0]}={size}" if len(named) == 1 and size > 1 else str(size)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _run(indices: np.ndarray) -> bool:
    return bool(indices.size) and int(indices[-1]) - int(indices[0]) + 1 == indices.size


def _along(axis: int, bad: np.ndarray, word: str, of: str, tile: int | None) -> AxisPattern | None:
    """How the bad elements lie along `axis`, or None when they reach every index of it."""
    size = bad.shape[axis]
    others = tuple(a for a in range(bad.ndim) if a != axis)
    indices = np.flatnonzero(bad.any(axis=others) if others else bad)
    if size <= 1 or indices.size == size:
        return None
    share = indices.size / size
    first, last = int(indices[0]), int(indices[-1])
    if tile and size % tile and first >= size - size % tile:
        start = size - size % tile
        return AxisPattern(
            axis, f"the last partial tile of {of} ({word} {start}–{size - 1}, tile {tile})", share
        )
    if indices.size == 1:
        one = {"cols": "col", "rows": "row"}.get(word)
        return AxisPattern(
            axis, f"{one} {first} of {of}" if one else f"index {first} of {word} ({of})", share
        )
    if _run(indices):
        return AxisPattern(axis, f"{word} {first}–{last} of {of}", share)
    steps = np.diff(indices)
    if indices.size >= 3 and bool(np.all(steps == steps[0])):
        return AxisPattern(axis, f"every {_ordinal(int(steps[0]))} of the {of} {word}, from {first}", share)
    if tile and (bool(np.all(indices % tile == tile - 1)) or bool(np.all(indices % tile == 0))):
        edge = "last" if first % tile == tile - 1 else "first"
        return AxisPattern(axis, f"the {edge} of each tile of {tile} {word} (of {of})", share)
    if share <= 0.5:
        return AxisPattern(axis, f"{indices.size} of the {of} {word}", share)
    return None


def describe(
    ratio: np.ndarray, dims: Mapping[str, int] | None = None, tiles: Mapping[int, int] | None = None
) -> str:
    """The pattern of the elements over their allowance (`ratio` > 1) in one line. `tiles`: axis -> the
    kernel's block size along it, where known."""
    ratio = np.asarray(ratio, dtype=np.float64)
    bad = ratio > 1.0
    total, count = int(bad.size), int(np.count_nonzero(bad))
    if count == 0:
        return "no element is over its allowance"
    tally = f"{count} of {total} elements over the allowance"
    if count == total:
        return f"everywhere: all {total} elements over the allowance"
    if bad.ndim == 0:
        return tally
    dims = dims or {}
    tiles = tiles or {}
    found = [
        p
        for axis in range(bad.ndim)
        if (
            p := _along(
                axis, bad, *axis_label(axis, bad.ndim, dims, bad.shape[axis]), tiles.get(axis - bad.ndim)
            )
        )
        is not None
    ]
    if not found:
        spread = ", in every row and col" if bad.ndim >= 2 else ""
        return f"scattered: {tally} ({100.0 * count / total:.3g}%){spread}"
    found.sort(key=lambda p: (p.share, p.axis))
    narrow = found[:2]
    return "wrong only in " + " and ".join(p.text for p in narrow) + f": {tally}"
