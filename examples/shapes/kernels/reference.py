"""fp64 references written from the math, called on float64 copies of the rounded inputs."""

from __future__ import annotations

import numpy as np


def gqa_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    lq, lk = q.shape[2], k.shape[2]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    visible = np.arange(lk)[None, :] <= (lk - lq) + np.arange(lq)[:, None]
    scores = np.where(visible, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True) @ v


def group_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float = 1e-5
) -> np.ndarray:
    n, c, length = x.shape
    groups = x.reshape(n, num_groups, -1)
    mean = groups.mean(axis=-1, keepdims=True)
    var = ((groups - mean) ** 2).mean(axis=-1, keepdims=True)
    normed = ((groups - mean) / np.sqrt(var + eps)).reshape(n, c, length)
    return normed * weight[None, :, None] + bias[None, :, None]


def max_pool1d(
    x: np.ndarray, kernel_size: int, stride: int = 1, padding: int = 0, dilation: int = 1
) -> np.ndarray:
    length = x.shape[-1]
    padded = np.pad(x, [(0, 0), (0, 0), (padding, padding)], constant_values=-np.inf)
    out_len = (length + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1
    taps = [
        padded[..., t * dilation : t * dilation + (out_len - 1) * stride + 1 : stride]
        for t in range(kernel_size)
    ]
    return np.max(np.stack(taps), axis=0)


def partial_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    rd = cos.shape[-1]
    half = rd // 2
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    rot = x[..., :rd]
    rotated_half = np.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
    out = x.copy()
    out[..., :rd] = rot * c + rotated_half * s
    return out
