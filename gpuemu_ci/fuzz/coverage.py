"""What the cases of one op x dtype exercised: dim ranges, size classes, tile sizes, layouts, value modes, kwarg
values, element caps and skipped cases (results.model.Coverage)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpuemu_ci.fuzz.case import CaseInputs, CaseSkipped
from gpuemu_ci.plan.model import SizeClass
from gpuemu_ci.results.base import json_float
from gpuemu_ci.results.model import Coverage, DimRange

MAX_KWARG_VALUES = 16  # distinct values listed per kwarg
MAX_CAP_EXAMPLES = 3
MAX_TILE_SIZES = 24


@dataclass
class CoverageTally:
    max_elements: int | None = None
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    size_classes: Counter[str] = field(default_factory=Counter)
    tile_sizes: dict[str, list[int]] = field(default_factory=dict)
    layouts: Counter[str] = field(default_factory=Counter)
    value_modes: Counter[str] = field(default_factory=Counter)
    kwargs: dict[str, list[Any]] = field(default_factory=dict)
    capped: int = 0
    cap_examples: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def add(self, case: CaseInputs) -> None:
        for name, size in case.dims.items():
            low, high = self.dims.get(name, (size, size))
            self.dims[name] = (min(low, size), max(high, size))
        size_class = case.stratum.size_class
        self.size_classes[size_class.value] += 1
        if size_class is SizeClass.TILE:
            for name, size in case.dims.items():
                sizes = self.tile_sizes.setdefault(name, [])
                if size not in sizes and len(sizes) < MAX_TILE_SIZES:
                    sizes.append(size)
        for choice in case.layouts.values():
            self.layouts[choice.layout.value] += 1
        self.value_modes[case.stratum.mode.value] += 1
        for name, value in case.kwargs.items():
            seen = self.kwargs.setdefault(name, [])
            value = _plain(value)
            if value not in seen and len(seen) < MAX_KWARG_VALUES:
                seen.append(value)
        if case.capped:
            self.capped += 1
            if len(self.cap_examples) < MAX_CAP_EXAMPLES:
                self.cap_examples.append(", ".join(f"{c.dim} {c.drawn} → {c.kept}" for c in case.capped))

    def skip(self, skipped: CaseSkipped) -> None:
        if skipped.reason not in self.skipped:
            self.skipped.append(skipped.reason)

    def result(self) -> Coverage:
        return Coverage(
            dims={name: DimRange(min=low, max=high) for name, (low, high) in self.dims.items()},
            size_classes=dict(self.size_classes),
            tile_sizes={name: tuple(sorted(sizes)) for name, sizes in self.tile_sizes.items()},
            layouts=dict(self.layouts),
            value_modes=dict(self.value_modes),
            kwargs={name: tuple(values) for name, values in self.kwargs.items()},
            max_elements=self.max_elements,
            capped=self.capped,
            cap_examples=tuple(self.cap_examples),
            skipped=tuple(self.skipped),
        )


def _plain(value: Any) -> Any:
    """A kwarg value as JSON can hold it (floats without NaN, lists as lists)."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    return str(value)
