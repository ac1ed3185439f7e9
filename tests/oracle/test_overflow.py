"""Non-finite outputs where the exact answer is finite (oracle/overflow.py, issue #32): they always fail, and the
failure says whether the reference's own formula overflows the working precision there too. PyTorch's float16
p-norm backward (p = 3) overflows where a float32 evaluation does not; a naive softmax overflows float32 itself."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.config.model import Family, InputSpec, Validation
from gpuemu_ci.oracle import gradients, overflow
from gpuemu_ci.results.model import FailureKind
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


def test_torch_float32_std_backward_overflows_on_a_subnormal_std_where_float32_does_not_and_fails_saying_so():
    """A defect of torch's kernel (bench/torch_controls/known_defects.toml): its std backward divides the upstream
    gradient by 2 std (FunctionsManual.cpp std_backward) before multiplying by x - mean. A row of float32
    subnormals has a subnormal std (the forward accumulates in float64), the quotient overflows, and the gradient
    is +-inf where it is +-g/2; dividing x - mean by the std first is finite."""
    x = np.array([[-0.0, 5.6051939e-45], [0.5, -1.25]], dtype=np.float32)
    g = np.array([-0.0056884433, 0.75], dtype=np.float32)

    def reference(t):
        mean = t.mean(dim=-1, keepdim=True)
        var = ((t - mean) ** 2).sum(dim=-1) / t.shape[-1]
        positive = var > 0  # torch's subgradient 0 at a std of 0
        return torch.where(
            positive, torch.where(positive, var, torch.ones_like(var)) ** 0.5, torch.zeros_like(var)
        )

    def torch_std(t):
        return torch.std(t, dim=-1, correction=0)

    got = _grad(torch_std, x, g, torch.float32)
    exact = _grad(reference, x.astype(np.float64), g.astype(np.float64), torch.float64)
    assert np.array_equal(got[0], [np.inf, -np.inf]) and np.allclose(exact[0], [-g[0] / 2, g[0] / 2])
    std = torch.std(torch.from_numpy(x), dim=-1, correction=0)
    assert 0 < float(std[0]) < 1e-44  # subnormal, not 0: the backward's mask for std == 0 does not apply
    xt, gt = torch.from_numpy(x), torch.from_numpy(g)
    emulated = (gt / (std * 2))[:, None] * (xt - xt.mean(dim=-1, keepdim=True))  # 2/N * grad_var * (x - mean)
    assert np.array_equal(emulated.double().numpy()[0], got[0])
    centred_first = gt[:, None] * ((xt - xt.mean(dim=-1, keepdim=True)) / std[:, None]) / 2
    assert np.all(np.isfinite(centred_first.numpy()))

    op = make_op(Family.REDUCTION, (InputSpec("x", ("M", "N"), "float32"),), output=("M",))
    case = gradients.GradientCase(
        dtype="float32",
        dims={"M": 2, "N": 2},
        names=("x",),
        input_dtypes={"x": "float32"},
        reference=(exact,),
        reference_abs=None,
        low=lambda: None,
        working=lambda: (_grad(reference, x, g, torch.float32),),
    )
    verdict = gradients.judge_gradients(op, case, (got.astype(np.float32),), None, Validation())
    nonfinite = [f for f in verdict.findings if f.kind is FailureKind.NONFINITE]
    assert (
        nonfinite and "the reference evaluated in float32 is finite at all 2 of them" in nonfinite[0].message
    )
