"""Dims for a case: the user's typical sizes (aligned cases) or boundary sizes inside the range (unaligned).

Users write the sizes they use, not the ones that break, so unaligned cases draw from sizes that expose tail
masks, dropped partial tiles and non-power-of-two reductions: 1, 2, small primes, 2^k - 1, 2^k + 1 and the sizes
just around common tile sizes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

from gpuemu_ci.config.model import DimConstraint, DimSpec, OpSpec
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.rng import SeededRng

TILES = (16, 32, 64, 128, 256)
SMALL_PRIMES = (3, 5, 7, 13, 31)
MAX_ELEMENTS = 1 << 18  # per input; keeps a case fast on a CPU runner
MAX_REDRAWS = 64


def boundary_sizes(dim: DimSpec) -> tuple[int, ...]:
    """Boundary sizes inside [low, high] that are not multiples of 16 (plus 0 when the range allows it)."""
    sizes = {1, 2, *SMALL_PRIMES}
    for k in range(2, 16):
        sizes.update((2**k - 1, 2**k + 1))
    for tile in TILES:
        sizes.update((tile - 1, tile + 1))
    chosen = {s for s in sizes if dim.low <= s <= dim.high and s % 16 != 0}
    if dim.low == 0:
        chosen.add(0)
    chosen.update(t for t in dim.typical if t % 16 != 0)
    return tuple(sorted(chosen))


def aligned_sizes(dim: DimSpec) -> tuple[int, ...]:
    """The user's typical sizes that are tile multiples; tile sizes in range when none are; else typical."""
    multiples = {t for t in dim.typical if t % 16 == 0 and t > 0}
    if not multiples:
        multiples = {t for t in TILES if dim.low <= t <= dim.high}
    return tuple(sorted(multiples or set(dim.typical)))


def draw_dims(op: OpSpec, rng: SeededRng, aligned: bool) -> dict[str, int]:
    """Deterministic dims for one case; honours constraints and the per-input element cap.

    Constraints (`D % 2 == 0`, `R <= D`) can be rare among one class of sizes (boundary sizes are mostly odd),
    so after a few draws from the case's class the sampler draws from both classes, and last tries the user's
    typical sizes in order, before calling the constraints unsatisfiable."""
    for attempt in range(MAX_REDRAWS):
        source = rng if attempt == 0 else rng.derive(f"redraw_{attempt}")
        values: dict[str, int] = {}
        for dim in op.shapes.dims:
            if attempt < MAX_REDRAWS // 4:
                pool = (aligned_sizes(dim) if aligned else boundary_sizes(dim)) or aligned_sizes(dim)
            else:
                pool = tuple(sorted({*aligned_sizes(dim), *boundary_sizes(dim)}))
            values[dim.name] = source.derive(dim.name).choice(pool)
        _cap_elements(op, values)
        if all(satisfies(c, values) for c in op.shapes.constraints):
            return values
    for combination in itertools.islice(itertools.product(*(dim.typical for dim in op.shapes.dims)), 10_000):
        values = dict(zip((dim.name for dim in op.shapes.dims), combination, strict=True))
        _cap_elements(op, values)
        if all(satisfies(c, values) for c in op.shapes.constraints):
            return values
    raise ConfigError(
        f"op {op.name!r}: no dims satisfy the constraints "
        f"{', '.join(c.expression for c in op.shapes.constraints)} within the declared ranges",
        line=op.line,
    )


def _cap_elements(op: OpSpec, values: dict[str, int]) -> None:
    """Shrinks the largest dims (to a size that keeps its alignment class) until every input fits the cap."""
    by_name = {d.name: d for d in op.shapes.dims}
    for spec in op.shapes.inputs:
        while _count(spec.dims, values) > MAX_ELEMENTS:
            names = [d for d in spec.dims if isinstance(d, str) and values[d] > 1]
            if not names:
                raise ConfigError(
                    f"op {op.name!r}: input {spec.name!r} has {_count(spec.dims, values):,} elements even with "
                    f"every symbolic dim at 1 (its fixed dims {[d for d in spec.dims if isinstance(d, int)]}); "
                    f"an input may have at most {MAX_ELEMENTS:,}",
                    line=op.line,
                )
            largest = max(names, key=lambda d: values[d])
            current = values[largest]
            dim = by_name[largest]
            smaller = [
                s
                for s in (*aligned_sizes(dim), *boundary_sizes(dim))
                if 0 < s < current and (s % 16 == 0) == (current % 16 == 0)
            ]
            values[largest] = max(smaller) if smaller else max(1, current // 2)


def _count(dims: tuple[str | int, ...], values: Mapping[str, int]) -> int:
    total = 1
    for d in dims:
        total *= values[d] if isinstance(d, str) else d
    return total


def shape_of(dims: tuple[str | int, ...], values: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(values[d] if isinstance(d, str) else d for d in dims)


_CONSTRAINT = re.compile(r"^\s*(\w+)(?:\s*%\s*(\d+))?\s*(==|!=|<=|>=|<|>)\s*(\w+)\s*$")


def satisfies(constraint: DimConstraint, values: Mapping[str, int]) -> bool:
    match = _CONSTRAINT.match(constraint.expression)
    if match is None:  # validated at load time
        return False
    left_name, modulus, operator, right_text = match.groups()
    left = values[left_name] % int(modulus) if modulus else values[left_name]
    right = int(right_text) if right_text.isdigit() else values[right_text]
    return {
        "==": left == right,
        "!=": left != right,
        "<=": left <= right,
        ">=": left >= right,
        "<": left < right,
        ">": left > right,
    }[operator]
