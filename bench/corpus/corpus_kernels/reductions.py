"""Row reductions (sum, mean, max, argmax): one program per row block, fp32 accumulators unless a bug says
otherwise.

Bugs: a shared-memory halving tree over a block of N threads (drops lanes when N is not a power of two), an
accumulator in the input dtype, a mean divided by the block size, a max or argmax initialised to 0, and a max
whose masked lanes load 0.
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, as_rows, load_cols, next_pow2, store

BLOCK = 256
MAX_THREADS = 1024


def _tiled_sum(rows: np.ndarray, block: int) -> np.ndarray:
    """Triton style: a [rows, block] fp32 accumulator, += each tile, then one tree sum across lanes."""
    acc = np.zeros((rows.shape[0], block), dtype=F32)
    for start in range(0, rows.shape[1], block):
        tile, _ = load_cols(rows, start, block, 0.0)
        acc += tile
    return _tree(acc)


def _tree(lanes: np.ndarray) -> np.ndarray:
    """Pairwise halving over a power-of-two number of lanes (zero-padded), in fp32."""
    width = lanes.shape[1]
    padded = next_pow2(max(width, 1))
    acc = np.zeros((lanes.shape[0], padded), dtype=F32)
    acc[:, :width] = lanes
    while padded > 1:
        padded //= 2
        acc = acc[:, :padded] + acc[:, padded : 2 * padded]
    return acc[:, 0]


def _sequential_sum(rows: np.ndarray, acc_dtype: np.dtype) -> np.ndarray:
    """One thread per row walking its columns: acc = acc + x[j], rounded to acc_dtype after every add."""
    acc = np.zeros(rows.shape[0], dtype=acc_dtype)
    for j in range(rows.shape[1]):
        acc = (acc.astype(F32) + rows[:, j].astype(F32)).astype(acc_dtype)
    return acc.astype(F32)


def row_sum(x: np.ndarray) -> np.ndarray:
    """Control."""
    rows = as_rows(x)
    return store(_tiled_sum(rows, BLOCK), x.dtype).reshape(x.shape[:-1])


def row_sum_pairwise(x: np.ndarray) -> np.ndarray:
    """Hard negative: the whole row as one zero-padded power-of-two block, reduced by a pairwise tree."""
    rows = as_rows(x)
    return store(_tree(rows.astype(F32)), x.dtype).reshape(x.shape[:-1])


def row_sum_sequential(x: np.ndarray) -> np.ndarray:
    """Hard negative: one thread per row with a sequential fp32 accumulator (recursive summation)."""
    rows = as_rows(x)
    return store(_sequential_sum(rows, np.dtype(F32)), x.dtype).reshape(x.shape[:-1])


def row_sum_lowp_acc(x: np.ndarray) -> np.ndarray:
    """Bug (low-precision accumulator): the sequential accumulator is declared with the input type
    (`T acc = 0`), so fp16/bf16 rows are summed in fp16/bf16."""
    rows = as_rows(x)
    return store(_sequential_sum(rows, x.dtype), x.dtype).reshape(x.shape[:-1])


def row_sum_tree_drops_lanes(x: np.ndarray) -> np.ndarray:
    """Bug (non-power-of-two reduction tree): blockDim = min(N, 1024) threads each sum a strided slice, then
    `for (s = blockDim / 2; s > 0; s >>= 1) if (tid < s) sh[tid] += sh[tid + s];` loses the odd lane of every
    level when blockDim is not a power of two."""
    rows = as_rows(x)
    n = rows.shape[1]
    threads = max(1, min(n, MAX_THREADS))
    shared = np.zeros((rows.shape[0], threads), dtype=F32)
    for start in range(0, n, threads):
        tile, _ = load_cols(rows, start, threads, 0.0)
        shared += tile
    width = threads
    while width > 1:
        half = width // 2
        shared = shared[:, :half] + shared[:, half : 2 * half]
        width = half
    return store(shared[:, 0], x.dtype).reshape(x.shape[:-1])


# --- mean ---------------------------------------------------------------------------------------------------


def row_mean(x: np.ndarray) -> np.ndarray:
    """Control: tiled fp32 sum, divided by N."""
    rows = as_rows(x)
    total = _tiled_sum(rows, BLOCK)
    return store(total / F32(max(rows.shape[1], 1)), x.dtype).reshape(x.shape[:-1])


def row_mean_one_block(x: np.ndarray) -> np.ndarray:
    """Hard negative: one block per row (BLOCK = next_pow2(N), masked), tree sum, divided by N."""
    rows = as_rows(x)
    n = rows.shape[1]
    tile, _ = load_cols(rows, 0, next_pow2(n), 0.0)
    return store(_tree(tile) / F32(max(n, 1)), x.dtype).reshape(x.shape[:-1])


def row_mean_by_block(x: np.ndarray) -> np.ndarray:
    """Bug (divides by the block size): `tl.sum(x, 0) / BLOCK_SIZE` with BLOCK_SIZE = next_pow2(N), right
    only when N is a power of two."""
    rows = as_rows(x)
    n = rows.shape[1]
    block = next_pow2(n)
    tile, _ = load_cols(rows, 0, block, 0.0)
    return store(_tree(tile) / F32(block), x.dtype).reshape(x.shape[:-1])


# --- max and argmax -----------------------------------------------------------------------------------------


def _tiled_max(rows: np.ndarray, block: int, other: float, init: float) -> np.ndarray:
    best = np.full(rows.shape[0], init, dtype=F32)
    for start in range(0, rows.shape[1], block):
        tile, _ = load_cols(rows, start, block, other)
        best = np.maximum(best, tile.max(axis=1))
    return best


def row_max(x: np.ndarray) -> np.ndarray:
    """Control: masked lanes and the accumulator start at -inf."""
    return store(_tiled_max(as_rows(x), BLOCK, -np.inf, -np.inf), x.dtype).reshape(x.shape[:-1])


def row_max_block512(x: np.ndarray) -> np.ndarray:
    """Hard negative: BLOCK = 512."""
    return store(_tiled_max(as_rows(x), 512, -np.inf, -np.inf), x.dtype).reshape(x.shape[:-1])


def row_max_tail_zero(x: np.ndarray) -> np.ndarray:
    """Bug (tail-mask leak): masked lanes load 0.0, the identity of a sum but not of a max."""
    return store(_tiled_max(as_rows(x), BLOCK, 0.0, -np.inf), x.dtype).reshape(x.shape[:-1])


def _tiled_argmax(rows: np.ndarray, block: int, init: float) -> np.ndarray:
    """Running (max, index) over tiles; a later tile wins only when strictly greater (first index on ties)."""
    best = np.full(rows.shape[0], init, dtype=F32)
    index = np.zeros(rows.shape[0], dtype=np.int64)
    for start in range(0, rows.shape[1], block):
        tile, _ = load_cols(rows, start, block, -np.inf)
        local = tile.argmax(axis=1)
        value = tile[np.arange(rows.shape[0]), local]
        better = value > best
        best = np.where(better, value, best)
        index = np.where(better, start + local, index)
    return index


def argmax(x: np.ndarray) -> np.ndarray:
    """Control: running max starts at -inf."""
    return _tiled_argmax(as_rows(x), BLOCK, -np.inf).reshape(x.shape[:-1])


def argmax_tree(x: np.ndarray) -> np.ndarray:
    """Hard negative: a pairwise (value, index) tree over the whole row; ties keep the lower index."""
    rows = as_rows(x)
    n = rows.shape[1]
    width = next_pow2(max(n, 1))
    values, _ = load_cols(rows, 0, width, -np.inf)
    index = np.broadcast_to(np.arange(width), values.shape).copy()
    while width > 1:
        width //= 2
        left_v, right_v = values[:, :width], values[:, width : 2 * width]
        left_i, right_i = index[:, :width], index[:, width : 2 * width]
        take_right = (right_v > left_v) | ((right_v == left_v) & (right_i < left_i))
        values = np.where(take_right, right_v, left_v)
        index = np.where(take_right, right_i, left_i)
    return index[:, 0].astype(np.int64).reshape(x.shape[:-1])


def argmax_init_zero(x: np.ndarray) -> np.ndarray:
    """Bug (max initialised to 0): `float best = 0.f; int arg = 0;` so a row whose values are all negative
    returns index 0."""
    return _tiled_argmax(as_rows(x), BLOCK, 0.0).reshape(x.shape[:-1])
