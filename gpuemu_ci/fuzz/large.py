"""The large-size class (thorough and nightly suites): sizes no quick run reaches, where 32-bit index
arithmetic overflows and grid limits and multi-block paths show.

Variant 0 grows the largest input from the typical sizes until it holds more than 2^31 elements (offsets that
count elements overflow an int32); variant 1 until it holds more than 2^31 bytes (byte offsets overflow, at a
quarter of the memory for float32); the dims that do not shape the rows grow first. Variant k >= 2 sets the
(k-2)-th drawn dim to its declared max, the others at their typical sizes, shrunk until the case needs at most
AT_MAX_BUDGET. The dims depend on the seed and the config alone, never on this machine: a case whose estimated
peak memory exceeds what the machine has free is skipped with the reason (fuzz/case.py), never made smaller
here (the op's worker and the judge's would then disagree on it) and never counted as passed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, InputSpec, OpSpec
from gpuemu_ci.fuzz.shapes import TWO_31, DimDraw, Sampler, element_count
from gpuemu_ci.plan.maxima import free_roots
from gpuemu_ci.plan.model import CaseStratum
from gpuemu_ci.rng import SeededRng

MEMORY_SHARE = 0.75  # of the memory available now, what one large case may take
JUDGE_ARRAYS = 6  # float64 arrays of the output's size the oracle holds at once
GROW_SEARCH = 64  # sizes tried upward from the one that crosses, for constraints
# What an at-max case is shrunk to fit, on every machine alike (a constant, so its dims are the seed's alone):
# a 16 GiB CI runner holds it.
AT_MAX_BUDGET = 8 << 30
CROSSINGS = 2  # variants 0 and 1: past 2^31 elements, past 2^31 bytes


@dataclass(frozen=True)
class LargeSkip:
    """A large case that cannot run here, and why (shown in the results' coverage)."""

    reason: str


def available_bytes() -> int | None:
    """Memory available to a new process now (Linux: MemAvailable), None when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def case_bytes(op: OpSpec, dims: Mapping[str, int], dtype: str) -> int:
    """Estimated peak memory of a case: each input held by the generator, in shared memory and as the copy that
    checks the op left it unchanged; the reference's float64 copies (twice for families whose error scale
    re-runs the reference on |x|); and per output element the op's output, the reference's and the oracle's
    float64 work arrays."""
    held = reference = biggest = 0
    for spec in op.shapes.inputs:
        count = element_count(spec.dims, dims)
        info = dtypes.info(spec.dtype or dtype)
        held += count * info.numpy.itemsize
        reference += count * (8 if info.is_float else info.numpy.itemsize)
        biggest = max(biggest, count)
    outputs = element_count(op.shapes.output_dims, dims) if op.shapes.output_dims is not None else biggest
    runs = (
        2 if op.error_model.family in (Family.MATMUL, Family.REDUCTION, Family.SCAN, Family.ATTENTION) else 1
    )
    out_item = dtypes.info(op.output_dtype or dtype).numpy.itemsize
    return 3 * held + runs * reference + outputs * (out_item + 8 * runs + 8 * JUDGE_ARRAYS)


CHECK_ABOVE = 256 << 20  # cases estimated under this are not checked against the free memory


def memory_shortfall(op: OpSpec, dims: Mapping[str, int], dtype: str) -> str | None:
    """Why a case of these dims cannot run here (its estimated peak memory exceeds the usable share of the
    free memory), or None when it can."""
    need = case_bytes(op, dims, dtype)
    if need <= CHECK_ABOVE:
        return None
    free = available_bytes()
    if free is None:
        return None  # unknown: run it, as before there was a check
    usable = int(free * MEMORY_SHARE)
    if need <= usable:
        return None
    shown = ", ".join(f"{name} = {size}" for name, size in dims.items())
    return f"{shown} needs about {_gib(need)}, {_gib(usable)} usable here"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def large_draw(
    op: OpSpec, rng: SeededRng, stratum: CaseStratum, budget: int = AT_MAX_BUDGET
) -> DimDraw | LargeSkip:
    """The dims of a large case, or why the declared ranges give none; `budget` (bytes) is what an at-max
    case's other dims shrink to fit. Whether this machine can hold the case is not decided here."""
    sampler = Sampler(op, rng, stratum)
    kwargs = sampler.kwargs()
    base = sampler.typical(kwargs)
    schema = sampler.schema
    if stratum.counter < CROSSINGS or not schema.free_dims:
        return _crossing(op, sampler, base, stratum.dtype, by_bytes=stratum.counter % CROSSINGS == 1)
    name = schema.free_dims[(stratum.counter - CROSSINGS) % len(schema.free_dims)]
    return _at_max(op, sampler, base, name, stratum.dtype, budget)


def _largest_input(op: OpSpec, sampler: Sampler, base: dict[str, object]) -> InputSpec | None:
    """The input that can hold the most elements when every drawn dim sits at its declared max."""
    schema = sampler.schema
    best, best_count = None, -1
    top = dict(base)
    for name in schema.free_dims:
        try:
            top[name] = schema.bounds(name, top)[1]
        except ValueError:
            continue
    for spec in op.shapes.inputs:
        try:
            count = element_count(
                spec.dims, {**top, **{k: v for k, v in base.items() if k not in schema.free_dims}}
            )
        except (KeyError, TypeError):
            continue
        if count > best_count:
            best, best_count = spec, count
    return best


def _grow(
    sampler: Sampler, spec: InputSpec, base: dict[str, object], threshold: int
) -> dict[str, object] | None:
    """The typical sizes with `spec`'s dims grown until it holds more than `threshold` elements (dims that do
    not shape the rows first), or None when the declared ranges stop short."""
    schema = sampler.schema
    roots = [r for d in spec.dims if isinstance(d, str) for r in sorted(free_roots(schema, d))]
    order = sorted(dict.fromkeys(roots), key=lambda n: n in sampler.rows)
    values = dict(base)
    for name in order:
        count = element_count(spec.dims, values)
        if count > threshold:
            return values
        current = max(1, int(values[name]))  # type: ignore[call-overload]
        others = max(1, count // int(values[name])) if int(values[name]) else 1  # type: ignore[call-overload]
        need = threshold // others + 1
        try:
            high = schema.bounds(name, values)[1]
        except ValueError:
            continue
        target = min(high, max(current, need))
        for size in range(target, min(high, target + GROW_SEARCH) + 1):
            done = sampler.admits({**sampler.free_values(values), name: size})
            if done is not None:
                values = done
                break
    return values if element_count(spec.dims, values) > threshold else None


def _crossing(
    op: OpSpec, sampler: Sampler, base: dict[str, object], dtype: str, *, by_bytes: bool
) -> DimDraw | LargeSkip:
    spec = _largest_input(op, sampler, base)
    if spec is None:
        return LargeSkip("large sizes: the op has no inputs with named dims")
    itemsize = dtypes.info(spec.dtype or dtype).numpy.itemsize
    label, threshold = ("bytes", TWO_31 // itemsize) if by_bytes else ("elements", TWO_31)
    values = _grow(sampler, spec, base, threshold)
    if values is None:
        top = _grow(sampler, spec, base, 1 << 62)
        reach = element_count(spec.dims, top) if top is not None else 0
        return LargeSkip(
            f"large sizes: the declared ranges keep `{spec.name}` under 2^31 {label}"
            + (f" (at most {reach} elements)" if reach else "")
        )
    dims = {n: int(values[n]) for n in sampler.schema.dims}  # type: ignore[call-overload]
    return DimDraw(dims, _kwargs(sampler, values))


def _at_max(
    op: OpSpec, sampler: Sampler, base: dict[str, object], name: str, dtype: str, budget: int
) -> DimDraw | LargeSkip:
    values = _with_max(sampler, base, name)
    if values is None:
        return LargeSkip(f"large sizes: no size at or just under the max of {name} meets the constraints")
    schema = sampler.schema
    # Other dims that do not shape the rows give way (down to their smallest sizes) before the case is skipped.
    while True:
        dims = {n: int(values[n]) for n in schema.dims}  # type: ignore[call-overload]
        need = case_bytes(op, dims, dtype)
        if need <= budget:
            return DimDraw(dims, _kwargs(sampler, values))
        shrunk = _shrink_others(sampler, values, keep=name)
        if shrunk is None:
            return LargeSkip(
                f"large sizes: {name} = {values[name]} needs about {_gib(need)}, more than the {_gib(budget)} "
                "an at-max case is sized to"
            )
        values = shrunk


def _with_max(sampler: Sampler, base: dict[str, object], name: str) -> dict[str, object] | None:
    """The typical sizes with `name` at its declared max (or as close under it as the constraints allow); the
    other dims keep their typical size where the constraints let them, else the nearest size that fits."""
    schema = sampler.schema
    kwargs = {k: v for k, v in base.items() if k in schema.free_kwargs}
    try:
        low, high = schema.bounds(name, base)
    except ValueError:
        return None
    for size in range(high, max(low, high - GROW_SEARCH) - 1, -1):
        values: dict[str, object] | None = dict(kwargs)
        for other in schema.free_dims:
            assert values is not None
            if other == name:
                values = sampler.admits({**values, name: size})
            else:
                try:
                    lo, hi = schema.bounds(other, values)
                except ValueError:
                    values = None
                else:
                    preferred = min(max(int(base[other]), lo), hi)  # type: ignore[call-overload]
                    pool = tuple(t for t in sampler.typical_or_empty(other, values) if lo <= t <= hi)
                    values = sampler.choose(
                        other, preferred, pool or (preferred,), lo, hi, values, sampler.rng
                    )
            if values is None:
                break
        if values is not None:
            return values
    return None


def _shrink_others(sampler: Sampler, values: dict[str, object], keep: str) -> dict[str, object] | None:
    schema = sampler.schema
    order = sorted(
        (n for n in schema.free_dims if n != keep and n not in sampler.rows and int(values[n]) > 1),  # type: ignore[call-overload]
        key=lambda n: -int(values[n]),  # type: ignore[call-overload]
    )
    for name in order:
        current = int(values[name])  # type: ignore[call-overload]
        for size in (current // 2, current - 1, 1):
            done = sampler.admits({**sampler.free_values(values), name: size})
            if done is not None:
                return done
    return None


def _kwargs(sampler: Sampler, values: Mapping[str, object]) -> dict[str, object]:
    schema = sampler.schema
    return {n: values[n] for n in (*schema.free_kwargs, *schema.bindings) if n in values}
