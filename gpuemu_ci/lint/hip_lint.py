"""The lint of HIP kernels: validate the specs, compile every kernel x gfx arch, read what the AMDGPU compiler
reported for each kernel, apply the artifact checks, and return one KernelResult per spec.

The figures are the compiler's own: clang's kernel resource usage remarks (VGPRs, AGPRs, SGPRs, scratch,
spills, LDS, occupancy), with the code object's metadata note for what the remarks do not say (the VGPRs it
declares to the runtime, wavefront size, workgroup size limit, kernel arguments, dynamic stack) and the
llvm-objdump disassembly for instruction counts and patterns.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuemu_ci.config.model import KernelSpec
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.lint.amdgpu_code_object import KernelNote
from gpuemu_ci.lint.amdgpu_remarks import FunctionRemarks
from gpuemu_ci.lint.hip_compile import HipCompileJob, HipCompileOutput
from gpuemu_ci.lint.hip_toolchain import HipToolchain, arch_processor, is_amd_arch
from gpuemu_ci.lint.names import KernelName, select_entries
from gpuemu_ci.lint.outcome import after_failure, final_status
from gpuemu_ci.lint.rules import Listing, check_limits, check_patterns
from gpuemu_ci.results.kernels import (
    COMPILE_LOG_LIMIT,
    AmdgpuUsage,
    ArchSource,
    CompileError,
    KernelMetrics,
    KernelStatus,
    ToolIdentity,
    Violation,
)

# Flags the lint sets itself, or that make the device compile something other than one code object per arch.
HIP_OWN_FLAGS = (
    "--offload-arch",
    "--cuda-gpu-arch",
    "--no-offload-arch",
    "-o",
    "-c",
    "-S",
    "-E",
    "-emit-llvm",
    "-x",
    "--cuda-device-only",
    "--cuda-host-only",
    "--offload-device-only",
    "--offload-host-only",
    "--gpu-bundle-output",
    "--no-gpu-bundle-output",
    "--genco",
    "-fgpu-rdc",
)
HIP_INSTALL_HINT = (
    "Install a clang with the AMDGPU backend and the ROCm device libraries and HIP headers: on Debian 12 "
    "`apt-get install clang-15 lld-15 llvm-15 rocm-device-libs libamdhip64-dev` (or `hipcc`, which pulls them "
    "in), or ROCm itself (/opt/rocm, or set ROCM_PATH); or turn lint off with `[ci] lint = false`."
)


def check_hip_flags(spec: KernelSpec) -> None:
    """Refuses (ConfigError) a kernel flag the HIP lint sets itself or that would leave no code object to
    read, saying why."""
    for flag in spec.flags:
        for own in HIP_OWN_FLAGS:
            if flag == own or flag.startswith(own + "="):
                why = (
                    "with -fgpu-rdc the device code is linked later, so no code object (and no register figures) "
                    "comes out of one source; lint it without"
                    if own == "-fgpu-rdc"
                    else "set target archs with `archs = [...]` and leave outputs to gpuemu-ci"
                )
                raise ConfigError(
                    f"kernel {spec.name!r}: flag {flag!r} conflicts with how lint compiles; {why}",
                    line=spec.line,
                )


def resolve_hip_archs(
    spec: KernelSpec, cli_archs: Sequence[str], toolchain: HipToolchain
) -> tuple[tuple[str, ...], ArchSource]:
    """The gfx archs to compile for: --arch's gfx archs, else the config's, else the toolchain's default."""
    chosen = [a for a in cli_archs if is_amd_arch(a)]
    if chosen:
        archs, origin = tuple(chosen), ArchSource.COMMAND_LINE
    elif spec.archs:
        archs, origin = tuple(spec.archs), ArchSource.CONFIG
    else:
        default = toolchain.default_arch
        if default is None:
            raise ConfigError(
                f"kernel {spec.name!r}: no gfx arch is given and the toolchain (clang "
                f"{toolchain.clang_version or '?'}) supports none with these device libraries",
                line=spec.line,
            )
        archs, origin = (default,), ArchSource.TOOLCHAIN_DEFAULT
    supported = toolchain.supported_archs
    for arch in archs:
        processor = arch_processor(arch)
        if not is_amd_arch(arch) or processor not in supported:
            raise ConfigError(
                f"kernel {spec.name!r}: arch {arch!r} is not one this toolchain can build for: "
                f"{_why_unsupported(processor, toolchain)}; it supports: {', '.join(supported) or 'none'}",
                line=spec.line,
            )
    return tuple(dict.fromkeys(archs)), origin


def _why_unsupported(processor: str, toolchain: HipToolchain) -> str:
    if not is_amd_arch(processor):
        return "a HIP kernel needs a gfx arch such as gfx90a"
    if processor not in toolchain.clang_archs:
        return f"clang {toolchain.clang_version or '?'} does not know it"
    return f"the ROCm device libraries here ({toolchain.device_libs}) have no {processor} build"


def compile_jobs(spec: KernelSpec, archs: tuple[str, ...]) -> list[HipCompileJob]:
    """One compile job per arch for a HIP kernel (LLVM IR asked for too when the kernel has patterns to
    match)."""
    checks = spec.artifact_checks
    patterns = (*checks.required_patterns, *checks.forbidden_patterns)
    return [
        HipCompileJob(
            spec.name, spec.source, arch, spec.flags, spec.include_dirs, spec.defines, want_ir=bool(patterns)
        )
        for arch in archs
    ]


def kernel_symbols(out: HipCompileOutput) -> list[str]:
    """The kernels of a compile (the metadata note's list), as mangled symbols."""
    return [k.name for k in out.code_object.kernels] if out.code_object is not None else []


def function_symbols(out: HipCompileOutput) -> list[str]:
    """Every function of a compile a report may name: its kernels and the functions they call."""
    names = kernel_symbols(out) + [f.name for f in out.isa or ()]
    return names + [f.name for f in out.ir.functions] if out.ir is not None else names


def usage(remarks: FunctionRemarks, note: KernelNote | None, isa: dict[str, int] | None) -> AmdgpuUsage:
    """A kernel's resource usage on one arch, from clang's remarks, the code object's metadata note and the
    ISA's opcode counts (when disassembled)."""
    return AmdgpuUsage(
        vgprs=remarks.vgprs,
        agprs=remarks.agprs,
        sgprs=remarks.sgprs,
        vgpr_spills=remarks.vgpr_spills,
        sgpr_spills=remarks.sgpr_spills,
        scratch_bytes=remarks.scratch_bytes,
        lds_bytes=remarks.lds_bytes,
        occupancy=remarks.occupancy,
        declared_vgprs=note.vgprs if note else None,
        wavefront_size=note.wavefront_size if note else None,
        max_flat_workgroup_size=note.max_flat_workgroup_size if note else None,
        kernarg_bytes=note.kernarg_bytes if note else None,
        dynamic_stack=remarks.dynamic_stack
        if remarks.dynamic_stack is not None
        else (note.dynamic_stack if note else None),
        isa_instructions=isa,
    )


def _identity(spec: KernelSpec, toolchain: HipToolchain, arch: str) -> ToolIdentity:
    flags = (*spec.flags, *(f"-D{d}" for d in spec.defines))
    return ToolIdentity(
        nvcc=None,
        ptxas=None,
        flags=flags,
        arch=arch,
        clang=toolchain.clang_version,
        hip=toolchain.hip_version,
    )


def _listings(
    out: HipCompileOutput, symbol: str, names: dict[str, KernelName]
) -> dict[str, list[Listing] | None]:
    """The code patterns see: the kernel and every function it calls, in its disassembly and its IR."""
    reach = out.ir.reachable(symbol) if out.ir is not None else ()

    def shown(raw: str) -> str:
        return names[raw].demangled if raw in names else raw

    ir = [Listing(shown(f.name), f.instructions) for f in reach] if reach else None
    isa: list[Listing] | None = None
    if out.isa is not None:
        by_name = {f.name: f for f in out.isa}
        wanted = [symbol, *(f.name for f in reach if f.name != symbol)]
        isa = [
            Listing(shown(w), tuple(i.text for i in by_name[w].instructions)) for w in wanted if w in by_name
        ]
        isa = isa if symbol in by_name else None
    return {"amdgcn": isa, "llvm-ir": ir}


def entry_metrics(
    spec: KernelSpec,
    out: HipCompileOutput,
    names: dict[str, KernelName],
    toolchain: HipToolchain,
    source: str,
    *,
    allow_unchecked: bool = False,
) -> tuple[list[KernelMetrics], list[Violation], str | None]:
    """(metrics, violations) of the selected kernels of one compile, or a tool error when the compiler gave
    no figures for a kernel of its code object."""
    assert out.code_object is not None
    symbols = kernel_symbols(out)
    chosen = {
        k.raw
        for k in select_entries([names[s] for s in symbols], spec.entries, kernel=spec.name, source=source)
    }
    isa = {f.name: f for f in out.isa} if out.isa is not None else None
    reasons = {
        "amdgcn": out.isa_note or "the disassembly has no code for this kernel",
        "llvm-ir": out.ir_note or "the LLVM IR has no body for this kernel",
    }
    metrics: list[KernelMetrics] = []
    violations: list[Violation] = []
    for symbol in symbols:
        if symbol not in chosen:
            continue
        remarks = out.remarks.function(symbol)
        if remarks is None or not remarks.is_kernel:
            return (
                [],
                [],
                (
                    f"clang {toolchain.clang_version or '?'} printed no resource usage remark for kernel {symbol} "
                    f"({out.job.arch}); lint needs clang 15 or later"
                ),
            )
        note = out.code_object.kernel(symbol)
        amd = usage(remarks, note, isa[symbol].opcode_counts() if isa is not None and symbol in isa else None)
        m = KernelMetrics(
            kernel=names[symbol].demangled,
            mangled=names[symbol].mangled,
            arch=out.job.arch,
            registers=amd.vgprs,
            stack_frame=amd.scratch_bytes,
            spill_stores=None,
            spill_loads=None,
            shared_memory=amd.lds_bytes,
            local_memory=amd.scratch_bytes,
            constant={},
            barriers=None,
            ptx_instructions={},
            sass_instructions=None,
            toolchain=_identity(spec, toolchain, out.job.arch),
            unparsed=(*remarks.unparsed, *(f"metadata {f}" for f in (note.unparsed if note else ()))),
            amdgpu=amd,
        )
        metrics.append(m)
        violations += check_limits(m, spec.artifact_checks, allow_unchecked=allow_unchecked)
        violations += check_patterns(
            m,
            spec.artifact_checks,
            _listings(out, symbol, names),
            missing_reason=reasons,
            allow_unchecked=allow_unchecked,
        )
    return metrics, violations, None


def compile_error(out: HipCompileOutput) -> CompileError:
    """The first error clang printed, with the file and line it points at."""
    log, arch = out.log[-COMPILE_LOG_LIMIT:], out.job.arch
    if out.timed_out:
        return CompileError(
            f"the compiler did not finish within the time limit ({arch})", None, None, arch, log
        )
    if out.tool_error is not None:
        return CompileError(out.tool_error, None, None, arch, log)
    errors = out.remarks.errors()
    if errors:
        return CompileError(errors[0].message, errors[0].file, errors[0].line, arch, log)
    lines = [ln.strip() for ln in out.log.splitlines() if ln.strip()]
    first = lines[0] if lines else f"clang exited with status {out.returncode} and printed nothing"
    return CompileError(first, None, None, arch, log)


def outcome(
    spec: KernelSpec,
    outputs: Sequence[HipCompileOutput],
    names: dict[str, KernelName],
    toolchain: HipToolchain,
    source: str,
    *,
    allow_unchecked: bool = False,
) -> tuple[KernelStatus, list[KernelMetrics], list[Violation], CompileError | None]:
    """The outcome of one HIP [[kernels]] entry over its archs: (status, metrics, violations, first error). A
    rule that cannot be checked fails unless `allow_unchecked`."""
    entries: list[KernelMetrics] = []
    violations: list[Violation] = []
    error: CompileError | None = None
    status = KernelStatus.PASSED
    for out in outputs:
        if not out.ok:
            error = error or compile_error(out)
            tool_failure = out.timed_out or out.returncode < 0 or out.tool_error is not None
            status = after_failure(status, tool_failure=tool_failure)
            continue
        metrics, found, missing = entry_metrics(
            spec, out, names, toolchain, source, allow_unchecked=allow_unchecked
        )
        if missing is not None:  # the compiler gave no figures: the toolchain's failure, not the code's
            error = error or CompileError(missing, None, None, out.job.arch, out.log[-COMPILE_LOG_LIMIT:])
            status = after_failure(status, tool_failure=True)
            continue
        entries += metrics
        violations += found
    return final_status(spec, source, status, entries, violations, error), entries, violations, error
