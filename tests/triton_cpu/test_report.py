"""How a case's Triton launches are counted in the results (`triton_launches`): launches vectorised whole, in
groups of programs that agree on a divergent branch, and one program at a time with why; the determinism
re-run's report adds to the op call's."""

from __future__ import annotations

from gpuemu_ci.backends.judge_side import triton_launches
from gpuemu_ci.triton_cpu.report import TritonReport


def test_launches_in_groups_are_counted_apart_from_whole_ones_and_fallbacks() -> None:
    seen = TritonReport(
        launches=6, vectorised=4, grouped=((2, 1), (3, 2)), per_program=(("`atomic_rmw`", 2),)
    )
    assert dict(triton_launches(seen)) == {
        "vectorised": 1,
        "vectorised in 2 groups": 1,
        "vectorised in 3 groups": 2,
        "one program at a time: `atomic_rmw`": 2,
    }


def test_a_rerun_adds_its_groups_to_the_calls() -> None:
    first = TritonReport(launches=2, vectorised=2, grouped=((2, 1),))
    rerun = TritonReport(
        launches=2, vectorised=1, grouped=((2, 1),), per_program=(("an access out of bounds", 1),)
    )
    merged = first.merged(rerun)
    assert merged.vectorised == 3 and merged.grouped == ((2, 2),)
    assert dict(triton_launches(merged)) == {
        "vectorised": 1,
        "vectorised in 2 groups": 2,
        "one program at a time: an access out of bounds": 1,
    }
