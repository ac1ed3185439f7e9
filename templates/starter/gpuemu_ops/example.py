"""An example op written the way a GPU kernel is: BLOCK-sized tiles, a tail mask, fp32 math.

Replace it with a call into your own kernel (a CuPy, Triton or PyTorch function, or a NumPy
port of it) and register that in gpuemu.toml.
"""

from __future__ import annotations

import numpy as np

BLOCK = 256


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), computed in float32 per tile and stored in the input's dtype."""
    flat = x.reshape(-1)
    out = np.empty(flat.shape, dtype=x.dtype)
    for start in range(0, flat.size, BLOCK):
        offsets = start + np.arange(BLOCK)
        mask = offsets < flat.size  # the last tile is partial unless the size is a multiple of BLOCK
        v = flat[offsets[mask]].astype(np.float32)
        with np.errstate(over="ignore"):  # exp(-v) -> inf for very negative v gives silu -> -0, as intended
            out[offsets[mask]] = (v / (np.float32(1) + np.exp(-v))).astype(x.dtype)
    return out.reshape(x.shape)
