"""The human summary of a run, on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

ICONS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP", "error": "ERROR"}


def print_summary(document: dict[str, Any], path: Path) -> None:
    s = document["summary"]
    echo = lambda text="": click.echo(text, err=True)  # noqa: E731
    echo()
    for op in document["ops"]:
        detail = f"{op['cases_passed']}/{op['cases_total']} cases passed"
        if op.get("skip_reason"):
            detail = f"skipped ({op['skip_reason']})"
        elif op.get("message"):
            detail += f" - {op['message']}"
        echo(f"  {ICONS.get(op['status'], op['status']):<5} {op['name']}: {detail}")
        for failure in op["failures"][:3]:
            shapes = ", ".join(f"{k}{tuple(v)}" for k, v in failure["shapes"].items())
            first_line = failure["message"].splitlines()[0] if failure["message"] else failure["kind"]
            echo(
                f"        {failure['kind']} [{failure['dtype']}] {shapes} {failure['distribution']} "
                f"seed {failure['case_seed']}"
            )
            echo(f"          {first_line[:300]}")
            echo(f"          replay: {failure['replay']}")
        hidden = len(op["failures"]) - 3 + op.get("failures_omitted", 0)
        if hidden > 0:
            echo(f"        ... and {hidden} more failures in {path}")
    for kernel in document.get("kernels", []):
        echo(
            f"  {ICONS.get(kernel.get('status', ''), kernel.get('status', '')):<5} kernel {kernel.get('name')}"
        )
        for violation in kernel.get("violations", [])[:5]:
            echo(f"        {violation.get('message', violation)}")
        if kernel.get("error"):
            error = kernel["error"]
            echo(f"        {error.get('file')}:{error.get('line')}: {error.get('message')}")
    diff = document.get("diff")
    if diff:
        from gpuemu_ci.diff.render import render_text

        for line in render_text(diff).splitlines():
            echo(f"  {line}")
    for note in document.get("notes", []):
        echo(f"  note: {note}")
    echo()
    echo(
        f"gpuemu-ci: {document['verdict'].upper()} - ops {s['ops_passed']} passed, {s['ops_failed']} failed, "
        f"{s['ops_skipped']} skipped, {s['ops_errored']} errored; cases {s['cases_total']} "
        f"({s['cases_failed']} failed); seed {document['seed']}; {s['duration_s']:.1f}s"
    )
    echo(f"gpuemu-ci: results written to {path}")
