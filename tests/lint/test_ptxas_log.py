"""The ptxas -v parser on every real log in the fixtures (CUDA 11.8 .. 13.5, sm_80/sm_90, nvcc, NVRTC, -rdc,
-G, multi-arch, errors, legacy web formats). Numbers asserted here are the ones printed in those logs."""

from __future__ import annotations

import pytest

from gpuemu_ci.lint.ptxas_log import Level, parse_ptxas_log
from tests.lint.support_lint import LOGS

ALL_LOGS = sorted(p.name for p in LOGS.glob("*.log"))
VERSIONS = ("11.8", "12.0", "12.4", "12.6", "12.9", "13.0", "13.5")


def _log(name: str):
    return parse_ptxas_log((LOGS / name).read_text())


def _entry(log, name: str, occurrence: int = 0):
    return [f for f in log.entries() if f.name == name][occurrence]


def test_every_fixture_log_is_covered() -> None:
    assert len(ALL_LOGS) == 20


@pytest.mark.parametrize("name", ALL_LOGS)
def test_every_log_parses_with_nothing_left_over(name: str) -> None:
    log = _log(name)
    assert log.unparsed_lines == ()
    assert all(f.unparsed == () for f in log.functions)
    assert all(m.unparsed == () for m in log.modules)
    assert all(f.arch is not None and f.arch.startswith("sm_") for f in log.functions)
    # Every entry has its Used line; device functions never do.
    assert all(f.registers is not None for f in log.entries())
    assert all(f.registers is None for f in log.device_functions())


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != "13.5"] + ["13.5"])
def test_same_ptx_through_each_ptxas_sm80(version: str) -> None:
    log = _log(f"ptxas-{version}-sm80.log")
    assert len(log.entries()) == 16
    gelu = _entry(log, "gelu")
    assert (gelu.registers, gelu.stack_frame, gelu.spill_stores, gelu.spill_loads) == (12, 0, 0, 0)
    assert dict(gelu.constant) == {0: 372}
    matmul = _entry(log, "matmul_tiled")
    assert (matmul.registers, matmul.shared_memory) == (32, 2048)
    # local_array: 32 registers before 12.4, 34 from 12.4 on (the fixtures' real logs).
    assert _entry(log, "local_array").registers == (32 if version in ("11.8", "12.0") else 34)
    assert _entry(log, "local_array").stack_frame == 1024
    # spill_regs at -maxrregcount 24: 452+740 B until 12.6, 460+752 B from 12.9.
    spill = _entry(log, "spill_regs", 1)
    expected = (24, 376, 452, 740) if version in ("11.8", "12.0", "12.4", "12.6") else (24, 376, 460, 752)
    assert (spill.registers, spill.stack_frame, spill.spill_stores, spill.spill_loads) == expected
    assert spill.max_registers_override == (24 if version not in ("11.8", "12.0") else None)
    # `used N barriers` appears in 12.6; before that the figure is absent, not 0.
    assert matmul.barriers == (None if version in ("11.8", "12.0", "12.4") else 1)
    hello = _entry(log, "hello")
    assert (hello.registers, hello.stack_frame) == (24, 16)
    assert hello.cumulative_stack == (None if version in ("11.8", "12.0") else 16)
    printf_module = next(m for m in log.modules if m.gmem == 25)
    assert dict(printf_module.constant) == ({} if version in ("11.8", "12.0") else {4: 16})
    fib = next(f for f in log.device_functions() if f.name == "_Z3fibi")
    assert (fib.stack_frame, fib.spill_stores, fib.spill_loads, fib.arch) == (24, 20, 20, "sm_80")
    assert _entry(log, "k_noinline").registers == 24


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != "13.5"])
def test_sm90_has_no_constant_banks(version: str) -> None:
    log = _log(f"ptxas-{version}-sm90.log")
    assert all(f.arch == "sm_90" for f in log.functions)
    assert all(f.constant == () for f in log.entries())
    assert _entry(log, "gelu").registers == 11
    assert _entry(log, "spill_regs").registers == 48
    spill = _entry(log, "spill_regs", 1)
    expected = (376, 444, 740) if version in ("11.8", "12.0", "12.4", "12.6") else (392, 472, 768)
    assert (spill.stack_frame, spill.spill_stores, spill.spill_loads) == expected


def test_warnings_are_kept_as_diagnostics() -> None:
    log = _log("ptxas-12.0-sm80.log")
    messages = [d.message for d in log.warnings()]
    assert "Stack size for entry function 'k_noinline' cannot be statically determined" in messages
    assert (
        "Registers are spilled to local memory in function 'spill_regs', 452 bytes spill stores, "
        "740 bytes spill loads" in messages
    )


def test_nvrtc_continuation_prefix() -> None:
    log = _log("nvrtc-12.9-spill.log")
    spill = _entry(log, "spill_regs")
    assert (spill.registers, spill.stack_frame, spill.spill_stores, spill.spill_loads) == (24, 376, 460, 752)
    local = _entry(log, "local_array")
    assert (local.registers, local.stack_frame, local.cumulative_stack) == (22, 1024, 1024)


def test_rdc_device_functions_are_not_attached_to_a_kernel() -> None:
    log = _log("nvcc-13.0-rdc.log")
    assert [f.name for f in log.entries()] == ["k_dynsmem", "k_bounds", "k_noinline"]
    devices = {f.name: (f.stack_frame, f.spill_stores, f.spill_loads) for f in log.device_functions()}
    assert devices == {"_Z3fibi": (16, 16, 16), "_Z6helperfi": (40, 0, 0)}
    k = _entry(log, "k_noinline")
    assert (k.registers, k.stack_frame, k.spill_stores) == (24, 0, 0)
    assert _entry(log, "k_bounds").stack_frame == 0


def test_debug_build_device_function_after_the_kernel() -> None:
    log = _log("nvcc-13.0-G.log")
    gelu = _entry(log, "gelu")
    assert (gelu.registers, gelu.stack_frame) == (26, 0)
    (tanhf,) = log.device_functions()
    assert (tanhf.name, tanhf.arch, tanhf.stack_frame) == ("tanhf", "sm_80", 0)


def test_multiarch_log_splits_by_arch() -> None:
    log = _log("nvcc-13.0-multiarch.log")
    assert len(log.entries("sm_80")) == 6 and len(log.entries("sm_90")) == 6
    by_arch = {f.arch: f for f in log.entries() if f.name == "_Z12uses_globalsPf"}
    assert by_arch["sm_80"].registers == 10 and by_arch["sm_90"].registers == 12
    assert dict(by_arch["sm_80"].constant) == {0: 360} and by_arch["sm_90"].constant == ()
    assert [(m.arch, m.gmem, dict(m.constant)) for m in log.modules] == [
        ("sm_80", 256, {3: 64, 4: 8}),
        ("sm_90", 256, {}),
    ]


def test_maxrregcount_warning_and_override() -> None:
    log = _log("nvcc-13.0-maxrreg16.log")
    (warning,) = log.warnings()
    assert (
        warning.message == "For profile sm_80 adjusting per thread register count of 16 to lower bound of 24"
    )
    spill = _entry(log, "spill_regs")
    assert (spill.registers, spill.max_registers_override, spill.spill_stores, spill.spill_loads) == (
        24,
        24,
        460,
        752,
    )


def test_error_log_has_file_and_line() -> None:
    log = _log("ptxas-13.0-error.log")
    assert log.functions == ()
    error, fatal = log.errors()
    assert (error.level, error.file, error.line) == (Level.ERROR, "bad.ptx", 7)
    assert error.message == "Not a name of any known instruction: 'foo'"
    assert fatal.level is Level.FATAL and fatal.message == "Ptx assembly aborted due to errors"


def test_legacy_web_formats() -> None:
    log = _log("web-legacy.log")
    msvc, tex, fermi, old = log.entries()
    assert (msvc.arch, msvc.registers, msvc.stack_frame, msvc.spill_stores, msvc.spill_loads) == (
        "sm_50",
        255,
        296,
        176,
        312,
    )
    assert (msvc.cumulative_stack, msvc.shared_memory, dict(msvc.constant)) == (312, 8192, {0: 324, 2: 4})
    assert tex.resources == (("textures", 1),)
    assert (fermi.local_memory, dict(fermi.constant)) == (4, {0: 64, 14: 4, 16: 276})
    assert (old.registers, old.shared_memory, old.shared_memory_extra, dict(old.constant)) == (
        9,
        2048,
        16,
        {1: 4},
    )


def test_unknown_fields_and_lines_are_kept_not_fatal() -> None:
    text = (LOGS / "ptxas-13.5-sm80.log").read_text()
    text = text.replace(
        "Used 12 registers, used 0 barriers, 372 bytes cmem[0]",
        "Used 12 registers, used 0 barriers, 7 bytes frobnication, 372 bytes cmem[0]",
    )
    text += "ptxas info    : Some future summary line\n"
    log = parse_ptxas_log(text)
    gelu = _entry(log, "gelu")
    assert gelu.unparsed == ("7 bytes frobnication",)
    assert (gelu.registers, gelu.barriers, dict(gelu.constant)) == (12, 0, {0: 372})
    assert log.unparsed_lines == ("Some future summary line",)
    assert len(log.entries()) == 16
