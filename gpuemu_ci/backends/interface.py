"""What the pipeline asks of a backend, and what comes back. Only `backends/` runs user code."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gpuemu_ci.config.model import Framework


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
    CRASHED = "crashed"  # the worker process died (segfault, abort, os._exit)
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
class CaseJob:
    """One case: the worker runs the reference (fp64 inputs), then the op (+ a re-run when determinism is checked).

    `inputs` may be non-contiguous views (transposed, strided with NaN-poisoned gaps, stride-0 broadcast): the op
    must receive exactly that memory layout. The reference receives contiguous float64 copies of float inputs
    (same values) and unchanged contiguous copies of integer/bool inputs.
    """

    op: CallTarget
    reference: CallTarget
    inputs: Mapping[str, np.ndarray]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0
    rerun_for_determinism: bool = False
    out_arg: str | None = None  # pass a NaN-prefilled buffer (reference's shape, case dtype) as this kwarg
    out_dtype: str | None = None
    # Inputs the reference is linear in (matmul, sums, scans: all; attention: v). When set, the worker also runs
    # the reference on |those inputs| (others unchanged): that gives the oracle's error scale S (|A||B|, sum |x|).
    abs_reference_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaseRun:
    reference: CallResult
    op: CallResult
    rerun: CallResult | None = None
    reference_abs: CallResult | None = None  # the reference on |abs_reference_inputs| (fp64), when asked
    inputs_modified: tuple[str, ...] = ()  # names of inputs whose bytes changed during the op call
    interpreter: str | None = None  # e.g. "triton-interpreter" when TRITON_INTERPRET was used
    interpreter_types: tuple[str, ...] = ()  # float types the interpreter mishandles that the case touched


class Pool(Protocol):
    """Where cases run: `WorkerPool` (isolated worker processes) or `InProcessPool` (the caller's process)."""

    def run(self, job: CaseJob) -> CaseRun:
        """Runs one case and waits for it."""
        ...

    def submit(self, job: CaseJob) -> Future[CaseRun]:
        """Queues one case; the future resolves to its run."""
        ...

    def close(self) -> None:
        """Stops whatever the pool started (idempotent)."""
        ...
