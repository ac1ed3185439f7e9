"""The judging half of a case: which statistical rules apply to it, its gradients folded into its verdict,
and the CaseReport that says what was judged (or why nothing could be). The judge side (backends/judge_side.py)
calls user code and hands the results here; nothing here runs user code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuemu_ci.calls import CallResult, CaseReport, CaseRun, GradientFigure
from gpuemu_ci.config.model import Layout, OpSpec, Validation
from gpuemu_ci.fuzz.case import CaseInputs
from gpuemu_ci.oracle import bounds
from gpuemu_ci.oracle.gradients import GradientCase, judge_gradients
from gpuemu_ci.oracle.model import CaseVerdict, ErrorStats
from gpuemu_ci.plan.model import CaseStratum, ValueMode
from gpuemu_ci.results.base import json_float
from gpuemu_ci.results.model import FailureKind

Gradients = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class StatisticsRules:
    """Which assumptions about rounding errors hold for a case; the forward outputs and the gradients alike."""

    # The bias z-test counts rounding errors as independent samples: regular values, no input repeated along
    # a dim (a broadcast repeats values, so errors repeat with them).
    bias_test: bool
    # The bound assumes errors that grow like sqrt(n) (g(n) = n for squares): sorted values, real data
    # (captured) and addends repeated along the reduction (a broadcast there) add errors that do not cancel.
    correlated: bool


def statistics_rules(op: OpSpec, case: CaseInputs) -> StatisticsRules:
    """The one home of these rules. (The gradients once took only the value-mode half of each, with no reason
    given: a broadcast input repeats values in the backward's sums as in the forward's, so both use all of it.)"""
    broadcast = {
        name: c.broadcast_dim
        for name, c in case.layouts.items()
        if c.layout is Layout.BROADCAST and c.broadcast_dim is not None
    }
    mode = case.stratum.mode
    return StatisticsRules(
        bias_test=mode is ValueMode.REGULAR and not broadcast,
        correlated=mode in (ValueMode.ASCENDING, ValueMode.CAPTURED)
        or bounds.constant_along_reduction(op, broadcast),
    )


def describe_case(case: CaseInputs, digest: str | None = None) -> dict[str, Any]:
    """What results.json records about a case besides its verdict (`digest`: its inputs_digest)."""
    described = case.describe()
    return {
        "inputs_digest": digest,
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


def with_gradients(
    op: OpSpec,
    verdict: CaseVerdict,
    case: GradientCase,
    grads: Gradients,
    rerun: Gradients | None,
    validation: Validation,
) -> tuple[CaseVerdict, tuple[tuple[str, ErrorStats], ...]]:
    """The case's verdict with its gradients judged (oracle/gradients.py), and the per-gradient figures."""
    judged = judge_gradients(op, case, grads, rerun, validation)
    combined = CaseVerdict(
        verdict.passed and not judged.findings, (*verdict.findings, *judged.findings), verdict.stats
    )
    return combined, judged.stats


def gradient_figures(gradient_stats: tuple[tuple[str, ErrorStats], ...]) -> tuple[GradientFigure, ...]:
    """The per-gradient figures a CaseReport records: the rule that judged each gradient, its headroom and error."""
    return tuple(
        GradientFigure(
            of=name,
            rule=stats.comparator.value,
            headroom=json_float(stats.headroom) if stats.headroom is not None else None,
            max_abs_error=json_float(stats.max_abs_error) if stats.max_abs_error is not None else None,
            worst_index=tuple(int(i) for i in stats.worst_index) if stats.worst_index is not None else None,
            exceeded=stats.exceeded,
            total=stats.total,
        )
        for name, stats in gradient_stats
    )


def verdict_report(
    case: CaseInputs,
    run: CaseRun,
    verdict: CaseVerdict,
    *,
    digest: str | None,
    call_s: float,
    gradient_stats: tuple[tuple[str, ErrorStats], ...] = (),
) -> CaseReport:
    """A judged case: passed, or failed with its findings (its snapshot is the judge side's to add)."""
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
        **describe_case(case, digest),
        "interpreter": run.interpreter,
        "reference_scale": scale,
        "call_s": call_s,
        "gradients": gradient_figures(gradient_stats),
    }
    if verdict.passed:
        return CaseReport(outcome="passed", **base, **figures)
    primary = verdict.primary
    kind = primary.kind if primary else FailureKind.MISMATCH
    troubled = kind in (FailureKind.CRASHED, FailureKind.TIMEOUT, FailureKind.OOM, FailureKind.RAISED)
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
    )


def errored_report(
    case: CaseInputs, failed: CallResult, who: str, *, digest: str | None, call_s: float
) -> CaseReport:
    """A case that could not be judged: `who` (the reference, the naive implementation, the judge) failed."""
    kinds = {k.value for k in FailureKind}
    kind = failed.status.value if failed.status.value in kinds else FailureKind.RAISED.value
    return CaseReport(
        outcome="errored",
        **describe_case(case, digest),
        kind=kind,
        message=f"the {who} {failed.status.words}: {failed.message}",
        stderr_tail=failed.stderr_tail or None,
        call_s=call_s,
        party=who,
    )


def skipped_report(chosen: CaseStratum, reason: str) -> CaseReport:
    """A case this machine cannot hold: never a pass, never a failure."""
    return CaseReport(
        outcome="skipped",
        dtype=chosen.dtype,
        distribution=chosen.mode.value,
        size_class=chosen.size_class.value,
        message=reason,
    )


def inputs_differ_report(case: CaseInputs, judge_digest: str, op_digest: str) -> CaseReport:
    """The op's side and the judge's built different inputs from one seed: the tool's own error (exit 3),
    never a verdict about the op, which saw other inputs than the judge would compare against."""
    return CaseReport(
        outcome="inputs_differ",
        **describe_case(case, judge_digest),
        op_inputs_digest=op_digest,
        message=(
            f"the op's worker and the judge's built different inputs from seed {case.seed} (op side {op_digest}, "
            f"judge side {judge_digest}): no verdict is possible"
        ),
    )


__all__ = [
    "StatisticsRules",
    "describe_case",
    "errored_report",
    "gradient_figures",
    "inputs_differ_report",
    "skipped_report",
    "statistics_rules",
    "verdict_report",
    "with_gradients",
]
