"""torch and CuPy ops on a real GPU: device tensors with the fuzzed strides, bf16 through CuPy, in-place writes.

These run only where a GPU (and the framework) is present; everywhere else they skip, saying why.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.gpu import detect_gpu
from gpuemu_ci.backends.interface import CallStatus
from gpuemu_ci.config.model import Framework
from tests.backends.support_jobs import make_job

pytestmark = pytest.mark.gpu

GPU_OPS = """
import numpy as np

def torch_layout(a, b):
    import torch
    assert a.is_cuda and b.is_cuda
    return torch.tensor(list(a.stride()) + list(b.stride()))

def torch_scale_inplace(a, b):
    a.mul_(2)
    return a + b

def cupy_layout(a, b):
    import cupy
    assert isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray)
    return cupy.asarray(list(a.strides) + list(b.strides), dtype=cupy.int64)

def cupy_add(a, b):
    return a + b

def cupy_bf16_identity(a, b):
    assert str(a.dtype) == "uint16"  # CuPy has no bfloat16: the bits arrive as uint16
    return a.copy()

def ref_add(a, b):
    return a + b

def ref_first(a, b):
    return a
"""


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


def _strided(rows: int = 3, cols: int = 5) -> np.ndarray:
    buf = np.full((rows, 2 * cols), np.nan, np.float32)
    view = buf[:, ::2]
    view[...] = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / 7
    return view


def test_torch_on_a_gpu_gets_device_tensors_with_the_fuzzed_strides(
    gpu_pool: WorkerPool, gpu_root: Path
) -> None:
    pytest.importorskip("torch")
    a = _strided()
    b = np.broadcast_to(np.arange(5, dtype=np.float32), (3, 5))
    run = gpu_pool.run(make_job(gpu_root, "gpu_ops:torch_layout", {"a": a, "b": b}, reference="gpu_ops:ref_add",
                                framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    assert run.op.outputs[0].tolist() == [10, 2, 0, 1]


def test_a_device_side_write_into_an_input_is_detected(gpu_pool: WorkerPool, gpu_root: Path) -> None:
    pytest.importorskip("torch")
    a = _strided()
    run = gpu_pool.run(make_job(gpu_root, "gpu_ops:torch_scale_inplace", {"a": a, "b": a.copy()},
                                reference="gpu_ops:ref_add", framework=Framework.TORCH))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    assert run.inputs_modified == ("a",)


def test_cupy_ops_get_device_arrays_with_the_same_byte_strides(gpu_pool: WorkerPool, gpu_root: Path) -> None:
    pytest.importorskip("cupy")
    a = _strided()
    b = np.broadcast_to(np.arange(5, dtype=np.float32), (3, 5))
    layout = gpu_pool.run(make_job(gpu_root, "gpu_ops:cupy_layout", {"a": a, "b": b}, reference="gpu_ops:ref_add",
                                   framework=Framework.CUPY))  # fmt: skip
    assert layout.op.status is CallStatus.OK, layout.op.message
    assert layout.op.outputs[0].tolist() == list(a.strides) + list(b.strides)
    added = gpu_pool.run(make_job(gpu_root, "gpu_ops:cupy_add", {"a": a, "b": b}, reference="gpu_ops:ref_add",
                                  framework=Framework.CUPY))  # fmt: skip
    assert added.op.status is CallStatus.OK, added.op.message
    np.testing.assert_array_equal(added.op.outputs[0], a + b)


def test_bfloat16_reaches_cupy_as_bits_and_comes_back_as_bfloat16(
    gpu_pool: WorkerPool, gpu_root: Path
) -> None:
    pytest.importorskip("cupy")
    a = np.linspace(-3, 3, 12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4)
    run = gpu_pool.run(make_job(gpu_root, "gpu_ops:cupy_bf16_identity", {"a": a, "b": a},
                                reference="gpu_ops:ref_first", framework=Framework.CUPY,
                                out_dtype="bfloat16"))  # fmt: skip
    assert run.op.status is CallStatus.OK, run.op.message
    assert run.op.outputs[0].dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run.op.outputs[0].astype(np.float32), a.astype(np.float32))
