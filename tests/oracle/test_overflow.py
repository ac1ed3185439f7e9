"""Non-finite outputs where the exact answer is finite (oracle/overflow.py, issue #32): they always fail, and the
failure says whether the reference's own formula overflows the working precision there too. PyTorch's float16
p-norm backward (p = 3) overflows where a float32 evaluation does not; a naive softmax overflows float32 itself."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.config.model import Family, InputSpec, Validation
from gpuemu_ci.oracle import gradients, overflow
from gpuemu_ci.oracle.model import FailureKind
from tests.oracle.test_working_precision import make_op

torch = pytest.importorskip("torch")


def _reference_norm3(x):
    return ((x.abs() ** 3).sum(dim=-1)) ** (1.0 / 3.0)


def _grad(fn, x: np.ndarray, g: np.ndarray, dtype) -> np.ndarray:
    xt = torch.from_numpy(x).to(dtype).requires_grad_(True)
    (grad,) = torch.autograd.grad(fn(xt), [xt], torch.from_numpy(g).to(dtype))
    return np.asarray(grad.double().numpy())


def test_torch_float16_norm_backward_overflowing_where_float32_does_not_fails_and_says_so():
    rng = np.random.default_rng(1)
    x = (256.0 + rng.standard_normal((8, 1024))).astype(np.float16)  # offset rows: |x| ~ 256, N ~ 2580
    g = rng.standard_normal(8).astype(np.float16)
    exact = _grad(_reference_norm3, x, g, torch.float64)
    got = _grad(lambda t: torch.linalg.vector_norm(t, ord=3, dim=-1), x, g, torch.float16)
    assert np.any(np.isnan(got)) and np.all(np.isfinite(exact))
    op = make_op(Family.REDUCTION, (InputSpec("x", ("M", "N"), "float16"),), output=("M",))
    case = gradients.GradientCase(
        dtype="float16",
        dims={"M": 8, "N": 1024},
        names=("x",),
        input_dtypes={"x": "float16"},
        reference=(exact,),
        reference_abs=None,
        low=lambda: None,
        working=lambda: (_grad(_reference_norm3, x, g, torch.float32),),
    )
    verdict = gradients.judge_gradients(op, case, (got.astype(np.float16),), None, Validation())
    nonfinite = [f for f in verdict.findings if f.kind is FailureKind.NONFINITE]
    assert nonfinite and "the reference evaluated in float32 is finite at all" in nonfinite[0].message


def test_a_formula_that_overflows_float32_itself_still_fails_and_says_so():
    x = np.array([[100.0, 1.0, 0.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    with np.errstate(all="ignore"):
        naive = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)  # inf / inf in float32
    exact = np.exp(x.astype(np.float64)) / np.exp(x.astype(np.float64)).sum(axis=-1, keepdims=True)
    assert np.isnan(naive[0, 0]) and np.isfinite(exact).all()
    text = overflow.note(naive, exact, naive, "float32", "float32")
    assert "non-finite at all 1 of them too" in text
    assert (
        overflow.note(exact, exact, naive, "float32", "float32") == ""
    )  # nothing non-finite: nothing to say
