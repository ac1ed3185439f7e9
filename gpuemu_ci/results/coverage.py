"""What the cases of one op x dtype exercised: dim ranges, size classes, tile sizes, layouts, value modes, kwarg
values, element caps and skipped cases (results.model.Coverage)."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuemu_ci.results.base import json_float
from gpuemu_ci.results.model import Coverage, DimRange

MAX_KWARG_VALUES = 16  # distinct values listed per kwarg
MAX_CAP_EXAMPLES = 3
MAX_TILE_SIZES = 24
TILE = "tile"  # the size class whose sizes are listed (plan.model.SizeClass.TILE)

# Cases arrive in any order (and from several shards): every list keeps its smallest entries under a fixed
# order, so the coverage of a run does not depend on which worker finished first, and merging the coverages of
# shards (`merge`) gives exactly the unsharded run's.


@dataclass
class CoverageTally:
    """The coverage of an op's cases, gathered case by case (dims, size classes, tiles, layouts, kwargs)."""

    max_elements: int | None = None
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    size_classes: Counter[str] = field(default_factory=Counter)
    tile_sizes: dict[str, set[int]] = field(default_factory=dict)
    layouts: Counter[str] = field(default_factory=Counter)
    value_modes: Counter[str] = field(default_factory=Counter)
    kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # kwarg -> order key -> value
    capped: int = 0
    cap_examples: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    declared_max: dict[str, int] = field(default_factory=dict)  # drawn dim -> its declared max

    def add(
        self,
        *,
        dims: Mapping[str, int],
        size_class: str,
        layouts: Iterable[str],
        mode: str,
        kwargs: Mapping[str, Any],
        capped: Sequence[str],
    ) -> None:
        """One case that ran: its dims, size class, the layout of each input, its value mode, its kwargs and the
        tool-chosen sizes the element cap shrank ("N 4097 → 2049")."""
        for name, size in dims.items():
            low, high = self.dims.get(name, (size, size))
            self.dims[name] = (min(low, size), max(high, size))
        self.size_classes[size_class] += 1
        if size_class == TILE:
            for name, size in dims.items():
                self.tile_sizes.setdefault(name, set()).add(int(size))
        self.layouts.update(layouts)
        self.value_modes[mode] += 1
        for name, value in kwargs.items():
            plain = _plain(value)
            self.kwargs.setdefault(name, {})[_order_key(plain)] = plain
        if capped:
            self.capped += 1
            self.cap_examples.add(", ".join(capped))

    def skip(self, reason: str) -> None:
        """Record why a case's coverage could not be counted."""
        self.skipped.add(reason)

    def result(self) -> Coverage:
        """The tally as the results document's Coverage record."""
        return Coverage(
            dims={name: DimRange(min=low, max=high) for name, (low, high) in self.dims.items()},
            size_classes=dict(sorted(self.size_classes.items())),
            tile_sizes={
                name: tuple(sorted(sizes)[:MAX_TILE_SIZES]) for name, sizes in self.tile_sizes.items()
            },
            layouts=dict(sorted(self.layouts.items())),
            value_modes=dict(sorted(self.value_modes.items())),
            kwargs={
                name: tuple(values[key] for key in sorted(values)[:MAX_KWARG_VALUES])
                for name, values in self.kwargs.items()
            },
            max_elements=self.max_elements,
            capped=self.capped,
            cap_examples=tuple(sorted(self.cap_examples)[:MAX_CAP_EXAMPLES]),
            skipped=tuple(sorted(self.skipped)),
            declared_max=dict(sorted(self.declared_max.items())),
        )


def merge(coverages: Sequence[Coverage]) -> Coverage:
    """The coverage of the cases of several shards together: what one run over all of them records."""
    tally = CoverageTally(max_elements=next((c.max_elements for c in coverages if c.max_elements), None))
    for c in coverages:
        tally.declared_max.update(c.declared_max)
        for name, span in c.dims.items():
            low, high = tally.dims.get(name, (span.min, span.max))
            tally.dims[name] = (min(low, span.min), max(high, span.max))
        tally.size_classes.update(c.size_classes)
        for name, sizes in c.tile_sizes.items():
            tally.tile_sizes.setdefault(name, set()).update(sizes)
        tally.layouts.update(c.layouts)
        tally.value_modes.update(c.value_modes)
        for name, values in c.kwargs.items():
            tally.kwargs.setdefault(name, {}).update({_order_key(v): v for v in values})
        tally.capped += c.capped
        tally.cap_examples.update(c.cap_examples)
        tally.skipped.update(c.skipped)
    return tally.result()


def _order_key(value: Any) -> str:
    """A total order over kwarg values of any JSON type: by type, then numerically or by text."""
    if isinstance(value, bool) or value is None:
        return f"0{value!r}"
    if isinstance(value, int | float):
        # Numbers by value: the float's bits as an integer that sorts like the float.
        bits = struct.unpack(">q", struct.pack(">d", float(value)))[0]
        bits = bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF) - 1
        return f"1{bits + (1 << 63):020d}{value!r}"
    return f"2{value!r}"


def _plain(value: Any) -> Any:
    """A kwarg value as JSON can hold it (floats without NaN, lists as lists)."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    return str(value)
