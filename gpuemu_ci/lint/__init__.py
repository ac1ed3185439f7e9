"""Kernel lint: what the compiler actually did with each kernel, per arch, checked against the config's limits:
ptxas for CUDA kernels (PTX/SASS), the AMDGPU compiler for HIP kernels (lint/hip_lint.py).

Entry point: `lint_kernels(kernels, *, archs=None, jobs=None, root=None) -> LintReport`; the per-kernel
records are `gpuemu_ci.results.kernels.KernelResult`.
"""

from __future__ import annotations

from gpuemu_ci.lint.model import LintReport, Toolchain
from gpuemu_ci.lint.run import lint_kernels
from gpuemu_ci.lint.toolchain import discover_toolchain

__all__ = ["LintReport", "Toolchain", "discover_toolchain", "lint_kernels"]
