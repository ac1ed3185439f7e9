"""The conditioning measured without the reference's cooperation (oracle/conditioning.py, issue #44): inputs
moved by one rounding of a precision, from the case seed; a softmax's row moved relative to its max, so that a
masked lane loading 0 into a row of huge equal values (the buggy example's softmax) still fails."""

from __future__ import annotations

import numpy as np

from gpuemu_ci.calls import CallResult, CallStatus, CaseRun
from gpuemu_ci.config.model import Family, InputSpec, Validation
from gpuemu_ci.oracle import conditioning
from gpuemu_ci.oracle.judge import CaseContext, judge
from gpuemu_ci.results.model import FailureKind
from tests.oracle.test_working_precision import make_op

U32 = 2.0**-24


def test_moves_are_one_rounding_of_the_precision_and_repeat_from_the_seed():
    x = np.concatenate([np.linspace(1.0, 2.0, 60), [1e-40, -3e-39, 0.0, np.inf]]).astype(np.float32)
    ids = np.arange(4)
    moved = conditioning.moved({"x": x, "ids": ids}, 12345, "float32", "0")
    again = conditioning.moved({"x": x, "ids": ids}, 12345, "float32", "0")
    other = conditioning.moved({"x": x, "ids": ids}, 12345, "float32", "1")
    assert np.array_equal(moved["x"], again["x"]) and moved["ids"] is ids
    assert not np.array_equal(moved["x"], other["x"])  # another draw, other signs
    step = moved["x"][:60] - x[:60].astype(np.float64)
    assert np.allclose(np.abs(step), U32 * np.abs(x[:60])) and (step > 0).any() and (step < 0).any()
    # below float32's normal range a rounding is absolute: half the smallest subnormal; an exact zero stays
    tiny = moved["x"][60:62] - x[60:62].astype(np.float64)
    assert np.allclose(np.abs(tiny), U32 * np.finfo(np.float32).tiny)
    assert moved["x"][62] == 0.0 and moved["x"][63] == np.inf


def test_subnormal_outputs_do_not_loosen_the_model_of_the_others():
    """Boundary values hold zeros and a few-quanta subnormals: a zero moved by half a subnormal ruled out every
    relative model, and a subnormal moved by up to 100% of itself made it about 1 for every element, so an
    elementwise kernel off by 50% passed. The fit now uses the normal range only."""
    sub = np.finfo(np.float32).smallest_subnormal
    x = np.concatenate([np.linspace(-3.0, 3.0, 64), [0.0, sub, 4 * sub, -2 * sub]]).astype(np.float32)
    r = 2.0 * x.astype(np.float64)
    runs = [2.0 * conditioning.moved({"x": x}, 7, "float32", str(k))["x"] for k in range(3)]
    found = conditioning.model(r, runs, None, "float32")
    assert found is not None
    term, _ = found
    assert np.all(term <= 2 * U32 * np.abs(r) + 1e-300)  # about one rounding of each element, relative


def test_a_softmax_row_moves_relative_to_its_max():
    x = np.array([[-1e10] * 5, [3.0, 1.0, -2.0, 3.0, 0.0]])
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    shifted = conditioning.shifted_inputs(op, {"x": x}, {})
    assert shifted == {"x": -1}
    moved = conditioning.moved({"x": x}, 1, "float32", "0", shifted)["x"]
    # a row of equal values moves by one subnormal rounding, not by 1e10 * u: its softmax stays 1/5
    assert np.all(np.abs(moved[0] - x[0]) < 1e-40)
    assert np.allclose(
        np.abs(moved[1] - x[1]), U32 * np.maximum(np.abs(x[1] - 3.0), np.finfo(np.float32).tiny)
    )


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True))


def test_the_masked_lane_bug_on_huge_equal_rows_still_fails_with_the_moved_model():
    """The tail-mask softmax of examples/buggy (masked lanes load 0, not -inf) on rows of -1e10: the max becomes
    0 and every probability 0 where it is 1/65. Moving x itself by u|x| would allow any answer there."""
    x = np.full((4, 65), -1e10, dtype=np.float32)
    x[1] = np.linspace(-1.0, 1.0, 65)
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    r = _softmax(x.astype(np.float64))
    buggy = r.astype(np.float32).copy()
    buggy[[0, 2, 3]] = 0.0
    moved = tuple(
        (_softmax(arrays["x"]),) for arrays in conditioning.moved_inputs(op, "float32", {"x": x}, {}, 99)
    )
    context = CaseContext("float32", {"M": 4, "N": 65}, {}, {"x": x}, moved_outputs=moved)
    run = CaseRun(reference=CallResult(CallStatus.OK, (r,)), op=CallResult(CallStatus.OK, (buggy,)))
    verdict = judge(op, context, run, Validation())
    assert not verdict.passed and verdict.findings[0].kind is FailureKind.MISMATCH
    correct = CaseRun(reference=run.reference, op=CallResult(CallStatus.OK, (r.astype(np.float32),)))
    assert judge(op, context, correct, Validation()).passed
    unshifted = conditioning.moved({"x": x}, 99, "float32", "0")["x"]
    # Moving x itself splits the row in two groups 1e3 apart: c x 2 x that change would excuse the bug's 1/65.
    assert 4 * 2 * np.max(np.abs(_softmax(unshifted) - r)[0]) > 1 / 65
