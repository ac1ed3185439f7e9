"""torch / Triton (interpreter on CPU) / JAX ops receive their framework's arrays and come back as NumPy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CallStatus
from gpuemu_ci.config.model import Framework
from tests.backends.support_jobs import make_job

TORCH_OPS = """
import torch

def add(a, b):
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return a + b

def strides(a, b):
    return torch.tensor(list(a.stride()) + list(b.stride()))

def scale_inplace(a, b):
    a.mul_(2)
    return a.clone()

def into_out(a, b, out):
    torch.add(a, b, out=out)

def as_bf16(a, b):
    return (a + b).to(torch.bfloat16)

def grad_tensor(a, b):
    return (a * 2).requires_grad_()

def meta(a, b):
    return torch.empty(3, device="meta")  # shape and dtype only: there is no data to bring back
"""

TRITON_OPS = """
import torch
import triton
import triton.language as tl

@triton.jit
def _row_softmax(out_ptr, x_ptr, x_row_stride, x_col_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols  # the tail mask
    x = tl.load(x_ptr + row * x_row_stride + cols * x_col_stride, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)

def softmax(x):
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype)
    block = triton.next_power_of_2(cols)
    _row_softmax[(rows,)](out, x, x.stride(0), x.stride(1), out.stride(0), cols, BLOCK=block)
    return out
"""

JAX_OPS = """
import jax
import jax.numpy as jnp

def add(a, b):
    assert isinstance(a, jax.Array)
    return jnp.add(a, b)
"""

NUMPY_REFS = """
import numpy as np

def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def add(a, b):
    return a + b

def first(a, b):
    return a * 2
"""


@pytest.fixture(scope="module")
def fw_root(user_root: Path) -> Path:
    for name, text in {
        "torch_ops.py": TORCH_OPS,
        "triton_ops.py": TRITON_OPS,
        "jax_ops.py": JAX_OPS,
        "np_refs.py": NUMPY_REFS,
    }.items():
        (user_root / name).write_text(textwrap.dedent(text))
    return user_root


def _strided(rows: int = 3, cols: int = 5, dtype: type = np.float32) -> np.ndarray:
    buf = np.full((rows, 2 * cols), np.nan, dtype=dtype)
    view = buf[:, ::2]
    view[...] = (np.arange(rows * cols).reshape(rows, cols) / 7).astype(dtype)
    return view


def test_torch_op_on_cpu_gets_tensors_with_the_same_strides(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    a = _strided()
    b = np.broadcast_to(np.arange(5, dtype=np.float32), (3, 5))
    run = pool.run(make_job(fw_root, "torch_ops:strides", {"a": a, "b": b}, reference="np_refs:add",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    assert run.op.outputs[0].tolist() == [10, 2, 0, 1]  # element strides: torch's view of the same memory
    run = pool.run(make_job(fw_root, "torch_ops:add", {"a": a, "b": b}, reference="np_refs:add",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.outputs[0].dtype == np.float32
    np.testing.assert_array_equal(run.op.outputs[0], a + b)
    np.testing.assert_allclose(run.reference.outputs[0], run.op.outputs[0], rtol=1e-6)


def test_torch_inplace_write_is_detected(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    a = _strided()
    run = pool.run(make_job(fw_root, "torch_ops:scale_inplace", {"a": a, "b": a}, reference="np_refs:first",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    assert set(run.inputs_modified) == {"a"}


def test_torch_out_buffer_and_bfloat16_results(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    a = _strided(dtype=ml_dtypes.bfloat16)
    run = pool.run(make_job(fw_root, "torch_ops:into_out", {"a": a, "b": a}, reference="np_refs:add",
                            out_arg="out", framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    out = run.op.outputs[0]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float64), (a + a).astype(np.float64))
    f32 = _strided()
    run = pool.run(make_job(fw_root, "torch_ops:as_bf16", {"a": f32, "b": f32}, reference="np_refs:add",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.outputs[0].dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run.op.outputs[0], (f32 + f32).astype(ml_dtypes.bfloat16))


def test_torch_tensor_requiring_grad_is_converted(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    a = np.ones((2, 2), np.float32)
    run = pool.run(make_job(fw_root, "torch_ops:grad_tensor", {"a": a, "b": a}, reference="np_refs:first",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    np.testing.assert_array_equal(run.op.outputs[0], a * 2)


def test_torch_tensor_without_data_is_a_bad_output(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    a = np.ones((2, 2), np.float32)
    run = pool.run(make_job(fw_root, "torch_ops:meta", {"a": a, "b": a}, reference="np_refs:first",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.BAD_OUTPUT
    assert "cannot convert a Tensor to NumPy" in run.op.message


def test_triton_kernel_runs_through_the_interpreter_on_cpu(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    assert pool.env.get("TRITON_INTERPRET") == "1"
    x = _strided(rows=4, cols=37)  # 37 columns: the tail mask matters (block of 64)
    run = pool.run(make_job(fw_root, "triton_ops:softmax", {"x": x}, reference="np_refs:softmax",
                            framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    assert run.interpreter == "triton-interpreter"
    np.testing.assert_allclose(run.op.outputs[0], run.reference.outputs[0], rtol=1e-5, atol=1e-7)
    assert not np.isnan(run.op.outputs[0]).any()  # the NaN gaps were never read
    plain = pool.run(make_job(fw_root, "userops:add", {"a": x, "b": x}))
    assert plain.interpreter is None  # only cases that launched a Triton kernel say so


def test_jax_op_gets_jax_arrays(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("jax")
    a = _strided()
    run = pool.run(make_job(fw_root, "jax_ops:add", {"a": a, "b": a}, reference="np_refs:add",
                            framework=Framework.JAX))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    np.testing.assert_array_equal(run.op.outputs[0], a + a)
    assert run.op.outputs[0].dtype == np.float32


def test_cupy_without_a_gpu_is_an_import_error(pool: WorkerPool, fw_root: Path) -> None:
    a = np.ones(3, np.float32)
    run = pool.run(make_job(fw_root, "np_refs:add", {"a": a, "b": a}, reference="np_refs:add",
                            framework=Framework.CUPY))  # fmt: skip
    assert run.op.status is CallStatus.IMPORT_ERROR
    assert "framework 'cupy' is not usable" in run.op.message
