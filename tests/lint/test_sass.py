"""SASS text and JSON readers on the cuobjdump/nvdisasm 13.5 fixtures."""

from __future__ import annotations

import pytest

from gpuemu_ci.lint.sass import parse_nvdisasm_json, parse_sass_text
from tests.lint.support_lint import SASS


def test_cuobjdump_text_gelu_sm80() -> None:
    (fn,) = parse_sass_text((SASS / "gelu.sm80.cuobjdump.txt").read_text())
    assert fn.name == "gelu"
    assert (fn.total, len(fn.body), sum(1 for i in fn.instructions if i.predicate)) == (48, 37, 2)
    assert fn.body[-1].opcode == "EXIT"  # BRA-to-self and NOP padding are not code
    counts = fn.opcode_counts()
    assert counts["LDG.E.CONSTANT"] == 1 and "NOP" not in counts


def test_nvdisasm_text_and_json_agree() -> None:
    (text,) = parse_sass_text((SASS / "matmul.sm90.nvdisasm.txt").read_text())
    (js,) = parse_nvdisasm_json((SASS / "matmul.sm90.nvdisasm.json").read_text())
    assert text.name == js.name == "matmul_tiled"
    assert (text.total, len(text.body)) == (js.total, len(js.body)) == (120, 105)
    assert text.opcode_counts() == js.opcode_counts()
    assert text.opcode_counts()["BAR.SYNC.DEFER_BLOCKING"] == 2


def test_label_form_self_branch() -> None:
    (fn,) = parse_sass_text((SASS / "printf.sm80.nvdisasm.txt").read_text())
    assert fn.name == "hello"
    assert (fn.total, len(fn.body)) == (32, 22)
    assert fn.opcode_counts()["CALL.ABS.NOINC"] == 1


def test_annotated_json_parses() -> None:
    functions = parse_nvdisasm_json((SASS / "spill16.sm80.annotate.TRUNCATED.json").read_text())
    assert [(f.name, f.total) for f in functions] == [("local_array", 12), ("spill_regs", 12)]


def test_bad_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_nvdisasm_json("[{")
