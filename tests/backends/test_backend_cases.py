"""A case from its seed (op_side.py and judge_side.py, the code the two worker processes run): the op gets
exactly the inputs `build_case` makes, in their memory layouts; the reference gets fp64 copies; re-runs get
fresh inputs; writes into inputs, unwritten `out=` elements and nondeterminism are found. Run here in-process
to look at the arrays themselves; test_backend_pool.py runs the same code in real workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.backends.interface import OpTask
from gpuemu_ci.backends.judge_side import OpView, run_judge_side
from gpuemu_ci.backends.op_side import run_op_side
from gpuemu_ci.backends.transport import region_of
from gpuemu_ci.calls import CallStatus
from gpuemu_ci.config.model import Layout
from gpuemu_ci.fuzz.case import build_case
from tests.backends.support_cases import first_case, op_task, seed_where

STRIDED = (
    "[ops.dims]\nM = [4, 16]\nN = { min = 1, max = 64, typical = [8] }\n[ops.inputs]\n"
    'a = { dims = ["M", "N"], layouts = ["strided"] }\nb = { dims = ["M", "N"], layouts = ["broadcast"] }\n'
)


def _judge(task: OpTask, spec: Any, side: Any) -> Any:
    report, _ = run_judge_side(
        task, spec, OpView(side.op, side.rerun, side.inputs_modified, side.interpreter)
    )
    return report


def test_the_op_gets_the_generated_inputs_in_their_layouts_gaps_included(user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:add", schema=STRIDED)
    spec = seed_where(
        task,
        lambda case: (
            case.layouts["a"].layout is Layout.STRIDED and case.layouts["b"].layout is Layout.BROADCAST
        ),
    )
    expected = build_case(task.op, spec.seed, task.root)
    seen: dict[str, np.ndarray] = {}

    def capture(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        for name, array in inputs.items():
            seen[name] = array
            region, _ = region_of(array)  # the memory behind the view
            assert region is not None
            seen[name + ":base"] = region.view(array.dtype).copy()
        return inputs["a"] + inputs["b"]

    side = run_op_side(task, spec, invoke=capture)
    assert side.op.status is CallStatus.OK, side.op.message
    for name, array in expected.arrays.items():
        assert seen[name].strides == array.strides and seen[name].dtype == array.dtype
        np.testing.assert_array_equal(seen[name], array)
    assert 0 in seen["b"].strides  # broadcast: stride 0, as generated
    behind = seen["a:base"]
    assert behind.size >= expected.arrays["a"].size * 2  # the gaps, and room for a stride-ignoring read
    assert np.isnan(behind).sum() == behind.size - expected.arrays["a"].size  # every other byte is poison
    assert _judge(task, spec, side).outcome == "passed"


def test_the_reference_gets_contiguous_float64_copies(user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:add", schema=STRIDED)  # ref_add asserts its contract
    for n in range(4):
        spec = first_case(task, n)
        side = run_op_side(task, spec)
        report = _judge(task, spec, side)
        assert report.outcome == "passed", report.message


def test_writes_into_inputs_are_found_and_the_rerun_gets_fresh_inputs(user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:scribble", extra='family = "elementwise"\ndeterministic = true')
    spec = first_case(task)
    side = run_op_side(task, spec)
    assert side.inputs_modified == ("a",)
    assert side.rerun is not None and side.rerun.status is CallStatus.OK
    np.testing.assert_array_equal(side.rerun.outputs[0], side.op.outputs[0])  # identical inputs both times
    report = _judge(task, spec, side)
    assert report.outcome == "failed" and report.kind == "inputs_modified"
    clean = run_op_side(op_task(user_root, "backend_ops:add"), spec)
    assert clean.inputs_modified == ()


def test_an_out_buffer_is_prefilled_with_nan_and_unwritten_elements_fail(user_root: Path) -> None:
    full = op_task(user_root, "backend_ops:into_out", extra='family = "elementwise"\nout_arg = "out"')
    spec = first_case(full)
    side = run_op_side(full, spec)
    assert side.op.status is CallStatus.OK, side.op.message
    assert side.op.outputs[0].dtype == np.float32 and side.op.outputs[0].shape == tuple(_shape(full, spec))
    assert _judge(full, spec, side).outcome == "passed"
    partial = op_task(
        user_root, "backend_ops:into_out_partial", extra='family = "elementwise"\nout_arg = "out"'
    )
    side = run_op_side(partial, spec)
    assert np.isnan(side.op.outputs[0][-1]).all() and not np.isnan(side.op.outputs[0][:-1]).any()
    report = _judge(partial, spec, side)
    assert report.outcome == "failed" and report.kind == "unwritten"


def _shape(task: OpTask, spec: Any) -> tuple[int, ...]:
    return build_case(task.op, spec.seed, task.root).arrays["a"].shape


def test_a_nondeterministic_op_is_found(user_root: Path) -> None:
    task = op_task(
        user_root, "backend_ops:nondeterministic", extra='family = "elementwise"\ndeterministic = true'
    )
    spec = first_case(task)
    side = run_op_side(task, spec)
    assert side.rerun is not None
    assert not np.array_equal(side.rerun.outputs[0], side.op.outputs[0])
    assert "nondeterministic" in [kind for kind, _ in _judge(task, spec, side).findings]


def test_a_broken_gpu_context_is_never_re_run(user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:sticky_cuda", extra='family = "elementwise"\ndeterministic = true')
    side = run_op_side(task, first_case(task))
    assert side.retire and side.op.status is CallStatus.CRASHED
    assert side.rerun is not None and side.rerun.message.startswith("not run")


def test_the_seed_alone_gives_the_same_case_on_both_sides(user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:wrong_add", schema=STRIDED)
    spec = first_case(task, 3)
    report = _judge(task, spec, run_op_side(task, spec))
    case = build_case(task.op, spec.seed, task.root)
    assert report.outcome == "failed" and report.kind == "mismatch"
    assert report.shapes == {n: a.shape for n, a in case.arrays.items()}
    assert report.dims == dict(case.dims) and report.distribution == case.stratum.mode.value


def test_a_scalar_output_stays_a_scalar_and_matches_a_declared_empty_output(user_root: Path) -> None:
    """A loss summed over the batch returns a 0-d array and declares `output = []`: the declared shape accepts
    it as it reaches the judge (contiguous copies make it shape (1,) on both sides), so a right total passes
    on every case and a wrong one is still a mismatch, never a shape failure."""
    scalar = 'family = "reduction"\noutput = []'
    for op, outcome in (("backend_ops:total", "passed"), ("backend_ops:wrong_total", "failed")):
        task = op_task(user_root, op, "backend_ops:ref_total", extra=scalar)
        for n in range(4):
            spec = first_case(task, n)
            side = run_op_side(task, spec)
            assert side.op.status is CallStatus.OK and side.op.outputs[0].size == 1
            report = _judge(task, spec, side)
            if outcome == "passed" or report.outcome == "failed":
                break
        assert report.outcome == outcome, report.message
        if outcome == "failed":
            assert report.kind == "mismatch", report.message
