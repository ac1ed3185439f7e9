"""Per-function PTX instruction counts on the fixture PTX (nvcc 13.0, nvrtc 11.8/12.9)."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuemu_ci.lint.ptx import parse_ptx
from tests.lint.support_lint import PTX


def _module(name: str):
    return parse_ptx((PTX / name).read_text())


@pytest.mark.parametrize(
    ("file", "total"),
    [
        ("gelu.sm80.ptx", 48),
        ("gelu.cu129.sm80.ptx", 52),
        ("gelu.cu118.sm80.ptx", 56),
        ("matmul.sm80.ptx", 123),
    ],
)
def test_instruction_totals_include_predicated_branches(file: str, total: int) -> None:
    (fn,) = _module(file).functions
    assert fn.is_entry and len(fn.instructions) == total
    assert sum(1 for i in fn.instructions if i.predicate) >= 1  # `@%p1 bra` is an instruction too


def test_matmul_opcode_mix() -> None:
    (fn,) = _module("matmul.sm80.ptx").functions
    base = Counter(i.opcode.split(".")[0] for i in fn.instructions)
    assert (base["ld"], base["add"], base["fma"], base["mov"], base["setp"], base["bra"], base["bar"]) == (
        38,
        18,
        16,
        12,
        8,
        5,
        2,
    )
    assert fn.opcode_counts()["bar.sync"] == 2


def test_multiline_call_and_vector_operands() -> None:
    module = _module("printf.sm80.ptx")
    assert [f.name for f in module.functions] == ["hello"]  # the vprintf prototype is not a body
    hello = module.functions[0]
    assert len(hello.instructions) == 16
    counts = hello.opcode_counts()
    assert counts["call.uni"] == 1 and counts["st.local.v2.u32"] == 1
    vec = next(i for i in hello.instructions if i.opcode == "st.local.v2.u32")
    assert vec.operands == "[%rd2], {%r3, %r2}"
    assert hello.callees == ("vprintf",)


def test_device_functions_and_call_graph() -> None:
    module = _module("noinline.sm80.ptx")
    sizes = {f.name: (f.is_entry, len(f.instructions)) for f in module.functions}
    assert sizes == {
        "_Z6helperfi": (False, 19),
        "_Z3fibi": (False, 14),
        "k_noinline": (True, 18),
        "k_bounds": (True, 9),  # `.maxntid`/`.minnctapersm` between the params and the body
        "k_dynsmem": (True, 19),
    }
    assert [f.name for f in module.reachable("k_noinline")] == ["k_noinline", "_Z6helperfi", "_Z3fibi"]
    assert [f.name for f in module.reachable("k_bounds")] == ["k_bounds"]


def test_header_identity() -> None:
    module = _module("gelu.cu118.sm80.ptx")
    assert (module.version, module.target) == ("7.8", "sm_80")
    assert module.producer == "Cuda compilation tools, release 11.8, V11.8.89"


def test_comments_with_semicolons_do_not_split_statements() -> None:
    text = """
.version 9.0
.target sm_80
.visible .entry k(.param .u64 p)
{
    /* block; comment */ mov.u32 %r1, %tid.x; // trailing; comment
    $L__BB0_1:
    @!%p1 bra $L__BB0_1;
    { .reg .b32 t; add.s32 %r2, %r1, 1; }
    ret;
}
"""
    (fn,) = parse_ptx(text).functions
    assert [i.opcode for i in fn.instructions] == ["mov.u32", "bra", "add.s32", "ret"]
    assert fn.instructions[1].predicate == "@!%p1"
