"""What every corpus kernel shares: masked tile loads (Triton's `tl.load(ptr, mask, other)`), explicit
rounding at the store, and the two memory-level mistakes the corpus needs (a truncating bf16 store and
offsets computed as if a tensor were contiguous)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.lib.array_utils import byte_bounds

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    """triton.next_power_of_2: the block size of a one-block-per-row kernel."""
    return 1 << max(n - 1, 0).bit_length()


def as_rows(x: np.ndarray) -> np.ndarray:
    """x as [rows, last dim]; a view when the layout allows (a strided load, not a contiguity assumption)."""
    return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


def load_cols(rows: np.ndarray, start: int, block: int, other: float) -> tuple[np.ndarray, np.ndarray]:
    """Columns [start, start + block) of a 2-D array as float32; masked-off lanes hold `other`."""
    n = rows.shape[1]
    cols = start + np.arange(block)
    mask = cols < n
    if n == 0:
        return np.full((rows.shape[0], block), other, dtype=F32), mask
    tile = rows[:, np.minimum(cols, n - 1)].astype(F32)
    return np.where(mask[None, :], tile, F32(other)), mask


def store(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The store of a correct kernel: fp32 -> output dtype with round-to-nearest-even."""
    return np.asarray(values, dtype=F32).astype(dtype)


def store_truncating(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A store that converts fp32 -> bf16 by dropping the low 16 bits (`>> 16`, i.e. round toward zero)
    instead of rounding to nearest even; other dtypes are stored correctly."""
    f32 = np.ascontiguousarray(values, dtype=F32)
    if np.dtype(dtype) != BF16:
        return f32.astype(dtype)
    bits = f32.view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(F32).astype(BF16)  # exact: the low bits are already zero


def read_as_contiguous(x: np.ndarray) -> np.ndarray:
    """What a kernel reads when it computes offsets as if x were C-contiguous (`row * n_cols + col`) from
    x's data pointer, ignoring its real strides. Reads past x's memory return 0 (a GPU would return
    whatever lies there, or fault)."""
    low, high = byte_bounds(x)
    start = x.__array_interface__["data"][0]
    if start != low or x.size == 0:  # negative strides: not a layout the corpus uses
        return np.ascontiguousarray(x)
    available = (high - start) // x.itemsize
    memory = np.lib.stride_tricks.as_strided(x, shape=(available,), strides=(x.itemsize,), writeable=False)
    flat = np.zeros(x.size, dtype=x.dtype)
    count = min(x.size, available)
    flat[:count] = memory[:count]
    return flat.reshape(x.shape)
