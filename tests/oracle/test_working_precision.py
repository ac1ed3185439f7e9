"""The error model where the family bound alone is too tight for correct kernels (issue #17, items 6-12): the
argmax rule, the working-precision reference's error model, the reduction's mean term, outputs shaped like no
input, and norm parameters found by shape."""

from __future__ import annotations

import numpy as np

from gpuemu_ci.config.model import ErrorModel, Family, InputSpec, OpShapes, OpSpec, OpTargets
from gpuemu_ci.oracle import bounds, precision
from gpuemu_ci.oracle.argmax import compare_argmax
from gpuemu_ci.oracle.compare import compare
from gpuemu_ci.oracle.model import Comparator
from gpuemu_ci.results.model import FailureKind

F32 = np.float32


def make_op(family: Family, inputs: tuple[InputSpec, ...], output=None, **model) -> OpSpec:
    return OpSpec(
        name="t",
        dtypes=("float32",),
        targets=OpTargets(op="m:f", reference="m:f"),
        shapes=OpShapes(inputs=inputs, dims=(), output_dims=output),
        error_model=ErrorModel(family=family, **model),
    )


def allowance(op, r, inputs, dims, reference_abs=None, kwargs=None, dtype="float32"):
    return bounds.allowed_error(
        op, bounds.BoundInputs(r, inputs, reference_abs, dims, kwargs or {}, dtype, dtype)
    )


# --- argmax ----------------------------------------------------------------------------------------------------
def test_argmax_is_exact_where_the_best_score_is_clear_and_judged_by_value_at_near_ties():
    scores = np.array([[1.0, 2.0, 2.0 + 1e-9, -5.0], [0.0, 3.0, 1.0, 2.999]])
    allowed = np.full(scores.shape, 1e-6)
    near_tie = np.array([1, 1])  # row 0: 1e-9 below the best, within 2e-6; row 1: the best
    stats, findings = compare_argmax(near_tie, scores, allowed, -1)
    assert not findings and stats.comparator is Comparator.ARGMAX
    assert stats.headroom is not None and stats.headroom < 1
    clear = np.array([2, 3])  # row 1: 0.001 below the best, far over the allowance
    stats, findings = compare_argmax(clear, scores, allowed, -1)
    assert stats.exceeded == 1 and stats.worst_index == (1,)
    assert "chose index 3 (score 2.999) where index 1 scores 3" in findings[0].message


def test_argmax_indices_outside_the_axis_and_bad_shapes_fail():
    scores = np.zeros((2, 4))
    _, findings = compare_argmax(np.array([0, 7]), scores, np.ones_like(scores), -1)
    assert findings and "index 7 is outside 0..3" in findings[0].message
    _, findings = compare_argmax(np.array([0, 1, 2]), scores, np.ones_like(scores), -1)
    assert findings[0].kind is FailureKind.SHAPE
    _, findings = compare_argmax(np.array([0.0, 1.0]), scores, np.ones_like(scores), -1)
    assert findings[0].kind is FailureKind.DTYPE


def test_a_float32_router_passes_the_argmax_rule_where_exact_equality_fails():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4096, 256)).astype(F32)
    w = rng.standard_normal((64, 256)).astype(F32)
    w[1] = w[0] * F32(1 + 2**-21)  # experts 0 and 1 score within rounding of each other: near-ties
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    fp32 = (x @ w.T).astype(F32)
    split = (x[:, :128] @ w[:, :128].T).astype(F32) + (x[:, 128:] @ w[:, 128:].T).astype(F32)
    op = make_op(Family.ARGMAX, (InputSpec("x", ("T", "H")), InputSpec("w", ("E", "H"))), output=("T", "E"))
    reference_abs = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    allowed = allowance(
        op,
        exact,
        {"x": x.astype(np.float64), "w": w.astype(np.float64)},
        {"T": 4096, "H": 256, "E": 64},
        reference_abs,
    )
    chosen = [np.argmax(fp32, axis=1), np.argmax(split, axis=1)]
    assert any(not np.array_equal(c, np.argmax(exact, axis=1)) for c in chosen)  # near-ties flip
    for c in chosen:
        assert not compare_argmax(c, exact, allowed, -1)[1]
    wrong = np.argmax(exact[:, :56], axis=1)  # the last 8 experts never considered
    assert compare_argmax(wrong, exact, allowed, -1)[0].exceeded > 100


# --- the working-precision reference ---------------------------------------------------------------------------
def test_the_empirical_term_turns_one_lucky_zero_into_an_error_model():
    r = np.array([1.0, 2.0, 4.0, 8.0])
    low = r + np.array([1e-7, 0.0, 4e-7, 0.0])  # elements 1 and 3 happened to round exactly
    measured = precision.empirical_term(r, low, None)
    assert measured is not None
    term, scale = measured
    # Each model covers every measured error: 1e-7 relative, or 4e-7 absolute; the smaller one per element.
    assert np.allclose(term, [1e-7, 2e-7, 4e-7, 4e-7])
    assert scale == "|reference| / constant"
    assert precision.empirical_term(r, r.copy(), None) is None  # nothing measured: nothing added


def test_the_empirical_term_scales_with_input_magnitude_where_the_reference_is_zero():
    """The std of a constant row is 0; its float32 evaluation is not: |r| cannot explain that error, the input
    magnitude can."""
    r = np.array([0.0, 1.0])
    low = np.array([3e-7, 1.0])
    magnitude = np.array([10.0, 1.0])
    measured = precision.empirical_term(r, low, magnitude)
    assert measured is not None
    term, scale = measured
    assert scale == "input magnitude / constant" and np.allclose(term, [3e-7, 3e-8])


def test_input_magnitude_aligns_inputs_with_the_output_by_dim_names():
    op = make_op(Family.REDUCTION, (InputSpec("x", ("M", "N")), InputSpec("w", ("N",))), output=("M",))
    x = np.array([[1.0, -3.0], [0.5, 0.25]])
    w = np.array([2.0, 0.1])
    largest = precision.input_magnitude(op, {"x": x, "w": w}, (2,))
    mean = precision.input_magnitude(op, {"x": x}, (2,), np.mean)
    assert largest is not None and np.allclose(largest, [3.0, 2.0])
    assert mean is not None and np.allclose(mean, [2.0, 0.375])


def test_working_precision_follows_the_case_and_the_declared_accumulator():
    op = make_op(Family.SOFTMAX, ())
    assert precision.working_precision(op, "bfloat16") == "float32"
    # float64 cases are measured in float32 and the error scaled down by u64/u32 (first order in u) ...
    assert precision.working_precision(op, "float64") == "float32"
    assert precision.error_scale(op, "float64") == 2.0**-29
    assert precision.error_scale(op, "float32") == precision.error_scale(op, "float16") == 1.0
    # ... unless the op declares a float64 accumulator: nothing below it to measure.
    assert precision.working_precision(make_op(Family.SOFTMAX, (), accumulator="float64"), "float64") is None
    assert precision.working_precision(make_op(Family.EXACT, ()), "float32") is None
    assert (
        precision.working_precision(make_op(Family.SOFTMAX, (), precision_reference=False), "float32") is None
    )
    assert (
        precision.working_precision(make_op(Family.SOFTMAX, (), accumulator="float16"), "float16")
        == "float16"
    )


# --- family terms ------------------------------------------------------------------------------------------------
def test_the_std_of_a_constant_row_is_allowed_the_error_of_its_mean():
    """A correct fp32 two-pass std of a constant row is sqrt of the rounding its mean left: about u |x|, where
    the reference (0) and the reference on |x| (0) allow nothing."""
    op = make_op(Family.REDUCTION, (InputSpec("x", ("M", "N")),), output=("M",))
    x = np.full((4, 255), 0.1, dtype=F32)
    mean = x.sum(axis=1, dtype=F32) / F32(255)
    got = np.sqrt(((x - mean[:, None]) ** 2).sum(axis=1, dtype=F32) / F32(255)).astype(np.float64)
    assert got.max() > 0
    r = np.zeros(4)
    _, findings = compare(
        got,
        r,
        allowance(op, r, {"x": x.astype(np.float64)}, {"M": 4, "N": 255}, np.zeros(4)),
        Comparator.BOUND,
        "float32",
    )
    assert not findings, findings
    one_pass = np.full(4, 0.003)  # what E[x^2] - E[x]^2 leaves at |mean| / std >> 1
    _, findings = compare(
        one_pass,
        r,
        allowance(op, r, {"x": x.astype(np.float64)}, {"M": 4, "N": 255}, np.zeros(4)),
        Comparator.BOUND,
        "float32",
    )
    assert findings


def test_an_output_shaped_like_no_input_keeps_the_operands_magnitude():
    """concat(q', k') of a rotation: where an element cancels, its allowance comes from the operands."""
    op = make_op(
        Family.ELEMENTWISE,
        (InputSpec("q", ("T", "HQ", "D")), InputSpec("k", ("T", "HK", "D"))),
        output=("T", "HQK", "D"),
    )
    q = np.ones((2, 3, 4))
    k = np.full((2, 1, 4), 5.0)
    r = np.zeros((2, 4, 4))  # every element cancels
    allowed = allowance(op, r, {"q": q, "k": k}, {"T": 2, "HQ": 3, "HK": 1, "HQK": 4, "D": 4})
    assert allowed.min() > 1e-7  # not the ~1e-45 floor of |r| = 0


def test_norm_parameters_are_found_by_shape_and_tables_are_not_taken_for_them():
    """cos/sin tables [T, D] next to q [T, H, D] once crashed the norm bound (broadcast against beta)."""
    op = make_op(
        Family.NORM,
        (
            InputSpec("q", ("T", "H", "D")),
            InputSpec("weight", ("D",)),
            InputSpec("cos", ("T", "D")),
            InputSpec("bias", ("D",)),
        ),
    )
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, 2, 8))
    inputs = {
        "q": q,
        "weight": np.full(8, 3.0),
        "cos": rng.standard_normal((3, 8)),
        "bias": np.full(8, 100.0),
    }
    r = rng.standard_normal((3, 2, 8))
    allowed = allowance(op, r, inputs, {"T": 3, "H": 2, "D": 8})
    assert allowed.shape == r.shape and allowed.min() > 4 * 100 * 2**-24  # the bias added to every element
