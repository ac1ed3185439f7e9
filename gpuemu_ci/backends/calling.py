"""How user code runs in a worker: an inputs hook makes a case's inputs (`make_inputs`), and a target is called
on them (`call`). Everything user code does, `sys.exit` and KeyboardInterrupt included, ends as a recorded
outcome; `contain` narrows that to Exception in the caller's process, where Ctrl-C must still stop a test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gpuemu_ci.backends.frameworks import BadOutput, Bridge, to_numpy_outputs
from gpuemu_ci.backends.interface import INPUTS_HOOK, SETUP, CaseSpec, OpTask
from gpuemu_ci.backends.loaded import Invoke
from gpuemu_ci.backends.loading import describe_exception, load_callable
from gpuemu_ci.backends.protocol import Stage
from gpuemu_ci.backends.shipped_inputs import unpack
from gpuemu_ci.calls import CallResult, CallStatus
from gpuemu_ci.fuzz.case import CaseInputs, CaseSkipped, InputsHookError
from gpuemu_ci.fuzz.inputs import case_inputs

Stager = Callable[[Stage], None]

# Errors after which a CUDA context cannot be trusted: the worker answers, then is replaced.
_STICKY_CUDA = (
    "illegal memory access",
    "illegal address",
    "cudaErrorIllegalAddress",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "unspecified launch failure",
    "CUDA_ERROR_LAUNCH_FAILED",
    "device-side assert",
    "misaligned address",
)
UNUSABLE = "not run: the GPU context is unusable"


def no_stage(stage: Stage) -> None:
    """The stage callback for a call whose stages no one watches: does nothing."""
    pass


class InputsFailed(Exception):
    """The case's inputs could not be made: the inputs hook does not load (`unloadable`) or raised, or
    gpuemu-ci's own generation failed; `party` says which ("inputs hook" or "setup")."""

    def __init__(self, message: str, unloadable: bool, party: str) -> None:
        super().__init__(message)
        self.message = message
        self.unloadable = unloadable
        self.party = party


def make_inputs(task: OpTask, case: CaseSpec, contain: type[BaseException] = BaseException) -> CaseInputs:
    """The case's inputs (fuzz/inputs.case_inputs: from its seed, byte for byte what any process builds, or
    from its snapshot, or as the pool built and shipped them), with what user code may raise while making them
    turned into InputsFailed."""
    try:
        if case.inputs is not None:  # this process's own copy: what the op does to it reaches no other side
            return unpack(case.inputs)
        return case_inputs(
            task.op,
            case.seed,
            task.root,
            load_callable,
            dims=case.dims,
            scale=case.scale,
            snapshot=case.snapshot,
        )
    except InputsHookError as exc:
        raise InputsFailed(exc.message, unloadable=not exc.loaded, party=INPUTS_HOOK) from None
    except CaseSkipped:
        raise  # a large case this machine cannot hold: neither side runs it
    except contain as exc:
        message = f"the case's setup failed: generating its inputs raised {describe_exception(exc)}"
        raise InputsFailed(message, unloadable=False, party=SETUP) from None


def _classify(exc: BaseException) -> tuple[CallStatus, bool]:
    """(status, retire the worker) for an exception raised by user code."""
    if isinstance(exc, BadOutput):
        return CallStatus.BAD_OUTPUT, False
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":  # torch, cupy
        return CallStatus.OOM, False
    text = f"{type(exc).__name__} {exc}"
    if type(exc).__module__.startswith("gpuemu_ci.triton_cpu."):  # its words ("misaligned") are no CUDA error
        return CallStatus.RAISED, False
    if any(marker in text for marker in _STICKY_CUDA):
        return CallStatus.CRASHED, True
    return CallStatus.RAISED, False


def call(
    invoke: Invoke,
    bridge: Bridge,
    inputs: dict[str, Any],
    kwargs: dict[str, Any],
    *,
    out: Any = None,
    expected: np.dtype | None = None,
    private_of: Callable[[np.ndarray], np.ndarray] = np.ascontiguousarray,
    contain: type[BaseException] = BaseException,
) -> tuple[CallResult, bool]:
    """One call of user code; returns (result, retire). `expected`: the op's output dtype, for frameworks
    that hand it back under another name (CuPy's bfloat16 bits). `private_of` makes an output independent of
    memory the caller will reuse."""
    start = time.perf_counter()
    try:
        result = invoke(inputs, kwargs)
        bridge.synchronize()
        duration = time.perf_counter() - start
        if result is None and out is not None:
            result = out
        outputs = bridge.outputs_as([private_of(a) for a in to_numpy_outputs(result)], expected)
    except contain as exc:  # user code may raise anything, SystemExit and KeyboardInterrupt included
        duration = time.perf_counter() - start
        status, retire = _classify(exc)
        message = f"{exc}" if status is CallStatus.BAD_OUTPUT else describe_exception(exc)
        return CallResult(status, (), message, "", duration), retire
    return CallResult(CallStatus.OK, tuple(outputs), "", "", duration), False
