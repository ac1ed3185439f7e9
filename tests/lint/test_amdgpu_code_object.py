"""The reader of `llvm-readelf --notes --symbols --wide` on every real code object of tests/fixtures/hip-lint, and
the metadata against the remarks of the same compile: the two reports of one compiler must tell one story."""

from __future__ import annotations

import pytest

from gpuemu_ci.lint.amdgpu_code_object import CodeObjectError, parse_readelf
from gpuemu_ci.lint.amdgpu_remarks import parse_remarks
from tests.lint.support_hip import HIP_LOGS

ALL = sorted(p.stem for p in HIP_LOGS.glob("*.readelf"))

# log -> kernel -> (.vgpr_count, .agpr_count, .sgpr_count, .vgpr_spill_count, .sgpr_spill_count,
#                   .private_segment_fixed_size, .group_segment_fixed_size, .wavefront_size,
#                   .max_flat_workgroup_size, .kernarg_segment_size, .uses_dynamic_stack), as printed
EXPECTED = {
    "gelu-gfx90a-clang15": {"gelu": (8, 0, 11, 0, 0, 0, 0, 64, 1024, 20, False)},
    "mfma-gfx908-clang15": {"mfma5": (80, 80, 17, 0, 0, 0, 0, 64, 256, 24, False)},
    "mfma-gfx90a-clang15": {"mfma5": (144, 80, 18, 0, 0, 0, 0, 64, 256, 24, False)},
    "horner_spill-gfx1030-clang16": {"horner_spill": (82, None, 102, 0, 16, 0, 0, 32, 256, 28, None)},
    "transpose_lds-gfx1030-clang15": {"transpose_lds": (10, None, 13, 0, 0, 0, 33280, 32, 256, 24, False)},
    "calls-gfx90a-clang15": {
        "private_array": (11, 0, 39, 0, 0, 272, 0, 64, 1024, 12, False),
        "_Z5scaleIfEvPT_S0_i": (3, 0, 11, 0, 0, 0, 0, 64, 1024, 16, False),
        "_Z5scaleIdEvPT_S0_i": (4, 0, 11, 0, 0, 0, 0, 64, 1024, 20, False),
    },
}
NOTE_FIELDS = (
    "vgprs",
    "agprs",
    "sgprs",
    "vgpr_spills",
    "sgpr_spills",
    "scratch_bytes",
    "lds_bytes",
    "wavefront_size",
    "max_flat_workgroup_size",
    "kernarg_bytes",
    "dynamic_stack",
)


def _object(stem: str):
    return parse_readelf((HIP_LOGS / f"{stem}.readelf").read_text())


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_every_field_of_every_kernel(stem: str) -> None:
    co = _object(stem)
    assert {k.name: tuple(getattr(k, f) for f in NOTE_FIELDS) for k in co.kernels} == EXPECTED[stem]
    assert all(k.symbol == f"{k.name}.kd" for k in co.kernels)


@pytest.mark.parametrize("stem", ALL)
def test_every_object_names_its_arch_and_leaves_nothing_unread(stem: str) -> None:
    co = _object(stem)
    arch = stem.split("-")[1]
    assert co.arch == (arch + ":xnack+" if "xnack-on" in stem else arch)
    assert co.kernels and all(k.unparsed == () for k in co.kernels)
    assert all(k.name in co.functions for k in co.kernels)


@pytest.mark.parametrize("stem", ALL)
def test_the_metadata_agrees_with_the_remarks(stem: str) -> None:
    """Scratch, LDS, spills, SGPRs and AGPRs are the same figures in both reports; the VGPRs the code object
    declares are the remarks' VGPRs, except where AGPRs are used: gfx908 allocates the larger of the two
    files, gfx90a and later one unified file (VGPRs rounded up to 4, then the AGPRs)."""
    co = _object(stem)
    remarks = {k.name: k for k in parse_remarks((HIP_LOGS / f"{stem}.remarks").read_text()).kernels()}
    assert sorted(remarks) == sorted(k.name for k in co.kernels)
    for note in co.kernels:
        r = remarks[note.name]
        assert (r.scratch_bytes, r.lds_bytes, r.vgpr_spills, r.sgpr_spills) == (
            note.scratch_bytes,
            note.lds_bytes,
            note.vgpr_spills,
            note.sgpr_spills,
        )
        assert (r.sgprs, r.agprs) == (note.sgprs, note.agprs)
        assert r.vgprs is not None
        if not r.agprs:
            assert note.vgprs == r.vgprs
        elif co.arch == "gfx908":
            assert note.vgprs == max(r.vgprs, r.agprs)
        else:
            assert note.vgprs == -(-r.vgprs // 4) * 4 + r.agprs


def test_function_sizes_from_the_symbol_table() -> None:
    co = _object("calls-gfx90a-clang15")
    assert co.functions["private_array"][1] > 0
    assert "_Z12dot_reversedPKfi" in co.functions  # a local FUNC symbol, not a kernel
    assert co.kernel("_Z12dot_reversedPKfi") is None
    assert "private_array.kd" not in co.functions  # descriptors are OBJECTs


def test_a_kernel_named_like_a_yaml_keyword_stays_a_name() -> None:
    text = (
        "---\namdhsa.kernels:\n  - .name: null\n    .vgpr_count: 4\n    .foo_bar: 1\namdhsa.target: x\n...\n"
    )
    co = parse_readelf(text)
    assert co.kernels[0].name == "null" and co.kernels[0].vgprs == 4
    assert co.kernels[0].unparsed == (".foo_bar",)
    assert co.arch is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Symbol table '.symtab' contains 0 entries:\n", "no AMDGPU metadata"),
        ("---\n[unclosed\n...\n", "not valid YAML"),
        ("---\n- a list\n...\n", "no amdhsa.kernels"),
        ("---\namdhsa.kernels:\n  - .sgpr_count: 1\n...\n", "has no .name"),
    ],
)
def test_output_without_readable_metadata_is_an_error(text: str, message: str) -> None:
    with pytest.raises(CodeObjectError, match=message):
        parse_readelf(text)
