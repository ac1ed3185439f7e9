"""The rules that turn one [[kernels]] entry's compiles into its status, for CUDA and HIP kernels alike."""

from __future__ import annotations

from collections.abc import Sequence

from gpuemu_ci.config.model import KernelSpec
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import CompileError, KernelMetrics, KernelStatus, Violation


def after_failure(status: KernelStatus, *, tool_failure: bool) -> KernelStatus:
    """A compile that failed: the user's code (FAILED), unless the tools did (a compiler that hung, could not
    start, or whose output could not be read), which says nothing about the code (ERROR) and never hides a
    FAILED of another arch."""
    if tool_failure and status is not KernelStatus.FAILED:
        return KernelStatus.ERROR
    return KernelStatus.FAILED


def final_status(
    spec: KernelSpec,
    source: str,
    status: KernelStatus,
    entries: Sequence[KernelMetrics],
    violations: Sequence[Violation],
    error: CompileError | None,
) -> KernelStatus:
    """FAILED when a check failed; a source that compiled and holds no kernel is a config error (exit 2)."""
    if error is None and not entries:
        raise ConfigError(
            f"kernel {spec.name!r}: {source} defines no __global__ kernel to lint", line=spec.line
        )
    if any(v.severity is Severity.ERROR for v in violations):
        return KernelStatus.FAILED
    return status
