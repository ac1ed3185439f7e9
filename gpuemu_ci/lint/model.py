"""What the lint stage keeps for itself: the CUDA tools it found (with their paths, which never reach results)
and the report of one lint run. The per-kernel records it produces are parts of the results document
(`gpuemu_ci.results.kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from gpuemu_ci.errors import ExitCode
from gpuemu_ci.lint.hip_toolchain import HipToolchain
from gpuemu_ci.lint.nvrtc import Nvrtc
from gpuemu_ci.results.kernels import KernelResult, KernelStatus, LintInfo, LintStatus, ToolchainInfo


@dataclass(frozen=True)
class Toolchain:
    """The CUDA tools found on this machine and their versions. Paths are never written into results."""

    nvcc: str | None  # path
    ptxas: str | None
    cuobjdump: str | None
    nvdisasm: str | None
    cxxfilt: str | None
    nvcc_version: str | None  # "13.0.88"
    ptxas_version: str | None
    nvcc_build: str | None = None  # "cuda_13.0.r13.0/compiler.36424714_0"
    sass_tool_version: str | None = None
    supported_archs: tuple[str, ...] = ()  # from `nvcc --list-gpu-code`; empty when unknown
    default_arch: str | None = None
    nvrtc: Nvrtc | None = None  # the front end for .cu sources where there is no nvcc (lint/nvrtc.py)

    @property
    def frontend(self) -> str | None:
        """What compiles a .cu: "nvcc", else "nvrtc" (with ptxas), else None."""
        if self.nvcc:
            return "nvcc"
        if self.nvrtc is not None and self.ptxas:
            return "nvrtc"
        return None

    @property
    def nvrtc_version(self) -> str | None:
        """The NVRTC that compiles .cu sources (None when nvcc does)."""
        return self.nvrtc.version if self.frontend == "nvrtc" and self.nvrtc is not None else None

    @property
    def sass_tool(self) -> str | None:
        """Which tool SASS counts and patterns come from: "nvdisasm", "cuobjdump" or None."""
        if self.nvdisasm:
            return "nvdisasm"
        if self.cuobjdump:
            return "cuobjdump"
        return None

    def info(self) -> ToolchainInfo:
        """What results.json records about the tools (versions, never paths)."""
        return ToolchainInfo(
            nvcc=self.nvcc_version,
            ptxas=self.ptxas_version,
            nvcc_build=self.nvcc_build,
            sass_tool=self.sass_tool,
            sass_tool_version=self.sass_tool_version,
            demangler="c++filt" if self.cxxfilt else None,
            default_arch=self.default_arch,
            nvrtc=self.nvrtc_version,
        )


@dataclass(frozen=True)
class LintReport:
    """Everything one lint run found.

    `exit_code`: 0 clean, 1 a kernel failed (check or compile error), 3 the toolchain could not answer.
    """

    status: LintStatus
    toolchain: Toolchain | None  # the CUDA tools; None when no CUDA kernel was linted
    kernels: tuple[KernelResult, ...] = ()
    duration_s: float = 0.0
    reason: str | None = None  # why lint is disabled/unavailable
    jobs: int = 1
    hip_toolchain: HipToolchain | None = None  # the HIP tools; None when no HIP kernel was linted

    @classmethod
    def disabled(cls, reason: str = "lint is disabled in the config ([ci] lint = false)") -> LintReport:
        """The report of a run whose config turns the lint off."""
        return cls(status=LintStatus.DISABLED, toolchain=None, reason=reason)

    @classmethod
    def unavailable(cls, reason: str) -> LintReport:
        """The report of a lint that could not run here (no toolchain), with why."""
        return cls(status=LintStatus.UNAVAILABLE, toolchain=None, reason=reason)

    @property
    def failed(self) -> tuple[KernelResult, ...]:
        """The kernels that broke a rule (registers, spills, patterns, ...)."""
        return tuple(k for k in self.kernels if k.status is KernelStatus.FAILED)

    @property
    def errored(self) -> tuple[KernelResult, ...]:
        """The kernels the lint could not check (a compile or tool error)."""
        return tuple(k for k in self.kernels if k.status is KernelStatus.ERROR)

    @property
    def exit_code(self) -> ExitCode:
        """The lint's exit code: 1 when a kernel failed, else 3 when one could not be checked, else 0."""
        if self.failed:
            return ExitCode.GATE_FAILED
        if self.errored:
            return ExitCode.INFRASTRUCTURE
        return ExitCode.PASSED

    def info(self) -> LintInfo:
        """The `lint` part of results.json."""
        info = None if self.toolchain is None else self.toolchain.info()
        hip = self.hip_toolchain
        if hip is not None:
            info = msgspec.structs.replace(
                info or ToolchainInfo(nvcc=None, ptxas=None),
                clang=hip.clang_version,
                hip=hip.hip_version,
                device_libs_clang=hip.device_libs_clang,
                amdgpu_disassembler=f"llvm-objdump {hip.clang_version or ''}".strip()
                if hip.objdump
                else None,
            )
        return LintInfo(status=self.status, toolchain=info, reason=self.reason)

    def to_json(self) -> dict[str, Any]:
        """`gpuemu-ci lint --json`: the lint part, the kernels and a summary."""
        return {
            "lint": msgspec.to_builtins(self.info()),
            "kernels": msgspec.to_builtins(self.kernels),
            "summary": {
                "kernels_total": len(self.kernels),
                "kernels_failed": len(self.failed),
                "kernels_errored": len(self.errored),
                "warnings": sum(len(k.warnings) for k in self.kernels),
                "duration_s": round(self.duration_s, 3),
                "jobs": self.jobs,
            },
            "exit_code": int(self.exit_code),
        }
