"""The kernels half of results.json: what the lint stage measured per `[[kernels]]` entry and arch, the
violations of its limits, compile errors, and the toolchain that produced the numbers.

A CUDA entry's figures come from ptxas; a HIP entry's from the AMDGPU compiler (clang's resource usage remarks
and the code object's metadata), with the AMD-only figures in `KernelMetrics.amdgpu`."""

from __future__ import annotations

from enum import StrEnum

from gpuemu_ci.results.base import Record, Severity, Sha256

COMPILE_LOG_LIMIT = 20_000  # characters of the compiler's log kept in results.json


class KernelStatus(StrEnum):
    """Outcome of one `[[kernels]]` entry."""

    PASSED = "passed"
    FAILED = "failed"  # a check failed, or the source does not compile (the user's code)
    ERROR = "error"  # the toolchain could not give an answer (timeout, crash): not the user's code
    SKIPPED = "skipped"


class LintStatus(StrEnum):
    """What the lint stage did as a whole (results.json `lint.status`)."""

    RAN = "ran"
    DISABLED = "disabled"
    NO_KERNELS = "no_kernels"
    UNAVAILABLE = "unavailable"


class ArchSource(StrEnum):
    """Where a target arch came from; recorded so a default never looks like a choice."""

    CONFIG = "config"
    COMMAND_LINE = "command_line"
    TOOLCHAIN_DEFAULT = "toolchain_default"
    PTX_TARGET = "ptx_target"  # a .ptx source compiled for the `.target` it declares


class ToolIdentity(Record, frozen=True):
    """Toolchain identity attached to every metric record: numbers are comparable only when this matches."""

    nvcc: str | None
    ptxas: str | None
    flags: tuple[str, ...]
    arch: str
    nvrtc: str | None = None  # the NVRTC that compiled the source to PTX, where nvcc did not (lint/nvrtc.py)
    clang: str | None = None  # the clang that compiled a HIP source for an AMD GPU (lint/hip_toolchain.py)
    hip: str | None = None  # the HIP headers it compiled against ("5.2.21153")


class AmdgpuUsage(Record, frozen=True):
    """What the AMDGPU compiler reports for one HIP kernel on one gfx arch, beyond the figures every kernel
    has. None = the compiler did not say (an arch without AGPRs reports none).

    From clang's kernel resource usage remarks: VGPRs, AGPRs, SGPRs, spills, scratch, LDS, occupancy. From the
    code object's metadata: the VGPRs it declares to the runtime, the wavefront size, the workgroup size limit,
    the kernel arguments' size and whether it uses a dynamic stack."""

    vgprs: int | None  # architected VGPRs per lane (what max_registers limits)
    agprs: int | None  # accumulation VGPRs (gfx908, gfx90a, gfx94x); None where the arch has none
    sgprs: int | None  # scalar registers per wave
    vgpr_spills: int | None  # VGPRs spilled to scratch memory
    sgpr_spills: int | None  # SGPRs spilled (into VGPR lanes, or scratch)
    scratch_bytes: int | None  # private segment per lane (spills and private arrays)
    lds_bytes: int | None  # static LDS per workgroup
    occupancy: int | None  # waves per SIMD the compiler expects these figures to allow
    declared_vgprs: int | None = None  # .vgpr_count: on gfx90a and later the unified VGPR + AGPR file
    wavefront_size: int | None = None
    max_flat_workgroup_size: int | None = None
    kernarg_bytes: int | None = None
    dynamic_stack: bool | None = None
    isa_instructions: dict[str, int] | None = (
        None  # opcode -> count in the disassembly; None: no llvm-objdump
    )

    @property
    def spills(self) -> int | None:
        """Registers spilled, VGPRs and SGPRs together (a count: the compiler reports no bytes)."""
        if self.vgpr_spills is None or self.sgpr_spills is None:
            return None
        return self.vgpr_spills + self.sgpr_spills

    @property
    def isa_total(self) -> int | None:
        """The kernel's instructions counted over every class; None where they were not counted."""
        return None if self.isa_instructions is None else sum(self.isa_instructions.values())


class DeviceFunctionMetrics(Record, frozen=True):
    """A non-inlined device function reached from a kernel: ptxas prints a frame for it but no `Used` line."""

    name: str  # demangled, normalised
    mangled: str
    stack_frame: int | None
    spill_stores: int | None
    spill_loads: int | None


class KernelMetrics(Record, frozen=True):
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
    unparsed: tuple[str, ...] = ()  # fields of the `Used` line (or of a remark) this parser does not know
    amdgpu: AmdgpuUsage | None = (
        None  # a HIP kernel: what the AMDGPU compiler reported (registers = its VGPRs)
    )

    @property
    def spills(self) -> int | None:
        """Spill bytes, stores + loads; for a HIP kernel, the registers spilled (VGPRs + SGPRs)."""
        if self.amdgpu is not None:
            return self.amdgpu.spills
        if self.spill_stores is None or self.spill_loads is None:
            return None
        return self.spill_stores + self.spill_loads

    @property
    def shared_bytes(self) -> int | None:
        """Static shared memory; ptxas prints `N bytes smem` only when N > 0, so a parsed entry without it
        uses none."""
        if self.shared_memory is None and self.registers is not None:
            return 0
        return self.shared_memory

    @property
    def ptx_total(self) -> int:
        """Instructions in the entry's PTX body."""
        return sum(self.ptx_instructions.values())

    @property
    def sass_total(self) -> int | None:
        """Instructions in the entry's SASS, when a SASS tool was there."""
        return None if self.sass_instructions is None else sum(self.sass_instructions.values())


class Violation(Record, frozen=True):
    """One failed (or not carried out) check, naming the kernel, arch, metric, limit and value."""

    kernel: str
    arch: str
    metric: str  # "registers", "spills", "forbidden_pattern[ptx]", ...
    limit: int | str  # a number, or the pattern
    value: int | str | None  # the measured number, or how many instructions matched; None = not measured
    message: str
    severity: Severity = Severity.ERROR
    # The rule could not be checked (a SASS pattern without a SASS tool, a figure ptxas did not print): an error
    # that fails the kernel, or a warning where the config allows unchecked rules (`ci.allow_unchecked`).
    unchecked: bool = False


class CompileError(Record, frozen=True):
    """The compiler refused the source: its first error message, where it points, and its log."""

    message: str
    file: str | None
    line: int | None
    arch: str | None
    log: str = ""  # the compiler's stderr, cut to COMPILE_LOG_LIMIT characters

    @property
    def location(self) -> str:
        """file:line where the compiler gave both, else the file, else empty."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""


class KernelResult(Record, frozen=True):
    """The lint outcome of one `[[kernels]]` entry over all its archs."""

    name: str
    source: str  # relative to the config's directory where possible
    source_sha256: Sha256 | None
    line: int | None  # of the [[kernels]] table in gpuemu.toml
    status: KernelStatus
    archs: tuple[str, ...]
    arch_source: ArchSource
    entries: tuple[KernelMetrics, ...] = ()
    violations: tuple[Violation, ...] = ()
    error: CompileError | None = None
    duration_s: float = 0.0

    @property
    def warnings(self) -> tuple[Violation, ...]:
        """The violations of warning severity."""
        return tuple(v for v in self.violations if v.severity is Severity.WARNING)

    @property
    def errors(self) -> tuple[Violation, ...]:
        """The violations of error severity (they fail the gate)."""
        return tuple(v for v in self.violations if v.severity is Severity.ERROR)

    def entry(self, kernel: str, arch: str) -> KernelMetrics | None:
        """The metrics of one kernel function for one arch, if it was compiled."""
        return next((e for e in self.entries if e.kernel == kernel and e.arch == arch), None)


class ToolchainInfo(Record, frozen=True):
    """The CUDA tools the lint stage used (versions only: paths are never written into results)."""

    nvcc: str | None
    ptxas: str | None
    nvcc_build: str | None = None
    sass_tool: str | None = None  # "nvdisasm", "cuobjdump" or None
    sass_tool_version: str | None = None
    demangler: str | None = None
    default_arch: str | None = None
    nvrtc: str | None = None  # set when NVRTC, not nvcc, compiled the .cu sources
    clang: str | None = None  # the clang that compiled the HIP sources (none: no HIP kernel)
    hip: str | None = None  # the version of the HIP headers they were compiled against
    device_libs_clang: str | None = None  # the clang release that built the ROCm device libraries used
    amdgpu_disassembler: str | None = None  # "llvm-objdump 15.0.6"; None: no AMDGPU disassembly


class LintInfo(Record, frozen=True):
    """What the lint stage did as a whole."""

    status: LintStatus = LintStatus.NO_KERNELS
    toolchain: ToolchainInfo | None = None
    reason: str | None = None  # why lint is disabled/unavailable
