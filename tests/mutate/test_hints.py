"""What a survivor's hint says the config lacks, from the original run's cases (mutate/hints.py)."""

from __future__ import annotations

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.mutate.hints import hint

NARROWED = ("x = tl.load(p).to(tl.float32)", "x = tl.load(p).to(p.dtype.element_ty)")


def test_a_narrowed_accumulator_asks_for_16_bit_dtypes_only_when_none_was_declared() -> None:
    judged = [CaseReport("passed", dtype="float32", dims={"N": 100})]
    undeclared = hint("accumulator_narrowed", *NARROWED, judged)
    assert undeclared is not None and "declare float16/bfloat16 in `dtypes`" in undeclared
    # Declared, but skipped here (Triton's interpreter computes bfloat16 wrongly): the config is not what
    # lacks; the machine is.
    skipped = [CaseReport("skipped", dtype="bfloat16", message="Triton interpreter: bfloat16 unsupported")]
    here = hint("accumulator_narrowed", *NARROWED, judged, skipped)
    assert here is not None and "declare" not in here
    assert "the bfloat16 cases were not judged on this machine (Triton interpreter: bfloat16" in here
