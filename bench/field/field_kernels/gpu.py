"""A small device model for NumPy emulations of GPU kernels, in the style of a Triton program.

A kernel sees a tensor the way a GPU kernel does: a pointer to its first element, element strides, and memory
behind it. `dev(x)` gives that view; `load` gathers at computed element offsets under a mask, with `other`
on masked lanes, and reads outside the allocation return NaN (garbage a GPU would read, or fault on).
Offsets are int64 arrays, except where a kernel computes them in int32 (then they wrap as on a GPU).
Programs (one per row, or per row and tile) are batched along the first axis of every array: the arithmetic
of each program is exactly the one a single program would do, in float32 unless a kernel says otherwise.
Stores round float32 to the output dtype to nearest even, as `tl.store` / `__float2bfloat16_rn` do.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class DevTensor:
    """A tensor as a kernel receives it: its memory from the first element on, its shape and element strides."""

    mem: np.ndarray  # 1-D
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        return self.mem.dtype


def dev(x: np.ndarray) -> DevTensor:
    """The device view of an array; negative strides (never handed over by torch) become a copy."""
    if any(s < 0 for s in x.strides):
        x = np.ascontiguousarray(x)
    item = x.itemsize
    if x.size == 0:
        return DevTensor(np.zeros(0, x.dtype), x.shape, tuple(s // item for s in x.strides))
    span = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True)) // item + 1
    mem = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,), writeable=False)
    return DevTensor(mem, x.shape, tuple(s // item for s in x.strides))


def unit_inner_stride(x: np.ndarray) -> np.ndarray:
    """What launchers guarantee before a row kernel: a unit stride along the last dim (a copy otherwise);
    rows may still be padded (x[:, :N] of a wider allocation), which is why kernels take a row stride."""
    if x.ndim and x.shape[-1] > 1 and x.strides[-1] != x.itemsize:
        return np.ascontiguousarray(x)
    return x


def load(t: DevTensor, offsets: np.ndarray, mask: np.ndarray | None = None, other: float = 0.0) -> np.ndarray:
    """`tl.load(ptr + offsets, mask, other)` converted to float32 (integer tensors keep their dtype)."""
    offsets = np.asarray(offsets)
    inside = (offsets >= 0) & (offsets < t.mem.size)
    active = inside if mask is None else inside & mask
    raw = t.mem[np.where(active, offsets, 0)] if t.mem.size else np.zeros(offsets.shape, t.mem.dtype)
    if t.mem.dtype.kind in "iub":
        return np.where(active, raw, np.asarray(other).astype(raw.dtype))
    values = raw.astype(F32)
    garbage = ~inside if mask is None else ~inside & mask
    values = np.where(garbage, F32(np.nan), values)
    if mask is not None:
        values = np.where(mask, values, F32(other))
    return values


def round_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Values held in a `dtype` register or buffer (rounded to nearest even), read back as float32."""
    return np.asarray(values, dtype=F32).astype(dtype).astype(F32)


def store(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The store of a correct kernel: float32 -> dtype, round to nearest even."""
    return np.asarray(values, dtype=F32).astype(dtype)


def store_truncating(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """fp32 -> bf16 by keeping the high 16 bits (`>> 16`, round toward zero); other dtypes stored correctly."""
    f32 = np.ascontiguousarray(values, dtype=F32)
    if np.dtype(dtype) != BF16:
        return f32.astype(dtype)
    return (f32.view(np.uint32) & np.uint32(0xFFFF0000)).view(F32).astype(BF16)  # exact: low bits are 0


def tree_sum(values: np.ndarray) -> np.ndarray:
    """A block reduction as warps do it: halve the (power-of-two padded) last axis, adding pairs in float32."""
    acc = np.asarray(values, dtype=F32)
    width = acc.shape[-1]
    padded = next_pow2(max(width, 1))
    if padded != width:
        acc = np.concatenate([acc, np.zeros((*acc.shape[:-1], padded - width), F32)], axis=-1)
    while acc.shape[-1] > 1:
        half = acc.shape[-1] // 2
        acc = acc[..., :half] + acc[..., half:]
    return acc[..., 0]
