"""Plain-text pieces every report format shares: numbers, shapes, the verdict sentence.

Everything here returns unescaped text; each renderer escapes it for its own syntax.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpuemu_ci.results.kernels import KernelStatus
from gpuemu_ci.results.model import DtypeResult, Failure, FailureGroup, Headline, OpResult, Results

ICONS = {Headline.PASSED: "✅", Headline.FAILED: "❌", Headline.ERROR: "⚠️", Headline.INCOMPLETE: "⏳"}


def number(value: float | int | None) -> str:
    """An int with thousands separators, a float with 3 significant digits, "n/a" for None."""
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.3g}"


def headroom(value: float | None) -> str:
    """Worst error over the allowed error: "0.137×" passes, "6.22e+03×" is far over."""
    return "n/a" if value is None else f"{value:.3g}×"


def dims(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """``x (3, 65), w (65,)``; "none" when empty."""
    if not shapes:
        return "none"
    return ", ".join(
        f"{name} ({', '.join(str(d) for d in shape)}{',' if len(shape) == 1 else ''})"
        for name, shape in shapes.items()
    )


def pairs(items: Mapping[str, Any], separator: str = ": ") -> str:
    """``x: strided, y: contiguous``; "none" when empty. Values that are not text are compact JSON."""
    if not items:
        return "none"
    return ", ".join(f"{k}{separator}{_compact(v)}" for k, v in items.items())


def kwargs(failure: Failure) -> str:
    """``axis=-1, eps=1e-06``; "none" when the op takes none."""
    return pairs(failure.kwargs, "=")


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def first_line(text: str | None, limit: int = 300) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters with an ellipsis."""
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis."""
    value = text or ""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def clip_utf8(text: str, max_bytes: int, note: str = "…", *, whole_lines: bool = False) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (never inside a character), ending with ``note`` when
    cut; ``whole_lines`` also drops the partial last line. GitHub counts comment, issue and summary budgets
    in bytes."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(note.encode("utf-8"))
    if room < 0:
        return ""
    kept = data[:room].decode("utf-8", errors="ignore")
    if whole_lines and "\n" in kept:
        kept = kept.rsplit("\n", 1)[0]
    return kept + note


def error_vs_allowed(failure: Failure) -> str:
    """What a failing case got wrong, in one phrase."""
    if failure.headroom is None:
        return failure.kind
    text = f"worst error {headroom(failure.headroom)} the allowed"
    if failure.exceeded is not None and failure.total:
        text += f" ({number(failure.exceeded)} of {number(failure.total)} elements over)"
    return text


def group_title(group: FailureGroup) -> str:
    """``softmax [float32]: 6 of 16 cases failed``"""
    return f"{group.op.name} [{group.dtype}]: {group_count(group)}"


def group_count(group: FailureGroup) -> str:
    """``6 of 16 cases failed`` (or ``could not be judged``)."""
    row = group.row
    if group.failures and group.failures[0].errored:
        count = row.cases_errored if row else len(group.failures)
        verb = "could not be judged"
    else:
        count = row.cases_failed if row else len(group.failures)
        verb = "failed"
    total = f" of {number(row.cases_total)}" if row else ""
    return f"{number(count)}{total} cases {verb}"


def gradients(row: DtypeResult) -> str:
    """``grad of x 0.65× (bound), grad of weight 0.12× (baseline relative)``; empty without `backward`."""
    return ", ".join(
        f"grad of {g.of} {headroom(g.worst_headroom)} ({g.rule.replace('_', ' ')})" for g in row.gradients
    )


def byte_count(value: int | None) -> str:
    """``1,024 B``, or "n/a" when the toolchain did not say."""
    return "n/a" if value is None else f"{value:,} B"


def skipped_suffix(report: Results) -> str:
    """`` with 3 skipped`` after a pass the run allowed with skipped ops or cases; empty otherwise."""
    if report.headline is Headline.PASSED and report.skipped:
        return f" with {number(report.skipped)} skipped"
    return ""


def verdict_label(report: Results) -> str:
    """``FAILED``, ``ERROR``, ... or ``passed`` (``passed with 3 skipped`` where skips were allowed)."""
    return report.headline.value + skipped_suffix(report)


def near_limit(op: OpResult, row: DtypeResult, used: float, threshold: float) -> str:
    """``softmax [float16]: the worst case uses 91.6% of its allowance (warn_threshold 0.8)``"""
    return (
        f"{op.name} [{row.dtype}]: the worst case uses {used:.1%} of its allowance "
        f"(policies.warn_threshold {threshold:g})"
    )


SKIPS_REFUSED = (
    "skipped ops and cases never count as passed (--allow-skips or `[ci] allow_skips = true` accepts them)"
)


def headline(report: Results) -> str:
    """The one-line verdict: ``FAILED: 1 of 6 ops failed (8 of 192 cases)``."""
    c = report.summary
    verdict = report.headline
    parts: list[str] = []
    if c.ops_failed:
        parts.append(
            f"{c.ops_failed} of {c.ops_total} ops failed ({number(c.cases_failed)} of "
            f"{number(c.cases_total)} cases)"
        )
    if c.kernels_failed:
        parts.append(f"{c.kernels_failed} of {c.kernels_total} kernels failed lint")
    compared = report.compared
    if compared is not None and compared.regressions:
        parts.append(f"{compared.regressions} regression(s) against the baseline")
    if c.ops_errored:
        parts.append(f"{c.ops_errored} op(s) errored")
    if verdict is Headline.PASSED:
        kernels = sum(1 for k in report.kernels if k.status is KernelStatus.PASSED)
        parts = [f"{c.ops_passed} of {c.ops_total} ops within bounds ({number(c.cases_total)} cases)"]
        if kernels:
            parts.append(f"{kernels} kernel(s) lint clean")
    elif verdict is Headline.ERROR and not report.executed:
        parts.insert(0, "nothing was tested")
    if report.cut_short or verdict is Headline.INCOMPLETE:
        parts.append("the run was cut short, results are partial")
    if c.ops_skipped:
        parts.append(f"{c.ops_skipped} op(s) skipped, not tested")
    partial = c.dtypes_skipped - sum(len(op.dtypes) for op in report.ops if op.status.value == "skipped")
    if partial > 0:
        parts.append(f"{partial} op × dtype result(s) skipped, not tested")
    if c.cases_skipped and verdict is not Headline.PASSED:
        parts.append(f"{number(c.cases_skipped)} case(s) skipped, not judged")
    if verdict is Headline.ERROR and report.skipped and not report.skips_allowed:
        parts.append(SKIPS_REFUSED)
    return f"{verdict_label(report)}: " + "; ".join(parts or ["see the report"])


INTERPRETER_NAMES_SHOWN = 20


def interpreter_line(report: Results) -> str | None:
    """Which ops ran in Triton's CPU interpreter, and what that meant for their judging; None when none did."""
    ops = [op.name for op in report.interpreted_ops]
    if not ops:
        return None
    shown = ", ".join(ops[:INTERPRETER_NAMES_SHOWN]) + (
        f" and {len(ops) - INTERPRETER_NAMES_SHOWN} more" if len(ops) > INTERPRETER_NAMES_SHOWN else ""
    )
    line = f"Ran in Triton's CPU interpreter (no GPU): {shown}."
    if any(row.cases_skipped or row.cases_errored for op in report.interpreted_ops for row in op.dtypes):
        line += (
            " What the interpreter cannot compute as a GPU does (inline assembly, extern calls; bfloat16 with"
            " `sanitize = false`) is not judged here: a GPU runs it for real."
        )
    return line


_TF32_FAMILIES = ("matmul", "attention")  # their bounds allow for TF32 inputs (oracle/bounds.py)


def dot_precision(op: OpResult) -> str | None:
    """``tl.dot in tf32: the matmul bound allowed for TF32 inputs`` (which precision the bound assumed), or None
    for an op whose kernels ran no fp32 `tl.dot`."""
    precisions = op.triton_dot_precisions
    if not precisions:
        return None
    ran = f"tl.dot in {', '.join(precisions)}"
    if all(p == "ieee" for p in precisions):
        return f"{ran} (full fp32 products)"
    if op.family in _TF32_FAMILIES:
        return f"{ran}: the {op.family} bound allowed for inputs rounded to TF32 (10 mantissa bits)"
    return f"{ran}: the {op.family or 'op'} bound assumed full fp32, which inputs rounded to TF32 do not meet"


def triton_precision_lines(report: Results) -> list[str]:
    """One line per op whose kernels ran fp32 `tl.dot`s: which precision its bound assumed."""
    return [f"{op.name}: {said}" for op in report.ops if (said := dot_precision(op))]


def triton_warning_lines(report: Results, limit: int | None = None) -> list[str]:
    """The Triton layer's warnings, `op: note`, op by op (at most `limit`, then how many more)."""
    lines = [f"{op.name}: {note}" for op in report.ops for note in op.triton_notes]
    if limit is not None and len(lines) > limit:
        return [*lines[:limit], f"... and {len(lines) - limit} more Triton warnings in results.json"]
    return lines


def skipped_row(op: OpResult, row: DtypeResult) -> str:
    """``scale [bfloat16]: 4 of 4 cases not tested, skipped (Triton interpreter: bfloat16 unsupported)``"""
    return (
        f"{op.name} [{row.dtype}]: {number(row.cases_skipped)} of {number(row.cases_total)} cases not tested, "
        f"skipped ({row.skip_reason or 'no reason given'})"
    )
