"""Row softmax and log-softmax kernels: one program per block of rows, BLOCK-wide column tiles, fp32 math.

Controls: an online (single-pass max + rescaled sum) kernel; hard negative: a two-pass kernel with another
BLOCK. Bugs: a tail mask that loads 0 instead of -inf, and an online sum that is not rescaled when the
running max grows (invisible on power-of-two rows, or on rows whose max is in the first block).
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, as_rows, load_cols, store

BLOCK = 64


def _online_stats(rows: np.ndarray, block: int, other: float, rescale: bool) -> tuple[np.ndarray, np.ndarray]:
    """Running max and running sum of exp(x - max) over column tiles."""
    n = rows.shape[1]
    running_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    running_sum = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, n, block):
        tile, _ = load_cols(rows, start, block, other)
        new_max = np.maximum(running_max, tile.max(axis=1))
        block_sum = np.exp(tile - new_max[:, None]).sum(axis=1, dtype=F32)
        # The rescale by exp(old max - new max) is what the bug forgets.
        correction = np.exp(running_max - new_max) if rescale else F32(1.0)
        running_sum = running_sum * correction + block_sum
        running_max = new_max
    return running_max, running_sum


def _normalise(x: np.ndarray, rows: np.ndarray, row_max: np.ndarray, row_sum: np.ndarray) -> np.ndarray:
    out = np.exp(rows.astype(F32) - row_max[:, None]) / row_sum[:, None]
    return store(out, x.dtype).reshape(x.shape)


def softmax_online(x: np.ndarray) -> np.ndarray:
    """Control: online softmax, masked lanes load -inf."""
    rows = as_rows(x)
    with np.errstate(invalid="ignore"):
        row_max, row_sum = _online_stats(rows, BLOCK, -np.inf, rescale=True)
    return _normalise(x, rows, row_max, row_sum)


def softmax_two_pass(x: np.ndarray) -> np.ndarray:
    """Hard negative: a max pass, then a sum pass, with BLOCK = 256 (a different summation order)."""
    rows = as_rows(x)
    block = 256
    n = rows.shape[1]
    row_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    for start in range(0, n, block):
        tile, _ = load_cols(rows, start, block, -np.inf)
        row_max = np.maximum(row_max, tile.max(axis=1))
    row_sum = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, n, block):
        tile, _ = load_cols(rows, start, block, -np.inf)
        row_sum += np.exp(tile - row_max[:, None]).sum(axis=1, dtype=F32)
    return _normalise(x, rows, row_max, row_sum)


def softmax_tail_zero(x: np.ndarray) -> np.ndarray:
    """Bug (tail-mask leak): masked lanes load 0.0 instead of -inf, so every padded lane adds exp(0 - max)
    to the denominator (and 0 can become the max of an all-negative row)."""
    rows = as_rows(x)
    row_max, row_sum = _online_stats(rows, BLOCK, 0.0, rescale=True)
    return _normalise(x, rows, row_max, row_sum)


def softmax_no_rescale(x: np.ndarray) -> np.ndarray:
    """Bug (online softmax without rescale): the running sum is not multiplied by exp(m_old - m_new) when a
    later tile raises the max."""
    rows = as_rows(x)
    with np.errstate(invalid="ignore"):
        row_max, row_sum = _online_stats(rows, BLOCK, -np.inf, rescale=False)
    return _normalise(x, rows, row_max, row_sum)


# --- log-softmax --------------------------------------------------------------------------------------------


def _log_softmax(x: np.ndarray, row_max: np.ndarray, row_sum: np.ndarray) -> np.ndarray:
    rows = as_rows(x)
    out = (rows.astype(F32) - row_max[:, None]) - np.log(row_sum)[:, None]
    return store(out, x.dtype).reshape(x.shape)


def log_softmax_two_pass(x: np.ndarray) -> np.ndarray:
    """Control: a max pass then a sum pass over BLOCK = 64 tiles; y = (x - max) - log(sum)."""
    rows = as_rows(x)
    n = rows.shape[1]
    row_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    for start in range(0, n, BLOCK):
        tile, _ = load_cols(rows, start, BLOCK, -np.inf)
        row_max = np.maximum(row_max, tile.max(axis=1))
    row_sum = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, n, BLOCK):
        tile, _ = load_cols(rows, start, BLOCK, -np.inf)
        row_sum += np.exp(tile - row_max[:, None]).sum(axis=1, dtype=F32)
    return _log_softmax(x, row_max, row_sum)


def log_softmax_online(x: np.ndarray) -> np.ndarray:
    """Hard negative: online max and rescaled sum with BLOCK = 128."""
    rows = as_rows(x)
    with np.errstate(invalid="ignore"):
        row_max, row_sum = _online_stats(rows, 128, -np.inf, rescale=True)
    return _log_softmax(x, row_max, row_sum)


def log_softmax_tail_zero(x: np.ndarray) -> np.ndarray:
    """Bug (tail-mask leak): the max pass masks correctly, but the sum pass loads 0.0 into masked lanes, so
    padded lanes add exp(0 - max) to the sum."""
    rows = as_rows(x)
    n = rows.shape[1]
    row_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    for start in range(0, n, BLOCK):
        tile, _ = load_cols(rows, start, BLOCK, -np.inf)
        row_max = np.maximum(row_max, tile.max(axis=1))
    row_sum = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, n, BLOCK):
        tile, _ = load_cols(rows, start, BLOCK, 0.0)
        row_sum += np.exp(tile - row_max[:, None]).sum(axis=1, dtype=F32)
    return _log_softmax(x, row_max, row_sum)
