"""The judge side of a case (another worker process than the op's): generate the same inputs from the seed
(and check they are the op side's: their digests), call the fp64 reference (and the naive implementation and
the hooks the oracle needs), have the oracle judge the op's outputs (oracle/case_report.py), and snapshot the
inputs of a case that did not pass."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgspec
import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.backends import backward, explain
from gpuemu_ci.backends.calling import (
    InputsFailed,
    Invoke,
    Stager,
    call,
    make_inputs,
    no_stage,
)
from gpuemu_ci.backends.frameworks import get_bridge
from gpuemu_ci.backends.interface import CallTarget, CaseSpec, OpTask, TargetKind
from gpuemu_ci.backends.loaded import Loaded, LoadError
from gpuemu_ci.backends.loading import describe_exception, load_callable, load_target
from gpuemu_ci.backends.protocol import Stage
from gpuemu_ci.backends.transport import is_float_like
from gpuemu_ci.calls import CallResult, CallStatus, CaseReport, CaseRun, LaunchedKernel
from gpuemu_ci.config.model import Family, Framework, OpSpec
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, CaseSkipped
from gpuemu_ci.fuzz.inputs import inputs_digest
from gpuemu_ci.fuzz.snapshot import snapshot_meta
from gpuemu_ci.oracle import bounds, conditioning, gradients, intermediates, precision, triton_findings
from gpuemu_ci.oracle.case_report import (
    describe_case,
    errored_report,
    inputs_differ_report,
    skipped_report,
    statistics_rules,
    verdict_report,
)
from gpuemu_ci.oracle.decide import Backward, Measurements, decide
from gpuemu_ci.oracle.judge import CaseContext, comparator_for
from gpuemu_ci.oracle.model import Comparator
from gpuemu_ci.plan.expand import stratum
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.results.snapshots import write_case_snapshot
from gpuemu_ci.triton_cpu.report import Explained, TritonReport


@dataclass(frozen=True)
class OpView:
    """The op side as the judge sees it: the calls' results with their outputs read from the arena."""

    op: CallResult
    rerun: CallResult | None = None
    inputs_modified: tuple[str, ...] = ()
    interpreter: str | None = None
    interpreter_types: tuple[str, ...] = ()
    inputs_digest: str = ""  # of the inputs the op's side built ("" when it built none, or died first)
    skipped: str = ""  # the op's side could not hold the case (CaseSkipped)
    triton: TritonReport | None = None  # what the GPU-faithful layer saw (gpuemu_ci/triton_cpu)
    not_run: str = ""  # who failed before the op could be called ("inputs hook", "setup"); "" when it was
    kernels: tuple[LaunchedKernel, ...] = ()  # the Triton functions the op's calls ran (triton_probe)


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
    doubled: tuple[str, ...] = (),
) -> tuple[CallResult, bool]:
    """The reference on fp64 copies of `arrays` (those named in `absolute` replaced by their absolute
    values, those in `doubled` by twice their values): (result, retire)."""
    bridge = get_bridge(framework)
    try:
        copies = {n: _reference_copy(v) for n, v in arrays.items()}
        for name in absolute:
            if name in copies:
                np.abs(copies[name], out=copies[name])
        for name in doubled:
            if name in copies:
                copies[name] *= 2.0
        ref_in = {n: bridge.to_native(c).value for n, c in copies.items()}
    except Exception as exc:
        return CallResult(CallStatus.RAISED, message=f"handing inputs to the reference: {exc}"), False
    result, retire = call(invoke, bridge, ref_in, dict(kwargs), contain=contain)
    outputs = tuple(_as_reference_output(a) for a in result.outputs)
    return CallResult(result.status, outputs, result.message, "", result.duration_s), retire


def reference_run(
    reference: Invoke,
    inputs: Mapping[str, np.ndarray],
    kwargs: Mapping[str, Any],
    outputs: tuple[np.ndarray, ...],
    abs_inputs: tuple[str, ...] = (),
    probed: tuple[str, ...] = (),
    framework: Framework = Framework.NUMPY,
) -> CaseRun:
    """What the oracle judges for outputs computed elsewhere (a shadowed call in production): the reference,
    run here on fp64 copies of the inputs (and on |abs_inputs|, and on each of `probed` doubled: the inputs it
    is linear in, oracle/intermediates.py), and the given outputs as the op's. `framework`: what the reference
    is handed (NumPy, or torch tensors for a ground truth written for the op's torch tensors)."""
    result, _ = reference_call(reference, inputs, kwargs, framework=framework, contain=Exception)
    absolute = (
        reference_call(reference, inputs, kwargs, abs_inputs, framework=framework, contain=Exception)[0]
        if abs_inputs
        else None
    )
    linear = (
        linear_inputs(
            probed,
            result,
            lambda name: reference_call(
                reference, inputs, kwargs, framework=framework, contain=Exception, doubled=(name,)
            )[0],
        )
        if result.status is CallStatus.OK
        else ()
    )
    op = CallResult(CallStatus.OK, tuple(np.ascontiguousarray(o) for o in outputs))
    return CaseRun(reference=result, op=op, reference_abs=absolute, linear_inputs=linear)


def linear_inputs(
    probed: tuple[str, ...], reference: CallResult, call_doubled: Callable[[str], CallResult]
) -> tuple[str, ...]:
    """The probed inputs the reference is linear in (oracle/intermediates.py): doubling the input doubles every
    output exactly. `call_doubled(name)` runs the reference with that input doubled."""
    found: list[str] = []
    for name in probed:
        doubled = call_doubled(name)
        if doubled.status is CallStatus.OK and intermediates.linear_in(reference.outputs, doubled.outputs):
            found.append(name)
    return tuple(found)


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
    digest: str | None = None  # of the inputs this side built

    def load(self, who: str, target: CallTarget) -> Loaded:
        """A target the judge calls (the reference, the naive implementation); _Unloadable when it does not load."""
        try:
            return load_target(target)
        except LoadError as exc:
            raise _Unloadable(who, str(exc)) from None

    def load_hook(self, who: str, spec: str) -> Callable[..., Any]:
        """A hook function (`pkg.mod:function`) of the op's config; _Unloadable when it does not load."""
        try:
            hook: Callable[..., Any] = load_callable(spec, self.task.root)
        except LoadError as exc:
            raise _Unloadable(who, str(exc)) from None
        return hook

    def reference(
        self, loaded: Loaded, case: CaseInputs, absolute: tuple[str, ...], doubled: tuple[str, ...] = ()
    ) -> CallResult:
        result, retire = reference_call(
            loaded.invoke,
            case.arrays,
            case.kwargs,
            absolute,
            self.task.reference.framework,
            self.contain,
            doubled,
        )
        self.retire = self.retire or retire
        self.call_s += result.duration_s
        return result

    def working_precision_reference(self, loaded: Loaded, case: CaseInputs) -> CallResult:
        """The reference called on the inputs cast to the op's working precision (oracle/precision.py), its
        outputs as computed there."""

        try:
            cast = precision.working_precision_inputs(self.task.op, case.dtype, case.logical)
        except Exception as exc:
            return CallResult(CallStatus.RAISED, message=f"handing inputs to the reference: {exc}")
        return self._call(loaded, self.task.reference.framework, cast, case.kwargs)

    def moved_references(self, loaded: Loaded, case: CaseInputs) -> tuple[tuple[np.ndarray, ...], ...]:
        """The float64 reference on the inputs moved by one working-precision rounding, per draw
        (oracle/conditioning.py); the draws it failed on are left out."""
        runs = []
        for arrays in conditioning.moved_inputs(
            self.task.op, case.dtype, case.logical, case.kwargs, case.seed
        ):
            result = self._call(loaded, self.task.reference.framework, arrays, case.kwargs)
            if result.status is CallStatus.OK:
                runs.append(tuple(_as_reference_output(np.asarray(o)) for o in result.outputs))
        return tuple(runs)

    def measurements(self, loaded: Loaded, case: CaseInputs) -> Measurements:
        """The reference's runs the oracle may ask for when a case fails its first verdict (oracle/decide.py), each
        under the reference's stage."""

        def working() -> tuple[np.ndarray, ...] | None:
            self.stage(Stage.REFERENCE)
            try:
                low = self.working_precision_reference(loaded, case)
            finally:
                self.stage(Stage.JUDGING)
            return low.outputs if low.status is CallStatus.OK else None

        def moved() -> tuple[tuple[np.ndarray, ...], ...]:
            self.stage(Stage.REFERENCE)
            try:
                return self.moved_references(loaded, case)
            finally:
                self.stage(Stage.JUDGING)

        return Measurements(working, moved)

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
    stage: Stager = no_stage,
    on_loaded: Callable[[], None] = lambda: None,
    contain: type[BaseException] = BaseException,
    reference: Invoke | None = None,
) -> tuple[CaseReport, bool]:
    """Judge the op's outputs against the reference, from the case's seed. Returns (report, retire);
    `on_loaded` is told when every import is done (the case's timer starts there); `reference` replaces the
    task's reference target (a function in the caller's process)."""
    judging = _Judging(task, spec, stage, contain, on_loaded, reference)
    try:
        report = _judge_case(judging, op_view)
        seen = op_view.triton
        if seen is not None and report.outcome != "unloadable":
            report = msgspec.structs.replace(
                report,
                triton_launches=triton_launches(seen),
                dot_precisions=seen.dot_precisions,
                triton_notes=triton_findings.case_notes(task.op, seen),
            )
        if report.outcome != "unloadable":
            report = msgspec.structs.replace(
                report, outputs_digest=outputs_digest(op_view.op), kernels=op_view.kernels
            )
        return report, judging.retire
    except _Unloadable as exc:
        return CaseReport(outcome="unloadable", unloadable=exc.who, message=exc.message), judging.retire


def outputs_digest(result: CallResult) -> str | None:
    """The op's outputs bit for bit (dtype, shape and bytes of each), or None when the call did not succeed:
    `gpuemu-ci mutate` compares a changed kernel's outputs with the original's on every case."""
    if result.status is not CallStatus.OK:
        return None
    digest = hashlib.blake2b(digest_size=16)
    for array in result.outputs:
        digest.update(f"{array.dtype.str}{array.shape};".encode())
        digest.update(np.ascontiguousarray(array).view(np.uint8).tobytes())
    return digest.hexdigest()


def _once_per_output(hook: Callable[..., Any]) -> Callable[..., Any]:
    """The `error_scale` hook called once per reference output of a case: a case that fails the family bound
    is judged again with measurements (oracle/decide.py) on the same inputs and reference outputs, and a hook
    may cost more than the case itself (liger_linear_cross_entropy's multiplies a vocabulary-sized weight in
    float64). Keyed by the reference output itself, kept alive here so its identity cannot be reused."""
    given: dict[int, tuple[np.ndarray, Any]] = {}

    def hook_once(*, inputs: Any, reference: np.ndarray, dims: Any, kwargs: Any) -> Any:
        kept = given.get(id(reference))
        if kept is None or kept[0] is not reference:
            kept = (reference, hook(inputs=inputs, reference=reference, dims=dims, kwargs=kwargs))
            given[id(reference)] = kept
        return kept[1]

    return hook_once


def triton_launches(seen: TritonReport) -> tuple[tuple[str, int], ...]:
    """How the case's Triton launches ran: ("vectorised", n), ("vectorised in k groups", n) for launches whose
    programs diverged, and ("one program at a time: <why>", n)."""
    whole = seen.vectorised - sum(n for _, n in seen.grouped)
    ran = [("vectorised", whole)] if whole else []
    ran += [(f"vectorised in {k} groups", n) for k, n in seen.grouped]
    return (*ran, *((f"one program at a time: {why}", n) for why, n in seen.per_program))


def _judge_case(judging: _Judging, op_view: OpView) -> CaseReport:
    task, op, stage = judging.task, judging.task.op, judging.stage
    if op_view.op.status is CallStatus.IMPORT_ERROR:
        raise _Unloadable("op", op_view.op.message)
    stage(Stage.LOADING)
    reference_target = (
        Loaded(judging.reference_invoke, "reference")
        if judging.reference_invoke is not None
        else judging.load("reference", task.reference)
    )
    naive_target = judging.load("naive implementation", task.naive) if task.naive is not None else None
    error_scale = None
    if op.targets.error_scale is not None:
        error_scale = _once_per_output(judging.load_hook("error_scale hook", op.targets.error_scale))
    judging.on_loaded()
    if op_view.skipped:  # the op's side could not hold the case: neither side runs it
        return skipped_report(stratum(op, judging.spec.seed), op_view.skipped)
    stage(Stage.GENERATING)
    try:
        case = make_inputs(task, judging.spec, judging.contain)
    except InputsFailed as exc:
        if exc.unloadable:
            raise _Unloadable("inputs hook", exc.message) from None
        return CaseReport(outcome="errored", kind="raised", message=exc.message, party=exc.party)
    except CaseSkipped as exc:
        return skipped_report(exc.stratum, exc.reason)
    mismatch = reference_target.mismatch([*case.arrays, *case.kwargs])
    if mismatch:  # the config's mistake: one error for the op (exit 2), not one failure per case
        raise _Unloadable("reference", mismatch)
    judging.digest = inputs_digest(case)
    if op_view.inputs_digest and op_view.inputs_digest != judging.digest:
        return inputs_differ_report(case, judging.digest, op_view.inputs_digest)
    if op_view.not_run:  # the op's worker failed before calling the op: nothing of the op's to judge
        return _not_run(judging, case, op_view)
    judging.call_s += op_view.op.duration_s + (op_view.rerun.duration_s if op_view.rerun else 0.0)
    decided = triton_findings.layer_report(
        case, judging.digest, op_view.interpreter, op_view.interpreter_types, op_view.triton, judging.call_s
    )
    if decided is not None:  # the layer's error, or a case the interpreter cannot compute as the GPU does
        if decided.outcome != "failed":
            return decided
        return _with_snapshot(
            judging, case, explain.found_by_layer(decided, op_view.triton, judging.spec.explain)
        )
    bound = comparator_for(op, case.dtype) in (Comparator.BOUND, Comparator.ARGMAX)
    probed = intermediates.probed_inputs(op, case.dtype) if bound else ()
    abs_inputs = (bounds.abs_linear_inputs(op) or probed) if bound else ()
    stage(Stage.REFERENCE)
    reference = judging.reference(reference_target, case, ())
    reference_abs = None
    linear: tuple[str, ...] = ()
    if abs_inputs and reference.status is CallStatus.OK:
        stage(Stage.REFERENCE_ABS)
        reference_abs = judging.reference(reference_target, case, abs_inputs)
        linear = linear_inputs(
            probed, reference, lambda name: judging.reference(reference_target, case, (), (name,))
        )
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
    gradient_case: gradients.GradientCase | None = None
    if op_grads is not None:
        stage(Stage.REFERENCE)
        made = _reference_gradients(judging, reference_target, case, reference)
        if isinstance(made, CallResult):
            return _errored(judging, case, made, "reference's backward")
        # What the op's backward computed from: its own forward outputs (oracle/row_statistics.py).
        gradient_case = replace(made, saved=tuple(op_call.outputs))
    run = CaseRun(
        reference=reference,
        op=op_call,
        rerun=rerun_call,
        reference_abs=reference_abs,
        linear_inputs=linear,
        inputs_modified=op_view.inputs_modified,
        interpreter=op_view.interpreter,
    )
    rules = statistics_rules(op, case)
    context = CaseContext(
        case.dtype,
        case.dims,
        case.kwargs,
        case.logical,
        naive_output,
        error_scale,
        bias_test=rules.bias_test,
        correlated=rules.correlated,
        dot_input_roundoff=op_view.triton.dot_input_roundoff() if op_view.triton else 0.0,
    )
    stage(Stage.JUDGING)

    measurements = judging.measurements(reference_target, case)
    gradients_given = (
        Backward(gradient_case, op_grads, rerun_grads)
        if gradient_case is not None and op_grads is not None
        else None
    )
    try:
        verdict, gradient_stats = decide(
            op, context, run, task.validation, measurements, gradients_given, op_view.triton
        )
    except judging.contain as exc:  # an error_scale hook that raises, or worse
        failed = CallResult(
            CallStatus.RAISED, message=f"judging the outputs failed: {describe_exception(exc)}"
        )
        return _errored(judging, case, failed, "judge")
    report = verdict_report(
        case, run, verdict, digest=judging.digest, call_s=judging.call_s, gradient_stats=gradient_stats
    )
    if report.outcome != "failed":
        return report
    explaining = judging.spec.explain
    wanted = task.out_dir if judging.spec.snapshot_wanted or explaining else None
    forward_outputs = len(op_call.outputs) if op_call.status is CallStatus.OK else 1

    def rejudge(found: Explained) -> tuple[np.ndarray | None, bool]:
        """A what-if's forward outputs judged as the op's with the same reference (explain only)."""
        outputs = _what_if_outputs(found, op_call)
        if outputs is None:
            return None, False
        what_if = replace(run, op=CallResult(CallStatus.OK, outputs), rerun=None)
        try:
            seen, _ = decide(op, context, what_if, task.validation, measurements, None, op_view.triton)
        except judging.contain:
            return None, False
        return (seen.stats.ratio if seen.stats is not None else None), seen.passed

    explained = explain.explained(
        report, verdict.stats, case.dims, wanted, op_view.triton, gradient_stats, forward_outputs,
        explain=explaining, rejudge=rejudge,
    )  # fmt: skip
    return _with_snapshot(judging, case, explained)


def _not_run(judging: _Judging, case: CaseInputs, op_view: OpView) -> CaseReport:
    """A case whose op was never called: its inputs hook or gpuemu-ci's own setup failed in the op's worker
    (this worker made the same inputs), so the case could not be judged; the op is not blamed."""
    kinds = {k.value for k in FailureKind}
    status = op_view.op.status.value
    report = CaseReport(
        outcome="errored",
        **describe_case(case, judging.digest),
        kind=status if status in kinds else FailureKind.RAISED.value,
        message=f"in the op's worker, before the op was called: {op_view.op.message.removeprefix('not run: ')}",
        stderr_tail=op_view.op.stderr_tail or None,
        call_s=judging.call_s,
        party=op_view.not_run,
    )
    return _with_snapshot(judging, case, report)


def _errored(judging: _Judging, case: CaseInputs, failed: CallResult, who: str) -> CaseReport:
    """A case that could not be judged (the reference, the naive implementation or the judge failed), with its
    snapshot."""
    report = errored_report(case, failed, who, digest=judging.digest, call_s=judging.call_s)
    return _with_snapshot(judging, case, report)


Gradients = tuple[np.ndarray, ...]


def _split_gradients(
    op: OpSpec, case: CaseInputs, op_view: OpView
) -> CaseReport | tuple[CallResult, CallResult | None, Gradients | None, Gradients | None]:
    """(the op's call with its forward outputs only, the same for the re-run, the op's gradients, the
    re-run's): a `backward = true` op's call returned its outputs followed by the gradients."""
    names = backward.gradient_names(op, case.logical)
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
) -> gradients.GradientCase | CallResult:
    """The reference's gradients for the case (oracle/gradients.GradientCase), or the failed CallResult."""
    task, op = judging.task, judging.task.op
    assert op.backward is not None
    vjp_reference = None
    if op.backward.vjp_reference:
        target = CallTarget(TargetKind.CALLABLE, op.backward.vjp_reference, task.root, Framework.NUMPY)
        vjp_reference = judging.load("vjp_reference", target).invoke
    names = backward.gradient_names(op, case.logical)
    out_dtype = op.output_dtype or case.dtype
    rules = statistics_rules(op, case)
    upstream = backward.upstream_gradients(
        case.seed, reference.outputs, out_dtype, case.stratum.mode, case.dims, op.output_dtypes
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
            # A selection (the exact family: a max-pool) must select the same elements: its inputs stay signed.
            signed = op.error_model.family is Family.EXACT
            magnitudes = {
                n: np.abs(a) if dtypes.is_float_dtype(a.dtype) and not signed else a
                for n, a in case.logical.items()
            }
            absolute = vjp(
                magnitudes, tuple(None if g is None else np.abs(g) for g in upstream), np.dtype(np.float64)
            )
        except Exception:
            absolute = None  # a reference that needs signed inputs: the bound uses |g_ref| alone
    counted = None
    if op.error_model.family is Family.EXACT:  # oracle/gathers.py: how many terms each element sums
        try:
            ones = tuple(None if g is None else np.ones(np.shape(g), dtype=np.float64) for g in upstream)
            counted = tuple(vjp(case.logical, ones, np.dtype(np.float64)))
        except Exception:
            counted = None  # the structural count stands

    def low() -> tuple[np.ndarray, ...] | None:
        runs = []
        for measurement in precision.gradient_measurements(op, case.dtype):
            prepared = conditioning.gradient_inputs(
                op, measurement, case.logical, upstream, case.kwargs, case.seed
            )
            if prepared is None:
                continue
            inputs, grads = prepared
            try:
                runs.append(tuple(vjp(inputs, grads, dtypes.info(measurement.dtype).numpy)))
            except Exception:
                continue  # a reference torch cannot run in that dtype: the other measurements stand
        if not runs:
            return None
        return tuple(precision.farthest(r, [run[i] for run in runs]) for i, r in enumerate(exact))

    def working() -> tuple[np.ndarray, ...] | None:
        """The reference's gradients in the working precision alone (oracle/overflow.py)."""
        precision_name = precision.working_precision(op, case.dtype)
        if precision_name is None:
            return None
        try:
            return tuple(vjp(case.logical, upstream, dtypes.info(precision_name).numpy))
        except Exception:
            return None

    def probe(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The reference's float64 gradients at other inputs, for the same upstream (oracle/constant_rows.py)."""
        try:
            return dict(zip(names, vjp(inputs, upstream, np.dtype(np.float64)), strict=True))
        except Exception:
            return None

    return gradients.GradientCase(
        dtype=case.dtype,
        dims=case.dims,
        names=names,
        input_dtypes={n: dtypes.name_of(case.logical[n].dtype) for n in names},
        reference=tuple(exact),
        reference_abs=tuple(absolute) if absolute is not None else None,
        low=low,
        bias_test=rules.bias_test,
        correlated=rules.correlated,
        inputs=case.logical,
        forward=tuple(np.asarray(o) for o in reference.outputs),
        upstream=upstream,
        kwargs=case.kwargs,
        counted=counted,
        probe=probe,
        working=working,
    )


def _what_if_outputs(found: Explained, like: CallResult) -> tuple[np.ndarray, ...] | None:
    """An explain probe's outputs at the judged call's forward outputs' shapes and dtypes; None where they do
    not fit them."""
    if like.status is not CallStatus.OK or len(found.outputs) < len(like.outputs):
        return None
    arrays = []
    for data, y in zip(found.outputs, like.outputs, strict=False):
        y = np.asarray(y)
        if len(data) != y.nbytes:
            return None
        arrays.append(np.frombuffer(data, dtype=y.dtype).reshape(y.shape))
    return tuple(arrays)


def _with_snapshot(judging: _Judging, case: CaseInputs, report: CaseReport) -> CaseReport:
    """The report of a case that did not pass, with the snapshot of its inputs (when wanted) or why none was
    written."""
    task, spec = judging.task, judging.spec
    if task.out_dir is None or not spec.snapshot_wanted:
        return report
    meta = snapshot_meta(case, task.op.name, spec.index, task.master_seed)
    written, error = write_case_snapshot(task.out_dir, case.logical, meta)
    return msgspec.structs.replace(report, snapshot=written, snapshot_error=error)
