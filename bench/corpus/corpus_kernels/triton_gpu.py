"""Triton kernels whose bugs only a GPU shows (issue #28), run here under Triton's CPU interpreter with the
GPU-faithful layer (gpuemu_ci/triton_cpu): each a correct kernel and one-bug variants.

- `row_max`: a row max; the bug loads the tail without `other=-inf` (the interpreter reads 0 there, a GPU
  reads whatever the register held); the hard negative loads without `other` too but replaces the masked
  lanes with `tl.where` before the max (poison that never reaches the output must not be flagged).
- `scale`: y = 2x + 1 (the hard negative in blocks of 1024); the bugs store without a mask (past the end of
  y on the last program when N % BLOCK != 0) and read x as if contiguous (strided views).
- `col_sum`: column sums split over row chunks; the bug accumulates partial sums with a load and a store
  instead of an atomic add (on a GPU the programs race; the interpreter runs them one after another); the hard
  negative writes each chunk's sums to a workspace and adds them in a second launch.
- `row_cumsum`: a row prefix sum computed block by block with `tl.dot` against a triangular matrix of ones;
  the bug leaves `tl.dot` at its default input precision, TF32 on a GPU, which drops 13 bits of every fp32
  input (a scan has to keep them: `input_precision="ieee"`).
- `matmul`: a tiled matmul at the default TF32 precision: correct, judged with TF32's bound (the hard negative
  asks for `ieee`).
- `tile_add`: y = x + 1 over 2D tiles; the hard negative combines its row and column masks with Python `and`,
  which the GPU compiler evaluates elementwise (and which Triton's interpreter mishandles: it keeps only the
  column mask); the bug masks by columns only, which is what the interpreter alone made of the hard negative.
- `matmul` also has a bug that has nothing to do with TF32 (the last partial K tile dropped), so that the TF32
  allowance is seen not to hide a real error.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# ---- row max -----------------------------------------------------------------------------------------------


@triton.jit
def _row_max(x_ptr, y_ptr, N, TAIL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if TAIL == "other":
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))
    elif TAIL == "where":  # no `other`, but the masked lanes never reach the max
        x = tl.where(cols < N, tl.load(x_ptr + row * N + cols, mask=cols < N), -float("inf"))
    else:
        x = tl.load(x_ptr + row * N + cols, mask=cols < N)  # the bug: masked lanes undefined
    tl.store(y_ptr + row, tl.max(x, axis=0))


def _launch_row_max(x: torch.Tensor, tail: str) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty(M, dtype=x.dtype)
    if M and N:
        _row_max[(M,)](x, y, N, TAIL=tail, BLOCK=triton.next_power_of_2(N))
    return y


def row_max(x: torch.Tensor) -> torch.Tensor:
    return _launch_row_max(x, "other")


def row_max_masked_where(x: torch.Tensor) -> torch.Tensor:
    return _launch_row_max(x, "where")


def row_max_no_other(x: torch.Tensor) -> torch.Tensor:
    return _launch_row_max(x, "none")


# ---- scale -------------------------------------------------------------------------------------------------

SCALE_BLOCK = 256


@triton.jit
def _scale(
    x_ptr, y_ptr, N, stride, MASK_STORE: tl.constexpr, TRUNCATE_BF16: tl.constexpr, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs * stride, mask=offs < N, other=0.0)
    if TRUNCATE_BF16:  # the bug: fp32 -> bf16 by dropping the low 16 bits (truncation, not rounding)
        wide = x.to(tl.float32) * 2.0 + 1.0
        kept = (wide.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16)
        tl.store(y_ptr + offs, kept.to(tl.bfloat16, bitcast=True), mask=offs < N)
    elif MASK_STORE:
        tl.store(y_ptr + offs, x * 2.0 + 1.0, mask=offs < N)
    else:
        tl.store(y_ptr + offs, x * 2.0 + 1.0)  # the bug: the last program writes past the end


def _launch_scale(
    x: torch.Tensor, mask_store: bool, honour_stride: bool, block: int = SCALE_BLOCK, truncate: bool = False
) -> torch.Tensor:
    (n,) = x.shape
    y = torch.empty(n, dtype=x.dtype)
    if n:
        stride = x.stride(0) if honour_stride else 1
        grid = (triton.cdiv(n, block),)
        truncate_bf16 = truncate and x.dtype == torch.bfloat16
        _scale[grid](x, y, n, stride, MASK_STORE=mask_store, TRUNCATE_BF16=truncate_bf16, BLOCK=block)
    return y


def scale(x: torch.Tensor) -> torch.Tensor:
    return _launch_scale(x, True, True)


def scale_block_1024(x: torch.Tensor) -> torch.Tensor:
    return _launch_scale(x, True, True, 1024)


def scale_unmasked_store(x: torch.Tensor) -> torch.Tensor:
    return _launch_scale(x, False, True)


def scale_ignores_stride(x: torch.Tensor) -> torch.Tensor:
    return _launch_scale(x, True, False)


def scale_truncating_bf16_store(x: torch.Tensor) -> torch.Tensor:
    return _launch_scale(x, True, True, truncate=True)


# ---- fp8 quantize and dequantize ---------------------------------------------------------------------------

QUANT_BLOCK = 1024


@triton.jit
def _fp8_roundtrip(x_ptr, y_ptr, N, E5M2: tl.constexpr, BLOCK: tl.constexpr):
    # One row per program, scaled by a power of two that brings its largest |x| to [256, 512) (exact in fp32),
    # stored as fp8 e4m3 (saturating at 448, as `cvt.rn.satfinite` does), read back and unscaled.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    amax = tl.max(tl.abs(x), axis=0)
    exponent = ((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    shift = tl.maximum(tl.minimum(exponent - 8, 120), -120)
    down = ((127 - shift) << 23).to(tl.float32, bitcast=True)  # 2^-shift
    up = ((127 + shift) << 23).to(tl.float32, bitcast=True)  # 2^shift
    if E5M2:  # noqa: SIM108  # the bug: e5m2 where e4m3 is specified (2 mantissa bits, not 3)
        q = (x * down).to(tl.float8e5)
    else:
        q = (x * down).to(tl.float8e4nv)
    tl.store(y_ptr + row * N + cols, q.to(tl.float32) * up, mask=cols < N)


def _launch_fp8_roundtrip(x: torch.Tensor, e5m2: bool) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    if M and N:
        _fp8_roundtrip[(M,)](x, y, N, E5M2=e5m2, BLOCK=max(16, triton.next_power_of_2(N)))
    return y


def fp8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    return _launch_fp8_roundtrip(x, False)


def fp8_roundtrip_e5m2(x: torch.Tensor) -> torch.Tensor:
    return _launch_fp8_roundtrip(x, True)


# ---- column sums split over row chunks ---------------------------------------------------------------------

COL_BLOCK, ROW_CHUNK = 64, 16


@triton.jit
def _col_sum(x_ptr, out_ptr, M, N, ATOMIC: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    part = tl.sum(x, axis=0)
    if ATOMIC:
        tl.atomic_add(out_ptr + cols, part, mask=cols < N)
    else:  # the bug: read-modify-write of a sum other programs update at the same time
        acc = tl.load(out_ptr + cols, mask=cols < N, other=0.0)
        tl.store(out_ptr + cols, acc + part, mask=cols < N)


def _launch_col_sum(x: torch.Tensor, atomic: bool) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    out = torch.zeros(N, dtype=torch.float32)
    if M and N:
        grid = (triton.cdiv(N, COL_BLOCK), triton.cdiv(M, ROW_CHUNK))
        _col_sum[grid](x, out, M, N, ATOMIC=atomic, ROWS=ROW_CHUNK, BLOCK=COL_BLOCK)
    return out.to(x.dtype)


def col_sum(x: torch.Tensor) -> torch.Tensor:
    return _launch_col_sum(x, True)


@triton.jit
def _chunk_sums(x_ptr, part_ptr, M, N, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    chunk = tl.program_id(1)
    rows = chunk * ROWS + tl.arange(0, ROWS)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(part_ptr + chunk * N + cols, tl.sum(x, axis=0), mask=cols < N)


@triton.jit
def _sum_chunks(part_ptr, out_ptr, CHUNKS, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for chunk in range(0, CHUNKS):
        acc += tl.load(part_ptr + chunk * N + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + cols, acc, mask=cols < N)


def col_sum_two_launches(x: torch.Tensor) -> torch.Tensor:
    """Split sums without atomics done right: each chunk's partial sums in their own row of a workspace, added
    by a second launch (which reads what the first wrote: another launch, no race)."""
    x = x.contiguous()
    M, N = x.shape
    out = torch.zeros(N, dtype=torch.float32)
    if M and N:
        chunks = triton.cdiv(M, ROW_CHUNK)
        parts = torch.empty((chunks, N), dtype=torch.float32)
        _chunk_sums[(triton.cdiv(N, COL_BLOCK), chunks)](x, parts, M, N, ROWS=ROW_CHUNK, BLOCK=COL_BLOCK)
        _sum_chunks[(triton.cdiv(N, COL_BLOCK),)](parts, out, chunks, N, BLOCK=COL_BLOCK)
    return out.to(x.dtype)


def col_sum_no_atomic(x: torch.Tensor) -> torch.Tensor:
    return _launch_col_sum(x, False)


# ---- row prefix sums through tl.dot ------------------------------------------------------------------------

SCAN_ROWS, SCAN_BLOCK = 16, 32


@triton.jit
def _row_cumsum(x_ptr, y_ptr, M, N, IEEE: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    k = tl.arange(0, BLOCK)
    upper = (k[:, None] <= k[None, :]).to(tl.float32)  # upper[i, j] = 1 where i <= j: x @ upper = prefix sums
    carry = tl.zeros((ROWS,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + k
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if IEEE:  # noqa: SIM108  # a compile-time branch, as kernels write it
            block = tl.dot(x, upper, input_precision="ieee")
        else:
            block = tl.dot(x, upper)  # the bug: TF32 by default on a GPU
        y = block + carry[:, None]
        tl.store(y_ptr + rows[:, None] * N + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=1)


def _launch_row_cumsum(x: torch.Tensor, ieee: bool) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    if M and N:
        grid = (triton.cdiv(M, SCAN_ROWS),)
        _row_cumsum[grid](x, y, M, N, IEEE=ieee, ROWS=SCAN_ROWS, BLOCK=SCAN_BLOCK)
    return y


def row_cumsum(x: torch.Tensor) -> torch.Tensor:
    return _launch_row_cumsum(x, True)


def row_cumsum_tf32(x: torch.Tensor) -> torch.Tensor:
    return _launch_row_cumsum(x, False)


# ---- matmul at TF32 (correct) ------------------------------------------------------------------------------

MM_BLOCK = 32


@triton.jit
def _matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    FULL_K: tl.constexpr,
    IEEE: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for start in range(0, K if FULL_K else K // BK * BK, BK):
        kk = start + rk
        a = tl.load(
            a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * N + rn[None, :],
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _launch_matmul(a, b, True)


def matmul_ieee(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _launch_matmul(a, b, True, ieee=True)


def matmul_dropped_k_tail(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _launch_matmul(a, b, False)


def _launch_matmul(a: torch.Tensor, b: torch.Tensor, full_k: bool, ieee: bool = False) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype)
    if M and N:
        grid = (triton.cdiv(M, MM_BLOCK), triton.cdiv(N, MM_BLOCK))
        _matmul[grid](a, b, c, M, N, K, FULL_K=full_k, IEEE=ieee, BM=MM_BLOCK, BN=MM_BLOCK, BK=MM_BLOCK)
    return c


# ---- 2D tiles, masks combined with & or with Python `and` --------------------------------------------------

TILE = 32


@triton.jit
def _tile_add(x_ptr, y_ptr, M, N, MASK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    if MASK == "and":
        mask = (rows[:, None] < M) and (cols[None, :] < N)  # elementwise on the GPU (deprecated spelling)
    elif MASK == "cols":
        mask = (rows[:, None] >= 0) & (cols[None, :] < N)  # the bug: rows past M are read and written
    else:
        mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], x + 1.0, mask=mask)


def _launch_tile_add(x: torch.Tensor, mask: str) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    if M and N:
        _tile_add[(triton.cdiv(M, TILE), triton.cdiv(N, TILE))](x, y, M, N, MASK=mask, BM=TILE, BN=TILE)
    return y


def tile_add(x: torch.Tensor) -> torch.Tensor:
    return _launch_tile_add(x, "&")


def tile_add_python_and(x: torch.Tensor) -> torch.Tensor:
    return _launch_tile_add(x, "and")


def tile_add_column_mask(x: torch.Tensor) -> torch.Tensor:
    return _launch_tile_add(x, "cols")
