"""Handing arrays to NumPy / torch / CuPy / JAX code and bringing results back as NumPy.

The op must see the memory layout the fuzzer built, so conversions keep strides:
- numpy: the shared-memory view itself.
- torch on CPU: `torch.from_numpy` of that view (same memory, same strides, stride 0 included; bfloat16 goes
  through an int16 view). On a GPU the whole region (gaps included) is copied to the device and the tensor is
  rebuilt over it with the same element strides. Negative strides (which torch cannot express) fall back to a
  contiguous copy.
- cupy (GPU only): the region copied to the device, `cupy.ndarray` over it with the same byte strides. CuPy
  has no bfloat16 dtype, so bfloat16 inputs (and `out=` buffers) arrive as uint16 arrays of the bf16 bits (what
  a kernel taking `__nv_bfloat16*` or `unsigned short*` reads), and a uint16 result of an op whose output
  dtype is bfloat16 is read back as those bits.
- tensorflow: a contiguous copy (`tf.constant`), like JAX below.
- jax: a contiguous copy (`jnp.asarray`): JAX arrays have no user-visible strides, so layout fuzzing does not
  reach JAX ops; values, dtypes and shapes do. JAX runs on its default backend (CPU without a GPU build), and
  without `JAX_ENABLE_X64` it narrows 64-bit inputs as it always does.
Device copies are read back into the shared memory after the call, so in-place writes by the op are detected
exactly as on the CPU.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from gpuemu_ci.config.model import Framework


class BadOutput(Exception):
    """The callable returned something that is not an array or a tuple of arrays."""


@dataclass
class Native:
    """An input converted for a framework, plus how to copy device-side writes back to the host region."""

    value: Any
    write_back: Callable[[], None] | None = None


def _region_of(view: np.ndarray, region: np.ndarray | None, data_offset: int) -> tuple[np.ndarray, int]:
    if region is None:  # a private contiguous array (reference inputs, out buffers)
        flat = np.ascontiguousarray(view)
        return flat.reshape(-1).view(np.uint8), 0
    return region, data_offset


class Bridge:
    """Conversions for one framework. Subclasses import their framework lazily (in the worker only)."""

    framework: Framework = Framework.NUMPY
    on_gpu: bool = False

    def to_native(self, view: np.ndarray, region: np.ndarray | None = None, data_offset: int = 0) -> Native:
        """`view` as the framework's array, with the same values, shape and (where the framework has them)
        strides; `region` and `data_offset` locate the view's bytes in the case's input region, so a GPU copy
        keeps the gaps between strided elements. The result says how to copy device-side writes back, when
        there are any."""
        return Native(view)

    def full_nan(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A buffer for `out=`: NaN for floats, the dtype's maximum for integers, True for bool."""
        return self.to_native(_poisoned(shape, dtype)).value

    def synchronize(self) -> None:
        """Wait for queued device work, so that timings and asynchronous errors belong to the call."""

    def uninitialized_poisoned(self) -> contextlib.AbstractContextManager[None]:
        """While in it, memory the framework hands out uninitialised (`torch.empty`) reads as NaN (integers as
        their maximum), the same in every run; frameworks that cannot do so leave it as it is."""
        return contextlib.nullcontext()

    def outputs_as(self, outputs: list[np.ndarray], expected: np.dtype | None) -> list[np.ndarray]:
        """Host outputs as the dtype the op is meant to produce, where the framework cannot name it."""
        return outputs


_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def bf16_as_bits(arr: np.ndarray) -> np.ndarray:
    """A bfloat16 array as a uint16 view of the same memory (same shape and strides); others unchanged."""
    return arr.view(np.uint16) if arr.dtype == _BFLOAT16 else arr


def bits_as_bf16(outputs: list[np.ndarray], expected: np.dtype | None) -> list[np.ndarray]:
    """uint16 outputs read as bfloat16 bits when bfloat16 is what the op should return."""
    if expected != _BFLOAT16:
        return outputs
    return [a.view(_BFLOAT16) if a.dtype == np.uint16 else a for a in outputs]


def _poisoned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "fc" or dtype.kind == "V":
        return np.full(shape, np.nan, dtype=dtype)
    if dtype.kind == "b":
        return np.ones(shape, dtype=dtype)
    return np.full(shape, np.iinfo(dtype).max, dtype=dtype)


class TorchBridge(Bridge):
    """torch tensors: CPU tensors share the NumPy memory (bfloat16 through a bit view); on a GPU the region is
    copied to the device with the same strides."""

    framework = Framework.TORCH

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.on_gpu = bool(torch.cuda.is_available())

    def _dtype(self, dtype: np.dtype) -> Any:
        torch = self.torch
        if dtype == np.dtype(ml_dtypes.bfloat16):
            return torch.bfloat16
        return torch.from_numpy(np.empty(0, dtype)).dtype

    def to_native(self, view: np.ndarray, region: np.ndarray | None = None, data_offset: int = 0) -> Native:
        torch = self.torch
        if any(s < 0 for s in view.strides):
            view = np.ascontiguousarray(view)  # torch has no negative strides
            region = None
        if not self.on_gpu:
            if view.dtype == np.dtype(ml_dtypes.bfloat16):
                return Native(torch.from_numpy(view.view(np.int16)).view(torch.bfloat16))
            return Native(torch.from_numpy(view))
        host, offset = _region_of(view, region, data_offset)
        device_bytes = torch.from_numpy(host).to("cuda")
        tensor = torch.empty(0, dtype=self._dtype(view.dtype), device="cuda")
        item = view.itemsize
        if offset % item or any(s % item for s in view.strides):
            return Native(torch.from_numpy(np.ascontiguousarray(view)).to("cuda"))
        tensor.set_(
            device_bytes.untyped_storage(), offset // item, view.shape, [s // item for s in view.strides]
        )

        def write_back() -> None:
            host[...] = device_bytes.cpu().numpy()

        return Native(tensor, write_back if region is not None else None)

    def synchronize(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    @contextlib.contextmanager
    def uninitialized_poisoned(self) -> Iterator[None]:
        # torch fills what it allocates uninitialised only in its deterministic mode; warn_only keeps the ops
        # that have no deterministic version running (they warn), and the caller's own settings come back.
        torch = self.torch
        enabled, warn_only = (
            torch.are_deterministic_algorithms_enabled(),
            (torch.is_deterministic_algorithms_warn_only_enabled()),
        )
        fill = torch.utils.deterministic.fill_uninitialized_memory
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        try:
            yield
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = fill
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


class CupyBridge(Bridge):
    """CuPy arrays (GPU only): the region copied to the device, an array over it with the same byte
    strides."""

    framework = Framework.CUPY
    on_gpu = True

    def __init__(self) -> None:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise ImportError("cupy is installed but no CUDA device is visible")
        self.cupy = cupy

    def to_native(self, view: np.ndarray, region: np.ndarray | None = None, data_offset: int = 0) -> Native:
        cupy = self.cupy
        host, offset = _region_of(view, region, data_offset)
        view = bf16_as_bits(view)  # the bytes are the same; only the dtype CuPy is told differs
        device_bytes = cupy.asarray(host)
        arr = cupy.ndarray(
            view.shape, dtype=view.dtype, memptr=device_bytes.data + offset, strides=view.strides
        )

        def write_back() -> None:
            host[...] = cupy.asnumpy(device_bytes)

        return Native(arr, write_back if region is not None else None)

    def synchronize(self) -> None:
        self.cupy.cuda.runtime.deviceSynchronize()

    def outputs_as(self, outputs: list[np.ndarray], expected: np.dtype | None) -> list[np.ndarray]:
        return bits_as_bf16(outputs, expected)


class JaxBridge(Bridge):
    """JAX arrays: a contiguous copy (JAX arrays have no strides and are immutable)."""

    framework = Framework.JAX

    def __init__(self) -> None:
        import jax.numpy as jnp

        self.jnp = jnp

    def to_native(self, view: np.ndarray, region: np.ndarray | None = None, data_offset: int = 0) -> Native:
        return Native(self.jnp.asarray(np.ascontiguousarray(view)))

    def synchronize(self) -> None:
        pass  # results are made ready in to_numpy (np.asarray blocks)


class TensorflowBridge(Bridge):
    """TensorFlow eager tensors: a contiguous copy (TF tensors have no user-visible strides, so, as for JAX,
    layout fuzzing does not reach TF ops; values, dtypes, bfloat16 and shapes do). Runs on TF's default device
    (the CPU with `tensorflow-cpu`)."""

    framework = Framework.TENSORFLOW

    def __init__(self) -> None:
        try:
            import tensorflow as tf
        except ImportError as exc:
            raise ImportError(
                f"{exc}; TensorFlow ops need TensorFlow in the environment that runs the gate (pip install "
                "'gpuemu-ci[tensorflow]', the tensorflow-cpu wheel, on Python 3.11 to 3.13)"
            ) from None
        self.tf = tf

    def to_native(self, view: np.ndarray, region: np.ndarray | None = None, data_offset: int = 0) -> Native:
        return Native(self.tf.constant(np.ascontiguousarray(view)))


_BRIDGES: dict[Framework, Bridge] = {}


def get_bridge(framework: Framework) -> Bridge:
    """The bridge for a framework, importing it on first use (ImportError names what is missing)."""
    bridge = _BRIDGES.get(framework)
    if bridge is None:
        factory: dict[Framework, Callable[[], Bridge]] = {
            Framework.NUMPY: Bridge,
            Framework.TORCH: TorchBridge,
            Framework.CUPY: CupyBridge,
            Framework.JAX: JaxBridge,
            Framework.TENSORFLOW: TensorflowBridge,
        }
        bridge = factory[framework]()
        _BRIDGES[framework] = bridge
    return bridge


# ---- results back to NumPy ------------------------------------------------------------------------------


def _torch_to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    special = {
        torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
        getattr(torch, "float8_e4m3fn", None): (torch.int8, getattr(ml_dtypes, "float8_e4m3fn", None)),
        getattr(torch, "float8_e5m2", None): (torch.int8, getattr(ml_dtypes, "float8_e5m2", None)),
    }
    if t.dtype in special:
        carrier, np_type = special[t.dtype]
        return np.asarray(t.view(carrier).numpy().view(np_type))  # torch is untyped here: Any
    return np.asarray(t.numpy())


def _one_to_numpy(obj: Any) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        arr = obj
    elif isinstance(obj, np.generic | numbers.Real):  # Python scalars too: a reference returning float(s)
        arr = np.asarray(obj)
    else:
        module = type(obj).__module__.split(".")[0]
        try:
            if module == "torch":
                arr = _torch_to_numpy(obj)
            elif module == "cupy":
                import cupy

                arr = cupy.asnumpy(obj)
            elif module in ("jax", "jaxlib"):
                arr = np.asarray(obj)
            elif module in ("tensorflow", "keras") and hasattr(obj, "numpy"):
                arr = np.asarray(obj.numpy())
            else:
                raise BadOutput(f"returned {type(obj).__module__}.{type(obj).__qualname__}, not an array")
        except BadOutput:
            raise
        except Exception as exc:  # e.g. a tensor subclass without storage (fake/meta/distributed tensors)
            raise BadOutput(f"cannot convert a {type(obj).__qualname__} to NumPy: {exc}") from exc
    if arr.dtype.hasobject:
        raise BadOutput("returned an array of Python objects (object dtype)")
    return arr


def to_numpy_outputs(result: Any) -> tuple[np.ndarray, ...]:
    """Outputs of a call as NumPy arrays: one array, or a tuple/list of arrays (nested not allowed)."""
    if result is None:
        raise BadOutput("returned None (an op that writes into a buffer needs `out_arg` in gpuemu.toml)")
    if isinstance(result, tuple | list):
        if not result:
            raise BadOutput("returned an empty tuple")
        return tuple(_one_to_numpy(item) for item in result)
    if isinstance(result, dict):
        raise BadOutput("returned a dict; return an array or a tuple of arrays")
    return (_one_to_numpy(result),)
