"""Norm gradients the layer-norm model did not cover (oracle/norm_rows.py, issue #32): PyTorch's own float32 RMS norm
backward where a dominant value cancels x's gradient, its bfloat16 layer norm backward from the rstd it saved in
bfloat16, and its float64 layer norm weight gradient over rows of equal float64 values pass; the same gradients with
a realistic bug still fail."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from gpuemu_ci.config.model import Backward, Family, InputSpec, Validation
from gpuemu_ci.oracle import gradients, precision
from gpuemu_ci.results.model import FailureKind
from tests.oracle.test_working_precision import make_op

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

TORCH = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
NUMPY = {"float32": np.float32, "float64": np.float64, "bfloat16": ml_dtypes.bfloat16}


def _op(names: tuple[str, ...], accumulators=()):
    specs = (InputSpec("x", ("M", "N")), *(InputSpec(n, ("N",)) for n in names[1:]))
    return replace(make_op(Family.NORM, specs), backward=Backward(names, accumulators=accumulators))


def _rms_reference(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def _layer_norm_reference(x, w, b, eps):
    """As bench/torch_controls writes it (its 16-bit backward, measured, is what the gate compares with)."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def _grads(fn: Callable, arrays, g: np.ndarray, dtype, eps: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """(forward, gradients) of fn computed by torch in `dtype`, as float64."""
    leaves = [
        torch.from_numpy(np.asarray(a, dtype=np.float64)).to(dtype).requires_grad_(True) for a in arrays
    ]
    out = fn(*leaves, eps)
    grads = torch.autograd.grad(out, leaves, torch.from_numpy(np.asarray(g, dtype=np.float64)).to(dtype))
    return out.detach().double().numpy(), [t.double().numpy() for t in grads]


def _verdict(op, reference: Callable, arrays, g, dtype: str, got, eps: float):
    """judge_gradients as the judge side builds the case: the float64 reference, on |inputs| and |upstream|,
    measured in float32 (and the 16-bit dtype), with the forward's context."""
    names = op.backward.grad_inputs
    forward, exact = _grads(reference, arrays, g, torch.float64, eps)
    _, absolute = _grads(reference, [np.abs(a) for a in arrays], np.abs(g), torch.float64, eps)
    runs = [torch.float32] + ([TORCH[dtype]] if dtype == "bfloat16" else [])
    measured = [_grads(reference, arrays, g, d, eps)[1] for d in runs]
    x = arrays[0]
    case = gradients.GradientCase(
        dtype=dtype,
        dims={"M": x.shape[0], "N": x.shape[1]},
        names=names,
        input_dtypes=dict.fromkeys(names, dtype),
        reference=tuple(exact),
        reference_abs=tuple(absolute),
        low=lambda: tuple(precision.farthest(e, [m[i] for m in measured]) for i, e in enumerate(exact)),
        inputs=dict(zip(names, arrays, strict=True)),
        forward=(forward,),
        upstream=(g,),
        kwargs={"eps": eps},
    )
    cast = NUMPY[dtype]
    return gradients.judge_gradients(
        op, case, tuple(np.asarray(a).astype(cast) for a in got), None, Validation()
    )


def _mismatches(verdict, name: str) -> list:
    return [
        f
        for f in verdict.findings
        if f.kind is FailureKind.MISMATCH and f.message.startswith(f"grad of {name}:")
    ]


# --- RMS norm: a dominant value cancels x's gradient -----------------------------------------------------------
def _dominant_rows(seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Rows of two values, one of them ~1e10 (the gate's boundary values: 8.6e9 next to 0.66): at the large value
    x_hat = ~sqrt(2) and g w - x_hat mean(g w x_hat) cancels to ~1e-25."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 2))
    # Powers of two, as the gate's boundary values are: the reference evaluated in float32 is exact there, so
    # its measured error (oracle/precision.py) says nothing about the terms' rounding.
    x[np.arange(16), rng.integers(0, 2, 16)] = rng.choice([-1.0, 1.0], 16) * 2.0 ** rng.integers(30, 35, 16)
    w = 1.0 + 0.1 * rng.standard_normal(2)
    g = rng.standard_normal((16, 2))
    return [a.astype(np.float32).astype(np.float64) for a in (x, w)], g.astype(np.float32).astype(np.float64)


def _rms_torch(x, w, eps):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def test_torch_float32_rms_norm_backward_passes_where_a_dominant_value_cancels_the_gradient():
    arrays, g = _dominant_rows(seed=3)
    op = _op(("x", "weight"))
    _, got = _grads(_rms_torch, arrays, g, torch.float32, 1e-6)
    _, exact = _grads(_rms_reference, arrays, g, torch.float64, 1e-6)
    cancelled = np.abs(exact[0]) < 1e-20
    assert np.any(cancelled) and np.any(got[0][cancelled] != 0)  # torch returns the terms' rounding there
    verdict = _verdict(op, _rms_reference, arrays, g, "float32", got, 1e-6)
    assert not verdict.findings, verdict.findings


def test_an_rms_norm_backward_that_projects_without_the_weight_still_fails():
    """dx = rstd (g w - x_hat mean(g x_hat)): the weight (1 +- 0.1) left out of the projection."""
    arrays, g = _dominant_rows(seed=3)
    x, w = arrays
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
    x_hat = x * rstd
    wrong_x = rstd * (g * w - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))
    _, got = _grads(_rms_torch, arrays, g, torch.float32, 1e-6)
    verdict = _verdict(_op(("x", "weight")), _rms_reference, arrays, g, "float32", [wrong_x, got[1]], 1e-6)
    found = _mismatches(verdict, "x")
    assert found and "the RMS norm's rstd saved in float32" in found[0].message


# --- layer norm: the rstd saved in bfloat16 --------------------------------------------------------------------
def _bf16_rows(n: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    if (
        n == 2
    ):  # the case the gate flagged on PyTorch's kernel (106x): its bfloat16 reference happens to be exact
        x = np.array([[1.34375, 2.75506488e-40], [-0.5625, 1.0]])
        arrays = [x, np.array([0.953125, 0.953125]), np.array([0.41601562, -0.0])]
        g = np.array([[-1.2734375, -1.0], [1.0, 0.5078125]])
        cast = ml_dtypes.bfloat16
        return [a.astype(cast).astype(np.float64) for a in arrays], g.astype(cast).astype(np.float64)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((16, n)), rng.uniform(0.9, 1.1, n), rng.uniform(-0.5, 0.5, n)]
    g = rng.standard_normal((16, n))
    cast = ml_dtypes.bfloat16
    return [a.astype(cast).astype(np.float64) for a in arrays], g.astype(cast).astype(np.float64)


def _layer_norm_torch(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def test_torch_bfloat16_layer_norm_saves_rstd_in_bfloat16_and_its_backward_reads_it_back():
    """The evidence: native_layer_norm returns rstd in bfloat16, and torch's backward formula evaluated in float32
    from those bfloat16 statistics reproduces its gradient bit for bit (from float32 statistics it does not)."""
    arrays, g = _bf16_rows(2, seed=0)
    x, w, b = (torch.from_numpy(a).to(torch.bfloat16) for a in arrays)
    _, mean, rstd = torch.native_layer_norm(x, (2,), w, b, 1e-6)
    assert rstd.dtype == torch.bfloat16
    _, got = _grads(_layer_norm_torch, arrays, g, torch.bfloat16, 1e-6)

    def emulated(m, r) -> np.ndarray:
        xf, gw = x.float(), torch.from_numpy(g).float() * w.float()
        m, r = m.float().reshape(-1, 1), r.float().reshape(-1, 1)
        ds, db = (gw * xf).sum(-1, keepdim=True), gw.sum(-1, keepdim=True)
        scale = (db * m - ds) * r**3 / 2
        return np.asarray((r * gw + scale * xf - scale * m - db * r / 2).bfloat16().double().numpy())

    assert rstd.double().flatten().tolist() == [1.4921875, 1.28125]  # exactly 1.48837 and 1.27999
    assert np.array_equal(emulated(mean, rstd), got[0])
    xd = x.double()
    exact_rstd = 1.0 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-6)
    assert not np.array_equal(emulated(xd.mean(-1).float(), exact_rstd.float()), got[0])


@pytest.mark.parametrize("n", [2, 8])
def test_torch_bfloat16_layer_norm_backward_passes_on_short_rows(n):
    """Rows of two values: x_hat = +-1 and the exact gradient is rstd (a - b)/2 eps/(var + eps) ~ 1e-6, while
    the bfloat16 rstd leaves rstd (a - b) delta ~ 1e-3."""
    arrays, g = _bf16_rows(n, seed=0)
    op = _op(("x", "weight", "bias"), accumulators=(("weight", "input"), ("bias", "input")))
    _, got = _grads(_layer_norm_torch, arrays, g, torch.bfloat16, 1e-6)
    verdict = _verdict(op, _layer_norm_reference, arrays, g, "bfloat16", got, 1e-6)
    assert not verdict.findings, verdict.findings


def test_a_layer_norm_backward_with_bessels_correction_still_fails_in_bfloat16():
    """rstd from the unbiased variance in the backward (n - 1 = 7): x_hat 7% too small."""
    arrays, g = _bf16_rows(8, seed=0)
    x, w, _ = arrays
    centred = x - x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt((centred * centred).sum(axis=-1, keepdims=True) / 7 + 1e-6)
    x_hat, gw = centred * rstd, g * w
    wrong_x = rstd * (
        gw - gw.mean(axis=-1, keepdims=True) - x_hat * (gw * x_hat).mean(axis=-1, keepdims=True)
    )
    op = _op(("x", "weight", "bias"), accumulators=(("weight", "input"), ("bias", "input")))
    _, got = _grads(_layer_norm_torch, arrays, g, torch.bfloat16, 1e-6)
    verdict = _verdict(op, _layer_norm_reference, arrays, g, "bfloat16", [wrong_x, got[1], got[2]], 1e-6)
    found = _mismatches(verdict, "x")
    assert found and "the layer norm's rstd saved in bfloat16" in found[0].message


# --- layer norm: the weight's gradient over rows of equal float64 values ---------------------------------------
def _constant_rows() -> tuple[list[np.ndarray], np.ndarray]:
    """The gate's boundary values broadcast along N, every row one value (-700 among them): the exact x_hat is 0
    everywhere, and a float64 mean of 15 copies of -700 is not -700, so the reference's weight gradient is its own
    rounding alone (~1e-13) and torch's is its (~1e-11), each a few ulps of x - mean times rstd = 316."""
    rng = np.random.default_rng(5)
    values = np.array([0.0, 0.5, 2.0, 1.3497, 0.35707, -1.0, 1.0, -1.8849, 1.5372, 0.65666, -0.54192, 1.1754])
    values = np.concatenate(
        [values, [1.7927, -700.0, 0.025452, 0.1394, -0.85816, 0.055469, 0.46381, 0.72634]]
    )
    x = np.repeat(values[:, None], 15, axis=1)
    g = rng.standard_normal(x.shape) * rng.choice([1.0, 16.0], x.shape)
    return [x, rng.uniform(0.9, 1.1, 15), rng.uniform(-1, 1, 15)], g


def test_torch_float64_layer_norm_weight_gradient_passes_on_rows_of_equal_values():
    arrays, g = _constant_rows()
    op = _op(("x", "weight", "bias"), accumulators=(("weight", "input"), ("bias", "input")))
    _, got = _grads(_layer_norm_torch, arrays, g, torch.float64, 1e-5)
    verdict = _verdict(op, _layer_norm_reference, arrays, g, "float64", got, 1e-5)
    assert not verdict.findings, verdict.findings


def test_a_float64_layer_norm_weight_gradient_from_the_affine_output_still_fails():
    """The weight's gradient summed over g y (the output after the bias, as a fused kernel that reads y back might)
    instead of g x_hat: off by sum g b."""
    arrays, g = _constant_rows()
    op = _op(("x", "weight", "bias"), accumulators=(("weight", "input"), ("bias", "input")))
    y, got = _grads(_layer_norm_torch, arrays, g, torch.float64, 1e-5)
    wrong = (g * y).sum(axis=0)
    verdict = _verdict(op, _layer_norm_reference, arrays, g, "float64", [got[0], wrong, got[2]], 1e-5)
    assert _mismatches(verdict, "weight")
