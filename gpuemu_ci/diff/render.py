"""The human table of a diff section (stderr of `gpuemu-ci diff`). Works on the JSON shape, so a `diff`
read back from any results.json renders the same way."""

from __future__ import annotations

from typing import Any

LABELS = {"failure": "FAIL", "warning": "WARN", "info": "info"}


def render_text(diff: dict[str, Any], *, show_unchanged: bool = False) -> str:
    """Lines for a terminal: what changed, failures first; unchanged entries are counted, not listed."""
    lines = [f"baseline: {diff.get('message', '')}"]
    if diff.get("status") != "compared":
        return "\n".join(lines)
    entries = diff.get("entries", [])
    shown = [
        e
        for e in entries
        if show_unchanged or e.get("classification") != "unchanged" or e.get("severity") != "info"
    ]
    rows = []
    for e in shown:
        detail = e.get("dtype") if e.get("kind") == "op" else e.get("arch")
        what = f"{e.get('name')} [{detail}]" if detail else str(e.get("name"))
        reasons = [r.get("message", "") for r in e.get("reasons", [])] or [""]
        rows.append(
            (
                LABELS.get(e.get("severity", ""), "info"),
                e.get("kind", ""),
                what,
                e.get("classification", ""),
                reasons,
            )
        )
    if rows:
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for label, kind, what, classification, reasons in rows:
            head = (
                f"  {label:<{widths[0]}}  {kind:<{widths[1]}}  {what:<{widths[2]}}  "
                f"{classification:<{widths[3]}}  "
            )
            lines.append(head + reasons[0])
            lines.extend(" " * len(head) + r for r in reasons[1:])
    hidden = len(entries) - len(shown)
    if hidden:
        lines.append(f"  ... {hidden} unchanged")
    lines.append(f"diff: {diff.get('summary_line', '')}")
    gate = diff.get("gate") or {}
    if gate.get("failed"):
        lines.append(
            "diff: FAILED - regressions fail the gate (policies.fail_on_regression / --fail-on-regression)"
        )
    return "\n".join(lines)
