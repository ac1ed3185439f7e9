"""The arrays a shadowed call takes and returns, as the checker needs them: NumPy arrays and torch tensors (CPU or
GPU, bfloat16 included). On the caller's thread only what is cheap happens: a strided sample of elements for
the sampler, and for a call that will be checked, a private copy (on the tensor's own device) so that later
in-place updates cannot change what is judged. The conversion to NumPy happens on the checker's thread."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuemu_ci.shadow.sampling import FEATURE_SAMPLE


def is_tensor(value: Any) -> bool:
    """A NumPy array or a torch tensor (what a shadowed op takes as an input)."""
    return isinstance(value, np.ndarray) or (
        type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")
    )


def on_device(value: Any) -> bool:
    """A tensor on a GPU (or any device but the host)."""
    return (
        not isinstance(value, np.ndarray) and getattr(getattr(value, "device", None), "type", "cpu") != "cpu"
    )


def element_sample(value: Any) -> np.ndarray:
    """At most FEATURE_SAMPLE elements spread over `value`, as NumPy: a view-based stride per dim, so a large
    or non-contiguous tensor is never copied whole."""
    ndim = value.ndim
    if ndim == 0:
        return _numpy(value.reshape(1))
    if _numel(value) <= FEATURE_SAMPLE:
        return _numpy(value)
    per_dim = max(1, int(FEATURE_SAMPLE ** (1 / ndim)))
    index = tuple(slice(None, None, max(1, math.ceil(n / per_dim))) for n in value.shape)
    return _numpy(value[index]).reshape(-1)


@dataclass(frozen=True)
class Held:
    """A private copy of one array as the op saw it: its values (on the original device until converted) and
    its element strides."""

    value: Any
    strides: tuple[int, ...]

    def numpy(self) -> np.ndarray:
        """The values, C-contiguous, in NumPy (bfloat16 as ml_dtypes.bfloat16)."""
        return np.ascontiguousarray(_numpy(self.value))


def hold(value: Any) -> Held:
    """Copy `value` now (cheap on a GPU: the copy stays on the device and runs asynchronously)."""
    if isinstance(value, np.ndarray):
        strides = tuple(s // value.itemsize for s in value.strides) if value.itemsize else ()
        return Held(np.array(value, copy=True, order="C"), strides)
    strides = tuple(int(s) for s in value.stride())
    return Held(value.detach().clone(), strides)


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    tensor = value.detach()
    if str(tensor.dtype) == "torch.bfloat16":
        import ml_dtypes
        import torch

        bits = tensor.contiguous().view(torch.int16).cpu().numpy()
        return np.asarray(bits.view(np.uint16).view(ml_dtypes.bfloat16))
    return np.asarray(tensor.cpu().numpy())


def _numel(value: Any) -> int:
    return int(value.size) if isinstance(value, np.ndarray) else int(value.numel())
