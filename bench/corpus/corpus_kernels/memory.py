"""Data movement: a tiled transpose that writes into a caller's `out=` buffer, and embedding gathers (one with
an int8 table that may exceed 2 GiB).

Bugs: a grid computed with floor division, so the last partial tiles of `out` are never written; table
row offsets computed as `id * D` (a contiguous table assumed) instead of with the table's strides; and element
offsets computed in int32, which wrap past 2^31 elements (only the thorough suite's large sizes reach them).
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import cdiv, read_as_contiguous


def _transpose(x: np.ndarray, out: np.ndarray, tile_m: int, tile_n: int, grid_m: int, grid_n: int) -> None:
    m, n = x.shape
    for i in range(grid_m):
        rows = slice(i * tile_m, min((i + 1) * tile_m, m))
        for j in range(grid_n):
            cols = slice(j * tile_n, min((j + 1) * tile_n, n))
            out[cols, rows] = x[rows, cols].T


def transpose(x: np.ndarray, out: np.ndarray) -> None:
    """Control: 32 x 32 tiles, grid = cdiv(M, 32) x cdiv(N, 32), bounds-checked tile edges."""
    m, n = x.shape
    _transpose(x, out, 32, 32, cdiv(m, 32), cdiv(n, 32))


def transpose_16x64(x: np.ndarray, out: np.ndarray) -> None:
    """Hard negative: 16 x 64 tiles."""
    m, n = x.shape
    _transpose(x, out, 16, 64, cdiv(m, 16), cdiv(n, 64))


def transpose_floor_grid(x: np.ndarray, out: np.ndarray) -> None:
    """Bug (part of `out` left unwritten): grid = (M // 32, N // 32), so the partial tiles at the edges are
    never written."""
    m, n = x.shape
    _transpose(x, out, 32, 32, m // 32, n // 32)


def embedding(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Control: blocks of 64 tokens gather their table rows through the table's strides."""
    out = np.empty((ids.shape[0], table.shape[1]), dtype=table.dtype)
    for t0 in range(0, ids.shape[0], 64):
        out[t0 : t0 + 64] = table[ids[t0 : t0 + 64]]
    return out


def embedding_blocked_d(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Hard negative: 2-D blocks of 16 tokens x 128 features."""
    out = np.empty((ids.shape[0], table.shape[1]), dtype=table.dtype)
    for t0 in range(0, ids.shape[0], 16):
        block = ids[t0 : t0 + 16]
        for d0 in range(0, table.shape[1], 128):
            out[t0 : t0 + 16, d0 : d0 + 128] = table[block, d0 : d0 + 128]
    return out


def embedding_assumes_contiguous(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Bug (stride assumption): row offsets `id * D` as if the table were contiguous."""
    return embedding(ids, read_as_contiguous(table))


def embedding_int8(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Control (int8 table): blocks of 64 tokens; element offsets `id * D + d` in 64-bit arithmetic."""
    out = np.empty((ids.shape[0], table.shape[1]), dtype=table.dtype)
    cols = np.arange(table.shape[1], dtype=np.int64)
    for t0 in range(0, ids.shape[0], 64):
        offsets = ids[t0 : t0 + 64].astype(np.int64)[:, None] * table.shape[1] + cols[None, :]
        rows, within = np.divmod(offsets, table.shape[1])
        out[t0 : t0 + 64] = table[rows, within]
    return out


def embedding_int8_offset_int32(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Bug (32-bit offset overflow): the element offsets `id * D + d` are computed in int32 (what
    `ids[:, None] * D + cols` does with int32 ids in a Triton kernel). Past 2^31 elements they wrap negative
    and, pointer arithmetic being modular, read another part of the table: silent corruption, only on tables
    over 2 GiB."""
    size = table.shape[0] * table.shape[1]
    out = np.empty((ids.shape[0], table.shape[1]), dtype=table.dtype)
    cols = np.arange(table.shape[1], dtype=np.int64)
    for t0 in range(0, ids.shape[0], 64):
        offsets = ids[t0 : t0 + 64].astype(np.int64)[:, None] * table.shape[1] + cols[None, :]
        wrapped = (offsets + 2**31) % 2**32 - 2**31  # int32 arithmetic
        rows, within = np.divmod(wrapped % size, table.shape[1])
        out[t0 : t0 + 64] = table[rows, within]
    return out
