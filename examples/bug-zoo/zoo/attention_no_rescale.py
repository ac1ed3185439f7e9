"""Flash attention whose online softmax forgets to rescale the accumulator by exp(m_old - m_new) when a later
key block raises the running max. Exact while all keys fit in one BLOCK_N tile; wrong past one block when
later scores are larger (ascending keys)."""

from __future__ import annotations

import numpy as np

BLOCK_N = 64


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    *batch, s_q, d = q.shape
    scale = np.float32(1.0 / np.sqrt(d))
    qf = q.astype(np.float32)
    running_max = np.full((*batch, s_q), -np.inf, dtype=np.float32)
    running_sum = np.zeros((*batch, s_q), dtype=np.float32)
    acc = np.zeros((*batch, s_q, d), dtype=np.float32)
    for n0 in range(0, k.shape[-2], BLOCK_N):
        keys = k[..., n0 : n0 + BLOCK_N, :].astype(np.float32)
        values = v[..., n0 : n0 + BLOCK_N, :].astype(np.float32)
        scores = (qf @ np.swapaxes(keys, -1, -2)) * scale
        new_max = np.maximum(running_max, scores.max(axis=-1))
        p = np.exp(scores - new_max[..., None])
        correction = np.exp(running_max - new_max)
        running_sum = running_sum * correction + p.sum(axis=-1)
        acc = acc + p @ values  # BUG: acc must be multiplied by `correction` first
        running_max = new_max
    return (acc / running_sum[..., None]).astype(q.dtype)
