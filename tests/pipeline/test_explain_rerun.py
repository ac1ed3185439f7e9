"""A recorded failure takes what its explain re-run found only when the re-run failed the same way
(pipeline/explain_rerun.py)."""

from __future__ import annotations

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.pipeline.explain_rerun import NOT_SAME, wants_explaining, with_explanation

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
