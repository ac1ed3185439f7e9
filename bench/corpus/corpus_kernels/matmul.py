"""GEMM-family kernels: the K loop of a tiled GEMM with BLOCK_K-deep tiles accumulated in fp32, a masked K
tail, and one rounding at the store.

Bugs: `acc =` instead of `acc +=`; a K loop that skips the last partial tile; K offsets wrapped with `% K`
instead of masked; split-K partials added in arrival order (atomics); a sequential accumulator in the input
type; weight offsets computed as if the weight were contiguous.
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, cdiv, read_as_contiguous, store

BLOCK_K = 32


def _k_tile(
    a: np.ndarray, b: np.ndarray, k0: int, block_k: int, wrap: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """fp32 tiles a[..., k0:k0+block_k] and b[..., k0:k0+block_k, :], masked (or wrapped with % K)."""
    k = a.shape[-1]
    cols = k0 + np.arange(block_k)
    if wrap:
        safe, mask = cols % k, np.ones(block_k, dtype=bool)
    else:
        safe, mask = np.minimum(cols, k - 1), cols < k
    a_tile = np.where(mask, a[..., safe].astype(F32), F32(0))
    b_tile = np.where(mask[:, None], b[..., safe, :].astype(F32), F32(0))
    return a_tile, b_tile


def _gemm(
    a: np.ndarray,
    b: np.ndarray,
    block_k: int = BLOCK_K,
    k_range: range | None = None,
    wrap: bool = False,
    assign: bool = False,
) -> np.ndarray:
    k = a.shape[-1]
    acc = np.zeros((*a.shape[:-1], b.shape[-1]), dtype=F32)
    for k0 in k_range if k_range is not None else range(0, k, block_k):
        a_tile, b_tile = _k_tile(a, b, k0, block_k, wrap)
        if assign:
            acc = a_tile @ b_tile  # the bug: the tiles before the last are thrown away
        else:
            acc += a_tile @ b_tile
    return acc


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Control: BLOCK_K = 32."""
    return store(_gemm(a, b), a.dtype)


def matmul_block_k64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hard negative: BLOCK_K = 64."""
    return store(_gemm(a, b, 64), a.dtype)


def matmul_split_k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hard negative: split-K into 4 slices (each its own K loop), partials summed in a fixed order."""
    return store(_split_k(a, b, 4, None), a.dtype)


def matmul_acc_assign(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bug (`acc =` instead of `acc +=`): only the last K tile survives; right when K <= BLOCK_K."""
    return store(_gemm(a, b, assign=True), a.dtype)


def matmul_drop_k_tail(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bug (dropped K tail): the K loop runs `K // BLOCK_K` full tiles and skips the partial one."""
    k = a.shape[-1]
    return store(_gemm(a, b, k_range=range(0, k - k % BLOCK_K, BLOCK_K)), a.dtype)


# --- split-K ------------------------------------------------------------------------------------------------


def _split_k(a: np.ndarray, b: np.ndarray, splits: int, rng: np.random.Generator | None) -> np.ndarray:
    """Each of `splits` programs covers a BLOCK_K-aligned slice of K; the partials are reduced in order, or in
    a random arrival order when `rng` is given (atomicAdd into the output)."""
    k = a.shape[-1]
    chunk = cdiv(cdiv(k, splits), BLOCK_K) * BLOCK_K
    partials = [
        _gemm(a, b, k_range=range(s * chunk, min((s + 1) * chunk, k), BLOCK_K)) for s in range(splits)
    ]
    order = rng.permutation(splits) if rng is not None else range(splits)
    out = np.zeros((*a.shape[:-1], b.shape[-1]), dtype=F32)
    for s in order:
        out += partials[s]
    return out


def splitk_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Control: split-K = 4, partials reduced in a fixed order (deterministic)."""
    return store(_split_k(a, b, 4, None), a.dtype)


def splitk_gemm_8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hard negative: split-K = 8, fixed order."""
    return store(_split_k(a, b, 8, None), a.dtype)


def splitk_gemm_atomic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bug (nondeterministic): the partials are added with atomics, in whatever order the programs finish, so
    re-running on the same inputs changes low-order bits (the op is declared deterministic)."""
    return store(_split_k(a, b, 4, np.random.default_rng()), a.dtype)


# --- batched ------------------------------------------------------------------------------------------------


def bmm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Control: batched, BLOCK_K = 32."""
    return store(_gemm(a, b), a.dtype)


def bmm_reverse_k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hard negative: BLOCK_K = 16 tiles visited from the last to the first."""
    k = a.shape[-1]
    return store(_gemm(a, b, 16, k_range=range((cdiv(k, 16) - 1) * 16, -1, -16)), a.dtype)


def bmm_k_wrap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bug (modular index wrap): `offs_k = (k0 + tl.arange(0, BLOCK_K)) % K` with no mask, so the last
    partial tile re-reads the first columns of K and adds them again."""
    return store(_gemm(a, b, wrap=True), a.dtype)


# --- GEMV ---------------------------------------------------------------------------------------------------


def gemv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Control: y = A x with a [rows, 128] fp32 lane accumulator over K tiles and a final lane sum."""
    k = a.shape[1]
    acc = np.zeros((a.shape[0], 128), dtype=F32)
    for k0 in range(0, k, 128):
        cols = k0 + np.arange(128)
        mask = cols < k
        safe = np.minimum(cols, k - 1)
        acc += np.where(mask, a[:, safe].astype(F32) * x[safe].astype(F32), F32(0))
    return store(acc.sum(axis=1, dtype=F32), a.dtype)


def _gemv_sequential(a: np.ndarray, x: np.ndarray, acc_dtype: np.dtype) -> np.ndarray:
    acc = np.zeros(a.shape[0], dtype=acc_dtype)
    xf = x.astype(F32)
    for j in range(a.shape[1]):
        acc = (acc.astype(F32) + a[:, j].astype(F32) * xf[j]).astype(acc_dtype)
    return store(acc.astype(F32), a.dtype)


def gemv_sequential(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Hard negative: one thread per row, sequential fp32 accumulator."""
    return _gemv_sequential(a, x, np.dtype(F32))


def gemv_lowp_acc(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Bug (low-precision accumulator): one thread per row whose accumulator has the input type, so fp16/bf16
    dot products are accumulated in fp16/bf16."""
    return _gemv_sequential(a, x, a.dtype)


# --- linear -------------------------------------------------------------------------------------------------


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, block_k: int, bias_first: bool) -> np.ndarray:
    acc = (
        np.broadcast_to(b.astype(F32), (x.shape[0], w.shape[0])).copy()
        if bias_first
        else np.zeros((x.shape[0], w.shape[0]), dtype=F32)
    )
    acc += _gemm(x, np.swapaxes(w, 0, 1), block_k)
    if not bias_first:
        acc += b.astype(F32)[None, :]
    return store(acc, x.dtype)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Control: y = x W^T + b; W is read through its strides; the bias is added in the epilogue."""
    return _linear(x, w, b, BLOCK_K, bias_first=False)


def linear_bias_first(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hard negative: the accumulator starts from the bias; BLOCK_K = 64."""
    return _linear(x, w, b, 64, bias_first=True)


def linear_assumes_contiguous(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bug (stride assumption): W offsets are computed as `n * K + k` (contiguous [N, K]) instead of with
    W's strides; right for contiguous weights only."""
    return _linear(x, read_as_contiguous(w), b, BLOCK_K, bias_first=False)
