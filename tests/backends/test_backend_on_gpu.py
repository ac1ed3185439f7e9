"""torch and CuPy ops on a real GPU: device tensors with the fuzzed strides, bf16 through CuPy, in-place writes.

These run only where a GPU (and the framework) is present; everywhere else they skip, saying why.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.gpu import detect_gpu
from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.config.model import Layout
from gpuemu_ci.fuzz.case import build_case
from gpuemu_ci.fuzz.layouts import element_strides
from tests.backends.support_cases import first_case, op_task, seed_where

pytestmark = pytest.mark.gpu

GPU_OPS = """
import numpy as np

def torch_add(a, b, expect=None):
    import torch
    assert a.is_cuda and b.is_cuda
    if expect is not None:
        assert list(a.stride()) + list(b.stride()) == expect, (a.stride(), b.stride(), expect)
    return a + b

def torch_negate_inplace(a, b):
    a.neg_()  # flips every element's sign bit, zeros and NaN included: the bytes always change
    return a + b

def cupy_add(a, b, expect=None):
    import cupy
    assert isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray)
    if expect is not None:
        assert list(a.strides) + list(b.strides) == expect, (a.strides, b.strides, expect)
    return a + b

def cupy_bf16_identity(a, b):
    assert str(a.dtype) == "uint16"  # CuPy has no bfloat16: the bits arrive as uint16
    return a.copy()

def ref_add(a, b, expect=None):
    return a + b

def ref_first(a, b):
    return a
"""

STRIDED = (
    "[ops.dims]\nM = [4, 16]\nN = { min = 2, max = 64, typical = [8] }\n[ops.inputs]\n"
    'a = { dims = ["M", "N"], layouts = ["strided"] }\nb = { dims = ["M", "N"], layouts = ["broadcast"] }\n'
)


@pytest.fixture(scope="module")
def gpu_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpuops")
    (root / "gpu_ops.py").write_text(textwrap.dedent(GPU_OPS))
    return root


@pytest.fixture(scope="module")
def gpu_pool(gpu_root: Path) -> Iterator[WorkerPool]:
    if detect_gpu() is None:
        pytest.skip("no GPU on this machine")
    with WorkerPool(1, gpu_root) as pool:
        yield pool


def _strided_case(root: Path, op: str, framework: str, bytes_: bool) -> tuple[OpTask, CaseSpec]:
    """A case whose `a` is strided (NaN gaps) and `b` broadcast, and an op told the strides to expect."""
    plain = op_task(
        root,
        op,
        "gpu_ops:ref_add",
        schema=STRIDED,
        extra=f'family = "elementwise"\nframework = "{framework}"',
    )
    spec = seed_where(
        plain, lambda c: c.layouts["a"].layout is Layout.STRIDED and c.layouts["b"].layout is Layout.BROADCAST
    )
    case = build_case(plain.op, spec.seed, plain.root)
    a, b = case.arrays["a"], case.arrays["b"]
    expect = [*a.strides, *b.strides] if bytes_ else [*element_strides(a), *element_strides(b)]
    extra = f'family = "elementwise"\nframework = "{framework}"\nkwargs = {{ expect = [{expect}] }}'
    return op_task(root, op, "gpu_ops:ref_add", schema=STRIDED, extra=extra), spec


def test_torch_on_a_gpu_gets_device_tensors_with_the_fuzzed_strides(
    gpu_pool: WorkerPool, gpu_root: Path
) -> None:
    pytest.importorskip("torch")
    task, spec = _strided_case(gpu_root, "gpu_ops:torch_add", "torch", bytes_=False)
    report = gpu_pool.run(task, spec)
    assert report.outcome == "passed", report.message


def test_a_device_side_write_into_an_input_is_detected(gpu_pool: WorkerPool, gpu_root: Path) -> None:
    pytest.importorskip("torch")
    task = op_task(gpu_root, "gpu_ops:torch_negate_inplace", "gpu_ops:ref_add",
                   extra='family = "elementwise"\nframework = "torch"')  # fmt: skip
    report = gpu_pool.run(task, first_case(task))
    assert report.kind == "inputs_modified" and "wrote into its input(s) a" in report.message


def test_cupy_ops_get_device_arrays_with_the_same_byte_strides(gpu_pool: WorkerPool, gpu_root: Path) -> None:
    pytest.importorskip("cupy")
    task, spec = _strided_case(gpu_root, "gpu_ops:cupy_add", "cupy", bytes_=True)
    report = gpu_pool.run(task, spec)
    assert report.outcome == "passed", report.message


def test_bfloat16_reaches_cupy_as_bits_and_comes_back_as_bfloat16(
    gpu_pool: WorkerPool, gpu_root: Path
) -> None:
    pytest.importorskip("cupy")
    task = op_task(gpu_root, "gpu_ops:cupy_bf16_identity", "gpu_ops:ref_first",
                   extra='family = "exact"\nframework = "cupy"', dtypes='["bfloat16"]')  # fmt: skip
    report = gpu_pool.run(task, first_case(task))
    assert report.outcome == "passed", report.message
