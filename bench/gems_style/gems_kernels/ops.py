"""FlagGems-style operators: one `@triton.jit` kernel per pass, launched from a torch.autograd.Function, as
FlagGems writes softmax, layer_norm, bmm and attention (a row per program for the row-wise ops, tiles with a
K loop for bmm, an online-softmax loop over key blocks for attention). float32 math, results stored in the
input dtype. Backward kernels for softmax, layer_norm and bmm (an RMSNorm with its backward is
examples/triton's); attention is forward only, as FlagGems' scaled_dot_product_attention was when this suite
was written.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]).contiguous()


# ---- softmax over the last dim ------------------------------------------------------------------------------


@triton.jit
def _softmax_forward(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * N + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward(y_ptr, g_ptr, dx_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    y = tl.load(y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (g - tl.sum(y * g, axis=0))
    tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> Any:
        rows = _rows(x)
        m, n = rows.shape
        y = torch.empty_like(rows)
        if m and n:
            _softmax_forward[(m,)](rows, y, n, BLOCK=triton.next_power_of_2(n))
        ctx.save_for_backward(y)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (y,) = ctx.saved_tensors
        g = _rows(grad)
        m, n = y.shape
        dx = torch.empty_like(y)
        if m and n:
            _softmax_backward[(m,)](y, g, dx, n, BLOCK=triton.next_power_of_2(n))
        return dx.view(grad.shape)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return _Softmax.apply(x)


# ---- layer_norm over the last dim ----------------------------------------------------------------


@triton.jit
def _layer_norm_forward(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centred = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * N + cols, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_backward(
    g_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, db_rows_ptr, N, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    gw = g * w
    dx = rstd * (gw - (xhat * tl.sum(gw * xhat, axis=0) + tl.sum(gw, axis=0)) / N)
    tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_rows_ptr + row * N + cols, g * xhat, mask=mask)
    tl.store(db_rows_ptr + row * N + cols, g, mask=mask)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> Any:
        rows, w, b = _rows(x), weight.contiguous(), bias.contiguous()
        m, n = rows.shape
        y = torch.empty_like(rows)
        mean = torch.empty(m, dtype=torch.float32, device=rows.device)
        rstd = torch.empty(m, dtype=torch.float32, device=rows.device)
        if m and n:
            _layer_norm_forward[(m,)](rows, w, b, y, mean, rstd, n, eps, BLOCK=triton.next_power_of_2(n))
        ctx.save_for_backward(rows, w, mean, rstd)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        rows, w, mean, rstd = ctx.saved_tensors
        g = _rows(grad)
        m, n = rows.shape
        dx = torch.empty_like(rows)
        dw_rows = torch.zeros((m, n), dtype=torch.float32, device=rows.device)
        db_rows = torch.zeros((m, n), dtype=torch.float32, device=rows.device)
        if m and n:
            _layer_norm_backward[(m,)](
                g, rows, w, mean, rstd, dx, dw_rows, db_rows, n, BLOCK=triton.next_power_of_2(n)
            )
        dw = dw_rows.sum(dim=0).to(w.dtype)
        return dx.view(grad.shape), dw, db_rows.sum(dim=0).to(w.dtype), None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _LayerNorm.apply(x, weight, bias, eps)


# ---- bmm: tiles with a K loop, the batch in the grid's third axis ----------------------------------------------


@triton.jit
def _bmm_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch * M * K
    b_base = b_ptr + batch * K * N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        a = tl.load(
            a_base + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0
        )
        b = tl.load(
            b_base + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc += tl.dot(a, b, input_precision="ieee")
    c = c_ptr + batch * M * N + rm[:, None] * N + rn[None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    batch, m, k = a.shape
    n = b.shape[-1]
    c = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
    if batch and m and n:
        if k == 0:
            return c.zero_()
        grid = (triton.cdiv(m, 32), triton.cdiv(n, 32), batch)
        _bmm_kernel[grid](a, b, c, m, n, k, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c


class _Bmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> Any:
        ctx.save_for_backward(a, b)
        return _bmm(a, b)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        a, b = ctx.saved_tensors
        return _bmm(grad, b.transpose(1, 2)), _bmm(a.transpose(1, 2), grad)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _Bmm.apply(a, b)


# ---- attention: one program per (batch, block of queries), an online softmax over blocks of keys -------------


@triton.jit
def _attention_forward(
    q_ptr, k_ptr, v_ptr, o_ptr, S, T, D, scale,
    BLOCK_S: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid_s = tl.program_id(0)
    batch = tl.program_id(1)
    rs = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    rd = tl.arange(0, BLOCK_D)
    rt = tl.arange(0, BLOCK_T)
    q_mask = (rs[:, None] < S) & (rd[None, :] < D)
    q = tl.load(q_ptr + batch * S * D + rs[:, None] * D + rd[None, :], mask=q_mask, other=0.0).to(tl.float32)
    m_i = tl.full((BLOCK_S,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_S,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_S, BLOCK_D), dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        ts = t0 + rt
        kv_mask = (ts[:, None] < T) & (rd[None, :] < D)
        k = tl.load(k_ptr + batch * T * D + ts[:, None] * D + rd[None, :], mask=kv_mask, other=0.0).to(
            tl.float32
        )
        v = tl.load(v_ptr + batch * T * D + ts[:, None] * D + rd[None, :], mask=kv_mask, other=0.0).to(
            tl.float32
        )
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        scores = tl.where(ts[None, :] < T, scores, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(
        o_ptr + batch * S * D + rs[:, None] * D + rd[None, :], out.to(o_ptr.dtype.element_ty), mask=q_mask
    )


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, s, d = q.shape
    t = k.shape[1]
    out = torch.empty_like(q)
    if batch and s and d:
        if t == 0:
            return out.fill_(float("nan"))
        block_d = max(16, triton.next_power_of_2(d))
        grid = (triton.cdiv(s, 32), batch)
        _attention_forward[grid](
            q, k, v, out, s, t, d, 1.0 / math.sqrt(d), BLOCK_S=32, BLOCK_T=32, BLOCK_D=block_d
        )
    return out
