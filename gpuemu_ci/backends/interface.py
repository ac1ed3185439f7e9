"""What the pipeline asks of a backend, and what comes back. Only `backends/` runs user code.

A case travels as its seed: the pipeline hands a pool an `OpTask` (the op's config and targets, sent once
per worker process) and a `CaseSpec` (the case seed, or a snapshot to replay), and gets a `CaseReport` back:
the verdict of the judge process, never arrays. The process that runs the op generates the inputs from the
seed; the reference and the judging run in another process, which generates the same inputs from the seed
and reads the op's outputs from shared memory (see casework.py and pool.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import msgspec
import numpy as np

from gpuemu_ci.config.model import Framework, OpSpec, Validation


class TargetKind(StrEnum):
    CALLABLE = (
        "callable"  # "pkg.mod:func" imported in the worker; called with inputs as keyword args + kwargs
    )
    REFERENCE_SCRIPT = "reference_script"  # a .py file defining `reference(inputs: dict, **kwargs)`
    OP_SCRIPT = "op_script"  # script_based op: a .py file defining `run(inputs: dict, **kwargs)` (or `op`)
    CUDA_KERNEL = "cuda_kernel"  # a [[kernels]] entry launched through CuPy


@dataclass(frozen=True)
class CallTarget:
    kind: TargetKind
    spec: str  # "pkg.mod:func", or a script path relative to `root`
    root: Path  # the config's directory: on sys.path and the working directory of the worker
    framework: Framework = Framework.NUMPY


class CallStatus(StrEnum):
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
    inputs_modified: tuple[str, ...] = ()  # names of inputs whose bytes changed during the op call
    interpreter: str | None = None  # e.g. "triton-interpreter" when TRITON_INTERPRET was used


@dataclass(frozen=True)
class OpTask:
    """One op as the workers need it: its config (the `[[ops]]` entry, not the whole config), the targets to
    call, and what the judge needs. Sent to a worker process once; cases refer to it by `key`."""

    key: str  # unique within a pool's lifetime (the op name, plus a variant for replaced targets)
    op: OpSpec
    validation: Validation
    root: Path  # the config's directory
    op_target: CallTarget
    reference: CallTarget
    naive: CallTarget | None
    timeout_s: float  # per side of a case: generating its inputs and the calls
    master_seed: int  # recorded in snapshots
    out_dir: Path | None  # where the judge writes the snapshots of failing cases (None: none written)


@dataclass(frozen=True)
class CaseSpec:
    """One case: its seed (and iteration index), with the minimizer's overrides, or a snapshot to replay."""

    seed: int
    index: int = -1
    dims: Mapping[str, int] | None = None
    scale: float | None = None
    snapshot: Path | None = None
    snapshot_wanted: bool = True  # write an input snapshot when the case fails


Outcome = Literal["passed", "failed", "errored", "unloadable", "skipped"]
# What the results model requires of these fields, checked when a worker's report is decoded.
SnapshotPath = Annotated[str, msgspec.Meta(pattern=r"^snapshots/[0-9a-f]{16}\.npz$")]
Count = Annotated[int, msgspec.Meta(ge=0)]


class GradientFigure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One gradient of a case of a `backward = true` op: which rule judged it and how close it came."""

    of: str  # the input whose gradient this is
    rule: str  # "bound" (the family's structure bound) or "baseline_relative"
    headroom: float | None = None  # worst |g - g_ref| / allowed; > 1 fails
    max_abs_error: float | None = None


class CaseReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A judged case, as the judge process sends it (validated when decoded; see protocol.py).

    outcome: passed; failed (a wrong answer, a crash, a timeout of the op); errored (could not be judged:
    the reference or the inputs failed); unloadable (the op, its reference or a hook does not load: the
    config is wrong); skipped (not judged on this machine: a large-size case its memory cannot hold, or a case
    Triton's interpreter computed in a type it mishandles; `message` says why; never a pass, never a failure).
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
    interpreter_types: tuple[str, ...] = ()  # bfloat16/fp8 that Triton's interpreter handled (not judged)
    reference_scale: float | None = None  # max |reference| over the first output (for calibrate)
    unloadable: str | None = None  # which target does not load: "op", "reference", "inputs hook", ...
    call_s: float = 0.0  # seconds inside the op, reference and naive calls (benchmarks)
    output: str | None = None  # which output the first finding is about when not the forward's: "grad of x"
    gradients: tuple[GradientFigure, ...] = ()  # backward = true: per gradient, in grad_inputs order
    triton_launches: tuple[tuple[str, int], ...] = ()  # how its Triton launches ran (vectorised or why not)


class CaseAborted(Exception):
    """What a running case's future holds when its pool was aborted (an interrupt): the case did not finish."""


class Pool(Protocol):
    """Where cases run: `WorkerPool` (isolated worker processes) or `InProcessPool` (the caller's process)."""

    def submit(self, task: OpTask, case: CaseSpec) -> Future[CaseReport]:
        """Queues one case; the future resolves to its report (or is cancelled when the pool aborts)."""
        ...

    def abort(self) -> None:
        """Stops everything now: queued cases are cancelled, running ones killed (their futures cancelled)."""
        ...

    def close(self) -> None:
        """Stops whatever the pool started (idempotent)."""
        ...
