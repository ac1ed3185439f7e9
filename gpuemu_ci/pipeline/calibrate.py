"""Calibration: the worst headroom per op, dtype and shape class, from correct runs of the op.

Headroom is error / allowed; the default bound keeps correct kernels at or below 1/c of failing. Percentile
atol/rtol are offered only on explicit request: they are quantiles of the errors seen at these shapes, not
bounds, and do not transfer to other shapes or magnitudes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gpuemu_ci.backends.interface import CaseSpec
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.errors import InputsDiffer
from gpuemu_ci.oracle import declared_intermediates
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.results.base import json_float


@dataclass(frozen=True)
class CalibrationRow:
    """One op x dtype x shape class."""

    op: str
    dtype: str
    shape_class: str  # "<size class> dims": typical, boundary, tile, large
    cases: int
    comparator: str
    worst_headroom: float | None
    percentile: float | None = None
    atol: float | None = None  # the `percentile` of the absolute errors (opt-in; not a bound)
    rtol: float | None = None  # ... of the errors relative to max |reference|
    meaningless: str | None = None  # why atol/rtol would accept nearly anything (then they are not offered)


@dataclass(frozen=True)
class Calibration:
    """What `gpuemu-ci calibrate` measured: one row per op and dtype, how many cases could not be used, what
    failures say about the reference, and what was not measured here and why."""

    rows: tuple[CalibrationRow, ...]
    unusable: int  # cases that failed or could not be judged: calibrate on a correct kernel
    notes: tuple[str, ...] = ()  # what the failures say about the reference (one per op)
    skipped: tuple[str, ...] = ()  # what was not measured here, with why: never part of a calibration


def calibrate(
    session: Session, ops: tuple[OpSpec, ...], iterations: int, percentile: float | None = None
) -> Calibration:
    """Runs `iterations` cases per dtype of each op (every dtype it declares) and measures the headroom."""
    rows: list[CalibrationRow] = []
    unusable = 0
    notes: list[str] = []
    skipped: dict[str, int] = defaultdict(int)
    for op in ops:
        if session.lacks_gpu(op):
            skipped[f"{op.name}: needs a GPU and none was found"] += 1
            continue
        groups: dict[tuple[str, str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
        task = session.task(op)
        futures = [
            session.pool.submit(task, CaseSpec(ref.seed, ref.index, snapshot_wanted=False))
            for ref in session.plan(op, op.dtypes, iterations)
        ]
        for future in futures:  # in plan order, whichever worker ran them
            report = future.result()
            if report.outcome == "inputs_differ":
                raise InputsDiffer(
                    f"{op.name}/{report.dtype}", 0, report.op_inputs_digest or "", report.inputs_digest or ""
                )
            if (
                report.outcome == "skipped"
            ):  # a large case the machine cannot hold, bf16 in Triton's interpreter
                skipped[f"{op.name} [{report.dtype}]: {report.message}"] += 1
                continue
            if report.outcome in ("errored", "unloadable") or report.comparator is None:
                unusable += 1
                continue
            if report.outcome != "passed":
                unusable += 1
                note = _reference_note(op.name, report.message)
                if note and note not in notes:
                    notes.append(note)
            shape_class = f"{report.size_class} dims"
            scale = report.reference_scale or 0.0
            rel = report.max_abs_error / scale if scale > 0 and report.max_abs_error is not None else 0.0
            groups[(report.dtype, shape_class, report.comparator)].append(
                (report.headroom or 0.0, report.max_abs_error or 0.0, rel, scale)
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
    said = tuple(f"{why} ({count} case{'s' if count != 1 else ''})" for why, count in skipped.items())
    return Calibration(tuple(rows), unusable, tuple(notes), said)


def _reference_note(op: str, message: str) -> str | None:
    """What a failure suggests the op's config lacks, said once per op: an intermediate the op computes from
    positions (oracle/declared_intermediates.py), which no measurement of the reference can show."""
    where = message.find(declared_intermediates.SUGGESTION)
    if where < 0:
        return None
    hint = message[where:].split("\n", 1)[0].rstrip(";")
    return f"{op}: {hint}"


# A tolerance that allows errors this large next to the values themselves accepts nearly any output.
MEANINGLESS_FRACTION = 0.25


def _meaningless(atol: float, rtol: float, magnitude: float) -> str | None:
    if rtol >= MEANINGLESS_FRACTION:
        return f"rtol {rtol:.3g}: errors as large as the outputs themselves"
    if magnitude > 0 and atol >= MEANINGLESS_FRACTION * magnitude:
        return f"atol {atol:.3g} against outputs of typical magnitude {magnitude:.3g}"
    return None
