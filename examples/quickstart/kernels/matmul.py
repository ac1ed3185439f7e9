"""C = A @ B with BLOCK_K-deep tiles accumulated in fp32 (the K loop of a GEMM kernel), masked K tail."""

from __future__ import annotations

import numpy as np

BLOCK_K = 32


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    acc = np.zeros((m, n), dtype=np.float32)
    for k0 in range(0, k, BLOCK_K):
        cols = k0 + np.arange(BLOCK_K)
        mask = cols < k
        safe = np.minimum(cols, k - 1)
        a_tile = np.where(mask[None, :], a[:, safe].astype(np.float32), np.float32(0))
        b_tile = np.where(mask[:, None], b[safe, :].astype(np.float32), np.float32(0))
        acc += a_tile @ b_tile
    return acc.astype(a.dtype)
