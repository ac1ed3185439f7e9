"""What the GPU-faithful Triton layer saw, decided into a case's verdict and notes: a case Triton's interpreter
cannot compute as the GPU does is skipped (or failed, where the layer caught the kernel's memory accesses), and
otherwise its findings (out of bounds, races, a tampered layer), outputs that depend on masked-off lanes Triton leaves
undefined (`[ops.triton] undefined_masked_lanes`), where a mismatch's worst element came from what the layer
changed (masked lanes, program order, TF32), and the notes a case carries to its op (triton_cpu/report.py,
backends/layer_probes.py)."""

from __future__ import annotations

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.calls import CaseReport, CaseRun
from gpuemu_ci.config.model import Family, MaskedLanes, OpSpec
from gpuemu_ci.fuzz.case import CaseInputs
from gpuemu_ci.oracle.case_report import describe_case
from gpuemu_ci.oracle.model import CaseVerdict, ErrorStats, Finding
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.triton_cpu.report import MASKED_LANES, PROGRAM_ORDER, TF32, Decided, TritonReport

TF32_FAMILIES = (Family.MATMUL, Family.ATTENTION)  # bounds that allow for TF32 inputs (oracle/bounds.py)
_ATOMIC = " (an atomic's result)"  # how layer.py marks the site of an atomic's masked-off lanes


def layer_report(
    case: CaseInputs,
    digest: str | None,
    interpreter: str | None,
    interpreter_types: tuple[str, ...],
    seen: TritonReport | None,
    call_s: float,
) -> CaseReport | None:
    """The report of a case the oracle does not judge by its numbers, or None to judge it: the Triton layer's own
    error (errored: the tool's fault); a case Triton's interpreter computes on bit patterns or cannot run as the
    GPU does (`interpreter_types`: skipped, its numbers are the interpreter's, not the kernel's), unless the layer
    caught the kernel's memory accesses out of bounds or racing (failed: the kernel's whatever the numbers; the
    caller snapshots it)."""
    described = describe_case(case, digest)
    if seen is not None and seen.internal_error:
        return CaseReport(
            outcome="errored",
            **described,
            interpreter=interpreter,
            kind="raised",
            message=seen.internal_error,
            call_s=call_s,
        )
    if not interpreter or not interpreter_types:
        return None
    if seen is not None and seen.findings:
        return CaseReport(
            outcome="failed",
            **described,
            interpreter=interpreter,
            kind=seen.findings[0][0],
            message="\n".join(message for _, message in seen.findings),
            findings=seen.findings,
            call_s=call_s,
        )
    return CaseReport(
        outcome="skipped",
        **described,
        interpreter=interpreter,
        interpreter_types=interpreter_types,
        message=interpreter_reason(interpreter_types),
        call_s=call_s,
    )


def interpreter_reason(types: tuple[str, ...] | set[str]) -> str:
    """Why Triton's interpreter could not compute the case as the GPU does, in words: what the layer could not
    run (with its kernel and line), or the types the plain interpreter computes on bit patterns."""
    gaps = sorted(t for t in types if " at " in t)  # the layer's: what, in which kernel, at which line
    kinds = sorted(t for t in types if " at " not in t)
    said = []
    if gaps:
        said.append(f"Triton's interpreter cannot run {'; '.join(gaps)}")
    if kinds:
        said.append(f"Triton's interpreter computes {', '.join(kinds)} on bit patterns")
    return "; ".join(said) or "Triton's interpreter computes bfloat16 on bit patterns"


def masked_lanes_message(sites: tuple[str, ...]) -> str:
    """`k` at f.py:12 (in k) loads masked lanes without `other`, which Triton leaves undefined; ..."""
    loads = [s for s in sites if not s.endswith(_ATOMIC)]
    atomics = [s.removesuffix(_ATOMIC) for s in sites if s.endswith(_ATOMIC)]
    said = []
    if loads:
        said.append(f"{'; '.join(loads)} load{'s' if len(loads) == 1 else ''} masked lanes without `other`")
    if atomics:
        said.append(f"{'; '.join(atomics)} use{'s' if len(atomics) == 1 else ''} an atomic's result at "
                    "masked-off lanes")  # fmt: skip
    read = (
        "NVIDIA and AMD read 0 today"
        if not atomics
        else (
            "NVIDIA reads 0 today, as AMD does for loads (an atomic's masked-off result is undefined there)"
        )
    )
    return (
        f"{' and '.join(said)}, which Triton leaves undefined; {read}, the case was judged on that 0, and the "
        "outputs depend on it. Give the load an `other` (the identity of what follows: 0.0 before a sum, "
        "-inf before a max) to make the kernel portable"
    )


def dot_note(site: str, family: Family | None) -> str:
    """The note for an fp32 `tl.dot` left at its default input precision (TF32 on NVIDIA), and whether the op's
    family bound allows for it."""
    allowed = "allows" if family in TF32_FAMILIES else "does not allow"
    bound = f"the {family.value} bound" if family is not None else "the bound"
    return (
        f"{site}: `tl.dot` on fp32 inputs leaves input_precision at its default, TF32 on NVIDIA GPUs (each "
        f"input rounded to 10 mantissa bits; AMD's default is ieee), which {bound} {allowed} for. Write "
        'input_precision="tf32" to say so, or "ieee" for full fp32'
    )


def case_notes(op: OpSpec, seen: TritonReport) -> tuple[str, ...]:
    """The warnings a case carries to its op: outputs that depend on undefined masked lanes (`warn`, and the
    `poison` check), fp32 dots left at their default precision, interpreter faults worked around. Worded
    without the case's figures, so that an op's cases say each once."""
    notes: list[str] = []
    lanes = seen.decided_by(MASKED_LANES)
    if lanes is not None and op.execution.triton_masked_lanes in (MaskedLanes.WARN, MaskedLanes.POISON):
        notes.append(masked_lanes_message(lanes.sites))
    notes.extend(dot_note(site, op.error_model.family) for site in seen.dot_defaulted)
    notes.extend(seen.notes)
    return tuple(dict.fromkeys(notes))


def with_findings(op: OpSpec, verdict: CaseVerdict, seen: TritonReport, run: CaseRun) -> CaseVerdict:
    """The verdict with what the layer found first (an out-of-bounds access stopped the kernel: the op's
    `raised` is that), outputs that depend on undefined masked lanes where the config makes that an error,
    and, on a wrong answer, what decided its worst element."""
    findings = [Finding(FailureKind(kind), message) for kind, message in seen.findings]
    stopped = any(f.kind is FailureKind.OUT_OF_BOUNDS for f in findings)
    lanes = seen.decided_by(MASKED_LANES)
    if lanes is not None and op.execution.triton_masked_lanes is MaskedLanes.ERROR:
        findings.append(
            Finding(
                FailureKind.UNDEFINED_MASKED_LANES,
                f'{masked_lanes_message(lanes.sites)} ([ops.triton] undefined_masked_lanes = "error")',
            )
        )
    leaked = _nonfinite_where_finite(run)
    for finding in verdict.findings:
        if stopped and finding.kind is FailureKind.RAISED:
            continue
        if finding.kind in (FailureKind.NONFINITE, FailureKind.MISMATCH):
            finding = Finding(finding.kind, finding.message + _hints(op, seen, verdict.stats, run, leaked))
        findings.append(finding)
    if not findings:
        return verdict
    return CaseVerdict(False, tuple(findings), verdict.stats)


def _hints(op: OpSpec, seen: TritonReport, stats: ErrorStats | None, run: CaseRun, leaked: bool) -> str:
    """Where the worst element came from what the layer changed, in a sentence each."""
    said = []
    worst = None if stats is None else stats.worst_index
    lanes = seen.decided_by(MASKED_LANES)
    poisoned = seen.masked_lanes == "poison"
    if lanes is not None and (_at(lanes, run, worst) or (poisoned and leaked)):
        read = (
            'NaN/+Inf/-Inf here (undefined_masked_lanes = "poison")'
            if poisoned
            else ("0 here, as NVIDIA and AMD read them (Triton leaves them undefined)")
        )
        said.append(
            f"Its worst element depends on masked-off lanes of loads without `other` at "
            f"{'; '.join(lanes.sites)}, which read {read}: give the load the identity of what follows as `other`"
        )
    elif poisoned and leaked and seen.undefined_lanes:
        said.append(
            f"Masked-off lanes of loads without `other` read NaN/+Inf/-Inf here (undefined_masked_lanes = "
            f'"poison"), at {"; ".join(seen.undefined_lanes)}: a non-finite output where the reference is '
            "finite is how a masked lane that reached the output shows"
        )
    order = seen.decided_by(PROGRAM_ORDER)
    if order is not None and _at(order, run, worst):
        said.append(
            "Its worst element depends on the order the launch's programs ran in (a permutation drawn from the "
            "case seed here; any order on a GPU): the kernels' atomics combine in that order"
        )
    tf32 = seen.decided_by(TF32)
    if tf32 is not None and _at(tf32, run, worst) and op.error_model.family not in TF32_FAMILIES:
        family = op.error_model.family.value if op.error_model.family else "op's"
        said.append(
            f"Its worst element depends on TF32 rounding: the fp32 `tl.dot` at {'; '.join(tf32.sites)} ran in "
            f"TF32 (inputs rounded to 10 mantissa bits), which the {family} bound does not allow for: pass "
            'input_precision="ieee"'
        )
    return "".join(f"\n{s}" for s in said)


def _at(decided: Decided, run: CaseRun, worst: tuple[int, ...] | None) -> bool:
    """Whether the probe changed the worst element (of an output it fits; any changed element where the
    worst is not known)."""
    outputs = run.op.outputs
    if worst is None:
        return decided.any
    for position, y in enumerate(outputs):
        shape = np.shape(y)
        if len(shape) == len(worst) and all(0 <= i < n for i, n in zip(worst, shape, strict=True)):
            index = int(np.ravel_multi_index(worst, shape)) if shape else 0
            if decided.at(position, int(np.prod(shape, dtype=np.int64)), index):
                return True
    return False


def _nonfinite_where_finite(run: CaseRun) -> bool:
    """The op's outputs hold NaN or Inf where the reference's are finite (poisoned lanes show that way)."""
    for y, r in zip(run.op.outputs, run.reference.outputs, strict=False):
        y, r = np.asarray(y), np.asarray(r)
        same = y.shape == r.shape and dtypes.is_float_dtype(y.dtype) and r.dtype.kind == "f"
        if same and np.any(~np.isfinite(y.astype(np.float64)) & np.isfinite(r)):
            return True
    return False
