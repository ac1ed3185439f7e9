"""What the pipeline asks of a backend, and what comes back. Only `backends/` runs user code.

A case travels as its seed: the pipeline hands a pool an `OpTask` (the op's config and targets, sent once
per worker process) and a `CaseSpec` (the case seed, or a snapshot to replay), and gets a `CaseReport` back:
the verdict of the judge process, never arrays. The process that runs the op generates the inputs from the
seed; the reference and the judging run in another process, which generates the same inputs from the seed
and reads the op's outputs from shared memory (see op_side.py, judge_side.py and pool.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.config.model import Framework, OpSpec, Validation

__all__ = [
    "CallTarget",
    "CaseAborted",
    "CaseSpec",
    "KernelPatch",
    "OpTask",
    "Pool",
    "TargetKind",
]


class TargetKind(StrEnum):
    """How a worker finds and calls a target."""

    CALLABLE = (
        "callable"  # "pkg.mod:func" imported in the worker; called with inputs as keyword args + kwargs
    )
    REFERENCE_SCRIPT = "reference_script"  # a .py file defining `reference(inputs: dict, **kwargs)`
    OP_SCRIPT = "op_script"  # script_based op: a .py file defining `run(inputs: dict, **kwargs)` (or `op`)
    CUDA_KERNEL = "cuda_kernel"  # a [[kernels]] entry launched through CuPy
    MODULE = "module"  # upstream's `module = "pkg.mod"`: the function in it named like the op (`function`)
    # A script run as a subprocess speaking upstream's stdin/stdout JSON protocol (script_process.py): kept warm
    # when it can be imported (`warm`), else one process per call as upstream runs it.
    SCRIPT_PROCESS = "script_process"


@dataclass(frozen=True)
class CallTarget:
    """What a worker calls for one side of a case (the op, the reference or the naive version), and how: where
    it is, in which framework, and for a script process whether it is kept warm."""

    kind: TargetKind
    spec: str  # "pkg.mod:func", or a script path relative to `root`
    root: Path  # the config's directory: on sys.path and the working directory of the worker
    framework: Framework = Framework.NUMPY
    function: str = ""  # MODULE: the function to call (the op's name); SCRIPT_PROCESS: the function kept warm
    warm: bool = False  # SCRIPT_PROCESS: one persistent process for every call (else one per call)


@dataclass(frozen=True)
class KernelPatch:
    """One Triton kernel of the op run from other source, in memory, in the op's worker (`gpuemu-ci mutate`):
    the file the kernel was found in is never written. backends/mutant.py applies it around the op's calls."""

    module: str  # the module that defines the kernel, as the worker imported it ("triton_kernels.rmsnorm")
    function: str  # the kernel's name in that module
    path: str  # the file the kernel was loaded from: the patch applies only to the kernel from that file
    source: str  # the whole file's text with the change made (line numbers stay the file's)
    label: str  # names the change in the compiled code's file name, so tracebacks say it is not the file


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
    patches: tuple[KernelPatch, ...] = ()  # kernels run from changed source (gpuemu-ci mutate's mutants)
    # Memory the op allocates uninitialised (torch.empty) reads as NaN in every run (gpuemu-ci mutate: what a
    # mutant leaves unwritten then fails the same way in every run, whatever the allocator held before).
    poison_uninitialized: bool = False


# Who a case's failure is put down to (CaseReport.party), besides the op, the reference and the judge.
INPUTS_HOOK = "inputs hook"
SETUP = "setup"  # gpuemu-ci's own preparation of the case: making its inputs, handing them to a framework


def generating_party(task: OpTask) -> str:
    """Who runs while a case's inputs are made: the op's inputs hook, or gpuemu-ci itself."""
    return INPUTS_HOOK if task.op.targets.inputs_hook else SETUP


@dataclass(frozen=True)
class ExplainFocus:
    """What the judge read of a recorded failure: its worst element, its elements over their allowance (flat
    indices, the largest error first, at most backends/explain.MAX_OVER of them, and a bit mask of them all where
    there are more), the failing output's shape, and whether that output is a gradient (the judge finds a
    gradient's store map by its place among the outputs, a forward output's by its shape)."""

    worst: tuple[int, ...] | None = None
    over: tuple[int, ...] = field(default=(), repr=False)
    shape: tuple[int, ...] | None = None
    gradient: bool = False
    over_mask: bytes = field(default=b"", repr=False)  # every element over, where `over` names only MAX_OVER


@dataclass(frozen=True)
class CaseSpec:
    """One case: its seed (and iteration index), with the minimizer's overrides, or a snapshot to replay."""

    seed: int
    index: int = -1
    dims: Mapping[str, int] | None = None
    scale: float | None = None
    snapshot: Path | None = None
    snapshot_wanted: bool = True  # write an input snapshot when the case fails
    # The explain re-run of a recorded failure (pipeline/op_runner.py, `replay --explain`): the op side logs
    # where each store wrote and runs the explain probes (backends/explain_probes.py); never for a verdict.
    explain: bool = False
    # ... and what the judge read of the recorded failure, for the re-run's float64 shadow to follow
    # (backends/explain_shadow.py); None (`replay --explain`): every program.
    explain_focus: ExplainFocus | None = None
    # The case's inputs as the pool built them (backends/shipped_inputs.py), each worker unpacking its own
    # copy; None: each worker builds them from the seed (or snapshot).
    inputs: bytes | None = field(default=None, repr=False, compare=False)


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
