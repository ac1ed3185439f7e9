"""LayerNorm and RMSNorm: per-row statistics from fp32 tile sums, then an elementwise epilogue.

Bugs: one-pass variance E[x^2] - E[x]^2 (cancels catastrophically when |mean| >> std), statistics divided by
the block size instead of D, and an `eps` argument that the kernel never uses.
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, as_rows, load_cols, next_pow2, store

BLOCK = 128
DEFAULT_EPS = 1e-5


def _row_sum(
    rows: np.ndarray, block: int, shift: np.ndarray | None = None, square: bool = False
) -> np.ndarray:
    acc = np.zeros((rows.shape[0], block), dtype=F32)
    for start in range(0, rows.shape[1], block):
        tile, mask = load_cols(rows, start, block, 0.0)
        if shift is not None:
            tile = np.where(mask[None, :], tile - shift[:, None], F32(0))
        acc += tile * tile if square else tile
    return acc.sum(axis=1, dtype=F32)


def _layernorm_out(
    x: np.ndarray,
    rows: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    eps: float,
) -> np.ndarray:
    rstd = F32(1.0) / np.sqrt(var + F32(eps))
    out = (rows.astype(F32) - mean[:, None]) * rstd[:, None] * weight.astype(F32) + bias.astype(F32)
    return store(out, x.dtype).reshape(x.shape)


def layernorm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Control: two passes, mean then the centred sum of squares."""
    rows = as_rows(x)
    n = F32(max(rows.shape[1], 1))
    mean = _row_sum(rows, BLOCK) / n
    var = _row_sum(rows, BLOCK, shift=mean, square=True) / n
    return _layernorm_out(x, rows, mean, var, weight, bias, eps)


def layernorm_welford(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = DEFAULT_EPS
) -> np.ndarray:
    """Hard negative: one pass; per-tile (count, mean, M2) merged by Chan's parallel update; BLOCK = 256."""
    rows = as_rows(x)
    block = 256
    count = np.zeros(rows.shape[0], dtype=F32)
    mean = np.zeros(rows.shape[0], dtype=F32)
    m2 = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], block):
        tile, mask = load_cols(rows, start, block, 0.0)
        tile_n = F32(mask.sum())
        tile_mean = tile.sum(axis=1, dtype=F32) / tile_n
        tile_m2 = (np.where(mask[None, :], tile - tile_mean[:, None], F32(0)) ** 2).sum(axis=1, dtype=F32)
        total = count + tile_n
        delta = tile_mean - mean
        mean = mean + delta * (tile_n / total)
        m2 = m2 + tile_m2 + delta * delta * (count * tile_n / total)
        count = total
    return _layernorm_out(x, rows, mean, m2 / np.maximum(count, F32(1)), weight, bias, eps)


def layernorm_one_pass(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = DEFAULT_EPS
) -> np.ndarray:
    """Bug (one-pass variance): var = E[x^2] - E[x]^2 from a single pass of sums."""
    rows = as_rows(x)
    n = F32(max(rows.shape[1], 1))
    mean = _row_sum(rows, BLOCK) / n
    var = _row_sum(rows, BLOCK, square=True) / n - mean * mean
    return _layernorm_out(x, rows, mean, var, weight, bias, eps)


def layernorm_by_block(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = DEFAULT_EPS
) -> np.ndarray:
    """Bug (divides by the block size): one block per row, BLOCK = next_pow2(D), and both the mean and the
    variance are divided by BLOCK instead of D."""
    rows = as_rows(x)
    block = next_pow2(rows.shape[1])
    tile, mask = load_cols(rows, 0, block, 0.0)
    mean = tile.sum(axis=1, dtype=F32) / F32(block)
    centred = np.where(mask[None, :], tile - mean[:, None], F32(0))
    var = (centred * centred).sum(axis=1, dtype=F32) / F32(block)
    return _layernorm_out(x, rows, mean, var, weight, bias, eps)


# --- RMSNorm ------------------------------------------------------------------------------------------------


def _rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float, block: int) -> np.ndarray:
    rows = as_rows(x)
    mean_sq = _row_sum(rows, block, square=True) / F32(max(rows.shape[1], 1))
    rstd = F32(1.0) / np.sqrt(mean_sq + F32(eps))
    out = rows.astype(F32) * rstd[:, None] * weight.astype(F32)
    return store(out, x.dtype).reshape(x.shape)


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Control: BLOCK = 128 tiles."""
    return _rmsnorm(x, weight, eps, BLOCK)


def rmsnorm_one_block(x: np.ndarray, weight: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Hard negative: one block per row, BLOCK = next_pow2(D)."""
    return _rmsnorm(x, weight, eps, next_pow2(x.shape[-1]))


def rmsnorm_ignores_eps(x: np.ndarray, weight: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Bug (ignored kwarg): the launcher never forwards `eps`; the kernel uses its compiled-in 1e-5."""
    return _rmsnorm(x, weight, DEFAULT_EPS, BLOCK)
