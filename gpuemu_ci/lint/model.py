"""Plain data the lint stage hands on: metrics per kernel x arch, violations, compile errors, the report.

Everything here is frozen. Count mappings (`constant`, `ptx_instructions`, ...) are dicts built once by
the lint stage and never modified afterwards; `to_json()` gives the `results.json` shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from gpuemu_ci.errors import ExitCode


class KernelStatus(str, Enum):
    """Outcome of one `[[kernels]]` entry."""

    PASSED = "passed"
    FAILED = "failed"  # a check failed, or the source does not compile (the user's code)
    ERROR = "error"  # the toolchain could not give an answer (timeout, crash): not the user's code
    SKIPPED = "skipped"


class LintStatus(str, Enum):
    """What the lint stage did as a whole (results.json `lint.status`)."""

    RAN = "ran"
    DISABLED = "disabled"
    NO_KERNELS = "no_kernels"
    UNAVAILABLE = "unavailable"


class Severity(str, Enum):
    """ERROR fails the kernel. WARNING is shown everywhere but does not fail it: used for a check that could
    not be carried out (a SASS pattern without cuobjdump/nvdisasm), so it never passes silently."""

    ERROR = "error"
    WARNING = "warning"


class ArchSource(str, Enum):
    """Where a target arch came from; recorded so a default never looks like a choice."""

    CONFIG = "config"
    COMMAND_LINE = "command_line"
    TOOLCHAIN_DEFAULT = "toolchain_default"
    PTX_TARGET = "ptx_target"  # a .ptx source compiled for the `.target` it declares


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

    @property
    def sass_tool(self) -> str | None:
        """Which tool SASS counts and patterns come from: "nvdisasm", "cuobjdump" or None."""
        if self.nvdisasm:
            return "nvdisasm"
        if self.cuobjdump:
            return "cuobjdump"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "nvcc": self.nvcc_version,
            "ptxas": self.ptxas_version,
            "nvcc_build": self.nvcc_build,
            "sass_tool": self.sass_tool,
            "sass_tool_version": self.sass_tool_version,
            "demangler": "c++filt" if self.cxxfilt else None,
            "default_arch": self.default_arch,
        }


@dataclass(frozen=True)
class ToolIdentity:
    """Toolchain identity attached to every metric record: numbers are comparable only when this matches."""

    nvcc: str | None
    ptxas: str | None
    flags: tuple[str, ...]
    arch: str

    def to_json(self) -> dict[str, Any]:
        return {"nvcc": self.nvcc, "ptxas": self.ptxas, "flags": list(self.flags), "arch": self.arch}


@dataclass(frozen=True)
class DeviceFunctionMetrics:
    """A non-inlined device function reached from a kernel: ptxas prints a frame for it but no `Used` line."""

    name: str  # demangled, normalised
    mangled: str
    stack_frame: int | None
    spill_stores: int | None
    spill_loads: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mangled": self.mangled,
            "stack_frame": self.stack_frame,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
        }


@dataclass(frozen=True)
class KernelMetrics:
    """What ptxas (and the PTX/SASS) say about one kernel entry for one arch. None = the log did not say."""

    kernel: str  # demangled, normalised (anonymous-namespace hashes and __nv_static_ prefixes removed)
    mangled: str  # the mangled name, normalised the same way (stable across checkouts)
    arch: str
    registers: int | None
    stack_frame: int | None
    spill_stores: int | None
    spill_loads: int | None
    shared_memory: int | None  # static bytes; dynamic `extern __shared__` is never in ptxas -v
    local_memory: int | None  # bytes per thread: legacy `lmem`, else cumulative stack, else the stack frame
    constant: dict[int, int]  # bank -> bytes; only the banks ptxas printed (sm_90+ prints none)
    barriers: int | None  # None before CUDA 12.6, which did not print it
    ptx_instructions: dict[str, int]  # full opcode -> count, this entry's PTX body
    sass_instructions: dict[str, int] | None  # None when no SASS tool
    toolchain: ToolIdentity
    device_functions: tuple[DeviceFunctionMetrics, ...] = ()
    unparsed: tuple[str, ...] = ()  # fields of the `Used` line this parser does not know, kept verbatim

    @property
    def spills(self) -> int | None:
        """Spill bytes, stores + loads."""
        if self.spill_stores is None or self.spill_loads is None:
            return None
        return self.spill_stores + self.spill_loads

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "mangled": self.mangled,
            "arch": self.arch,
            "registers": self.registers,
            "stack_frame": self.stack_frame,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
            "shared_memory": self.shared_memory,
            "local_memory": self.local_memory,
            "constant": {str(bank): size for bank, size in sorted(self.constant.items())},
            "barriers": self.barriers,
            "ptx_instructions": dict(sorted(self.ptx_instructions.items())),
            "sass_instructions": (
                None if self.sass_instructions is None else dict(sorted(self.sass_instructions.items()))
            ),
            "device_functions": [f.to_json() for f in self.device_functions],
            "unparsed": list(self.unparsed),
            "toolchain": self.toolchain.to_json(),
        }


@dataclass(frozen=True)
class Violation:
    """One failed (or not carried out) check, naming the kernel, arch, metric, limit and value."""

    kernel: str
    arch: str
    metric: str  # "registers", "spills", "forbidden_pattern[ptx]", ...
    limit: int | str  # a number, or the pattern
    value: int | str | None  # the measured number, or how many instructions matched; None = not measured
    message: str
    severity: Severity = Severity.ERROR

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "arch": self.arch,
            "metric": self.metric,
            "limit": self.limit,
            "value": self.value,
            "severity": self.severity.value,
            "message": self.message,
        }


@dataclass(frozen=True)
class CompileError:
    """The compiler refused the source: its first error message, where it points, and the full log."""

    message: str
    file: str | None
    line: int | None
    arch: str
    log: str  # the compiler's complete stderr, for the human output

    @property
    def location(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "file": self.file, "line": self.line, "arch": self.arch}


@dataclass(frozen=True)
class KernelLintResult:
    """The lint outcome of one `[[kernels]]` entry over all its archs."""

    name: str
    source: str  # relative to the config root where possible
    source_sha256: str | None
    line: int | None
    status: KernelStatus
    archs: tuple[str, ...]
    arch_source: ArchSource
    entries: tuple[KernelMetrics, ...] = ()
    violations: tuple[Violation, ...] = ()
    error: CompileError | None = None
    duration_s: float = 0.0

    @property
    def warnings(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.severity is Severity.WARNING)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "line": self.line,
            "status": self.status.value,
            "archs": list(self.archs),
            "arch_source": self.arch_source.value,
            "entries": [e.to_json() for e in self.entries],
            "violations": [v.to_json() for v in self.violations],
            "error": None if self.error is None else self.error.to_json(),
        }


@dataclass(frozen=True)
class LintReport:
    """Everything one lint run found.

    `exit_code`: 0 clean, 1 a kernel failed (check or compile error), 3 the toolchain could not answer.
    """

    status: LintStatus
    toolchain: Toolchain | None
    kernels: tuple[KernelLintResult, ...] = ()
    duration_s: float = 0.0
    reason: str | None = None  # why lint is disabled/unavailable
    jobs: int = 1

    @classmethod
    def disabled(cls, reason: str = "lint is disabled in the config ([ci] lint = false)") -> LintReport:
        return cls(status=LintStatus.DISABLED, toolchain=None, reason=reason)

    @classmethod
    def unavailable(cls, reason: str) -> LintReport:
        return cls(status=LintStatus.UNAVAILABLE, toolchain=None, reason=reason)

    @property
    def failed(self) -> tuple[KernelLintResult, ...]:
        return tuple(k for k in self.kernels if k.status is KernelStatus.FAILED)

    @property
    def errored(self) -> tuple[KernelLintResult, ...]:
        return tuple(k for k in self.kernels if k.status is KernelStatus.ERROR)

    @property
    def exit_code(self) -> ExitCode:
        if self.failed:
            return ExitCode.GATE_FAILED
        if self.errored:
            return ExitCode.INFRASTRUCTURE
        return ExitCode.PASSED

    def lint_json(self) -> dict[str, Any]:
        """The `lint` section of results.json."""
        return {
            "status": self.status.value,
            "toolchain": None if self.toolchain is None else self.toolchain.to_json(),
            "reason": self.reason,
        }

    def kernels_json(self) -> list[dict[str, Any]]:
        """The `kernels` array of results.json."""
        return [k.to_json() for k in self.kernels]

    def to_json(self) -> dict[str, Any]:
        return {
            "lint": self.lint_json(),
            "kernels": self.kernels_json(),
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
