"""Row-wise kernels: one program per row of a [M, N] input (per batch and group for group norm), looping over
the row in blocks with float32 accumulators, reading through row strides (rows may be padded)."""

from __future__ import annotations

import numpy as np

from field_kernels.gpu import (
    F32,
    cdiv,
    dev,
    load,
    round_to,
    store,
    store_truncating,  # noqa: F401  (the truncating-store mutants swap it in)
    tree_sum,
    unit_inner_stride,
)

SOFTMAX_BLOCK = 1024
SUM_BLOCK = 1024
SUM_BLOCKS_PER_PROGRAM = 4  # level 1 of the tree reduction: each program folds 4 blocks into one partial
RMS_BLOCK = 4096
LN_BLOCK = 1024
STAT_BLOCK = 2048
GN_BLOCK = 1024


def _row_offsets(rows: int, row_stride: int) -> np.ndarray:
    return np.arange(rows, dtype=np.int64) * row_stride


# ---- softmax: online max / sum over blocks, then a normalising pass ------------------------------------
def softmax_online(x: np.ndarray) -> np.ndarray:
    x = unit_inner_stride(x)
    X = dev(x)
    m_rows, n = x.shape
    row = _row_offsets(m_rows, X.strides[0])
    m = np.full(m_rows, -np.inf, dtype=F32)
    d = np.zeros(m_rows, dtype=F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n, SOFTMAX_BLOCK):
            cols = start + np.arange(SOFTMAX_BLOCK)
            mask = cols < n
            xb = load(X, row[:, None] + cols[None, :], mask[None, :], other=-np.inf)
            m_new = np.maximum(m, xb.max(axis=1))
            d = d * np.exp(m - m_new) + tree_sum(np.exp(xb - m_new[:, None]))
            m = m_new
        y = np.empty((m_rows, n), dtype=F32)
        for start in range(0, n, SOFTMAX_BLOCK):
            cols = start + np.arange(min(SOFTMAX_BLOCK, n - start))
            xb = load(X, row[:, None] + cols[None, :])
            y[:, cols] = np.exp(xb - m[:, None]) / d[:, None]
    return store(y, x.dtype)


# ---- row sum: a two-level tree (partials per group of blocks, then a tree over the partials) -------------
def row_sum(x: np.ndarray) -> np.ndarray:
    x = unit_inner_stride(x)
    X = dev(x)
    m_rows, n = x.shape
    row = _row_offsets(m_rows, X.strides[0])
    span = SUM_BLOCK * SUM_BLOCKS_PER_PROGRAM
    partials = np.zeros((m_rows, max(cdiv(n, span), 1)), dtype=F32)
    for p, first in enumerate(range(0, n, span)):  # level 1: program (row, p)
        acc = np.zeros((m_rows, SUM_BLOCK), dtype=F32)
        for start in range(first, min(first + span, n), SUM_BLOCK):
            cols = start + np.arange(SUM_BLOCK)
            acc += load(X, row[:, None] + cols[None, :], (cols < n)[None, :], other=0.0)
        partials[:, p] = tree_sum(acc)
    return store(tree_sum(partials), x.dtype)  # level 2: one program per row


# ---- RMSNorm: sum of squares over blocks of 4096, then the scaled row -----------------------------------
def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6, offset: float = 0.0) -> np.ndarray:
    x = unit_inner_stride(x)
    X, W = dev(x), dev(weight)
    m_rows, n = x.shape
    row = _row_offsets(m_rows, X.strides[0])
    sum_sq = np.zeros(m_rows, dtype=F32)
    for start in range(0, n, RMS_BLOCK):
        cols = start + np.arange(RMS_BLOCK)
        xb = load(X, row[:, None] + cols[None, :], (cols < n)[None, :], other=0.0)
        sum_sq += tree_sum(xb * xb)
    rstd = F32(1.0) / np.sqrt(sum_sq / F32(n) + F32(eps))
    cols = np.arange(n)
    xr = load(X, row[:, None] + cols[None, :])
    w = load(W, cols * W.strides[0])
    return store(xr * rstd[:, None] * (F32(offset) + w)[None, :], x.dtype)


# ---- LayerNorm: per-lane Welford over blocks, lanes merged by a Chan tree ----------------------------------
def _chan_merge(count: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge the lanes (last axis) pairwise: (n_a, mu_a, M2_a) + (n_b, mu_b, M2_b)."""
    while count.shape[-1] > 1:
        h = count.shape[-1] // 2
        na, nb = count[..., :h], count[..., h:]
        ma, mb = mean[..., :h], mean[..., h:]
        n = na + nb
        safe = np.where(n > 0, n, F32(1))
        delta = mb - ma
        mean = ma + delta * (nb / safe)
        m2 = m2[..., :h] + m2[..., h:] + delta * delta * (na * nb / safe)
        count = n
    return mean[..., 0], m2[..., 0]


def layer_norm_welford(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x = unit_inner_stride(x)
    X, W, B = dev(x), dev(weight), dev(bias)
    m_rows, n = x.shape
    row = _row_offsets(m_rows, X.strides[0])
    count = np.zeros((m_rows, LN_BLOCK), dtype=F32)
    mean = np.zeros((m_rows, LN_BLOCK), dtype=F32)
    m2 = np.zeros((m_rows, LN_BLOCK), dtype=F32)
    for start in range(0, n, LN_BLOCK):
        cols = start + np.arange(LN_BLOCK)
        mask = (cols < n)[None, :]
        xb = load(X, row[:, None] + cols[None, :], mask, other=0.0)
        count = count + mask
        delta = np.where(mask, xb - mean, F32(0))
        mean = mean + delta / np.maximum(count, F32(1))
        m2 = m2 + np.where(mask, delta * (xb - mean), F32(0))
    mu, m2_row = _chan_merge(count, mean, m2)
    rstd = F32(1.0) / np.sqrt(m2_row / F32(n) + F32(eps))
    cols = np.arange(n)
    xr = load(X, row[:, None] + cols[None, :])
    w = load(W, cols * W.strides[0])[None, :]
    b = load(B, cols[None, :] * B.strides[0])
    return store((xr - mu[:, None]) * rstd[:, None] * w + b, x.dtype)


# ---- std / var over rows: two passes (mean, then centred squares), sqrt for the std ------------------------
def _centred_sum_sq(x: np.ndarray) -> tuple[np.ndarray, int]:
    x = unit_inner_stride(x)
    X = dev(x)
    m_rows, n = x.shape
    row = _row_offsets(m_rows, X.strides[0])
    total = np.zeros(m_rows, dtype=F32)
    for start in range(0, n, STAT_BLOCK):
        cols = start + np.arange(STAT_BLOCK)
        total += tree_sum(load(X, row[:, None] + cols[None, :], (cols < n)[None, :], other=0.0))
    mean = total / F32(max(n, 1))
    ss = np.zeros(m_rows, dtype=F32)
    for start in range(0, n, STAT_BLOCK):
        cols = start + np.arange(STAT_BLOCK)
        mask = (cols < n)[None, :]
        xb = load(X, row[:, None] + cols[None, :], mask, other=0.0)
        centred = np.where(mask, xb - mean[:, None], F32(0))
        ss += tree_sum(centred * centred)
    return ss, n


def row_var(x: np.ndarray, correction: int = 1) -> np.ndarray:
    ss, n = _centred_sum_sq(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return store(ss / F32(n - correction), x.dtype)


def row_std(x: np.ndarray, correction: int = 1) -> np.ndarray:
    ss, n = _centred_sum_sq(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return store(np.sqrt(ss / F32(n - correction)), x.dtype)


# ---- GroupNorm over x [B, C, L]: one program per (batch, group), two passes over its C/G x L elements --------
def group_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int = 4, eps: float = 1e-5
) -> np.ndarray:
    X, W, B = dev(x), dev(weight), dev(bias)
    batch, channels, length = x.shape
    per_group = channels // num_groups
    size = per_group * length
    # element i of a group: channel g * per_group + i // length, position i % length
    base = (
        np.arange(batch, dtype=np.int64)[:, None] * X.strides[0]
        + np.arange(num_groups, dtype=np.int64)[None, :] * per_group * X.strides[1]
    ).reshape(-1)
    total = np.zeros(base.size, dtype=F32)
    for start in range(0, size, GN_BLOCK):
        i = start + np.arange(GN_BLOCK)
        offs = base[:, None] + (i // length * X.strides[1] + i % length * X.strides[2])[None, :]
        total += tree_sum(load(X, offs, (i < size)[None, :], other=0.0))
    mean = total / F32(size)
    ss = np.zeros(base.size, dtype=F32)
    for start in range(0, size, GN_BLOCK):
        i = start + np.arange(GN_BLOCK)
        mask = (i < size)[None, :]
        offs = base[:, None] + (i // length * X.strides[1] + i % length * X.strides[2])[None, :]
        centred = np.where(mask, load(X, offs, mask, other=0.0) - mean[:, None], F32(0))
        ss += tree_sum(centred * centred)
    rstd = F32(1.0) / np.sqrt(ss / F32(size) + F32(eps))
    i = np.arange(size)
    offs = base[:, None] + (i // length * X.strides[1] + i % length * X.strides[2])[None, :]
    channel = (np.arange(num_groups)[:, None] * per_group + (i // length)[None, :]).reshape(
        1, num_groups, size
    )
    channel = np.broadcast_to(channel, (batch, num_groups, size)).reshape(base.size, size)
    w = load(W, channel * W.strides[0])
    b = load(B, channel * B.strides[0])
    y = (load(X, offs) - mean[:, None]) * rstd[:, None] * w + b
    return store(y.reshape(batch, channels, length), x.dtype)


__all__ = [
    "group_norm",
    "layer_norm_welford",
    "rms_norm",
    "round_to",
    "row_std",
    "row_sum",
    "row_var",
    "softmax_online",
]
