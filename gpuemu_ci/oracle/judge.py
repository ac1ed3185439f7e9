"""One case's verdict: the op's output against the fp64 reference, plus the checks that need no tolerance."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.calls import CallResult, CallStatus, CaseRun
from gpuemu_ci.config.model import Family, OpSpec, Validation
from gpuemu_ci.fuzz.shapes import shape_of
from gpuemu_ci.oracle import bounds, conditioning, overflow, precision, tolerance_hint
from gpuemu_ci.oracle.argmax import axis_of as argmax_axis
from gpuemu_ci.oracle.argmax import compare_argmax
from gpuemu_ci.oracle.compare import DEFAULT_TOLERANCES, allclose_allowance, compare, compare_exact
from gpuemu_ci.oracle.forward_terms import FORWARD_TERMS
from gpuemu_ci.oracle.invariants import bias_z, check_invariants
from gpuemu_ci.oracle.model import CaseVerdict, Comparator, ErrorStats, Finding
from gpuemu_ci.oracle.nonfinite_rules import nonfinite_rules
from gpuemu_ci.oracle.terms import words_of
from gpuemu_ci.results.model import FailureKind

STATUS_KIND = {
    CallStatus.CRASHED: FailureKind.CRASHED,
    CallStatus.TIMEOUT: FailureKind.TIMEOUT,
    CallStatus.OOM: FailureKind.OOM,
    CallStatus.RAISED: FailureKind.RAISED,
    CallStatus.BAD_OUTPUT: FailureKind.BAD_OUTPUT,
    CallStatus.IMPORT_ERROR: FailureKind.RAISED,
}


@dataclass(frozen=True)
class CaseContext:
    """What the judge needs about the case besides the run."""

    dtype: str
    dims: Mapping[str, int]
    kwargs: Mapping[str, object]
    inputs: Mapping[str, np.ndarray]  # logical inputs (any layout), in their own dtypes
    naive_output: np.ndarray | None = None  # for the baseline-relative rule
    error_scale: Callable[..., tuple[np.ndarray, int]] | None = None  # custom family hook
    bias_test: bool = False  # regular-valued cases only: structured inputs make rounding errors correlated
    correlated: bool = False  # sorted values or addends repeated along a summed dim (bounds.BoundInputs)
    # The reference in the working precision (precision.py): for what a non-finite output means, never a bound.
    low_outputs: tuple[np.ndarray, ...] | None = None
    # The float64 reference on the inputs moved by one working-precision rounding, per draw (conditioning.py).
    moved_outputs: tuple[tuple[np.ndarray, ...], ...] = ()
    dot_input_roundoff: float = 0.0  # u of fp32 `tl.dot` inputs the kernel ran (TF32: 2^-11; triton_cpu)


def comparator_for(op: OpSpec, dtype: str) -> Comparator:
    """The comparator that judges the op's outputs at this dtype: argmax, exact, allclose (tolerances, or no
    family), baseline-relative (a naive implementation) or the family bound."""
    if op.error_model.family is Family.ARGMAX:
        return Comparator.ARGMAX
    if op.error_model.family is Family.EXACT or not dtypes.info(op.output_dtype or dtype).is_float:
        return Comparator.EXACT
    if op.error_model.tolerance_for(dtype) is not None or op.error_model.family is None:
        return Comparator.ALLCLOSE
    if op.targets.naive:
        return Comparator.BASELINE_RELATIVE
    return Comparator.BOUND


def judge(op: OpSpec, case: CaseContext, run: CaseRun, validation: Validation) -> CaseVerdict:
    """The verdict on one case. Overflow, division by zero and invalid operations on extreme values are part
    of judging them (non-finite errors and allowances are handled explicitly), never a warning on the terminal."""
    with np.errstate(all="ignore"):
        return _judge(op, case, run, validation)


def _judge(op: OpSpec, case: CaseContext, run: CaseRun, validation: Validation) -> CaseVerdict:
    if run.op.status is not CallStatus.OK:
        return _call_failed(run.op, "op")
    outputs = run.op.outputs
    reference = run.reference.outputs
    findings: list[Finding] = []
    if len(outputs) != len(reference):
        return CaseVerdict(
            False,
            (
                Finding(
                    FailureKind.SHAPE,
                    f"the op returned {len(outputs)} outputs, the reference {len(reference)}",
                ),
            ),
            None,
        )
    if op.output_dtypes and len(op.output_dtypes) != len(outputs):
        return CaseVerdict(
            False,
            (
                Finding(
                    FailureKind.SHAPE,
                    f"the op returned {len(outputs)} outputs; `output_dtype` names {len(op.output_dtypes)}",
                ),
            ),
            None,
        )
    stats: ErrorStats | None = None
    for position, (y, r) in enumerate(zip(outputs, reference, strict=True)):
        label = "" if len(outputs) == 1 else f"output {position}: "
        output_dtype = op.dtype_of_output(position, case.dtype)
        y = np.asarray(y)
        if op.error_model.family is Family.ARGMAX:
            out_stats, out_findings = _judge_argmax(op, case, run, y, np.asarray(r), position)
            findings.extend(Finding(f.kind, label + f.message) for f in out_findings)
            if stats is None or (out_stats.headroom or 0) > (stats.headroom or 0):
                stats = out_stats
            continue
        if tuple(y.shape) != tuple(np.shape(r)):
            # Upstream's `shape_preserved` is this very rule (the output has the reference's shape): say so.
            invariant = (
                "invariant `shape_preserved` violated: " if op.error_model.invariants.shape_preserved else ""
            )
            findings.append(
                Finding(
                    FailureKind.INVARIANT if invariant else FailureKind.SHAPE,
                    f"{label}{invariant}shape {tuple(y.shape)} != reference shape {tuple(np.shape(r))}",
                )
            )
            continue
        declared = _declared_output(op, case, len(outputs))
        if declared is not None and tuple(y.shape) not in _shapes_of(declared):
            findings.append(
                Finding(
                    FailureKind.SHAPE,
                    f"{label}shape {tuple(y.shape)} (the reference's too) != the declared `output` "
                    f"{list(op.shapes.output_dims or ())} = {declared}: the error model reads the lengths it "
                    "reduces from `output`, so it must describe what the op returns",
                )
            )
            continue
        if dtypes.name_of(y.dtype) != output_dtype:
            findings.append(
                Finding(
                    FailureKind.DTYPE,
                    f"{label}dtype {dtypes.name_of(y.dtype)} != expected "
                    f"{output_dtype} (set `output_dtype` if intended"
                    + ("; a list gives one dtype per output)" if len(outputs) > 1 else ")"),
                )
            )
            continue
        out_stats, out_findings = _compare_one(
            op, case, run, y, np.asarray(r), output_dtype, validation, position
        )
        if dtypes.info(output_dtype).is_float:
            out_findings += nonfinite_rules(y, np.asarray(r), validation)
        findings.extend(Finding(f.kind, label + f.message) for f in out_findings)
        if stats is None or (out_stats.headroom or 0) > (stats.headroom or 0):
            stats = out_stats
        findings.extend(
            check_invariants(op.error_model.invariants, y, np.shape(r), output_dtype, op.error_model.bound_c)
        )
        if case.bias_test and out_stats.comparator is not Comparator.EXACT:
            z = bias_z(*bounds.statistic_rows(op, case.kwargs, y, np.asarray(r)), output_dtype)
            if z is not None:
                stats = _with_bias(stats, z)
                if abs(z) > validation.bias_z_threshold:
                    findings.append(
                        Finding(
                            FailureKind.BIAS,
                            f"{label}rounding bias z = {z:.1f} (|z| > "
                            f"{validation.bias_z_threshold:g}): the output is rounded "
                            f"{'toward zero' if z < 0 else 'away from zero'} systematically",
                        )
                    )
    if run.inputs_modified:
        findings.append(
            Finding(
                FailureKind.INPUTS_MODIFIED,
                f"the op wrote into its input(s) {', '.join(run.inputs_modified)}",
            )
        )
    if run.rerun is not None:
        findings.extend(_determinism(outputs, run.rerun))
    if op.execution.out_arg:
        unwritten = _unwritten(outputs, reference)
        if unwritten:
            findings.insert(
                0,
                Finding(
                    FailureKind.UNWRITTEN,
                    f"{unwritten} elements of the `{op.execution.out_arg}` buffer "
                    "kept the NaN it was pre-filled with: the op did not write them",
                ),
            )
    return CaseVerdict(not findings, tuple(findings), stats)


def _declared_output(op: OpSpec, case: CaseContext, outputs: int) -> tuple[int, ...] | None:
    """The shape the config's `output` dims give this case (one output, dims all known), else None."""
    declared = op.shapes.output_dims
    if declared is None or outputs != 1 or op.error_model.family is Family.ARGMAX:
        return None
    if any(isinstance(d, str) and d not in case.dims for d in declared):
        return None
    return shape_of(declared, case.dims)


def _shapes_of(declared: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The output shapes a declared shape accepts: a declared scalar (`output = []`) also as shape (1,), which a
    0-d output (a summed loss) has by the time it is judged (outputs cross between processes as contiguous
    arrays of at least one dim, and both sides' 0-d results arrive so)."""
    return (declared, (1,)) if declared == () else (declared,)


def _unwritten(outputs: tuple[np.ndarray, ...], reference: tuple[np.ndarray, ...]) -> int:
    """Elements that are NaN (the pre-fill) where the reference is not, in float outputs of matching shape."""
    count = 0
    for y, r in zip(outputs, reference, strict=False):
        y, r = np.asarray(y), np.asarray(r)
        if y.shape == r.shape and dtypes.is_float_dtype(y.dtype) and r.dtype.kind == "f":
            count += int((np.isnan(y.astype(np.float64)) & ~np.isnan(r)).sum())
    return count


def _compare_one(
    op: OpSpec,
    case: CaseContext,
    run: CaseRun,
    y: np.ndarray,
    r: np.ndarray,
    output_dtype: str,
    validation: Validation,
    position: int = 0,
) -> tuple[ErrorStats, list[Finding]]:
    comparator = comparator_for(op, case.dtype)
    if comparator is Comparator.EXACT:
        return compare_exact(y, r, output_dtype)
    if comparator is Comparator.ALLCLOSE:
        tolerance = op.error_model.tolerance_for(case.dtype)
        atol, rtol = (
            (tolerance.atol, tolerance.rtol) if tolerance else DEFAULT_TOLERANCES.get(output_dtype, (0, 0))
        )
        allowed = allclose_allowance(r, atol, rtol)
    elif comparator is Comparator.BASELINE_RELATIVE:
        naive = case.naive_output
        if naive is None:
            raise ValueError("baseline-relative comparison without a naive output")
        naive_error = np.abs(np.asarray(naive, dtype=np.float64) - r)
        naive_error = np.where(np.isfinite(naive_error), naive_error, 0.0)
        noise = bounds.floor_term(op, output_dtype) + dtypes.info(output_dtype).unit_roundoff * np.abs(r)
        allowed = op.error_model.naive_factor * float(naive_error.max(initial=0.0)) + 2.0 * noise
    elif op.error_model.family is Family.CUSTOM and case.error_scale is not None:
        scale, n = case.error_scale(
            inputs=dict(case.inputs), reference=r, dims=dict(case.dims), kwargs=dict(case.kwargs)
        )
        allowed = bounds.custom_allowance(
            op, r, np.asarray(scale, dtype=np.float64), int(n), case.dtype, output_dtype
        )
    else:
        allowed = _family_allowance(op, case, run, r, output_dtype)
    explain = None
    if comparator is Comparator.BOUND:
        allowed, explain = _with_empirical(op, case, run, r, allowed, position)
    stats, findings = compare(y, r, allowed, comparator, output_dtype)
    low = case.low_outputs
    if low is not None and len(low) > position and any(f.kind is FailureKind.NONFINITE for f in findings):
        working = precision.working_precision(op, case.dtype) or "float32"
        why = overflow.note(y, r, np.asarray(low[position]), working, case.dtype)
        findings = [
            Finding(f.kind, f.message + why) if f.kind is FailureKind.NONFINITE else f for f in findings
        ]
    if explain is not None and stats.worst_index is not None:
        findings = [
            Finding(f.kind, f.message + explain(stats.worst_index)) if f.kind is FailureKind.MISMATCH else f
            for f in findings
        ]
    mismatched = any(f.kind is FailureKind.MISMATCH for f in findings)
    said = ""
    if comparator is Comparator.BOUND and mismatched:
        said = _bound_words(op, case, y, r, output_dtype)
    elif comparator is Comparator.ALLCLOSE and mismatched:
        said = tolerance_hint.note(op)
    if said:
        findings = [
            Finding(f.kind, f.message + said) if f.kind is FailureKind.MISMATCH else f for f in findings
        ]
    return stats, findings


def _bound_words(op: OpSpec, case: CaseContext, y: np.ndarray, r: np.ndarray, output_dtype: str) -> str:
    """What the forward bound's terms (forward_terms.FORWARD_TERMS) say about a failed output."""
    bound = bounds.BoundInputs(r, _float_inputs(case), None, case.dims, case.kwargs, output_dtype, case.dtype)
    term_case = bounds.forward_case(op, bound, words_only=True, output=y, first_dims=_dims_like(op, case, r))
    return words_of(FORWARD_TERMS, term_case)


def _family_allowance(
    op: OpSpec, case: CaseContext, run: CaseRun, r: np.ndarray, output_dtype: str
) -> np.ndarray:
    """The family's a-priori bound (oracle/bounds.py), with the reference on |x| as its scale where asked."""
    reference_abs = None
    if (
        run.reference_abs is not None
        and run.reference_abs.status is CallStatus.OK
        and run.reference_abs.outputs
    ):
        reference_abs = np.asarray(run.reference_abs.outputs[0], dtype=np.float64)
        if reference_abs.shape != r.shape:
            reference_abs = None
    return bounds.allowed_error(
        op,
        bounds.BoundInputs(
            r,
            _float_inputs(case),
            reference_abs,
            case.dims,
            case.kwargs,
            output_dtype,
            case.dtype,
            case.correlated,
            case.dot_input_roundoff,
            run.linear_inputs,
        ),
    )


def _judge_argmax(
    op: OpSpec, case: CaseContext, run: CaseRun, chosen: np.ndarray, scores: np.ndarray, position: int
) -> tuple[ErrorStats, list[Finding]]:
    """family = "argmax": the scores' allowance (family bound and the reference's measured conditioning, the scores
    never being stored, so judged in the working precision), then the choice (oracle/argmax.py)."""
    working = precision.working_precision(op, case.dtype) or case.dtype
    if precision.error_scale(op, case.dtype) != 1.0:  # a float64 case, measured in float32: judged in float64
        working = case.dtype
    if not dtypes.info(working).is_float:
        working = "float32"
    scores = np.asarray(scores, dtype=np.float64)
    allowed = _family_allowance(op, case, run, scores, working)
    allowed, _ = _with_empirical(op, case, run, scores, allowed, position)
    return compare_argmax(chosen, scores, allowed, argmax_axis(case.kwargs))


def _dims_like(op: OpSpec, case: CaseContext, r: np.ndarray) -> tuple[str | int, ...] | None:
    """The dim names of the first input when the output is shaped like it (an elementwise op's), else None."""
    first = next(iter(op.shapes.inputs), None)
    if first is None or first.name not in case.inputs or np.asarray(case.inputs[first.name]).shape != r.shape:
        return None
    return first.dims


def _float_inputs(case: CaseContext) -> dict[str, np.ndarray]:
    return {
        name: np.asarray(x).astype(np.float64)
        for name, x in case.inputs.items()
        if dtypes.is_float_dtype(np.asarray(x).dtype)
    }


def _with_empirical(
    op: OpSpec, case: CaseContext, run: CaseRun, r: np.ndarray, allowed: np.ndarray, position: int
) -> tuple[np.ndarray, Callable[[tuple[int, ...]], str] | None]:
    """The family's allowance, raised to c times the error model of the reference's change on inputs moved by
    one working-precision rounding where that is larger (oracle/conditioning.py); and what to say about it at the
    worst element."""
    moved = [outputs[position] for outputs in case.moved_outputs if len(outputs) > position]
    if not moved:
        return allowed, None
    magnitude = precision.input_magnitude(op, _float_inputs(case), tuple(r.shape))
    working = precision.working_precision(op, case.dtype) or "float32"
    found = conditioning.model(r, moved, magnitude, working)
    if found is None:
        return allowed, None
    term, scale = found
    factor = precision.error_scale(op, case.dtype)
    term = term * factor
    c = op.error_model.bound_c
    family = np.broadcast_to(np.asarray(allowed, dtype=np.float64), r.shape)
    scaled = f" × {factor:.3g} for {case.dtype}" if factor != 1.0 else ""
    name = (op.error_model.family or Family.ELEMENTWISE).value

    def explain(index: tuple[int, ...]) -> str:
        return (
            f"; allowed = {c:g} × max({name} bound {family[index] / c:.3g}, {precision.ROUNDINGS:g} × the "
            f"reference's change on inputs moved by one {working} rounding{scaled} {term[index]:.3g} "
            f"[scale: {scale}])"
        )

    return np.maximum(family, c * precision.ROUNDINGS * term), explain


def _with_bias(stats: ErrorStats | None, z: float) -> ErrorStats | None:
    return None if stats is None else dataclasses.replace(stats, bias_z=z)


def _determinism(outputs: tuple[np.ndarray, ...], rerun: CallResult) -> list[Finding]:
    if rerun.status is not CallStatus.OK:
        return [
            Finding(
                STATUS_KIND.get(rerun.status, FailureKind.RAISED),
                f"the second run (determinism check) failed: {rerun.message}",
            )
        ]
    for first, second in zip(outputs, rerun.outputs, strict=False):
        a, b = np.asarray(first), np.asarray(second)
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            differ = int((a != b).sum()) if a.shape == b.shape else a.size
            return [
                Finding(
                    FailureKind.NONDETERMINISTIC,
                    f"re-running the op on identical inputs changed {differ} elements (the op is declared "
                    "deterministic)",
                )
            ]
    return []


def _call_failed(result: CallResult, who: str) -> CaseVerdict:
    kind = STATUS_KIND.get(result.status, FailureKind.RAISED)
    text = f"the {who} {result.status.words}: {result.message}".rstrip(": ")
    if result.stderr_tail:
        text += f"\nstderr: {result.stderr_tail[-1500:]}"
    return CaseVerdict(False, (Finding(kind, text),), None)
