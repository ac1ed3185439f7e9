"""The comparator: error-bound families, allclose, exact, non-finite classes and invariants."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.config.model import ErrorModel, Family, InputSpec, Invariants, OpShapes, OpSpec, OpTargets
from gpuemu_ci.oracle import bounds
from gpuemu_ci.oracle.compare import compare, compare_exact
from gpuemu_ci.oracle.invariants import bias_z, check_invariants
from gpuemu_ci.oracle.model import Comparator
from gpuemu_ci.results.model import FailureKind


def make_op(family: Family, inputs: tuple[InputSpec, ...], output=None) -> OpSpec:
    return OpSpec(
        name="t",
        dtypes=("float32",),
        targets=OpTargets(op="m:f", reference="m:f"),
        shapes=OpShapes(inputs=inputs, dims=(), output_dims=output),
        error_model=ErrorModel(family=family),
    )


def judge_bound(op, y, r, inputs, dims, case_dtype, reference_abs=None, kwargs=None):
    allowed = bounds.allowed_error(
        op, bounds.BoundInputs(r, inputs, reference_abs, dims, kwargs or {}, case_dtype, case_dtype)
    )
    return compare(y, r, allowed, Comparator.BOUND, case_dtype)


def tiled_matmul(a, b, block_k=32, dtype=np.float32, drop_tail=False, acc_dtype=np.float32):
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=acc_dtype)
    k = a.shape[1]
    stop = (k // block_k) * block_k if drop_tail else k
    if acc_dtype is not np.float32:  # a low-precision accumulator rounds after every product
        for kk in range(stop):
            acc = (acc + np.outer(a[:, kk], b[kk]).astype(np.float32)).astype(acc_dtype)
        return acc.astype(dtype)
    for k0 in range(0, stop, block_k):
        acc += a[:, k0 : k0 + block_k].astype(np.float32) @ b[k0 : k0 + block_k].astype(np.float32)
    return acc.astype(dtype)


MATMUL = make_op(Family.MATMUL, (InputSpec("a", ("M", "K")), InputSpec("b", ("K", "N"))), output=("M", "N"))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("k", [1, 7, 64, 1000, 4096])
def test_correct_matmuls_pass_the_bound_at_every_k(dtype, k):
    """Fixed atol/rtol fails correct fp32 matmuls from K=1024; the bound must not."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((16, k)).astype(dtype)
    b = (rng.standard_normal((k, 8)) * 3).astype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    name = np.dtype(dtype).name
    stats, findings = judge_bound(
        MATMUL,
        tiled_matmul(a, b, dtype=dtype),
        a64 @ b64,
        {"a": a64, "b": b64},
        {"M": 16, "K": k, "N": 8},
        name,
        reference_abs=np.abs(a64) @ np.abs(b64),
    )
    assert findings == [] and stats.headroom < 1.0
    if dtype is np.float32 and k >= 1024:  # the field's default allclose would have failed this control
        assert not np.allclose(tiled_matmul(a, b), a64 @ b64, rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize(
    ("bug", "kwargs"),
    [("dropped K tail", {"drop_tail": True}), ("fp16 accumulator", {"acc_dtype": np.float16})],
)
def test_matmul_bugs_exceed_the_bound(bug, kwargs):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 257)).astype(np.float16)
    b = rng.standard_normal((257, 8)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    stats, findings = judge_bound(
        MATMUL,
        tiled_matmul(a, b, dtype=np.float16, **kwargs),
        a64 @ b64,
        {"a": a64, "b": b64},
        {"M": 16, "K": 257, "N": 8},
        "float16",
        reference_abs=np.abs(a64) @ np.abs(b64),
    )
    assert [f.kind for f in findings] == [FailureKind.MISMATCH], bug
    assert stats.headroom > 4 and stats.exceeded > 0


def test_one_pass_variance_is_caught_by_the_norm_bound():
    rng = np.random.default_rng(3)
    x = (1000.0 + rng.standard_normal((8, 4096))).astype(np.float32)
    x64 = x.astype(np.float64)
    reference = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    op = make_op(Family.NORM, (InputSpec("x", ("M", "N")),))
    xf = x.astype(np.float32)
    mean = xf.mean(-1, keepdims=True, dtype=np.float32)
    two_pass = (xf - mean) / np.sqrt(((xf - mean) ** 2).mean(-1, keepdims=True) + np.float32(1e-5))
    one_pass_var = (xf * xf).mean(-1, keepdims=True, dtype=np.float32) - mean * mean
    one_pass = (xf - mean) / np.sqrt(np.maximum(one_pass_var, 0) + np.float32(1e-5))
    dims = {"M": 8, "N": 4096}
    assert (
        judge_bound(
            op, two_pass.astype(np.float32), reference, {"x": x64}, dims, "float32", kwargs={"eps": 1e-5}
        )[1]
        == []
    )
    assert judge_bound(
        op, one_pass.astype(np.float32), reference, {"x": x64}, dims, "float32", kwargs={"eps": 1e-5}
    )[1]


def test_group_norm_statistics_are_judged_over_the_group_not_each_channel():
    """Tied values, constant along L (a broadcast input): a channel of zeros in a group of {-2 .. 2} has x_hat 0
    exactly, but the group's float32 mean errs, so PyTorch's group_norm returns -1.6e-8 there (thorough suite,
    8.9e34 times a bound built from that channel's own row). Statistics of each channel alone (instance norm
    where group norm was asked for) still fail."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    values = rng.choice(np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]), size=(2, 169, 1))
    x = np.broadcast_to(values, (2, 169, 65)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 169).astype(np.float32)
    b = np.zeros(169, np.float32)
    x64 = x.astype(np.float64).reshape(2, 13, -1)
    normed = ((x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)).reshape(
        x.shape
    )
    reference = normed * w[None, :, None].astype(np.float64)
    op = make_op(
        Family.NORM, (InputSpec("x", ("B", "C", "L")), InputSpec("weight", ("C",)), InputSpec("bias", ("C",)))
    )
    inputs = {"x": x.astype(np.float64), "weight": w.astype(np.float64), "bias": b.astype(np.float64)}
    dims, kwargs = {"B": 2, "C": 169, "L": 65}, {"eps": 1e-5, "num_groups": 13}
    got = torch.nn.functional.group_norm(
        torch.from_numpy(x.copy()), 13, torch.from_numpy(w), torch.from_numpy(b), 1e-5
    )
    assert judge_bound(op, got.numpy(), reference, inputs, dims, "float32", kwargs=kwargs)[1] == []
    per_channel = torch.nn.functional.group_norm(
        torch.from_numpy(x.copy()), 169, torch.from_numpy(w), torch.from_numpy(b), 1e-5
    )
    assert judge_bound(op, per_channel.numpy(), reference, inputs, dims, "float32", kwargs=kwargs)[1]


def test_elementwise_spec_mismatch_tanh_vs_erf_gelu():
    from math import erf

    x = np.linspace(-4, 4, 2001).astype(np.float32)
    x64 = x.astype(np.float64)
    erf_gelu = 0.5 * x64 * (1 + np.vectorize(erf)(x64 / np.sqrt(2)))
    tanh_gelu = (0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))).astype(np.float32)
    op = make_op(Family.ELEMENTWISE, (InputSpec("x", ("N",)),))
    _, findings = judge_bound(op, tanh_gelu, erf_gelu, {"x": x64}, {"N": 2001}, "float32")
    assert findings and findings[0].kind is FailureKind.MISMATCH
    _, findings = judge_bound(op, erf_gelu.astype(np.float32), erf_gelu, {"x": x64}, {"N": 2001}, "float32")
    assert findings == []


def test_nonfinite_classes_must_match_exactly():
    r = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0])
    good = r.astype(np.float32)
    assert compare(good, r, np.full(5, 1e-6), Comparator.BOUND, "float32")[1] == []
    for index, wrong in [(0, 0.0), (1, -np.inf), (2, 3.0), (3, np.nan), (4, np.inf)]:
        y = good.copy()
        y[index] = wrong
        _, findings = compare(y, r, np.full(5, 1e-6), Comparator.BOUND, "float32")
        assert findings[0].kind is FailureKind.NONFINITE, (index, wrong)


def test_overflow_at_the_threshold_accepts_either_rounding():
    top = float(np.finfo(np.float16).max)
    r = np.array([top * 1.0002, top * 1.5])  # the first is within the allowance of the threshold
    allowed = np.array([top * 0.001, top * 0.001])
    assert compare(np.array([np.inf, np.inf], np.float16), r, allowed, Comparator.BOUND, "float16")[1] == []
    assert compare(np.array([top, np.inf], np.float16), r, allowed, Comparator.BOUND, "float16")[1] == []
    _, findings = compare(np.array([top, top], np.float16), r, allowed, Comparator.BOUND, "float16")
    assert findings[0].kind is FailureKind.NONFINITE  # 1.5x the maximum must overflow


def test_a_nan_where_the_reference_is_finite_is_always_judged():
    # Issue 41: `check_nan = false` used to switch NaN judging off altogether (an op writing NaN passed 6/6).
    # Now the comparison always judges non-finite values; check_nan only adds a rule (oracle/nonfinite_rules.py).
    r = np.array([1.0, 2.0])
    y = np.array([np.nan, 2.0], np.float32)
    (finding,) = compare(y, r, np.full(2, 1e-6), Comparator.ALLCLOSE, "float32")[1]
    assert finding.kind is FailureKind.NONFINITE and "got nan, reference 1" in finding.message
    assert compare(np.array([np.nan, 2.0], np.float32), np.array([np.nan, 2.0]), np.full(2, 1e-6),
                   Comparator.ALLCLOSE, "float32")[1] == []  # fmt: skip


def test_exact_family_compares_to_the_reference_rounded_to_the_output_dtype():
    r = np.array([1.0, 1.0 / 3.0, np.nan])
    assert compare_exact(r.astype(np.float16), r, "float16")[1] == []
    y = r.astype(np.float16)
    y[1] = np.nextafter(y[1], np.float16(1))
    stats, findings = compare_exact(y, r, "float16")
    assert findings and stats.exceeded == 1 and stats.worst_index == (1,)
    assert compare_exact(np.array([3, 4]), np.array([3, 5]), "int64")[1]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_invariant_on_every_dtype(dtype):
    numpy_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    good = np.full((4, 4), 0.25).astype(numpy_dtype)
    everything = Invariants(True, True, True, True, True, True, True)
    assert check_invariants(everything, good, (4, 4), dtype) == []
    cases = {
        "shape_preserved": (good, (4, 5)),
        "non_negative": (np.where(np.eye(4) > 0, -0.25, 0.25).astype(numpy_dtype), (4, 4)),
        "no_nan": (np.where(np.eye(4) > 0, np.nan, 0.25).astype(numpy_dtype), (4, 4)),
        "no_inf": (np.where(np.eye(4) > 0, np.inf, 0.25).astype(numpy_dtype), (4, 4)),
        "symmetric": (np.triu(np.ones((4, 4))).astype(numpy_dtype) * 0.25, (4, 4)),
        "normalized": (np.full((4, 4), 0.3).astype(numpy_dtype), (4, 4)),
    }
    for name, (output, shape) in cases.items():
        findings = check_invariants(Invariants(**{name: True}), output, shape, dtype)
        assert findings and name in findings[0].message, name
    assert check_invariants(Invariants(finite=True), cases["no_inf"][0], (4, 4), dtype)


def test_bias_z_test_catches_truncating_bf16_stores_not_rounding_ones():
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(65536)
    rounded = exact.astype(np.float32).astype(ml_dtypes.bfloat16)
    truncated = (exact.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    z_rounded = bias_z(rounded, exact, "bfloat16")
    z_truncated = bias_z(truncated.astype(ml_dtypes.bfloat16), exact, "bfloat16")
    assert z_rounded is not None and abs(z_rounded) < 6
    assert z_truncated is not None and z_truncated < -50
    # Both pass the usual elementwise tolerance for bf16:
    assert np.allclose(truncated, exact, rtol=1.6e-2, atol=1e-5)


def test_judging_extreme_values_fails_the_case_without_a_numpy_warning() -> None:
    """Outputs at the edge of float64 overflow when subtracted from the reference: the case fails, and nothing
    reaches the caller's terminal as a RuntimeWarning (issue #22, item 9; `gpuemu_ci.check` judges in the
    caller's process)."""
    import warnings

    from gpuemu_ci.calls import CallResult, CallStatus, CaseRun
    from gpuemu_ci.config.model import Validation
    from gpuemu_ci.oracle.judge import CaseContext, judge

    op = make_op(Family.ELEMENTWISE, (InputSpec("x", ("N",)),))
    x = np.array([1e308, -1e308, 3.0])
    run = CaseRun(
        reference=CallResult(CallStatus.OK, (x.copy(),)),
        op=CallResult(CallStatus.OK, (-x,)),
        reference_abs=CallResult(CallStatus.OK, (np.abs(x),)),
    )
    context = CaseContext("float64", {"N": 3}, {}, {"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        verdict = judge(op, context, run, Validation(dtypes=("float64",)))
    assert not verdict.passed and verdict.primary is not None
    assert verdict.primary.kind is FailureKind.MISMATCH


def test_a_float64_reduction_whose_reference_underflowed_allows_a_few_subnormals() -> None:
    # torch's float64 vector norm of a boundary row gave 4 subnormals (2e-323) where the reference's squares
    # underflowed to 0: half a float64 subnormal rounds to 0, which used to leave no allowance at all.
    op = make_op(Family.REDUCTION, (InputSpec("x", ("M", "N")),), output=("M",))
    x = np.full((2, 7), 1e-170)
    r = np.zeros(2)
    assert bounds.floor_term(op, "float64") > 0
    _, found = judge_bound(op, np.array([2e-323, 0.0]), r, {"x": x}, {"M": 2, "N": 7}, "float64")
    assert found == []
    _, found = judge_bound(op, np.array([1e-160, 0.0]), r, {"x": x}, {"M": 2, "N": 7}, "float64")
    assert found  # an error above the terms' own scale still fails
