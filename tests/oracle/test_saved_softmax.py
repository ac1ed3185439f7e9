"""A 16-bit softmax backward computed from the forward's output rounded to its dtype (oracle/saved_softmax.py,
issue #32), on PyTorch's own CPU backward (correct by definition) and realistic bugs next to it."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.config.model import Family, InputSpec, Validation
from gpuemu_ci.oracle import gradients, precision, saved_softmax
from gpuemu_ci.results.model import FailureKind
from tests.oracle.test_working_precision import make_op

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

# The control issue #32 flagged (bfloat16, all-negative rows, seed 4): row 2's g_1 and sum g y nearly cancel.
X = [[-3.09375, -3.546875], [-1.1875, -3.53125], [-5.625, -1.65625], [-4.90625, -3.625], [-3.8125, -6.03125],
     [-3.421875, -3.34375], [-1.21875, -2.265625]]  # fmt: skip
G = [[-2.171875, -4.03125], [-4.96875, -2.078125], [-1.03125, -1.3828125], [-1.2578125, -1.640625],
     [-2.0, -1.640625], [-2.234375, -2.90625], [-2.453125, -4.125]]  # fmt: skip
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
NUMPY_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _reference(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def _vjp(fn, x: np.ndarray, g: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.from_numpy(x).to(dtype).requires_grad_(True)
    y = fn(xt)
    (grad,) = torch.autograd.grad(y, [xt], torch.from_numpy(g).to(dtype))
    return y.detach().double().numpy(), grad.double().numpy()


def _case(op, x: np.ndarray, g: np.ndarray, dtype: str) -> gradients.GradientCase:
    """As the judge side builds it: the float64 reference, measured in float32 and in the case's dtype."""
    y_ref, exact = _vjp(_reference, x, g, torch.float64)
    measured = [_vjp(_reference, x, g, d)[1] for d in (torch.float32, TORCH_DTYPES[dtype])]
    return gradients.GradientCase(
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
    )


def _findings(op, case, grad: np.ndarray, dtype: str):
    return gradients.judge_gradients(
        op, case, (grad.astype(NUMPY_DTYPES[dtype]),), None, Validation()
    ).findings


def test_the_flagged_bfloat16_softmax_backward_passes_and_its_message_names_the_saved_output():
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    x, g = np.array(X), np.array(G)
    case = _case(op, x, g, "bfloat16")
    _, got = _vjp(lambda t: torch.softmax(t, dim=-1), x, g, torch.bfloat16)
    assert not _findings(op, case, got, "bfloat16")
    # Without the saved output's rounding (the term left out), torch's own backward fails: the old model.
    r = case.reference[0]
    term = saved_softmax.term(op, "bfloat16", gradients._forward(case), "x", r)
    assert term is not None
    without = gradients.structure_bound(op, case, "x", r, None, "bfloat16") - op.error_model.bound_c * term
    assert float(np.max(np.abs(got - r) / without)) > 1
    # A bug of realistic size: the sum of g y over the wrong axis (the rows' columns).
    y = torch.softmax(torch.from_numpy(x).to(torch.bfloat16), dim=-1).double().numpy()
    wrong_axis = y * (g - (g * y).sum(axis=0, keepdims=True))
    found = _findings(op, case, wrong_axis, "bfloat16")
    assert found and found[0].kind is FailureKind.MISMATCH
    assert "saved softmax output to bfloat16" in found[0].message


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_softmax_backward_of_short_cancelling_rows_passes_and_a_dropped_chain_term_fails(dtype):
    """Many short rows of all-negative values and upstream gradients, as the gate draws them."""
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    rng = np.random.default_rng(11)
    numpy_dtype = NUMPY_DTYPES[dtype]
    x = (-(2.0 * np.abs(rng.uniform(-1, 1, (512, 2))) + 1.0)).astype(numpy_dtype).astype(np.float64)
    g = (-(2.0 * np.abs(rng.uniform(-1, 1, (512, 2))) + 1.0)).astype(numpy_dtype).astype(np.float64)
    case = _case(op, x, g, dtype)
    _, got = _vjp(lambda t: torch.softmax(t, dim=-1), x, g, TORCH_DTYPES[dtype])
    assert not _findings(op, case, got, dtype)
    y = torch.softmax(torch.from_numpy(x).to(TORCH_DTYPES[dtype]), dim=-1).double().numpy()
    assert _findings(op, case, y * g, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_log_softmax_backward_from_its_saved_output_passes(dtype):
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    rng = np.random.default_rng(13)
    numpy_dtype = NUMPY_DTYPES[dtype]
    x = (rng.standard_normal((64, 33)) * 4).astype(numpy_dtype).astype(np.float64)
    g = rng.uniform(-1, 1, (64, 33)).astype(numpy_dtype).astype(np.float64)

    def reference(t):
        return t - torch.logsumexp(t, dim=-1, keepdim=True)

    y_ref, exact = _vjp(reference, x, g, torch.float64)
    measured = [_vjp(reference, x, g, d)[1] for d in (torch.float32, TORCH_DTYPES[dtype])]
    case = gradients.GradientCase(
        dtype=dtype, dims={"M": 64, "N": 33}, names=("x",), input_dtypes={"x": dtype}, reference=(exact,),
        reference_abs=None, low=lambda: (precision.farthest(exact, measured),), inputs={"x": x},
        forward=(y_ref,), upstream=(g,),
    )  # fmt: skip
    assert saved_softmax.term(op, dtype, gradients._forward(case), "x", exact) is not None
    _, got = _vjp(lambda t: torch.log_softmax(t, dim=-1), x, g, TORCH_DTYPES[dtype])
    assert not _findings(op, case, got, dtype)
    # The sum of g dropped (g alone): wrong by exp(y) sum g.
    assert _findings(op, case, g, dtype)


# A float16 boundary row the gate drew (bench/gems_style's softmax, seed 1): one dominant value, so most saved y
# are float16 subnormals or 0, each off by up to half the subnormal spacing rather than u_y |y|.
SUBNORMAL_ROW = [-1.0, -0.3933, -1.0, -0.3113, 1.747, 2.384e-07, -1.788e-07, -2.384e-07, -0.8403, -2.104, 0.5,
                 -0.3811, -10.5, 1.0, 1.536, -0.5, 16.0, -0.6899, -1.561, 0.6846, 0.3425, -32.0, 2.0, 2.384e-07,
                 0.0827, -0.6826, -0.1782, -0.7212, -1.788e-07, -10.5, 0.686, -0.6963, 6.104e-05]  # fmt: skip


@pytest.mark.parametrize("upstream_seed", [0, 2, 4])
def test_float16_softmax_backward_from_a_saved_output_of_subnormals_passes(upstream_seed):
    """y saved in float16 below its normal range errs by half the subnormal spacing: a correct kernel-style
    backward (float32 arithmetic on the saved float16 y, dx stored in float16) stays inside the bound, where the
    relative-only term (u_y |y|) put it at 1.2-1.4x; the dropped chain term still fails."""
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    x = np.array([SUBNORMAL_ROW]).astype(np.float16).astype(np.float64)
    g = np.random.default_rng(upstream_seed).uniform(-4, 4, x.shape).astype(np.float16).astype(np.float64)
    case = _case(op, x, g, "float16")
    y16 = torch.softmax(torch.from_numpy(x).to(torch.float16).float(), dim=-1).half().float()
    g32 = torch.from_numpy(g).float()
    got = (y16 * (g32 - (g32 * y16).sum(-1, keepdim=True))).half().double().numpy()
    r = case.reference[0]
    bound = gradients.structure_bound(op, case, "x", r, None, "float16")
    assert float(np.max(np.abs(got - r) / bound)) < 1
    assert not _findings(op, case, got, "float16")
    # The relative-only term in its place: this correct backward is over the bound.
    forward = gradients._forward(case)
    assert forward is not None
    y = forward.reference[0]
    u_y = float(np.finfo(np.float16).eps) / 2
    relative_only = u_y * (np.abs(r) + np.abs(y) * (np.abs(g) * np.abs(y)).sum(axis=-1, keepdims=True))
    term = saved_softmax.term(op, "float16", forward, "x", r)
    assert term is not None
    without = bound - op.error_model.bound_c * (term - relative_only)
    assert float(np.max(np.abs(got - r) / without)) > 1
    assert _findings(op, case, (y16 * g32).half().double().numpy(), "float16")  # the chain term dropped
