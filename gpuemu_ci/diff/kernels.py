"""Kernel entry x arch classification: resource metrics against the policy deltas, lint status, and
toolchain identity (a different nvcc, ptxas, clang, HIP or flag set makes the numbers incomparable). A HIP
kernel's figures are compared in the AMDGPU compiler's terms (VGPRs, AGPRs, spilled registers, scratch, LDS)."""

from __future__ import annotations

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.limits import DeltaLimits, limits_for
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.diff import ALL, Classification, DiffEntry, EntryKind, Reason
from gpuemu_ci.results.kernels import KernelMetrics, KernelResult, KernelStatus, ToolIdentity
from gpuemu_ci.results.model import Results

# (KernelMetrics attribute, DeltaLimits field, words for the message, unit)
BYTE_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("registers", "registers", "registers", ""),
    ("spills", "spills", "spill bytes (stores + loads)", " B"),
    ("local_memory", "local_memory", "local memory (stack) per thread", " B"),
    ("shared_bytes", "shared_memory", "static shared memory", " B"),
)
# A HIP kernel's, in the AMDGPU compiler's terms (KernelMetrics.registers is its VGPRs, .spills the registers
# it spilled, .local_memory its scratch, .shared_bytes its LDS); AGPRs count against the register delta.
AMDGPU_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("registers", "registers", "VGPRs", ""),
    ("amdgpu.agprs", "registers", "AGPRs", ""),
    ("spills", "spills", "spilled registers (VGPRs + SGPRs)", ""),
    ("local_memory", "local_memory", "scratch per lane", " B"),
    ("shared_bytes", "shared_memory", "static LDS per workgroup", " B"),
)
# Reported when they change, never a regression on their own: no policy limits them.
AMDGPU_REPORTED: tuple[tuple[str, str], ...] = (
    ("sgprs", "SGPRs"),
    ("occupancy", "occupancy (waves per SIMD)"),
)


def display_name(config_name: str, entry: str) -> str:
    """The [[kernels]] name, or "name/entry" when the entry is named differently (several entries per source,
    C++ names)."""
    return config_name if entry == config_name else f"{config_name}/{entry}"


def diff_kernels(base: Results, current: Results, policies: Policies) -> list[DiffEntry]:
    """One entry per kernel entry x arch in either run (or per [[kernels]] table without entries)."""
    out: list[DiffEntry] = []
    for kernel in current.kernels:
        old = base.kernel(kernel.name)
        if old is None:
            out.extend(_whole(kernel, Classification.NEW, Severity.INFO, "new kernel (not in the baseline)"))
        else:
            out.extend(_compare_kernel(old, kernel, policies))
    for old in base.kernels:
        if current.kernel(old.name) is None:
            out.extend(
                _whole(
                    old, Classification.REMOVED, Severity.WARNING, "removed: in the baseline, not in this run"
                )
            )
    return out


def _whole(
    kernel: KernelResult, classification: Classification, severity: Severity, message: str
) -> list[DiffEntry]:
    new = classification is Classification.NEW
    if not kernel.entries:
        detail = f"{message}; status {kernel.status.value}" + (
            f": {_compile_error(kernel)}" if kernel.error else ""
        )
        reason = Reason(
            "status", None if new else kernel.status.value, kernel.status.value if new else None, detail
        )
        return [
            DiffEntry(
                kind=EntryKind.KERNEL,
                name=kernel.name,
                variant=arch,
                classification=classification,
                severity=severity,
                reasons=(reason,),
                config_name=kernel.name,
            )
            for arch in (kernel.archs or (ALL,))
        ]
    out = []
    for e in kernel.entries:
        detail = f"{message}; {_registers(e)}" if e.registers is not None else message
        reason = Reason("registers", None if new else e.registers, e.registers if new else None, detail)
        out.append(_entry(kernel.name, e, classification, severity, [reason]))
    return out


def _entry(
    config_name: str,
    e: KernelMetrics,
    classification: Classification,
    severity: Severity,
    reasons: list[Reason],
) -> DiffEntry:
    return DiffEntry(
        kind=EntryKind.KERNEL,
        name=display_name(config_name, e.kernel),
        variant=e.arch,
        classification=classification,
        severity=severity,
        reasons=tuple(reasons),
        config_name=config_name,
        entry=e.kernel,
    )


def _compare_kernel(old: KernelResult, kernel: KernelResult, policies: Policies) -> list[DiffEntry]:
    out = []
    for e in kernel.entries:
        before = old.entry(e.kernel, e.arch)
        if before is None:
            reason = Reason("arch", None, e.arch, f"new entry or arch (not in the baseline); {_registers(e)}")
            out.append(_entry(kernel.name, e, Classification.NEW, Severity.INFO, [reason]))
            continue
        limits = limits_for(policies, kernel.name, e.kernel)
        lint = _lint_reasons(old, kernel, e)
        out.append(compare_entry(kernel.name, before, e, limits, lint))
    for before in old.entries:
        if kernel.entry(before.kernel, before.arch) is not None:
            continue
        if kernel.status is KernelStatus.FAILED and kernel.error:
            reason = Reason(
                "status",
                old.status.value,
                kernel.status.value,
                f"no longer compiles: {_compile_error(kernel)}",
            )
            out.append(_entry(kernel.name, before, Classification.REGRESSED, Severity.ERROR, [reason]))
        elif kernel.status is KernelStatus.ERROR:
            reason = Reason(
                "status",
                old.status.value,
                kernel.status.value,
                "could not be measured now (the toolchain failed; the run's own verdict reports it)",
            )
            out.append(_entry(kernel.name, before, Classification.REGRESSED, Severity.WARNING, [reason]))
        else:
            reason = Reason(
                "arch",
                before.arch,
                None,
                "removed: the baseline measured this entry and arch, this run did not",
            )
            out.append(_entry(kernel.name, before, Classification.REMOVED, Severity.WARNING, [reason]))
    return out


def _lint_reasons(
    old: KernelResult, kernel: KernelResult, e: KernelMetrics
) -> tuple[list[Reason], list[Reason]]:
    """(newly failing checks, checks that failed before and pass now) for one entry x arch."""

    def failing(k: KernelResult) -> dict[str, str]:
        return {
            v.message: v.metric or "lint"
            for v in k.violations
            if v.severity is Severity.ERROR and v.arch in ("", e.arch) and v.kernel in ("", e.kernel, k.name)
        }

    before, now = failing(old), failing(kernel)
    worse = [Reason("lint", "passed", "failed", f"check now fails: {m}") for m in now if m not in before]
    better = [Reason("lint", "failed", "passed", f"check passes now: {m}") for m in before if m not in now]
    return worse, better


def compare_entry(
    config_name: str,
    old: KernelMetrics,
    new: KernelMetrics,
    limits: DeltaLimits,
    lint: tuple[list[Reason], list[Reason]] = ([], []),
) -> DiffEntry:
    """Classifies one kernel entry x arch present in both runs."""
    toolchain = _toolchain_reasons(old.toolchain, new.toolchain)
    over: list[Reason] = list(lint[0])
    within: list[Reason] = []
    better: list[Reason] = list(lint[1])
    amd = old.amdgpu is not None and new.amdgpu is not None
    for attribute, field_name, words, unit in AMDGPU_METRICS if amd else BYTE_METRICS:
        a, b = _metric(old, attribute), _metric(new, attribute)
        if attribute == "local_memory" and (a is None or b is None):
            a, b = old.stack_frame, new.stack_frame
        if a is None or b is None or a == b:
            continue
        limit = getattr(limits, field_name)
        text = f"{words} {a}{unit} -> {b}{unit} ({b - a:+d}{unit}"
        if b - a > limit:
            over.append(Reason(attribute, a, b, f"{text}, more than {_limit(limits, field_name, limit)})"))
        elif b > a:
            within.append(Reason(attribute, a, b, f"{text}, within {_limit(limits, field_name, limit)})"))
        else:
            better.append(Reason(attribute, a, b, text + ")"))
    if amd:
        within += _reported_amdgpu(old, new)
    instructions = _instructions(old, new, limits)
    if instructions is not None:
        {"over": over, "within": within, "better": better}[instructions[1]].append(instructions[0])

    if toolchain:
        reasons = [*toolchain, *(_not_counted(r) for r in (*over, *within, *better))]
        return _entry(config_name, new, Classification.TOOLCHAIN_CHANGED, Severity.INFO, reasons)
    if over:
        return _entry(config_name, new, Classification.REGRESSED, Severity.ERROR, [*over, *within, *better])
    if better and not within:
        return _entry(config_name, new, Classification.IMPROVED, Severity.INFO, better)
    return _entry(config_name, new, Classification.UNCHANGED, Severity.INFO, [*within, *better])


def _registers(e: KernelMetrics) -> str:
    return f"{e.registers} {'VGPRs' if e.amdgpu is not None else 'registers'}"


def _metric(m: KernelMetrics, attribute: str) -> int | None:
    """A metric by name; "amdgpu.x" reads the AMD figures."""
    if attribute.startswith("amdgpu."):
        return None if m.amdgpu is None else getattr(m.amdgpu, attribute.split(".", 1)[1])
    value: int | None = getattr(m, attribute)
    return value


def _reported_amdgpu(old: KernelMetrics, new: KernelMetrics) -> list[Reason]:
    reasons = []
    for attribute, words in AMDGPU_REPORTED:
        a, b = _metric(old, f"amdgpu.{attribute}"), _metric(new, f"amdgpu.{attribute}")
        if a is not None and b is not None and a != b:
            reasons.append(
                Reason(attribute, a, b, f"{words} {a} -> {b} ({b - a:+d}; reported, no policy limits it)")
            )
    return reasons


def _instruction_totals(old: KernelMetrics, new: KernelMetrics) -> tuple[str, int, int] | None:
    """SASS counts when both runs have them (what the GPU runs), else PTX counts; for a HIP kernel the AMDGPU
    disassembly's (None when a run has none)."""
    if old.amdgpu is not None or new.amdgpu is not None:
        a = None if old.amdgpu is None else old.amdgpu.isa_total
        b = None if new.amdgpu is None else new.amdgpu.isa_total
        return None if a is None or b is None else ("isa_instructions", a, b)
    old_sass, new_sass = old.sass_total, new.sass_total
    if old_sass is not None and new_sass is not None:
        return "sass_instructions", old_sass, new_sass
    return "ptx_instructions", old.ptx_total, new.ptx_total


def _instructions(old: KernelMetrics, new: KernelMetrics, limits: DeltaLimits) -> tuple[Reason, str] | None:
    totals = _instruction_totals(old, new)
    if totals is None:
        return None
    metric, a, b = totals
    if a == b:
        return None
    change = (b - a) / max(a, 1) * 100
    text = f"{metric.replace('_', ' ')} {a} -> {b} ({change:+.1f}%"
    limit = limits.instructions_pct
    if change > limit:
        return Reason(metric, a, b, f"{text}, more than {_limit(limits, 'instructions_pct', limit)})"), "over"
    if b > a:
        return Reason(metric, a, b, f"{text}, within {_limit(limits, 'instructions_pct', limit)})"), "within"
    return Reason(metric, a, b, text + ")"), "better"


def _toolchain_reasons(old: ToolIdentity, new: ToolIdentity) -> list[Reason]:
    reasons = []
    for attribute, words in (
        ("nvcc", "nvcc"),
        ("nvrtc", "NVRTC"),
        ("ptxas", "ptxas"),
        ("clang", "clang"),
        ("hip", "HIP"),
    ):
        a, b = getattr(old, attribute), getattr(new, attribute)
        if a != b:
            reasons.append(Reason(f"toolchain.{attribute}", a, b, f"{words} {a or 'none'} -> {b or 'none'}"))
    if old.flags != new.flags:
        a, b = " ".join(old.flags), " ".join(new.flags)
        reasons.append(Reason("toolchain.flags", a, b, f"compile flags [{a}] -> [{b}]"))
    return reasons


def _not_counted(reason: Reason) -> Reason:
    return Reason(
        reason.metric, reason.old, reason.new, f"{reason.message}; not counted: the toolchain changed"
    )


def _limit(limits: DeltaLimits, field_name: str, value: float) -> str:
    key = limits.key_for(field_name)
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    suffix = "" if limits.source == "[policies]" else f" from {limits.source}"
    return f"{key} = {shown}{suffix}"


def _compile_error(kernel: KernelResult) -> str:
    error = kernel.error
    if error is None:
        return ""
    return f"{error.location}: {error.message}" if error.location else error.message
