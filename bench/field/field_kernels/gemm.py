"""Contractions: a split-K linear layer (y = x @ w.T + b), a 1-D convolution tiled over the output length with a
halo, and 1-D max pooling with padding and stride."""

from __future__ import annotations

import numpy as np

from field_kernels.gpu import F32, cdiv, dev, load, round_to, store, store_truncating  # noqa: F401

BLOCK_K = 256
SPLIT_K = 4
CONV_TILE = 128  # output positions per program


# ---- linear: 4 K-splits, each accumulating BLOCK_K tiles in fp32; partials summed in a fixed order ----------
def linear_splitk(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """x [M, K], weight [N, K] (nn.Linear layout), bias [N] -> [M, N]."""
    X, W, B = dev(x), dev(weight), dev(bias)
    m, k = x.shape
    n = weight.shape[0]
    rows, cols = np.arange(m, dtype=np.int64), np.arange(n, dtype=np.int64)
    per_split = cdiv(cdiv(k, SPLIT_K), BLOCK_K) * BLOCK_K
    partials = np.zeros((SPLIT_K, m, n), dtype=F32)
    for s in range(SPLIT_K):
        acc = np.zeros((m, n), dtype=F32)
        for k0 in range(s * per_split, min((s + 1) * per_split, k), BLOCK_K):
            kk = k0 + np.arange(BLOCK_K, dtype=np.int64)
            mask = kk < k
            a = load(X, rows[:, None] * X.strides[0] + kk[None, :] * X.strides[1], mask[None, :], 0.0)
            b = load(W, cols[:, None] * W.strides[0] + kk[None, :] * W.strides[1], mask[None, :], 0.0)
            acc += a @ b.T
        partials[s] = acc
    y = partials[0]
    for s in range(1, SPLIT_K):
        y = y + partials[s]
    bias_row = load(B, cols * B.strides[0])[None, :]
    return store(y + bias_row, x.dtype)


# ---- conv1d: x [B, CI, L] * w [CO, CI, KW], stride, zero padding; programs tile the output length ----------
def conv1d(x: np.ndarray, weight: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
    X, W = dev(x), dev(weight)
    batch, c_in, length = x.shape
    c_out, _, kw = weight.shape
    l_out = (length + 2 * padding - kw) // stride + 1
    y = np.zeros((batch, c_out, l_out), dtype=F32)
    ci = np.arange(c_in, dtype=np.int64)
    taps = load(
        W,
        np.arange(c_out, dtype=np.int64)[:, None, None] * W.strides[0]
        + ci[None, :, None] * W.strides[1]
        + np.arange(kw, dtype=np.int64)[None, None, :] * W.strides[2],
    )  # [CO, CI, KW]
    bidx = np.arange(batch, dtype=np.int64)
    for t0 in range(0, l_out, CONV_TILE):
        # The tile's outputs read input positions [t0*S - P, t0*S - P + need); the shared-memory tile is
        # filled up to `loaded` (halo included) and reads past it see the zero-initialised buffer.
        need = (CONV_TILE - 1) * stride + kw
        loaded = need
        lane = np.arange(need, dtype=np.int64)
        pos = t0 * stride - padding + lane
        inside = (pos >= 0) & (pos < length) & (lane < loaded)
        tile = load(
            X,
            bidx[:, None, None] * X.strides[0]
            + ci[None, :, None] * X.strides[1]
            + pos[None, None, :] * X.strides[2],
            inside[None, None, :],
            other=0.0,
        )  # [B, CI, need], the tile held in shared memory
        outs = np.arange(t0, min(t0 + CONV_TILE, l_out))
        acc = np.zeros((batch, c_out, outs.size), dtype=F32)
        for j in range(kw):
            cols = (outs - t0) * stride + j  # positions inside the tile
            acc += np.einsum("bcl,oc->bol", tile[:, :, cols], taps[:, :, j], dtype=F32)
        y[:, :, outs] = acc
    return store(y, x.dtype)


# ---- max pooling: x [B, C, L], window KW, stride, -inf padding (torch.nn.functional.max_pool1d) --------------
def max_pool1d(x: np.ndarray, kernel_size: int = 2, stride: int = 2, padding: int = 0) -> np.ndarray:
    X = dev(x)
    batch, channels, length = x.shape
    l_out = (length + 2 * padding - kernel_size) // stride + 1
    base = (
        np.arange(batch, dtype=np.int64)[:, None] * X.strides[0]
        + np.arange(channels, dtype=np.int64)[None, :] * X.strides[1]
    )[:, :, None]
    out = np.full((batch, channels, l_out), -np.inf, dtype=F32)
    starts = np.arange(l_out, dtype=np.int64) * stride - padding
    for j in range(kernel_size):
        pos = starts + j
        inside = (pos >= 0) & (pos < length)
        out = np.maximum(
            out, load(X, base + pos[None, None, :] * X.strides[2], inside[None, None, :], -np.inf)
        )
    return store(out, x.dtype)
