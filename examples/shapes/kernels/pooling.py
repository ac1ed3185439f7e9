"""1-D max pooling over x [N, C, L] with kernel_size, stride, padding and dilation (PyTorch's max_pool1d):
output length LO = (L + 2*padding - dilation*(kernel_size - 1) - 1) // stride + 1. Each output position is a
masked load of its window (padding reads -inf), reduced with max."""

from __future__ import annotations

import numpy as np


def max_pool1d(
    x: np.ndarray, kernel_size: int, stride: int = 1, padding: int = 0, dilation: int = 1
) -> np.ndarray:
    n, c, length = x.shape
    out_len = (length + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1
    starts = np.arange(out_len) * stride - padding
    out = np.full((n, c, out_len), -np.inf, dtype=x.dtype)
    for tap in range(kernel_size):
        pos = starts + tap * dilation
        inside = (pos >= 0) & (pos < length)
        window = np.where(inside, x[..., np.clip(pos, 0, max(length - 1, 0))], -np.inf)
        out = np.maximum(out, window.astype(x.dtype))
    return out
