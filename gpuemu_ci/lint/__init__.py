"""PTX/SASS lint: what ptxas actually did with each kernel, per arch, checked against the config's limits.

Entry point: `lint_kernels(kernels, *, archs=None, jobs=None, root=None) -> LintReport`.
"""

from __future__ import annotations

from gpuemu_ci.lint.model import (
    ArchSource,
    CompileError,
    KernelLintResult,
    KernelMetrics,
    KernelStatus,
    LintReport,
    LintStatus,
    Severity,
    Toolchain,
    ToolIdentity,
    Violation,
)
from gpuemu_ci.lint.run import lint_kernels
from gpuemu_ci.lint.toolchain import discover_toolchain

__all__ = [
    "ArchSource",
    "CompileError",
    "KernelLintResult",
    "KernelMetrics",
    "KernelStatus",
    "LintReport",
    "LintStatus",
    "Severity",
    "ToolIdentity",
    "Toolchain",
    "Violation",
    "discover_toolchain",
    "lint_kernels",
]
