"""The op side of a case (one worker process): generate the case's inputs, call the op on them in their real
memory layouts (and again on identical inputs when the op is declared deterministic), and notice writes into
the inputs. The judge side (judge_side.py) runs in another worker, so a kernel that corrupts its own process's
memory cannot corrupt its judge; for `gpuemu_ci.check` with a lambda both run in the caller's process
(inprocess.py)."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import msgspec
import numpy as np

from gpuemu_ci.backends import backward, explain_probes, explain_shadow, layer_probes, mutant, triton_probe
from gpuemu_ci.backends.calling import UNUSABLE, InputsFailed, Invoke, Stager, call, make_inputs, no_stage
from gpuemu_ci.backends.cuda import OUTPUT_DTYPE_KWARG
from gpuemu_ci.backends.frameworks import Bridge, get_bridge
from gpuemu_ci.backends.interface import SETUP, CallTarget, CaseSpec, OpTask, TargetKind
from gpuemu_ci.backends.loaded import Loaded, LoadError
from gpuemu_ci.backends.loading import load_target
from gpuemu_ci.backends.protocol import Stage
from gpuemu_ci.backends.transport import is_float_like, memory_region, region_of, resolve_dtype
from gpuemu_ci.calls import CallResult, CallStatus, LaunchedKernel
from gpuemu_ci.config.model import MaskedLanes, OpSpec
from gpuemu_ci.fuzz.case import CaseInputs, CaseSkipped
from gpuemu_ci.fuzz.inputs import inputs_digest
from gpuemu_ci.fuzz.shapes import shape_of
from gpuemu_ci.triton_cpu import layer as triton_layer
from gpuemu_ci.triton_cpu.report import TAMPERED, Decided, Explained, TritonReport


@dataclass(frozen=True)
class OpSide:
    """The op's calls on one case (outputs are this process's arrays)."""

    op: CallResult
    rerun: CallResult | None = None
    inputs_modified: tuple[str, ...] = ()
    interpreter: str | None = None
    retire: bool = False
    interpreter_types: tuple[str, ...] = ()  # bfloat16/fp8 that Triton's interpreter handled (triton_probe)
    inputs_digest: str = ""  # of the inputs this side built ("" when it built none)
    skipped: str = ""  # why this machine cannot hold the case (CaseSkipped): the judge says so, not a failure
    triton: TritonReport | None = None  # what the GPU-faithful layer saw (gpuemu_ci/triton_cpu)
    not_run: str = ""  # who failed before the op could be called ("inputs hook", "setup"); "" when it was
    kernels: tuple[LaunchedKernel, ...] = ()  # the Triton functions the calls ran (triton_probe)


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
    stage: Stager = no_stage,
    invoke: Invoke | None = None,
    on_first_call: Callable[[CallResult], None] | None = None,
    on_loaded: Callable[[], None] = lambda: None,
    on_built: Callable[[str], None] = lambda digest: None,
    contain: type[BaseException] = BaseException,
) -> OpSide:
    """Generate the inputs and call the op (twice when it is declared deterministic). `invoke` replaces the
    op target (a callable in the caller's process); `on_loaded` is told when the imports are done (the case's
    timer starts there); `on_built` gets the inputs' digest before the op runs (a crash keeps it);
    `on_first_call` sees the first call's result before the re-run, which might kill the process."""
    op = task.op
    stage(Stage.LOADING)
    loaded: Loaded | None = None
    if invoke is None:
        try:
            loaded = load_target(task.op_target)
        except LoadError as exc:
            return OpSide(CallResult(CallStatus.IMPORT_ERROR, message=str(exc)))
        invoke = loaded.invoke
    try:
        mutant.prepare(task.patches)  # after the op's imports: the kernels' modules are the op's own
    except mutant.PatchError as exc:
        return OpSide(CallResult(CallStatus.IMPORT_ERROR, message=f"the changed kernel: {exc}"))
    on_loaded()
    stage(Stage.GENERATING)
    try:
        case = make_inputs(task, spec, contain)
    except InputsFailed as exc:
        return OpSide(CallResult(CallStatus.RAISED, message=f"not run: {exc.message}"), not_run=exc.party)
    except CaseSkipped as exc:  # the judge side says so in its report
        return OpSide(CallResult(CallStatus.RAISED, message=f"not run: {exc.reason}"), skipped=exc.reason)
    # A signature that cannot take the inputs is the config's mistake: one error for the op, not one per case.
    passed = [*case.arrays, *case.kwargs, *filter(None, [op.execution.out_arg])]
    if loaded is not None and (mismatch := loaded.mismatch(passed)):
        return OpSide(CallResult(CallStatus.IMPORT_ERROR, message=mismatch))
    digest = inputs_digest(case)
    on_built(digest)
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

    not_run = ""

    def one_call(which: Stage, **layer: Any) -> tuple[CallResult, bool]:
        """The op called once; `layer`: settings of the Triton layer changed for a probe (layer_probes.py),
        whose report is not kept."""
        nonlocal not_run
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
            not_run = SETUP  # gpuemu-ci's own step, before the op is called
            failed = CallResult(
                CallStatus.RAISED,
                message=f"the case's setup failed: handing the inputs to {bridge.framework.value} raised {exc}",
            )
            return failed, False
        stage(which)
        values = {name: native.value for name, native in natives.items()}
        poison = op.execution.triton_masked_lanes is MaskedLanes.POISON
        settings = triton_layer.CallSettings(
            case.seed,
            int(which is Stage.RERUN),
            op.execution.triton_sanitize,
            masked_lanes=triton_layer.POISON if poison else triton_layer.ZERO,
            # Where each store wrote: only the explain re-run's judged call maps its outputs to their stores
            # (its float64 shadow is a call of its own after it: explain_shadow.py).
            log_stores=spec.explain and which is Stage.OP and not layer,
        )
        if layer:
            settings = replace(settings, **layer)
        launched = triton_probe.launches()
        poisoned = bridge.uninitialized_poisoned() if task.poison_uninitialized else contextlib.nullcontext()
        returned: list[np.ndarray] = []

        def as_returned(arr: np.ndarray) -> np.ndarray:
            # Kept in the memory the kernels wrote, to be matched to their stores (triton_cpu/where.py).
            returned.append(arr)
            return private(arr)

        with (
            mutant.applied(task.patches),
            poisoned,
            triton_layer.intercepted(settings) as watched,  # Triton kernels run as a GPU would (triton_cpu)
        ):
            result, retire = call(
                invoke, bridge, values, kwargs, out=out, expected=resolve_dtype(out_dtype), private_of=as_returned,
                contain=contain,
            )  # fmt: skip
        seen = _bypassed(watched.report(), triton_probe.launches() - launched)
        if settings.log_stores and seen.launches:
            seen = msgspec.structs.replace(
                seen, stores=watched.stores.maps(returned), stores_note=watched.stores.why_none()
            )
        returned.clear()
        if layer and seen.internal_error:
            raise _LayerFailed(seen.internal_error)
        if layer:
            probed[:] = [seen]
        else:
            kept = seen.launches or seen.notes or seen.interpreter_gaps or seen.findings
            reports.append(seen if kept else None)
        if not retire:
            for native in natives.values():
                if native.write_back is not None:
                    native.write_back()  # device-side writes into inputs become visible to the comparison
        return result, retire

    def restored() -> None:
        for name, (region, _) in regions.items():
            if region is not None:
                region[...] = before[name]  # identical fresh inputs

    def probe_call(**layer: Any) -> tuple[CallResult, bool]:
        restored()
        return one_call(Stage.PROBE, **layer)

    def shadow_call(**layer: Any) -> tuple[CallResult, bool, TritonReport | None]:
        probed.clear()
        result, retire = probe_call(**layer)
        return result, retire, probed[0] if probed else None

    reports: list[TritonReport | None] = []
    probed: list[TritonReport] = []  # the layer's report of the last probe call
    launches_before = triton_probe.mark()
    first, retire = one_call(Stage.OP)
    modified = tuple(
        name
        for name, (region, _) in regions.items()
        if region is not None and not _same_bytes(region, before[name])
    )
    decided: tuple[Decided, ...] = ()
    judged = reports[0] if reports else None
    if judged is not None and judged.sanitized and not retire and first.status is CallStatus.OK:
        try:
            decided, retire = layer_probes.run(op, judged, first, probe_call)
        except _LayerFailed as exc:  # the tool's error in a probe: the case is not judged
            reports[0] = msgspec.structs.replace(judged, internal_error=str(exc))
    explained: tuple[Explained, ...] = ()
    judged = reports[0] if reports else None
    if (
        spec.explain
        and judged is not None
        and judged.sanitized
        and not retire
        and first.status is CallStatus.OK
    ):
        try:
            judged, retire = explain_shadow.shadowed(judged, first, spec, shadow_call)
            reports[0] = judged
            if not retire:
                explained, retire = explain_probes.run(op, judged, first, probe_call)
        except _LayerFailed as exc:  # the tool's error in an explain probe: the failure stands, unexplained
            explained = (Explained(explain_probes.FAILED, "", f"an explain probe could not run: {exc}"),)
    rerun: CallResult | None = None
    if op.execution.deterministic:
        if retire:
            rerun = CallResult(CallStatus.CRASHED, message=UNUSABLE)
        else:
            if on_first_call is not None:
                on_first_call(first)
            restored()
            rerun, retire = one_call(Stage.RERUN)
    interpreter, interpreter_types = triton_probe.since(launches_before)
    seen = [r for r in reports if r is not None]
    triton = seen[0].merged(seen[1] if len(seen) > 1 else None) if seen else None
    if triton is not None and decided:
        triton = msgspec.structs.replace(triton, decided=decided)
    if triton is not None and explained:
        triton = msgspec.structs.replace(triton, explained=(*triton.explained, *explained))
    if triton is not None and triton.sanitized:
        # The layer computed bf16 and fp8 as the GPU does: only what it could not run is not judged.
        unmodelled = [t for t in interpreter_types if t in triton_probe.UNMODELLED]
        interpreter_types = tuple(dict.fromkeys((*triton.interpreter_gaps, *unmodelled)))
    elif interpreter and triton is not None and triton.interpreter_gaps:
        interpreter_types = tuple(sorted({*interpreter_types, *triton.interpreter_gaps}))  # not judged
    return OpSide(
        first,
        rerun,
        modified,
        interpreter,
        retire,
        interpreter_types,
        digest,
        triton=triton,
        not_run=not_run,
        kernels=triton_probe.kernels(),
    )


class _LayerFailed(Exception):
    """The Triton layer's own code raised during a probe call (the tool's error)."""


def _bypassed(seen: TritonReport, interpreted: int) -> TritonReport:
    """The call's report, failing it as `tampered` where kernels were launched around the layer (the
    interpreter ran more launches than the layer saw) or its launch counter was taken away."""
    if not seen.sanitized or (interpreted <= seen.launches and triton_probe.counting()):
        return seen
    why = (
        f"the interpreter ran {interpreted} launches and the layer saw {seen.launches}"
        if interpreted > seen.launches
        else "the interpreter's launch counter was replaced"
    )
    message = (
        f"the op ran Triton kernels around gpuemu-ci's Triton layer ({why}): the bounds, race and masked-lane "
        "checks it was promised did not run on them, so the case cannot pass"
    )
    return msgspec.structs.replace(seen, findings=(*seen.findings, (TAMPERED, message)))


def _forward_and_backward(task: OpTask, case: CaseInputs, invoke: Invoke, bridge: Bridge) -> Invoke:
    """The op's call as forward + backward (backends/backward.py): its outputs, then the gradients."""
    op = task.op
    assert op.backward is not None
    vjp = None
    if op.backward.vjp:
        target = CallTarget(TargetKind.CALLABLE, op.backward.vjp, task.root, task.op_target.framework)
        vjp = load_target(target).invoke
    out_dtype = op.output_dtype or case.dtype

    def upstream(forward: tuple[np.ndarray, ...]) -> tuple[np.ndarray | None, ...]:
        return backward.upstream_gradients(
            case.seed, forward, out_dtype, case.stratum.mode, case.dims, op.output_dtypes
        )

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
