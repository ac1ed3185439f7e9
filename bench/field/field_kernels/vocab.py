"""Kernels over a vocabulary: per-token cross-entropy with an online log-sum-exp over chunks of 16384 logits,
and the top-1 (argmax) of each row over blocks of 4096. One program per token; logits rows may be padded
(x[:, :V] of a wider allocation, as vocabularies rounded up to a multiple of 64 or 128 are)."""

from __future__ import annotations

import numpy as np

from field_kernels.gpu import F32, dev, load, store, tree_sum, unit_inner_stride

CE_CHUNK = 16384
CE_BLOCK = 4096  # each chunk is reduced 4096 lanes at a time
ARGMAX_BLOCK = 4096
LOG2_E = F32(1.4426950408889634)


def cross_entropy_chunked(
    logits: np.ndarray, target: np.ndarray, ignore_index: int = -100, label_smoothing: float = 0.0
) -> np.ndarray:
    logits = unit_inner_stride(logits)
    X, T = dev(logits), dev(target)
    rows, v = logits.shape
    row = np.arange(rows, dtype=np.int64) * X.strides[0]
    y = load(T, np.arange(rows, dtype=np.int64) * T.strides[0]).astype(np.int64)
    keep = y != ignore_index
    m = np.full(rows, -np.inf, dtype=F32)
    d = np.zeros(rows, dtype=F32)
    x_sum = np.zeros(rows, dtype=F32)  # for label smoothing: sum_i x_i
    with np.errstate(invalid="ignore", over="ignore"):
        for chunk in range(0, v, CE_CHUNK):
            chunk_max = np.full(rows, -np.inf, dtype=F32)
            for start in range(chunk, min(chunk + CE_CHUNK, v), CE_BLOCK):
                cols = start + np.arange(CE_BLOCK)
                xb = load(X, row[:, None] + cols[None, :], (cols < v)[None, :], other=-np.inf)
                chunk_max = np.maximum(chunk_max, xb.max(axis=1))
            m_new = np.maximum(m, chunk_max)
            chunk_sum = np.zeros(rows, dtype=F32)
            for start in range(chunk, min(chunk + CE_CHUNK, v), CE_BLOCK):
                cols = start + np.arange(CE_BLOCK)
                mask = (cols < v)[None, :]
                xb = load(X, row[:, None] + cols[None, :], mask, other=-np.inf)
                chunk_sum += tree_sum(np.exp2((xb - m_new[:, None]) * LOG2_E))
                x_sum += tree_sum(np.where(mask, xb, F32(0)))
            d = d * np.exp2((m - m_new) * LOG2_E) + chunk_sum
            m = m_new
        lse = m + np.log(d)
        x_y = load(X, row + np.where(keep, y, 0), keep, other=0.0)
        s = F32(label_smoothing)
        loss = (F32(1) - s) * (lse - x_y) + s * (lse - x_sum / F32(v))
    return store(np.where(keep, loss, F32(0)), logits.dtype)


def argmax_rows(logits: np.ndarray) -> np.ndarray:
    """Index of the first maximal logit of each row (torch.argmax semantics), as int64."""
    logits = unit_inner_stride(logits)
    X = dev(logits)
    rows, v = logits.shape
    row = np.arange(rows, dtype=np.int64) * X.strides[0]
    best = np.full(rows, -np.inf, dtype=F32)
    best_idx = np.zeros(rows, dtype=np.int64)
    for start in range(0, v, ARGMAX_BLOCK):
        cols = start + np.arange(ARGMAX_BLOCK)
        xb = load(X, row[:, None] + cols[None, :], (cols < v)[None, :], other=-np.inf)
        block_max = xb.max(axis=1)
        block_idx = start + np.argmax(xb, axis=1)  # first occurrence inside the block
        take = block_max > best  # strict: an equal maximum in a later block keeps the earlier index
        best = np.where(take, block_max, best)
        best_idx = np.where(take, block_idx, best_idx)
    return best_idx
