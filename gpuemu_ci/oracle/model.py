"""Verdicts of the oracle: plain data, one per case."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from gpuemu_ci.results.model import FailureKind


class Comparator(StrEnum):
    """How an output is compared with the reference."""

    BOUND = "bound"  # a-priori error bound per op family
    ALLCLOSE = "allclose"  # |y - r| <= atol + rtol |r| (explicit or default tolerances)
    EXACT = "exact"  # y == r rounded to the output dtype
    BASELINE_RELATIVE = "baseline_relative"  # err(y) <= k err(naive same-dtype implementation)
    ARGMAX = "argmax"  # the chosen index scores within the scores' error bound of the best


# Kinds where the op ran and produced a wrong answer (the gate fails); the others mean it could not be judged.
WRONG_ANSWER = frozenset(
    {
        FailureKind.MISMATCH,
        FailureKind.NONFINITE,
        FailureKind.INVARIANT,
        FailureKind.SHAPE,
        FailureKind.DTYPE,
        FailureKind.INPUTS_MODIFIED,
        FailureKind.NONDETERMINISTIC,
        FailureKind.BIAS,
        FailureKind.UNWRITTEN,
        FailureKind.CRASHED,
        FailureKind.TIMEOUT,
        FailureKind.OOM,
        FailureKind.RAISED,
        FailureKind.BAD_OUTPUT,
        FailureKind.OUT_OF_BOUNDS,
        FailureKind.RACE,
        FailureKind.UNDEFINED_MASKED_LANES,
        FailureKind.TAMPERED,
    }
)


@dataclass(frozen=True)
class Finding:
    """One reason a case failed."""

    kind: FailureKind
    message: str


@dataclass(frozen=True)
class ErrorStats:
    """How far the op was from the reference, as judged by one comparator."""

    comparator: Comparator
    headroom: float | None  # worst |y - r| / allowed over elements (<= 1 passes); None when not measured
    max_abs_error: float | None
    worst_index: tuple[int, ...] | None
    exceeded: int  # elements over the allowance
    total: int
    allowed_at_worst: float | None = None
    bias_z: float | None = None
    # Per element: error / allowance (inf where the non-finite class is wrong), the output's shape; drawn as the
    # failing case's error map (results/error_map.py). None where the comparator measures no such thing.
    ratio: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CaseVerdict:
    """One case's verdict: whether it passed, what failed, and its figures (the worst output's)."""

    passed: bool
    findings: tuple[Finding, ...]
    stats: ErrorStats | None

    @property
    def primary(self) -> Finding | None:
        """The first finding, which names the case's failure kind; None for a pass."""
        return self.findings[0] if self.findings else None
