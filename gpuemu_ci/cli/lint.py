"""`gpuemu-ci lint`: compile every [[kernels]] entry, report what ptxas did, apply the artifact checks.

A human table goes to stderr; `--json` prints the LintReport document on stdout. Exit codes: 0 clean,
1 a check failed or a kernel does not compile, 2 config or usage error, 3 no toolchain.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import click

from gpuemu_ci.cli.options import config_option, format_option
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import KernelSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.lint.model import LintReport
from gpuemu_ci.lint.run import lint_kernels
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import KernelMetrics, KernelResult, KernelStatus, LintStatus

_LOG_LINES = 12  # compiler output shown under a compile error


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _row(k: KernelResult, e: KernelMetrics) -> list[str]:
    cmem = ",".join(f"{b}:{n}" for b, n in sorted(e.constant.items())) or "-"
    sass = "-" if e.sass_instructions is None else str(sum(e.sass_instructions.values()))
    spills = f"{_opt(e.spill_stores)}/{_opt(e.spill_loads)}"
    return [
        k.name,
        e.kernel,
        e.arch,
        _opt(e.registers),
        _opt(e.stack_frame),
        spills,
        _opt(e.shared_memory),
        _opt(e.local_memory),
        cmem,
        _opt(e.barriers),
        str(sum(e.ptx_instructions.values())),
        sass,
    ]


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]


_CUDA_HEADER = [
    "CONFIG",
    "KERNEL",
    "ARCH",
    "REGS",
    "STACK",
    "SPILL ST/LD",
    "SMEM",
    "LMEM",
    "CMEM",
    "BAR",
    "PTX",
    "SASS",
]
_HIP_HEADER = [
    "CONFIG",
    "KERNEL",
    "ARCH",
    "VGPR",
    "AGPR",
    "SGPR",
    "SPILL V/S",
    "SCRATCH",
    "LDS",
    "OCC",
    "WAVE",
    "ISA",
]


def _hip_row(k: KernelResult, e: KernelMetrics) -> list[str]:
    a = e.amdgpu
    assert a is not None
    return [
        k.name,
        e.kernel,
        e.arch,
        _opt(a.vgprs),
        _opt(a.agprs),
        _opt(a.sgprs),
        f"{_opt(a.vgpr_spills)}/{_opt(a.sgpr_spills)}",
        _opt(a.scratch_bytes),
        _opt(a.lds_bytes),
        _opt(a.occupancy),
        _opt(a.wavefront_size),
        _opt(a.isa_total),
    ]


def _toolchain_lines(report: LintReport) -> list[str]:
    lines = []
    tc, hip = report.toolchain, report.hip_toolchain
    if tc is not None:
        sass = (
            f"{tc.sass_tool} {tc.sass_tool_version or ''}".strip()
            if tc.sass_tool
            else "none (no cuobjdump/nvdisasm)"
        )
        lines.append(f"lint: nvcc {tc.nvcc_version or '-'}, ptxas {tc.ptxas_version or '-'}, SASS: {sass}")
    if hip is not None:
        disassembler = "llvm-objdump" if hip.objdump else "none (no llvm-objdump)"
        lines.append(
            f"lint: HIP: clang {hip.clang_version or '-'}, HIP {hip.hip_version or '-'}, device libraries of "
            f"clang {hip.device_libs_clang or '?'}, ISA: {disassembler}"
        )
    lines[-1] += (
        f"; {len(report.kernels)} kernel(s), {report.jobs} parallel job(s), {report.duration_s:.1f} s"
    )
    if hip is not None and hip.mismatch:
        lines.append(f"lint: WARNING: {hip.mismatch}")
    return lines


def format_report(report: LintReport) -> str:
    """The human summary: toolchains, one row per kernel entry x arch (a table for CUDA, one for HIP: their
    compilers report different figures), then failures, errors and warnings."""
    if report.status is not LintStatus.RAN or (report.toolchain is None and report.hip_toolchain is None):
        return f"lint {report.status.value}: {report.reason or ''}".rstrip()
    lines = _toolchain_lines(report)
    entries = [(k, e) for k in report.kernels for e in k.entries]
    cuda = [_row(k, e) for k, e in entries if e.amdgpu is None]
    hip = [_hip_row(k, e) for k, e in entries if e.amdgpu is not None]
    if cuda:
        lines += ["", *_table(cuda, _CUDA_HEADER)]
    if hip:
        lines += ["", *_table(hip, _HIP_HEADER)]
        lines.append(
            "(SPILL V/S: VGPRs/SGPRs spilled; SCRATCH: bytes per lane; LDS: bytes per workgroup; OCC: waves per SIMD)"
        )
    for k in report.kernels:
        where = f"{k.source}, config line {k.line}" if k.line else k.source
        defaults = " (default arch)" if k.arch_source.value == "toolchain_default" else ""
        errors = [v for v in k.violations if v.severity is Severity.ERROR]
        if k.error is not None:
            loc = f"{k.error.location}: " if k.error.location else ""
            title = (
                f"ERROR {k.name} ({where}) was not linted for {k.error.arch}{defaults}:"
                if k.status is KernelStatus.ERROR
                else f"FAIL {k.name} ({where}) does not compile for {k.error.arch}{defaults}:"
            )
            lines += ["", title, f"  {loc}error: {k.error.message}"]
            lines += [f"    | {ln}" for ln in k.error.log.strip().splitlines()[:_LOG_LINES]]
        if errors:
            lines += ["", f"FAIL {k.name} ({where}): {len(errors)} violation(s)"]
            lines += [f"  {v.message}" for v in errors]
        if k.warnings:
            lines += ["", f"WARN {k.name} ({where}): {len(k.warnings)} check(s) NOT CARRIED OUT (allowed)"]
            lines += [f"  {v.message}" for v in k.warnings]
    failed, errored = len(report.failed), len(report.errored)
    passed = sum(1 for k in report.kernels if k.status is KernelStatus.PASSED)
    warnings = sum(len(k.warnings) for k in report.kernels)
    summary = f"lint: {passed} passed, {failed} failed"
    if errored:
        summary += f", {errored} error (toolchain)"
    if warnings:
        summary += f", {warnings} check(s) not carried out"
    lines += ["", summary]
    return "\n".join(lines)


def select_kernels(kernels: Sequence[KernelSpec], names: Sequence[str]) -> tuple[KernelSpec, ...]:
    """The [[kernels]] entries named by --kernel (all when none are named); unknown names are UsageErrors."""
    if not names:
        return tuple(kernels)
    known = {k.name: k for k in kernels}
    unknown = [n for n in names if n not in known]
    if unknown:
        listing = ", ".join(sorted(known)) or "(no [[kernels]] in the config)"
        raise UsageError(f"--kernel {unknown[0]!r} is not a [[kernels]] name; the config has: {listing}")
    return tuple(known[n] for n in dict.fromkeys(names))


def ptx_kernel(kernels: Sequence[KernelSpec], names: Sequence[str], ptx: Path) -> KernelSpec:
    """The kernel `--ptx FILE` is linted as: the [[kernels]] entry named by --kernel (its checks and archs, the
    file as its source), or, without --kernel, the only entry; a name the config lacks gets no checks (its
    resource usage is still reported)."""
    if len(names) > 1:
        raise UsageError("--ptx lints one kernel: give one --kernel")
    known = {k.name: k for k in kernels}
    name = names[0] if names else (next(iter(known)) if len(known) == 1 else ptx.stem)
    spec = known.get(name) or KernelSpec(name=name, source=ptx.resolve(), archs=())
    return dataclasses.replace(spec, source=ptx.resolve(), flags=(), include_dirs=(), defines=())


@click.command("lint")
@config_option
@click.option(
    "--kernel",
    "kernel_names",
    multiple=True,
    metavar="NAME",
    help="Lint only this [[kernels]] entry (repeatable).",
)
@click.option(
    "--arch",
    "archs",
    multiple=True,
    metavar="ARCH",
    help="Target arch for every kernel of its language (sm_XX: CUDA, gfxNNN: HIP), instead of the config's "
    "archs (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the lint report as JSON on stdout.")
@format_option
@click.option(
    "-p",
    "--ptx",
    "ptx_path",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Lint this PTX file (through ptxas) instead of the kernel's source, with its artifact checks "
    "(upstream's form: --kernel NAME --ptx FILE).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Compiles run at once (default: the number of CPUs).",
)
def lint_command(
    config_path: Path | None,
    kernel_names: tuple[str, ...],
    archs: tuple[str, ...],
    as_json: bool,
    output_format: str | None,
    ptx_path: Path | None,
    jobs: int | None,
) -> int:
    """Compile each [[kernels]] source per arch; check registers, spills, memory and instruction patterns."""
    as_json = as_json or output_format == "json"
    config = load_config(config_path)
    if ptx_path is not None:
        report = lint_kernels(
            (ptx_kernel(config.kernels, kernel_names, ptx_path),),
            archs=archs or None,
            jobs=jobs,
            root=config.root,
            allow_unchecked=config.ci.allow_unchecked,
        )
        click.echo(format_report(report), err=True)
        if as_json:
            click.echo(json.dumps(report.to_json(), indent=2))
        return int(report.exit_code)
    selected = select_kernels(config.kernels, kernel_names)
    if not selected:
        raise UsageError("the config has no [[kernels]] entries: there is nothing to lint")
    report = lint_kernels(
        selected, archs=archs or None, jobs=jobs, root=config.root, allow_unchecked=config.ci.allow_unchecked
    )
    click.echo(format_report(report), err=True)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    return int(report.exit_code)
