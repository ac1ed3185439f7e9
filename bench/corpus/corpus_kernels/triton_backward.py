"""A fused RMSNorm written in Triton with its backward (issue #20), run under Triton's CPU interpreter here:
a forward kernel per row, a backward kernel per row (dx, and each row's contribution to dw), and a column
kernel summing those contributions over the rows in blocks of ROW_BLOCK. The bug: that sum accumulated with
`=` instead of `+=` (only the last row block survives: M > ROW_BLOCK).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

ROW_BLOCK = 16


@triton.jit
def _forward(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * N + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _backward_rows(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xhat = x * rstd
    gw = g * w
    dx = rstd * (gw - xhat * (tl.sum(gw * xhat, axis=0) / N))
    tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_rows_ptr + row * N + cols, g * xhat, mask=mask)


@triton.jit
def _sum_rows(part_ptr, dw_ptr, M, N, ASSIGN: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, M, ROWS):
        rows = start + tl.arange(0, ROWS)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        part = tl.load(part_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        if ASSIGN:
            acc = tl.sum(part, axis=0)  # the bug: `=` where `+=` belongs
        else:
            acc += tl.sum(part, axis=0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=cols < N)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, assign: bool, rows: int = ROW_BLOCK
    ) -> torch.Tensor:
        x2 = x.contiguous()
        w = weight.contiguous()
        M, N = x2.shape
        y = torch.empty_like(x2)
        rstd = torch.empty(M, dtype=torch.float32)
        block = triton.next_power_of_2(max(N, 1))
        if M:
            _forward[(M,)](x2, w, y, rstd, N, eps, BLOCK=block)
        ctx.save_for_backward(x2, w, rstd)
        ctx.assign, ctx.rows = assign, rows
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, w, rstd = ctx.saved_tensors
        g = grad.contiguous()
        M, N = x.shape
        dx = torch.empty_like(x)
        rows = torch.empty((M, N), dtype=torch.float32)
        dw = torch.empty_like(w)
        block = triton.next_power_of_2(max(N, 1))
        if M:
            _backward_rows[(M,)](g, x, w, rstd, dx, rows, N, BLOCK=block)
        col_block = 64
        _sum_rows[(triton.cdiv(N, col_block),)](
            rows, dw, M, N, ASSIGN=ctx.assign, ROWS=ctx.rows, BLOCK=col_block
        )
        return dx, dw, None, None, None


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, False)


def rmsnorm_dw_acc_assign(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, True)


def rmsnorm_rows_4(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """A hard negative: dweight summed in blocks of 4 rows (another summation order)."""
    return _RMSNorm.apply(x, weight, eps, False, 4)
