"""Inclusive prefix sum along the last dim: a scan inside each BLOCK plus a carry across blocks (fp32)."""

from __future__ import annotations

import numpy as np

from kernels.tiles import as_rows, load_tile

BLOCK = 64


def cumsum(x: np.ndarray) -> np.ndarray:
    rows = as_rows(x)
    n = rows.shape[1]
    out = np.empty(rows.shape, dtype=x.dtype)
    carry = np.zeros(rows.shape[0], dtype=np.float32)
    for start in range(0, n, BLOCK):
        tile, mask = load_tile(rows, start, BLOCK, other=0.0)
        scanned = np.cumsum(tile, axis=1, dtype=np.float32) + carry[:, None]
        width = int(mask.sum())
        out[:, start : start + width] = scanned[:, :width].astype(x.dtype)
        carry = scanned[:, -1]
    return out.reshape(x.shape)
