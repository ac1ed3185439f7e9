"""A case: one op called once, identified by (master seed, case index) and by its own case seed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
    CAPTURED = "captured"  # real inputs from a shadowed call (a capture) or a pinned corpus case

    @property
    def distribution(self) -> str:
        return self.value.split(":", 1)[0]


@dataclass(frozen=True)
class CaseStratum:
    """What the case seed selects deterministically (so a seed alone replays the case)."""

    dtype: str
    mode: ValueMode
    aligned: bool  # dims from the user's typical sizes (True) or boundary sizes (False)
    contiguous: bool  # every input contiguous (True) or each input in a non-contiguous layout


@dataclass(frozen=True)
class CaseRef:
    """One planned case of one op."""

    op: str
    index: int  # iteration n: case_seed = derive_seed(master, f"iter_{n}")
    seed: int

    @property
    def case_id(self) -> str:
        return f"{self.op}/{self.index}"
