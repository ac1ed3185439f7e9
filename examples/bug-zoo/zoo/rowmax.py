"""Row max as a tiled reduction whose accumulator starts at 0 instead of -inf: right for any row holding a
non-negative value, wrong for all-negative rows (the FlashAttention row_max=0 class)."""

from __future__ import annotations

import numpy as np
from kernels.tiles import as_rows, load_tile

BLOCK = 64


def rowmax(x: np.ndarray) -> np.ndarray:
    rows = as_rows(x)
    best = np.zeros(rows.shape[0], dtype=np.float32)  # BUG: should start at -inf
    for start in range(0, rows.shape[1], BLOCK):
        tile, _ = load_tile(rows, start, BLOCK, other=-np.inf)
        best = np.maximum(best, tile.max(axis=1))
    return best.astype(x.dtype)


def rowmax_reference(x: np.ndarray) -> np.ndarray:
    return x.max(axis=-1)
