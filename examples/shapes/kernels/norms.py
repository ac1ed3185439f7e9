"""Group normalization over x [N, C, L] with C = G * CPG channels in `num_groups` = G groups: statistics per
(sample, group) over CPG * L values, two passes in fp32 over BLOCK-sized chunks, then a per-channel affine."""

from __future__ import annotations

import numpy as np

BLOCK = 1024


def group_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float = 1e-5
) -> np.ndarray:
    n, c, length = x.shape
    groups = x.reshape(n, num_groups, (c // num_groups) * length).astype(np.float32)
    count = groups.shape[-1]
    total = np.zeros((n, num_groups), dtype=np.float32)
    for start in range(0, count, BLOCK):
        total += groups[..., start : start + BLOCK].sum(axis=-1, dtype=np.float32)
    mean = total / np.float32(max(count, 1))
    squares = np.zeros((n, num_groups), dtype=np.float32)
    for start in range(0, count, BLOCK):
        centred = groups[..., start : start + BLOCK] - mean[..., None]
        squares += (centred * centred).sum(axis=-1, dtype=np.float32)
    rstd = np.float32(1.0) / np.sqrt(squares / np.float32(max(count, 1)) + np.float32(eps))
    normed = ((groups - mean[..., None]) * rstd[..., None]).reshape(n, c, length)
    out = normed * weight.astype(np.float32)[None, :, None] + bias.astype(np.float32)[None, :, None]
    return out.astype(x.dtype)
