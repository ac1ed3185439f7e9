"""The human summary of a run, on stderr."""

from __future__ import annotations

from pathlib import Path

import click

from gpuemu_ci.results.kernels import KernelStatus
from gpuemu_ci.results.model import OpStatus, Results

ICONS = {
    OpStatus.PASSED: "PASS",
    OpStatus.FAILED: "FAIL",
    OpStatus.SKIPPED: "SKIP",
    OpStatus.ERROR: "ERROR",
    KernelStatus.PASSED: "PASS",
    KernelStatus.FAILED: "FAIL",
    KernelStatus.SKIPPED: "SKIP",
    KernelStatus.ERROR: "ERROR",
}
SHOWN_FAILURES = 3  # per op; results.json has the rest


def print_summary(results: Results, path: Path) -> None:
    s = results.summary

    def echo(text: str = "") -> None:
        click.echo(text, err=True)

    echo()
    for op in results.ops:
        detail = f"{op.cases_passed}/{op.cases_total} cases passed"
        if op.skip_reason:
            detail = f"skipped ({op.skip_reason})"
        elif op.message:
            detail += f" - {op.message}"
        echo(f"  {ICONS[op.status]:<5} {op.name}: {detail}")
        for failure in op.failures[:SHOWN_FAILURES]:
            shapes = ", ".join(f"{k}{tuple(v)}" for k, v in failure.shapes.items())
            first_line = failure.message.splitlines()[0] if failure.message else failure.kind
            echo(
                f"        {failure.kind} [{failure.dtype}] {shapes} {failure.distribution} "
                f"seed {failure.case_seed}"
            )
            echo(f"          {first_line[:300]}")
            echo(f"          replay: {failure.replay}")
        hidden = len(op.failures) - SHOWN_FAILURES + op.failures_omitted
        if hidden > 0:
            echo(f"        ... and {hidden} more failures in {path}")
    for kernel in results.kernels:
        echo(f"  {ICONS[kernel.status]:<5} kernel {kernel.name}")
        for violation in kernel.violations[:5]:
            echo(f"        {violation.message}")
        if kernel.error is not None:
            error = kernel.error
            echo(f"        {error.file}:{error.line}: {error.message}")
    if results.diff is not None:
        from gpuemu_ci.diff.render import render_text

        for line in render_text(results.diff).splitlines():
            echo(f"  {line}")
    for note in results.notes:
        echo(f"  note: {note}")
    echo()
    echo(
        f"gpuemu-ci: {results.verdict.value.upper()} - ops {s.ops_passed} passed, {s.ops_failed} failed, "
        f"{s.ops_skipped} skipped, {s.ops_errored} errored; cases {s.cases_total} "
        f"({s.cases_failed} failed); seed {results.seed}; {s.duration_s:.1f}s"
    )
    echo(f"gpuemu-ci: results written to {path}")
