"""float64 references written from the math, in torch so that autograd differentiates them for the backward
checks. gpuemu-ci calls them with NumPy float64 arrays (the forward), torch float64 tensors (the gradients) and,
for the working-precision run, float32 arrays: every quantity derived here (positions, frequencies, masks) is
computed in the dtype of the inputs, so that run measures what float32 arithmetic does, and its float64 run stays
the exact answer."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _t(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


# ---- row-wise ----------------------------------------------------------------------------------------------


def softmax(x: Any) -> torch.Tensor:
    x = _t(x)
    e = torch.exp(x - _row_max(x, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _row_max(x: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """The max a log-sum-exp subtracts for stability, out of autograd's graph: it cancels out of the result, so
    its derivative is exactly 0, but differentiated it adds g (1 - sum p) to one of the row's maxima, rounding
    noise of order n u |g| that the float64 reference would carry into every float64 gradient check (measured:
    56 tied maxima, 2.4e-16 at a gradient of 0.036 that torch computes exactly)."""
    return x.detach().max(dim=-1, keepdim=keepdim).values


def log_softmax(x: Any) -> torch.Tensor:
    x = _t(x)
    shifted = x - _row_max(x, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


def _normalise(x: torch.Tensor, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> torch.Tensor:
    return _normalise(_t(x), (-1,), eps) * _t(weight) + _t(bias)


def rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> torch.Tensor:
    x = _t(x)
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * _t(weight)


def group_norm(x: Any, weight: Any, bias: Any, num_groups: int, eps: float = 1e-5) -> torch.Tensor:
    x = _t(x)
    n, c, length = x.shape
    groups = _normalise(x.reshape(n, num_groups, -1), (-1,), eps).reshape(n, c, length)
    return groups * _t(weight)[None, :, None] + _t(bias)[None, :, None]


# ---- losses ------------------------------------------------------------------------------------------------


def _picked(
    values: torch.Tensor, target: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    keep = target != ignore_index
    return values.gather(1, torch.where(keep, target, 0)[:, None])[:, 0], keep


def cross_entropy(logits: Any, target: Any, ignore_index: int = -100) -> torch.Tensor:
    logits, target = _t(logits), _t(target).long()
    m = _row_max(logits)
    lse = m + torch.log(torch.exp(logits - m[:, None]).sum(dim=-1))
    picked, keep = _picked(logits, target, ignore_index)
    return torch.where(keep, lse - picked, torch.zeros_like(picked))


def nll_loss(logp: Any, target: Any, ignore_index: int = -100) -> torch.Tensor:
    logp, target = _t(logp), _t(target).long()
    picked, keep = _picked(logp, target, ignore_index)
    return torch.where(keep, -picked, torch.zeros_like(picked))


def kl_div(logp: Any, target: Any) -> torch.Tensor:
    """target * (log target - logp), 0 where target is 0 (torch's xlogy convention)."""
    logp, target = _t(logp), _t(target)
    safe = torch.where(target > 0, target, torch.ones_like(target))
    return torch.where(target > 0, target * (torch.log(safe) - logp), -target * logp * 0)


# ---- attention ---------------------------------------------------------------------------------------------


def sdpa(q: Any, k: Any, v: Any, is_causal: bool = False) -> torch.Tensor:
    q, k, v = _t(q), _t(k), _t(v)
    s, t, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
    if is_causal:  # torch's convention: query i sees keys 0..i (top-left aligned)
        keep = torch.ones(s, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    p = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    return (p / p.sum(dim=-1, keepdim=True)) @ v


def sdpa_gqa(q: Any, k: Any, v: Any, is_causal: bool = False) -> torch.Tensor:
    q, k, v = _t(q), _t(k), _t(v)
    group = q.shape[1] // k.shape[1]
    return sdpa(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), is_causal)


def sdpa_gqa_bthd(q: Any, k: Any, v: Any, is_causal: bool = False) -> torch.Tensor:
    return sdpa_gqa(q, _t(k).transpose(1, 2), _t(v).transpose(1, 2), is_causal)


# ---- matmul family -----------------------------------------------------------------------------------------


def linear(x: Any, w: Any, b: Any) -> torch.Tensor:
    return _t(x) @ _t(w).T + _t(b)


def matmul(a: Any, b: Any) -> torch.Tensor:
    return _t(a) @ _t(b)


def baddbmm(c: Any, a: Any, b: Any, beta: float = 1.0, alpha: float = 1.0) -> torch.Tensor:
    return beta * _t(c) + alpha * (_t(a) @ _t(b))


def conv1d(x: Any, w: Any, stride: int = 1, padding: int = 0) -> torch.Tensor:
    """As a sum over taps of strided slices of the zero-padded input (im2col written out)."""
    x, w = _t(x), _t(w)
    b, _, length = x.shape
    co, _, kw = w.shape
    padded = torch.nn.functional.pad(x, (padding, padding))
    out_len = (length + 2 * padding - kw) // stride + 1
    out = torch.zeros(b, co, out_len, dtype=x.dtype)
    for tap in range(kw):
        window = padded[:, :, tap : tap + stride * (out_len - 1) + 1 : stride]
        out = out + torch.einsum("bcl,oc->bol", window, w[:, :, tap])
    return out


# ---- pooling, gathers --------------------------------------------------------------------------------------


def _windows(x: torch.Tensor, kernel_size: int, stride: int) -> torch.Tensor:
    return x.unfold(-1, kernel_size, stride)


def max_pool1d(x: Any, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return _windows(_t(x), kernel_size, stride).max(dim=-1).values


def avg_pool1d(x: Any, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return _windows(_t(x), kernel_size, stride).sum(dim=-1) / kernel_size


def embedding(ids: Any, weight: Any) -> torch.Tensor:
    return _t(weight)[_t(ids).long()]


def embedding_bag(ids: Any, weight: Any, offsets: Any, mode: str = "sum") -> torch.Tensor:
    ids, weight, offsets = _t(ids).long(), _t(weight), _t(offsets).long()
    ends = torch.cat([offsets[1:], torch.tensor([ids.shape[0]])])
    rows = []
    for start, end in zip(offsets.tolist(), ends.tolist(), strict=True):
        bag = weight[ids[start:end]]
        total = bag.sum(dim=0)
        rows.append(total / max(end - start, 1) if mode == "mean" else total)
    return torch.stack(rows) if rows else weight[:0]


# ---- reductions, scans -------------------------------------------------------------------------------------


def cumsum(x: Any) -> torch.Tensor:
    return torch.cumsum(_t(x), dim=-1)


def logsumexp(x: Any) -> torch.Tensor:
    x = _t(x)
    m = _row_max(x)
    return m + torch.log(torch.exp(x - m[..., None]).sum(dim=-1))


def _root(s: torch.Tensor, power: float) -> torch.Tensor:
    """s ** power with torch's subgradient 0 where s is 0 (torch's norm and std backward define it so)."""
    positive = s > 0
    return torch.where(positive, torch.where(positive, s, torch.ones_like(s)) ** power, torch.zeros_like(s))


class _ScaledNorm(torch.autograd.Function):
    """The exact p-norm of each row in float64: max|x| (sum (|x| / max|x|)^p)^(1/p). Its terms |x|^p cannot
    underflow (a row [-2e-323] has norm 2e-323 and gradient -1, where (x^2)^(1/2) gives 0 and subgradient 0),
    and its backward, sign(x) (|x| / y)^(p-1) from the scaled values, never multiplies by the tiny scale (autograd
    would: the upstream gradient times a subnormal loses its bits)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:
        scale = x.abs().amax(dim=-1, keepdim=True)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        u = x / scale
        norm = (u.abs() ** p).sum(dim=-1, keepdim=True) ** (1.0 / p)
        ctx.save_for_backward(u, norm)
        ctx.p = p
        return (norm * scale)[..., 0]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        u, norm = ctx.saved_tensors
        ratio = u.abs() / torch.where(norm > 0, norm, torch.ones_like(norm))
        return g[..., None] * torch.sign(u) * ratio ** (ctx.p - 1.0), None  # 0 on a zero row (torch's too)


def vector_norm(x: Any, ord: float = 2.0) -> torch.Tensor:
    """In float64 exactly (`_ScaledNorm`); in lower precisions (the working-precision runs) the formula as
    written, as a kernel computes it: there its squares underflow as a correct float32 kernel's do."""
    x = _t(x)
    if x.dtype == torch.float64 and x.shape[-1]:
        return _ScaledNorm.apply(x, float(ord))
    return _root((x.abs() ** ord).sum(dim=-1), 1.0 / ord)


def var(x: Any, correction: int = 1) -> torch.Tensor:
    x = _t(x)
    mean = x.mean(dim=-1, keepdim=True)
    return ((x - mean) ** 2).sum(dim=-1) / (x.shape[-1] - correction)


def std(x: Any, correction: int = 1) -> torch.Tensor:
    return _root(var(x, correction), 0.5)


# ---- elementwise -------------------------------------------------------------------------------------------


def gelu(x: Any, approximate: str = "none") -> torch.Tensor:
    x = _t(x)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + torch.special.erf(x / math.sqrt(2.0)))


def silu(x: Any) -> torch.Tensor:
    x = _t(x)
    return x * torch.sigmoid(x)


def softplus(x: Any, beta: float = 1.0) -> torch.Tensor:
    """log(1 + exp(beta x)) / beta, linear above beta x > 20 as torch's threshold defines it."""
    x = _t(x)
    bx = beta * x
    return torch.where(bx > 20, x, torch.log1p(torch.exp(torch.clamp(bx, max=20.0))) / beta)


def rotary(x: Any, position_offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    x = _t(x)
    t, _, d = x.shape
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=x.dtype) / d)
    positions = torch.arange(t, dtype=x.dtype) + position_offset
    angles = torch.outer(positions, inv_freq)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)[:, None, :]
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
