"""Attention, FlashAttention style: scores in fp32 per BLOCK_N key tile, an online softmax with rescaling, P
cast to the input dtype before P @ V (as FA kernels do), the output rounded once.

Bugs: scores not scaled by 1/sqrt(d) (invisible at d = 1 or with small q, k), and an accumulator not
rescaled when the running max grows (invisible when all keys fit one tile, or when the first tile holds the
max).
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, store

BLOCK_N = 64


def _flash(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, block_n: int, scaled: bool, rescale_acc: bool
) -> np.ndarray:
    *batch, s_q, d = q.shape
    s_k = k.shape[-2]
    scale = F32(1.0 / np.sqrt(d)) if scaled else F32(1.0)
    qf = q.astype(F32)
    running_max = np.full((*batch, s_q), -np.inf, dtype=F32)
    running_sum = np.zeros((*batch, s_q), dtype=F32)
    acc = np.zeros((*batch, s_q, d), dtype=F32)
    for n0 in range(0, s_k, block_n):
        keys = k[..., n0 : n0 + block_n, :].astype(F32)
        values = v[..., n0 : n0 + block_n, :].astype(F32)
        scores = (qf @ np.swapaxes(keys, -1, -2)) * scale
        new_max = np.maximum(running_max, scores.max(axis=-1))
        p = np.exp(scores - new_max[..., None])
        correction = np.exp(running_max - new_max)
        running_sum = running_sum * correction + p.sum(axis=-1, dtype=F32)
        if rescale_acc:
            acc = acc * correction[..., None]
        acc = acc + p.astype(q.dtype).astype(F32) @ values
        running_max = new_max
    return store(acc / running_sum[..., None], q.dtype)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Control: BLOCK_N = 64."""
    return _flash(q, k, v, BLOCK_N, scaled=True, rescale_acc=True)


def attention_block32(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Hard negative: BLOCK_N = 32."""
    return _flash(q, k, v, 32, scaled=True, rescale_acc=True)


def attention_two_pass(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Hard negative: all scores at once (fp32), a plain softmax, P cast to the input dtype, then P @ V."""
    d = q.shape[-1]
    scores = (q.astype(F32) @ np.swapaxes(k.astype(F32), -1, -2)) * F32(1.0 / np.sqrt(d))
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    denom = p.sum(axis=-1, keepdims=True, dtype=F32)
    out = (p.astype(q.dtype).astype(F32) @ v.astype(F32)) / denom
    return store(out, q.dtype)


def attention_unscaled(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Bug (missing 1/sqrt(d)): softmax(q k^T) v."""
    with np.errstate(invalid="ignore"):
        return _flash(q, k, v, BLOCK_N, scaled=False, rescale_acc=True)


def attention_no_rescale(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Bug (online softmax without rescale): the running sum is rescaled but the output accumulator is not."""
    with np.errstate(invalid="ignore"):
        return _flash(q, k, v, BLOCK_N, scaled=True, rescale_acc=False)
