"""Small Triton kernels, each correct, each written so that one mutation operator's change matters in it (the
tests of gpuemu_ci/mutate/triton_operators.py): a looped row sum, a row max, an online log-sum-exp, a 2-D
strided scale, an atomic column sum, a mean, and a biased add."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def row_sum(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, dtype=x.dtype)
    if m and n:
        _row_sum[(m,)](x, y, n, BLOCK=16)
    return y


@triton.jit
def _row_max(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))
    tl.store(y_ptr + row, tl.max(x, axis=0))


@triton.jit
def _row_max_where(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    tl.store(y_ptr + row, tl.max(tl.where(cols < N, x, -float("inf")), axis=0))


def _rows(kernel: object, x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, dtype=x.dtype)
    if m and n:
        kernel[(m,)](x, y, n, BLOCK=triton.next_power_of_2(n))  # type: ignore[index]
    return y


def row_max(x: torch.Tensor) -> torch.Tensor:
    return _rows(_row_max, x)


def row_max_where(x: torch.Tensor) -> torch.Tensor:
    return _rows(_row_max_where, x)


@triton.jit
def _log_sum_exp(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(y_ptr + row, m + tl.log(s))


def log_sum_exp(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, dtype=torch.float32)
    if m and n:
        _log_sum_exp[(m,)](x, y, n, BLOCK=16)
    return y.to(x.dtype)


@triton.jit
def _scale(x_ptr, y_ptr, M, N, stride_m, stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :] * stride_n, mask=mask, other=0.0)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], 2.0 * x, mask=mask)


def scale(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype)
    if m and n:
        grid = (triton.cdiv(m, 4), triton.cdiv(n, 8))
        _scale[grid](x, y, m, n, x.stride(0), x.stride(1), BLOCK_M=4, BLOCK_N=8)
    return y


@triton.jit
def _col_sum(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(y_ptr + cols, tl.sum(x, axis=0), mask=cols < N)


def col_sum(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    m, n = x.shape
    y = torch.zeros(n, dtype=torch.float32)
    if m and n:
        _col_sum[(triton.cdiv(m, 4),)](x, y, m, n, BLOCK_M=4, BLOCK_N=triton.next_power_of_2(n))
    return y.to(x.dtype)


@triton.jit
def _mean(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, (tl.sum(x, axis=0) / N).to(y_ptr.dtype.element_ty))


def mean(x: torch.Tensor) -> torch.Tensor:
    return _rows(_mean, x)


@triton.jit
def _add_bias(x_ptr, b_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
    tl.store(y_ptr + row * N + cols, x + b, mask=cols < N)


def add_bias(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x, b = x.contiguous(), b.contiguous()
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype)
    if m and n:
        _add_bias[(m,)](x, b, y, n, BLOCK=triton.next_power_of_2(n))
    return y
