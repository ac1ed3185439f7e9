"""The parser of clang's AMDGPU resource usage remarks on every real log in tests/fixtures/hip-lint (Debian 12's
clang 15 and 16; gfx908, gfx90a, gfx90a:xnack+, gfx940, gfx1030; kernels, a device function, templates, errors).
The numbers asserted here are the ones printed in those logs."""

from __future__ import annotations

import pytest

from gpuemu_ci.lint.amdgpu_remarks import FIGURES, parse_remarks
from tests.lint.support_hip import HIP_LOGS

ALL = sorted(p.name for p in HIP_LOGS.glob("*.remarks"))
FIELDS = ("vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch_bytes", "lds_bytes", "occupancy")

# log -> kernel -> (VGPRs, AGPRs, SGPRs, VGPR spills, SGPR spills, scratch, LDS, occupancy), as printed
EXPECTED = {
    "gelu-gfx90a-clang15": {"gelu": (8, 0, 11, 0, 0, 0, 0, 8)},
    "gelu-gfx90a-clang16": {"gelu": (8, 0, 11, 0, 0, 0, 0, 8)},
    "gelu-gfx1030-clang15": {"gelu": (8, None, 11, 0, 0, 0, 0, 16)},
    "gelu-gfx1030-clang16": {"gelu": (8, None, 11, 0, 0, 0, 0, 16)},
    "transpose_lds-gfx90a-clang15": {"transpose_lds": (11, 0, 16, 0, 0, 0, 33280, 4)},
    "transpose_lds-gfx90a-clang16": {"transpose_lds": (11, 0, 16, 0, 0, 0, 33280, 1)},
    "transpose_lds-gfx1030-clang15": {"transpose_lds": (10, None, 13, 0, 0, 0, 33280, 8)},
    "transpose_lds-gfx1030-clang16": {"transpose_lds": (10, None, 13, 0, 0, 0, 33280, 6)},
    "horner_spill-gfx90a-clang15": {"horner_spill": (64, 0, 78, 2, 64, 12, 0, 8)},
    "horner_spill-gfx90a-clang16": {"horner_spill": (64, 0, 74, 62, 0, 252, 0, 8)},
    "horner_spill-gfx940-clang15": {"horner_spill": (64, 0, 80, 2, 80, 12, 0, 8)},
    "horner_spill-gfx940-clang16": {"horner_spill": (64, 0, 74, 64, 0, 260, 0, 8)},
    "horner_spill-gfx1030-clang15": {"horner_spill": (82, None, 108, 0, 16, 0, 0, 8)},
    "horner_spill-gfx1030-clang16": {"horner_spill": (82, None, 102, 0, 16, 0, 0, 8)},
    "mfma-gfx908-clang15": {"mfma5": (46, 80, 17, 0, 0, 0, 0, 3)},
    "mfma-gfx90a-clang15": {"mfma5": (62, 80, 18, 0, 0, 0, 0, 3)},
    "calls-gfx90a-clang15": {
        "private_array": (11, 0, 39, 0, 0, 272, 0, 8),
        "_Z5scaleIfEvPT_S0_i": (3, 0, 11, 0, 0, 0, 0, 8),
        "_Z5scaleIdEvPT_S0_i": (4, 0, 11, 0, 0, 0, 0, 8),
    },
    "calls-gfx90a-xnack-on-clang15": {
        "private_array": (11, 0, 39, 0, 0, 272, 0, 8),
        "_Z5scaleIfEvPT_S0_i": (3, 0, 13, 0, 0, 0, 0, 8),
        "_Z5scaleIdEvPT_S0_i": (4, 0, 13, 0, 0, 0, 0, 8),
    },
}
ERRORS = {
    "error-gfx90a-clang15": ("error", "use of undeclared identifier 'undeclared_value'", "error.hip", 5),
    "gelu-gfx1100-clang15": ("error", "cannot find ROCm device library for gfx1100", None, None),
    "gelu-gfx942-clang15": ("error", "invalid target ID 'gfx942'", None, None),
}


def _log(stem: str):
    return parse_remarks((HIP_LOGS / f"{stem}.remarks").read_text())


def test_every_fixture_is_covered() -> None:
    assert sorted(f"{s}.remarks" for s in (*EXPECTED, *ERRORS)) == ALL


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_every_figure_of_every_kernel(stem: str) -> None:
    log = _log(stem)
    kernels = {k.name: tuple(getattr(k, f) for f in FIELDS) for k in log.kernels()}
    assert kernels == EXPECTED[stem]
    assert all(k.unparsed == [] for k in log.functions)
    assert log.unparsed_lines == () and log.diagnostics == ()


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_locations_point_at_the_kernel_in_its_source(stem: str) -> None:
    source = stem.split("-", 1)[0] + ".hip"
    for f in _log(stem).functions:
        assert f.file == source and f.line is not None and f.line > 0
    lines = (HIP_LOGS.parent / "src" / source).read_text().splitlines()
    for f in _log(stem).kernels():
        assert f.line is not None and "__global__" in lines[f.line - 1] + lines[f.line - 2]


def test_a_device_function_is_reported_but_is_no_kernel() -> None:
    # Compiled without hipcc's inlining options, the noinline function gets a block of its own, without LDS.
    log = _log("calls-gfx90a-clang15")
    helper = log.function("_Z12dot_reversedPKfi")
    assert helper is not None and not helper.is_kernel
    assert (helper.vgprs, helper.sgprs, helper.scratch_bytes, helper.occupancy, helper.lds_bytes) == (
        0,
        0,
        0,
        0,
        None,
    )
    assert log.functions[0].name == "_Z12dot_reversedPKfi"
    assert len(log.kernels()) == 3


def test_archs_without_agprs_report_none_not_zero() -> None:
    assert _log("gelu-gfx1030-clang15").kernels()[0].agprs is None
    assert _log("gelu-gfx90a-clang15").kernels()[0].agprs == 0


@pytest.mark.parametrize("stem", sorted(ERRORS))
def test_errors_are_diagnostics_with_their_location(stem: str) -> None:
    log = _log(stem)
    level, message, file, line = ERRORS[stem]
    assert log.functions == ()
    (error,) = log.errors()
    assert (error.level, error.file, error.line) == (level, file, line)
    assert error.message.startswith(message)


def test_an_unknown_figure_is_kept_not_dropped() -> None:
    # A later clang's extra line (here, as clang 18 prints it) and a figure in a form this parser does not read.
    text = (
        "k.hip:3:1: remark: Function Name: k [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     SGPRs: 10 [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     Dynamic Stack: False [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     VGPRs: lots [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     Wave Slots [per CU]: 7 [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     LDS Size [bytes/block]: 64 [-Rpass-analysis=kernel-resource-usage]\n"
    )
    (k,) = parse_remarks(text).functions
    assert (k.sgprs, k.vgprs, k.lds_bytes, k.dynamic_stack) == (10, None, 64, False)
    assert k.unparsed == ["VGPRs: lots", "Wave Slots [per CU]: 7"]


def test_remarks_before_any_function_are_kept_apart() -> None:
    log = parse_remarks("remark:     SGPRs: 3 [-Rpass-analysis=kernel-resource-usage]\n")
    assert log.functions == () and log.unparsed_lines == ("SGPRs: 3",)


def test_every_figure_name_is_one_the_fixtures_print() -> None:
    printed = {
        line.split("remark:", 1)[1].split("[-Rpass")[0].strip().rsplit(":", 1)[0]
        for stem in EXPECTED
        for line in (HIP_LOGS / f"{stem}.remarks").read_text().splitlines()
        if "remark:" in line
    }
    assert set(FIGURES) <= printed
