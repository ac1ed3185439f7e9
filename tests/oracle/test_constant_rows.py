"""A variance's backward on rows of equal values (oracle/constant_rows.py, issue #32): PyTorch's float32 and
float64 `var` backward centres x with a rounded mean, so it returns the mean's rounding where the exact gradient
is 0; it passes once the slope is probed, and a backward whose mean divides by the wrong length still fails."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from gpuemu_ci.config.model import Validation
from gpuemu_ci.oracle import gradients, precision
from gpuemu_ci.results.model import FailureKind
from tests.oracle.test_row_statistics import DTYPES, _reduction_op, _reference_var, _vjp

torch = pytest.importorskip("torch")


def _reference_var0(x):
    mean = x.mean(dim=-1, keepdim=True)
    return ((x - mean) ** 2).sum(dim=-1) / x.shape[-1]


def _reference_std0(x):
    """sqrt of the variance with torch's subgradient 0 where it is 0 (as the controls' reference)."""
    s = _reference_var0(x)
    return torch.where(s > 0, torch.sqrt(torch.where(s > 0, s, torch.ones_like(s))), torch.zeros_like(s))


def _constant_rows(dtype: np.dtype, rows: int = 63, n: int = 63) -> tuple[np.ndarray, np.ndarray]:
    """Every row one value repeated (a broadcast row), of full mantissas: their float32 mean is an ulp off."""
    rng = np.random.default_rng(11)
    values = rng.standard_normal(rows).astype(dtype)
    x = np.ascontiguousarray(np.broadcast_to(values[:, None], (rows, n)))
    g = rng.standard_normal(rows).astype(dtype)
    return x, g


def _verdict(x, g, dtype: str, reference, got: np.ndarray, probed: bool) -> gradients.GradientVerdict:
    y_ref, exact = _vjp(reference, x, g, torch.float64)

    def probe(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"x": _vjp(reference, np.asarray(inputs["x"], dtype=np.float64), g.astype(np.float64),
                          torch.float64)[1]}  # fmt: skip

    measured = [_vjp(reference, x, g, torch.float32)[1]]
    case = gradients.GradientCase(
        dtype=dtype,
        dims={"M": x.shape[0], "N": x.shape[1]},
        names=("x",),
        input_dtypes={"x": dtype},
        reference=(exact,),
        reference_abs=None,
        low=lambda: (precision.farthest(exact, measured),),
        inputs={"x": x},
        forward=(y_ref,),
        upstream=(g,),
        probe=probe if probed else None,
        correlated=True,  # a broadcast row: the judge side marks its addends as repeated
    )
    return gradients.judge_gradients(_reduction_op(), case, (got.astype(x.dtype),), None, Validation())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_var_backward_on_constant_rows_passes_and_a_mean_over_the_wrong_length_fails(dtype):
    x, g = _constant_rows(np.dtype(dtype))
    _, got = _vjp(lambda t: torch.var(t, dim=-1, correction=0), x, g, DTYPES[dtype])
    assert np.any(got != 0)  # torch's own rounding: the exact gradient is 0 on every row
    old = _verdict(x, g, dtype, _reference_var0, got, probed=False)
    assert old.findings and old.findings[0].kind is FailureKind.MISMATCH  # the false alarm of issue #32
    new = _verdict(x, g, dtype, _reference_var0, got, probed=True)
    assert not new.findings
    # A backward whose mean divides the row's sum by the block size (64) instead of N (63).
    xs = x.astype(np.float64)
    wrong_mean = xs.sum(axis=-1, keepdims=True) / 64
    bug = 2.0 * g.astype(np.float64)[:, None] * (xs - wrong_mean) / x.shape[-1]
    verdict = _verdict(x, g, dtype, _reference_var0, bug, probed=True)
    assert verdict.findings and verdict.findings[0].kind is FailureKind.MISMATCH
    assert "rows of equal values" in verdict.findings[0].message


def test_a_std_on_constant_rows_allows_a_gradient_of_the_norm_it_has_elsewhere_and_no_more():
    """A std is not differentiable on a constant row: its probed slope halves as the ramp doubles, and its
    gradient everywhere else has norm |g| / sqrt(n). A kernel's rounded mean picks a direction: PyTorch's float64
    std of 9 copies of -4094.59 is 4.8e-13 and its gradient 0.118 g in every element (the thorough suite's false
    alarm, 6e7 times the old allowance). That passes; ten times |g| in every element still fails, and so does NaN."""
    x = np.full((1, 9), float.fromhex("-0x1.ffd2eb823e7f6p+11"))  # -4094.591248628679
    g = np.array([-5.3])
    _, got = _vjp(lambda t: torch.std(t, dim=-1, correction=0), x, g, torch.float64)
    assert np.all(np.abs(got) > 0.5)  # torch's rounded mean: the exact std is 0
    assert not _verdict(x, g, "float64", _reference_std0, got, probed=True).findings
    old = _verdict(x, g, "float64", _reference_std0, got, probed=False)
    assert old.findings and old.findings[0].kind is FailureKind.MISMATCH
    for wrong in (np.full(x.shape, 10.0 * abs(g[0])), np.full(x.shape, np.nan)):
        verdict = _verdict(x, g, "float64", _reference_std0, wrong, probed=True)
        assert verdict.findings, wrong
    xs, gs = _constant_rows(np.dtype("float32"))
    beyond = np.broadcast_to(2.0 * np.abs(gs)[:, None], xs.shape)  # every element twice the whole norm
    verdict = _verdict(xs, gs, "float32", _reference_std0, beyond, probed=True)
    assert verdict.findings and verdict.findings[0].kind is FailureKind.MISMATCH
    assert "not differentiable" in verdict.findings[0].message


def test_rows_that_are_not_constant_are_not_probed():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    g = rng.standard_normal(8).astype(np.float32)
    _, exact = _vjp(_reference_var, x, g, torch.float64)
    verdict = _verdict(x, g, "float32", _reference_var, exact * 1.01, probed=True)
    assert verdict.findings and "rows of equal values" not in verdict.findings[0].message
