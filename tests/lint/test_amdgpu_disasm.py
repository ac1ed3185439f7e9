"""The llvm-objdump reader on real disassemblies (tests/fixtures/hip-lint), cut to each symbol's size, and the
LLVM IR reader on the IR of the same compiles."""

from __future__ import annotations

import pytest

from gpuemu_ci.lint.amdgpu_code_object import parse_readelf
from gpuemu_ci.lint.amdgpu_disasm import parse_objdump
from gpuemu_ci.lint.llvm_ir import parse_ir
from tests.lint.support_hip import HIP_LOGS

STEMS = sorted(p.stem for p in HIP_LOGS.glob("*.objdump"))


def _functions(stem: str, cut: bool = True):
    sizes = parse_readelf((HIP_LOGS / f"{stem}.readelf").read_text()).functions if cut else None
    return {f.name: f for f in parse_objdump((HIP_LOGS / f"{stem}.objdump").read_text(), sizes)}


def test_the_fixtures() -> None:
    assert STEMS == ["calls-gfx90a-clang15", "gelu-gfx90a-clang15", "transpose_lds-gfx1030-clang15"]


@pytest.mark.parametrize("stem", STEMS)
def test_each_function_ends_where_its_symbol_does(stem: str) -> None:
    sizes = parse_readelf((HIP_LOGS / f"{stem}.readelf").read_text()).functions
    whole, cut = _functions(stem, cut=False), _functions(stem)
    assert set(cut) == set(sizes)
    for name, f in cut.items():
        start, size = sizes[name]
        assert f.address == start and f.instructions[0].address == start
        assert all(start <= i.address < start + size for i in f.instructions)
        # Its last instruction ends the program (kernels) or returns (device functions); the padding is gone.
        assert f.instructions[-1].opcode in ("s_endpgm", "s_setpc_b64")
        assert len(whole[name].instructions) >= len(f.instructions)
    assert sum(len(f.instructions) for f in whole.values()) > sum(len(f.instructions) for f in cut.values())


def test_the_last_kernel_loses_its_padding() -> None:
    gelu_whole, gelu = (
        _functions("gelu-gfx90a-clang15", cut=False)["gelu"],
        _functions("gelu-gfx90a-clang15")["gelu"],
    )
    assert (len(gelu_whole.instructions), len(gelu.instructions)) == (338, 75)
    assert gelu_whole.opcode_counts()["s_nop"] > 200 and "s_nop" not in gelu.opcode_counts()


def test_opcode_counts_of_real_kernels() -> None:
    gelu = _functions("gelu-gfx90a-clang15")["gelu"].opcode_counts()
    assert sum(gelu.values()) == 75 and gelu["s_endpgm"] == 1 and gelu["v_exp_f32_e32"] == 1
    assert not any(op.startswith(("ds_", "scratch_", "buffer_")) for op in gelu)
    lds = _functions("transpose_lds-gfx1030-clang15")["transpose_lds"].opcode_counts()
    assert (lds["ds_write_b32"], lds["ds_read2st64_b32"], lds["s_barrier"]) == (2, 1, 1)
    calls = _functions("calls-gfx90a-clang15")
    private = calls["private_array"].opcode_counts()
    assert (private["buffer_store_dword"], private["s_swappc_b64"]) == (64, 1)  # the private array, the call


def test_an_instruction_keeps_its_operands_and_drops_the_encoding() -> None:
    first = _functions("gelu-gfx90a-clang15")["gelu"].instructions[0]
    assert first.text == "s_load_dword s0, s[4:5], 0x4"
    assert first.opcode == "s_load_dword"


def test_text_without_functions_is_an_error() -> None:
    with pytest.raises(ValueError, match="no function"):
        parse_objdump("device.co:\tfile format elf64-amdgpu\n")


def test_ir_functions_bodies_and_calls() -> None:
    module = parse_ir((HIP_LOGS / "calls-gfx90a-clang15.ll").read_text())
    assert [f.name for f in module.functions] == [
        "_Z12dot_reversedPKfi",
        "private_array",
        "_Z5scaleIfEvPT_S0_i",
        "_Z5scaleIdEvPT_S0_i",
    ]
    private = module.function("private_array")
    assert private is not None and "_Z12dot_reversedPKfi" in private.callees
    assert [f.name for f in module.reachable("private_array")] == ["private_array", "_Z12dot_reversedPKfi"]
    assert [f.name for f in module.reachable("_Z5scaleIfEvPT_S0_i")] == ["_Z5scaleIfEvPT_S0_i"]
    # Instructions only: no labels, comments or blank lines.
    for f in module.functions:
        assert f.instructions and not any(
            i.endswith(":") or i.startswith(";") or not i for i in f.instructions
        )
    assert private.instructions[-1] == "ret void"


def test_ir_of_an_inlined_kernel_calls_intrinsics_only() -> None:
    gelu = parse_ir((HIP_LOGS / "gelu-gfx90a-clang15.ll").read_text())
    (f,) = gelu.functions
    assert f.name == "gelu" and all(c.startswith("llvm.") for c in f.callees)
    assert any(i.startswith("%") and "fmul contract float" in i for i in f.instructions)
    assert [g.name for g in gelu.reachable("gelu")] == ["gelu"]
    assert gelu.reachable("not_there") == ()


def test_quoted_names_and_an_empty_module() -> None:
    module = parse_ir('define void @"a b"() {\nentry:\n  call void @"c.d"()\n  ret void\n}\n')
    assert module.functions[0].name == "a b" and module.functions[0].callees == ("c.d",)
    with pytest.raises(ValueError, match="defines no function"):
        parse_ir("; ModuleID = 'x'\ndeclare void @f()\n")
