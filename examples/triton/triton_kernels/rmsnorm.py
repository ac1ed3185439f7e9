"""RMSNorm as two `@triton.jit` kernels, forward and backward, behind a torch.autograd.Function, the way fused
training kernels are written: one program per row, the row in one block of BLOCK = next_power_of_2(N) lanes,
float32 math, results stored in the input dtype; the backward writes dx and each row's contribution to the
weight's gradient, summed over the rows afterwards. Without a GPU gpuemu-ci runs the kernels in Triton's
interpreter (it sets TRITON_INTERPRET=1 for the ops' worker processes); on a GPU they are compiled.

    forward   rstd = 1 / sqrt(sum(x^2) / N + eps),  y = x * rstd * w
    backward  xhat = x * rstd,  dx = rstd * (g*w - xhat * sum(g*w*xhat) / N),  dw = sum over rows of g*xhat

`rmsnorm_block_mean` is the seeded bug: the forward divides the sum of squares by BLOCK (the padded width)
instead of N. Whenever N is a power of two the two are equal and the result is exact: a test at N = 128 or
512, the sizes most people try, passes it.

`rmsnorm_no_other` loads the row without `other=0.0`: its sum of squares then relies on the masked-off lanes
reading 0, which Triton's language leaves undefined and NVIDIA and AMD GPUs give today. It is correct on those
GPUs, so it passes, with a warning naming the load's line (`[ops.triton] undefined_masked_lanes`).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_forward(
    x_ptr,
    w_ptr,
    y_ptr,
    rstd_ptr,
    N,
    eps,
    MEAN_OVER_BLOCK: tl.constexpr,
    NO_OTHER: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    if NO_OTHER:  # the masked-off lanes read what the GPU gives them: 0 on NVIDIA and AMD today
        x = tl.load(x_ptr + row * N + cols, mask=mask).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if MEAN_OVER_BLOCK:  # noqa: SIM108 (a constexpr `if` statement: Triton compiles one branch)
        mean_square = tl.sum(x * x, axis=0) / BLOCK  # the bug: the padded width, not the row's length
    else:
        mean_square = tl.sum(x * x, axis=0) / N
    rstd = 1.0 / tl.sqrt(mean_square + eps)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * N + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_backward(g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xhat = x * rstd
    gw = g * w
    dx = rstd * (gw - xhat * (tl.sum(gw * xhat, axis=0) / N))
    tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_rows_ptr + row * N + cols, g * xhat, mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """The tensor as contiguous rows: the kernels index `row * N + col`, so strided views are copied first."""
    return t.reshape(-1, t.shape[-1]).contiguous()


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, mean_over_block: bool, no_other: bool
    ) -> Any:
        rows, w = _rows(x), weight.contiguous()
        m, n = rows.shape
        y = torch.empty_like(rows)
        rstd = torch.empty(m, dtype=torch.float32, device=rows.device)
        if m and n:
            block = triton.next_power_of_2(n)
            _rmsnorm_forward[(m,)](
                rows, w, y, rstd, n, eps, MEAN_OVER_BLOCK=mean_over_block, NO_OTHER=no_other, BLOCK=block
            )
        ctx.save_for_backward(rows, w, rstd)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
        rows, w, rstd = ctx.saved_tensors
        g = _rows(grad)
        m, n = rows.shape
        dx = torch.empty_like(rows)
        dw_rows = torch.zeros((m, n), dtype=torch.float32, device=rows.device)
        if m and n:
            _rmsnorm_backward[(m,)](g, rows, w, rstd, dx, dw_rows, n, BLOCK=triton.next_power_of_2(n))
        return dx.view(grad.shape), dw_rows.sum(dim=0).to(w.dtype), None, None, None


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, False, False)


def rmsnorm_block_mean(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The seeded bug: the mean of squares divided by BLOCK instead of N (wrong unless N is a power of two)."""
    return _RMSNorm.apply(x, weight, eps, True, False)


def rmsnorm_no_other(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Correct on NVIDIA and AMD GPUs: the row's masked-off lanes read 0 there (Triton leaves them undefined)."""
    return _RMSNorm.apply(x, weight, eps, False, True)
