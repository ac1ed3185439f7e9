"""torch / Triton (interpreter on CPU) / JAX ops receive their framework's arrays, with the generated memory
layouts, in real workers; their results come back as NumPy and are judged against the NumPy reference. The
ops check what they receive themselves (an AssertionError fails the case)."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.config.model import Layout
from gpuemu_ci.fuzz.case import build_case
from gpuemu_ci.fuzz.layouts import element_strides
from tests.backends.support_cases import first_case, op_task, seed_where

TORCH_OPS = """
import torch

def add(a, b, expect=None):
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (type(a), type(b))
    if expect is not None:
        assert list(a.stride()) + list(b.stride()) == expect, (a.stride(), b.stride(), expect)
    return a + b

def scale_inplace(a, b):
    a.mul_(2)
    return a.clone()

def into_out(a, b, out):
    torch.add(a, b, out=out)

def as_bf16(a, b):
    return (a + b).to(torch.bfloat16)

def half_written(a, b):
    out = torch.empty(a.shape, dtype=a.dtype)
    half = a.shape[0] // 2
    out[:half] = (a + b)[:half]  # the rest is whatever torch.empty handed out
    return out

def mode_untouched(a, b):
    assert not torch.are_deterministic_algorithms_enabled()
    return a + b

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

def add(a, b, expect=None):
    return a + b

def double(a, b):
    return a * 2
"""

STRIDED = (
    "[ops.dims]\nM = [4, 16]\nN = { min = 2, max = 64, typical = [8] }\n[ops.inputs]\n"
    'a = { dims = ["M", "N"], layouts = ["strided"] }\nb = { dims = ["M", "N"], layouts = ["broadcast"] }\n'
)


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


@pytest.mark.slow
def test_torch_op_on_cpu_gets_tensors_with_the_generated_strides(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    plain = op_task(
        fw_root,
        "torch_ops:add",
        "np_refs:add",
        schema=STRIDED,
        extra='family = "elementwise"\nframework = "torch"',
    )
    spec = seed_where(
        plain, lambda c: c.layouts["a"].layout is Layout.STRIDED and c.layouts["b"].layout is Layout.BROADCAST
    )
    case = build_case(plain.op, spec.seed, plain.root)
    expect = [*element_strides(case.arrays["a"]), *element_strides(case.arrays["b"])]
    assert 0 in expect and expect[:2] != [case.arrays["a"].shape[1], 1]  # really strided and broadcast
    checked = op_task(
        fw_root,
        "torch_ops:add",
        "np_refs:add",
        schema=STRIDED,
        extra=f'family = "elementwise"\nframework = "torch"\nkwargs = {{ expect = [{expect}] }}',
    )
    report = pool.run(checked, spec)
    assert report.outcome == "passed", report.message


@pytest.mark.slow
def test_torch_inplace_write_is_detected(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    task = op_task(
        fw_root,
        "torch_ops:scale_inplace",
        "np_refs:double",
        extra='family = "elementwise"\nframework = "torch"',
    )
    doubled_differs = seed_where(  # 2 * 0 changes no byte; torch refuses in-place writes to broadcast inputs
        task, lambda c: c.arrays["a"].flags.c_contiguous and bool(np.any(c.arrays["a"] != 0))
    )
    report = pool.run(task, doubled_differs)
    assert report.outcome == "failed" and report.kind == "inputs_modified", report.message
    assert "wrote into its input(s) a" in report.message


@pytest.mark.slow
def test_torch_out_buffer_and_bfloat16_results(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    into = op_task(
        fw_root,
        "torch_ops:into_out",
        "np_refs:add",
        extra='family = "elementwise"\nframework = "torch"\nout_arg = "out"',
        dtypes='["bfloat16"]',
    )
    report = pool.run(into, first_case(into))
    assert report.outcome == "passed", report.message
    as_bf16 = op_task(
        fw_root,
        "torch_ops:as_bf16",
        "np_refs:add",
        extra='family = "elementwise"\nframework = "torch"\noutput_dtype = "bfloat16"',
    )
    report = pool.run(as_bf16, first_case(as_bf16))
    assert report.outcome == "passed", report.message


@pytest.mark.slow
def test_what_an_op_leaves_uninitialised_reads_as_nan_when_asked_and_torch_is_left_as_it_was(
    fw_root: Path,
) -> None:
    pytest.importorskip("torch")
    extra = 'family = "elementwise"\nframework = "torch"'
    poisoned = replace(
        op_task(fw_root, "torch_ops:half_written", "np_refs:add", extra=extra), poison_uninitialized=True
    )
    untouched = op_task(fw_root, "torch_ops:mode_untouched", "np_refs:add", extra=extra)
    with WorkerPool(1, fw_root) as pool:  # one worker: the second op runs where the first one did
        reports = [pool.run(poisoned, first_case(poisoned, n)) for n in range(3)]
        after = pool.run(untouched, first_case(untouched))
    assert all(r.outcome == "failed" and r.kind == "nonfinite" for r in reports), [r.message for r in reports]
    assert after.outcome == "passed", after.message


def test_torch_tensor_requiring_grad_is_converted(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    task = op_task(
        fw_root,
        "torch_ops:grad_tensor",
        "np_refs:double",
        extra='family = "elementwise"\nframework = "torch"',
    )
    report = pool.run(task, first_case(task))
    assert report.outcome == "passed", report.message


def test_torch_tensor_without_data_is_a_bad_output(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    task = op_task(
        fw_root, "torch_ops:meta", "np_refs:double", extra='family = "elementwise"\nframework = "torch"'
    )
    report = pool.run(task, first_case(task))
    assert report.kind == "bad_output" and "cannot convert a Tensor to NumPy" in report.message


def test_triton_kernel_runs_through_the_interpreter_on_cpu(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    assert pool.env.get("TRITON_INTERPRET") == "1"
    schema = '[ops.dims]\nM = [4]\nN = { min = 1, max = 100, typical = [64] }\n[ops.inputs]\nx = ["M", "N"]\n'
    task = op_task(fw_root, "triton_ops:softmax", "np_refs:softmax", schema=schema,
                   extra='family = "softmax"\nframework = "torch"')  # fmt: skip
    spec = seed_where(
        task, lambda c: c.arrays["x"].shape[1] % 64 != 0 and c.layouts["x"].layout is not Layout.CONTIGUOUS
    )
    report = pool.run(task, spec)
    assert report.outcome == "passed", report.message  # the tail mask holds, and the NaN gaps were never read
    assert report.interpreter == "triton-interpreter"
    plain = op_task(fw_root, "backend_ops:add")
    assert pool.run(plain, first_case(plain)).interpreter is None  # only cases that launched Triton say so


@pytest.mark.slow
def test_jax_op_gets_jax_arrays(pool: WorkerPool, fw_root: Path) -> None:
    pytest.importorskip("jax")
    task = op_task(fw_root, "jax_ops:add", "np_refs:add", extra='family = "elementwise"\nframework = "jax"')
    report = pool.run(task, first_case(task))
    assert report.outcome == "passed", report.message


def test_cupy_without_a_gpu_is_an_import_error(pool: WorkerPool, fw_root: Path) -> None:
    task = op_task(fw_root, "np_refs:add", "np_refs:add", extra='family = "elementwise"\nframework = "cupy"')
    report = pool.run(task, first_case(task))
    assert report.outcome == "unloadable" and "framework 'cupy' is not usable" in report.message
