"""Running a case in the calling process, for `gpuemu_ci.check()` with a callable that is not importable
(a lambda or closure in a test). Same contract as the worker pool — fp64 reference copies, the op's inputs in
their real layouts, out= prefill, re-run for determinism, |x| reference — but no isolation: a crash takes the
caller down, which is what a test that calls its own kernel expects anyway."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from gpuemu_ci.backends.frameworks import get_bridge, to_numpy_outputs
from gpuemu_ci.backends.interface import CallResult, CallStatus, CaseJob, CaseRun, TargetKind
from gpuemu_ci.backends.loading import LoadError, describe_exception, load_target
from gpuemu_ci.backends.transport import is_float_like


class InProcessPool:
    """`run(job)` like WorkerPool, calling `op_function` for the job's op target, and `reference_function`
    (when given; else the job's reference target, loaded) for its reference."""

    def __init__(
        self, op_function: Callable[..., Any], reference_function: Callable[..., Any] | None = None
    ) -> None:
        self.op_function = op_function
        self.reference_function = reference_function

    def close(self) -> None:
        """Nothing to release."""

    def submit(self, job: CaseJob) -> Future[CaseRun]:
        """Runs the case now, in the calling thread (there is nothing to overlap with)."""
        future: Future[CaseRun] = Future()
        future.set_result(self.run(job))
        return future

    def run(self, job: CaseJob) -> CaseRun:
        if self.reference_function is not None:
            function = self.reference_function
            invoke: Callable[..., Any] = lambda inputs, kwargs: function(**inputs, **kwargs)  # noqa: E731
        else:
            try:
                invoke = load_target(job.reference).invoke
            except LoadError as exc:
                return CaseRun(
                    CallResult(CallStatus.IMPORT_ERROR, message=str(exc)), CallResult(CallStatus.RAISED)
                )
        ref_result = self._reference(invoke, job, ())
        reference_abs = (
            self._reference(invoke, job, job.abs_reference_inputs) if job.abs_reference_inputs else None
        )
        if job.op.kind is not TargetKind.CALLABLE:
            raise ValueError("in-process runs take a Python callable")
        before = {name: np.array(view, copy=True) for name, view in job.inputs.items()}
        op_result = self._op(job, ref_result)
        modified = tuple(
            name for name, view in job.inputs.items() if np.asarray(view).tobytes() != before[name].tobytes()
        )
        rerun = (
            self._op(job, ref_result)
            if job.rerun_for_determinism and op_result.status is CallStatus.OK
            else None
        )
        return CaseRun(
            ref_result, op_result, rerun=rerun, reference_abs=reference_abs, inputs_modified=modified
        )

    def _reference(self, invoke: Callable[..., Any], job: CaseJob, absolute: tuple[str, ...]) -> CallResult:
        inputs = {}
        for name, view in job.inputs.items():
            copy = (
                np.array(view, dtype=np.float64, order="C")
                if is_float_like(view.dtype)
                else np.array(view, order="C", copy=True)
            )
            inputs[name] = np.abs(copy) if name in absolute else copy
        result = _call(lambda: invoke(inputs, dict(job.kwargs)))
        if result.status is CallStatus.OK:
            outputs = tuple(o.astype(np.float64) if is_float_like(o.dtype) else o for o in result.outputs)
            result = CallResult(result.status, outputs, duration_s=result.duration_s)
        return result

    def _op(self, job: CaseJob, reference: CallResult) -> CallResult:
        bridge = get_bridge(job.op.framework)
        inputs = {name: bridge.to_native(view).value for name, view in job.inputs.items()}
        kwargs = dict(job.kwargs)
        if job.out_arg and reference.status is CallStatus.OK and reference.outputs:
            dtype = np.dtype(job.out_dtype) if job.out_dtype and job.out_dtype != "bfloat16" else None
            if dtype is None:
                import ml_dtypes

                dtype = np.dtype(ml_dtypes.bfloat16)
            kwargs[job.out_arg] = bridge.full_nan(reference.outputs[0].shape, dtype)
        result = _call(lambda: self.op_function(**inputs, **kwargs), fallback=kwargs.get(job.out_arg or ""))
        bridge.synchronize()
        return result


def _call(function: Callable[[], Any], fallback: Any = None) -> CallResult:
    start = time.perf_counter()
    try:
        value = function()
        if value is None and fallback is not None:
            value = fallback
        outputs = tuple(np.ascontiguousarray(a) for a in to_numpy_outputs(value))
    except MemoryError as exc:
        return CallResult(
            CallStatus.OOM, message=describe_exception(exc), duration_s=time.perf_counter() - start
        )
    except Exception as exc:
        return CallResult(
            CallStatus.RAISED, message=describe_exception(exc), duration_s=time.perf_counter() - start
        )
    return CallResult(CallStatus.OK, outputs, duration_s=time.perf_counter() - start)
