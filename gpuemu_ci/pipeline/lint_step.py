"""The lint step inside the gate: [[kernels]] -> the `kernels` and `lint` parts of results.json."""

from __future__ import annotations

import threading

from gpuemu_ci.config.model import Config
from gpuemu_ci.errors import InfraError
from gpuemu_ci.lint.model import LintReport
from gpuemu_ci.lint.run import lint_kernels
from gpuemu_ci.pipeline.settings import Settings


def run_lint(config: Config, settings: Settings, stop: threading.Event | None = None) -> LintReport:
    """Lints every kernel. A missing toolchain is recorded (status unavailable), not raised, so the results are
    still written; the run then exits 3. `stop` (a signal) kills the compiles under way."""
    try:
        return lint_kernels(
            config.kernels,
            archs=settings.archs or None,
            jobs=settings.lint_jobs,
            root=config.root,
            allow_unchecked=config.ci.allow_unchecked,
            stop=stop,
        )
    except InfraError as exc:
        return LintReport.unavailable(exc.message)
