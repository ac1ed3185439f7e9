"""The quickstart softmax with a realistic tail-mask bug: the masked load fills out-of-range columns with 0
instead of -inf, so when a row's length is not a multiple of BLOCK the padding leaks exp(0 - max) into the
running sum. Invisible whenever N is a multiple of 64, which is every size a one-shape test usually picks."""

from __future__ import annotations

import numpy as np
from kernels.tiles import as_rows, load_tile

BLOCK = 64


def softmax(x: np.ndarray) -> np.ndarray:
    rows = as_rows(x)
    n = rows.shape[1]
    running_max = np.full(rows.shape[0], -np.inf, dtype=np.float32)
    running_sum = np.zeros(rows.shape[0], dtype=np.float32)
    for start in range(0, n, BLOCK):
        tile, _ = load_tile(rows, start, BLOCK, other=0.0)  # BUG: should be other=-inf
        new_max = np.maximum(running_max, tile.max(axis=1))
        running_sum = running_sum * np.exp(running_max - new_max) + np.exp(tile - new_max[:, None]).sum(
            axis=1
        )
        running_max = new_max
    out = np.exp(rows.astype(np.float32) - running_max[:, None]) / running_sum[:, None]
    return out.astype(x.dtype).reshape(x.shape)
