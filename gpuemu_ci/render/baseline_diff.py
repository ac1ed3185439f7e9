"""The human table of a baseline diff (stderr of `gpuemu-ci diff` and `gpuemu-ci run --baseline`)."""

from __future__ import annotations

from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.diff import BaselineDiff, Classification

LABELS = {Severity.ERROR: "FAIL", Severity.WARNING: "WARN", Severity.INFO: "info"}


def render_text(diff: BaselineDiff, *, show_unchanged: bool = False) -> str:
    """Lines for a terminal: what changed, failures first; unchanged entries are counted, not listed."""
    lines = [f"baseline: {diff.message}"]
    if not diff.compared:
        return "\n".join(lines)
    shown = [
        e
        for e in diff.entries
        if show_unchanged
        or e.classification is not Classification.UNCHANGED
        or e.severity is not Severity.INFO
    ]
    rows = [
        (
            LABELS[e.severity],
            e.kind.value,
            e.label,
            e.classification.value,
            [r.message for r in e.reasons] or [""],
        )
        for e in shown
    ]
    if rows:
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for label, kind, what, classification, reasons in rows:
            head = (
                f"  {label:<{widths[0]}}  {kind:<{widths[1]}}  {what:<{widths[2]}}  "
                f"{classification:<{widths[3]}}  "
            )
            lines.append(head + reasons[0])
            lines.extend(" " * len(head) + r for r in reasons[1:])
    hidden = len(diff.entries) - len(shown)
    if hidden:
        lines.append(f"  ... {hidden} unchanged")
    lines.append(f"diff: {diff.summary_line}")
    if diff.gate_failed:
        lines.append(
            "diff: FAILED - regressions fail the gate (policies.fail_on_regression / --fail-on-regression)"
        )
    return "\n".join(lines)
