"""Turn `[kernels.artifact_checks]` into violations for one kernel entry on one arch.

Limits are checked against what ptxas reported for the entry, and spill/stack limits also against every
non-inlined device function the entry calls (ptxas reports those separately, without a `Used` line). A HIP
kernel's limits are checked against what the AMDGPU compiler reported: max_registers against its VGPRs,
max_spills against the registers it spilled, max_local_memory against scratch, max_shared_memory against LDS.
Patterns are regexes searched in each instruction (`opcode operands`, predicate left off) of the entry and
the functions it calls; anchor them (`^ld\\.local`) to match opcodes only. A check that cannot be carried
out (a SASS pattern without a SASS tool or cubin, a figure the compiler did not print) fails the kernel as "not
checked", never a silent pass; where the config allows unchecked rules (`[ci] allow_unchecked`) it is a
warning instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuemu_ci.config.model import PATTERN_TARGETS, ArtifactChecks, KernelLanguage, PatternCheck
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import AmdgpuUsage, KernelMetrics, Violation


@dataclass(frozen=True)
class Listing:
    """The instructions of one function, as text, for pattern checks."""

    function: str  # demangled name, for messages
    instructions: tuple[str, ...]


def validate_checks(
    checks: ArtifactChecks, *, kernel: str, language: KernelLanguage = KernelLanguage.CUDA
) -> None:
    """Reject a pattern that is not a valid regex or names a target the kernel's language has not, and a
    limit the language's compiler does not report (ConfigError, exit 2)."""
    targets = PATTERN_TARGETS[language]
    for kind, patterns in (("required", checks.required_patterns), ("forbidden", checks.forbidden_patterns)):
        for p in patterns:
            if p.target not in targets:
                raise ConfigError(
                    f"kernel {kernel!r}: {kind} pattern {p.pattern!r} has target {p.target!r}; "
                    f"use one of {', '.join(targets)} (a {language.value.upper()} kernel)"
                )
            try:
                re.compile(p.pattern)
            except re.error as exc:
                raise ConfigError(
                    f"kernel {kernel!r}: {kind} pattern {p.pattern!r} is not a valid regex: {exc}"
                ) from exc
    if language is KernelLanguage.HIP:
        for key in ("max_spill_stores", "max_spill_loads"):
            if getattr(checks, key) is not None:
                raise ConfigError(
                    f"kernel {kernel!r}: {key} cannot be checked for a HIP kernel: the AMDGPU compiler reports "
                    "how many registers it spilled, not spill store and load bytes; use max_spills (VGPRs + "
                    "SGPRs spilled) and max_local_memory (scratch bytes per lane)"
                )


SASS_TOOLS_HINT = (
    "install NVIDIA's SASS tools (`pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump`, 13.2+)"
)
ALLOW_HINT = "`[ci] allow_unchecked = true` lets unchecked rules pass with a warning"


def unchecked(
    m: KernelMetrics, metric: str, limit: int | str, message: str, allowed: bool, remedy: str | None = None
) -> Violation:
    """A rule that could not be checked: an error (the kernel fails), or a warning where the config allows it."""
    if allowed:
        text = f"{message} (allowed: ci.allow_unchecked)"
    else:
        text = f"{message}; {remedy + ', or ' if remedy else ''}{ALLOW_HINT}"
    severity = Severity.WARNING if allowed else Severity.ERROR
    return Violation(m.kernel, m.arch, metric, limit, None, text, severity, unchecked=True)


def _one_limit(
    out: list[Violation],
    m: KernelMetrics,
    metric: str,
    limit: int | None,
    value: int | None,
    what: str,
    unit: str,
    allow_unchecked: bool,
) -> None:
    if limit is None:
        return
    if value is None:
        reporter = "the AMDGPU compiler" if m.amdgpu is not None else "ptxas"
        message = (
            f"{m.kernel} [{m.arch}]: max_{metric} = {limit} NOT CHECKED: {reporter} did not report {what}"
        )
        out.append(unchecked(m, metric, limit, message, allow_unchecked))
    elif value > limit:
        out.append(
            Violation(
                m.kernel,
                m.arch,
                metric,
                limit,
                value,
                f"{m.kernel} [{m.arch}]: {what} {value}{unit} exceeds max_{metric} = {limit}{unit}",
            )
        )


def _amdgpu_limits(
    m: KernelMetrics, amd: AmdgpuUsage, checks: ArtifactChecks, allow_unchecked: bool
) -> list[Violation]:
    """A HIP kernel's limits, in the AMDGPU compiler's terms. Its figures already include every function the
    kernel calls (the compiler adds the callees' registers and scratch to the kernel's)."""
    out: list[Violation] = []

    def _limit(metric: str, limit: int | None, value: int | None, what: str, unit: str) -> None:
        _one_limit(out, m, metric, limit, value, what, unit, allow_unchecked)

    _limit("registers", checks.max_registers, amd.vgprs, "VGPRs", "")
    spills = (
        "spilled registers"
        if amd.spills is None
        else f"spilled registers ({amd.vgpr_spills} VGPRs + {amd.sgpr_spills} SGPRs) ="
    )
    _limit("spills", checks.max_spills, amd.spills, spills, "")
    _limit("local_memory", checks.max_local_memory, amd.scratch_bytes, "scratch per lane", " B")
    _limit("shared_memory", checks.max_shared_memory, amd.lds_bytes, "static LDS per workgroup", " B")
    return out


def check_limits(
    m: KernelMetrics, checks: ArtifactChecks, *, allow_unchecked: bool = False
) -> list[Violation]:
    """Numeric limits on the entry and on the device functions it calls."""
    if m.amdgpu is not None:
        return _amdgpu_limits(m, m.amdgpu, checks, allow_unchecked)
    out: list[Violation] = []

    def _limit(metric: str, limit: int | None, value: int | None, what: str, unit: str) -> None:
        _one_limit(out, m, metric, limit, value, what, unit, allow_unchecked)

    _limit("registers", checks.max_registers, m.registers, "registers", "")
    spills = m.spills
    spill_detail = (
        "spill bytes"
        if spills is None
        else f"spill bytes ({m.spill_stores} stored + {m.spill_loads} loaded) ="
    )
    _limit("spills", checks.max_spills, spills, spill_detail, " B")
    _limit("spill_stores", checks.max_spill_stores, m.spill_stores, "spill stores", " B")
    _limit("spill_loads", checks.max_spill_loads, m.spill_loads, "spill loads", " B")
    _limit("local_memory", checks.max_local_memory, m.local_memory, "local memory (stack)", " B")
    _limit("shared_memory", checks.max_shared_memory, m.shared_memory, "static shared memory", " B")
    for f in m.device_functions:
        where = f"in device function {f.name} called from {m.kernel}"
        pairs = (
            (
                "spills",
                checks.max_spills,
                None if f.spill_stores is None or f.spill_loads is None else f.spill_stores + f.spill_loads,
                "spill bytes",
            ),
            ("spill_stores", checks.max_spill_stores, f.spill_stores, "spill stores"),
            ("spill_loads", checks.max_spill_loads, f.spill_loads, "spill loads"),
            ("local_memory", checks.max_local_memory, f.stack_frame, "stack frame"),
        )
        for metric, limit, value, what in pairs:
            if limit is not None and value is not None and value > limit:
                out.append(
                    Violation(
                        m.kernel,
                        m.arch,
                        metric,
                        limit,
                        value,
                        f"{m.kernel} [{m.arch}]: {what} {value} B {where} exceeds max_{metric} = {limit} B",
                    )
                )
    return out


def _matches(pattern: re.Pattern[str], listings: Sequence[Listing]) -> list[tuple[str, str]]:
    return [(lst.function, ins) for lst in listings for ins in lst.instructions if pattern.search(ins)]


def check_patterns(
    m: KernelMetrics,
    checks: ArtifactChecks,
    listings: Mapping[str, Sequence[Listing] | None],
    *,
    missing_reason: dict[str, str],
    allow_unchecked: bool = False,
) -> list[Violation]:
    """Required/forbidden patterns. `listings[target]` is None when that target could not be produced."""
    out: list[Violation] = []
    groups: tuple[tuple[str, tuple[PatternCheck, ...]], ...] = (
        ("required", checks.required_patterns),
        ("forbidden", checks.forbidden_patterns),
    )
    for kind, patterns in groups:
        for p in patterns:
            metric = f"{kind}_{p.target}_pattern"
            code = listings.get(p.target)
            if code is None:
                reason = missing_reason.get(p.target, f"no {p.target} available")
                why = f" (matched against {p.target.upper()}: {p.why})" if p.why else ""
                message = f"{m.kernel} [{m.arch}]: {kind} {p.target} pattern {p.pattern!r}{why} NOT CHECKED: {reason}"
                remedy = SASS_TOOLS_HINT if p.target == "sass" else None
                out.append(unchecked(m, metric, p.pattern, message, allow_unchecked, remedy))
                continue
            hits = _matches(re.compile(p.pattern), code)
            if kind == "forbidden" and hits:
                fn, first = hits[0]
                where = "" if fn == m.kernel else f" (in {fn})"
                out.append(
                    Violation(
                        m.kernel,
                        m.arch,
                        metric,
                        p.pattern,
                        len(hits),
                        f"{m.kernel} [{m.arch}]: forbidden {p.target} pattern {p.pattern!r} matched "
                        f"{len(hits)} instruction{'s' if len(hits) != 1 else ''}, first: {first}{where}",
                    )
                )
            elif kind == "required" and not hits:
                out.append(
                    Violation(
                        m.kernel,
                        m.arch,
                        metric,
                        p.pattern,
                        0,
                        f"{m.kernel} [{m.arch}]: required {p.target} pattern {p.pattern!r} "
                        "matched no instruction",
                    )
                )
    return out
