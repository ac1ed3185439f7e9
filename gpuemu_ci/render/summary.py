"""The human summary of a run, on stderr: every op once, failures with what replays them, then the verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuemu_ci.render.baseline_diff import render_text
from gpuemu_ci.render.describe import describe_inputs
from gpuemu_ci.render.error_maps import error_map_line
from gpuemu_ci.render.text import (
    SKIPS_REFUSED,
    dot_precision,
    interpreter_line,
    near_limit,
    skipped_row,
    skipped_suffix,
)
from gpuemu_ci.results.hints import layout_hint
from gpuemu_ci.results.kernels import KernelStatus
from gpuemu_ci.results.model import Headline, OpStatus, Results
from gpuemu_ci.terminal import Style

LABELS = {
    OpStatus.PASSED: ("PASS", "passed"),
    OpStatus.FAILED: ("FAIL", "failed"),
    OpStatus.SKIPPED: ("SKIP", "skipped"),
    OpStatus.ERROR: ("ERROR", "error"),
    KernelStatus.PASSED: ("PASS", "passed"),
    KernelStatus.FAILED: ("FAIL", "failed"),
    KernelStatus.SKIPPED: ("SKIP", "skipped"),
    KernelStatus.ERROR: ("ERROR", "error"),
}
HEADLINE_ROLES = {
    Headline.PASSED: "passed",
    Headline.FAILED: "failed",
    Headline.ERROR: "error",
    Headline.INCOMPLETE: "skipped",
}
SHOWN_FAILURES = 3  # per op; results.json has the rest


def shown_path(path: Path) -> Path:
    """A path as the user would type it: relative to the working directory when it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except (ValueError, OSError):
        return path


def print_summary(results: Results, path: Path) -> None:
    """Prints the end-of-run summary to stderr: one line per op and kernel with its failures, hints, skips and
    near-limit warnings; `path` is the results file the summary points to for what it leaves out."""
    style = Style.for_stream(sys.stderr)

    def echo(text: str = "") -> None:
        click.echo(text, err=True, color=style.colour)  # click strips colour off terminals unless told

    def label(status: OpStatus | KernelStatus) -> str:
        word, role = LABELS[status]
        return style.paint(f"{word:<5}", role)

    echo()
    near, threshold = results.near_limit(), results.warn_threshold or 0.0
    for op in results.ops:
        detail = f"{op.cases_passed}/{op.cases_total} cases passed"
        if op.skip_reason:
            detail = f"skipped ({op.skip_reason})"
        elif op.message:
            detail += f" - {op.message}"
        echo(f"  {label(op.status)} {op.name}: {detail}")
        for failure in op.failures[:SHOWN_FAILURES]:
            first_line = failure.message.splitlines()[0] if failure.message else failure.kind
            inputs = describe_inputs(failure.shapes, failure.strides, failure.layouts)
            echo(
                f"        {failure.kind} [{failure.dtype}] {inputs} {failure.distribution} seed {failure.case_seed}"
            )
            echo(f"          {first_line[:300]}")
            if failure.pattern:
                echo(f"          pattern: {failure.pattern}")
            if failure.where:
                echo(f"          where: {failure.where}")
            if (drawn := error_map_line(failure)) is not None:
                echo(f"          {drawn}")
            echo(f"          replay: {failure.replay}")
        hidden = len(op.failures) - SHOWN_FAILURES + op.failures_omitted
        if hidden > 0:
            echo(f"        ... and {hidden} more failures in {shown_path(path)}")
        hint = layout_hint(op)
        if hint:
            echo(f"        hint: {hint}")
        for row in op.dtypes:
            if row.cases_skipped:
                echo(f"        SKIP  {skipped_row(op, row)}")
        precision = dot_precision(op)
        if precision:
            echo(f"        {precision}")
        for note in op.triton_notes:
            echo(f"        {style.paint('warning', 'skipped')}: {note}")
        for warned, row, used in near:
            if warned is op:
                echo(f"        {style.paint('WARN ', 'skipped')} {near_limit(op, row, used, threshold)}")
    for kernel in results.kernels:
        echo(f"  {label(kernel.status)} kernel {kernel.name}")
        for violation in kernel.violations[:5]:
            echo(f"        {violation.message}")
        if kernel.error is not None:
            error = kernel.error
            echo(f"        {error.file}:{error.line}: {error.message}")
    if results.diff is not None:
        for line in render_text(results.diff).splitlines():
            echo(f"  {line}")
    for note in results.notes:
        echo(f"  note: {note}")
    interpreted = interpreter_line(results)
    if interpreted:
        echo(f"  note: {interpreted}")
    if results.skipped and not results.skips_allowed:
        echo(f"  note: {SKIPS_REFUSED}")
    echo()
    s = results.summary
    headline = results.headline
    echo(
        f"gpuemu-ci: {style.paint(headline.value.upper(), HEADLINE_ROLES[headline])}{skipped_suffix(results)} - "
        f"ops {s.ops_passed} passed, "
        f"{s.ops_failed} failed, {s.ops_skipped} skipped, {s.ops_errored} errored; cases {s.cases_total} "
        f"({s.cases_failed} failed{f', {s.cases_skipped} skipped' if s.cases_skipped else ''}); "
        f"seed {results.seed}; {s.duration_s:.1f}s"
    )
    echo(f"gpuemu-ci: results written to {shown_path(path)}")
