"""Elementwise kernels over BLOCK-sized chunks of the flattened output, computed in fp32, rounded once.

Bugs: the tanh approximation where the spec is erf-GELU, a truncating fp32 -> bf16 store, a bias indexed
with the wrong axis' extent (invisible on square shapes), and an in-place rotary embedding that overwrites its
input.
"""

from __future__ import annotations

import math

import numpy as np

from corpus_kernels.tiles import F32, store, store_truncating

BLOCK = 1024
_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def erff(v: np.ndarray) -> np.ndarray:
    """A correctly rounded fp32 erf (what CUDA's erff delivers to within an ulp)."""
    return _erf(v.astype(np.float64)).astype(np.float64).astype(F32)


def _chunks(size: int, block: int) -> list[np.ndarray]:
    return [start + np.arange(min(block, size - start)) for start in range(0, size, block)]


def _map(x: np.ndarray, fn, block: int = BLOCK) -> np.ndarray:  # type: ignore[no-untyped-def]
    """out.flat[offs] = fn(x.flat[offs]) per block; x is read through its strides."""
    out = np.empty(x.shape, dtype=F32)
    flat_out = out.reshape(-1)
    for offs in _chunks(x.size, block):
        index = np.unravel_index(offs, x.shape)
        flat_out[offs] = fn(x[index].astype(F32))
    return out


# --- GELU ---------------------------------------------------------------------------------------------------

SQRT1_2 = F32(0.7071067811865476)
SQRT_2_OVER_PI = F32(0.7978845608028654)


def gelu(x: np.ndarray) -> np.ndarray:
    """Control: 0.5 x (1 + erf(x / sqrt 2))."""
    return store(_map(x, lambda v: F32(0.5) * v * (F32(1) + erff(v * SQRT1_2))), x.dtype)


def gelu_erfc(x: np.ndarray) -> np.ndarray:
    """Hard negative: 0.5 x erfc(-x / sqrt 2), BLOCK = 256."""

    def fn(v: np.ndarray) -> np.ndarray:
        return F32(0.5) * v * _erfc((-v * SQRT1_2).astype(np.float64)).astype(np.float64).astype(F32)

    return store(_map(x, fn, 256), x.dtype)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """Bug (spec mismatch): the tanh approximation of GELU where the op promises erf-GELU (max difference
    4.7e-4 near x = 2.7, under a 1e-2 tolerance)."""

    def fn(v: np.ndarray) -> np.ndarray:
        return F32(0.5) * v * (F32(1) + np.tanh(SQRT_2_OVER_PI * (v + F32(0.044715) * v * v * v)))

    return store(_map(x, fn), x.dtype)


# --- SwiGLU -------------------------------------------------------------------------------------------------


def _silu_mul(gate: np.ndarray, up: np.ndarray, block: int, sigmoid_tanh: bool) -> np.ndarray:
    out = np.empty(gate.shape, dtype=F32)
    flat_out = out.reshape(-1)
    with np.errstate(over="ignore"):
        for offs in _chunks(gate.size, block):
            index = np.unravel_index(offs, gate.shape)
            g, u = gate[index].astype(F32), up[index].astype(F32)
            if sigmoid_tanh:
                sig = F32(0.5) * (F32(1) + np.tanh(F32(0.5) * g))
                flat_out[offs] = g * sig * u
            else:
                flat_out[offs] = g / (F32(1) + np.exp(-g)) * u
    return out


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Control: silu(gate) * up = gate / (1 + exp(-gate)) * up."""
    return store(_silu_mul(gate, up, BLOCK, False), gate.dtype)


def silu_mul_tanh_sigmoid(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Hard negative: sigmoid through tanh, 0.5 (1 + tanh(g / 2)), BLOCK = 512."""
    return store(_silu_mul(gate, up, 512, True), gate.dtype)


def silu_mul_truncating_store(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Bug (truncating store): fp32 -> bf16 by dropping the low 16 bits instead of rounding to nearest even;
    every element is within one bf16 ulp, so elementwise tolerances pass."""
    return store_truncating(_silu_mul(gate, up, BLOCK, False), gate.dtype)


# --- bias + ReLU --------------------------------------------------------------------------------------------


def _bias_relu(x: np.ndarray, b: np.ndarray, bias_extent: int) -> np.ndarray:
    """relu(x + b) over the flattened [M, N] output; the bias lane is `offs % bias_extent` (N when right)."""
    m, n = x.shape
    out = np.empty(m * n, dtype=F32)
    for offs in _chunks(m * n, BLOCK):
        rows, cols = offs // n, offs % n
        lane = offs % bias_extent
        bias = np.where(lane < b.shape[0], b[np.minimum(lane, b.shape[0] - 1)].astype(F32), F32(0))
        out[offs] = np.maximum(x[rows, cols].astype(F32) + bias, F32(0))
    return store(out, x.dtype).reshape(m, n)


def bias_relu(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Control: bias lane = offs % N."""
    return _bias_relu(x, b, x.shape[1])


def bias_relu_rows(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hard negative: 2-D tiles of 16 rows x all columns, bias broadcast along rows."""
    m, n = x.shape
    out = np.empty((m, n), dtype=F32)
    for r0 in range(0, m, 16):
        out[r0 : r0 + 16] = np.maximum(x[r0 : r0 + 16].astype(F32) + b.astype(F32)[None, :], F32(0))
    return store(out, x.dtype)


def bias_relu_wrong_axis(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bug (bias on the wrong axis): the launcher passes x.shape[0] as the bias extent, so the bias lane is
    `offs % M`; identical to the right answer when M == N (square benchmark shapes)."""
    return _bias_relu(x, b, x.shape[0])


# --- rotary embedding ---------------------------------------------------------------------------------------


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, block_t: int) -> np.ndarray:
    """x [T, 2, H] half-split: (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin), fp32, per block of rows."""
    t = x.shape[0]
    out = np.empty(x.shape, dtype=F32)
    for t0 in range(0, t, block_t):
        rows = slice(t0, min(t0 + block_t, t))
        x0, x1 = x[rows, 0, :].astype(F32), x[rows, 1, :].astype(F32)
        c, s = cos[rows].astype(F32), sin[rows].astype(F32)
        out[rows, 0, :] = x0 * c - x1 * s
        out[rows, 1, :] = x1 * c + x0 * s
    return store(out, x.dtype)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Control: blocks of 16 rows."""
    return _rope(x, cos, sin, 16)


def rope_block64(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Hard negative: blocks of 64 rows."""
    return _rope(x, cos, sin, 64)


def rope_in_place(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Bug (writes into its input): rotates x in place (as in-place rotary kernels do) and returns it, though
    the op's contract is out-of-place."""
    x[...] = _rope(x, cos, sin, 16)
    return x
