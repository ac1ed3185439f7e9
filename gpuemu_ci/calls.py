"""The records that cross from the processes that run user code to the judge and the pipeline: how one call of
user code went (`CallResult`), the calls of one case as the oracle judges them (`CaseRun`), and the judged case
(`CaseReport`). Below both backends (which make them) and the oracle (which reads and writes them), so neither
imports the other for its data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

import msgspec
import numpy as np


class CallStatus(StrEnum):
    """How a call of user code in a worker ended: `ok`, or why it gave no outputs to judge."""

    OK = "ok"
    RAISED = "raised"  # the user code raised an exception (message holds type and text)
    IMPORT_ERROR = "import_error"  # the target could not be imported / loaded
    CRASHED = "crashed"  # the worker process died (segfault, abort, os._exit) or sent garbage
    TIMEOUT = "timeout"
    OOM = "oom"  # MemoryError (or the CUDA equivalent)
    BAD_OUTPUT = "bad_output"  # returned something that is not an array (or tuple of arrays)

    @property
    def words(self) -> str:
        """What happened, for messages: "the op timed out: ..."."""
        return _STATUS_WORDS[self]


_STATUS_WORDS = {
    CallStatus.OK: "succeeded",
    CallStatus.RAISED: "raised",
    CallStatus.IMPORT_ERROR: "could not be loaded",
    CallStatus.CRASHED: "crashed",
    CallStatus.TIMEOUT: "timed out",
    CallStatus.OOM: "ran out of memory",
    CallStatus.BAD_OUTPUT: "returned something that is not an array",
}


@dataclass(frozen=True)
class CallResult:
    """One call of user code in a worker: how it ended, its outputs (empty unless `ok`), the message and the
    end of its stderr when it did not end well, and its time."""

    status: CallStatus
    outputs: tuple[np.ndarray, ...] = ()
    message: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0


@dataclass(frozen=True)
class CaseRun:
    """Everything the judge looks at besides the inputs: the calls' results, as the oracle reads them."""

    reference: CallResult
    op: CallResult
    rerun: CallResult | None = None
    reference_abs: CallResult | None = None  # the reference on |abs_reference_inputs| (fp64), when asked
    linear_inputs: tuple[str, ...] = ()  # inputs the reference is linear in (oracle/intermediates.py)
    inputs_modified: tuple[str, ...] = ()  # names of inputs whose bytes changed during the op call
    interpreter: str | None = None  # e.g. "triton-interpreter" when TRITON_INTERPRET was used


Outcome = Literal["passed", "failed", "errored", "unloadable", "skipped", "inputs_differ"]
# What the results model requires of these fields, checked when a worker's report is decoded.
SnapshotPath = Annotated[str, msgspec.Meta(pattern=r"^snapshots/[0-9a-f]{16}\.npz$")]
ErrorMapPath = Annotated[str, msgspec.Meta(pattern=r"^snapshots/[0-9a-f]{16}\.png$")]
Count = Annotated[int, msgspec.Meta(ge=0)]


class GradientFigure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One gradient of a case of a `backward = true` op: which rule judged it and how close it came."""

    of: str  # the input whose gradient this is
    rule: str  # "bound" (the family's structure bound) or "baseline_relative"
    headroom: float | None = None  # worst |g - g_ref| / allowed; > 1 fails
    max_abs_error: float | None = None
    worst_index: tuple[int, ...] | None = None
    exceeded: int | None = None  # elements over the allowance
    total: int | None = None


class LaunchedKernel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A Triton `@triton.jit` function the op ran (launched, or called from a kernel), as its worker saw it:
    what `gpuemu-ci mutate` may change."""

    module: str
    name: str
    path: str  # the file its code was compiled from
    line: int  # the line of its `def`


class CaseReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A judged case, as the judge process sends it (validated when decoded; see protocol.py).

    outcome: passed; failed (a wrong answer, a crash, a timeout of the op); errored (could not be judged:
    the reference or the inputs failed); unloadable (the op, its reference or a hook does not load: the
    config is wrong); skipped (not judged on this machine: a large-size case its memory cannot hold, or a case
    Triton's interpreter computed in a type it mishandles; `message` says why; never a pass, never a failure);
    inputs_differ (the op's side and the judge's built different inputs from the seed: the tool's own error,
    never a verdict).
    `kind`/`message`/`stderr_tail` describe a non-passing case as results.json records it;
    `findings` are the individual reasons ((kind, message) pairs)."""

    outcome: Outcome
    dtype: str = ""
    distribution: str = ""
    aligned: bool = False
    size_class: str = ""  # typical, boundary, tile or large (plan.model.SizeClass)
    capped: tuple[str, ...] = ()  # tool-chosen sizes the element cap shrank: "N 4097 → 2049"
    dims: dict[str, int] = {}
    kwargs: dict[str, Any] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    strides: dict[str, tuple[int, ...]] = {}
    layouts: dict[str, str] = {}
    kind: str | None = None
    message: str = ""
    findings: tuple[tuple[str, str], ...] = ()
    comparator: str | None = None
    headroom: float | None = None
    max_abs_error: float | None = None
    worst_index: tuple[int, ...] | None = None
    exceeded: Count | None = None
    total: Count | None = None
    stderr_tail: str | None = None
    snapshot: SnapshotPath | None = None
    snapshot_error: str | None = None  # why the snapshot could not be written (the seed still replays)
    interpreter: str | None = None
    # What Triton's interpreter could not compute as the GPU does (not judged): an inline asm or extern call,
    # with its kernel and line; bfloat16/fp8 in the plain interpreter (`sanitize = false`).
    interpreter_types: tuple[str, ...] = ()
    reference_scale: float | None = None  # max |reference| over the first output (for calibrate)
    unloadable: str | None = None  # which target does not load: "op", "reference", "inputs hook", ...
    # Who failed, for a case that is not passed: "op" (failed), or for one that could not be judged (errored) the
    # "reference", "inputs hook", "setup" (gpuemu-ci's own preparation of the case), "naive implementation", ...
    party: str | None = None
    call_s: float = 0.0  # seconds inside the op, reference and naive calls (benchmarks)
    # Seconds per phase of the case (results/timings.PHASES), both sides: filled in by the pool, never judged.
    phases: dict[str, float] = {}
    output: str | None = None  # which output the first finding is about when not the forward's: "grad of x"
    gradients: tuple[GradientFigure, ...] = ()  # backward = true: per gradient, in grad_inputs order
    triton_launches: tuple[tuple[str, int], ...] = ()  # how its Triton launches ran (vectorised or why not)
    dot_precisions: tuple[Literal["ieee", "tf32", "tf32x3"], ...] = ()  # of its fp32 `tl.dot`s
    triton_notes: tuple[str, ...] = ()  # warnings of the Triton layer (oracle/triton_findings.case_notes)
    inputs_digest: str | None = None  # fuzz/inputs.inputs_digest of the inputs the judge built
    op_inputs_digest: str | None = None  # inputs_differ: the digest of the op's side, which differs
    outputs_digest: str | None = (
        None  # of the op's outputs, bit for bit (mutate: a mutant that changed nothing)
    )
    kernels: tuple[LaunchedKernel, ...] = ()  # the Triton functions the op's calls ran (mutate's census)
    # A failing case's explanation (backends/explain.py): the one-line shape of its errors, its error map (a PNG
    # beside the snapshot) or why none was drawn, and where a Triton kernel stored its worst element.
    pattern: str | None = None
    error_map: ErrorMapPath | None = None
    error_map_note: str | None = None
    where: str | None = None
    # The parts of `where` that say what made the failure (an explain probe's line, the float64 shadow's, a layer
    # probe's), not only where its worst element was stored: what another failure of the op may borrow.
    causes: tuple[str, ...] = ()
    # The failing output's elements over their allowance (flat indices, the largest error first, at most
    # backends/explain.MAX_OVER) and its shape: the order in which an explain re-run's float64 shadow follows
    # the programs that stored them (backends/explain_shadow.py).
    over: tuple[int, ...] = ()
    over_shape: tuple[int, ...] | None = None
    # ... and, where `over` could not name them all, every element over its allowance as a bit mask
    # (backends/explain.py `over_mask`; empty past MASK_LIMIT elements).
    over_mask: bytes = b""
