"""The verdict decisions the oracle owns (#50 item 2): it asks the judge side's callables for the reference's
measurements only where the first verdict needs them, and it decides a Triton case the interpreter cannot
compute as the GPU does (oracle/decide.py, oracle/triton_findings.layer_report)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.calls import CallResult, CallStatus, CaseRun
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Family, InputSpec, Validation
from gpuemu_ci.fuzz.case import build_case
from gpuemu_ci.oracle.decide import Measurements, decide
from gpuemu_ci.oracle.judge import CaseContext
from gpuemu_ci.oracle.triton_findings import layer_report
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.triton_cpu.report import TritonReport
from tests.oracle.test_working_precision import make_op

CONFIG = """
[validation]
dtypes = ["float32"]

[[ops]]
name = "add"
op = "m:f"
reference = "m:f"
family = "elementwise"

[ops.dims]
N = [8, 16]

[ops.inputs]
x = ["N"]
"""


class Asked:
    """The judge side's measurements as callables that count how often the oracle calls them."""

    def __init__(self, working: tuple[np.ndarray, ...] | None = None) -> None:
        self.calls: list[str] = []
        self._working = working

    def working(self) -> tuple[np.ndarray, ...] | None:
        self.calls.append("working")
        return self._working

    def moved(self) -> tuple[tuple[np.ndarray, ...], ...]:
        self.calls.append("moved")
        return ()


def _decided(output: np.ndarray, reference: np.ndarray, asked: Asked):
    op = make_op(Family.ELEMENTWISE, (InputSpec("x", ("N",)),), output=("N",))
    x = reference.astype(np.float32)
    context = CaseContext("float32", {"N": x.size}, {}, {"x": x})
    run = CaseRun(reference=CallResult(CallStatus.OK, (reference,)), op=CallResult(CallStatus.OK, (output,)))
    return decide(op, context, run, Validation(), Measurements(asked.working, asked.moved))


def test_a_case_within_the_family_bound_passes_without_asking_for_any_measurement():
    reference = np.linspace(-3.0, 3.0, 16)
    asked = Asked()
    verdict, figures = _decided(reference.astype(np.float32), reference, asked)
    assert verdict.passed and figures == () and asked.calls == []


def test_a_mismatch_asks_for_the_moved_inputs_only_and_still_fails():
    reference = np.linspace(-3.0, 3.0, 16)
    wrong = reference.astype(np.float32)
    wrong[5] += 0.5
    asked = Asked()
    verdict, _ = _decided(wrong, reference, asked)
    assert not verdict.passed and asked.calls == ["moved"]
    assert verdict.findings[0].kind is FailureKind.MISMATCH


def test_a_nonfinite_output_asks_for_the_working_precision_run_and_says_what_it_shows():
    reference = np.full(16, 1e30)
    output = reference.astype(np.float32)
    output[3] = np.inf
    working = (np.where(np.arange(16) == 3, np.inf, reference),)  # the formula overflows float32 there too
    asked = Asked(working)
    verdict, _ = _decided(output, reference, asked)
    assert not verdict.passed and "working" in asked.calls
    nonfinite = next(f for f in verdict.findings if f.kind is FailureKind.NONFINITE)
    assert "non-finite at all 1 of them too" in nonfinite.message


@pytest.fixture
def case(make_project, tmp_path):
    op = load_config(make_project(CONFIG)).op("add")
    return build_case(op, plan_op(op, 5, ("float32",), 1)[0].seed, tmp_path, load=load_callable)


def test_a_case_the_interpreter_computes_on_bit_patterns_is_skipped_with_the_reason(case):
    report = layer_report(case, "d" * 32, "triton-interpreter", ("bfloat16",), TritonReport(), 0.5)
    assert report is not None and report.outcome == "skipped"
    assert report.message == "Triton's interpreter computes bfloat16 on bit patterns"
    assert report.interpreter_types == ("bfloat16",) and report.inputs_digest == "d" * 32


def test_such_a_case_fails_where_the_layer_caught_an_access_out_of_bounds(case):
    seen = TritonReport(findings=(("out_of_bounds", "k.py:12 loads x[17] past its 16 elements"),))
    report = layer_report(case, None, "triton-interpreter", ("bfloat16",), seen, 0.5)
    assert report is not None and report.outcome == "failed" and report.kind == "out_of_bounds"
    assert report.message == "k.py:12 loads x[17] past its 16 elements"


def test_the_layers_own_error_is_errored_and_a_computable_case_is_left_to_judge(case):
    broken = layer_report(
        case, None, "triton-interpreter", (), TritonReport(internal_error="layer raised"), 0.0
    )
    assert broken is not None and broken.outcome == "errored" and broken.message == "layer raised"
    assert layer_report(case, None, "triton-interpreter", (), TritonReport(), 0.0) is None
    assert layer_report(case, None, None, (), None, 0.0) is None
