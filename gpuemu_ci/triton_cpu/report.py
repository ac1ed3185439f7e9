"""What the GPU-faithful layer saw during one op call, as the op side sends it to the judge."""

from __future__ import annotations

from typing import TypeVar

import msgspec
import numpy as np

from gpuemu_ci.triton_cpu.shadow import ShadowFinding
from gpuemu_ci.triton_cpu.where import StoreMap

K = TypeVar("K", str, int)

OUT_OF_BOUNDS = "out_of_bounds"
RACE = "race"
TAMPERED = "tampered"  # the op changed the layer during its call (guard.py)

# Unit roundoff of a `tl.dot`'s fp32 inputs at each input precision: TF32 keeps 10 mantissa bits (rounded to
# nearest), tf32x3 recovers about 21 (the dropped small*small product), ieee multiplies exactly.
DOT_INPUT_ROUNDOFF = {"tf32": 2.0**-11, "tf32x3": 2.0**-21, "ieee": 0.0}

# What a probe (a second call of the op under one changed setting, backends/layer_probes.py) tells apart.
MASKED_LANES = "masked_lanes"  # masked-off lanes of loads without `other` read something else
PROGRAM_ORDER = "program_order"  # the launch's programs in their plain order instead of the seeded one
TF32 = "tf32"  # every fp32 `tl.dot` at full precision
POINTER = (
    "pointer"  # an explain re-run's out-of-bounds access: the lines its pointer's offset was computed on
)
NONFINITE = "nonfinite"  # the shadow run's: the first non-finite value made from finite operands


class Decided(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The output elements a probe changed: per output, the flat mask packed by `np.packbits` (b"" where none
    changed) and how many changed; `sites` are the kernel lines the probe varied that changed them."""

    by: str
    sites: tuple[str, ...] = ()
    outputs: tuple[bytes, ...] = ()
    counts: tuple[int, ...] = ()

    @property
    def any(self) -> bool:
        """Whether the probe changed any output element."""
        return any(self.counts)

    def at(self, output: int, size: int, index: int) -> bool:
        """Whether flat element `index` of output `output` (of `size` elements) changed under the probe."""
        if output >= len(self.outputs) or not self.outputs[output] or index >= size:
            return False
        bits = np.unpackbits(np.frombuffer(self.outputs[output], dtype=np.uint8), count=size)
        return bool(bits[index])


class Explained(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one explain probe (backends/explain_probes.py) found in an explain re-run: `by` names the probe,
    `site` the kernel line it names, `text` says what it found there. `outputs`: the op's outputs with the
    probe's change made (each output's bytes, C order, at the judged call's shapes and dtypes): the finding holds
    only where the judge, with the same reference, finds they bring the failing elements within their allowance.
    Empty: the finding stands as it is."""

    by: str
    site: str
    text: str
    outputs: tuple[bytes, ...] = ()
    kinds: tuple[str, ...] = ()  # the failure kinds it explains (empty: any)


class TritonReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Findings are (kind, message) pairs: `out_of_bounds` or `race`. `dot_precisions`: the input precisions
    of the fp32 `tl.dot`s the kernels ran (`tf32` unless the kernel asked otherwise); `dot_sites`: (line,
    precision) of those not at `ieee`, `dot_defaulted`: the lines that left `input_precision` at its default.
    `undefined_lanes`: where loads without `other` (and atomics) had masked-off lanes, which read
    `masked_lanes` ("zero" as NVIDIA and AMD read them, or "poison"). `notes`: interpreter faults worked
    around (Python `and`/`or` on tensors). `interpreter_gaps`: what the interpreter cannot run (inline asm,
    extern calls, fp8e4b15), each with its kernel and line: the case is not judged (the kernel is not at
    fault). `decided`: what the probes of the op call found (backends/layer_probes.py)."""

    sanitized: bool = True
    launches: int = 0
    findings: tuple[tuple[str, str], ...] = ()
    dot_precisions: tuple[str, ...] = ()
    undefined_lanes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    interpreter_gaps: tuple[str, ...] = ()  # constructs the interpreter cannot run (inline asm): not judged
    vectorised: int = 0  # launches that ran every program at once (triton_cpu/grid.py)
    per_program: tuple[tuple[str, int], ...] = ()  # launches run one program at a time: (why, how many)
    # Of the vectorised launches, those whose programs diverged and ran in k groups that agree: (k, how many).
    grouped: tuple[tuple[int, int], ...] = ()
    dot_sites: tuple[tuple[str, str], ...] = ()
    dot_defaulted: tuple[str, ...] = ()
    masked_lanes: str = "zero"
    atomics: bool = False  # an atomic ran in a launch of several programs
    decided: tuple[Decided, ...] = ()
    internal_error: str = ""  # the layer's own code raised: the tool's error (the case is not judged)
    # Per output of the op call: where each element was stored (where.py); None for an output no map covers.
    stores: tuple[StoreMap | None, ...] = ()
    stores_note: str = ""  # why no output has a map ("" when they have, or the call stored nothing watched)
    explained: tuple[Explained, ...] = ()  # what the explain probes found (an explain re-run only)
    # Loads with `other` that had masked-off lanes: (line, `other`), noted in an explain re-run (what_if.py).
    masked_others: tuple[tuple[str, float], ...] = ()
    # The float64 shadow run (CallSettings.shadow64, shadow.py): per program whose stores parted from float64
    # beyond rounding, the first operation that made them part (those that parted most first); `shadowed`: the
    # programs shadowed (0: no shadow ran).
    shadow: tuple[ShadowFinding, ...] = ()
    shadowed: int = 0
    # ... and the call's first operation that made a NaN or an infinity from finite operands (NONFINITE).
    first_nonfinite: Explained | None = None

    def dot_input_roundoff(self) -> float:
        """The largest input roundoff among the dots the kernels ran (0.0: none, or all ieee)."""
        return max((DOT_INPUT_ROUNDOFF.get(p, 0.0) for p in self.dot_precisions), default=0.0)

    def decided_by(self, by: str) -> Decided | None:
        """The probe `by` (a name such as MASKED_LANES) that changed some output, if it ran and did."""
        return next((d for d in self.decided if d.by == by and d.any), None)

    def merged(self, other: TritonReport | None) -> TritonReport:
        """This call's report with a re-run's (the determinism check's second call); the probes are this call's."""
        if other is None:
            return self

        def union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys((*a, *b)))

        return TritonReport(
            self.sanitized and other.sanitized,
            self.launches + other.launches,
            tuple(dict.fromkeys((*self.findings, *other.findings))),
            union(self.dot_precisions, other.dot_precisions),
            union(self.undefined_lanes, other.undefined_lanes),
            union(self.notes, other.notes),
            union(self.interpreter_gaps, other.interpreter_gaps),
            self.vectorised + other.vectorised,
            _add_counts(self.per_program, other.per_program),
            _add_counts(self.grouped, other.grouped),
            tuple(dict.fromkeys((*self.dot_sites, *other.dot_sites))),
            union(self.dot_defaulted, other.dot_defaulted),
            self.masked_lanes,
            self.atomics or other.atomics,
            self.decided,
            self.internal_error or other.internal_error,
            self.stores,  # this call's: the outputs judged are its own
            self.stores_note,
            self.explained,
            self.masked_others,
            shadow=self.shadow,
            shadowed=self.shadowed,
            first_nonfinite=self.first_nonfinite,
        )


def _add_counts(a: tuple[tuple[K, int], ...], b: tuple[tuple[K, int], ...]) -> tuple[tuple[K, int], ...]:
    total: dict[K, int] = dict(a)
    for reason, count in b:
        total[reason] = total.get(reason, 0) + count
    return tuple(sorted(total.items()))
