"""bfloat16 and the fp8 types as real numbers, rounded as the GPU rounds them.

Triton's interpreter keeps these types as integer bit patterns and computes on the bits (an add of two bf16
blocks adds the integers). Under the layer they are NumPy arrays of `ml_dtypes`' types instead, so every
arithmetic ufunc computes in fp32 and rounds once to the type, to nearest even: what a 16-bit GPU operation
gives (one correctly rounded result; `add.rn.bf16` on sm_90, an fp32 operation rounded back before it).
Memory still holds bits: loads and stores go through the interpreter as unsigned integers of the same width
(`bits_of`), and `tl.bitcast` sees the bits.

Conversions follow the NVIDIA backend's lowering (ElementwiseOpToLLVM.cpp): fp32 -> bf16/fp16 round to
nearest even (or toward zero when `fp_downcast_rounding="rtz"`); fp32/fp16/bf16 -> fp8 e4m3/e5m2 is
`cvt.rn.satfinite` (sm_90): to nearest even, NaN stays NaN, and whatever lies past the largest finite value,
infinities included, becomes that value with its sign; fp8 -> wider types is exact. A wider source (fp64,
64-bit integers) is rounded once, not twice: it goes to fp32 rounding to odd, from which rounding to nearest
even gives the once-rounded result (fp32 has more than twice the bits of every type here, plus two).

fp8e4b15 (exponent bias 15, pre-Hopper) has no NumPy type: a kernel using it is not judged (layer.py names it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

# Triton's names of the types, and the NumPy types that hold their values.
TYPES: dict[str, np.dtype] = {
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp8e5": np.dtype(ml_dtypes.float8_e5m2),
    "fp8e4nv": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8e4b8": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "fp8e5b16": np.dtype(ml_dtypes.float8_e5m2fnuz),
}
UNMODELLED = frozenset({"fp8e4b15"})  # Triton's fp8 type with no NumPy type: its kernels are not judged
_LOWP = frozenset(TYPES.values())
_FP8 = frozenset(t for name, t in TYPES.items() if name.startswith("fp8"))
_BITS: dict[int, np.dtype] = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16)}
_TINY_FLOATS = frozenset({np.dtype(np.float16), *TYPES.values()})  # narrower than fp32: sums round each step


def is_lowp(dtype: np.dtype) -> bool:
    """A type the interpreter would keep as bits (bf16, fp8)."""
    return dtype in _LOWP


def is_float(dtype: np.dtype) -> bool:
    """NumPy's floats and the types of `TYPES` (whose `kind` is "V")."""
    return dtype.kind == "f" or dtype in _LOWP


def bits_of(data: np.ndarray) -> np.ndarray:
    """The bits of a low-precision array, as the unsigned integers the interpreter's memory calls take."""
    return data.view(_BITS[data.dtype.itemsize]) if data.dtype in _LOWP else data


def max_finite(dtype: np.dtype) -> float:
    """The largest finite value of a low-precision dtype."""
    return float(ml_dtypes.finfo(dtype).max)  # type: ignore[no-untyped-call]  # ml_dtypes' finfo is untyped


def _to_odd_fp32(data: np.ndarray) -> np.ndarray:
    """fp64 values rounded to fp32 toward zero, with the last bit set where that was inexact (rounding to
    odd): rounding the result to any type of at most 11 significant bits rounds the fp64 value once."""
    near = data.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        wide = near.astype(np.float64)
        over = np.abs(wide) > np.abs(data)
        bits = near.view(np.uint32).copy()
        bits[over] -= 1  # one step toward zero (the magnitude's bits; +inf becomes the largest finite)
        truncated = bits.view(np.float32)
        inexact = truncated.astype(np.float64) != data
    bits[inexact & np.isfinite(data)] |= np.uint32(1)
    return bits.view(np.float32)


def _toward_zero(x32: np.ndarray, to: np.dtype) -> np.ndarray:
    """fp32 values rounded toward zero to `to` (fp16, bf16, fp8)."""
    near = x32.astype(to)
    bits = near.view(_BITS[to.itemsize]).copy()
    with np.errstate(invalid="ignore"):
        over = np.abs(near.astype(np.float32)) > np.abs(x32)
    bits[over] -= 1
    return np.asarray(bits.view(to))


def convert(data: np.ndarray, to: np.dtype, rounding: str = "rtne") -> np.ndarray:
    """`data` converted to `to` as the GPU converts it (see the module's docstring); `rounding` applies to a
    narrowing float conversion ("rtne" or "rtz")."""
    to = np.dtype(to)
    src = data.dtype
    if src == to:
        return data.copy()
    if src in _LOWP:
        wide = data.astype(np.float32)  # exact
        return wide.astype(to) if to not in _LOWP else convert(wide, to, rounding)
    if to not in _LOWP:
        if rounding == "rtz" and to == np.float16 and src.kind == "f":
            return _toward_zero(data.astype(np.float32) if src != np.float64 else _to_odd_fp32(data), to)
        return data.astype(to)
    if src.kind in "iub":
        data = data.astype(np.float64)  # exact for every integer up to 2^53
        src = data.dtype
    x32 = _to_odd_fp32(data) if src == np.float64 else data.astype(np.float32)
    if to in _FP8:
        limit = np.float32(max_finite(to))
        x32 = np.clip(x32, -limit, limit)  # satfinite (NaN passes through)
    if rounding == "rtz":
        return _toward_zero(x32, to)
    return x32.astype(to)


def from_python(value: float, to: np.dtype) -> np.ndarray:
    """A Python float constant in `to`, rounded once (the compiler folds constants from their double)."""
    return convert(np.array([value], dtype=np.float64), to)


def block_sum(data: np.ndarray, axis: int | None, keepdims: bool) -> np.ndarray:
    """`tl.sum` over a block as the GPU reduces it: fp32 and wider as NumPy sums them; 16-bit and 8-bit floats
    (which `tl.sum` keeps in their type) as a tree of additions, each rounded to the type (the GPU's shuffle
    butterfly pairs lane i with lane i + half). The same function in every program and every grouping, so the
    vectorised grid stays bitwise equal to the per-program run."""
    if data.dtype not in _TINY_FLOATS:
        return np.asarray(np.sum(data, axis=axis, keepdims=keepdims))
    if axis is None:
        flat = data.reshape(-1)
        return np.asarray(_tree(flat[None, :])[0].reshape((1,) * data.ndim if keepdims else ()))
    moved = np.moveaxis(data, axis, -1)
    summed = _tree(moved.reshape(-1, moved.shape[-1])).reshape(moved.shape[:-1])
    return np.expand_dims(summed, axis) if keepdims else summed


def _tree(rows: np.ndarray) -> np.ndarray:
    """Each row's sum by halves (rows padded with zeros to a power of two), rounded to the type at each level."""
    length = rows.shape[-1]
    if length == 0:
        return np.zeros(rows.shape[0], dtype=rows.dtype)
    width = 1 << (length - 1).bit_length()
    level = rows
    if width != length:
        level = np.zeros((rows.shape[0], width), dtype=rows.dtype)
        level[:, :length] = rows
    while level.shape[-1] > 1:
        half = level.shape[-1] // 2
        level = np.add(level[:, :half], level[:, half:])
    return level[:, 0]


def widened(reduce: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """A NumPy max/min/argmax/argmin that takes the low-precision types: computed on their exact fp32 values,
    the values put back in the type (NaN handling as for fp32)."""

    def apply(data: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
        if data.dtype not in _LOWP:
            return np.asarray(reduce(data, axis=axis, keepdims=keepdims))
        out = np.asarray(reduce(data.astype(np.float32), axis=axis, keepdims=keepdims))
        return out.astype(data.dtype) if out.dtype.kind == "f" else out

    return apply


def fma(x: np.ndarray, y: np.ndarray, z: np.ndarray, to: np.dtype) -> np.ndarray:
    """x * y + z rounded once to a low-precision type (the product is exact in fp64, and so is the sum of
    numbers of at most 11 bits whose exponents lie within fp64's 53 bits; the rest is rounded to odd)."""
    with np.errstate(all="ignore"):
        exact = np.multiply(x.astype(np.float64), y.astype(np.float64)) + z.astype(np.float64)
    return convert(exact, to)
