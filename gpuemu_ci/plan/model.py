"""A case: one op called once, identified by (master seed, case index) and by its own case seed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class ValueMode(StrEnum):
    """The value distribution of a case; the adversarial ones each trigger a known bug class."""

    REGULAR = "regular"
    BOUNDARY = "boundary"
    OFFSET = "adversarial:offset"  # mean >> std (one-pass variance)
    ASCENDING = "adversarial:ascending"  # globally sorted, positive (online-softmax rescale)
    ALL_NEGATIVE = "adversarial:all_negative"  # max initialised to 0
    WIDE_RANGE = "adversarial:wide_range"  # huge dynamic range within a row
    CANCELLATION = "adversarial:cancellation"  # x and -x pairs
    TIES = "adversarial:ties"  # few distinct values, duplicates
    ZERO_ROWS = "adversarial:zero_rows"  # every third row all zero (an ignored eps divides by 0)
    UNDERFLOW_ROWS = (
        "adversarial:underflow_rows"  # every other row below exp's underflow (max initialised to 0)
    )
    CAPTURED = "captured"  # real inputs from a shadowed call (a capture) or a pinned corpus case

    @property
    def distribution(self) -> str:
        """The distribution the mode belongs to (`regular`, `boundary` or `adversarial`), as gpuemu.toml names
        it."""
        return self.value.split(":", 1)[0]


class SizeClass(StrEnum):
    """Where a case's dims come from."""

    TYPICAL = "typical"  # the user's typical sizes, exactly as declared (never capped)
    BOUNDARY = "boundary"  # 0, 1, 2, small primes, 2^k +- 1 and tile +- 1 up to 257
    TILE = (
        "tile"  # just around block sizes up to the declared max (1025, 2049, 4097, ...), and the max itself
    )
    LARGE = "large"  # past 2^31 elements or bytes, or a dim at its declared max (thorough and nightly)


@dataclass(frozen=True)
class CaseStratum:
    """What the case seed selects deterministically (so a seed alone replays the case)."""

    dtype: str
    mode: ValueMode
    size_class: SizeClass
    contiguous: bool  # every input contiguous (True) or each input in a non-contiguous layout
    counter: int = 0  # this case's position among its size class: picks the tile rung, kwargs, large variant
    # This case's position among its size class within its own dtype: the tile rung of the dims that shape the
    # rows, so each dtype's first tile cases draw every such dim at its declared max (one dim per case).
    rung: int = 0

    @property
    def aligned(self) -> bool:
        """The user's typical sizes (the old name of the typical class)."""
        return self.size_class is SizeClass.TYPICAL


@dataclass(frozen=True)
class CaseRef:
    """One planned case of one op."""

    op: str
    index: int  # iteration n: case_seed = derive_seed(master, f"iter_{n}"); negative for a corpus case
    seed: int
    snapshot: Path | None = None  # a pinned regression case (corpus): its inputs come from this file

    @property
    def case_id(self) -> str:
        """The case's id in results and replays: `op/index`, or `op/corpus:<file>` for a pinned case."""
        return (
            f"{self.op}/corpus:{self.snapshot.name}"
            if self.snapshot is not None
            else f"{self.op}/{self.index}"
        )

    @property
    def origin(self) -> str | None:
        """Where a case comes from when it is not fuzzed: "corpus:<file>"."""
        return f"corpus:{self.snapshot.name}" if self.snapshot is not None else None
