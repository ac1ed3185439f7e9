"""Grouped-query attention over a KV cache, FlashAttention style.

q is [B, H, LQ, D] with H = KVH * G query heads sharing each of the KVH key/value heads; k and v are
[B, KVH, LK, D] with LK = LQ + P: the P cached positions come first, so query i sees keys 0 .. P + i (causal with
an offset). Online softmax over BLOCK_N key tiles in fp32, P cast to the input dtype before P @ V, the output
rounded once.
"""

from __future__ import annotations

import numpy as np

BLOCK_N = 64


def gqa_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    b, h, lq, d = q.shape
    kvh, lk = k.shape[1], k.shape[2]
    group = h // kvh
    cached = lk - lq
    scale = np.float32(1.0 / np.sqrt(d))
    # Query head j reads key/value head j // group: repeat each kv head for its group (a view, no copy).
    keys_all = np.repeat(k, group, axis=1)
    values_all = np.repeat(v, group, axis=1)
    qf = q.astype(np.float32)
    running_max = np.full((b, h, lq), -np.inf, dtype=np.float32)
    running_sum = np.zeros((b, h, lq), dtype=np.float32)
    acc = np.zeros((b, h, lq, d), dtype=np.float32)
    query_pos = cached + np.arange(lq)[:, None]
    for n0 in range(0, lk, BLOCK_N):
        keys = keys_all[:, :, n0 : n0 + BLOCK_N].astype(np.float32)
        values = values_all[:, :, n0 : n0 + BLOCK_N]
        scores = (qf @ np.swapaxes(keys, -1, -2)) * scale
        visible = np.arange(n0, n0 + keys.shape[2])[None, :] <= query_pos
        scores = np.where(visible, scores, np.float32(-np.inf))
        new_max = np.maximum(running_max, scores.max(axis=-1))
        safe_max = np.where(np.isfinite(new_max), new_max, np.float32(0.0))
        p = np.exp(scores - safe_max[..., None])
        correction = np.exp(np.where(np.isfinite(running_max), running_max - safe_max, -np.inf))
        running_sum = running_sum * correction + p.sum(axis=-1)
        acc = acc * correction[..., None] + p.astype(q.dtype).astype(np.float32) @ values.astype(np.float32)
        running_max = new_max
    return (acc / running_sum[..., None]).astype(q.dtype)
