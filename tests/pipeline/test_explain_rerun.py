"""A recorded failure takes what its explain re-run found only when the re-run failed the same way
(pipeline/explain_rerun.py)."""

from __future__ import annotations

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.pipeline.explain_rerun import NOT_SAME, borrowed, wants_explaining, with_explanation
from gpuemu_ci.plan.model import CaseRef

FIRST = CaseReport(
    outcome="failed",
    kind="mismatch",
    worst_index=(3, 4),
    pattern="everywhere",
    triton_launches=(("vectorised", 1),),
)


def test_the_rerun_that_fails_the_same_way_gives_the_failure_its_where_pattern_and_map() -> None:
    rerun = CaseReport(
        outcome="failed",
        kind="mismatch",
        worst_index=(3, 4),
        pattern="wrong only in the last partial tile",
        error_map="snapshots/ab.png",
        where="stored by program (1, 0, 0)",
    )
    now = with_explanation(FIRST, rerun)
    assert (now.where, now.pattern, now.error_map) == (rerun.where, rerun.pattern, rerun.error_map)


def test_a_rerun_with_another_worst_element_or_a_pass_keeps_the_first_failure_and_says_so() -> None:
    moved = CaseReport(
        outcome="failed", kind="mismatch", worst_index=(0, 1), where="stored by program (0, 0, 0)"
    )
    for rerun in (moved, CaseReport(outcome="passed")):
        now = with_explanation(FIRST, rerun)
        assert now.where is not None and now.where.startswith(NOT_SAME)
        assert now.pattern == FIRST.pattern and now.worst_index == FIRST.worst_index
    crashed = with_explanation(FIRST, CaseReport(outcome="failed", kind="crashed", message="SIGSEGV"))
    assert crashed.where == f"{NOT_SAME} (it failed: crashed SIGSEGV)"
    assert with_explanation(FIRST, None, "the run stopped").where == "where not recorded: the run stopped"


def test_only_wrong_outputs_of_triton_ops_are_explained() -> None:
    assert wants_explaining(FIRST)
    assert not wants_explaining(CaseReport(outcome="failed", kind="mismatch"))  # no Triton kernel ran
    assert not wants_explaining(
        CaseReport(outcome="failed", kind="crashed", triton_launches=(("vectorised", 1),))
    )


def test_a_failure_its_rerun_found_no_cause_for_borrows_another_failure_of_the_same_output() -> None:
    """GroupNorm's one-pass variance: its worst failure is a bfloat16 case the shadow explains by rounding, its
    float32 case on offset rows names the variance line."""
    stored = "stored by program (0, 0, 0) of `k` (grid (1, 4, 1)), lane 3 of its block, at k.py:94 (in k)"
    cause = "first parted from float64 at k.py:75 (in k) `variance = ...`: ×1.5e+06 at program (1, 2, 0)"
    failing = [
        (CaseRef("k", 1, 7), CaseReport(outcome="failed", dtype="bfloat16", where=stored)),
        (
            CaseRef("k", 2, 8),
            CaseReport(outcome="failed", dtype="float32", where=f"{stored}; {cause}", causes=(cause,)),
        ),
        (CaseRef("k", 3, 9), CaseReport(outcome="failed", dtype="float32", where=stored, output="grad of x")),
        (CaseRef("k", 4, 10), CaseReport(outcome="failed", dtype="float16", where=f"{NOT_SAME} (it passed)")),
        (CaseRef("k", 5, 11), CaseReport(outcome="failed", dtype="float16", kind="crashed")),
    ]
    now = [report for _, report in borrowed(failing)]
    assert now[0].where == f"{stored}; the explain re-run of case 2 of this op (float32) found: {cause}"
    assert now[0].causes == ()  # borrowed, not its own: nobody borrows it again
    assert now[1:] == [report for _, report in failing[1:]]  # its own cause; another output; not explained
