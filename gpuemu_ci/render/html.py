"""A self-contained HTML report (one file, inline CSS, no script) from ``templates/report.html.j2``.

Jinja2's HTML autoescaping is on, so every value from the results document is escaped; links
are only emitted for URLs that `escape.safe_url` accepts. Unlike the PR comment, nothing is cut.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from gpuemu_ci.render import escape, text
from gpuemu_ci.render.coverage import coverage_rows, dtypes_not_run
from gpuemu_ci.render.error_maps import shown_maps
from gpuemu_ci.render.links import Links
from gpuemu_ci.render.templates import compiled_environment
from gpuemu_ci.results.kernels import KernelStatus
from gpuemu_ci.results.model import OpStatus, Results


def _environment() -> jinja2.Environment:
    return compiled_environment(
        ".html.j2",
        {
            "headroom": text.headroom,
            "gradients": text.gradients,
            "num": text.number,
            "dims": text.dims,
            "pairs": text.pairs,
            "kwargs": text.kwargs,
            "first_line": text.first_line,
            "error_vs_allowed": text.error_vs_allowed,
            "group_title": text.group_title,
            "group_count": text.group_count,
            "bytes": text.byte_count,
            "safe_url": escape.safe_url,
        },
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


_ENVIRONMENT = _environment()


def render_html(report: Results, links: Links | None = None, results_dir: Path | None = None) -> str:
    """The whole report as one HTML page; the failures' error maps are read from `results_dir` (the directory
    of results.json) and inlined."""
    links = links or Links()
    return _ENVIRONMENT.get_template("report.html.j2").render(
        report=report,
        links=links,
        headline_text=text.headline(report),
        headline=report.headline,
        groups=report.failure_groups(),
        errored_groups={g.op.name: g for g in report.errored_groups()},
        errored=[op for op in report.ops if op.status is OpStatus.ERROR],
        skipped=[op for op in report.ops if op.status is OpStatus.SKIPPED and not op.dtypes],
        skipped_rows=[text.skipped_row(op, row) for op, row in report.skipped_rows()],
        interpreter_line=text.interpreter_line(report),
        triton_precisions=text.triton_precision_lines(report),
        triton_warnings=text.triton_warning_lines(report),
        lint=[(k, v) for k in report.kernels for v in k.violations],
        compile_errors=[k for k in report.kernels if k.error is not None and k.status is KernelStatus.FAILED],
        kernel_problems=[k for k in report.kernels if k.status in (KernelStatus.ERROR, KernelStatus.SKIPPED)],
        passing_kernels=[k for k in report.kernels if k.status is KernelStatus.PASSED],
        kernel_entries=[(k, e) for k in report.kernels for e in k.entries if e.amdgpu is None],
        hip_entries=[(k, e) for k in report.kernels for e in k.entries if e.amdgpu is not None],
        passes=[(op, row) for op in report.ops for row in op.dtypes if row.status is OpStatus.PASSED],
        not_run=dtypes_not_run(report),
        coverage=coverage_rows(report),
        maps=shown_maps((f for op in report.ops for f in op.failures), results_dir),
    )
