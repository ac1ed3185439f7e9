"""RMSNorm: a tiled sum of squares in fp32 per row, then scale by the weight."""

from __future__ import annotations

import numpy as np

from kernels.tiles import as_rows, load_tile

BLOCK = 128


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    rows = as_rows(x)
    n = rows.shape[1]
    sum_sq = np.zeros(rows.shape[0], dtype=np.float32)
    for start in range(0, n, BLOCK):
        tile, _ = load_tile(rows, start, BLOCK, other=0.0)
        sum_sq += (tile * tile).sum(axis=1)
    inv_rms = np.float32(1.0) / np.sqrt(sum_sq / np.float32(n) + np.float32(eps))
    out = rows.astype(np.float32) * inv_rms[:, None] * weight.astype(np.float32)[None, :]
    return out.astype(x.dtype).reshape(x.shape)
