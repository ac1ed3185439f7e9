"""Helpers shared by the example kernels: a masked tile load, like Triton's tl.load(ptr, mask, other)."""

from __future__ import annotations

import numpy as np


def load_tile(rows: np.ndarray, start: int, block: int, other: float) -> tuple[np.ndarray, np.ndarray]:
    """Columns [start, start + block) of a 2-D array as float32; masked-off columns hold `other`."""
    n = rows.shape[1]
    cols = start + np.arange(block)
    mask = cols < n
    safe = np.minimum(cols, max(n - 1, 0))
    tile = rows[:, safe].astype(np.float32) if n else np.zeros((rows.shape[0], block), np.float32)
    return np.where(mask[None, :], tile, np.float32(other)), mask


def as_rows(x: np.ndarray) -> np.ndarray:
    """A view of x as [rows, last dim] (a copy only when the layout requires one)."""
    return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
