"""What the layer keeps for one op call and for the launch running in it: the explicit state its pieces share.

`intercepted` (layer.py) makes one `CallRecord` per op call; each launch of the call gets a `Launch` (the kernel,
its grid, its arguments' memory, the program running, the vectorised batch, the tracer, the replayed step's
source line). The hooks Triton's interpreter calls find the record through `active.py`; everything else is
handed it. `KernelMemory` is what the process learned about kernels across calls (tapes to replay, kernels that
cannot vectorise): a cache, never part of a verdict.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuemu_ci.triton_cpu import sites
from gpuemu_ci.triton_cpu.boundary import Patch
from gpuemu_ci.triton_cpu.memory import Memory
from gpuemu_ci.triton_cpu.report import NONFINITE, Explained, TritonReport
from gpuemu_ci.triton_cpu.shadow import ShadowRun
from gpuemu_ci.triton_cpu.where import StoreLog

if TYPE_CHECKING:
    from gpuemu_ci.triton_cpu.grid import Batch
    from gpuemu_ci.triton_cpu.tape import Tape
    from gpuemu_ci.triton_cpu.tracer import Tracer

MAX_POISON_SITES = 8
ZERO, POISON = "zero", "poison"


class KernelFault(Exception):
    """A kernel's access outside its arguments: the launch stops before the access happens."""


@dataclass(frozen=True)
class CallSettings:
    """How the layer runs one op call (`intercepted`): the seed, the program order, the masked lanes' values."""

    seed: int  # the case seed: program order and integer poison derive from it
    call: int = 0  # 0: the op's call, 1: the determinism re-run (another program order)
    sanitize: bool = True  # `[ops.triton] sanitize = false` turns the whole layer off
    vectorise: bool | None = None  # every program at once where it can (grid.py); None: `set_vectorise`'s
    replay: bool = True  # a vectorised launch replays the tape of an earlier one where it can (replay.py)
    # What masked-off lanes of a load without `other` (and of an atomic) read: ZERO as NVIDIA and AMD give them,
    # or POISON (NaN, +Inf, -Inf; loud integers) at every such site, or only at `poison_sites` when given.
    masked_lanes: str = ZERO
    poison_sites: frozenset[str] | None = None
    seeded_order: bool = True  # False: the programs of a launch in their plain order (a probe, probes.py)
    ieee_dots: bool = False  # True: every fp32 `tl.dot` at full precision, whatever it asked (a probe)
    log_stores: bool = False  # log where each store wrote (where.py): only in an explain re-run
    # A what-if of the explain re-run (what_if.py): masked-off lanes of the loads with `other` at this line
    # read this value instead.
    other_override: tuple[str, float] | None = None
    # True: a float64 shadow of every float value, compared operation by operation (shadow.py); programs run one
    # at a time. Only while a failure is being explained: it costs several times the call.
    shadow64: bool = False
    # The (kernel, linear program id) the shadow follows, in order, each alone before the launch's others, until
    # one has a finding; the rest run as in any call (every program at once where it can). None: every program,
    # one at a time (shadow.py, backends/explain_shadow.py).
    shadow_programs: tuple[tuple[str, int], ...] | None = None


@dataclass
class Launch:
    """One launch of a kernel: its grid and memory, the program running now, and its vectorised pass's state."""

    kernel: str
    grid: tuple[int, int, int]
    memory: Memory
    program: tuple[int, int, int] = (0, 0, 0)
    pid: int = 0
    synchronised: bool = False  # this program has done an atomic: its later reads may see other programs'
    race_found: bool = False
    batch: Batch | None = None  # the programs a vectorised pass runs together (grid.py), None per program
    tracer: Tracer | None = None  # records the vectorised pass as a tape (tracer.py)
    replay_site: str | None = None  # the source line of the tape step being replayed (replay.py)


@dataclass
class Backoff:
    """A kernel (at one launch signature) whose last vectorised try fell back for a reason of its data."""

    why: str
    skip: int  # launches left to run per program directly before the next try
    wait: int  # the skip set at the last fallback (doubles with each fallback)


@dataclass
class KernelMemory:
    """What a process learned about kernels across op calls; it saves time and never changes an outcome.

    `tapes` by key (tape.py's `tape_key`), most recently replayed first; `untraceable`: keys whose pass could
    not be traced, and why; `traced_fell_back`: keys whose last traced pass fell back (their next pass runs
    untraced); `per_program`: kernels (function and constexprs) that cannot vectorise whatever their data;
    `defaulted_dots`: lines whose fp32 `tl.dot` left `input_precision` at its default, as a traced pass saw
    them (a replay runs no Python to tell); `counts`: replayed, abandoned and traced launches, for benchmarks.
    """

    tapes: dict[Hashable, list[Tape]] = field(default_factory=dict)
    untraceable: dict[Hashable, str] = field(default_factory=dict)
    traced_fell_back: set[Hashable] = field(default_factory=set)
    per_program: dict[Hashable, str] = field(default_factory=dict)
    defaulted_dots: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: {"replayed": 0, "abandoned": 0, "traced": 0})


@dataclass
class CallRecord:
    """Everything the layer saw and set during one op call; `report()` is what it tells the judge."""

    settings: CallSettings
    kernels: KernelMemory = field(default_factory=KernelMemory)
    vectorise: bool = True  # the settings' `vectorise`, with the process default filled in
    launches: int = 0
    findings: list[tuple[str, str]] = field(default_factory=list)
    dot_precisions: set[str] = field(default_factory=set)
    # Sites of fp32 dots at TF32 (site -> precision), and those that left `input_precision` at its default.
    dot_sites: dict[str, str] = field(default_factory=dict)
    dot_defaulted: dict[str, None] = field(default_factory=dict)
    dot_defaulted_now: bool = (
        False  # the `tl.dot` being built left `input_precision` (and `allow_tf32`) unset
    )
    undefined: dict[str, None] = field(default_factory=dict)  # loads (and atomics) with masked-off lanes
    atomics: bool = False  # a launch of several programs ran an atomic: its outcome may follow their order
    notes: dict[str, None] = field(default_factory=dict)
    launch: Launch | None = None
    site_lookups: int = 0  # source lines of masked loads and `and`/`or`: a few per call, not one per load
    unsupported: str = ""  # why this Triton's interpreter could not be patched
    gaps: set[str] = field(default_factory=set)  # constructs the interpreter cannot run (inline asm, extern)
    vectorised: int = 0  # launches run with every program at once
    # Of those, the launches whose programs diverged and ran in k > 1 groups that agree: k -> how many.
    grouped: dict[int, int] = field(default_factory=dict)
    per_program: dict[str, int] = field(default_factory=dict)  # launches run one program at a time, by reason
    # Of the vectorised launches, those replayed from a tape: not in the report (it depends on what the
    # process ran before), for benchmarks and tests.
    replayed: int = 0
    # Kernels (at one launch signature) whose vectorised try fell back for a reason of their data. Per call:
    # a case's launch counts (in the results) must follow from the case alone, not from earlier cases.
    backoff: dict[Hashable, Backoff] = field(default_factory=dict)
    installed: list[Patch] = field(default_factory=list)  # the hooks set: (owner, name, hook)
    restore: list[Patch] = field(default_factory=list)  # what the hooks replaced
    internal_error: str = ""  # the layer's own code raised (LayerError): the tool's error, not the kernel's
    patches: int = 0  # times the hooks were set during the call (once; more means someone undid them)
    stores: StoreLog = field(default_factory=StoreLog)  # where each store wrote (where.py)
    masked_others: dict[str, float] = field(default_factory=dict)  # loads with `other` and masked lanes
    explained: list[Explained] = field(default_factory=list)  # what the layer itself found to explain
    shadow: ShadowRun | None = None  # the float64 shadow run, when the settings ask for it (shadow.py)

    def looked_up(self) -> bool:
        """Whether there is room for one more source-line lookup in this call (they walk the stack)."""
        self.site_lookups += 1
        return self.site_lookups <= 4 * MAX_POISON_SITES

    def report(self) -> TritonReport:
        """What the call saw, as the judge reads it."""
        return TritonReport(
            self.settings.sanitize and not self.unsupported,
            self.launches,
            tuple(self.findings),
            tuple(sorted(self.dot_precisions)),
            tuple(self.undefined),
            tuple(self.notes) + ((self.unsupported,) if self.unsupported else ()),
            tuple(sorted(self.gaps)),
            self.vectorised,
            tuple(sorted(self.per_program.items())),
            tuple(sorted(self.grouped.items())),
            tuple(sorted(self.dot_sites.items())),
            tuple(self.dot_defaulted),
            self.settings.masked_lanes,
            self.atomics,
            internal_error=self.internal_error,
            masked_others=tuple(self.masked_others.items()),
            explained=tuple(self.explained),
            shadow=() if self.shadow is None else self.shadow.findings(),
            shadowed=0 if self.shadow is None else self.shadow.programs,
            first_nonfinite=self._first_nonfinite(),
        )

    def _first_nonfinite(self) -> Explained | None:
        found = None if self.shadow is None else self.shadow.first_nonfinite
        return None if found is None else Explained(NONFINITE, *found)

    def poisons(self, site: str) -> bool:
        """Whether masked-off lanes at this site read poison in this call (else 0, as on the GPU)."""
        wanted = self.settings.poison_sites
        return self.settings.masked_lanes == POISON and (wanted is None or site in wanted)

    def note_undefined(self, what: str) -> str | None:
        """Record a load (or atomic) with masked-off lanes and no `other`; returns its site when looked up (a
        probe that poisons chosen sites looks every one up)."""
        if self.settings.poison_sites is None and not (
            len(self.undefined) < MAX_POISON_SITES and self.looked_up()
        ):
            return None
        assert self.launch is not None
        site = f"`{self.launch.kernel}` at {sites.site(self.launch)}{what}"
        if len(self.undefined) < MAX_POISON_SITES:
            self.undefined.setdefault(site)
        return site

    def note_gap(self, what: str) -> None:
        """Record a construct the interpreter cannot run as the GPU does, with the kernel and line."""
        if len(self.gaps) < MAX_POISON_SITES:
            kernel = self.launch.kernel if self.launch is not None else "a kernel"
            self.gaps.add(f"{what} in `{kernel}` at {sites.site(self.launch)}")
