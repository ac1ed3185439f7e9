"""Artifact checks on metrics from real ptxas logs: violations name kernel, arch, metric, limit, value."""

from __future__ import annotations

import msgspec
import pytest

from gpuemu_ci.config.model import ArtifactChecks, PatternCheck
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.lint.ptxas_log import parse_ptxas_log
from gpuemu_ci.lint.rules import Listing, check_limits, check_patterns, validate_checks
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import DeviceFunctionMetrics, KernelMetrics, ToolIdentity
from tests.lint.support_lint import LOGS, ptx_pattern, sass_pattern


def metrics(log_name: str, entry: str, occurrence: int = 0, **extra) -> KernelMetrics:
    """KernelMetrics from the ptxas log's own numbers for one entry."""
    usage = [f for f in parse_ptxas_log((LOGS / log_name).read_text()).entries() if f.name == entry][
        occurrence
    ]
    assert usage.arch is not None
    return KernelMetrics(
        kernel=entry,
        mangled=entry,
        arch=usage.arch,
        registers=usage.registers,
        stack_frame=usage.stack_frame,
        spill_stores=usage.spill_stores,
        spill_loads=usage.spill_loads,
        shared_memory=usage.shared_memory or 0,  # ptxas omits a zero smem field
        local_memory=usage.cumulative_stack or usage.stack_frame,
        constant=dict(usage.constant),
        barriers=usage.barriers,
        ptx_instructions={},
        sass_instructions=None,
        toolchain=ToolIdentity("13.0.88", "13.0.88", (), usage.arch),
        **extra,
    )


def test_every_numeric_limit() -> None:
    spill = metrics("nvcc-13.0-maxrreg16.log", "spill_regs")  # 24 regs, 376 B stack, 460 + 752 B spills
    checks = ArtifactChecks(
        max_registers=24,
        max_spills=1000,
        max_spill_stores=400,
        max_spill_loads=800,
        max_local_memory=256,
        max_shared_memory=0,
    )
    found = {(v.metric, v.limit, v.value) for v in check_limits(spill, checks)}
    assert found == {("spills", 1000, 1212), ("spill_stores", 400, 460), ("local_memory", 256, 376)}
    matmul = metrics("ptxas-13.0-sm80.log", "matmul_tiled")
    (smem,) = check_limits(matmul, ArtifactChecks(max_shared_memory=1024, max_registers=32))
    assert (
        smem.message == "matmul_tiled [sm_80]: static shared memory 2048 B exceeds max_shared_memory = 1024 B"
    )
    assert (smem.kernel, smem.arch, smem.severity) == ("matmul_tiled", "sm_80", Severity.ERROR)


def test_missing_figure_fails_as_not_checked_unless_allowed() -> None:
    legacy = metrics("ptxas-11.8-sm80.log", "gelu")  # 11.8 prints no barriers; use a figure that is absent
    legacy = msgspec.structs.replace(legacy, registers=None)
    (v,) = check_limits(legacy, ArtifactChecks(max_registers=8))
    assert v.severity is Severity.ERROR and v.value is None and v.unchecked and "NOT CHECKED" in v.message
    assert "allow_unchecked = true" in v.message
    (allowed,) = check_limits(legacy, ArtifactChecks(max_registers=8), allow_unchecked=True)
    assert allowed.severity is Severity.WARNING and allowed.unchecked
    assert allowed.message.endswith("(allowed: ci.allow_unchecked)")


def test_device_function_spills_count_against_the_calling_kernel() -> None:
    fib = DeviceFunctionMetrics("fib(int)", "_Z3fibi", 16, 16, 16)  # nvcc-13.0-rdc.log
    k = metrics("nvcc-13.0-rdc.log", "k_noinline", device_functions=(fib,))
    (v,) = check_limits(k, ArtifactChecks(max_spill_loads=0))
    assert (v.kernel, v.metric, v.limit, v.value) == ("k_noinline", "spill_loads", 0, 16)
    assert "in device function fib(int) called from k_noinline" in v.message


def test_patterns_match_per_instruction_not_substrings_of_the_file() -> None:
    m = metrics("ptxas-13.0-sm80.log", "gelu")
    code = {
        "ptx": [Listing("gelu", ("fma.rn.f32 %f1, %f2, %f3, %f4", "add.f32 %f5, %f1, %f1"))],
        "sass": None,
    }
    checks = ArtifactChecks(
        required_patterns=(ptx_pattern(r"^fadd"), ptx_pattern(r"^fma\.")),
        forbidden_patterns=(ptx_pattern(r"^add\."), sass_pattern(r"^MUFU")),
    )
    out = check_patterns(m, checks, code, missing_reason={"sass": "no SASS tool"})
    assert [(v.metric, v.limit, v.value, v.severity, v.unchecked) for v in out] == [
        ("required_ptx_pattern", "^fadd", 0, Severity.ERROR, False),
        ("forbidden_ptx_pattern", r"^add\.", 1, Severity.ERROR, False),
        ("forbidden_sass_pattern", "^MUFU", None, Severity.ERROR, True),
    ]
    assert out[2].message.startswith(
        "gelu [sm_80]: forbidden sass pattern '^MUFU' NOT CHECKED: no SASS tool; install NVIDIA's SASS tools"
    )
    allowed = check_patterns(m, checks, code, missing_reason={"sass": "no SASS tool"}, allow_unchecked=True)
    assert allowed[2].severity is Severity.WARNING and allowed[2].unchecked


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        (PatternCheck("ld.(local", "ptx"), "not a valid regex"),
        (PatternCheck("^LDL", "cubin"), "use one of ptx, sass"),
    ],
)
def test_bad_patterns_are_config_errors(pattern: PatternCheck, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate_checks(ArtifactChecks(forbidden_patterns=(pattern,)), kernel="k")
