"""Gradients an op declares it accumulates in 16 bits (`grad_accumulators`, oracle/gradient_accumulators.py):
PyTorch's CPU layer norm sums its weight's and bias's gradients over the rows in running sums stored in the
input's dtype. Undeclared, the gate reports it (the low-precision accumulator bug class); declared, torch's own
backward passes and realistic bugs next to it still fail."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuemu_ci.config.model import Backward, Family, InputSpec, Validation
from gpuemu_ci.oracle import gradient_accumulators, gradients, precision
from gpuemu_ci.results.model import FailureKind
from tests.oracle.test_working_precision import make_op

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
NUMPY_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
NAMES = ("x", "weight", "bias")
EPS = 1e-6


def _op(declared: bool):
    op = make_op(
        Family.NORM,
        (InputSpec("x", ("M", "N")), InputSpec("weight", ("N",)), InputSpec("bias", ("N",))),
    )
    accumulators = (("weight", "input"), ("bias", "input")) if declared else ()
    return replace(op, backward=Backward(NAMES, accumulators=accumulators))


def _reference(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    return centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + EPS) * w + b


def _torch(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, EPS)


def _run(fn, arrays, g, torch_dtype) -> list[np.ndarray]:
    leaves = [torch.from_numpy(a).to(torch_dtype).requires_grad_(True) for a in arrays]
    grads = torch.autograd.grad(fn(*leaves), leaves, torch.from_numpy(g).to(torch_dtype))
    return [t.double().numpy() for t in grads]


def _inputs(dtype: str, m: int, n: int, seed: int):
    """The gate's underflow-rows case: every other row of the upstream gradient is -(1 + |u|), so each column's
    running sum grows to ~m and is rounded at that scale on every row."""
    rng = np.random.default_rng(seed)
    cast = NUMPY_DTYPES[dtype]
    x = rng.uniform(-1, 1, (m, n)).astype(cast).astype(np.float64)
    w = rng.uniform(0.5, 1.5, n).astype(cast).astype(np.float64)
    b = rng.uniform(-1, 1, n).astype(cast).astype(np.float64)
    g = rng.uniform(-1, 1, (m, n))
    g[::2] = -(1.0 + np.abs(g[::2]))
    return (x, w, b), g.astype(cast).astype(np.float64)


def _verdict(op, arrays, g, dtype: str, grads=None):
    """judge_gradients as the judge side builds the case: the float64 reference, on |inputs| and |upstream|,
    measured in float32 and in the case's dtype, with the forward's context."""
    exact = _run(_reference, arrays, g, torch.float64)
    absolute = _run(_reference, tuple(np.abs(a) for a in arrays), np.abs(g), torch.float64)
    measured = [_run(_reference, arrays, g, d) for d in (torch.float32, TORCH_DTYPES[dtype])]
    got = grads if grads is not None else _run(_torch, arrays, g, TORCH_DTYPES[dtype])
    x, w, b = arrays
    case = gradients.GradientCase(
        dtype=dtype,
        dims={"M": x.shape[0], "N": x.shape[1]},
        names=NAMES,
        input_dtypes=dict.fromkeys(NAMES, dtype),
        reference=tuple(exact),
        reference_abs=tuple(absolute),
        low=lambda: tuple(precision.farthest(e, [m[i] for m in measured]) for i, e in enumerate(exact)),
        inputs={"x": x, "weight": w, "bias": b},
        upstream=(g,),
        kwargs={"eps": EPS},
    )
    cast = NUMPY_DTYPES[dtype]
    return gradients.judge_gradients(op, case, tuple(a.astype(cast) for a in got), None, Validation())


def test_torch_sums_the_bias_gradient_in_running_sums_of_the_input_dtype():
    """The evidence: 8,192 rows of ones, whatever the thread count, give a bias gradient far below 8,192 (a
    float32 accumulator returns it exactly)."""
    for dtype, cap in (("float16", 4096.0), ("bfloat16", 2048.0)):
        x = torch.randn(8192, 8).to(TORCH_DTYPES[dtype]).requires_grad_(True)
        b = torch.zeros(8, dtype=TORCH_DTYPES[dtype], requires_grad=True)
        torch.nn.functional.layer_norm(x, (8,), None, b).backward(torch.ones(8192, 8, dtype=b.dtype))
        assert float(b.grad.max()) <= cap * torch.get_num_threads()
        assert float(b.grad.max()) < 8192


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_layer_norm_parameter_gradients_fail_undeclared_and_pass_declared(dtype):
    # 256 rows: the running sums are rounded 128 times per thread (the gate's own cases, 64 rows, exceed the
    # float32 model by 1.2-1.6x on some seeds).
    arrays, g = _inputs(dtype, 256, 1025, seed=0)
    undeclared = _verdict(_op(False), arrays, g, dtype)
    assert any(f.message.startswith("grad of bias:") for f in undeclared.findings)
    assert not _verdict(_op(True), arrays, g, dtype).findings


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_dropped_partial_sum_still_fails_with_the_declaration(dtype):
    """The two-pass design's own bug: the second pass drops one thread's buffer (half the rows)."""
    arrays, g = _inputs(dtype, 64, 1025, seed=2)
    got = _run(_torch, arrays, g, TORCH_DTYPES[dtype])
    got[2] = g[:32].sum(axis=0)
    found = _verdict(_op(True), arrays, g, dtype, grads=got).findings
    assert found and found[0].kind is FailureKind.MISMATCH and found[0].message.startswith("grad of bias:")
    assert "declared " + dtype + " accumulator of this gradient (grad_accumulators)" in found[0].message


def test_the_declaration_counts_the_rows_summed_and_only_for_declared_inputs():
    op = _op(True)
    dims = {"M": 64, "N": 1025}
    assert gradient_accumulators.terms_summed(op, dims, "bias") == 64
    assert gradient_accumulators.declared_dtype(op, "bias", "bfloat16") == "bfloat16"
    assert gradient_accumulators.declared_dtype(op, "x", "bfloat16") is None
    r = np.ones(1025)
    assert gradient_accumulators.term(op, dims, "x", r, None, "bfloat16", False) is None
    assert gradient_accumulators.term(_op(False), dims, "bias", r, None, "bfloat16", False) is None
