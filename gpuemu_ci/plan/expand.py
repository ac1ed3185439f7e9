"""Config + suite -> the ordered cases of each op, with coverage guaranteed by construction.

The case seed alone decides a case's stratum: its dtype, value mode, size class (typical, boundary, tile, large),
whether its inputs are contiguous, and a counter that picks the tile rung, the kwargs and the large variant. So
`replay --seed` needs nothing else. Coverage comes from *choosing* iteration indices: for each wanted stratum the
plan takes the next iteration n whose seed `derive_seed(master, f"iter_{n}")` falls in it.

Each dtype has 32 slots (`SLOT_TABLE`); the quick suite runs the first 16, which hold every value mode, every
size class with and without contiguous inputs, and the user's typical sizes exactly as declared; the thorough
and nightly suites cycle through all 32 and add the large-size cases.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuemu_ci.config.model import Config, Distribution, OpSpec, Suite
from gpuemu_ci.plan.maxima import dims_at_max
from gpuemu_ci.plan.model import CaseRef, CaseStratum, SizeClass, ValueMode
from gpuemu_ci.rng import derive_seed

ADVERSARIAL_MODES = (
    ValueMode.OFFSET,
    ValueMode.ASCENDING,
    ValueMode.ALL_NEGATIVE,
    ValueMode.WIDE_RANGE,
    ValueMode.CANCELLATION,
    ValueMode.TIES,
    ValueMode.ZERO_ROWS,
    ValueMode.UNDERFLOW_ROWS,
)
MAX_SCAN = 10_000_000

_R, _B, _O, _A = ValueMode.REGULAR, ValueMode.BOUNDARY, ValueMode.OFFSET, ValueMode.ASCENDING
_N, _W, _C, _T = ValueMode.ALL_NEGATIVE, ValueMode.WIDE_RANGE, ValueMode.CANCELLATION, ValueMode.TIES
_Z, _U = ValueMode.ZERO_ROWS, ValueMode.UNDERFLOW_ROWS
_TYP, _BND, _TIL = SizeClass.TYPICAL, SizeClass.BOUNDARY, SizeClass.TILE

# (value mode, size class, contiguous). The first 16 are the quick suite: every mode at least once, each size
# class with and without contiguous inputs, regular values at typical and tile sizes on contiguous inputs (the
# rounding-bias test), ascending and underflow rows on long tile rows. The second 16 pair each mode with the
# size classes and layouts the first half left out.
SLOT_TABLE: tuple[tuple[ValueMode, SizeClass, bool], ...] = (
    (_R, _TYP, True),
    (_B, _BND, False),
    (_R, _TIL, True),
    (_A, _TIL, False),
    (_O, _TYP, False),
    (_N, _BND, True),
    (_U, _TIL, True),
    (_Z, _BND, False),
    (_W, _TIL, False),
    (_C, _BND, True),
    (_T, _TYP, True),
    (_R, _BND, False),
    (_B, _TIL, True),
    (_O, _TIL, True),
    (_A, _BND, True),
    (_R, _TIL, False),
    (_N, _TIL, False),
    (_N, _TYP, True),
    (_U, _BND, False),
    (_U, _TYP, False),
    (_Z, _TIL, True),
    (_Z, _TYP, True),
    (_W, _BND, True),
    (_W, _TYP, False),
    (_C, _TIL, False),
    (_C, _TYP, False),
    (_T, _BND, False),
    (_T, _TIL, True),
    (_B, _TYP, False),
    (_R, _TYP, False),
    (_O, _BND, False),
    (_A, _TYP, False),
)
SLOTS = len(SLOT_TABLE)
QUICK_SLOTS = 16
LARGE_SLOT = SLOTS  # one more slot per dtype code: the large-size class
ROUNDS = 8  # rounds of the table a seed can select (later rounds repeat them with other seeds)
FULL_ROW = 8  # a dtype running at least this many slots (the quick suite's rows) gets every dim at its max
_CODES_PER_DTYPE = (SLOTS + 1) * ROUNDS


def _occurrences() -> tuple[tuple[int, ...], dict[SizeClass, int]]:
    """For each slot, its index among the slots of its size class; and how many slots each class has."""
    seen: dict[SizeClass, int] = {}
    index = []
    for _, size_class, _ in SLOT_TABLE:
        index.append(seen.get(size_class, 0))
        seen[size_class] = seen.get(size_class, 0) + 1
    return tuple(index), seen


_OCCURRENCE, _CLASS_COUNT = _occurrences()


def value_modes(op: OpSpec) -> tuple[ValueMode, ...]:
    """The value modes the op's cases draw from, in plan order: regular, boundary and every adversarial mode,
    as far as the op's declared distributions include them."""
    modes: list[ValueMode] = []
    if Distribution.REGULAR in op.shapes.distributions:
        modes.append(ValueMode.REGULAR)
    if Distribution.BOUNDARY in op.shapes.distributions:
        modes.append(ValueMode.BOUNDARY)
    if Distribution.ADVERSARIAL in op.shapes.distributions:
        modes.extend(ADVERSARIAL_MODES)
    return tuple(modes)


def _code(dtype_index: int, slot: int, round_: int) -> int:
    return dtype_index * _CODES_PER_DTYPE + slot * ROUNDS + round_ % ROUNDS


def stratum(op: OpSpec, seed: int) -> CaseStratum:
    """The stratum a case seed selects for this op (a pure function of the seed and the op's config)."""
    dtypes_count = len(op.dtypes)
    code = seed % (dtypes_count * _CODES_PER_DTYPE)
    dtype_index, rest = divmod(code, _CODES_PER_DTYPE)
    slot, round_ = divmod(rest, ROUNDS)
    modes = value_modes(op)
    dtype = op.dtypes[dtype_index]
    if slot == LARGE_SLOT:
        mode = ValueMode.REGULAR if ValueMode.REGULAR in modes else modes[0]
        return CaseStratum(dtype, mode, SizeClass.LARGE, contiguous=True, counter=round_)
    mode, size_class, contiguous = SLOT_TABLE[slot]
    if mode not in modes:
        mode = modes[slot % len(modes)]
    # Successive cases of a size class (dtypes interleaved, then rounds) get successive counters, so the tile
    # rungs and the kwarg combinations are spread over every dtype of the suite.
    rung = _OCCURRENCE[slot] + round_ * _CLASS_COUNT[size_class]
    counter = rung * dtypes_count + dtype_index
    return CaseStratum(dtype, mode, size_class, contiguous, counter, rung)


def suite_dtypes(op: OpSpec, config: Config, suite: Suite, only: Sequence[str] = ()) -> tuple[str, ...]:
    """The dtypes a suite runs for `op`: every dtype it declares, unless `ci.quick_dtypes` narrows the quick
    suite (an op with none of those runs its first dtype) or `--dtype` picks some."""
    if only:
        return tuple(d for d in op.dtypes if d in only)
    if suite is Suite.QUICK and config.ci.quick_dtypes is not None:
        chosen = tuple(d for d in op.dtypes if d in config.ci.quick_dtypes)
        return chosen or op.dtypes[:1]
    return op.dtypes


def large_variants(op: OpSpec) -> int:
    """Large-class cases per op: one past 2^31 elements, one past 2^31 bytes, and one per drawn dim at its
    declared max (fuzz/large.py)."""
    drawn = sum(1 for dim in op.shapes.dims if not dim.is_derived)
    return min(ROUNDS, 2 + drawn)


def _more_tile_slots(count: int, needed: int) -> list[int]:
    """The slots after the first `count` that a dtype also runs so that its tile cases number at least
    `needed`: the next tile-class slots of the table, round after round. None for a dtype that runs fewer than
    FULL_ROW slots: a run asked for fewer cases (`--iterations 2`) gets them."""
    if count < FULL_ROW:
        return []
    have = sum(1 for k in range(count) if SLOT_TABLE[k % SLOTS][1] is SizeClass.TILE)
    more: list[int] = []
    k = count
    while have + len(more) < needed:
        if SLOT_TABLE[k % SLOTS][1] is SizeClass.TILE:
            more.append(k)
        k += 1
    return more


def plan_op(
    op: OpSpec,
    master_seed: int,
    dtypes: Sequence[str],
    iterations: int,
    suite: Suite = Suite.QUICK,
    extra_iterations: int | None = None,
) -> list[CaseRef]:
    """The first `iterations` slots of the first of `dtypes` and the first `extra_iterations` (default:
    `iterations`) of each other (the table in order, round after round), with more tile slots where a dtype's
    slots hold fewer tile cases than the op has dims to put at their max (plan/maxima.py), plus the large-size
    cases of the thorough and nightly suites (in the first of `dtypes`)."""
    if iterations <= 0 or not dtypes:
        return []
    modulus = len(op.dtypes) * _CODES_PER_DTYPE
    wanted: dict[int, int] = {}  # stratum code -> cases still to find
    for position, dtype in enumerate(dtypes):
        index = op.dtypes.index(dtype)
        count = iterations if position == 0 or extra_iterations is None else min(iterations, extra_iterations)
        for k in range(count):
            code = _code(index, k % SLOTS, k // SLOTS)
            wanted[code] = wanted.get(code, 0) + 1
    if suite is not Suite.QUICK:
        index = op.dtypes.index(dtypes[0])
        for variant in range(large_variants(op)):
            code = _code(index, LARGE_SLOT, variant)
            wanted[code] = wanted.get(code, 0) + 1
    for position, dtype in enumerate(dtypes):  # every varying dim at its max once per dtype (plan/maxima.py)
        index = op.dtypes.index(dtype)
        count = iterations if position == 0 or extra_iterations is None else min(iterations, extra_iterations)
        for k in _more_tile_slots(count, len(dims_at_max(op))):
            code = _code(index, k % SLOTS, k // SLOTS)
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
