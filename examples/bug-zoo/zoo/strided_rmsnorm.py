"""RMSNorm that addresses rows as `base + row * D` (assumes a contiguous input), as a kernel that ignores
x.stride(0) does. Correct on contiguous tensors; reads the wrong elements (or padding) for any other layout."""

from __future__ import annotations

import numpy as np


def _rows_assuming_contiguous(x: np.ndarray) -> np.ndarray:
    # BUG: pointer arithmetic with the logical row length instead of the real strides.
    return np.lib.stride_tricks.as_strided(x, shape=x.shape, strides=(x.shape[1] * x.itemsize, x.itemsize))


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    rows = _rows_assuming_contiguous(x).astype(np.float32)
    inv_rms = np.float32(1) / np.sqrt((rows * rows).mean(axis=1) + np.float32(eps))
    return (rows * inv_rms[:, None] * weight.astype(np.float32)).astype(x.dtype)
