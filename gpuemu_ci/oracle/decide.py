"""One case decided: its outputs judged (oracle/judge.py), judged again with measurements of the reference where
the family bound failed or an output is non-finite, its gradients folded in (oracle/case_report.py), and what
the Triton layer found (oracle/triton_findings.py). The measurements run user code (the reference), so the judge
side (backends/judge_side.py) passes them as callables, as it does a gradient's `low`, `probe` and `working`:
the oracle decides whether to call them and what they mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gpuemu_ci.calls import CaseRun
from gpuemu_ci.config.model import OpSpec, Validation
from gpuemu_ci.oracle import precision, triton_findings
from gpuemu_ci.oracle.case_report import with_gradients
from gpuemu_ci.oracle.gradients import GradientCase
from gpuemu_ci.oracle.judge import CaseContext, judge
from gpuemu_ci.oracle.model import CaseVerdict, ErrorStats
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.triton_cpu.report import TritonReport

Outputs = tuple[np.ndarray, ...]
GradientFigures = tuple[tuple[str, ErrorStats], ...]


@dataclass(frozen=True)
class Measurements:
    """What the oracle may ask of the reference when a case's first verdict needs it (callables: they run the
    reference, user code, where the judge side contains it)."""

    # The reference's outputs on the inputs cast to the working precision (None where it failed there): what a
    # non-finite output means (oracle/overflow.py), never an allowance.
    working: Callable[[], Outputs | None]
    # The float64 reference on the inputs moved by one working-precision rounding, per draw that ran
    # (oracle/conditioning.py): the reference's own sensitivity, which widens a failed family bound.
    moved: Callable[[], tuple[Outputs, ...]]


@dataclass(frozen=True)
class Backward:
    """A `backward = true` case's gradients: the reference's (with its own callables) and the op's."""

    case: GradientCase
    grads: Outputs
    rerun: Outputs | None = None


def decide(
    op: OpSpec,
    context: CaseContext,
    run: CaseRun,
    validation: Validation,
    measurements: Measurements,
    backward: Backward | None = None,
    triton: TritonReport | None = None,
) -> tuple[CaseVerdict, GradientFigures]:
    """The case's verdict and its per-gradient figures. A case within the family bound passes without any
    measurement; one that fails it is judged again with the reference's change on moved inputs, and where an
    output is non-finite, with what the reference's run in the working precision says of it."""
    verdict = judge(op, context, run, validation)
    failed_bound = precision.worth_measuring(op, context.dtype, verdict, FailureKind.MISMATCH)
    nonfinite = precision.worth_measuring(op, context.dtype, verdict, FailureKind.NONFINITE)
    if failed_bound or nonfinite:
        measured = replace(
            context,
            low_outputs=measurements.working() if nonfinite else None,
            moved_outputs=measurements.moved() if failed_bound else (),
        )
        verdict = judge(op, measured, run, validation)
    figures: GradientFigures = ()
    if backward is not None:
        verdict, figures = with_gradients(
            op, verdict, backward.case, backward.grads, backward.rerun, validation
        )
    if triton is not None:
        verdict = triton_findings.with_findings(op, verdict, triton, run)
    return verdict, figures
