"""Calibration: the worst headroom per op, dtype and shape class, from correct runs of the op.

Headroom is error / allowed; the default bound keeps correct kernels at or below 1/c of failing. Percentile
atol/rtol are offered only on explicit request: they are quantiles of the errors seen at these shapes, not
bounds, and do not transfer to other shapes or magnitudes (research oracles.md §4.4).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.fuzz.case import CaseSkipped
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.results.base import json_float


@dataclass(frozen=True)
class CalibrationRow:
    """One op x dtype x shape class."""

    op: str
    dtype: str
    shape_class: str  # "tile-multiple dims" | "boundary dims"
    cases: int
    comparator: str
    worst_headroom: float | None
    percentile: float | None = None
    atol: float | None = None  # the `percentile` of the absolute errors (opt-in; not a bound)
    rtol: float | None = None  # ... of the errors relative to max |reference|
    meaningless: str | None = None  # why atol/rtol would accept nearly anything (then they are not offered)


@dataclass(frozen=True)
class Calibration:
    rows: tuple[CalibrationRow, ...]
    unusable: int  # cases that failed or could not be judged: calibrate on a correct kernel


def calibrate(
    session: Session, ops: tuple[OpSpec, ...], iterations: int, percentile: float | None = None
) -> Calibration:
    """Runs `iterations` cases per dtype of each op (every dtype it declares) and measures the headroom."""
    rows: list[CalibrationRow] = []
    unusable = 0
    for op in ops:
        groups: dict[tuple[str, str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
        for ref in session.plan(op, op.dtypes, iterations):
            try:
                outcome = session.run_case(op, ref)
            except CaseSkipped:  # a large case the machine cannot hold
                continue
            if outcome.verdict is None or outcome.verdict.stats is None:
                unusable += 1
                continue
            if not outcome.verdict.passed:
                unusable += 1
            stats = outcome.verdict.stats
            shape_class = f"{outcome.inputs.stratum.size_class.value} dims"
            reference = outcome.run.reference.outputs[0] if outcome.run.reference.outputs else None
            rel, scale = 0.0, 0.0
            if reference is not None and stats.max_abs_error is not None:
                finite = np.abs(reference[np.isfinite(reference)]) if np.size(reference) else np.empty(0)
                scale = float(finite.max()) if finite.size else 0.0
                rel = stats.max_abs_error / scale if scale > 0 else 0.0
            groups[(outcome.inputs.dtype, shape_class, stats.comparator.value)].append(
                (stats.headroom or 0.0, stats.max_abs_error or 0.0, rel, scale)
            )
        for (dtype, shape_class, comparator), values in sorted(groups.items()):
            atol = rtol = None
            meaningless = None
            if percentile is not None:
                atol = float(np.percentile([v[1] for v in values], percentile))
                rtol = float(np.percentile([v[2] for v in values], percentile))
                meaningless = _meaningless(atol, rtol, float(np.median([v[3] for v in values])))
            rows.append(
                CalibrationRow(
                    op=op.name,
                    dtype=dtype,
                    shape_class=shape_class,
                    cases=len(values),
                    comparator=comparator,
                    worst_headroom=json_float(max(v[0] for v in values)),
                    percentile=percentile,
                    atol=json_float(atol),
                    rtol=json_float(rtol),
                    meaningless=meaningless,
                )
            )
    return Calibration(tuple(rows), unusable)


# A tolerance that allows errors this large next to the values themselves accepts nearly any output.
MEANINGLESS_FRACTION = 0.25


def _meaningless(atol: float, rtol: float, magnitude: float) -> str | None:
    if rtol >= MEANINGLESS_FRACTION:
        return f"rtol {rtol:.3g}: errors as large as the outputs themselves"
    if magnitude > 0 and atol >= MEANINGLESS_FRACTION * magnitude:
        return f"atol {atol:.3g} against outputs of typical magnitude {magnitude:.3g}"
    return None
