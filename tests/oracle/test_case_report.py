"""The statistical rules of a case have one home (oracle/case_report.statistics_rules), used for the forward
outputs and the gradients alike: the bias z-test only on regular values with no input repeated by a broadcast,
and the correlated-error bound for sorted or captured values and for addends repeated along the reduction."""

from __future__ import annotations

import dataclasses

from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Layout
from gpuemu_ci.fuzz.inputs import case_inputs
from gpuemu_ci.fuzz.layouts import LayoutChoice
from gpuemu_ci.oracle.case_report import statistics_rules
from gpuemu_ci.plan.expand import plan_op, stratum
from gpuemu_ci.plan.model import ValueMode

ROWSUM = """
[[ops]]
name = "rowsum"
op = "m:f"
reference = "m:f"
family = "reduction"
dtypes = ["float32"]
output = ["M"]
[ops.dims]
M = [8]
N = [64]
[ops.inputs]
x = ["M", "N"]
"""


def test_the_rules_follow_the_value_mode_and_the_broadcasts(make_project):
    config = load_config(make_project(ROWSUM, {"m.py": "def f(x):\n    return x.sum(-1)\n"}))
    op = config.op("rowsum")
    seeds = {stratum(op, r.seed).mode: r.seed for r in plan_op(op, 3, op.dtypes, 16)}
    regular = case_inputs(op, seeds[ValueMode.REGULAR], config.root, load_callable)
    plain = dataclasses.replace(regular, layouts={"x": LayoutChoice(Layout.CONTIGUOUS)})
    assert statistics_rules(op, plain).bias_test and not statistics_rules(op, plain).correlated
    along_rows = dataclasses.replace(regular, layouts={"x": LayoutChoice(Layout.BROADCAST, 0)})
    assert not statistics_rules(op, along_rows).bias_test  # repeated values are not independent samples
    assert not statistics_rules(op, along_rows).correlated  # the sum runs along N, whose addends differ
    along_sum = dataclasses.replace(regular, layouts={"x": LayoutChoice(Layout.BROADCAST, 1)})
    assert statistics_rules(op, along_sum).correlated  # N equal addends: their errors do not cancel
    ascending = case_inputs(op, seeds[ValueMode.ASCENDING], config.root, load_callable)
    assert statistics_rules(op, ascending).correlated and not statistics_rules(op, ascending).bias_test
