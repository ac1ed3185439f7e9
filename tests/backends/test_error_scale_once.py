"""A `family = "custom"` op's error_scale hook is called once per output of a case (issue #48): a case that
fails the bound is judged a second time with measurements on the same inputs and reference outputs, which
called the hook again (liger_linear_cross_entropy's hook multiplies a vocabulary-sized weight in float64)."""

from __future__ import annotations

from pathlib import Path

from gpuemu_ci.backends.judge_side import OpView, run_judge_side
from gpuemu_ci.backends.op_side import run_op_side
from tests.backends.support_cases import first_case, op_task

SCALED = """
import numpy as np

def add(a, b):
    return a + b

def off_add(a, b):
    return a + b + np.float32(1.0)

def ref_add(a, b):
    return a + b

def sum_scale(inputs, reference, dims, kwargs):
    with open("hook_calls", "a") as calls:
        calls.write(".")
    return np.abs(inputs["a"]) + np.abs(inputs["b"]), 2
"""


def _hook_calls(root: Path, op: str) -> tuple[str, int]:
    calls = root / "hook_calls"
    calls.write_text("")
    task = op_task(root, op, "scaled:ref_add", extra='family = "custom"\nerror_scale = "scaled:sum_scale"')
    spec = first_case(task)
    side = run_op_side(task, spec)
    report, _ = run_judge_side(
        task, spec, OpView(side.op, side.rerun, side.inputs_modified, side.interpreter)
    )
    return report.outcome, len(calls.read_text())


def test_the_error_scale_hook_runs_once_per_output_also_when_the_case_is_judged_again(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "scaled.py").write_text(SCALED)
    monkeypatch.chdir(tmp_path)
    assert _hook_calls(tmp_path, "scaled:add") == ("passed", 1)
    assert _hook_calls(tmp_path, "scaled:off_add") == ("failed", 1)  # judged twice, the hook called once
