"""GELU (tanh approximation) over BLOCK-sized chunks of the flattened tensor, computed in fp32."""

from __future__ import annotations

import numpy as np

BLOCK = 256
SQRT_2_OVER_PI = np.float32(0.7978845608028654)


def gelu(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    out = np.empty(flat.shape, dtype=x.dtype)
    for start in range(0, flat.size, BLOCK):
        offsets = start + np.arange(BLOCK)
        mask = offsets < flat.size
        v = flat[offsets[mask]].astype(np.float32)
        inner = SQRT_2_OVER_PI * (v + np.float32(0.044715) * v * v * v)
        out[offsets[mask]] = (np.float32(0.5) * v * (np.float32(1) + np.tanh(inner))).astype(x.dtype)
    return out.reshape(x.shape)
