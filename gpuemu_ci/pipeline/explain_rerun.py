"""The explain re-run of a recorded failure: a failing case whose op ran Triton kernels under the layer runs once
more with `CaseSpec.explain`, where the op side logs where each store wrote and runs the explain probes
(backends/explain_probes.py), and the failure record takes that run's pattern, error map and "where". Only the
recorded failures pay for it; a passing case never logs a store.

The re-run explains the recorded failure only when it failed the same way (same kind, same failing output, same
worst element): a kernel whose outputs change from run to run keeps its first failure, and says so.

A failure whose re-run found nothing that made it (only where its worst element was stored) borrows what the
re-run of another failure of the op, of the same output, found (`borrowed`), saying which case it comes from: the
op's worst failure may be one whose error the kernel's own rounding explains at that case (a bfloat16 sum), where a
float32 case of the same op shows the line that made the error large."""

from __future__ import annotations

import msgspec

from gpuemu_ci.backends.interface import CaseSpec, ExplainFocus
from gpuemu_ci.calls import CaseReport
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.results.model import FailureKind

NOT_SAME = "the re-run did not fail the same way"
# Failures without outputs to explain: the re-run would only repeat them.
_NOTHING_TO_EXPLAIN = {
    FailureKind.CRASHED.value,
    FailureKind.TIMEOUT.value,
    FailureKind.OOM.value,
    FailureKind.RAISED.value,
    FailureKind.BAD_OUTPUT.value,
    FailureKind.SHAPE.value,
    FailureKind.DTYPE.value,
    FailureKind.TAMPERED.value,
}


def wants_explaining(report: CaseReport) -> bool:
    """Whether a recorded failure gets an explain re-run: a wrong output (not a crash or timeout, which the
    re-run would only repeat) of an op whose Triton kernels ran under the layer."""
    explainable = report.kind is not None and report.kind not in _NOTHING_TO_EXPLAIN
    ran_triton = bool(
        report.kernels or report.triton_launches
    )  # a one-program launch counts in neither alone
    return report.outcome == "failed" and ran_triton and explainable


def explain_spec(ref: CaseRef, failure: CaseReport) -> CaseSpec:
    """The case again, from its seed or its corpus snapshot, explained; its inputs' snapshot is already
    written. Its shadow follows the programs that stored the failure's worst element and the elements over their
    allowance, in that order."""
    focus = ExplainFocus(
        worst=tuple(failure.worst_index) if failure.worst_index is not None else None,
        over=failure.over,
        shape=failure.over_shape,
        gradient=failure.output is not None,
        over_mask=failure.over_mask,
    )
    return CaseSpec(
        ref.seed, ref.index, snapshot=ref.snapshot, snapshot_wanted=False, explain=True, explain_focus=focus
    )


def with_explanation(original: CaseReport, rerun: CaseReport | None, why_not: str = "") -> CaseReport:
    """The recorded failure with what its explain re-run found, when it failed the same way; else the failure
    as it was, its "where" saying why it is not explained (`why_not`: the re-run did not finish)."""
    if rerun is None:
        return msgspec.structs.replace(original, where=f"where not recorded: {why_not}")
    same = (
        rerun.outcome == original.outcome
        and rerun.kind == original.kind
        and rerun.output == original.output
        and rerun.worst_index == original.worst_index
    )
    if not same:
        return msgspec.structs.replace(original, where=f"{NOT_SAME} ({_how(rerun)})")
    return msgspec.structs.replace(
        original,
        pattern=rerun.pattern,
        error_map=rerun.error_map,
        error_map_note=rerun.error_map_note,
        where=rerun.where,
        causes=rerun.causes,
    )


def borrowed(failing: list[tuple[CaseRef, CaseReport]]) -> list[tuple[CaseRef, CaseReport]]:
    """The op's failures, each explained one without a cause of its own given the first cause the explain re-run
    of another failure of the same output found, with that case's index and dtype."""
    lenders = [(ref, report) for ref, report in failing if report.causes]
    shared: list[tuple[CaseRef, CaseReport]] = []
    for ref, report in failing:
        wants = not report.causes and report.where and not report.where.startswith(NOT_SAME)
        lender = next(((o, f) for o, f in lenders if f.output == report.output), None) if wants else None
        if lender is not None:
            other, found = lender
            said = f"the explain re-run of case {other.index} of this op ({found.dtype}) found: {found.causes[0]}"
            report = msgspec.structs.replace(report, where=f"{report.where}; {said}")
        shared.append((ref, report))
    return shared


def _how(rerun: CaseReport) -> str:
    if rerun.outcome == "passed":
        return "it passed: the op's outputs change from run to run"
    if rerun.outcome == "failed" and rerun.worst_index is not None:
        return f"it failed with its worst element at {tuple(rerun.worst_index)}: the outputs change from run to run"
    return f"it {rerun.outcome}: {rerun.kind or ''} {rerun.message or ''}".strip()
