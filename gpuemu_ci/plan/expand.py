"""Config + suite -> the ordered cases of each op, with coverage guaranteed by construction.

The case seed alone decides a case's stratum (dtype, value mode, aligned or boundary dims, contiguous or not),
so `replay --seed` needs nothing else. Coverage comes from *choosing* iteration indices: for each wanted stratum
the plan takes the next iteration n whose seed `derive_seed(master, f"iter_{n}")` falls in it. Sixteen
consecutive slots cover every value mode with both aligned and unaligned dims and both layouts.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuemu_ci.config.model import Config, Distribution, OpSpec, Suite
from gpuemu_ci.plan.model import CaseRef, CaseStratum, ValueMode
from gpuemu_ci.rng import derive_seed

SLOTS = 16
ADVERSARIAL_MODES = (
    ValueMode.OFFSET,
    ValueMode.ASCENDING,
    ValueMode.ALL_NEGATIVE,
    ValueMode.WIDE_RANGE,
    ValueMode.CANCELLATION,
    ValueMode.TIES,
)
MAX_SCAN = 10_000_000


def value_modes(op: OpSpec) -> tuple[ValueMode, ...]:
    modes: list[ValueMode] = []
    if Distribution.REGULAR in op.shapes.distributions:
        modes.append(ValueMode.REGULAR)
    if Distribution.BOUNDARY in op.shapes.distributions:
        modes.append(ValueMode.BOUNDARY)
    if Distribution.ADVERSARIAL in op.shapes.distributions:
        modes.extend(ADVERSARIAL_MODES)
    return tuple(modes)


def slot_of(slot: int) -> tuple[int, bool, bool]:
    """(mode slot, aligned, contiguous): the second half of 16 slots flips alignment and layout."""
    half = slot // 8
    return slot % 8, (slot % 2) ^ half == 0, ((slot // 2) % 2) ^ half == 0


def stratum(op: OpSpec, seed: int) -> CaseStratum:
    """The stratum a case seed selects for this op (a pure function of the seed and the op's config)."""
    code = seed % (len(op.dtypes) * SLOTS)
    dtype = op.dtypes[code // SLOTS]
    mode_slot, aligned, contiguous = slot_of(code % SLOTS)
    modes = value_modes(op)
    return CaseStratum(
        dtype=dtype, mode=modes[mode_slot % len(modes)], aligned=aligned, contiguous=contiguous
    )


def suite_dtypes(op: OpSpec, config: Config, suite: Suite, only: Sequence[str] = ()) -> tuple[str, ...]:
    if only:
        return tuple(d for d in op.dtypes if d in only)
    if suite is Suite.QUICK:
        chosen = tuple(d for d in op.dtypes if d in config.ci.quick_dtypes)
        return chosen or op.dtypes[:1]
    return op.dtypes


def plan_op(op: OpSpec, master_seed: int, dtypes: Sequence[str], iterations: int) -> list[CaseRef]:
    """The first `iterations` cases per dtype, filling the 16 coverage slots round-robin."""
    if iterations <= 0 or not dtypes:
        return []
    modulus = len(op.dtypes) * SLOTS
    wanted: dict[int, int] = {}  # stratum code -> slots still to fill
    for dtype in dtypes:
        base = op.dtypes.index(dtype) * SLOTS
        for k in range(iterations):
            code = base + k % SLOTS
            wanted[code] = wanted.get(code, 0) + 1
    remaining = sum(wanted.values())
    cases: list[CaseRef] = []
    n = 0
    while remaining and n < MAX_SCAN:
        seed = derive_seed(master_seed, f"iter_{n}")
        code = seed % modulus
        if wanted.get(code):
            wanted[code] -= 1
            remaining -= 1
            cases.append(CaseRef(op.name, n, seed))
        n += 1
    return cases
