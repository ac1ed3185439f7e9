"""bfloat16 matrix products that treat subnormal inputs as zero (oracle/flushed.py, issue #32): PyTorch's CPU
bf16 GEMM (AVX512-BF16/AMX instructions, which flush by definition) returns 0 where the exact product of a row of
~1e10 with a column of bf16 subnormals is 1e-29; that passes, while a product that drops the last column of K
still fails, and a float16 product that flushes fails unless the op declares `flush_to_zero`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, InputSpec
from gpuemu_ci.oracle import flushed
from tests.oracle.test_working_precision import allowance, make_op

torch = pytest.importorskip("torch")

M, K, N = 13, 33, 15
TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}
NUMPY = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _op(dtype: str, **model):
    inputs = (InputSpec("a", ("M", "K"), dtype), InputSpec("b", ("K", "N"), dtype))
    return make_op(Family.MATMUL, inputs, output=("M", "N"), **model)


def _inputs(dtype: str, huge: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Rows of unit values (with two of ~1e10 where `huge`); column 0 of b all below the dtype's smallest
    normal."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((M, K))
    if huge:
        a[:, 2], a[:, 16] = (1.7e10, 1.3e10) if dtype == "bfloat16" else (1e4, 1e4)
    b = rng.standard_normal((K, N))
    b[:, 0] = dtypes.info(dtype).min_normal / 32  # a subnormal of the dtype
    cast = NUMPY[dtype]
    return a.astype(cast).astype(np.float64), b.astype(cast).astype(np.float64)


def _torch(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    product = torch.from_numpy(a).to(TORCH[dtype]) @ torch.from_numpy(b).to(TORCH[dtype])
    return np.asarray(product.double().numpy())


def _exceeds(
    op, got: np.ndarray, a: np.ndarray, b: np.ndarray, dtype: str, rows: slice = slice(None)
) -> bool:
    """Whether any element of `rows` of the product exceeds its allowance, the whole case judged."""
    exact = a @ b
    dims = {"M": a.shape[0], "K": K, "N": N}
    allowed = allowance(op, exact, {"a": a, "b": b}, dims, np.abs(a) @ np.abs(b), dtype=dtype)
    return bool(np.any((np.abs(got - exact) > allowed)[rows]))


def test_torch_bf16_matmul_flushing_subnormal_inputs_passes_and_a_dropped_column_of_k_fails():
    a, b = _inputs("bfloat16")
    got = _torch(a, b, "bfloat16")
    exact = a @ b
    flushed_column = np.all(got[:, 0] == 0) and np.all(np.abs(exact[:, 0]) > 1e-31)
    assert flushed_column  # torch's GEMM treated the subnormals as zero
    assert not _exceeds(_op("bfloat16"), got, a, b, "bfloat16")
    a, b = _inputs("bfloat16", huge=False)  # unit rows, the subnormal column still there
    a[0, 2] = 1e37  # would allow errors of ~15 everywhere if it widened every row's allowance
    assert not _exceeds(_op("bfloat16"), _torch(a, b, "bfloat16"), a, b, "bfloat16")
    dropped = _torch(a[:, :-1], b[:-1], "bfloat16")
    assert _exceeds(_op("bfloat16"), dropped, a, b, "bfloat16", rows=slice(1, None))
    assert "bfloat16 dot products flush them" in flushed.note(_op("bfloat16"), "bfloat16")


def test_a_float16_product_that_flushes_fails_unless_the_op_declares_flush_to_zero():
    a, b = _inputs("float16")
    flushing = a @ np.where(np.abs(b) < dtypes.info("float16").min_normal, 0.0, b)
    flushing = flushing.astype(np.float16).astype(np.float64)
    assert _exceeds(_op("float16"), flushing, a, b, "float16")
    assert not _exceeds(_op("float16", flush_to_zero=True), flushing, a, b, "float16")
    assert flushed.note(_op("float16"), "float16") == ""


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.asarray((p / p.sum(axis=-1, keepdims=True)) @ v)


def test_torch_bf16_attention_flushing_subnormal_values_passes_and_a_wrong_output_fails():
    """PyTorch's CPU bfloat16 attention returns 0 where every value of a column of V is a bfloat16 subnormal
    (-3.7e-40): its P @ V runs on flushing bf16 dot instructions. The bound allows the smallest normal for the
    flushed values and n flushed products; attention with unscaled scores still fails."""
    from gpuemu_ci.oracle import bounds

    rng = np.random.default_rng(5)
    S, T, D = 4, 63, 13
    cast = ml_dtypes.bfloat16
    q = rng.standard_normal((S, D)).astype(cast).astype(np.float64)
    k = rng.standard_normal((T, D)).astype(cast).astype(np.float64)
    v = rng.standard_normal((T, D)).astype(cast).astype(np.float64)
    v[:, 2] = np.float64(np.asarray(-3.67e-40, dtype=np.float32).astype(cast))  # a column of bf16 subnormals
    got = (
        torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(a).to(torch.bfloat16)[None, None] for a in (q, k, v))
        )[0, 0]
        .double()
        .numpy()
    )
    exact = _attention(q, k, v)
    assert np.all(exact[:, 2] < -1e-40)
    # Whether torch flushes depends on the CPU's bf16 dot instructions (it does where oneDNN uses them); the
    # bound must accept torch's output here and the flushed one (the subnormal column read as 0) alike.
    flushed_output = got.copy()
    flushed_output[:, 2] = 0.0
    specs = (InputSpec("q", ("S", "D")), InputSpec("k", ("T", "D")), InputSpec("v", ("T", "D")))

    def exceeds(output: np.ndarray, dtype: str) -> bool:
        op = make_op(Family.ATTENTION, specs, ("S", "D"))
        dims = {"S": S, "T": T, "D": D}
        p_abs = np.abs(_attention(q, k, np.abs(v)))
        inputs = bounds.BoundInputs(exact, {"q": q, "k": k, "v": v}, p_abs, dims, {}, dtype, dtype)
        return bool(np.any(np.abs(output - exact) > bounds.allowed_error(op, inputs)))

    assert not exceeds(got, "bfloat16")
    assert not exceeds(flushed_output, "bfloat16")
    unscaled = _attention(q * np.sqrt(D), k, v)  # scores not divided by sqrt(D)
    assert exceeds(unscaled.astype(cast).astype(np.float64), "bfloat16")
    assert "bfloat16 dot products flush them" in flushed.note(make_op(Family.ATTENTION, specs), "bfloat16")


def _matmul_grad_verdict(a: np.ndarray, b: np.ndarray, g: np.ndarray, got: np.ndarray):
    """judge_gradients of a's gradient (g @ b^T) of a bfloat16 matmul, as the judge side fills the case."""
    from gpuemu_ci.config.model import Validation
    from gpuemu_ci.oracle import gradients, precision

    op = _op("bfloat16")
    exact = g @ b.T
    low = (
        (torch.from_numpy(g).float() @ torch.from_numpy(b).float().T).double().numpy()
    )  # the reference's backward in float32
    case = gradients.GradientCase(
        dtype="bfloat16",
        dims={"M": a.shape[0], "K": a.shape[1], "N": b.shape[1]},
        names=("a",),
        input_dtypes={"a": "bfloat16"},
        reference=(exact,),
        reference_abs=None,
        low=lambda: (precision.farthest(exact, [low]),),
        inputs={"a": a, "b": b},
        forward=(a @ b,),
        upstream=(g,),
    )
    return gradients.judge_gradients(op, case, (got.astype(ml_dtypes.bfloat16),), None, Validation())


def test_torch_bf16_matmul_backward_flushing_a_subnormal_upstream_passes_and_a_dropped_term_fails():
    """An upstream gradient holding bfloat16 subnormals: PyTorch's bf16 `g @ b^T` treats them as zero (its conv1d
    weight gradient was 0 where -1.8e-40 times 8.6e9 gives -1.6e-30, thorough suite), as the forward's products
    do. Dropping a column of the upstream gradient that is not subnormal still fails."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16).astype(np.float64)
    b = rng.standard_normal((K, N))
    b[:, 0] = 8.6e9
    b = b.astype(ml_dtypes.bfloat16).astype(np.float64)
    g = rng.standard_normal((M, N))
    g[:, 0] = -dtypes.info("bfloat16").min_normal / 64  # bfloat16 subnormals
    g[0, 1:] = 0.0  # row 0 of a's gradient is the subnormal's products alone: 1.6e-31 times b's 8.6e9 column
    g = g.astype(ml_dtypes.bfloat16).astype(np.float64)
    tb = lambda x: torch.from_numpy(x).to(torch.bfloat16)  # noqa: E731
    got = (tb(g) @ tb(b).T).double().numpy()
    exact_flushed = np.where(np.abs(g) < dtypes.info("bfloat16").min_normal, 0.0, g) @ b.T
    assert np.allclose(got, exact_flushed, rtol=0.02, atol=0.05)  # torch treated them as zero
    assert np.all(got[0] == 0) and np.all(np.abs((g @ b.T)[0]) > 1e-31)
    assert not _matmul_grad_verdict(a, b, g, got).findings
    dropped = (tb(g[:, :-1]) @ tb(b[:, :-1]).T).double().numpy()
    found = _matmul_grad_verdict(a, b, g, dropped).findings
    assert found and found[0].message.startswith("grad of a:")
    assert "bfloat16 dot products flush them" in found[0].message
