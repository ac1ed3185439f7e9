"""Dims and kwargs for a case, by size class (plan/model.py SizeClass):

- typical: the user's typical sizes exactly as declared (one of their combinations that meets the constraints),
  never capped;
- boundary: sizes that expose tail masks and non-power-of-two reductions: 0 (when allowed), 1, 2, small primes,
  2^k +- 1 and tile +- 1 up to 257;
- tile: the declared max and the sizes just around block sizes, 2^k + 1 then 2^k - 1 from the largest block
  under the max down (1025, 2049, 4097, ... reach the second block of a loop over a long row). Each tile case
  of a dtype puts one dim at its declared max in turn (plan/maxima.py: the row dims, then the others), the last
  the element cap shrinks; the row dims (the last dim of an input, and dims an op sums over) step through this
  ladder from case to case; other dims are drawn from it;
- large: one case past 2^31 elements (or bytes) of the largest input, and one per dim at its declared max
  (thorough and nightly suites; fuzz/case.py skips, with the reason, what the memory cannot hold).

Sizes the tool chooses (boundary, tile) are capped at `max_elements` per input by shrinking the dims that do not
carry the per-row structure first; a cap that changed a draw is recorded. Derived dims and bound kwargs are
computed, and constraints checked, by the op's Schema (config/dimgraph.py): each drawn dim is chosen among the
sizes that keep every constraint that can already be checked, so the sampler rarely backtracks, and when no size
works the error names the constraint.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuemu_ci.config.dimgraph import Problem, Schema, schema_of
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.plan.maxima import dims_at_max, free_roots, row_dims
from gpuemu_ci.plan.model import CaseStratum, SizeClass
from gpuemu_ci.rng import SeededRng

TILES = (16, 32, 64, 128, 256)
SMALL_PRIMES = (3, 5, 7, 13, 31)
BOUNDARY_MAX_POWER = 8  # boundary sizes reach 2^8 + 1; longer rows are the tile class's
NEAR = 32  # how far from a wanted size the sampler looks for one that meets the constraints
SCAN_LIMIT = 4096  # sizes of a range tried one by one before giving up on a dim
MAX_RESTARTS = 8
TWO_31 = 1 << 31


@dataclass(frozen=True)
class CapChange:
    """A tool-chosen size the element cap shrank."""

    dim: str
    drawn: int
    kept: int


@dataclass(frozen=True)
class DimDraw:
    """The dims and kwargs drawn for one case, and the sizes the element cap shrank."""

    dims: dict[str, int]
    kwargs: dict[str, object]
    capped: tuple[CapChange, ...] = ()


def boundary_sizes(low: int, high: int) -> tuple[int, ...]:
    """Boundary sizes inside [low, high] that are not multiples of 16 (plus 0 and the range's ends when odd)."""
    sizes = {1, 2, *SMALL_PRIMES}
    for k in range(2, BOUNDARY_MAX_POWER + 1):
        sizes.update((2**k - 1, 2**k + 1))
    for tile in TILES:
        sizes.update((tile - 1, tile + 1))
    chosen = {s for s in sizes if low <= s <= high and s % 16 != 0}
    if low == 0:
        chosen.add(0)
    if low % 16 and low <= high:
        chosen.add(low)
    if not chosen and low <= high:
        chosen.add(low)
    return tuple(sorted(chosen))


def tile_ladder(low: int, high: int) -> tuple[int, ...]:
    """The declared max, then 2^k + 1 and then 2^k - 1 for the blocks (16 and up) under it, largest first; a
    short range adds its smaller 2^k +- 1."""
    if high < low:
        return ()
    powers = [1 << k for k in range(4, 63) if (1 << k) <= high]
    ladder = [high]
    ladder += [p + 1 for p in reversed(powers) if low <= p + 1 <= high]
    ladder += [p - 1 for p in reversed(powers) if low <= p - 1 <= high]
    if len(ladder) < 3:
        ladder += [s for k in (3, 2, 1) for s in ((1 << k) + 1, (1 << k) - 1) if low <= s <= high]
    return tuple(dict.fromkeys(s for s in ladder if s > 0 or low == 0))


def element_count(dims: Iterable[str | int], values: Mapping[str, object]) -> int:
    """The number of elements of a shape given as dim names and literal sizes, with the names' sizes from
    `values`."""
    total = 1
    for d in dims:
        size = values[d] if isinstance(d, str) else d
        total *= int(size)  # type: ignore[call-overload]
    return total


def shape_of(dims: tuple[str | int, ...], values: Mapping[str, int]) -> tuple[int, ...]:
    """The shape of dims given as names and literal sizes, with the names' sizes from `values`."""
    return tuple(values[d] if isinstance(d, str) else d for d in dims)


class Sampler:
    """Draws one case's dims and kwargs for one stratum."""

    def __init__(self, op: OpSpec, rng: SeededRng, stratum: CaseStratum) -> None:
        self.op = op
        self.schema = schema_of(op.name, op.shapes, op.line)
        self.rng = rng
        self.stratum = stratum
        self.rows = row_dims(op, self.schema)
        self.row_order = {n: i for i, n in enumerate(n for n in self.schema.free_dims if n in self.rows)}
        # The dim this tile case puts at its declared max (plan/maxima.py): the last the element cap shrinks.
        schedule = dims_at_max(op, self.schema) if stratum.size_class is SizeClass.TILE else ()
        self.at_max = schedule[stratum.rung] if stratum.rung < len(schedule) else None
        # The rows' ladder does not count the tile cases that put another dim at its max (they take the rows'
        # length the cap leaves), so every rung of the ladder still runs: 40000, (M at its max), 32769, 16385...
        self.ladder_step = stratum.rung - sum(
            1 for position, name in enumerate(schedule) if name not in self.rows and position < stratum.rung
        )
        self.failures: dict[str, int] = {}  # constraint text -> how often it emptied a choice

    # --- helpers ------------------------------------------------------------------------------------
    def admits(self, values: dict[str, object]) -> dict[str, object] | None:
        """`values` completed with what they determine, or None when something fails."""
        trial = dict(values)
        problems = self.schema.settle(trial)
        if problems:
            for problem in problems:
                self.failures[problem.name] = self.failures.get(problem.name, 0) + 1
            return None
        return trial

    def free_values(self, values: Mapping[str, object]) -> dict[str, object]:
        """The drawn values of the free dims and kwargs only (those not derived from others)."""
        return {k: v for k, v in values.items() if k in self.schema.free_kwargs or k in self.schema.free_dims}

    # --- kwargs -------------------------------------------------------------------------------------
    def kwargs(self) -> dict[str, object]:
        """The fuzzed kwargs of this case: run `counter` of a pairwise design, so over successive cases of a size
        class every kwarg value meets every value of every other kwarg (and every size class)."""
        names = list(self.schema.free_kwargs)
        if not names:
            return {}
        candidates = [self.schema.free_kwargs[n] for n in names]
        base = _pairwise_prime(max(len(c) for c in candidates), len(names))
        runs = base * base
        for step in range(runs):
            run = (self.stratum.counter + self.stratum.counter // base + step) % runs
            levels = _pairwise_levels(run, base, len(names))
            values: dict[str, object] = {
                name: options[level % len(options)]
                for name, options, level in zip(names, candidates, levels, strict=True)
            }
            if self.admits(values) is not None:
                return values
        for combination in itertools.islice(itertools.product(*candidates), 100_000):
            values = dict(zip(names, combination, strict=True))
            if self.admits(values) is not None:
                return values
        raise self._unsatisfiable("kwargs")

    # --- dims ---------------------------------------------------------------------------------------
    def typical(self, kwargs: dict[str, object]) -> dict[str, object]:
        """A combination of the typical sizes that meets the constraints (with these kwargs if possible).
        Successive typical cases take the largest combination, the smallest, the second largest, the second
        smallest, ...: the user's largest and smallest sizes (prefill and decode, say) both run early."""
        for fixed in (kwargs, None):
            valid = []
            for values in self.schema.typical_assignments(fixed):
                done = self.admits(values)
                if done is not None:
                    valid.append(done)
            if valid:
                valid.sort(key=lambda v: -sum(element_count(spec.dims, v) for spec in self.op.shapes.inputs))
                order = [
                    v for pair in itertools.zip_longest(valid, reversed(valid)) for v in pair if v is not None
                ]
                return order[self.stratum.counter % len(valid)]
        raise self._unsatisfiable("the typical sizes")

    def drawn(self, kwargs: dict[str, object]) -> dict[str, object]:
        """Boundary or tile sizes; restarts with a fresh stream when a later dim has no valid size."""
        for attempt in range(MAX_RESTARTS):
            rng = self.rng if attempt == 0 else self.rng.derive(f"redraw_{attempt}")
            values: dict[str, object] | None = dict(kwargs)
            for position, name in enumerate(self.schema.free_dims):
                assert values is not None
                values = self._draw_one(name, position, values, rng)
                if values is None:
                    break
            if values is not None:
                return values
        raise self._unsatisfiable("sizes")

    def _draw_one(
        self, name: str, position: int, values: dict[str, object], rng: SeededRng
    ) -> dict[str, object] | None:
        try:
            low, high = self.schema.bounds(name, values)
        except ValueError:
            return None
        if high < low:
            self.failures[f"the range of {name}"] = self.failures.get(f"the range of {name}", 0) + 1
            return None
        if self.stratum.size_class is SizeClass.TILE:
            pool = tile_ladder(low, high)
            if name == self.at_max:
                preferred = pool[0]  # the declared max (plan/maxima.py)
            elif name in self.rows:
                # Successive tile cases of a dtype step down the ladder, each row dim at its max in its turn (the
                # first dim in the first tile case, the second in the second...): every dtype row of the quick
                # suite draws the longest rows the schema declares.
                preferred = pool[(self.ladder_step - self.row_order[name]) % len(pool)]
            else:
                preferred = rng.derive(name).choice(pool)
        else:
            pool = boundary_sizes(low, high)
            preferred = rng.derive(name).choice(pool)
        return self.choose(name, preferred, pool, low, high, values, rng)

    def choose(
        self,
        name: str,
        preferred: int,
        pool: tuple[int, ...],
        low: int,
        high: int,
        values: dict[str, object],
        rng: SeededRng,
    ) -> dict[str, object] | None:
        """The preferred size, else a size the constraints point at (`B == A + 2`), else the nearest that keeps
        the constraints, else any from the pool, the other classes, the sizes already chosen, and finally the
        whole range."""
        pointed = sorted(
            (s for s in self.schema.suggestions(name, values) if low <= s <= high),
            key=lambda s: abs(s - preferred),
        )
        for size in (preferred, *pointed, *_near(preferred, low, high)[1:]):
            done = self.admits({**values, name: size})
            if done is not None:
                return done
        fits = [s for s in pool if self.admits({**values, name: s}) is not None]
        if not fits:
            wider = {
                *boundary_sizes(low, high),
                *tile_ladder(low, high),
                *(t for t in self.typical_or_empty(name, values) if low <= t <= high),
                *(
                    v
                    for v in values.values()
                    if isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
                ),
            }
            fits = sorted(s for s in wider if self.admits({**values, name: s}) is not None)
        if not fits:
            fits = [s for s in _scan(low, high) if self.admits({**values, name: s}) is not None][:64]
        if not fits:
            return None
        return self.admits({**values, name: rng.derive(name).derive("fallback").choice(fits)})

    def typical_or_empty(self, name: str, values: Mapping[str, object]) -> tuple[int, ...]:
        """The typical sizes of dim `name` given the values drawn so far; empty when the schema cannot give
        them for these values."""
        try:
            return self.schema.typical(name, values)
        except ValueError:
            return ()

    # --- the element cap ----------------------------------------------------------------------------
    def cap(self, values: dict[str, object]) -> tuple[dict[str, object], tuple[CapChange, ...]]:
        """Shrinks drawn dims until every input holds at most `max_elements` elements: first the dims that do
        not shape the rows, largest first, each to the largest smaller size of its class that keeps the
        constraints; the dim this case puts at its max last."""
        limit = self.op.shapes.max_elements
        drawn = dict(values)
        for spec in self.op.shapes.inputs:
            while element_count(spec.dims, values) > limit:
                shrunk = self._shrink_one(spec.dims, values)
                if shrunk is None:
                    break
                values = shrunk
        changes = tuple(
            CapChange(name, int(drawn[name]), int(values[name]))  # type: ignore[call-overload]
            for name in self.schema.free_dims
            if drawn[name] != values[name]
        )
        return values, changes

    def _shrink_one(self, dims: tuple[str | int, ...], values: dict[str, object]) -> dict[str, object] | None:
        roots = {r for d in dims if isinstance(d, str) for r in free_roots(self.schema, d)}
        position = {name: i for i, name in enumerate(self.schema.free_dims)}
        # Equal sizes go in declaration order: a set's order follows string hashes, which differ per process
        # (PYTHONHASHSEED), and the op's worker and the judge's must shrink the same dim.
        order = sorted(
            (n for n in roots if int(values[n]) > 1),  # type: ignore[call-overload]
            key=lambda n: (n == self.at_max, n in self.rows, -int(values[n]), position[n]),  # type: ignore[call-overload]
        )
        for name in order:
            current = int(values[name])  # type: ignore[call-overload]
            try:
                low, high = self.schema.bounds(name, values)
            except ValueError:
                continue
            # The next smaller size of the same kind (off a multiple of 16, or on one), then any smaller one.
            odd = current % 16 != 0
            known = {
                *boundary_sizes(low, high),
                *tile_ladder(low, high),
                *self.typical_or_empty(name, values),
            }
            smaller = sorted((s for s in known if s < current), key=lambda s: ((s % 16 != 0) != odd, -s))
            for size in (*smaller, *_near(current // 2, low, min(high, current - 1))):
                if size >= current or size < max(low, 0):
                    continue
                done = self._with_size(values, name, size)
                if done is not None:
                    return done
        return None

    def _with_size(self, values: dict[str, object], name: str, size: int) -> dict[str, object] | None:
        """`values` with drawn dim `name` at `size`; the drawn dims after it that the constraints then reject
        are chosen again near their size (`B == A + 2` follows A down)."""
        free = self.free_values(values)
        done = self.admits({**free, name: size})
        if done is not None:
            return done
        later = self.schema.free_dims[self.schema.free_dims.index(name) + 1 :]
        trial: dict[str, object] | None = {k: v for k, v in free.items() if k not in later and k != name}
        assert trial is not None
        trial = self.admits({**trial, name: size})
        for other in later:
            if trial is None:
                return None
            try:
                low, high = self.schema.bounds(other, trial)
            except ValueError:
                return None
            preferred = min(max(int(values[other]), low), high)  # type: ignore[call-overload]
            trial = self.choose(other, preferred, (preferred,), low, high, trial, self.rng)
        return trial

    def _unsatisfiable(self, what: str) -> ConfigError:
        schema = self.schema
        if self.failures:
            worst = max(self.failures, key=lambda k: self.failures[k])
            line = next((c.line for c in schema.constraints if c.expression == worst), None)
            text = f"the constraint {worst!r}" if line is not None else repr(worst)
        else:
            text, line = "the declared ranges", None
        return ConfigError(
            f"op {self.op.name!r}: no {what} of the {self.stratum.size_class.value} size class satisfy {text}",
            line=line or self.op.line,
        )


def _pairwise_prime(levels: int, factors: int) -> int:
    """The smallest prime p with p >= levels and p + 1 >= factors: the p^2 runs of `_pairwise_levels` then
    hold every pair of levels of every two factors."""
    p = max(2, levels, factors - 1)
    while any(p % q == 0 for q in range(2, int(p**0.5) + 1)):
        p += 1
    return p


def _pairwise_levels(run: int, p: int, factors: int) -> list[int]:
    """The levels of each factor in run `run` of an orthogonal array of strength 2: with a = run mod p and
    b = run div p, factor 0 takes a, factor i takes a + (i - 1) b mod p, and the last of p + 1 takes b."""
    a, b = run % p, run // p
    levels = [a] + [(a + i * b) % p for i in range(1, p)] + [b]
    return levels[:factors]


def _near(size: int, low: int, high: int) -> list[int]:
    """`size`, then size +- 1, +- 2, ... up to NEAR away, inside [low, high]."""
    out = [size] if low <= size <= high else []
    for step in range(1, NEAR + 1):
        out += [s for s in (size + step, size - step) if low <= s <= high]
    return out


def _scan(low: int, high: int) -> list[int]:
    if high - low + 1 <= SCAN_LIMIT:
        return list(range(low, high + 1))
    step = (high - low) / (SCAN_LIMIT - 1)
    return sorted({low + round(i * step) for i in range(SCAN_LIMIT)})


def draw(op: OpSpec, rng: SeededRng, stratum: CaseStratum) -> DimDraw:
    """The dims and kwargs of a case of the typical, boundary or tile class (large: `large_draw`)."""
    sampler = Sampler(op, rng, stratum)
    kwargs = sampler.kwargs()
    if stratum.size_class is SizeClass.TYPICAL:
        values = sampler.typical(kwargs)
        return _split(sampler.schema, values)
    values = sampler.drawn(kwargs)
    values, capped = sampler.cap(values)
    return _split(sampler.schema, values, capped)


def _split(schema: Schema, values: Mapping[str, object], capped: tuple[CapChange, ...] = ()) -> DimDraw:
    dims = {name: int(values[name]) for name in schema.dims}  # type: ignore[call-overload]
    kwargs = {name: values[name] for name in (*schema.free_kwargs, *schema.bindings) if name in values}
    return DimDraw(dims, kwargs, capped)


def resolve(
    op: OpSpec, dims: Mapping[str, int], kwargs: Mapping[str, object]
) -> tuple[dict[str, int], dict[str, object], list[Problem]]:
    """Given drawn dims (derived ones are recomputed, whatever `dims` says) and the fuzzed kwargs: every dim,
    the kwargs with bound ones filled in, and what fails."""
    schema = schema_of(op.name, op.shapes, op.line)
    values: dict[str, object] = {k: v for k, v in kwargs.items() if k in schema.free_kwargs}
    values.update({k: v for k, v in dims.items() if k in schema.free_dims})
    missing = [n for n in schema.free_dims if n not in values]
    if missing:
        raise ValueError(f"no size for dim(s) {', '.join(missing)}")
    problems = schema.settle(values)
    split = _split(schema, values)
    return split.dims, split.kwargs, problems


def admissible(op: OpSpec, dims: Mapping[str, int], kwargs: Mapping[str, object]) -> bool:
    """Whether these drawn dims (and kwargs) make a valid case: every constraint holds, derived dims fit."""
    try:
        return not resolve(op, dims, kwargs)[2]
    except ValueError:
        return False
