"""What is done with a case, from its seed, in the processes that run user code.

- The op side (`run_op_side`): generate the case's inputs, call the op on them in their real memory layouts
  (and again on identical inputs when the op is declared deterministic), and notice writes into the inputs.
- The judge side (`run_judge_side`): generate the same inputs from the seed, call the fp64 reference (and
  the naive implementation and the hooks the oracle needs), judge the op's outputs and describe the case
  (with its input snapshot) when it did not pass.

The two sides run in different worker processes (worker.py), so a kernel that corrupts its own process's
memory cannot corrupt its judge. For `gpuemu_ci.check` with a lambda both run in the caller's process
(inprocess.py). Everything user code does, `sys.exit` and KeyboardInterrupt included, ends as a recorded
outcome; `contain` narrows that to Exception in the caller's process, where Ctrl-C must still stop a test.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpuemu_ci.backends import triton_probe
from gpuemu_ci.backends.cuda import OUTPUT_DTYPE_KWARG
from gpuemu_ci.backends.frameworks import BadOutput, Bridge, get_bridge, to_numpy_outputs
from gpuemu_ci.backends.interface import (
    CallResult,
    CallStatus,
    CallTarget,
    CaseReport,
    CaseRun,
    CaseSpec,
    GradientFigure,
    OpTask,
    TargetKind,
)
from gpuemu_ci.backends.loading import Loaded, LoadError, describe_exception, load_callable, load_target
from gpuemu_ci.backends.protocol import Stage
from gpuemu_ci.backends.transport import is_float_like, memory_region, region_of, resolve_dtype
from gpuemu_ci.config.model import Framework, Layout, OpSpec
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, CaseSkipped, InputsHookError, build_case
from gpuemu_ci.fuzz.shapes import shape_of
from gpuemu_ci.plan.model import ValueMode

Stager = Callable[[Stage], None]
Invoke = Callable[[dict[str, Any], dict[str, Any]], Any]

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
MAX_SNAPSHOT_BYTES = 256 << 20  # inputs larger than this are replayed from the seed, not snapshotted


def _no_stage(stage: Stage) -> None:
    pass


# ---- inputs ------------------------------------------------------------------------------------------------


class InputsFailed(Exception):
    """The case's inputs could not be made: the inputs hook does not load (`unloadable`) or raised."""

    def __init__(self, message: str, unloadable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.unloadable = unloadable


def make_inputs(task: OpTask, case: CaseSpec, contain: type[BaseException] = BaseException) -> CaseInputs:
    """The case's inputs: from its seed (byte for byte what `build_case` gives anywhere), or its snapshot."""
    try:
        if case.snapshot is not None:
            from gpuemu_ci.pipeline.replay import case_from_snapshot  # a snapshot's or a capture's inputs

            return case_from_snapshot(task.op, case.snapshot)
        return build_case(task.op, case.seed, task.root, dims_override=case.dims, value_scale=case.scale)
    except InputsHookError as exc:
        raise InputsFailed(exc.message, unloadable=not exc.loaded) from None
    except CaseSkipped:
        raise  # a large case this machine cannot hold: neither side runs it
    except contain as exc:
        raise InputsFailed(f"generating the inputs failed: {describe_exception(exc)}", False) from None


def describe_case(case: CaseInputs) -> dict[str, Any]:
    """What results.json records about a case besides its verdict."""
    described = case.describe()
    return {
        "dtype": case.dtype,
        "distribution": case.stratum.mode.value,
        "aligned": case.stratum.aligned,
        "size_class": case.stratum.size_class.value,
        "capped": tuple(f"{c.dim} {c.drawn} → {c.kept}" for c in case.capped),
        "dims": {k: int(v) for k, v in case.dims.items()},
        "kwargs": dict(case.kwargs),
        "shapes": described["shapes"],
        "strides": described["strides"],
        "layouts": described["layouts"],
    }


# ---- calling user code ------------------------------------------------------------------------------------


def _classify(exc: BaseException) -> tuple[CallStatus, bool]:
    """(status, retire the worker) for an exception raised by user code."""
    if isinstance(exc, BadOutput):
        return CallStatus.BAD_OUTPUT, False
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":  # torch, cupy
        return CallStatus.OOM, False
    text = f"{type(exc).__name__} {exc}"
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


def interpreter_reason(types: tuple[str, ...] | set[str]) -> str:
    """`Triton interpreter: bfloat16 unsupported` (the types it mishandled, in words)."""
    return f"Triton interpreter: {', '.join(sorted(types)) or 'bfloat16'} unsupported"


# ---- the op side -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSide:
    """The op's calls on one case (outputs are this process's arrays)."""

    op: CallResult
    rerun: CallResult | None = None
    inputs_modified: tuple[str, ...] = ()
    interpreter: str | None = None
    retire: bool = False
    interpreter_types: tuple[str, ...] = ()  # bfloat16/fp8 that Triton's interpreter handled (triton_probe)


def out_buffer_shape(op: OpSpec, case: CaseInputs) -> tuple[int, ...]:
    """The `out=` buffer's shape: the op's declared `output` dims, else the first input's shape."""
    if op.shapes.output_dims is not None:
        return shape_of(op.shapes.output_dims, case.dims)
    first = next(iter(case.arrays.values()), None)
    return tuple(first.shape) if first is not None else ()


def run_op_side(
    task: OpTask,
    spec: CaseSpec,
    *,
    stage: Stager = _no_stage,
    invoke: Invoke | None = None,
    on_first_call: Callable[[CallResult], None] | None = None,
    on_loaded: Callable[[], None] = lambda: None,
    contain: type[BaseException] = BaseException,
) -> OpSide:
    """Generate the inputs and call the op (twice when it is declared deterministic). `invoke` replaces the
    op target (a callable in the caller's process); `on_loaded` is told when the imports are done (the case's
    timer starts there); `on_first_call` sees the first call's result before the re-run, which might kill
    the process."""
    op = task.op
    stage(Stage.LOADING)
    if invoke is None:
        try:
            invoke = load_target(task.op_target).invoke
        except LoadError as exc:
            return OpSide(CallResult(CallStatus.IMPORT_ERROR, message=str(exc)))
    on_loaded()
    stage(Stage.GENERATING)
    try:
        case = make_inputs(task, spec, contain)
    except InputsFailed as exc:
        return OpSide(CallResult(CallStatus.RAISED, message=f"not run: {exc.message}"))
    except CaseSkipped as exc:  # the judge side says so in its report
        return OpSide(CallResult(CallStatus.RAISED, message=f"not run: {exc.reason}"))
    bridge = get_bridge(task.op_target.framework)
    if op.backward is not None:
        try:
            invoke = _forward_and_backward(task, case, invoke, bridge)
        except LoadError as exc:
            return OpSide(CallResult(CallStatus.IMPORT_ERROR, message=str(exc)))
    arrays = {name: rehome(arr) for name, arr in case.arrays.items()}
    regions = {name: region_of(arr) for name, arr in arrays.items()}
    before = {name: region.copy() for name, (region, _) in regions.items() if region is not None}
    out_dtype = op.output_dtype or case.dtype

    def private(arr: np.ndarray) -> np.ndarray:
        # An output that is (a view of) an input would change when the inputs are restored for the re-run.
        for region, _ in regions.values():
            if region is not None and np.may_share_memory(arr, region):
                return np.array(arr, order="C", copy=True)
        return np.ascontiguousarray(arr)

    def one_call(which: Stage) -> tuple[CallResult, bool]:
        kwargs = dict(case.kwargs)
        if task.op_target.kind is TargetKind.CUDA_KERNEL:
            kwargs[OUTPUT_DTYPE_KWARG] = out_dtype  # a launch allocates the buffer the kernel writes
        out = None
        try:
            natives = {}
            for name, view in arrays.items():
                region, offset = regions[name]
                natives[name] = bridge.to_native(view, region, offset)
            if op.execution.out_arg:
                out = bridge.full_nan(out_buffer_shape(op, case), resolve_dtype(out_dtype))
                kwargs[op.execution.out_arg] = out
        except Exception as exc:
            failed = CallResult(
                CallStatus.RAISED, message=f"handing inputs to {bridge.framework.value}: {exc}"
            )
            return failed, False
        stage(which)
        values = {name: native.value for name, native in natives.items()}
        result, retire = call(
            invoke, bridge, values, kwargs, out=out, expected=resolve_dtype(out_dtype), private_of=private,
            contain=contain,
        )  # fmt: skip
        if not retire:
            for native in natives.values():
                if native.write_back is not None:
                    native.write_back()  # device-side writes into inputs become visible to the comparison
        return result, retire

    launches_before = triton_probe.mark()
    first, retire = one_call(Stage.OP)
    modified = tuple(
        name
        for name, (region, _) in regions.items()
        if region is not None and not _same_bytes(region, before[name])
    )
    rerun: CallResult | None = None
    if op.execution.deterministic:
        if retire:
            rerun = CallResult(CallStatus.CRASHED, message=UNUSABLE)
        else:
            if on_first_call is not None:
                on_first_call(first)
            for name, (region, _) in regions.items():
                if region is not None:
                    region[...] = before[name]  # identical fresh inputs
            rerun, retire = one_call(Stage.RERUN)
    interpreter, interpreter_types = triton_probe.since(launches_before)
    return OpSide(first, rerun, modified, interpreter, retire, interpreter_types)


def _forward_and_backward(task: OpTask, case: CaseInputs, invoke: Invoke, bridge: Bridge) -> Invoke:
    """The op's call as forward + backward (backends/backward.py): its outputs, then the gradients."""
    from gpuemu_ci.backends import backward

    op = task.op
    assert op.backward is not None
    vjp = None
    if op.backward.vjp:
        target = CallTarget(TargetKind.CALLABLE, op.backward.vjp, task.root, task.op_target.framework)
        vjp = load_target(target).invoke
    out_dtype = op.output_dtype or case.dtype

    def upstream(forward: tuple[np.ndarray, ...]) -> tuple[np.ndarray | None, ...]:
        return backward.upstream_gradients(case.seed, forward, out_dtype, case.stratum.mode, case.dims)

    return backward.with_backward(
        invoke,
        task.op_target.framework,
        backward.gradient_names(op, case.arrays),
        upstream,
        vjp,
        lambda g: bridge.to_native(np.ascontiguousarray(g)).value,
    )


def rehome(view: np.ndarray) -> np.ndarray:
    """The same view (shape, strides, bytes, gaps) over a private buffer that also holds everything a kernel
    ignoring the strides would read (the view's element count, C-contiguous from its first element), the
    extra poisoned like the gaps. Out-of-view reads then find the same poison whatever ran before in this
    process, so their verdict replays. A contiguous array already is such a buffer."""
    address, nbytes, offset = memory_region(view)
    span = offset + view.size * view.itemsize
    if nbytes == 0 or (view.flags.c_contiguous and span <= nbytes):
        return view
    size = -(-max(nbytes, span) // view.itemsize) * view.itemsize
    buffer = np.empty(size, dtype=np.uint8)
    buffer.view(view.dtype)[...] = _poison(view.dtype)
    buffer[:nbytes] = np.frombuffer(
        memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B"), np.uint8
    )
    return np.ndarray(view.shape, dtype=view.dtype, buffer=buffer, offset=offset, strides=view.strides)


def _poison(dtype: np.dtype) -> object:
    """What the generator fills gaps with (fuzz/layouts.py): NaN, the largest integer, True."""
    if is_float_like(dtype) or dtype.kind == "c":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.size % 8 == 0 and a.ctypes.data % 8 == 0:
        return bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))
    return bool(np.array_equal(a, b))


# ---- the judge side ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpView:
    """The op side as the judge sees it: the calls' results with their outputs read from the arena."""

    op: CallResult
    rerun: CallResult | None = None
    inputs_modified: tuple[str, ...] = ()
    interpreter: str | None = None
    interpreter_types: tuple[str, ...] = ()


def _reference_copy(view: np.ndarray) -> np.ndarray:
    """Contiguous float64 copy of a float input (exact upcast), unchanged contiguous copy otherwise."""
    if is_float_like(view.dtype):
        return np.array(view, dtype=np.float64, order="C")
    if view.dtype.kind == "c":
        return np.array(view, dtype=np.complex128, order="C")
    return np.array(view, order="C", copy=True)


def _as_reference_output(arr: np.ndarray) -> np.ndarray:
    if is_float_like(arr.dtype) and arr.dtype != np.float64:
        return arr.astype(np.float64)
    return arr


def reference_call(
    invoke: Invoke,
    arrays: Mapping[str, np.ndarray],
    kwargs: Mapping[str, Any],
    absolute: tuple[str, ...] = (),
    framework: Framework = Framework.NUMPY,
    contain: type[BaseException] = BaseException,
) -> tuple[CallResult, bool]:
    """The reference on fp64 copies of `arrays` (those named in `absolute` replaced by their absolute
    values): (result, retire)."""
    bridge = get_bridge(framework)
    try:
        copies = {n: _reference_copy(v) for n, v in arrays.items()}
        for name in absolute:
            if name in copies:
                np.abs(copies[name], out=copies[name])
        ref_in = {n: bridge.to_native(c).value for n, c in copies.items()}
    except Exception as exc:
        return CallResult(CallStatus.RAISED, message=f"handing inputs to the reference: {exc}"), False
    result, retire = call(invoke, bridge, ref_in, dict(kwargs), contain=contain)
    outputs = tuple(_as_reference_output(a) for a in result.outputs)
    return CallResult(result.status, outputs, result.message, "", result.duration_s), retire


def judged_run(
    reference: Invoke,
    inputs: Mapping[str, np.ndarray],
    kwargs: Mapping[str, Any],
    outputs: tuple[np.ndarray, ...],
    abs_inputs: tuple[str, ...] = (),
) -> CaseRun:
    """What the oracle judges for outputs computed elsewhere (a shadowed call in production): the reference,
    run here on fp64 copies of the inputs (and on |abs_inputs|), and the given outputs as the op's."""
    result, _ = reference_call(reference, inputs, kwargs, contain=Exception)
    absolute = (
        reference_call(reference, inputs, kwargs, abs_inputs, contain=Exception)[0] if abs_inputs else None
    )
    op = CallResult(CallStatus.OK, tuple(np.ascontiguousarray(o) for o in outputs))
    return CaseRun(reference=result, op=op, reference_abs=absolute)


class _Unloadable(Exception):
    def __init__(self, who: str, message: str) -> None:
        super().__init__(message)
        self.who = who
        self.message = message


@dataclass
class _Judging:
    """One judge-side case in progress."""

    task: OpTask
    spec: CaseSpec
    stage: Stager
    contain: type[BaseException]
    on_loaded: Callable[[], None]
    reference_invoke: Invoke | None = None
    call_s: float = 0.0
    retire: bool = False

    def load(self, spec: str | None, who: str, target: Any = None) -> Any:
        try:
            if target is not None:
                return load_target(target)
            return load_callable(spec or "", self.task.root)
        except LoadError as exc:
            raise _Unloadable(who, str(exc)) from None

    def reference(self, loaded: Loaded, case: CaseInputs, absolute: tuple[str, ...]) -> CallResult:
        result, retire = reference_call(
            loaded.invoke, case.arrays, case.kwargs, absolute, self.task.reference.framework, self.contain
        )
        self.retire = self.retire or retire
        self.call_s += result.duration_s
        return result

    def working_precision_reference(self, loaded: Loaded, case: CaseInputs) -> CallResult:
        """The reference called on the inputs cast to the op's working precision (oracle/precision.py), its
        outputs as computed there."""
        from gpuemu_ci.oracle import precision

        try:
            cast = precision.working_precision_inputs(self.task.op, case.dtype, case.logical)
        except Exception as exc:
            return CallResult(CallStatus.RAISED, message=f"handing inputs to the reference: {exc}")
        return self._call(loaded, self.task.reference.framework, cast, case.kwargs)

    def moved_reference(self, loaded: Loaded, case: CaseInputs) -> CallResult:
        """The float64 reference on the inputs moved by one rounding of the working precision
        (oracle/precision.perturbed): what rounding at the inputs' scale costs, however the reference is written."""
        from gpuemu_ci import dtypes
        from gpuemu_ci.oracle import precision

        working = precision.working_precision(self.task.op, case.dtype) or "float32"
        moved = precision.perturbed(case.logical, case.seed, dtypes.info(working).unit_roundoff)
        return self._call(loaded, self.task.reference.framework, moved, case.kwargs)

    def naive(self, loaded: Loaded, case: CaseInputs) -> CallResult:
        """The naive same-dtype implementation, on fresh copies of the inputs in their layouts."""
        assert self.task.naive is not None
        arrays = {
            name: layout_mod.materialize(values, case.layouts[name])
            if name in case.layouts
            else values.copy()
            for name, values in case.logical.items()
        }
        return self._call(loaded, self.task.naive.framework, arrays, case.kwargs)

    def _call(
        self,
        loaded: Loaded,
        framework: Framework,
        arrays: Mapping[str, np.ndarray],
        kwargs: Mapping[str, Any],
    ) -> CallResult:
        """User code called on `arrays` handed to its framework, its time and state kept."""
        bridge = get_bridge(framework)
        try:
            natives = {name: bridge.to_native(view).value for name, view in arrays.items()}
        except Exception as exc:
            return CallResult(CallStatus.RAISED, message=f"handing inputs to {bridge.framework.value}: {exc}")
        result, retire = call(loaded.invoke, bridge, natives, dict(kwargs), contain=self.contain)
        self.retire = self.retire or retire
        self.call_s += result.duration_s
        return result


def run_judge_side(
    task: OpTask,
    spec: CaseSpec,
    op_view: OpView,
    *,
    stage: Stager = _no_stage,
    on_loaded: Callable[[], None] = lambda: None,
    contain: type[BaseException] = BaseException,
    reference: Invoke | None = None,
) -> tuple[CaseReport, bool]:
    """Judge the op's outputs against the reference, from the case's seed. Returns (report, retire);
    `on_loaded` is told when every import is done (the case's timer starts there); `reference` replaces the
    task's reference target (a function in the caller's process)."""
    judging = _Judging(task, spec, stage, contain, on_loaded, reference)
    try:
        return _judge(judging, op_view), judging.retire
    except _Unloadable as exc:
        return CaseReport(outcome="unloadable", unloadable=exc.who, message=exc.message), judging.retire


def _judge(judging: _Judging, op_view: OpView) -> CaseReport:
    from gpuemu_ci.oracle import bounds, precision
    from gpuemu_ci.oracle.judge import CaseContext, comparator_for, judge
    from gpuemu_ci.oracle.model import Comparator

    task, op, stage = judging.task, judging.task.op, judging.stage
    if op_view.op.status is CallStatus.IMPORT_ERROR:
        raise _Unloadable("op", op_view.op.message)
    stage(Stage.LOADING)
    reference_target = (
        Loaded(judging.reference_invoke, "reference")
        if judging.reference_invoke is not None
        else judging.load(None, "reference", task.reference)
    )
    naive_target = judging.load(None, "naive implementation", task.naive) if task.naive is not None else None
    error_scale = None
    if op.targets.error_scale is not None:
        error_scale = judging.load(op.targets.error_scale, "error_scale hook")
    judging.on_loaded()
    stage(Stage.GENERATING)
    try:
        case = make_inputs(task, judging.spec, judging.contain)
    except InputsFailed as exc:
        if exc.unloadable:
            raise _Unloadable("inputs hook", exc.message) from None
        return CaseReport(outcome="errored", kind="raised", message=exc.message)
    except CaseSkipped as exc:
        return CaseReport(
            outcome="skipped",
            dtype=exc.stratum.dtype,
            distribution=exc.stratum.mode.value,
            size_class=exc.stratum.size_class.value,
            message=exc.reason,
        )
    judging.call_s += op_view.op.duration_s + (op_view.rerun.duration_s if op_view.rerun else 0.0)
    if op_view.interpreter and op_view.interpreter_types:
        # Triton's interpreter computes these types on bit patterns (triton_probe): its numbers are the
        # interpreter's fault, not the kernel's, so the case is not judged here.
        return CaseReport(
            outcome="skipped",
            **describe_case(case),
            interpreter=op_view.interpreter,
            interpreter_types=op_view.interpreter_types,
            message=interpreter_reason(op_view.interpreter_types),
            call_s=judging.call_s,
        )
    bound = comparator_for(op, case.dtype) in (Comparator.BOUND, Comparator.ARGMAX)
    abs_inputs = bounds.abs_linear_inputs(op) if bound else ()
    stage(Stage.REFERENCE)
    reference = judging.reference(reference_target, case, ())
    reference_abs = None
    if abs_inputs and reference.status is CallStatus.OK:
        stage(Stage.REFERENCE_ABS)
        reference_abs = judging.reference(reference_target, case, abs_inputs)
    if reference.status is not CallStatus.OK:
        return _errored(judging, case, reference, "reference")
    naive_output = None
    if naive_target is not None and op_view.op.status is CallStatus.OK:
        stage(Stage.NAIVE)
        naive = judging.naive(naive_target, case)
        if naive.status is not CallStatus.OK or not naive.outputs:
            return _errored(judging, case, naive, "naive implementation")
        naive_output = naive.outputs[0]
    backward_side = _split_gradients(op, case, op_view)
    if isinstance(backward_side, CaseReport):
        return backward_side
    op_call, rerun_call, op_grads, rerun_grads = backward_side
    gradient_case = None
    if op_grads is not None:
        stage(Stage.REFERENCE)
        gradient_case = _reference_gradients(judging, reference_target, case, reference)
        if isinstance(gradient_case, CallResult):
            return _errored(judging, case, gradient_case, "reference's backward")
    run = CaseRun(
        reference=reference,
        op=op_call,
        rerun=rerun_call,
        reference_abs=reference_abs,
        inputs_modified=op_view.inputs_modified,
        interpreter=op_view.interpreter,
    )
    context = CaseContext(
        case.dtype,
        case.dims,
        case.kwargs,
        case.logical,
        naive_output,
        error_scale,
        bias_test=case.stratum.mode is ValueMode.REGULAR
        and all(c.layout is not Layout.BROADCAST for c in case.layouts.values()),
        # Sorted values, and real data (captured), may sum correlated addends: the bound assumes g(n) = n.
        correlated=case.stratum.mode in (ValueMode.ASCENDING, ValueMode.CAPTURED)
        or bounds.constant_along_reduction(
            op,
            {
                name: c.broadcast_dim
                for name, c in case.layouts.items()
                if c.layout is Layout.BROADCAST and c.broadcast_dim is not None
            },
        ),
    )
    stage(Stage.JUDGING)
    gradient_stats: tuple[Any, ...] = ()
    try:
        verdict = judge(op, context, run, task.validation)
        if precision.worth_measuring(op, case.dtype, verdict):
            # The case fails the family bound: judge it again with the reference's working-precision error
            # (oracle/precision.py). Cases within the family bound pass either way, so only these pay for it.
            stage(Stage.REFERENCE)
            low = judging.working_precision_reference(reference_target, case)
            moved = judging.moved_reference(reference_target, case)
            if low.status is CallStatus.OK or moved.status is CallStatus.OK:
                measured = replace(
                    context,
                    low_outputs=low.outputs if low.status is CallStatus.OK else None,
                    moved_outputs=moved.outputs if moved.status is CallStatus.OK else None,
                )
                verdict = judge(op, measured, run, task.validation)
            stage(Stage.JUDGING)
        if gradient_case is not None and op_grads is not None:
            verdict, gradient_stats = _with_gradients(
                op, verdict, gradient_case, op_grads, rerun_grads, task.validation
            )
    except judging.contain as exc:  # an error_scale hook that raises, or worse
        failed = CallResult(
            CallStatus.RAISED, message=f"judging the outputs failed: {describe_exception(exc)}"
        )
        return _errored(judging, case, failed, "judge")
    return _judged(judging, case, run, verdict, gradient_stats)


Gradients = tuple[np.ndarray, ...]


def _split_gradients(
    op: OpSpec, case: CaseInputs, op_view: OpView
) -> CaseReport | tuple[CallResult, CallResult | None, Gradients | None, Gradients | None]:
    """(the op's call with its forward outputs only, the same for the re-run, the op's gradients, the
    re-run's): a `backward = true` op's call returned its outputs followed by the gradients."""
    from gpuemu_ci.backends.backward import gradient_names

    names = gradient_names(op, case.logical)
    if not names or op_view.op.status is not CallStatus.OK:
        return op_view.op, op_view.rerun, None, None

    def split(result: CallResult) -> tuple[CallResult, Gradients]:
        outputs = result.outputs
        if len(outputs) <= len(names):
            bad = replace(
                result,
                status=CallStatus.BAD_OUTPUT,
                outputs=(),
                message=f"the forward and backward returned {len(outputs)} arrays for {len(names)} gradients",
            )
            return bad, ()
        return replace(result, outputs=outputs[: -len(names)]), outputs[-len(names) :]

    op_call, op_grads = split(op_view.op)
    if op_call.status is not CallStatus.OK:
        return op_call, op_view.rerun, None, None
    rerun, rerun_grads = op_view.rerun, None
    if rerun is not None and rerun.status is CallStatus.OK:
        rerun, rerun_grads = split(rerun)
    return op_call, rerun, op_grads, rerun_grads


def _reference_gradients(
    judging: _Judging, reference_target: Loaded, case: CaseInputs, reference: CallResult
) -> Any:
    """The reference's gradients for the case (oracle/gradients.GradientCase), or the failed CallResult."""
    from gpuemu_ci import dtypes
    from gpuemu_ci.backends import backward
    from gpuemu_ci.oracle import gradients, precision
    from gpuemu_ci.oracle.model import Comparator

    task, op = judging.task, judging.task.op
    assert op.backward is not None
    vjp_reference = None
    if op.backward.vjp_reference:
        target = CallTarget(TargetKind.CALLABLE, op.backward.vjp_reference, task.root, Framework.NUMPY)
        vjp_reference = judging.load(None, "vjp_reference", target).invoke
    names = backward.gradient_names(op, case.logical)
    out_dtype = op.output_dtype or case.dtype
    upstream = backward.upstream_gradients(
        case.seed, reference.outputs, out_dtype, case.stratum.mode, case.dims
    )
    started = time.perf_counter()

    def vjp(inputs: Mapping[str, np.ndarray], grads: tuple[np.ndarray | None, ...], dtype: np.dtype) -> Any:
        return backward.reference_vjp(
            reference_target.invoke, vjp_reference, inputs, case.kwargs, names, grads, dtype
        )

    try:
        exact = vjp(case.logical, upstream, np.dtype(np.float64))
    except judging.contain as exc:
        return CallResult(CallStatus.RAISED, message=describe_exception(exc))
    finally:
        judging.call_s += time.perf_counter() - started
    if len(exact) != len(names):
        return CallResult(CallStatus.BAD_OUTPUT, message=f"{len(exact)} gradients for {len(names)} inputs")
    absolute = None
    if gradients.rule_for(op) in (Comparator.BOUND, Comparator.BASELINE_RELATIVE):
        try:
            magnitudes = {
                n: np.abs(a) if dtypes.is_float_dtype(a.dtype) else a for n, a in case.logical.items()
            }
            absolute = vjp(
                magnitudes, tuple(None if g is None else np.abs(g) for g in upstream), np.dtype(np.float64)
            )
        except Exception:
            absolute = None  # a reference that needs signed inputs: the bound uses |g_ref| alone

    def low() -> tuple[np.ndarray, ...] | None:
        runs = []
        for measurement in precision.gradient_measurements(op, case.dtype):
            inputs, grads = case.logical, upstream
            if measurement.perturb:
                inputs = precision.perturbed(case.logical, case.seed, measurement.perturb)
                moved = precision.perturbed(
                    {str(i): g for i, g in enumerate(upstream) if g is not None},
                    case.seed + 1,
                    measurement.perturb,
                )
                grads = tuple(None if g is None else moved[str(i)] for i, g in enumerate(upstream))
            try:
                runs.append(tuple(vjp(inputs, grads, dtypes.info(measurement.dtype).numpy)))
            except Exception:
                continue  # a reference torch cannot run in that dtype: the other measurements stand
        if not runs:
            return None
        return tuple(precision.farthest(r, [run[i] for run in runs]) for i, r in enumerate(exact))

    return gradients.GradientCase(
        dtype=case.dtype,
        dims=case.dims,
        names=names,
        input_dtypes={n: dtypes.name_of(case.logical[n].dtype) for n in names},
        reference=tuple(exact),
        reference_abs=tuple(absolute) if absolute is not None else None,
        low=low,
        bias_test=case.stratum.mode is ValueMode.REGULAR,
        correlated=case.stratum.mode in (ValueMode.ASCENDING, ValueMode.CAPTURED),
    )


def _with_gradients(
    op: OpSpec,
    verdict: Any,
    case: Any,
    grads: Gradients,
    rerun: Gradients | None,
    validation: Any,
) -> tuple[Any, tuple[Any, ...]]:
    """The case's verdict with its gradients judged (oracle/gradients.py), and the per-gradient figures."""
    from gpuemu_ci.oracle.gradients import judge_gradients
    from gpuemu_ci.oracle.model import CaseVerdict

    judged = judge_gradients(op, case, grads, rerun, validation)
    combined = CaseVerdict(
        verdict.passed and not judged.findings, (*verdict.findings, *judged.findings), verdict.stats
    )
    return combined, judged.stats


def _gradient_figures(gradient_stats: tuple[Any, ...]) -> tuple[GradientFigure, ...]:
    from gpuemu_ci.results.base import json_float

    return tuple(
        GradientFigure(
            of=name,
            rule=stats.comparator.value,
            headroom=json_float(stats.headroom) if stats.headroom is not None else None,
            max_abs_error=json_float(stats.max_abs_error) if stats.max_abs_error is not None else None,
        )
        for name, stats in gradient_stats
    )


def _judged(
    judging: _Judging, case: CaseInputs, run: CaseRun, verdict: Any, gradient_stats: tuple[Any, ...] = ()
) -> CaseReport:
    from gpuemu_ci.results.base import json_float
    from gpuemu_ci.results.model import FailureKind

    stats = verdict.stats
    reference = run.reference.outputs[0] if run.reference.outputs else None
    scale = None
    if reference is not None and np.size(reference) and reference.dtype.kind == "f":
        finite = np.abs(reference[np.isfinite(reference)])  # the typical magnitude, for calibrate
        scale = json_float(float(finite.max()) if finite.size else 0.0)
    figures: dict[str, Any] = {
        "comparator": stats.comparator.value if stats else None,
        "headroom": json_float(stats.headroom) if stats else None,
        "max_abs_error": json_float(stats.max_abs_error) if stats else None,
        "worst_index": tuple(int(i) for i in stats.worst_index)
        if stats and stats.worst_index is not None
        else None,
        "exceeded": stats.exceeded if stats else None,
        "total": stats.total if stats else None,
    }
    base = {
        **describe_case(case),
        "interpreter": run.interpreter,
        "reference_scale": scale,
        "call_s": judging.call_s,
        "gradients": _gradient_figures(gradient_stats),
    }
    if verdict.passed:
        return CaseReport(outcome="passed", **base, **figures)
    primary = verdict.primary
    kind = primary.kind if primary else FailureKind.MISMATCH
    troubled = kind in (FailureKind.CRASHED, FailureKind.TIMEOUT, FailureKind.OOM, FailureKind.RAISED)
    written = _snapshot(judging, case)
    return CaseReport(
        outcome="failed",
        **base,
        **figures,
        kind=kind.value,
        output=primary.message.split(":", 1)[0]
        if primary and primary.message.startswith("grad of ")
        else None,
        message="\n".join(f.message for f in verdict.findings),
        findings=tuple((f.kind.value, f.message) for f in verdict.findings),
        stderr_tail=(run.op.stderr_tail or None) if troubled else None,
        snapshot=written.snapshot,
        snapshot_error=written.error,
    )


def _errored(judging: _Judging, case: CaseInputs, failed: CallResult, who: str) -> CaseReport:
    """A case that could not be judged: the reference (or the naive implementation, or the judge) failed."""
    from gpuemu_ci.results.model import FailureKind

    kinds = {k.value for k in FailureKind}
    kind = failed.status.value if failed.status.value in kinds else FailureKind.RAISED.value
    written = _snapshot(judging, case)
    return CaseReport(
        outcome="errored",
        **describe_case(case),
        kind=kind,
        message=f"the {who} {failed.status.words}: {failed.message}",
        stderr_tail=failed.stderr_tail or None,
        snapshot=written.snapshot,
        snapshot_error=written.error,
        call_s=judging.call_s,
    )


@dataclass(frozen=True)
class _Written:
    snapshot: str | None = None  # its path under out_dir
    error: str | None = None  # why it could not be written


def _snapshot(judging: _Judging, case: CaseInputs) -> _Written:
    task, spec = judging.task, judging.spec
    if task.out_dir is None or not spec.snapshot_wanted:
        return _Written()
    from gpuemu_ci.results.snapshots import write_snapshot

    if sum(a.nbytes for a in case.logical.values()) > MAX_SNAPSHOT_BYTES:
        return _Written()  # a large-size case's gigabytes are not copied to disk: its seed replays it
    try:
        return _Written(write_snapshot(task.out_dir, dict(case.logical), snapshot_meta(task, spec, case)))
    except OSError as exc:  # a full or read-only disk costs the snapshot, never the verdict
        return _Written(error=f"{exc.strerror or exc}")


def snapshot_meta(task: OpTask, spec: CaseSpec, case: CaseInputs) -> dict[str, Any]:
    """What a snapshot records besides the inputs: enough to rebuild and replay the case."""
    from gpuemu_ci.fuzz.values import GENERATOR_VERSION

    return {
        "op": task.op.name,
        "case_seed": case.seed,
        "case_index": spec.index,
        "master_seed": task.master_seed,
        "generator_version": GENERATOR_VERSION,
        "dtype": case.dtype,
        "mode": case.stratum.mode.value,
        "size_class": case.stratum.size_class.value,
        "dims": dict(case.dims),
        "kwargs": dict(case.kwargs),
        "layouts": {
            name: {"layout": c.layout.value, "broadcast_dim": c.broadcast_dim}
            for name, c in case.layouts.items()
        },
        "input_order": list(case.logical),
    }
