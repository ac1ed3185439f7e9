"""What the GPU-faithful layer saw during one op call, as the op side sends it to the judge."""

from __future__ import annotations

from typing import TypeVar

import msgspec

K = TypeVar("K", str, int)

OUT_OF_BOUNDS = "out_of_bounds"
RACE = "race"

# Unit roundoff of a `tl.dot`'s fp32 inputs at each input precision: TF32 keeps 10 mantissa bits (rounded to
# nearest), tf32x3 recovers about 21 (the dropped small*small product), ieee multiplies exactly.
DOT_INPUT_ROUNDOFF = {"tf32": 2.0**-11, "tf32x3": 2.0**-21, "ieee": 0.0}


class TritonReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Findings are (kind, message) pairs: `out_of_bounds` or `race`. `dot_precisions`: the input precisions
    of the fp32 `tl.dot`s the kernels ran (`tf32` unless the kernel asked otherwise). `poisoned`: where loads
    without `other` had masked-off lanes (filled with NaN / a sentinel). `notes`: interpreter faults worked
    around (Python `and`/`or` on tensors). `interpreter_gaps`: constructs the interpreter raised
    NotImplementedError on (`inline_asm`, `extern_elementwise`): the case is not judged (the kernel is not at
    fault)."""

    sanitized: bool = True
    launches: int = 0
    findings: tuple[tuple[str, str], ...] = ()
    dot_precisions: tuple[str, ...] = ()
    poisoned: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    interpreter_gaps: tuple[str, ...] = ()  # constructs the interpreter cannot run (inline asm): not judged
    vectorised: int = 0  # launches that ran every program at once (triton_cpu/grid.py)
    per_program: tuple[tuple[str, int], ...] = ()  # launches run one program at a time: (why, how many)
    # Of the vectorised launches, those whose programs diverged and ran in k groups that agree: (k, how many).
    grouped: tuple[tuple[int, int], ...] = ()

    def dot_input_roundoff(self) -> float:
        """The largest input roundoff among the dots the kernels ran (0.0: none, or all ieee)."""
        return max((DOT_INPUT_ROUNDOFF.get(p, 0.0) for p in self.dot_precisions), default=0.0)

    def merged(self, other: TritonReport | None) -> TritonReport:
        """This call's report with a re-run's (the determinism check's second call)."""
        if other is None:
            return self

        def union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys((*a, *b)))

        return TritonReport(
            self.sanitized and other.sanitized,
            self.launches + other.launches,
            tuple(dict.fromkeys((*self.findings, *other.findings))),
            union(self.dot_precisions, other.dot_precisions),
            union(self.poisoned, other.poisoned),
            union(self.notes, other.notes),
            union(self.interpreter_gaps, other.interpreter_gaps),
            self.vectorised + other.vectorised,
            _add_counts(self.per_program, other.per_program),
            _add_counts(self.grouped, other.grouped),
        )


def _add_counts(a: tuple[tuple[K, int], ...], b: tuple[tuple[K, int], ...]) -> tuple[tuple[K, int], ...]:
    total: dict[K, int] = dict(a)
    for reason, count in b:
        total[reason] = total.get(reason, 0) + count
    return tuple(sorted(total.items()))
