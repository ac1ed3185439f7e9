"""The lint step inside `gpuemu-ci run`: [[kernels]] -> the `kernels` and `lint` sections of results.json."""

from __future__ import annotations

import os
from typing import Any

from gpuemu_ci.config.model import Config
from gpuemu_ci.errors import InfraError
from gpuemu_ci.lint.model import LintReport
from gpuemu_ci.lint.run import lint_kernels


def run_lint(config: Config, options: Any) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
    """(kernels json, lint json, infrastructure error?). A missing toolchain is recorded, not raised, so the
    results are still written; the run then exits 3."""
    # Compiles are independent processes: use every core unless --jobs says otherwise.
    jobs = max(1, getattr(options, "jobs", None) or os.cpu_count() or 1)
    try:
        report = lint_kernels(
            config.kernels, archs=getattr(options, "archs", None) or None, jobs=jobs, root=config.root
        )
    except InfraError as exc:
        unavailable = LintReport.unavailable(exc.message)
        return [], unavailable.lint_json(), True
    return report.kernels_json(), report.lint_json(), False
