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
