"""Inclusive prefix sums along the last dim: a scan inside each BLOCK plus a carry across blocks (fp32).

Bugs: no carry across blocks (each block restarts at 0), and an in-place scan that uses the input as its
scratch buffer (the output is right; the caller's input is destroyed).
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, as_rows, cdiv, load_cols, store

BLOCK = 64


def _block_scan(rows: np.ndarray, block: int, carry_on: bool) -> np.ndarray:
    n = rows.shape[1]
    out = np.empty(rows.shape, dtype=F32)
    carry = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, n, block):
        tile, mask = load_cols(rows, start, block, 0.0)
        scanned = np.cumsum(tile, axis=1, dtype=F32) + carry[:, None]
        width = int(mask.sum())
        out[:, start : start + width] = scanned[:, :width]
        if carry_on:
            carry = scanned[:, -1]
    return out


def cumsum(x: np.ndarray) -> np.ndarray:
    """Control: BLOCK = 64 with a running carry."""
    return store(_block_scan(as_rows(x), BLOCK, True), x.dtype).reshape(x.shape)


def cumsum_two_level(x: np.ndarray) -> np.ndarray:
    """Hard negative: scan each 128-wide block independently, scan the block totals, add each block's offset
    (the reduce-then-scan structure of a multi-program scan: a different summation order)."""
    rows = as_rows(x)
    block = 128
    local = _block_scan(rows, block, False)
    blocks = cdiv(rows.shape[1], block)
    totals = (
        np.stack([local[:, min((b + 1) * block, rows.shape[1]) - 1] for b in range(blocks)], axis=1)
        if blocks
        else np.zeros((rows.shape[0], 0), F32)
    )
    offsets = np.concatenate(
        [np.zeros((rows.shape[0], 1), F32), np.cumsum(totals, axis=1, dtype=F32)[:, :-1]], axis=1
    )
    out = local + np.repeat(offsets, block, axis=1)[:, : rows.shape[1]]
    return store(out, x.dtype).reshape(x.shape)


def cumsum_no_carry(x: np.ndarray) -> np.ndarray:
    """Bug (scan without carry): each block scans from 0; right only when N <= BLOCK."""
    return store(_block_scan(as_rows(x), BLOCK, False), x.dtype).reshape(x.shape)


def cumsum_in_place(x: np.ndarray) -> np.ndarray:
    """Bug (writes into its input): the kernel scans in place in the input buffer and returns it."""
    x[...] = store(_block_scan(as_rows(x), BLOCK, True), x.dtype).reshape(x.shape)
    return x
