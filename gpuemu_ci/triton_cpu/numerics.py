"""What a GPU computes where Triton's interpreter computes something else: what masked-off lanes of a load
without `other` read in the "poison" mode (undefined in Triton's language; NVIDIA and AMD read 0, which is
what the layer gives them by default) and fp32 `tl.dot` at its input precision (TF32 by default on NVIDIA;
full fp32 in the interpreter)."""

from __future__ import annotations

import numpy as np

from gpuemu_ci.triton_cpu import lowp

# Triton's fp8 type that has no NumPy type (lowp.UNMODELLED): its bit patterns of NaN, +Inf, -Inf (none: NaN).
_BIT_PATTERNS = {"fp8e4b15": (0x7F, 0x7F, 0xFF)}


def poison_block(type_name: str, np_dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """What the masked-off lanes of a load without `other` read in the poison mode. Floats (bf16 and fp8
    included, held as their values): NaN, +Inf and -Inf in turn, lane by lane, starting where the case seed
    says, so a masked lane that reaches a sum, a max or a min changes it (`tl.max` ignores NaN, as the GPU's
    max does; the fp8 types without infinities read NaN there). Integers: a loud value near the end of the
    type's range that depends on the seed. True for booleans."""
    count = int(np.prod(shape)) if shape else 1
    turn = (np.arange(count) + seed % 3) % 3
    if type_name in _BIT_PATTERNS:
        patterns = np.array(_BIT_PATTERNS[type_name], dtype=np_dtype)
        return patterns[turn].reshape(shape)
    if lowp.is_float(np_dtype):
        with np.errstate(invalid="ignore"):
            specials = np.array([np.nan, np.inf, -np.inf], dtype=np.float32).astype(np_dtype)
        return specials[turn].reshape(shape)
    if np_dtype.kind == "b":
        return np.ones(shape, dtype=np_dtype)
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
        step = seed % 97
        value = int(info.max) - step if np_dtype.kind == "u" or seed % 2 else int(info.min) + step
        return np.full(shape, value, dtype=np_dtype)
    return np.zeros(shape, dtype=np_dtype)


def round_to_tf32(data: np.ndarray) -> np.ndarray:
    """fp32 values rounded to TF32 (10 explicit mantissa bits), to nearest with ties to even; Inf and NaN
    kept. Returns fp32."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0xFFF)
    with np.errstate(over="ignore"):
        rounded = (bits + bias) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32)


def dot_fp32(a: np.ndarray, b: np.ndarray, acc: np.ndarray, precision: str) -> np.ndarray:
    """`tl.dot` of fp32 blocks at an input precision (`tf32`, `tf32x3`, `ieee`), accumulated in acc's dtype."""
    out = acc.dtype
    with np.errstate(all="ignore"):
        if precision == "tf32":
            return np.asarray(np.matmul(round_to_tf32(a), round_to_tf32(b), dtype=out) + acc)
        if precision == "tf32x3":
            a_big, b_big = round_to_tf32(a), round_to_tf32(b)
            a_small = round_to_tf32(a.astype(np.float32) - a_big)
            b_small = round_to_tf32(b.astype(np.float32) - b_big)
            small = np.matmul(a_big, b_small, dtype=out) + np.matmul(a_small, b_big, dtype=out)
            return np.asarray((small + np.matmul(a_big, b_big, dtype=out)) + acc)
        return np.asarray(np.matmul(a, b, dtype=out) + acc)
