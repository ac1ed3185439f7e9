"""The lint stage: validate the kernel specs, compile every kernel x arch in parallel, read what the compiler
did, apply the artifact checks, and return one LintReport.

Raises ConfigError (exit 2) for a spec that cannot be linted as written (missing source, bad arch, ambiguous
or unknown entry, a flag that fights the lint's own) and InfraError (exit 3) when the compiler is missing.
A source that does not compile is not an exception: it is a FAILED kernel carrying the compiler's message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec

from gpuemu_ci.config.model import KernelLanguage, KernelSpec
from gpuemu_ci.errors import ConfigError, InfraError
from gpuemu_ci.lint.compile import (
    DEFAULT_TIMEOUT_S,
    CompileJob,
    CompileOutput,
    SourceKind,
    compile_all,
    parse_compile_error,
    source_kind,
)
from gpuemu_ci.lint.hip_compile import HipCompileOutput, compile_hip_all
from gpuemu_ci.lint.hip_lint import HIP_INSTALL_HINT, check_hip_flags, function_symbols, resolve_hip_archs
from gpuemu_ci.lint.hip_lint import compile_jobs as hip_compile_jobs
from gpuemu_ci.lint.hip_lint import outcome as hip_outcome
from gpuemu_ci.lint.hip_toolchain import HipToolchain, discover_hip_toolchain, is_amd_arch
from gpuemu_ci.lint.model import LintReport, Toolchain
from gpuemu_ci.lint.names import KernelName, kernel_names, select_entries
from gpuemu_ci.lint.outcome import after_failure, final_status
from gpuemu_ci.lint.ptxas_log import FunctionUsage
from gpuemu_ci.lint.rules import Listing, check_limits, check_patterns, validate_checks
from gpuemu_ci.lint.toolchain import arch_supported, discover_toolchain
from gpuemu_ci.results.kernels import (
    COMPILE_LOG_LIMIT,
    ArchSource,
    CompileError,
    DeviceFunctionMetrics,
    KernelMetrics,
    KernelResult,
    KernelStatus,
    LintStatus,
    ToolIdentity,
    Violation,
)

# Flags the lint sets itself; a kernel's `flags` must not override them.
_NVCC_OWN = (
    "-arch",
    "--gpu-architecture",
    "-gencode",
    "--generate-code",
    "-code",
    "--gpu-code",
    "-o",
    "--output-file",
    "-c",
    "--compile",
    "-ptx",
    "--ptx",
    "-cubin",
    "--cubin",
    "-fatbin",
    "--fatbin",
    "-E",
    "--preprocess",
    "-keep-dir",
    "--keep-dir",
    "-lib",
    "--lib",
    "-link",
    "--link",
    "-run",
    "--run",
)
_PTXAS_OWN = ("-arch", "--gpu-name", "-o", "--output-file")
_Output = TypeVar("_Output", CompileOutput, HipCompileOutput)


@dataclass(frozen=True)
class _How:
    """How the compiles run and are judged."""

    timeout: float  # per tool
    allow_unchecked: bool  # a rule that cannot be checked is a warning, not a failure
    stop: threading.Event | None  # set: the compiles under way are killed


_ARCH_SHAPE = re.compile(r"^sm_\d+[a-z]?$")
_INSTALL_HINT = (
    "Install the CUDA toolkit and put nvcc on PATH (or set CUDA_HOME), or install NVIDIA's NVRTC and ptxas "
    "wheels (`pip install nvidia-cuda-nvrtc nvidia-cuda-nvcc`, 13.1 or later); or turn lint off with "
    "`[ci] lint = false`."
)


def _display(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


def _check_flags(spec: KernelSpec, kind: SourceKind) -> None:
    own = _PTXAS_OWN if kind is SourceKind.PTX else _NVCC_OWN
    for flag in spec.flags:
        for o in own:
            if (
                flag == o
                or flag.startswith(o + "=")
                or (o in ("-arch", "-gencode", "-code") and flag.startswith(o))
            ):
                raise ConfigError(
                    f"kernel {spec.name!r}: flag {flag!r} conflicts with how lint compiles; "
                    "set target archs with `archs = [...]` and leave outputs to gpuemu-ci",
                    line=spec.line,
                )
    if kind is SourceKind.PTX and (spec.include_dirs or spec.defines):
        raise ConfigError(
            f"kernel {spec.name!r}: include_dirs/defines have no effect on a .ptx source "
            f"({spec.source.name})",
            line=spec.line,
        )


def _resolve_archs(
    spec: KernelSpec, cli_archs: Sequence[str], toolchain: Toolchain
) -> tuple[tuple[str, ...], ArchSource]:
    cuda_archs = [a for a in cli_archs if not is_amd_arch(a)]  # the gfx ones are for the HIP kernels
    if cuda_archs:
        archs, origin = tuple(cuda_archs), ArchSource.COMMAND_LINE
    elif spec.archs:
        archs, origin = tuple(spec.archs), ArchSource.CONFIG
    else:
        target = None
        if source_kind(spec.source) is SourceKind.PTX:
            m = re.search(
                r"^\s*\.target\s+(sm_\d+[a-z]?)", spec.source.read_text(errors="replace"), re.MULTILINE
            )
            target = m.group(1) if m else None
        if target is not None:
            archs, origin = (target,), ArchSource.PTX_TARGET
        else:
            archs, origin = (toolchain.default_arch or "sm_80",), ArchSource.TOOLCHAIN_DEFAULT
    for arch in archs:
        if arch.startswith("compute_"):
            raise ConfigError(
                f"kernel {spec.name!r}: arch {arch!r} is a virtual arch; lint runs ptxas and needs a real "
                f"one such as sm_{arch.split('_', 1)[1]}",
                line=spec.line,
            )
        if not _ARCH_SHAPE.match(arch) or not arch_supported(arch, toolchain.supported_archs):
            supported = ", ".join(toolchain.supported_archs) or "sm_XX (a real arch, not compute_XX)"
            raise ConfigError(
                f"kernel {spec.name!r}: arch {arch!r} is not one this toolchain (nvcc "
                f"{toolchain.nvcc_version or '?'}) can build; it supports: {supported}",
                line=spec.line,
            )
    return tuple(dict.fromkeys(archs)), origin


def _validate(spec: KernelSpec, root: Path | None) -> KernelSpec:
    source = spec.source if spec.source.is_absolute() else (root or Path.cwd()) / spec.source
    if not source.is_file():
        raise ConfigError(f"kernel {spec.name!r}: source {spec.source} does not exist", line=spec.line)
    spec_abs = dataclasses.replace(spec, source=source)
    if spec.language is KernelLanguage.HIP:
        check_hip_flags(spec_abs)
    else:
        _check_flags(spec_abs, source_kind(source))
    validate_checks(spec.artifact_checks, kernel=spec.name, language=spec.language)
    return spec_abs


def _check_cli_archs(archs: Sequence[str], specs: Sequence[KernelSpec]) -> None:
    """Each --arch is for the kernels of its language (sm_XX: CUDA, gfxNNN: HIP); one no kernel can take is a
    mistake, not something to ignore."""
    languages = {s.language for s in specs}
    for arch in archs:
        language = KernelLanguage.HIP if is_amd_arch(arch) else KernelLanguage.CUDA
        if language not in languages:
            raise ConfigError(
                f"--arch {arch} is an arch for {language.value.upper()} kernels and no selected kernel is one"
            )


def _shared_memory(f: FunctionUsage) -> int | None:
    # ptxas prints `N bytes smem` only when N > 0: with a `Used` line, no field means 0, not unknown.
    if f.shared_memory is not None:
        return f.shared_memory
    return 0 if f.registers is not None else None


def _local_memory(f: FunctionUsage) -> int | None:
    if f.local_memory is not None:  # legacy `lmem` field
        return f.local_memory
    return f.cumulative_stack if f.cumulative_stack is not None else f.stack_frame


def _metrics_for(
    spec: KernelSpec, out: CompileOutput, names: dict[str, KernelName], toolchain: Toolchain, source: str
) -> list[tuple[KernelMetrics, dict[str, list[Listing] | None]]]:
    log = out.ptxas
    entries = log.entries()
    available = [names[f.name] for f in entries]
    chosen = {k.raw for k in select_entries(available, spec.entries, kernel=spec.name, source=source)}
    devices = {f.name: f for f in log.device_functions()}
    sass = {f.name: f for f in out.sass} if out.sass is not None else None
    kind = out.job.kind
    flags = (*spec.flags, *(f"-D{d}" for d in spec.defines))
    identity = ToolIdentity(
        nvcc=toolchain.nvcc_version if kind is SourceKind.CUDA else None,
        nvrtc=toolchain.nvrtc_version if kind is SourceKind.CUDA else None,
        ptxas=toolchain.ptxas_version,
        flags=flags,
        arch=out.job.arch,
    )
    result = []
    for f in entries:
        if f.name not in chosen:
            continue
        n = names[f.name]
        reach = out.ptx.reachable(f.name) if out.ptx is not None else ()
        ptx_fn = out.ptx.function(f.name) if out.ptx is not None else None
        called = [r.name for r in reach if r.name != f.name]
        device_metrics = tuple(
            DeviceFunctionMetrics(
                names[c].demangled, names[c].mangled, d.stack_frame, d.spill_stores, d.spill_loads
            )
            for c in called
            if (d := devices.get(c)) is not None
        )
        sass_fn = sass.get(f.name) if sass is not None else None
        metrics = KernelMetrics(
            kernel=n.demangled,
            mangled=n.mangled,
            arch=f.arch or out.job.arch,
            registers=f.registers,
            stack_frame=f.stack_frame,
            spill_stores=f.spill_stores,
            spill_loads=f.spill_loads,
            shared_memory=_shared_memory(f),
            local_memory=_local_memory(f),
            constant=dict(f.constant),
            barriers=f.barriers,
            ptx_instructions=ptx_fn.opcode_counts() if ptx_fn is not None else {},
            sass_instructions=sass_fn.opcode_counts() if sass_fn is not None else None,
            toolchain=identity,
            device_functions=device_metrics,
            unparsed=f.unparsed,
        )
        # A listing that lacks the kernel is "not available", never an empty pass.
        ptx_listing: list[Listing] | None = None
        if ptx_fn is not None:
            ptx_listing = [
                Listing(names[r.name].demangled, tuple(i.text for i in r.instructions)) for r in reach
            ]
        sass_listing: list[Listing] | None = None
        if sass is not None and f.name in sass:
            wanted = [f.name, *called]
            sass_listing = [
                Listing(names[w].demangled, tuple(i.text for i in sass[w].body)) for w in wanted if w in sass
            ]
        result.append((metrics, {"ptx": ptx_listing, "sass": sass_listing}))
    return result


def _kernel_result(
    spec: KernelSpec,
    outputs: list[CompileOutput],
    archs: tuple[str, ...],
    origin: ArchSource,
    names: dict[str, KernelName],
    toolchain: Toolchain,
    root: Path | None,
    allow_unchecked: bool,
) -> KernelResult:
    source = _display(spec.source, root)
    entries: list[KernelMetrics] = []
    violations = []
    error = None
    status = KernelStatus.PASSED
    for out in outputs:
        if out.unsupported is not None:
            # NVRTC, the front end here, cannot compile this source as nvcc would: no numbers from any other
            # compile are reported; the kernel is not linted, and says why.
            if error is None:
                error = CompileError(
                    f"not linted: NVRTC (the compiler for .cu sources where there is no nvcc, as in the "
                    f"Action's image) cannot compile this source as nvcc would: {out.unsupported}. Keep the "
                    "kernels in a device-only .cu, or lint it where nvcc is installed",
                    None,
                    None,
                    out.job.arch,
                    out.log[-COMPILE_LOG_LIMIT:],
                )
            if status is not KernelStatus.FAILED:
                status = KernelStatus.ERROR
            continue
        if not out.ok:
            if error is None:
                err = parse_compile_error(out)
                error = msgspec.structs.replace(
                    err, file=_display(Path(err.file), root) if err.file else None
                )
            status = after_failure(status, tool_failure=out.timed_out or out.returncode < 0)
            continue
        reasons = {
            "sass": out.sass_note or "the disassembly has no code for this kernel",
            "ptx": "the PTX has no body for this kernel",
        }
        for metrics, listings in _metrics_for(spec, out, names, toolchain, source):
            entries.append(metrics)
            violations += check_limits(metrics, spec.artifact_checks, allow_unchecked=allow_unchecked)
            violations += check_patterns(
                metrics,
                spec.artifact_checks,
                listings,
                missing_reason=reasons,
                allow_unchecked=allow_unchecked,
            )
    status = final_status(spec, source, status, entries, violations, error)
    return _record(spec, source, (archs, origin), (status, entries, violations, error), outputs)


def _record(
    spec: KernelSpec,
    source: str,
    archs: tuple[tuple[str, ...], ArchSource],
    outcome: tuple[KernelStatus, list[KernelMetrics], list[Violation], CompileError | None],
    outputs: Sequence[CompileOutput] | Sequence[HipCompileOutput],
) -> KernelResult:
    """The results document's record of one [[kernels]] entry: its outcome over its archs."""
    status, entries, violations, error = outcome
    return KernelResult(
        name=spec.name,
        source=source,
        source_sha256=hashlib.sha256(spec.source.read_bytes()).hexdigest(),
        line=spec.line,
        status=status,
        archs=archs[0],
        arch_source=archs[1],
        entries=tuple(entries),
        violations=tuple(violations),
        error=error,
        duration_s=sum(o.duration_s for o in outputs),
    )


def _per_spec(
    plan: Sequence[tuple[KernelSpec, tuple[str, ...], ArchSource]], outputs: Sequence[_Output]
) -> Iterator[tuple[KernelSpec, tuple[str, ...], ArchSource, Sequence[_Output]]]:
    """Each planned spec with the outputs of its compiles (one per arch, in plan order)."""
    index = 0
    for spec, arch_list, origin in plan:
        yield spec, arch_list, origin, outputs[index : index + len(arch_list)]
        index += len(arch_list)


def check_kernels(
    kernels: Sequence[KernelSpec],
    *,
    archs: Sequence[str] | None = None,
    root: Path | None = None,
    toolchain: Toolchain | None = None,
    hip_toolchain: HipToolchain | None = None,
) -> None:
    """Everything `lint_kernels` would refuse as a config error (a missing source, a bad or unsupported arch, a
    flag that fights the lint), found without compiling: `gpuemu-ci run` checks this before any op runs, so
    a mistake costs seconds, not a whole suite. A missing toolchain is left to the lint step, which records
    it with the results (exit 3)."""
    if not kernels:
        return
    specs = [_validate(k, root) for k in kernels]
    _check_cli_archs(archs or (), specs)
    cuda = [s for s in specs if s.language is KernelLanguage.CUDA]
    hip = [s for s in specs if s.language is KernelLanguage.HIP]
    tc = (toolchain if toolchain is not None else discover_toolchain()) if cuda else None
    if tc is not None and (tc.nvcc is not None or tc.ptxas is not None):
        for spec in cuda:
            _resolve_archs(spec, archs or (), tc)
    htc = (hip_toolchain if hip_toolchain is not None else discover_hip_toolchain()) if hip else None
    if htc is not None and not htc.missing:
        for spec in hip:
            resolve_hip_archs(spec, archs or (), htc)


def lint_kernels(
    kernels: Sequence[KernelSpec],
    *,
    archs: Sequence[str] | None = None,
    jobs: int | None = None,
    root: Path | None = None,
    toolchain: Toolchain | None = None,
    hip_toolchain: HipToolchain | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    allow_unchecked: bool = False,
    stop: threading.Event | None = None,
) -> LintReport:
    """Lint every kernel spec for its archs (`archs` overrides them all, each for the kernels of its language),
    `jobs` compiles at a time.

    `root` (the config's directory) makes source paths in the report relative. `toolchain` (CUDA) and
    `hip_toolchain` default to what `discover_toolchain()` and `discover_hip_toolchain()` find; each is looked
    for only when a kernel of its language is configured. A rule that cannot be checked fails its kernel unless
    `allow_unchecked` (`[ci] allow_unchecked`), which makes it a warning. Once `stop` is set the compiles under
    way are killed."""
    started = time.perf_counter()
    if not kernels:
        return LintReport(status=LintStatus.NO_KERNELS, toolchain=None, reason="no [[kernels]] configured")
    specs = [_validate(k, root) for k in kernels]
    _check_cli_archs(archs or (), specs)
    cuda = [s for s in specs if s.language is KernelLanguage.CUDA]
    hip = [s for s in specs if s.language is KernelLanguage.HIP]
    tc = (toolchain if toolchain is not None else discover_toolchain()) if cuda else None
    htc = (hip_toolchain if hip_toolchain is not None else discover_hip_toolchain()) if hip else None
    results: dict[str, KernelResult] = {}
    compiles = 0
    if tc is not None:
        done, compiles = _lint_cuda(cuda, tc, archs or (), jobs, root, _How(timeout, allow_unchecked, stop))
        results.update(done)
    if htc is not None:
        done, count = _lint_hip(
            hip,
            htc,
            archs or (),
            jobs,
            root,
            _How(timeout, allow_unchecked, stop),
            cxxfilt=tc.cxxfilt if tc else None,
        )
        results.update(done)
        compiles += count
    return LintReport(
        status=LintStatus.RAN,
        toolchain=tc,
        hip_toolchain=htc,
        kernels=tuple(results[s.name] for s in specs),
        duration_s=time.perf_counter() - started,
        jobs=max(1, min(jobs or os.cpu_count() or 1, compiles)),
    )


def _lint_cuda(
    specs: Sequence[KernelSpec],
    tc: Toolchain,
    archs: Sequence[str],
    jobs: int | None,
    root: Path | None,
    how: _How,
) -> tuple[dict[str, KernelResult], int]:
    """The CUDA kernels' results by name, and how many compiles it took."""
    timeout, allow_unchecked, stop = how.timeout, how.allow_unchecked, how.stop
    kinds = {source_kind(s.source) for s in specs}
    if SourceKind.CUDA in kinds and tc.frontend is None:
        raise InfraError(
            f"neither nvcc nor NVRTC was found, so the CUDA kernels cannot be linted. {_INSTALL_HINT}"
        )
    if SourceKind.PTX in kinds and tc.ptxas is None:
        raise InfraError(f"ptxas was not found, so the .ptx kernels cannot be linted. {_INSTALL_HINT}")
    plan = [(s, *_resolve_archs(s, archs, tc)) for s in specs]
    compile_jobs = [
        CompileJob(s.name, s.source, arch, s.flags, s.include_dirs, s.defines)
        for s, arch_list, _ in plan
        for arch in arch_list
    ]
    outputs = compile_all(compile_jobs, tc, workers=jobs, timeout=timeout, stop=stop)
    raw = [f.name for o in outputs for f in o.ptxas.functions]
    raw += [f.name for o in outputs if o.ptx is not None for f in o.ptx.functions]
    names = kernel_names(raw, tc.cxxfilt)
    results = {
        spec.name: _kernel_result(spec, list(mine), arch_list, origin, names, tc, root, allow_unchecked)
        for spec, arch_list, origin, mine in _per_spec(plan, outputs)
    }
    return results, len(compile_jobs)


def _lint_hip(
    specs: Sequence[KernelSpec],
    tc: HipToolchain,
    archs: Sequence[str],
    jobs: int | None,
    root: Path | None,
    how: _How,
    *,
    cxxfilt: str | None,
) -> tuple[dict[str, KernelResult], int]:
    """The HIP kernels' results by name, and how many compiles it took."""
    timeout, allow_unchecked, stop = how.timeout, how.allow_unchecked, how.stop
    if tc.missing:
        raise InfraError(
            f"the HIP kernels cannot be linted: {', '.join(tc.missing)} not found. {HIP_INSTALL_HINT}"
        )
    plan = [(s, *resolve_hip_archs(s, archs, tc)) for s in specs]
    jobs_list = [job for s, arch_list, _ in plan for job in hip_compile_jobs(s, arch_list)]
    outputs = compile_hip_all(jobs_list, tc, workers=jobs, timeout=timeout, stop=stop)
    names = kernel_names(
        [n for o in outputs for n in function_symbols(o)], cxxfilt or shutil.which("c++filt")
    )
    results = {}
    for spec, arch_list, origin, mine in _per_spec(plan, outputs):
        source = _display(spec.source, root)
        status, entries, violations, error = hip_outcome(
            spec, mine, names, tc, source, allow_unchecked=allow_unchecked
        )
        if error is not None and error.file:
            error = msgspec.structs.replace(error, file=_display(Path(error.file), root))
        results[spec.name] = _record(
            spec, source, (arch_list, origin), (status, entries, violations, error), mine
        )
    return results, len(jobs_list)


@dataclass(frozen=True)
class VariantLint:
    """One text of a kernel's source, linted as the kernel's own file would be (`gpuemu-ci mutate`)."""

    result: KernelResult  # its `source` names the kernel's own file
    ptx_digest: str | None  # of every function's PTX, on every arch; None when a compile produced none
    ptx_counts: dict[str, int]  # opcodes of the entries on the first arch, summed over the entries


def lint_variants(
    spec: KernelSpec,
    texts: Sequence[str],
    *,
    archs: Sequence[str] | None = None,
    jobs: int | None = None,
    root: Path | None = None,
    toolchain: Toolchain | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    allow_unchecked: bool = False,
) -> list[VariantLint]:
    """Lint each text as if it were the source of `spec` (its flags, defines, archs and checks), in parallel.

    Each text is written to a private temporary directory under the file's own name (the kernel's file is
    never written) and compiled with the file's directory first on the include path, so that its
    `#include "..."` find what they find next to the file. Raises as lint_kernels does for a spec that cannot
    be linted; a text that does not compile is a FAILED result with the compiler's message."""
    tc = toolchain if toolchain is not None else discover_toolchain()
    original = _validate(spec, root)
    if source_kind(original.source) is not SourceKind.CUDA:
        raise ConfigError(f"kernel {spec.name!r}: only a .cu source can be linted from other text")
    if tc.frontend is None:
        raise InfraError(
            f"neither nvcc nor NVRTC was found, so kernel {spec.name!r} cannot be linted. {_INSTALL_HINT}"
        )
    arch_list, origin = _resolve_archs(original, archs or (), tc)
    display = _display(original.source, root)
    with contextlib.ExitStack() as stack:
        variants = []
        for text in texts:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuemu-variant-")))
            path = directory / original.source.name
            path.write_text(text, encoding="utf-8")
            includes = (original.source.parent, *original.include_dirs)
            variants.append(dataclasses.replace(original, source=path, include_dirs=includes))
        compile_jobs = [
            CompileJob(v.name, v.source, arch, v.flags, v.include_dirs, v.defines)
            for v in variants
            for arch in arch_list
        ]
        outputs = compile_all(compile_jobs, tc, workers=jobs, timeout=timeout)
        raw = [f.name for o in outputs for f in o.ptxas.functions]
        raw += [f.name for o in outputs if o.ptx is not None for f in o.ptx.functions]
        names = kernel_names(raw, tc.cxxfilt)
        linted = []
        for number, variant in enumerate(variants):
            mine = outputs[number * len(arch_list) : (number + 1) * len(arch_list)]
            try:
                result = _kernel_result(
                    variant, list(mine), arch_list, origin, names, tc, root, allow_unchecked
                )
            except ConfigError as exc:  # it compiles, but to no kernel: the change removed what is linted
                result = KernelResult(
                    name=spec.name,
                    source=display,
                    source_sha256=hashlib.sha256(variant.source.read_bytes()).hexdigest(),
                    line=spec.line,
                    status=KernelStatus.FAILED,
                    archs=arch_list,
                    arch_source=origin,
                    error=CompileError(exc.message, None, None, arch_list[0]),
                )
            linted.append(
                VariantLint(_named(result, display, variant.source), _ptx_digest(mine), _counts(result))
            )
    return linted


def _named(result: KernelResult, display: str, path: Path) -> KernelResult:
    """The result of a variant compiled from `path`, naming the kernel's own file instead."""
    error = result.error
    if error is not None and error.file is not None and Path(error.file).name == path.name:
        error = msgspec.structs.replace(error, file=display)
    return msgspec.structs.replace(result, source=display, error=error)


def _ptx_digest(outputs: Sequence[CompileOutput]) -> str | None:
    """A digest of the PTX of every compile (comments left out): the same digest, the same program on every
    arch."""
    digest = hashlib.sha256()
    for out in outputs:
        if out.ptx is None:
            return None
        digest.update(f"{out.job.arch}\0{out.ptx.code}\0".encode())
    return digest.hexdigest()


def _counts(result: KernelResult) -> dict[str, int]:
    first = result.archs[0] if result.archs else None
    counts: dict[str, int] = {}
    for entry in result.entries:
        if entry.arch == first:
            for opcode, count in entry.ptx_instructions.items():
                counts[opcode] = counts.get(opcode, 0) + count
    return counts
